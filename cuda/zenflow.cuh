/*
 * zenflow.cuh: ZenFlow's GPU half for one tensor (see zenflow.cu; DeepSpeed runtime/zenflow/zenflow_stage_1_and_2.py
 * update_selected_channels, ops/adam/zenflow_torch_adam.py ZenFlowSelectiveAdamW; docs/zero.md "ZenFlow"):
 *   - the column importance of a gradient, imp[c] = sum_r |g[r, c]|, with src/zero/zenflow_select.c's arithmetic
 *     (fp64 sum over r = 0..R-1 in that order, one rounding to fp32: bit-identical to the CPU);
 *   - the per-tensor top-k of the importance with zenflow_select.c's order (NaN first, then larger, ties to the
 *     lower column; the result ascending): the same set as zenflow_select_topk, bit for bit;
 *   - the selective AdamW on W[:, sel] (gather, cuda/adamw.cu's step, scatter), keep / restore of W[:, sel]
 *     (DeepSpeed's temp_copy_param) and the zeroing of the selective m, v (clear_selected_mv).
 * The state keeps src/zero/zenflow_ref.h's names (sel, sel_m, sel_v, sel_p, sel_g, kept, importance); the selective
 * step count and its bias corrections stay with the caller (src/zero owns the CpuAdam that computes them, as for
 * adamw_step), who passes AdamWStepArgs. Every launcher is asynchronous on `stream` (no host synchronisation).
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "../src/base/dtype.h"
#include "adamw.cuh"

#ifdef __cplusplus
extern "C" {
#endif

// One tensor of torch shape (R, C), row-major (HF's layout: nn.Linear (out, in), the embedding (V, D)); a 1-D
// tensor of n elements is R = 1, C = n with every element selected (never ranked). Device buffers:
typedef struct {
    int64_t R, C;
    bool is_1d;
    int64_t k;            // selected columns (1-D: C), 0 <= k <= C
    DType work_dtype;     // the working weights' dtype (fp32 / fp16 / bf16)
    int32_t* sel;         // (k) the selected columns, ascending (1-D: 0..C-1)
    float* sel_p;         // (R, k) fp32 scratch: work[:, sel] widened, then the AdamW's result
    float* sel_g;         // (R, k) fp32: g[:, sel] of this micro-step (zenflow_gpu_gather_grad)
    float* sel_m;         // (R, k) fp32 selective AdamW first moment
    float* sel_v;         // (R, k) fp32 second moment
    float* kept;          // (R, k) fp32: work[:, sel] kept aside at an update boundary (exact for 16-bit work)
    float* importance;    // (C) fp32 scratch
    // top-k scratch (2-D only): radix keys, column ids, and cub's temporary storage
    uint32_t* keys_in;    // (C)
    uint32_t* keys_out;   // (C)
    int32_t* ids_in;      // (C)
    int32_t* ids_out;     // (C)
    void* cub_temp;
    size_t cub_temp_bytes;
    AdamWPlan* plan;      // one AdamWTensor: master sel_p, m sel_m, v sel_v, grad sel_g (fp32), no working copy
} ZenflowGpuTensor;

// Allocates the state of a tensor (zero m, v; 1-D: sel = 0..C-1). k: zenflow_select_count(C, topk_ratio, stage)
// for 2-D tensors (ignored for 1-D). weight_decay: the tensor's (fixed in the AdamW plan). Synchronous.
void zenflow_gpu_init(ZenflowGpuTensor* t, int64_t R, int64_t C, bool is_1d, int64_t k, DType work_dtype,
                      float weight_decay);
void zenflow_gpu_free(ZenflowGpuTensor* t);

// importance: (C) fp32 device, written (=). grad: (R, C) device, grad_dtype fp32 / fp16 / bf16, read only.
// importance[c] = fp32(sum over r = 0..R-1, in order, of fp64 |grad[r, c]|): zenflow_column_importance's bits.
void zenflow_column_importance_gpu(const void* grad, DType grad_dtype, int64_t R, int64_t C, float* importance,
                                   cudaStream_t stream);

// t->sel (k) = the k columns of largest t->importance (C), ascending, zenflow_select_topk's order and ties.
// Uses t's top-k scratch. A no-op for k = 0.
void zenflow_select_topk_gpu(ZenflowGpuTensor* t, cudaStream_t stream);

// A selection boundary of a 2-D tensor (zenflow_ref_step's step 2): sel_m = sel_v = 0 (clear_selected_mv), then
// importance from grad and sel = its top k. 1-D tensors: the clear only.
void zenflow_gpu_select(ZenflowGpuTensor* t, const void* grad, DType grad_dtype, cudaStream_t stream);

// sel_m = sel_v = 0 (clear_selected_mv; the selective step count is the caller's and goes on).
void zenflow_gpu_clear_mv(ZenflowGpuTensor* t, cudaStream_t stream);

// sel_g (R, k) = fp32(grad[:, sel]) of grad (R, C) in grad_dtype.
void zenflow_gpu_gather_grad(ZenflowGpuTensor* t, const void* grad, DType grad_dtype, cudaStream_t stream);

// kept (R, k) = fp32(work[:, sel]) (temp_copy_param, before the CPU result overwrites work).
void zenflow_gpu_keep(ZenflowGpuTensor* t, const void* work, cudaStream_t stream);
// work[:, sel] = kept, rounded to work_dtype (exact: kept came from work).
void zenflow_gpu_restore(ZenflowGpuTensor* t, void* work, cudaStream_t stream);

// The selective AdamW (one step of its own count, the caller's args): sel_p = fp32(work[:, sel]); adamw_step on
// (sel_p, sel_m, sel_v) with sel_g times *d_grad_scale (NULL: 1), a no-op when *d_skip != 0 (NULL: never);
// work[:, sel] = work_dtype(sel_p), round to nearest even (fp32 work: the fp32 result itself). work: (R, C).
void zenflow_gpu_selective_step(ZenflowGpuTensor* t, void* work, const AdamWStepArgs* args, const float* d_grad_scale,
                                const int* d_skip, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
