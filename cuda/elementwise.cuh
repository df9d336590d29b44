/*
 * elementwise.cuh: small layout and type kernels.
 *   cast:          out (n) dt_out = in (n) dt_in (round to nearest even)
 *   scale:         x (n) *= s  (in place, any dtype; fp32 math)
 *   split_heads:   out (B,H,T,Dk) = in (B,T,H*Dk) viewed (B,T,H,Dk)   (permute for batched attention GEMMs)
 *   merge_heads:   out (B,T,H*Dk) = in (B,H,T,Dk)                     (inverse; also used for gradients)
 *   fill:          x (n) = value
 *   add_inplace:   acc (n) fp32 += x (n) dt (accumulates e.g. cross-attention K/V gradients of the
 *                  encoder output)
 */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void cast(void* out, DType dt_out, const void* in, DType dt_in, size_t n, cudaStream_t stream);
void scale_inplace(void* x, DType dt, size_t n, float s, cudaStream_t stream);
void split_heads(void* out, const void* in, DType dt, int B, int T, int H, int Dk, cudaStream_t stream);
void merge_heads(void* out, const void* in, DType dt, int B, int T, int H, int Dk, cudaStream_t stream);
void fill(void* x, DType dt, size_t n, float value, cudaStream_t stream);
void add_inplace(float* acc, const void* x, DType dt, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
