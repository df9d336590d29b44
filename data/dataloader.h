/*
 * dataloader.h: per-rank batches of a tokenized Dataset, as HF's Trainer + DataCollatorForSeq2Seq
 * build them.
 *
 * Order of one epoch (train): a permutation of [0, N) from (seed, epoch) (RNG below; it is not
 * torch's), optionally length-grouped (HF LengthGroupedSampler: megabatches of
 * min(N/(4*B*W), 50)*B*W examples sorted by source length, longest first, and the longest
 * example moved to the very first batch). One rank: batches are consecutive runs of B of the
 * order, the last one short unless drop_last. W > 1 ranks (training): HF Trainer's sharding
 * (accelerate's BatchSamplerShard, split_batches false, even_batches true): batch i is positions
 * [iB, (i+1)B) of the order, rank r takes batches r, r+W, r+2W, ..., and the last round of W
 * batches is completed by wrapping around to the start of the order (every batch full, every
 * rank the same number); drop_last drops the short batch and an incomplete round. So micro-batch
 * m of rank r is micro-batch mW + r of one rank. (Before 2026-11-27 the ranks took positions r,
 * r+W, ... as torch's DistributedSampler: each rank's micro-batch then mixed rows of one rank's
 * micro-batches, and with rows of different lengths N ranks did not train as one rank with
 * accumulation N: docs/training_results.md section 6, finding 14.) Eval/test loaders of W ranks
 * keep DistributedSampler's rule without shuffling, padding rows marked example_index = -1 (they
 * repeat example 0 so every rank runs the same number of batches, which ZeRO-3 collectives
 * need); sharded evaluation opens its loaders with one rank (src/eval/shard.h).
 * RNG: splitmix64 with state seed ^ (0x9E3779B97F4A7C15 * (epoch + 1)); Fisher-Yates from the
 * last position down, j drawn in [0, i] by Lemire's multiply-shift with rejection.
 * Collation: input_ids padded with 0 and attention_mask 1/0 to the longest source in the batch
 * (or max_source_length with pad_to_max_length), labels padded with -100 to the longest target
 * (or max_target_length), both rounded up to pad_to_multiple_of; decoder_input_ids =
 * shift_right(labels) with decoder_start 0 and -100 -> 0.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int B;                       // rows in this batch (<= batch size)
    int Ts, Tt;                  // padded source / target lengths
    int32_t* input_ids;          // (B, Ts) int32, pad 0
    int32_t* attention_mask;     // (B, Ts) int32, 1 token / 0 pad
    int32_t* labels;             // (B, Tt) int32, -100 pad
    int32_t* decoder_input_ids;  // (B, Tt) int32, shift-right of labels, start 0
    int64_t* example_index;      // (B,) dataset index, -1 for an eval padding row
    int64_t n_src_tokens;        // non-pad source tokens of real rows
    int64_t n_tgt_tokens;        // label tokens (!= -100) of real rows
    size_t cap_in, cap_lab;      // allocated elements (internal)
    int cap_rows;
} Batch;

// The iterator position: plain old data, safe to write into a checkpoint as bytes.
typedef struct {
    uint32_t magic;              // DATALOADER_STATE_MAGIC
    uint32_t version;
    uint64_t seed;
    int64_t epoch;
    int64_t batch_in_epoch;      // batches already returned in this epoch by this rank
    int64_t n_examples;
    int32_t rank, world_size;
    int32_t batch_size;
    int32_t flags;               // bit 0 shuffle, 1 drop_last, 2 group_by_length, 3 train
} DataLoaderState;
#define DATALOADER_STATE_MAGIC 0x4C443554u  // "T5DL"

typedef struct DataLoader DataLoader;

// train: shuffled per epoch (if opt->shuffle), train_batch_size; else sequential, eval_batch_size.
DataLoader* dataloader_open(const Dataset* ds, const DataOptions* opt, bool train, char* err, size_t errlen);
void dataloader_close(DataLoader* dl);

// Batches this rank gets per epoch (the same on every rank).
int64_t dataloader_num_batches(const DataLoader* dl);
// Fills b with the next batch and returns true; returns false once at the end of an epoch
// (the following call starts the next epoch).
bool dataloader_next_batch(DataLoader* dl, Batch* b);
// Restarts at the first batch of the given epoch.
void dataloader_set_epoch(DataLoader* dl, int64_t epoch);
// The next dataloader_next_batch of this epoch returns batch `batch` (0 <= batch < dataloader_num_batches): sharded
// evaluation (src/eval/shard.h) takes one GPU's batches out of order. Returns 0, or -1 for a batch out of range.
int dataloader_seek(DataLoader* dl, int64_t batch);
// Eval loaders: the epoch's order (before sharding over ranks) becomes order[0 .. N) instead of 0 .. N - 1, so batch i
// holds the examples order[i * B ..] (each batch padded to its own longest source as ever): generation's length-sorted
// batches (src/eval/shard.h). order is copied; NULL restores the input order. Restarts the epoch at its first batch.
// Returns 0, or -1 with err for a train loader or an order that is not a permutation of [0, N).
int dataloader_set_order(DataLoader* dl, const int64_t* order, char* err, size_t errlen);
int64_t dataloader_epoch(const DataLoader* dl);
// Example indices of this rank for the current epoch, in order (length *n; internal array).
const int64_t* dataloader_rank_indices(const DataLoader* dl, int64_t* n);

void dataloader_state_save(const DataLoader* dl, DataLoaderState* st);
// A position saved with another number of ranks or batch size, as this rank's (resume on another number of GPUs):
// micro-batch m of W ranks x B is positions [mWB, (m+1)WB) of the epoch's order, so the position carries over when it
// is a whole number of this run's global batches (and, with group_by_length, the global batch is unchanged: its
// megabatches are sized by it). Returns 0, or -1 with a sentence.
int dataloader_state_rescale(DataLoaderState* st, int rank, int world, int batch, char* err, size_t errlen);
// Returns 0, or -1 with err set when the state does not belong to this data/rank/world/batch size.
int dataloader_state_restore(DataLoader* dl, const DataLoaderState* st, char* err, size_t errlen);

void batch_free(Batch* b);

#ifdef __cplusplus
}
#endif
