/*
 * decode_gemv.cuh: the decoder step's projections at few rows (generation: M = batch x beams <= 32), memory-bound:
 *   out (M, N) dt = act(in (M, K) dt . w (N, K) dt ^T), fp32 accumulation, one rounding to dt; act = ReLU on the
 *   fp32 sum when relu (as the GEMM's ReLU epilogue), else none. Assigned (=). dt = bf16 or fp16.
 * Same contract as linear_forward (cuda/matmul.cuh) for these shapes; only the order of the fp32 sum differs.
 * Why: cuBLASLt reaches 51-94% of HBM bandwidth on t5-3b's decode GEMMs at M = 4 (docs/generate.md); this kernel
 * streams the weights once with 16-byte loads into tensor-core mmas (16 weight rows x ceil(M / 8) tiles of 8 input
 * rows per warp), split-K over warps with a fixed-order reduction (cuda/decode_gemv.cu).
 * model/generate.c's use of it: docs/generate.md.
 * decode_gemv_supported: dt bf16/fp16, 1 <= M <= 32, K a multiple of 8, every pointer 16-byte aligned.
 * Calls on one device must not overlap in time (one static split-K workspace per device): use one stream.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

bool decode_gemv_supported(DType dt, int M, int N, int K, const void* out, const void* in, const void* w);
void decode_gemv(void* out, const void* in, const void* w, DType dt, int M, int N, int K, bool relu,
                 cudaStream_t stream);

#ifdef __cplusplus
}
#endif
