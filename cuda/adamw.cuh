/*
 * adamw.cuh: fused multi-tensor AdamW on the GPU (see adamw.cu). One launch updates every tensor of a
 * plan: fp32 master / m / v in place, gradient of any dtype scaled by *d_grad_scale (1/combined of
 * src/train/grad_clip.h, computed on the device by global_norm_clip_scale), optional fp16/bf16 working copy
 * written in the same pass. Same formula, same fp32 operations as src/zero/cpu_adam.c (DeepSpeed's CPU
 * Adam), so for finite values the results are bit-identical to cpu_adam_update.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float* master;     // (n) fp32, updated in place
    float* m;          // (n) fp32 first moment
    float* v;          // (n) fp32 second moment
    const void* grad;  // (n) grad_dtype
    void* work;        // (n) work_dtype (DT_F16 / DT_BF16) written from the new master, or NULL
    int64_t n;
    DType grad_dtype;
    DType work_dtype;
    float weight_decay;  // this tensor's decay (0 for the HF no-decay group)
} AdamWTensor;

// Per-step scalars, exactly the CpuAdam fields after cpu_adam_begin_step (bias corrections included).
typedef struct {
    float lr, beta1, beta2, eps;
    float bias_correction1;  // 1 - b1^t
    float bias_correction2;  // 1 / sqrt(1 - b2^t)
    bool adamw_mode;
} AdamWStepArgs;

typedef struct AdamWPlan AdamWPlan;

// Copies the tensor list and its chunk table to the device (synchronous; call once per set of buffers).
AdamWPlan* adamw_plan_create(const AdamWTensor* tensors, int count);
void adamw_plan_free(AdamWPlan* plan);
// One update of every tensor of the plan. d_grad_scale: device fp32 input-gradient multiplier, NULL
// for 1. d_skip: device int, the step is a no-op when *d_skip != 0 (e.g. the overflow flag), NULL for
// never. No host synchronisation: graph-capturable with fixed scalars.
void adamw_step(const AdamWPlan* plan, const AdamWStepArgs* args, const float* d_grad_scale, const int* d_skip,
                cudaStream_t stream);

#ifdef __cplusplus
}
#endif
