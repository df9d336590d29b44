/*
 * decode_fused.cuh: fused kernels of the decoder step of model/generate.c (generation only: no backward).
 * They replace chains of small dependent kernels (CUDA-graph nodes) by one kernel each, with the roundings of
 * model/t5.c's eval forward (docs/numerics.md); only the order of fp32 sums differs from the unfused chain.
 *
 *   decode_add_rmsnorm: x (N, D) fp32 += branch (N, D) dt_b (skipped when branch is NULL), then
 *     out (N, D) dt_out = (w[d] * (x[n, d] * rstd[n])) * post_scale,  rstd[n] = 1 / sqrt(mean_d x[n, d]^2 + eps),
 *     w (D) fp32. = residual_dropout_add (p = 0) + rmsnorm_forward (fp32 weight) [+ scale_inplace + cast], with the
 *     same per-row summation order as rmsnorm_forward: bit-identical to that chain. x is updated in place (+=),
 *     out is assigned (=).
 *
 *   decode_attention: attention of nb query rows per (item, head) against one item's keys/values, fused: scores,
 *     bias, key mask, softmax and P V in one kernel; grid = I * H blocks.
 *       q row r = i * nb + b (b < nb), head h:  q + r * q_stride + h * Dk                         dt
 *       keys / values of item i, head h, key j: kc / vc + ((i * H + h) * T_stride + j) * Dk         dt
 *       n keys: *pos + 1 when pos != NULL (self-attention over the cache), else n_keys
 *       s[b, j] = round_dt(q . k_j) (fp32 accumulation; no rounding in fp32) + bias[h * bias_stride + j] (fp32,
 *                 bias may be NULL); key j is masked when mask (I, n_keys) int32 != NULL and mask[i, j] == 0
 *       p[b, :] = round_dt(softmax over the unmasked keys (fp32)); a row with every key masked is uniform 1/n
 *                 (as attention_softmax_forward)
 *       ctx (I * nb, H, Dk) dt [r, h, :] = round_dt(sum_j p[b, j] v_j) (fp32 accumulation)       (=)
 *     Append (self-attention, needs nb == 1 and pos): when knew != NULL, first
 *       kc / vc [(i * H + h) * T_stride + t] = knew / vnew + i * new_stride + h * Dk  (t = *pos)    (=)
 *     so the new key/value row is attended in the same launch (it replaces decode_qkv_append).
     hist (self-attention, nb == 1; NULL = off) (I, hist_stride) int32: key j of row i is read from cache row
       hist[i, j] instead of row i (beam search keeps each beam's history as row indices instead of reordering the
       cache; the new row is still appended to row i).
 *     cap: the most keys a launch may see (n_keys, or T_stride for the cache); shared memory is
 *     4 * (nb * (Dk + cap) + cap + 2048) bytes: decode_attention_fits says whether that fits (else the unfused chain).
 *
 *   decode_beam_select: the running-beam half of one HF beam-search step on the device (model/generate.c keeps the
 *     finished-hypotheses half on the host, a few steps behind). Per slot (I blocks) of nb <= 8 beams, t = *pos:
 *       candidates = the 2 nb best of topv/topi (I * nb, K) fp32 / int32 (decode_topk: log-softmax + running score)
 *         in (value desc, beam * V + token asc) order; a candidate hits when its token is eos or t + 2 >= ML;
 *       next running beams = the nb best candidates after adding -1e9 (fp32) to the hits (ties: earlier first);
 *       tok (I * nb) int32 = their tokens, score (I * nb) fp32 = their values (with the -1e9)             (=)
 *       hist (I * nb, hist_stride) int32 rows: row (slot, j) [0, t] = the old row of beam src_j [0, t],
 *         [t + 1] = the row's own index (where the next step appends)                                    (=)
 *     The same rules and fp32 operations as the host bookkeeping, so both sides pick the same beams.
 *   decode_gather_hist: cache compaction with histories: over n_outer x n_inner planes (as decode_gather_rows_planes),
 *     dst (R, H, Tmax, pos_bytes) [r, h, j] = src [hist[idx[r], j], h, j] for j < n_pos                 (=)
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void decode_add_rmsnorm(void* out, DType dt_out, float* x, const void* branch, DType dt_b, const float* w, int N,
                        int D, float eps, float post_scale, cudaStream_t stream);

bool decode_attention_fits(int nb, int Dk, int cap);

// kernel variants of decode_attention (same contract; sums in different fixed orders): AUTO = WIDE for grids up to
// 2048 (item, head) pairs, else WARP (or BLOCK / WIDE / WARP with the environment variable
// T5TRAIN_GEN_ATTN_LARGE=block|wide|warp, which then decides every grid of 1024 pairs or more).
// WIDE: 256 threads per (item, head), 4 threads per key; BLOCK: 128 threads, a thread per key and per (row, d);
// WARP: a warp per (item, head) (Dk 64 or 128, nb <= 8, cap <= 128; else BLOCK).
// SPLIT: 4 warps per (item, head) split its keys while the grid fits one wave (3 blocks per SM), else 1 warp per pair
// (4 pairs per block); SPLIT1: always 1 warp per pair. 8 lanes per key; keys and values loaded in chunks of rounds, the
// first chunk before the grid dependency wait (every variant is launched with PDL, cuda/pdl.cuh); bf16/fp16 Dk
// 64/128/256 (fp32 32/64/128), nb <= 4. AUTO takes SPLIT for one query row (self-attention and greedy cross-attention)
// and the rules above otherwise (T5TRAIN_GEN_ATTN=split|split1|wide|block|warp|bulk forces one variant for every grid).
// BULK (cross-attention only: no pos, append or hist; sm_90): a block of 128 threads per pair whose K and V rows are
// staged in shared memory by bulk copies (TMA, mbarrier) issued before the grid dependency wait; bf16/fp16 Dk 64-512,
// fp32 Dk 32-256 (nb <= 4; 2-4 rows: Dk <= 128), 2 n Dk sizeof(X) + ~4 (nb + 1) n bytes of shared
// memory within the device's opt-in limit; other shapes fall back to AUTO's choice. AUTO takes it for cross-attention
// with <= 48 KB per block: every grid of 2-4 query rows (beams), and one-row grids beyond SPLIT's one wave (> 3 blocks
// per SM) (T5TRAIN_GEN_ATTN_BULK=0: not).
typedef enum {
    DA_IMPL_AUTO = 0,
    DA_IMPL_WIDE = 1,
    DA_IMPL_BLOCK = 2,
    DA_IMPL_WARP = 3,
    DA_IMPL_SPLIT = 4,
    DA_IMPL_SPLIT1 = 5,
    DA_IMPL_BULK = 6
} DecodeAttnImpl;

// "auto", "wide", "block", "warp", "split", "split1", "bulk" -> the variant; NULL or another name -> DA_IMPL_AUTO
DecodeAttnImpl decode_attention_impl_by_name(const char* name);

void decode_attention(void* ctx, const void* q, int q_stride, void* kc, void* vc, int T_stride, const int* pos,
                      int n_keys, int cap, const float* bias, int bias_stride, const int* mask, const void* knew,
                      const void* vnew, int new_stride, const int* hist, int hist_stride, int I, int nb, int H, int Dk,
                      DType dt, DecodeAttnImpl impl, cudaStream_t stream);

bool decode_beam_select_fits(int nb, int hist_stride);
void decode_beam_select(int* tok, float* score, int* hist, int hist_stride, const float* topv, const int* topi, int I,
                        int nb, int K, int V, int ML, int eos, const int* pos, cudaStream_t stream);

void decode_gather_hist(void* dst, const void* src, const int* idx, const int* hist, int hist_stride, int R, int H,
                        int Tmax, size_t pos_bytes, int n_pos, int n_outer, ptrdiff_t outer_bytes, int n_inner,
                        ptrdiff_t inner_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
