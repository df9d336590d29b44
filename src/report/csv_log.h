/*
 * csv_log.h: --report_to csv: the trainer's log history as a CSV file, one row per logged dict (what
 * TrainerState.log_history holds: training log steps, evaluations, the final train summary), columns named by
 * HF's keys ("step" first, then the keys in the order they first appear: loss, grad_norm, learning_rate, epoch,
 * eval_loss, ...). A value a row does not have is left empty; numbers are written as Python's repr (a loss
 * read back is the same double), strings quoted as RFC 4180 when needed, null empty.
 *
 * Rows are appended (file opened and closed per row, so a crash loses nothing); when a row brings a key not
 * seen yet, the whole file is rewritten atomically with the wider header. On resume the writer starts from the
 * checkpoint's log_history, so the file is the whole run's history, as trainer_state.json is.
 */
#pragma once
#include <jansson.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char* path;
    json_t* rows;  // array of the logged dicts (copies)
    json_t* cols;  // array of column names
} CsvLog;

// Starts path from the rows of history (NULL or an array of objects; copied) and writes it (header only when
// empty). 0, or -1 with a message in err.
int csv_log_open(CsvLog* c, const char* path, const json_t* history, char* err, size_t errcap);
// Appends one logged dict (copied). 0, or -1 with a message in err.
int csv_log_append(CsvLog* c, const json_t* row, char* err, size_t errcap);
void csv_log_close(CsvLog* c);

// One CSV field for v (Python repr for reals, "" for null/absent, quoted string when needed) into buf.
void csv_log_format_value(char* buf, size_t cap, const json_t* v);

#ifdef __cplusplus
}
#endif
