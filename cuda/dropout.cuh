/*
 * dropout.cuh: inverted dropout with a counter-based RNG (Philox-4x32-10 keyed by seed, counter =
 * offset + element index), so that the backward and a resumed run regenerate the same mask without
 * storing it. keep(i) <=> uniform(seed, offset + i) >= p; kept values are scaled by 1/(1-p). p == 0 is
 * the identity (and costs nothing beyond a copy when out != x).
 *   dropout_forward:  out (n) X = dropout(x)         (in place allowed)
 *   dropout_backward: dx (n) X  = dropout(dout)      (same mask; in place allowed)
 *   residual_dropout_add: resid (n) fp32 += dropout(branch (n) X) — the T5 sublayer residual add;
 *   residual_dropout_add_out: out (n) fp32 = resid (n) fp32 + dropout(branch (n) X) (the same values, out of place);
 *   its backward is dropout_backward of the fp32 residual gradient into a branch gradient in X:
 *   residual_dropout_backward: dbranch (n) X = dropout(dresid (n) fp32).
 * dropout_uniform is the host reference of the RNG (bit-identical to the device).
 */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

float dropout_uniform(uint64_t seed, uint64_t counter);
void dropout_forward(void* out, const void* x, DType dt, size_t n, float p, uint64_t seed, uint64_t offset,
                     cudaStream_t stream);
void dropout_backward(void* dx, const void* dout, DType dt, size_t n, float p, uint64_t seed, uint64_t offset,
                      cudaStream_t stream);
void residual_dropout_add(float* resid, const void* branch, DType dt, size_t n, float p, uint64_t seed,
                          uint64_t offset, cudaStream_t stream);
void residual_dropout_add_out(float* out, const float* resid, const void* branch, DType dt, size_t n, float p,
                              uint64_t seed, uint64_t offset, cudaStream_t stream);
void residual_dropout_backward(void* dbranch, DType dt, const float* dresid, size_t n, float p, uint64_t seed,
                               uint64_t offset, cudaStream_t stream);

// CUDA-graph support. While a device seed is set on the calling host thread (non-NULL), the launchers above and
// those of attention_softmax.cuh ignore the value of their `seed` argument: their kernels read the seed from
// *seed_dev when they run, so a captured graph can be replayed with a new seed stored there first.
// The same seed value gives bit-identical masks either way. Set it back to NULL when done.
void dropout_set_device_seed(const uint64_t* seed_dev);
const uint64_t* dropout_device_seed(void);
// *seed_dev (1) uint64 = seed, in stream order (one tiny kernel, no host synchronisation).
void dropout_store_seed(uint64_t* seed_dev, uint64_t seed, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
