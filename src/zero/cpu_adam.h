/*
 * cpu_adam.h: DeepSpeed's CPU Adam/AdamW (csrc/includes/cpu_adam.h, csrc/adam/cpu_adam_impl.cpp) over
 * flat fp32 master / m / v buffers, with the gradient unscale+clip and the 16-bit working copy fused
 * into the same pass (REFERENCE §4.5).
 *
 * Per element i of a range, all in fp32 (the order of DeepSpeed's Step_AVX, with explicit FMAs):
 *     g  = float(grad[i]) * grad_scale          grad fp32 / fp16 / bf16; grad_scale = 1/combined
 *     if (!adamw_mode && wd > 0) g = fma(p, wd, g)
 *     m  = fma(g, 1-b1, m*b1)
 *     v  = fma(g*g, 1-b2, v*b2)
 *     d  = fma(sqrt(v), bias_correction2, eps)      bias_correction2 = 1/sqrt(1 - b2^t)
 *     if (adamw_mode && wd > 0) p = fma(p, -lr*wd, p)
 *     p  = fma(m/d, -lr/bias_correction1, p)        bias_correction1 = 1 - b1^t
 *     work[i] = fp16/bf16(p)                        round to nearest even, NaN stays NaN
 * Every path (AVX-512, AVX2+FMA+F16C, scalar with fmaf) performs exactly these IEEE operations, so all
 * paths give bit-identical master/m/v/working copies; they differ only in speed.
 *
 * This equals torch.optim.AdamW up to rounding: torch computes denom = sqrt(v)/sqrt(1-b2^t) + eps and
 * p *= (1 - lr*wd) (test_cpu_adam.c checks the difference against a numpy transcription of torch).
 *
 * Threading: OpenMP across chunks of the range (each a multiple of the SIMD width), SIMD inside.
 * Buffers should be 64-byte aligned for speed (unaligned loads/stores are used, so any alignment works).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CPU_ADAM_SCALAR = 0, CPU_ADAM_AVX2 = 1, CPU_ADAM_AVX512 = 2 } CpuAdamSimd;

typedef struct {
    float beta1, beta2, eps;
    bool adamw_mode;       // true: decoupled decay (AdamW, DeepSpeed default); false: L2 added to g
    bool bias_correction;  // DeepSpeed's bias_correction flag (true)
    // IncrementStep state
    int64_t step;          // number of updates applied so far (DeepSpeed _step)
    float beta1_t, beta2_t;  // running powers b1^step, b2^step (fp32, as DeepSpeed)
    float bias_correction1;  // 1 - b1^t            (1 without bias correction)
    float bias_correction2;  // 1 / sqrt(1 - b2^t)  (1 without bias correction)
    CpuAdamSimd simd;      // path used by cpu_adam_update
} CpuAdam;

// The best path this CPU supports (AVX-512F > AVX2+FMA+F16C > scalar).
CpuAdamSimd cpu_adam_detect_simd(void);
const char* cpu_adam_simd_name(CpuAdamSimd s);  // "AVX512", "AVX2", "scalar"

// betas/eps as DeepSpeed's Adam_Optimizer constructor; step 0; detected SIMD path.
void cpu_adam_init(CpuAdam* a, float beta1, float beta2, float eps, bool adamw_mode);
// DeepSpeed's IncrementStep(step, beta1, beta2) + bias corrections of update_state: call once per
// applied optimizer step with step = 1, 2, 3, ... (the step being taken). Running products when step
// is the previous one + 1 and the betas are unchanged, pow() otherwise (resume, changed betas).
void cpu_adam_begin_step(CpuAdam* a, int64_t step, float beta1, float beta2);
// Forces a SIMD path (tests, benchmarks). Returns -1 (and leaves the path) if this CPU lacks it.
int cpu_adam_set_simd(CpuAdam* a, CpuAdamSimd s);

// One AdamW update of n elements (see the formula above). master/m/v: (n) fp32, updated in place.
// grad: (n) of grad_dtype, read only, multiplied by grad_scale (1/combined of grad_clip.h).
// work: (n) of work_dtype (DT_F16 or DT_BF16) written from the new master, or NULL for none (a
// DT_F32 work_dtype is treated as none: the master is the fp32 copy).
// weight_decay: this range's decay (0 for ranges the HF rule exempts, see optim_groups.h).
void cpu_adam_update(const CpuAdam* a, float lr, float weight_decay, float* master, float* m, float* v,
                     const void* grad, DType grad_dtype, float grad_scale, void* work, DType work_dtype, size_t n);

// Scalar conversions used by the scalar path (exposed for tests): round to nearest even, overflow to
// inf, subnormals kept; fp16 NaN keeps sign and top payload bits (as F16C), bf16 NaN becomes 0x7fc0
// (as DeepSpeed's store_16_f32_as_bf16_nearest). fp16 -> fp32 quiets a signalling NaN (as F16C).
uint16_t cpu_adam_f32_to_f16(float x);
uint16_t cpu_adam_f32_to_bf16(float x);
float cpu_adam_f16_to_f32(uint16_t h);
float cpu_adam_bf16_to_f32(uint16_t b);

#ifdef __cplusplus
}
#endif
