/*
 * zenflow.h: ZenFlow in the partitioned engine (zero_optimization.zenflow; docs/zero.md "ZenFlow in the engine"),
 * internal to src/zero/: engine.c drives it through the calls below, reduce.c hands it each unit's gradient.
 * One rank, ZeRO stage 1-3 with every unit's optimizer state on the CPU (offload_optimizer cpu, ratio 1), no
 * offload_param, AdamW. The arithmetic of one tensor is src/zero/zenflow_ref.h's; the schedule zenflow_sched.h's;
 * the GPU half cuda/zenflow.cuh's.
 *
 * One micro-step (= one trainer step: ZenFlow replaces gradient accumulation by its update interval k):
 *   zenflow_engine_begin      the plan; at a selection boundary after the first, the fp32 master takes the working
 *                             weights; the partition accumulates into its host gradient (gacc) unless this is the
 *                             first micro-step since the last update; returns k (the backward divides by it)
 *   (backward) zp_zenflow_grad  per unit, on the reduction stream, before the gradient buffer goes: selection
 *                             (clear sel_m, sel_v; importance; top-k) and sel_g = g[:, sel]
 *   engine_step: the norm and the loss scaler as always (the norm is the accumulated gradient's), then
 *     update boundary:  zenflow_engine_keep (W[:, sel] aside), the CPU AdamW with step id n (zero_optimizer_step),
 *                       zenflow_engine_finish waits for it and restores W[:, sel], then the selective step
 *     otherwise:        zenflow_engine_finish: the selective AdamW on W[:, sel] only (no CPU step)
 *     overflow (fp16):  zenflow_engine_skip: nothing applied, the accumulation since the last update dropped
 * Checkpoints (docs/zero.md "ZenFlow's checkpoint"; the layout in zenflow_state.h): any micro-step may be saved; a
 * save between update boundaries carries the accumulated host gradient too.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../model/zero.h"
#include "engine.h"
#include "zenflow_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ZeroPart;

// Attaches ZenFlow's state to the partitioned engine Z (its tensors from zo->tensors): one ZenflowGpuTensor per
// parameter tensor, the schedule (steps_per_epoch: micro-steps per epoch, <= 0 unknown), the selective AdamW's
// constants. Returns 0, or T5_EXIT_USAGE with err set when the engine is not one ZenFlow runs on here.
int zenflow_engine_create(ZeroEngine* Z, const ZeroOptions* zo, const ZenflowOpts* o, int64_t steps_per_epoch,
                          char* err, size_t errlen);
void zenflow_engine_destroy(ZeroEngine* Z);
// One line for the start-up log: the tensors, the share of the parameters the GPU steps every micro-step, the GPU
// bytes, the intervals.
void zenflow_engine_describe(ZeroEngine* Z, char* line, size_t n);
// true when Z carries ZenFlow's state
bool zenflow_engine_on(ZeroEngine* Z);
// The next micro-step begins (see above); returns the update interval k the backward's scale is divided by.
float zenflow_engine_begin(ZeroEngine* Z, cudaStream_t s);
// This micro-step's plan (zenflow_sched.h).
ZenflowStepPlan zenflow_engine_plan(ZeroEngine* Z);
// Update boundary with a selective step: W[:, sel] of every tensor kept aside, on s, before the CPU step is handed on.
void zenflow_engine_keep(ZeroEngine* Z, cudaStream_t s);
// After the norm (and, at an update boundary, after zero_optimizer_step): waits for the CPU step and restores
// W[:, sel] (update), then the selective AdamW with lr (selective plans). loss_scale: the fp16 loss scale of this
// micro-step's backward (1 without a scaler). Ends the micro-step.
void zenflow_engine_finish(ZeroEngine* Z, float lr, float loss_scale, cudaStream_t s);
// engine_save_weights brackets its write with these: while a selective step is ahead of the master (w_ahead,
// zenflow_state.h), save_begin swaps every tensor's master[:, sel] with fp32(W[:, sel]), so that model.safetensors
// holds the weights the model runs with, and keeps the master's values in each tensor's sel_p scratch; save_end
// swaps them back. The run's master is the same after the pair (a checkpoint does not change the run's numbers).
// Synchronous.
void zenflow_engine_save_begin(ZeroEngine* Z, cudaStream_t s);
void zenflow_engine_save_end(ZeroEngine* Z, cudaStream_t s);
// The weights were (re)loaded (the master from a file, W = round(master), the views): nothing is ahead of the master.
void zenflow_engine_weights_loaded(ZeroEngine* Z);
// The checkpoint (zenflow_state.h): blobs zenflow, zenflow_tensors and, between update boundaries, zenflow_gacc.
// Returns 0, or -1 with err set.
int zenflow_engine_state_save(ZeroEngine* Z, const EngineStateSink* sink, char* err, size_t errlen);
// The same from a checkpoint, after its weights were loaded. A checkpoint without ZenFlow's state or saved with
// another zenflow config ends the run with one line (exit 2); a damaged one with exit 1.
void zenflow_engine_state_load(ZeroEngine* Z, const EngineStateSource* src);
// An overflowing micro-step (fp16): nothing applied; the next micro-step starts a new accumulation.
void zenflow_engine_skip(ZeroEngine* Z);

// reduce.c: unit u's gradient (U->grad, dtype G) is complete on stream gs: selection / sel_g for its tensors.
void zp_zenflow_grad(struct ZeroPart* P, int u, cudaStream_t gs);

#ifdef __cplusplus
}
#endif
