/*
 * matmul.cuh: every GEMM of the model goes through cuBLASLt here, fp32 accumulation always.
 *
 * Row-major contract (as PyTorch reads it):  D (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * D
 *   A is stored (M,K) row-major, or (K,M) when trans_a;  B is stored (K,N), or (N,K) when trans_b.
 *   beta = 1 accumulates into D (the `+=` of parameter gradients); beta = 0 overwrites.
 *   batch > 1: strided batched; strides in elements between consecutive matrices (0 = broadcast).
 *   lda/ldb/ldd: row length in elements of the stored row-major A/B/D (0 = packed: K or M for A, N or K for B,
 *   N for D), e.g. H*Dk for one head's (T, Dk) slice of a (B*T, H*Dk) tensor.
 * A and B share one dtype (f32, f16 or bf16); D may be that dtype or f32 (e.g. fp16 inputs with fp32
 * gradient buffers, or fp32 attention scores). Linear layer y = x W^T with W (N,K): trans_b = true.
 * Descriptors, layouts and the heuristic's algorithm are created once per distinct GemmDesc and cached.
 * All pointers must be 16-byte aligned (checked, with a message naming the operand).
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GEMM_EPI_NONE = 0, GEMM_EPI_RELU = 1 } GemmEpilogue;

typedef struct {
    int M, N, K;
    bool trans_a, trans_b;
    DType dt_ab;   // dtype of A and B
    DType dt_d;    // dtype of D (== dt_ab or DT_F32)
    int batch;     // 1 for a plain GEMM
    int64_t stride_a, stride_b, stride_d;  // elements, used when batch > 1 (ignored by matmul_batched_ptr)
    int lda, ldb, ldd;  // row length (elements) of the stored A, B, D; 0 = packed
    float alpha, beta;
    GemmEpilogue epilogue;  // RELU: D = relu(alpha*AB + beta*D) (forward of ReLU FF, beta must be 0)
} GemmDesc;

// Creates the cuBLASLt handle and workspace for the current device (idempotent).
void matmul_init(void);
void matmul_shutdown(void);
// TF32 for the GEMMs with fp32 inputs from the next call on (HF --tf32; default off, PyTorch's default): their
// inputs are rounded to TF32 on the tensor cores, accumulation stays fp32. 16-bit GEMMs are not affected.
void matmul_set_tf32(bool on);
// D = alpha op(A) op(B) + beta D on `stream`. No host synchronisation.
void matmul(const GemmDesc* g, void* d, const void* a, const void* b, cudaStream_t stream);

// Pointer-array batched GEMM: for i < g->batch, D[i] (M,N) = alpha op(A[i]) op(B[i]) + beta D[i].
//   d, a, b: DEVICE arrays of g->batch pointers each (read by the GEMM kernel when it runs: they must hold the
//   right pointers when the stream reaches the call, e.g. when a CUDA graph replays it); g->stride_* are ignored,
//   g->ld* give the leading dimensions. align_a/b/d: a power of two (bytes) that divides every pointer of that
//   array (the kernel is chosen for it; the arrays' contents are not checked). No host synchronisation.
//   Dies when cuBLASLt has no algorithm (matmul_batched_ptr_supported asks first).
void matmul_batched_ptr(const GemmDesc* g, void* const* d, const void* const* a, const void* const* b, int align_a,
                        int align_b, int align_d, cudaStream_t stream);
// true when cuBLASLt has an algorithm for matmul_batched_ptr with this descriptor and these alignments
// (host only: creates and caches the plan, launches nothing).
bool matmul_batched_ptr_supported(const GemmDesc* g, int align_a, int align_b, int align_d);

// Convenience for a Linear layer without bias: out (M,N) = inp (M,K) @ W^T, W (N,K).
void linear_forward(void* out, DType dt_out, const void* inp, const void* w, DType dt, int M, int N, int K,
                    cudaStream_t stream);
// dinp (M,K) = dout (M,N) @ W (N,K)   (assigned, or accumulated when accumulate_dinp)
// dw   (N,K) = dout^T (N,M) @ inp (M,K)    (accumulated when accumulate_dw; dw may be f32 while dt is
//                                          f16/bf16, or dt itself: 16-bit gradients, fp32 accumulation)
// Either output may be NULL to skip it.
void linear_backward(void* dinp, DType dt_dinp, bool accumulate_dinp, void* dw, DType dt_dw, bool accumulate_dw,
                     const void* dout, const void* inp, const void* w, DType dt, int M, int N, int K,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
