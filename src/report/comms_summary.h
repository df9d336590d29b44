/*
 * comms_summary.h: DeepSpeed's comms_logger text (deepspeed/utils/comms_logging.py, 0.19.8) for the collectives that
 * src/launch/comms_log.h timed: the per-op verbose line, the log_summary table, and its return_dict "summary" as
 * JSON. Pure host code (the CPU tests compare it byte for byte with DeepSpeed's f-strings).
 *
 * Bandwidths (DeepSpeed's calc_bw_log, in Gbps = bytes x 8 / ms / 1e6; n = world size, S = msg size, t = latency):
 *   all_reduce              algbw (DeepSpeed's "tput") 2S/t     busbw S/t x 2(n-1)/n
 *   all_gather_into_tensor  algbw nS/t (S: one rank's piece)    busbw algbw x (n-1)/n
 *   reduce_scatter_tensor   algbw S/t (S: the whole input)      busbw algbw x (n-1)/n
 *   broadcast, barrier      algbw S/t                           busbw = algbw
 * busbw is nccl-tests' bus bandwidth (doc/PERFORMANCE.md). One deviation: DeepSpeed multiplies reduce_scatter_tensor's
 * S, already the whole input, by n again (n times nccl-tests' figures); t5train does not.
 * Averages are DeepSpeed's trim_mean(values, 0.1): sorted, round(0.1 n) values dropped at each end.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "../launch/comms_log.h"

#ifdef __cplusplus
extern "C" {
#endif

// Python convert_size: "0B", "4.0 B", "1.5 KB", "678.86 MB" (round(S / 1024^i, 2), Python's repr). Returns the length.
int comms_size_text(char* buf, size_t cap, uint64_t bytes);
// nccl-tests' bus factor busbw / algbw of op on n ranks: 2(n-1)/n, (n-1)/n, or 1
double comms_bus_factor(CommsOp op, int n);
// algbw (DeepSpeed's tput) and busbw in Gbps of one collective of S bytes in ms milliseconds on n ranks (0 when
// ms <= 0)
void comms_bandwidth(CommsOp op, uint64_t bytes, double ms, int n, double* algbw, double* busbw);
// DeepSpeed's verbose line as log_dist(..., [0]) prints it: "[Rank 0] comm op: all_reduce | time (ms): 0.05 |
// msg size: 4.0 B | algbw (Gbps): 1.28 | busbw (Gbps): 0.64". Returns the length.
int comms_format_op(char* buf, size_t cap, const char* record, double ms, uint64_t bytes, double algbw, double busbw);

typedef struct {
    uint64_t bytes;
    int64_t count;
    double total_ms;
    float* ms;  // (count) each latency, for the trimmed mean
    int64_t cap;
} CommsRow;

typedef struct {
    char name[160];  // "all_reduce", or with debug "all_reduce | [Caller Func: the gradient norm all-reduce]"
    CommsOp op;
    CommsRow* rows;  // in first-seen order; printed by size
    int nrows, cap;
} CommsRecordRows;

typedef struct {
    int world;
    bool debug;  // deepspeed.comms_logger.debug: one record per (op, caller)
    CommsRecordRows* recs;  // in first-seen order, as DeepSpeed's dict
    int nrecs, cap;
} CommsSummary;

// The averages of one row (DeepSpeed's log_all columns)
typedef struct {
    int64_t count;
    double total_ms, avg_ms, algbw, busbw;  // avg_ms, algbw, busbw: trimmed means
} CommsRowStats;

void comms_summary_init(CommsSummary* s, int world, bool debug);
void comms_summary_free(CommsSummary* s);
// Adds one collective; returns its record name (for the verbose line), valid until the next add.
const char* comms_summary_add(CommsSummary* s, const CommsRecord* r);
void comms_summary_row_stats(const CommsSummary* s, const CommsRecordRows* rec, const CommsRow* row,
                             CommsRowStats* out);
// DeepSpeed's log_summary table (log_all's print_log): the header, then per record its name alone on a line and one
// line per message size, ascending; every column 20 characters wide, left-aligned (trailing spaces kept).
void comms_summary_print(const CommsSummary* s, FILE* f);
// log_all's return_dict "summary": {record: {"<bytes>": {"count", "total_latency_ms", "avg_latency_ms",
// "tput_avg_gbps", "busbw_avg_gbps", "msg_size_bytes", "msg_size_str"}}} (new reference)
json_t* comms_summary_json(const CommsSummary* s);
// Collectives recorded in all
int64_t comms_summary_total(const CommsSummary* s);

#ifdef __cplusplus
}
#endif
