/*
 * shard.h: how W ranks share one evaluation split (issue 29): the arithmetic of the sharded loss pass
 * (src/train/trainer.c) and of sharded generation (src/eval/evaluate.c), pure C, CPU-tested (test/test_eval_shard.c).
 *
 * The split's n examples form the batches one GPU forms: batch i = examples [i * B, min((i + 1) * B, n)), the last
 * one partial. The ranks take them round-robin, as accelerate's BatchSamplerShard does: at step k rank r evaluates
 * batch k * W + r. Every rank runs the same number of steps, ceil(n_batches / W), so that the collectives (the
 * gathers of the results, ZeRO-3's parameter gathers) stay in lockstep; a rank past the last batch runs a padding
 * step whose results are dropped. Unlike accelerate, the last batch is not completed with examples from the start and
 * padding steps carry no examples into the metrics: every real batch is exactly one GPU's, so the eval loss (the
 * per-batch means weighted by examples, summed in batch order) and fp32 greedy generations equal one GPU's.
 *
 * The loss pass (src/train/trainer.c) deals the same batches by cost instead (eval_shard_deal_by_cost: the ranks'
 * padded tokens close, each batch still one GPU's, the loss summed in input order by eval_shard_loss_at); what
 * follows is generation's round robin.
 *
 * Gathering: each rank keeps its results of the steps [k0, k0 + nk) in step order, and an all-gather lays the W
 * pieces out rank after rank (NCCL's order): batch i's result sits at slot eval_shard_slot(i, k0, nk) =
 * (i % W) * nk + (i / W - k0). Those steps hold batches [k0 * W, (k0 + nk) * W) (the ones below n_batches): a
 * contiguous run of the input order, so a split gathered in pieces of steps is scored piece by piece in input order.
 * The padding slots are never read.
 *
 * Generation takes its batches from the length-sorted order by default (EvalGenConfig.sort_by_length, the
 * eval_sort_by_length key): the split's examples ordered by eval_shard_order_by_length (longest source first, ties in
 * input order), computed from the split alone, so the same permutation on every rank and every world size; batch i is
 * then positions [i * B, min((i + 1) * B, n)) of that order, and everything above holds with "example" read as
 * "position": the batches are still one GPU's batches (of the sorted order) dealt to the ranks. Each gathered row is
 * put back at its example's input index (order[position]) before anything is written, so the predictions come out in
 * input order. On several ranks the sorted batches are dealt in a snake (eval_shard_deal_snake: every other group of W
 * batches reversed in the order itself, so nothing above changes). The data loader pads each batch to its own longest source (data/dataloader.h), so sorted batches carry
 * less padding: eval_shard_padded_positions counts it.
 */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t n;          // examples in the split
    int64_t batch;      // per_device_eval_batch_size
    int world;          // ranks
    int64_t n_batches;  // ceil(n / batch)
    int64_t steps;      // steps every rank runs: ceil(n_batches / world)
} EvalShard;

// The plan for n examples (n >= 0), batch >= 1, world >= 1.
void eval_shard_plan(EvalShard* s, int64_t n, int64_t batch, int world);
// The batch rank evaluates at step k (0 <= k < steps), or -1 for a padding step.
int64_t eval_shard_batch(const EvalShard* s, int rank, int64_t k);
// The examples of batch i: [*first, *first + *count).
void eval_shard_examples(const EvalShard* s, int64_t i, int64_t* first, int64_t* count);
// How many real batches rank evaluates over its steps (the others of its s->steps are padding steps).
int64_t eval_shard_rank_batches(const EvalShard* s, int rank);
// How many of step k's W gathered slots hold real batches (ranks 0 .. that - 1).
int eval_shard_real_at(const EvalShard* s, int64_t k);
// Where batch i (k0 * W <= i < (k0 + nk) * W) sits in the all-gather of steps [k0, k0 + nk): (i % W) * nk + i / W - k0.
int64_t eval_shard_slot(const EvalShard* s, int64_t i, int64_t k0, int64_t nk);
// The loss pass's dealing by cost (src/train/trainer.c): one GPU's batches (input order, their eval loss unchanged)
// given to the ranks so that the ranks' summed costs are close: sorted by cost[i] (largest first, ties by index) and
// dealt in a snake, round k of W batches to ranks 0..W-1 (k even) or W-1..0 (k odd) at step k. at (steps x world):
// at[r x steps + k] = the batch rank r evaluates at step k, -1 for a padding step (only in the last round). Every rank
// still runs s->steps steps. One rank: input order (at[k] = k). Returns 0, or -1 when scratch cannot be allocated.
int eval_shard_deal_by_cost(const EvalShard* s, const int64_t* cost, int64_t* at);
// The eval loss for a dealing `at` (eval_shard_deal_by_cost, or any other table of the same layout) from the
// all-gather of every rank's per-step mean losses (rank r's step k at r x steps + k; padding slots any value): sum over
// the batches in input order of (double)loss_i * examples_i, divided by n, as one GPU sums its batches (HF's
// evaluation_loop: each batch's mean weighted by its examples). NAN for n == 0.
double eval_shard_loss_at(const EvalShard* s, const int64_t* at, const float* gathered);
// perm[j] = the example at position j when sorted by length, longest first, ties in input order (stable).
// Returns 0, or -1 when perm cannot be allocated scratch (n too large).
int eval_shard_order_by_length(const int32_t* lengths, int64_t n, int64_t* perm);
// Deals the sorted order's batches in a snake: in every odd group of `world` consecutive batches (groups g = 1, 3, ..:
// batches [g W, (g + 1) W)) that is whole and full (all W batches of `batch` positions), the batches' blocks of
// positions are reversed in place, so that round-robin dealing gives rank r batch g W + r in even groups and
// g W + W - 1 - r in odd ones. The batches stay one GPU's batches (the same sets of examples, each padded to its own
// longest source); only which rank generates which changes: with the order sorted longest first, rank 0 no longer
// takes the longest batch of every group. The split's last, partial group is left as it is (eval_shard_real_at).
// world <= 1: nothing changes.
void eval_shard_deal_snake(int64_t* order, int64_t n, int64_t batch, int world);
// The padded source positions of the batches of `batch` consecutive positions of `order` (NULL: input order): the
// sum over batches of rows x width, width = the batch's longest lengths[order[p]], at least min_width (the
// collator's pad_to_max_length: max_source_length; else 0), rounded up to a multiple of `multiple` (<= 1: none), as
// data/dataloader.c pads input_ids. What the encoder and every decoder step's cross-attention read.
int64_t eval_shard_padded_positions(const int32_t* lengths, const int64_t* order, int64_t n, int64_t batch,
                                    int min_width, int multiple);

#ifdef __cplusplus
}
#endif
