/*
 * decode.cuh: the two generation-only kernels of model/generate.c (no backward: generation never trains).
 *
 *   decode_topk: for each row r of logits (R, V) X, the K best candidates, value descending, ties to the
 *     lower token id (torch.argmax returns the first maximum; topk ties are unspecified, this order is ours):
 *       v[r, j] = f(logits[r, :]) + (row_score ? row_score[r] : 0)    fp32
 *       f = log_softmax in fp32 as torch computes it ((x - max) - log(sum exp(x - max))) when log_softmax,
 *           else the fp32 logit itself (greedy argmax);
 *       the token ban_token (>= 0; -1 none) gets -inf before the score is added (HF MinLengthLogitsProcessor).
 *     out_val (R, K) fp32, out_idx (R, K) int32 token ids. K <= V. Assigned (=).
 *   decode_gather_rows: dst[r] = src[idx[r]] for rows of a (R, S, ...) byte layout, copying only the first
 *     copy_bytes of each of the S segments of a row (e.g. the cached positions [0, t] of each head of a
 *     (R, H, Tmax, Dk) KV cache). dst and src must not overlap. Assigned (=).
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void decode_topk(float* out_val, int* out_idx, const void* logits, DType dt, int R, int V, int K, bool log_softmax,
                 const float* row_score, int ban_token, cudaStream_t stream);

void decode_gather_rows(void* dst, const void* src, const int* idx, int R, int S, size_t row_bytes, size_t seg_bytes,
                        size_t copy_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
