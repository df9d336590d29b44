/*
 * decode_gemv.cuh: the decoder step's projections at few rows (generation: M = batch x beams <= 32), memory-bound:
 *   out (M, N) dt = act(in (M, K) dt . w (N, K) dt ^T), fp32 accumulation, one rounding to dt; act = ReLU on the
 *   fp32 sum when relu (as the GEMM's ReLU epilogue), else none. Assigned (=). dt = bf16 or fp16.
 * Same contract as linear_forward (cuda/matmul.cuh) for these shapes; only the order of the fp32 sum differs.
 * Why: cuBLASLt reaches 51-94% of HBM bandwidth on t5-3b's decode GEMMs at M = 4 and splits K into a separate reduce
 * kernel (docs/generate.md); this kernel streams the weights once through a cp.async pipeline into tensor-core mmas
 * (64 weight rows x 16 or 32 input rows per block), the weights of the first stages requested before the PDL wait,
 * split-K over a thread-block cluster with a fixed-order reduction in shared memory (cuda/decode_gemv.cu).
 * model/generate.c's use of it: docs/generate.md.
 * decode_gemv_supported: dt bf16/fp16, 1 <= M <= 32, K a multiple of 8, every pointer 16-byte aligned.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

bool decode_gemv_supported(DType dt, int M, int N, int K, const void* out, const void* in, const void* w);
void decode_gemv(void* out, const void* in, const void* w, DType dt, int M, int N, int K, bool relu,
                 cudaStream_t stream);

#ifdef __cplusplus
}
#endif
