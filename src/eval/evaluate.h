/*
 * evaluate.h: evaluation with generation, as run_translation.py + Seq2SeqTrainer do it with
 * --predict_with_generate (REFERENCE.md 5.2): generate over the eval (or predict) split in the trainer's eval
 * batches, decode, strip, corpus BLEU (src/eval/bleu.h, sacreBLEU defaults) and gen_len.
 *
 *   bleu     = sacrebleu.corpus_bleu(preds, [refs]).score, preds = batch_decode(generated,
 *              skip_special_tokens=True).strip(), refs = batch_decode(labels, skip_special_tokens=True).strip()
 *              (labels = the tokenized targets, so truncation to val_max_target_length applies as in HF)
 *   gen_len  = mean over examples of np.count_nonzero(generated_row != pad) (the decoder start token is pad and
 *              not counted; beam search's `</s>` fill after a hypothesis is counted, as HF counts it)
 *   both rounded to 4 decimals (HF: round(v, 4)); runtime / samples_per_second / steps_per_second as HF's
 *   speed_metrics (steps = batches).
 *   generated_predictions.txt (do_predict): batch_decode(skip_special_tokens=True,
 *   clean_up_tokenization_spaces=True), strip(), joined with "\n", no trailing newline.
 *
 * Library code: errors are returned (-1 + message), never fatal.
 */
#pragma once
#include <cuda_runtime.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../data/dataloader.h"
#include "../../data/dataset.h"
#include "../../data/tokenizer.h"
#include "../../model/generate.h"
#include "../../model/params.h"
#include "bleu.h"
#include "../../model/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

struct LaunchComm;

typedef struct {
    GenerateOptions gen;      // max_length = generation_max_length or val_max_target_length; num_beams; ...
    const char* prefix;       // metric prefix: "eval" or "predict"
    bool keep_predictions;    // keep the file lines (generated_predictions.txt) in the result
    bool progress;            // one line per 10% on stderr
    bool no_cuda_graphs;      // decode steps run eagerly: the engine gathers units on demand inside them (ZeRO-3
                              // when zero_hold_begin could not keep every unit), which a graph capture cannot hold
    struct LaunchComm* comm;  // several ranks: the run's communicator (src/launch/comm.h); NULL: one rank
    bool shard;               // with several ranks: each generates its batches (src/eval/shard.h) and the results are
                              // all-gathered. Only where no fetch issues a collective (a rank's decoder steps depend on
                              // its data): stages 0-2 once every unit was fetched since the last step (the loss pass
                              // does it), stage 3 with every unit held. false: every rank generates the whole split
    bool lockstep;            // with several ranks: sharded as `shard`, where every fetch may issue a collective (ZeRO-3
                              // gathering on demand): every rank generates at every step (a padding step generates the
                              // split's last batch and drops it) and the ranks agree at each finished-check to stop
                              // together (t5_generator_set_lockstep), so that they issue the same fetches
    bool sort_by_length;      // generate the batches of the length-sorted order (src/eval/shard.h: longest sources
                              // first, the same on every rank), each padded to its own longest source; the rows are
                              // put back in input order and gen_len counted over the input-order batches (below), so
                              // the metrics and predictions are the unsorted run's as long as each row's tokens are.
                              // false: the input order's batches (HF's predict). The trainer's default: true
} EvalGenConfig;

// How the ranks shared a generation (EvalGenResult.mode)
typedef enum {
    EVAL_GEN_ONE_RANK = 0,    // one rank
    EVAL_GEN_WHOLE_SPLIT,     // several ranks, each generating every batch (EvalGenConfig.shard and .lockstep false)
    EVAL_GEN_SHARDED,         // several ranks, each its batches, steps independent (EvalGenConfig.shard)
    EVAL_GEN_LOCKSTEP,        // several ranks, each its batches, steps agreed (EvalGenConfig.lockstep)
} EvalGenMode;

// One rank's share of a generation (EvalGenResult.ranks, gathered from every rank)
typedef struct {
    int64_t batches;          // batches of the split this rank generated and returned
    int64_t padding;          // padding steps it ran a batch for (lockstep: the split's last batch, dropped)
    int64_t steps;            // decoder steps (GenerateStats.steps)
    int64_t agreements;       // finished-checks agreed with the other ranks (GenerateStats.agreements)
    int64_t gathers;          // the engine's unit gathers during the generation (ZeroStats.gathers)
} EvalGenRankCounts;

typedef struct {
    char prefix[16];
    int64_t num_samples;      // examples evaluated (eval padding rows excluded)
    int64_t num_steps;        // batches
    double bleu;              // rounded to 4 decimals
    double gen_len;           // rounded to 4 decimals
    double runtime;           // seconds, generation + decoding + BLEU
    BleuResult bleu_detail;   // counts, precisions, bp, ... (unrounded score)
    GenerateStats gen;        // generator counters
    char** predictions;       // (num_samples) in dataset order, when keep_predictions (every rank)
    EvalGenMode mode;
    int world;                // ranks (1: one rank)
    EvalGenRankCounts* ranks; // (world) every rank's counts, on every rank
    bool sorted;              // the batches were those of the length-sorted order (EvalGenConfig.sort_by_length)
    int64_t src_positions;    // padded source positions of the batches generated (eval_shard_padded_positions)
    int64_t src_positions_input; // the same for the input order's batches (equal when not sorted)
    double gen_s, gather_s, score_s; // this rank's wall seconds of runtime: generating, all-gathering rows, scoring
    int score_threads;        // threads that scored the rows (the most any piece used)
} EvalGenResult;

// Generates over `ds` with one GPU's eval batching (dataloader_open(ds, dopt, false) on one rank: sequential, or with
// cfg->sort_by_length in the length-sorted order (dataloader_set_order), dopt->eval_batch_size, the same padding as
// HF's collator; the results in input order either way) using the parameters in Z (already loaded), and
// computes the metrics. With cfg->shard or cfg->lockstep on several ranks each rank generates its share of those
// batches (lockstep: the ranks stepping together) and every rank scores the gathered rows in input order: the same result on every rank, one GPU's in fp32 (num_steps: the
// steps of one rank, as HF counts them on N GPUs). tok decodes. stream: the compute stream. Returns 0, or -1 with
// err (an empty split, bad options, not enough GPU memory with the KV-cache numbers, ...).
int evaluate_generate(ZeroEngine* Z, const ParamTable* t, const Tokenizer* tok, const Dataset* ds,
                      const DataOptions* dopt, const EvalGenConfig* cfg, cudaStream_t stream, EvalGenResult* out,
                      char* err, size_t errlen);
void evaluate_result_free(EvalGenResult* r);

// Adds <prefix>_bleu, <prefix>_gen_len, <prefix>_runtime, <prefix>_samples_per_second,
// <prefix>_steps_per_second and <prefix>_samples to m (what run_translation's metrics hold besides the loss).
void evaluate_add_metrics(json_t* m, const EvalGenResult* r);
// Writes output_dir/generated_predictions.txt (atomically). Needs keep_predictions. 0 or -1 with err.
int evaluate_write_predictions(const char* output_dir, const EvalGenResult* r, char* err, size_t errlen);

// ---- CPU pieces (unit-tested in test/test_evaluate.c)

// One line saying how the batches were formed when sorted, e.g. "predict generation: batches sorted by source
// length: 5120 padded source positions (input order: 9216)" ("" when not sorted).
void evaluate_sort_line(const EvalGenResult* r, char* buf, size_t cap);
// "<prefix> generation time (this rank): generating G s (encoder E ms, decoder D ms on the GPU, C CUDA graphs
// captured), gathering X s, scoring S s on T threads": where runtime went.
void evaluate_time_line(const EvalGenResult* r, char* buf, size_t cap);
// One line saying how the ranks shared r's generation, e.g. "predict generation on 2 ranks, sharded in lockstep (steps
// agreed): batches per rank 5 5 | padding 0 0 | decoder steps 96 96 | agreements 24 24 | unit gathers 960 960"
// (written to buf, truncated to cap; "" for one rank).
void evaluate_shard_line(const EvalGenResult* r, char* buf, size_t cap);
// np.count_nonzero(row != pad) over row[0..width)
int64_t evaluate_count_nonpad(const int32_t* row, int width, int pad);
// A generated row's own length (row[0] the decoder start): 1 + its tokens up to and including its first eos, or width
// when it has none (it ran to max_length: greedy rows run until every row of the batch ended, beam hypotheses end with
// eos or at max_length). The positions from there to width hold the batch's fill (t5_generate: greedy pad, beam HF's
// `pad or eos`), which depends on the batch's width, not on the row.
int evaluate_row_length(const int32_t* row, int width, int eos);
// HF's sum of np.count_nonzero(row != pad) over the rows as one GPU returns them in input-order batches of `batch`
// (examples [i * batch, (i + 1) * batch) padded together to W_i = the longest own_len among them), from each
// example's own_len (evaluate_row_length) and own_nonpad (count_nonpad over its own length): own_nonpad[e], plus
// W_i - own_len[e] fill positions when the fill is not pad (fill_counts: beam search with pad 0, whose fill is eos).
// Equals the count over the rows of any other batching with the same rows: that is how sorted batches keep gen_len.
int64_t evaluate_hf_nonpad(const int32_t* own_len, const int32_t* own_nonpad, int64_t n, int64_t batch,
                           bool fill_counts);
// Python round(x, 4) for a finite double (correctly rounded, ties to even on the exact binary value)
double evaluate_round4(double x);
// decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up).strip(), malloc'd
char* evaluate_postprocess(const Tokenizer* tok, const int32_t* ids, int n, bool clean_up);
// "\n".join(lines) (no trailing newline), malloc'd; *len gets its length
char* evaluate_join_lines(char* const* lines, int64_t n, size_t* len);

#ifdef __cplusplus
}
#endif
