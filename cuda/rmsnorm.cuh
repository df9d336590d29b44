/*
 * rmsnorm.cuh: T5LayerNorm (RMS norm, no mean, no bias), fp32 statistics.
 *   forward:  rstd[n] = 1/sqrt(mean_d(x[n,d]^2) + eps);  out[n,d] = round_X(w[d] * x[n,d] * rstd[n])
 *             NOTE(numerics): with an fp16/bf16 weight, x*rstd is first rounded to the weight's dtype,
 *             as HF's T5LayerNorm does (`hidden.to(weight.dtype)` before the multiply).
 *             x (N,D) fp32 residual stream; w (D) dtype dt_w; out (N,D) dtype dt_out; rstd (N) fp32 saved.
 *   backward: dx (N,D) fp32 +=  (the residual stream's gradient accumulates: llm.c contract)
 *             dw (D)   dtype dt_dw (fp32, or the run's fp16/bf16 gradient dtype): += when accumulate_dw,
 *                      else = (the first contribution of a step); summed deterministically in fp32
 *                      and rounded once
 *             dout (N,D) dtype dt_out.
 */
#pragma once
#include <cuda_runtime.h>

#include <stdbool.h>
#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void rmsnorm_forward(void* out, DType dt_out, float* rstd, const float* x, const void* w, DType dt_w, int N, int D,
                     float eps, cudaStream_t stream);
// scratch: at least rmsnorm_backward_scratch_floats(N, D) floats of device memory.
size_t rmsnorm_backward_scratch_floats(int N, int D);
void rmsnorm_backward(float* dx, void* dw, DType dt_dw, bool accumulate_dw, const void* dout, DType dt_out,
                      const float* x, const void* w, DType dt_w, const float* rstd, int N, int D, float* scratch,
                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif
