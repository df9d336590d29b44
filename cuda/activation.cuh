/*
 * activation.cuh: the feed-forward nonlinearities.
 *   relu:       out = max(x, 0)                        (N) X; backward: dx = dout * (out > 0)   (=)
 *   gated gelu: out = gelu_new(a) * b                  a, b, out (N) X, fp32 math;
 *               gelu_new(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
 *               backward: da = dout * b * gelu_new'(a), db = dout * gelu_new(a)   (=)
 * In-place (out == x) is allowed for forward; dx == dout is allowed for backward.
 */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void relu_forward(void* out, const void* x, DType dt, size_t n, cudaStream_t stream);
void relu_backward(void* dx, const void* dout, const void* out, DType dt, size_t n, cudaStream_t stream);
// dx = dropout(dout, p; seed, offset as dropout.cuh) * (out > 0): dropout_backward + relu_backward in one pass
void relu_dropout_backward(void* dx, const void* dout, const void* out, DType dt, size_t n, float p, uint64_t seed,
                           uint64_t offset, cudaStream_t stream);
void gated_gelu_forward(void* out, const void* a, const void* b, DType dt, size_t n, cudaStream_t stream);
void gated_gelu_backward(void* da, void* db, const void* dout, const void* a, const void* b, DType dt, size_t n,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif
