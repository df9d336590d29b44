/*
 * decode.cu: generation kernels (see decode.cuh for the contract).
 *
 * decode_topk: one block per row. Pass 1 (log_softmax only): fp32 max and sum of exp over the row (block
 * reductions, fixed order: deterministic). Then K selection rounds: each round is a block argmax over the
 * row restricted to candidates that come strictly after the previous winner in (value desc, id asc) order,
 * so no selected set has to be stored. K * V / blockDim work per row: tiny next to the lm_head GEMM for the
 * K = 2 * num_beams <= 128 we need.
 * decode_gather_rows: grid (S, R); 16-, 4- or 1-byte words depending on the alignment of every pointer,
 * stride and length.
 * decode_step_bias / decode_cache_append / decode_greedy_update read the step's position from device memory, so
 * that one captured CUDA graph serves every position of a Tk bucket (model/generate.c).
 */
#include <climits>

#include "common.cuh"
#include "decode.cuh"

// ---- CUDA kernels

#define TOPK_BLOCK 512

// (v, i) comes before (bv, bi) in (value desc, index asc) order
__device__ __forceinline__ bool topk_before(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

template <typename T>
__global__ void decode_topk_kernel1(float* out_val, int* out_idx, const T* logits, int V, int K, bool log_softmax,
                                    const float* row_score, int ban_token) {
    __shared__ float red[32];
    __shared__ float win_v[32];
    __shared__ int win_i[32];
    const int r = blockIdx.x;
    const T* x = logits + (size_t)r * V;
    float mx = 0.0f, logsum = 0.0f;
    if (log_softmax) {
        float m = -INFINITY;
        for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, to_f32(x[i]));
        mx = block_reduce_max(m, red);
        float s = 0.0f;
        for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(to_f32(x[i]) - mx);
        logsum = logf(block_reduce_sum(s, red));
    }
    const float score = row_score ? row_score[r] : 0.0f;
    float prev_v = INFINITY;
    int prev_i = -1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int j = 0; j < K; j++) {
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float v = to_f32(x[i]);
            if (log_softmax) v = (v - mx) - logsum;
            if (i == ban_token) v = -INFINITY;
            v = v + score;
            // eligible: strictly after the previous winner
            if (!topk_before(prev_v, prev_i, v, i)) continue;
            if (topk_before(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (topk_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        __syncthreads();
        if (lane == 0) {
            win_v[warp] = bv;
            win_i[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            bv = lane < nwarps ? win_v[lane] : -INFINITY;
            bi = lane < nwarps ? win_i[lane] : INT_MAX;
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (topk_before(ov, oi, bv, bi)) {
                    bv = ov;
                    bi = oi;
                }
            }
            if (lane == 0) {
                win_v[0] = bv;
                win_i[0] = bi;
            }
        }
        __syncthreads();
        prev_v = win_v[0];
        prev_i = win_i[0];
        if (threadIdx.x == 0) {
            out_val[(size_t)r * K + j] = prev_v;
            out_idx[(size_t)r * K + j] = prev_i == INT_MAX ? 0 : prev_i;
        }
    }
}

// grid (S, R, planes); plane p at word offset (p / n_inner) * outer_w + (p % n_inner) * inner_w of dst and src
template <typename W>
__global__ void decode_gather_rows_kernel1(W* dst, const W* src, const int* idx, size_t row_w, size_t seg_w,
                                           size_t copy_w, int n_inner, ptrdiff_t outer_w, ptrdiff_t inner_w) {
    const int h = blockIdx.x, r = blockIdx.y, p = blockIdx.z;
    const ptrdiff_t po = (ptrdiff_t)(p / n_inner) * outer_w + (ptrdiff_t)(p % n_inner) * inner_w;
    W* d = dst + po + (size_t)r * row_w + (size_t)h * seg_w;
    const W* s = src + po + (size_t)idx[r] * row_w + (size_t)h * seg_w;
    for (size_t i = threadIdx.x; i < copy_w; i += blockDim.x) d[i] = s[i];
}


// bias (H, Tk): block per head
__global__ void decode_step_bias_kernel1(float* bias, const float* table, const int* buckets, int rel_offset, int H,
                                         int Tk, const int* pos) {
    const int t = *pos, h = blockIdx.x;
    for (int k = threadIdx.x; k < Tk; k += blockDim.x)
        bias[(size_t)h * Tk + k] = k <= t ? table[(size_t)buckets[k - t + rel_offset] * H + h] : -INFINITY;
}

// grid (rows, 2): y = 0 keys, 1 values; W words of a Dk row
template <typename W>
__global__ void decode_cache_append_kernel1(W* kc, W* vc, const W* knew, const W* vnew, int Tmax, int dk_w,
                                            const int* pos) {
    const size_t row = blockIdx.x;
    const int t = *pos;
    W* c = blockIdx.y ? vc : kc;
    const W* n = blockIdx.y ? vnew : knew;
    for (int i = threadIdx.x; i < dk_w; i += blockDim.x) c[(row * Tmax + t) * dk_w + i] = n[row * dk_w + i];
}

// grid (R*H, 3): y = 0 q, 1 k, 2 v; row = r * H + h reads qkv[r, y, h, :] (W words per Dk row)
template <typename W>
__global__ void decode_qkv_append_kernel1(W* q, W* kc, W* vc, const W* qkv, int H, int Tmax, int dk_w,
                                          const int* pos) {
    const size_t row = blockIdx.x;
    const int y = blockIdx.y, t = *pos;
    const size_t r = row / H, h = row % H;
    const W* src = qkv + ((r * 3 + y) * H + h) * dk_w;
    W* dst = y == 0 ? q + row * dk_w : (y == 1 ? kc : vc) + (row * Tmax + t) * dk_w;
    for (int i = threadIdx.x; i < dk_w; i += blockDim.x) dst[i] = src[i];
}

// one block; rows r of R
__global__ void decode_greedy_update_kernel1(int* tok, int* seq, int* fin, const int* slot_item, const int* argmax,
                                             int R, int ML, int eos, int pad, const int* pos) {
    const int t = *pos, c = t + 1;
    const bool at_max = c + 1 >= ML;
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        const int b = slot_item[r];
        int k = pad;
        if (b >= 0 && !fin[b]) {
            k = argmax[r];
            seq[(size_t)b * ML + c] = k;
            if (k == eos || at_max) fin[b] = 1;
        }
        tok[r] = k;
    }
}

// ---- launchers

template <typename T>
static void decode_topk_t(float* out_val, int* out_idx, const void* logits, int R, int V, int K, bool log_softmax,
                          const float* row_score, int ban_token, cudaStream_t stream) {
    decode_topk_kernel1<T><<<R, TOPK_BLOCK, 0, stream>>>(out_val, out_idx, (const T*)logits, V, K, log_softmax,
                                                         row_score, ban_token);
}

void decode_topk(float* out_val, int* out_idx, const void* logits, DType dt, int R, int V, int K, bool log_softmax,
                 const float* row_score, int ban_token, cudaStream_t stream) {
    if (R <= 0) return;
    if (K < 1 || K > V) t5_die(T5_EXIT_FAILURE, "decode_topk: K = %d outside [1, V = %d]", K, V);
    DTYPE_DISPATCH(dt, decode_topk_t, out_val, out_idx, logits, R, V, K, log_softmax, row_score, ban_token, stream);
    CUDA_LAUNCH_CHECK();
}

void decode_gather_rows_planes(void* dst, const void* src, const int* idx, int R, int S, size_t row_bytes,
                               size_t seg_bytes, size_t copy_bytes, int n_outer, ptrdiff_t outer_bytes, int n_inner,
                               ptrdiff_t inner_bytes, cudaStream_t stream) {
    if (R <= 0 || S <= 0 || copy_bytes == 0 || n_outer <= 0 || n_inner <= 0) return;
    if ((size_t)n_outer * n_inner > 65535 || R > 65535)
        t5_die(T5_EXIT_FAILURE, "decode_gather_rows: %d rows x %d planes exceed the grid", R, n_outer * n_inner);
    const uintptr_t all = (uintptr_t)dst | (uintptr_t)src | row_bytes | seg_bytes | copy_bytes |
                          (uintptr_t)outer_bytes | (uintptr_t)inner_bytes;
    dim3 grid((unsigned)S, (unsigned)R, (unsigned)(n_outer * n_inner));
    if ((all & 15u) == 0) {
        decode_gather_rows_kernel1<uint4><<<grid, 128, 0, stream>>>((uint4*)dst, (const uint4*)src, idx, row_bytes / 16,
                                                                    seg_bytes / 16, copy_bytes / 16, n_inner,
                                                                    outer_bytes / 16, inner_bytes / 16);
    } else if ((all & 3u) == 0) {
        decode_gather_rows_kernel1<uint32_t><<<grid, 128, 0, stream>>>((uint32_t*)dst, (const uint32_t*)src, idx,
                                                                       row_bytes / 4, seg_bytes / 4, copy_bytes / 4,
                                                                       n_inner, outer_bytes / 4, inner_bytes / 4);
    } else {
        decode_gather_rows_kernel1<uint8_t><<<grid, 128, 0, stream>>>((uint8_t*)dst, (const uint8_t*)src, idx,
                                                                      row_bytes, seg_bytes, copy_bytes, n_inner,
                                                                      outer_bytes, inner_bytes);
    }
    CUDA_LAUNCH_CHECK();
}

void decode_gather_rows(void* dst, const void* src, const int* idx, int R, int S, size_t row_bytes, size_t seg_bytes,
                        size_t copy_bytes, cudaStream_t stream) {
    decode_gather_rows_planes(dst, src, idx, R, S, row_bytes, seg_bytes, copy_bytes, 1, 0, 1, 0, stream);
}

void decode_step_bias(float* bias, const float* table, const int* buckets, int rel_offset, int H, int Tk,
                      const int* pos, cudaStream_t stream) {
    if (H <= 0 || Tk <= 0) return;
    decode_step_bias_kernel1<<<H, 128, 0, stream>>>(bias, table, buckets, rel_offset, H, Tk, pos);
    CUDA_LAUNCH_CHECK();
}

void decode_cache_append(void* kcache, void* vcache, const void* knew, const void* vnew, int rows, int Tmax,
                         size_t row_bytes, const int* pos, cudaStream_t stream) {
    if (rows <= 0 || row_bytes == 0) return;
    const uintptr_t all = (uintptr_t)kcache | (uintptr_t)vcache | (uintptr_t)knew | (uintptr_t)vnew | row_bytes;
    dim3 grid((unsigned)rows, 2);
    if ((all & 15u) == 0) {
        decode_cache_append_kernel1<uint4><<<grid, 32, 0, stream>>>((uint4*)kcache, (uint4*)vcache, (const uint4*)knew,
                                                                    (const uint4*)vnew, Tmax, (int)(row_bytes / 16),
                                                                    pos);
    } else if ((all & 3u) == 0) {
        decode_cache_append_kernel1<uint32_t><<<grid, 64, 0, stream>>>((uint32_t*)kcache, (uint32_t*)vcache,
                                                                       (const uint32_t*)knew, (const uint32_t*)vnew,
                                                                       Tmax, (int)(row_bytes / 4), pos);
    } else {
        decode_cache_append_kernel1<uint8_t><<<grid, 128, 0, stream>>>((uint8_t*)kcache, (uint8_t*)vcache,
                                                                       (const uint8_t*)knew, (const uint8_t*)vnew,
                                                                       Tmax, (int)row_bytes, pos);
    }
    CUDA_LAUNCH_CHECK();
}

void decode_greedy_update(int* tok, int* seq, int* fin, const int* slot_item, const int* argmax, int R, int ML,
                          int eos, int pad, const int* pos, cudaStream_t stream) {
    if (R <= 0) return;
    decode_greedy_update_kernel1<<<1, 256, 0, stream>>>(tok, seq, fin, slot_item, argmax, R, ML, eos, pad, pos);
    CUDA_LAUNCH_CHECK();
}

void decode_qkv_append(void* q, void* kcache, void* vcache, const void* qkv, int R, int H, int Tmax, size_t row_bytes,
                       const int* pos, cudaStream_t stream) {
    if (R <= 0 || H <= 0 || row_bytes == 0) return;
    const uintptr_t all = (uintptr_t)q | (uintptr_t)kcache | (uintptr_t)vcache | (uintptr_t)qkv | row_bytes;
    dim3 grid((unsigned)(R * H), 3);
    if ((all & 15u) == 0) {
        decode_qkv_append_kernel1<uint4><<<grid, 32, 0, stream>>>((uint4*)q, (uint4*)kcache, (uint4*)vcache,
                                                                  (const uint4*)qkv, H, Tmax, (int)(row_bytes / 16), pos);
    } else if ((all & 3u) == 0) {
        decode_qkv_append_kernel1<uint32_t><<<grid, 64, 0, stream>>>((uint32_t*)q, (uint32_t*)kcache,
                                                                     (uint32_t*)vcache, (const uint32_t*)qkv, H, Tmax,
                                                                     (int)(row_bytes / 4), pos);
    } else {
        decode_qkv_append_kernel1<uint8_t><<<grid, 128, 0, stream>>>((uint8_t*)q, (uint8_t*)kcache, (uint8_t*)vcache,
                                                                     (const uint8_t*)qkv, H, Tmax, (int)row_bytes, pos);
    }
    CUDA_LAUNCH_CHECK();
}
