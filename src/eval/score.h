/*
 * score.h: scoring generated rows (evaluate_generate.c; issue 29): for each row, gen_len's per-example counts (its
 * own length and non-pad tokens), BLEU's statistics against the example's reference, and the prediction text, on up
 * to EVAL_SCORE_MAX_THREADS threads with the one thread's result: the rows are cut into T contiguous runs, each with
 * its own BLEU statistics, merged in run order (every count is an integer sum, bleu_stats_merge). CPU-tested
 * (test/test_eval_score.c: any thread count and any OpenMP team the same; the first failing row's message).
 *
 * A row: (max_length + 1) int32 = [width, ids[0 .. max_length)], width = the batch's output width (t5_generate's
 * *out_len), ids past the row's own end (its first </s> after position 0, inclusive) hold the fill value.
 */
#pragma once

#include <stdint.h>

#include "../../data/dataset.h"
#include "../../data/tokenizer.h"
#include "bleu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EVAL_SCORE_ROWS_PER_THREAD 64  // rows per scoring thread, at least (fewer rows: one thread)
#define EVAL_SCORE_MAX_THREADS 16

typedef struct {
    const Tokenizer* tok;
    const Dataset* ds;    // the references: each example's target ids
    int max_length;       // a row holds max_length ids after its width
    int eos, pad, fill;   // fill: what t5_generate writes past a row's end (greedy pad; beams HF's fill value)
    int32_t* own_len;     // (examples) written at each scored example: evaluate_row_length of its row (>= 1)
    int32_t* own_nonpad;  // (examples) its non-pad tokens within own_len
    char** preds;         // (examples) the prediction text (run_translation's clean-up), or NULL
} EvalScorer;

typedef struct {
    const int32_t* row;   // the row, as above
    int64_t example;      // its example's index in ds (input order)
    int64_t batch;        // its batch, for messages
} EvalScoreItem;

// Scores items[0 .. n) into st (every item one segment, in item order), on up to EVAL_SCORE_MAX_THREADS threads
// (fewer with fewer rows, or with OpenMP's limit); *threads is raised to the threads asked for. 0, or -1 with the
// first failing item's message in err (a row outside the gathered results, a non-fill id past a row's end, text
// BLEU refuses): what scoring the items one by one would report.
int eval_score_rows(const EvalScorer* sc, BleuStats* st, const EvalScoreItem* items, int64_t n, int* threads,
                    char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
