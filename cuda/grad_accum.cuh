/*
 * grad_accum.cuh: the ZeRO engine's gradient kernels (see grad_accum.cu): accumulation of a reduced
 * gradient piece into its partition slot in the accumulation dtype, and the deterministic squared norm
 * and non-finite flag of the pieces, computed on the GPU before the gradients leave for the host.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// dst (n) dt_dst = (add ? dst : 0) + scale * src (n) dt_src; fp32 math, one rounding to dt_dst.   (= or +=)
void grad_accumulate(void* dst, DType dt_dst, const void* src, DType dt_src, size_t n, bool add, float scale,
                     cudaStream_t stream);

// Scratch of grad_sumsq: GRAD_SUMSQ_GRID doubles + GRAD_SUMSQ_GRID ints of device memory.
#define GRAD_SUMSQ_GRID 256
size_t grad_sumsq_scratch_bytes(void);
// *d_slot = sum of (double)x^2 over x (n) dt (=), *d_flag = 1 if any element is inf or nan, else 0 (=).
// Fixed grid and reduction trees: the same input gives the same bits.
void grad_sumsq(const void* x, DType dt, size_t n, double* d_slot, int* d_flag, void* scratch, cudaStream_t stream);
// *d_total = sum of slots[0..n) in index order (fp64); *d_overflow = OR of flags[0..n).              (=)
void grad_sumsq_combine(const double* slots, const int* flags, int n, double* d_total, int* d_overflow,
                        cudaStream_t stream);
// *d_norm2 = (float)*d_total (=). Rounded once, after the ranks' fp64 totals are summed: summing the ranks' rounded
// fp32 totals instead differs from one GPU's norm in the last bit, and the clip factor with it (finding 15 of
// docs/training_results.md: N GPUs then drift from one GPU with accumulation over a long run).
void grad_sumsq_round(const double* d_total, float* d_norm2, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
