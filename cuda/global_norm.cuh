/*
 * global_norm.cuh: deterministic global gradient norm with a non-finite flag, and DeepSpeed's combined
 * unscale+clip factor, all on the device (see global_norm.cu). Nothing here synchronises the host.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const void* ptr;  // (n) dtype gradient buffer
    int64_t n;
    DType dtype;
} GradBuffer;

typedef struct GlobalNormPlan GlobalNormPlan;

// Copies the buffer list and chunk table to the device and allocates the partials (synchronous, once).
GlobalNormPlan* global_norm_plan_create(const GradBuffer* bufs, int count);
void global_norm_plan_free(GlobalNormPlan* plan);
// *d_out_norm2 = sum of x^2 over every buffer (squares and sums in fp64, stored as fp32);
// *d_out_overflow = 1 if any element is inf or nan, else 0. Same inputs give the same bits.
void global_norm_compute(const GlobalNormPlan* plan, float* d_out_norm2, int* d_out_overflow, cudaStream_t stream);
// From the (all-reduced) norm2 and overflow flag: *d_norm = sqrtf(norm2), or -1 when the flag is set or
// the norm is not finite (DeepSpeed's convention); *d_inv_scale = 1 / (loss_scale * max(1,
// (norm/loss_scale + 1e-6)/clip)) in fp32 exactly as ds_grad_inv_scale (src/train/grad_clip.h); clip <= 0:
// 1/loss_scale. d_norm may be NULL.
void global_norm_clip_scale(const float* d_norm2, const int* d_overflow, float loss_scale, float clip,
                            float* d_inv_scale, float* d_norm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
