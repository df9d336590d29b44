/*
 * flops_profile.h: DeepSpeed's flops_profiler output (deepspeed/profiling/flops_profiler/profiler.py,
 * print_model_profile) for a T5 training micro-batch. Pure functions (no GPU): the trainer hands in the CUDA-event
 * times of the forward's segments (model/t5.h t5_model_set_profile) and of the backward and the step.
 *
 * The module tree is HF's T5ForConditionalGeneration as torch prints it (shared, encoder / decoder T5Stack,
 * block ModuleList, T5Block, layer ModuleList, T5LayerSelfAttention / T5LayerCrossAttention / T5LayerFF, T5Attention
 * with q k v o (+ relative_attention_bias in block 0), T5DenseActDense / T5DenseGatedActDense with wi / wi_0 wi_1 /
 * wo, norms, dropouts, activations, lm_head), with:
 *   - params: each module's parameters (the shared embedding is one module listed three times, as in HF);
 *   - MACs of the forward from the model's analytic count (src/report/flops.h: the GEMMs; the attention scores and
 *     values are T5Attention's own MACs, the torch.matmul calls inside its forward); the MACs add up to
 *     flops_t5_forward / 2. DeepSpeed also counts elementwise tensor ops (norms, softmax, dropout, the loss): it
 *     reports a few percent more for small models;
 *   - latency: measured for the segments model/t5.c marks (the embedding lookups, every T5Layer*, each stack's final
 *     norm with its dropout, lm_head, and the loss as the part of the top module outside its children); a stack,
 *     a block or the model is the sum of its segments. Modules inside a T5Layer* (T5Attention, the Linear layers,
 *     norms) are not timed: their latency reads "not timed" instead of a number.
 * The summary block has DeepSpeed's lines and order; t5train prints the bwd / step / iter latency, FLOPS and
 * samples/s lines always (DeepSpeed only with wall_clock_breakdown) and adds one MFU line.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../../model/t5_config.h"

#ifdef __cplusplus
extern "C" {
#endif

// The forward's timed segments, in order (model/t5.c records one event before the first and one after each):
//   0                      encoder embed_tokens (+ dropout)
//   1 + 2l, 2 + 2l         encoder block l: layer[0] T5LayerSelfAttention, layer[1] T5LayerFF
//   1 + 2L                 encoder final_layer_norm (+ dropout)
//   2 + 2L                 decoder embed_tokens (+ dropout)
//   3 + 2L + 3l, +1, +2    decoder block l: T5LayerSelfAttention, T5LayerCrossAttention, T5LayerFF
//   3 + 2L + 3Ld           decoder final_layer_norm (+ dropout, the v1.0 output scaling)
//   4 + 2L + 3Ld           lm_head
//   5 + 2L + 3Ld           the loss (cross-entropy and its gradient)
int flops_profile_num_segments(const T5Config* cfg);

typedef struct {
    T5Config cfg;
    int64_t B, S, T;            // the profiled micro-batch: rows, padded source and target lengths
    int64_t profile_step;       // DeepSpeed's global step (updates done before the profiled one)
    int world_size;             // data parallel size = world size (model parallel size 1)
    const double* seg_ms;       // flops_profile_num_segments times (ms); NULL: no segment timed
    double bwd_ms;              // backward of the micro-batch (with the gradients handed to the engine); < 0: unknown
    double step_ms;             // the engine's step of the update; < 0: unknown
    double recompute_fwd_factor;  // DeepSpeed's: the backward counts (2 + this) forwards in its FLOPS lines
    double peak_flops;          // the GPU's dense peak for the run's dtype (0: unknown, no MFU line)
    const char* peak_what;      // "bf16 dense on NVIDIA H100 80GB HBM3"
    int module_depth;           // -1: every depth
    int top_modules;
    bool detailed;
} FlopsProfileInput;

// The whole profile (summary, aggregated profile, detailed tree when in->detailed) to f. 0, or -1 for a bad input.
int flops_profile_write(FILE* f, const FlopsProfileInput* in);

// Parts, for the tests. DeepSpeed's number_to_string (round to 2 digits, then %g, with a K/M/G/T/m/u unit and a
// space): "60.51 M", "0 "; params as params_to_string ("60.51 M", "0").
int flops_profile_number(char* buf, size_t cap, double x);
int flops_profile_params(char* buf, size_t cap, double x);

// The module tree's totals, for the tests: forward MACs of the top module, the sum of every leaf's and every
// module's own MACs (the two must agree), parameters of the top module.
typedef struct {
    double macs_top, macs_leaves, params_top;
    int num_modules;
} FlopsProfileTotals;
int flops_profile_totals(const FlopsProfileInput* in, FlopsProfileTotals* out);

#ifdef __cplusplus
}
#endif
