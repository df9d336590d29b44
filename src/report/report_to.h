/*
 * report_to.h: HF's --report_to and --logging_dir for the integrations t5train has, and the object the trainer
 * hands every logged dict to.
 *
 *   --report_to none | csv | tensorboard | all, or a comma-separated list ("csv,tensorboard"). As HF
 *   TrainingArguments: "none" reports nothing, "all" every integration this build has (csv always, tensorboard
 *   when built with protobuf-c), a named one that is not there is an error; any other name (wandb, mlflow, ...)
 *   is an error naming the ones t5train has.
 *   --logging_dir: TensorBoard's folder; HF 4.x's default is output_dir/runs/<%b%d_%H-%M-%S>_<hostname>
 *   (TrainingArguments' default_logdir(), local time).
 *
 * What each writes (rank 0 only), for every dict HF's Trainer.log hands its callbacks:
 *   tensorboard  <logging_dir>/events.out.tfevents.*: at start the text "args" (output_dir/t5train_config.json),
 *                then every int/float value as a scalar at the dict's step, tagged as HF's TensorBoardCallback
 *                rewrites the keys (rewrite_logs): eval_x -> eval/x, test_x -> test/x, anything else -> train/x.
 *   csv          output_dir/log_history.csv (csv_log.h): one row per dict, HF's keys as columns.
 * A write error is one warning per writer, then that writer stops; training goes on.
 */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "csv_log.h"
#include "tb_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { REPORT_CSV = 1u << 0, REPORT_TENSORBOARD = 1u << 1 };

// Parses the flag's value into a mask of REPORT_*. "" and "none" give 0. 0, or -1 with one sentence in err.
int report_to_parse(const char* value, unsigned* mask, char* err, size_t errcap);
// "csv,tensorboard" for a mask ("none" for 0).
void report_to_format(char* buf, size_t cap, unsigned mask);
// HF 4.x's default logging_dir: output_dir/runs/<now as %b%d_%H-%M-%S in local time>_<hostname>.
void report_default_logging_dir(char* buf, size_t cap, const char* output_dir, time_t now);
// HF's rewrite_logs for one key: "eval_loss" -> "eval/loss", "test_x" -> "test/x", "loss" -> "train/loss".
void report_tb_tag(char* buf, size_t cap, const char* key);

typedef struct {
    unsigned mask;       // what is still being written (a writer that failed is dropped)
    TbWriter* tb;
    CsvLog csv;
    bool csv_open;
} Reporter;

// Opens the writers of mask: the event file under logging_dir (plus the "args" text from
// output_dir/t5train_config.json when present) and output_dir/log_history.csv seeded with history (the
// log_history so far, on resume; may be NULL). 0, or -1 with a message in err (nothing left open).
int reporter_open(Reporter* r, unsigned mask, const char* logging_dir, const char* output_dir,
                  const json_t* history, char* err, size_t errcap);
// One logged dict (carrying "step", as log_history's entries do) to every open writer.
void reporter_log(Reporter* r, const json_t* entry);
void reporter_close(Reporter* r);

#ifdef __cplusplus
}
#endif
