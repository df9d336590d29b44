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
 *   decode_gather_rows_planes: the same over n_outer x n_inner planes in one launch, plane (o, i) at byte offset
 *     o * outer_bytes + i * inner_bytes from dst and from src (e.g. every decoder block's key and value cache).
 * The next three read the step's position t = *pos from device memory (int32), so that a CUDA graph captured once
 * serves every step of a key-length bucket:
 *   decode_step_bias: bias (H, 1, Tk) fp32 = table[bucket(k - t), h] (buckets as position_bias.cuh, table (NB, H)
 *     fp32) for k <= t and -inf for k > t (the causal rule folded in: exp(-inf) = 0 leaves the softmax of the
 *     other keys bit-identical to a causal mask). Assigned (=).
 *   decode_cache_append: kcache/vcache (rows, Tmax, row_bytes) [r, t, :] = knew/vnew (rows, row_bytes) [r, :]
 *     (rows = R * H, row_bytes = Dk * dtype size). Assigned (=).
 *   decode_qkv_append: the fused projection qkv (R, 3, H, Dk) [row r: q | k | v] split: q (R, H, Dk) = qkv[:, 0],
 *     kcache/vcache (R, H, Tmax, Dk) [r, h, t, :] = qkv[r, 1 / 2, h, :] (row_bytes = Dk * dtype size). Assigned (=).
 *   decode_greedy_update: one greedy step of the search on the device. For each row r with item b = slot_item[r]
 *     (-1 = padding slot) still unfinished (fin[b] == 0): k = argmax[r], seq (B, ML) int32 [b, t + 1] = k,
 *     fin[b] = 1 when k == eos or t + 2 >= ML (the length limit); tok[r] = k, or pad for finished/padding rows.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void decode_topk(float* out_val, int* out_idx, const void* logits, DType dt, int R, int V, int K, bool log_softmax,
                 const float* row_score, int ban_token, cudaStream_t stream);

void decode_gather_rows(void* dst, const void* src, const int* idx, int R, int S, size_t row_bytes, size_t seg_bytes,
                        size_t copy_bytes, cudaStream_t stream);

void decode_gather_rows_planes(void* dst, const void* src, const int* idx, int R, int S, size_t row_bytes,
                               size_t seg_bytes, size_t copy_bytes, int n_outer, ptrdiff_t outer_bytes, int n_inner,
                               ptrdiff_t inner_bytes, cudaStream_t stream);

void decode_step_bias(float* bias, const float* table, const int* buckets, int rel_offset, int H, int Tk,
                      const int* pos, cudaStream_t stream);

void decode_cache_append(void* kcache, void* vcache, const void* knew, const void* vnew, int rows, int Tmax,
                         size_t row_bytes, const int* pos, cudaStream_t stream);

void decode_qkv_append(void* q, void* kcache, void* vcache, const void* qkv, int R, int H, int Tmax, size_t row_bytes,
                       const int* pos, cudaStream_t stream);

void decode_greedy_update(int* tok, int* seq, int* fin, const int* slot_item, const int* argmax, int R, int ML,
                          int eos, int pad, const int* pos, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
