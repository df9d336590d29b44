/*
 * zero.h: the parameter engine (DESIGN.md invariant 1). The model never owns parameters: it asks
 * the engine for a unit's working weights before using them and hands the unit back afterwards,
 * and tells the engine when a unit's gradient is complete. With stage 0 (this file's only
 * implementation so far) every unit is resident, so these calls are bookkeeping; stage 3 will
 * gather on fetch, free on release and reduce-scatter on grad_ready behind the same interface.
 *
 * A unit (see model/params.h) is one contiguous flat range of `numel` elements. Per unit the
 * engine holds:
 *   working (numel) X      the weights the kernels read (X = the run dtype: fp32, fp16 or bf16);
 *                          in fp32 runs the working buffer IS the master buffer (no copy);
 *   master  (numel) fp32   the optimizer's copy (on the GPU for stage 0);
 *   grad    (numel) G      gradients, G = the run dtype by default (DeepSpeed's grad_accum_dtype default:
 *                          fp16/bf16 gradients, fp32 accumulation inside every kernel, one rounding per
 *                          element), or fp32 (zero_create_ex). Every backward WRITES each gradient (its
 *                          first contribution uses =, later ones +=), so a step needs no clearing pass;
 *                          gradient accumulation over micro-batches is the trainer's (an fp32 sum).
 * All units' buffers of one kind are carved from one allocation, unit after unit, so the
 * optimizer and the gradient norm can see them as one flat vector (zero_flat_*).
 *
 * Call contract (checked on every call, it is cheap; a violation is a bug and aborts with the unit
 * named): fetch -> use -> release, strictly paired, no fetch of a unit already fetched; zero_grad
 * and grad_ready only between zero_begin_grads and the next zero_begin_grads, grad_ready once per
 * unit per step. Stream ordering: everything is ordered on the stream passed in; no host sync.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ZeroEngine ZeroEngine;

// Creates the engine for `num_units` units of unit_numel[u] elements each (every size a multiple
// of 8 elements), unit_name[u] for messages (copied). Memory starts zeroed. stage must be 0 for now.
// Gradients in grad_dtype: working_dtype or DT_F32. Returns NULL with err set when the stage or the
// dtype pair is unsupported or GPU memory is short (the message names the bytes asked for).
ZeroEngine* zero_create_ex(int stage, DType working_dtype, DType grad_dtype, int num_units, const size_t* unit_numel,
                           const char* const* unit_name, char* err, size_t errlen);
// zero_create_ex with grad_dtype = working_dtype.
ZeroEngine* zero_create(int stage, DType working_dtype, int num_units, const size_t* unit_numel,
                        const char* const* unit_name, char* err, size_t errlen);
void zero_destroy(ZeroEngine* Z);

DType zero_working_dtype(const ZeroEngine* Z);
DType zero_grad_dtype(const ZeroEngine* Z);
int zero_num_units(const ZeroEngine* Z);
size_t zero_unit_numel(const ZeroEngine* Z, int unit);

// Device pointer to the unit's working weights (numel) X, valid until zero_release.
void* zero_fetch(ZeroEngine* Z, int unit, cudaStream_t stream);
void zero_release(ZeroEngine* Z, int unit, cudaStream_t stream);
// fp32 view (numel) of a fetched unit, for the ops that HF autocast runs on fp32 parameters (RMSNorm weights,
// relative-bias tables, the embedding lookup). Valid between zero_fetch and zero_release of that unit.
// Stage 0: the master itself. (Stage 3 will gather it in fp32 for persistent tensors and the embedding.)
const float* zero_fetch_fp32(ZeroEngine* Z, int unit, cudaStream_t stream);
// Gradient buffer (numel) of the unit, dtype zero_grad_dtype: its contents are undefined at the start of
// a step; the backward's first contribution to each element writes it (=), later ones add (+=).
void* zero_grad(ZeroEngine* Z, int unit);
// The unit's gradient is complete for this step (stage 3: reduce-scatter starts here).
void zero_grad_ready(ZeroEngine* Z, int unit, cudaStream_t stream);
// Starts a new step's gradient bookkeeping. Clears nothing: the backward writes every gradient.
void zero_begin_grads(ZeroEngine* Z, cudaStream_t stream);
// True when every unit is released and (if any grad was produced) every unit was grad_ready.
bool zero_all_released(const ZeroEngine* Z);
int zero_num_grads_ready(const ZeroEngine* Z);

// fp32 master of a unit (numel), device memory for stage 0.
float* zero_master(ZeroEngine* Z, int unit);
// Working := round(master) for every unit (after loading or an optimizer step). No-op in fp32.
void zero_sync_working(ZeroEngine* Z, cudaStream_t stream);

// The flat views: all units back to back, unit u starting at zero_unit_offset(u).
size_t zero_unit_offset(const ZeroEngine* Z, int unit);
size_t zero_flat_numel(const ZeroEngine* Z);
float* zero_flat_master(ZeroEngine* Z);
void* zero_flat_grad(ZeroEngine* Z);  // (flat_numel) zero_grad_dtype
// Copies every gradient to host memory as fp32 (out: flat_numel floats), converting in bounded device
// chunks. Synchronises the stream.
void zero_grads_to_host_f32(ZeroEngine* Z, float* out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
