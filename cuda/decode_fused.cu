/*
 * decode_fused.cu: fused decoder-step kernels of model/generate.c (contract in decode_fused.cuh).
 *
 * decode_add_rmsnorm: one warp per row, the loop structure of rmsnorm_forward_kernel1 (chunks of EW_CHUNK per lane,
 * then a warp reduction), so the fp32 sum of squares, rstd and the output are bit-identical to
 * residual_dropout_add + rmsnorm_forward (+ scale_inplace + cast); the residual row is written back on the way.
 *
 * decode_attention, five variants (decode_fused.cuh: DecodeAttnImpl; the launcher picks by grid size):
 * WIDE: one block of DA_THREADS per (item, head), three phases over shared memory:
 *   1. scores: DA_TPK adjacent threads per key (all nb query rows against it), each reading every DA_TPK-th 16-byte
 *      packet of the key row (loads unrolled: the kernel is latency-bound, not bandwidth-bound), the partial dots
 *      added by shuffles; q rows come from shared memory (broadcast);
 *   2. softmax: one warp per query row over the scores in shared memory (fp32, as attention_softmax_forward);
 *   3. P V: a thread owns a unit of 8 (bf16/fp16) or 4 (fp32) consecutive d of one query row (one 16-byte value load
 *      per key) and the keys j = g mod G, G = DA_THREADS / units key groups; the groups' partial sums are added in
 *      group order. Every sum has a fixed order: deterministic.
 * BLOCK: the same kernel with DA_THREADS / 2 threads, one thread per key and one per (query row, d) in P V.
 * WARP: one warp per (item, head) (decode_attention_warp_kernel1): lane l owns keys l, l + 32, ... in registers
 *   (scores and softmax by shuffles) and Dk / 32 consecutive d in P V; no block barrier.
 * SPLIT: keys split over warps, the first chunk of K / V in registers before the grid wait
 *   (decode_attention_split_kernel1).
 * BULK (cross-attention): a block per pair whose whole K and V are staged in shared memory by bulk copies (TMA) issued
 *   before the grid wait (decode_attention_bulk_kernel1).
 * decode_beam_select / decode_gather_hist: the device half of beam search (contract in the header).
 */
#include <climits>
#include <cstdlib>
#include <cstring>

#include "common.cuh"
#include "decode_fused.cuh"
#include "pdl.cuh"

#define DA_THREADS 256
#define DA_TPK 4  // threads per key in the scores phase
#define DA_MAX_SMEM (48 * 1024)
#define DA_MAX_NB 64
#define BS_MAX_NB 8  // decode_beam_select: beams per item (one thread selects: O(nb^3) compares)

// ---- CUDA kernels

template <typename TO>
__global__ void decode_add_rmsnorm_kernel1(TO* out, float* x, const void* branch, bool branch_bf16, bool branch_f16,
                                           const float* w, int N, int D, float eps, float post_scale, bool vec) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    pdl_wait();
    pdl_trigger();
    if (row >= N) return;
    float* xr = x + (size_t)row * D;
    float ss = 0.0f;
#pragma unroll 4
    for (int i0 = lane * EW_CHUNK; i0 < D; i0 += 32 * EW_CHUNK) {
        float v[EW_CHUNK];
        load_chunk(xr, i0, D, vec, v);
        if (branch) {
            float b[EW_CHUNK];
            if (branch_bf16) load_chunk((const __nv_bfloat16*)branch + (size_t)row * D, i0, D, vec, b);
            else if (branch_f16) load_chunk((const __half*)branch + (size_t)row * D, i0, D, vec, b);
            else load_chunk((const float*)branch + (size_t)row * D, i0, D, vec, b);
#pragma unroll
            for (int j = 0; j < EW_CHUNK; j++) v[j] += b[j];
            store_chunk(xr, i0, D, vec, v);
        }
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) ss += v[j] * v[j];
    }
    ss = warp_reduce_sum(ss);
    const float r = rsqrtf(ss / (float)D + eps);
    TO* outr = out + (size_t)row * D;
#pragma unroll 4
    for (int i0 = lane * EW_CHUNK; i0 < D; i0 += 32 * EW_CHUNK) {
        float v[EW_CHUNK], wv[EW_CHUNK];
        load_chunk(xr, i0, D, vec, v);
        load_chunk(w, i0, D, vec, wv);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) {
            v[j] = wv[j] * (v[j] * r);
            v[j] = v[j] * post_scale;
        }
        store_chunk(outr, i0, D, vec, v);
    }
}

// kernel2: rows of D <= 32 * EW_CHUNK * NCH on the vector path, every chunk of a lane in registers: the norm weight
// is loaded before the grid dependency wait (it is not written during the step), x and the branch in one round of
// loads after it. The same chunks per lane in the same order as kernel1: bit-identical results.
template <typename TO, int NCH>
__global__ void decode_add_rmsnorm_kernel2(TO* out, float* x, const void* branch, bool branch_bf16, bool branch_f16,
                                           const float* w, int N, int D, float eps, float post_scale) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    float wv[NCH][EW_CHUNK];
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int i0 = (c * 32 + lane) * EW_CHUNK;
        if (i0 < D) load_chunk(w, i0, D, true, wv[c]);
    }
    pdl_wait();
    pdl_trigger();
    if (row >= N) return;
    float* xr = x + (size_t)row * D;
    float v[NCH][EW_CHUNK], b[NCH][EW_CHUNK];
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int i0 = (c * 32 + lane) * EW_CHUNK;
        if (i0 >= D) break;
        load_chunk(xr, i0, D, true, v[c]);
        if (branch) {
            if (branch_bf16) load_chunk((const __nv_bfloat16*)branch + (size_t)row * D, i0, D, true, b[c]);
            else if (branch_f16) load_chunk((const __half*)branch + (size_t)row * D, i0, D, true, b[c]);
            else load_chunk((const float*)branch + (size_t)row * D, i0, D, true, b[c]);
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int i0 = (c * 32 + lane) * EW_CHUNK;
        if (i0 >= D) break;
        if (branch) {
#pragma unroll
            for (int j = 0; j < EW_CHUNK; j++) v[c][j] += b[c][j];
            store_chunk(xr, i0, D, true, v[c]);
        }
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) ss += v[c][j] * v[c][j];
    }
    ss = warp_reduce_sum(ss);
    const float r = rsqrtf(ss / (float)D + eps);
    TO* outr = out + (size_t)row * D;
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int i0 = (c * 32 + lane) * EW_CHUNK;
        if (i0 >= D) break;
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) {
            v[c][j] = wv[c][j] * (v[c][j] * r);
            v[c][j] = v[c][j] * post_scale;
        }
        store_chunk(outr, i0, D, true, v[c]);
    }
}

// the stored score of a key: NOTE(numerics): Q K^T rounded to X (t5.c / HF autocast), the bias added in fp32; a
// masked key is -inf (exp gives 0, as attention_softmax_forward)
template <typename T>
__device__ __forceinline__ float da_score(float dot, bool has_bias, float bj, bool masked) {
    float v = round_to<T>(dot);
    if (has_bias) v += bj;
    return masked ? -INFINITY : v;
}

// partial dots of a key row with the fp32 query rows in shared memory, for the nb <= NBT rows at once: thread `sub`
// of the DA_TPK threads of a key takes the 16-byte packets (VEC) or elements sub, sub + DA_TPK, ... (sequential sum)
template <typename T, bool VEC, int NBT, int TPK>
__device__ __forceinline__ void da_key_dots(const T* kr, const float* qs, int nb, int Dk, int sub, float (&s)[NBT]) {
    if (VEC) {
        constexpr int P = Vec<T>::size;
#pragma unroll 4
        for (int d0 = sub * P; d0 < Dk; d0 += TPK * P) {
            const Vec<T> kv = load_vec(kr + d0);
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= nb) break;
                float acc = s[b];
#pragma unroll
                for (int e = 0; e < P; e++) acc += qs[b * Dk + d0 + e] * to_f32(kv.v[e]);
                s[b] = acc;
            }
        }
    } else {
#pragma unroll 4
        for (int d = sub; d < Dk; d += TPK) {
            const float kv = to_f32(kr[d]);
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= nb) break;
                s[b] += qs[b * Dk + d] * kv;
            }
        }
    }
}

template <typename T, bool VEC, int NBT, int TPK, bool VPV>
__global__ void decode_attention_kernel1(T* ctx, const T* q, int q_stride, T* kc, T* vc, int T_stride, const int* pos,
                                         int n_keys, int cap, const float* bias, int bias_stride, const int* mask,
                                         const T* knew, const T* vnew, int new_stride, const int* hist,
                                         int hist_stride, int nb, int H, int Dk) {
    constexpr int VP = VEC && VPV ? Vec<T>::size : 1;  // elements of a P V unit
    extern __shared__ float da_smem[];
    pdl_wait();  // nothing before it (cuda/pdl.cuh)
    pdl_trigger();
    const int i = blockIdx.x / H, h = blockIdx.x % H;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const int n = pos ? *pos + 1 : n_keys;
    float* qs = da_smem;                          // (nb, Dk)
    float* ps = qs + (size_t)nb * Dk;             // (nb, cap) scores, then probabilities
    float* part = ps + (size_t)nb * cap;          // (blockDim, VP) P V partial sums
    int* hrow = (int*)(part + (size_t)blockDim.x * VP);  // (cap) cache row of each key (hist), else unused
    const size_t kvo = ((size_t)i * H + h) * (size_t)T_stride * Dk;
    const size_t hstep = (size_t)H * T_stride * Dk;  // one cache row
    // key j of this item lives at kc + kvo + koff(j): its own row, or row hist[i, j] (beam search without reordering)
#define DA_KOFF(j) \
    ((hist ? ((ptrdiff_t)hrow[j] - (ptrdiff_t)i) * (ptrdiff_t)hstep : (ptrdiff_t)0) + (ptrdiff_t)(j) * Dk)
    if (knew) {  // self-attention: the new key/value row at position t = n - 1 (nb == 1: row r = i)
        const size_t dst = kvo + (size_t)(n - 1) * Dk, src = (size_t)i * new_stride + (size_t)h * Dk;
        for (int d = tid; d < Dk; d += blockDim.x) {
            kc[dst + d] = knew[src + d];
            vc[dst + d] = vnew[src + d];
        }
    }
    for (int e = tid; e < nb * Dk; e += blockDim.x) {
        const int b = e / Dk, d = e % Dk;
        qs[e] = to_f32(q[((size_t)i * nb + b) * q_stride + (size_t)h * Dk + d]);
    }
    if (hist)
        for (int j = tid; j < n; j += blockDim.x) hrow[j] = hist[(size_t)i * hist_stride + j];
    __syncthreads();  // q and hist in shared memory; the appended row visible to the block
    // ---- 1. scores: TPK adjacent threads per key, partial dots added by shuffles (fixed order)
    const int kpp = blockDim.x / TPK, sub = tid % TPK;
    for (int j0 = 0; j0 < n; j0 += kpp) {
        const int j = j0 + tid / TPK;
        float s[NBT];
#pragma unroll
        for (int b = 0; b < NBT; b++) s[b] = 0.0f;
        if (j < n) da_key_dots<T, VEC, NBT, TPK>(kc + kvo + DA_KOFF(j), qs, nb, Dk, sub, s);
#pragma unroll
        for (int b = 0; b < NBT; b++) {
            if (b >= nb) break;
#pragma unroll
            for (int o = TPK / 2; o > 0; o >>= 1) s[b] += __shfl_xor_sync(0xffffffffu, s[b], o);
        }
        if (j < n && sub == 0) {
            const bool masked = mask && mask[(size_t)i * n_keys + j] == 0;
            const float bj = bias ? bias[(size_t)h * bias_stride + j] : 0.0f;
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= nb) break;
                ps[(size_t)b * cap + j] = da_score<T>(s[b], bias != NULL, bj, masked);
            }
        }
    }
    __syncthreads();
    // ---- 2. softmax, one warp per query row (masked keys hold -inf: exp gives 0, as attention_softmax_forward)
    for (int b = warp; b < nb; b += nwarps) {
        float* pr = ps + (size_t)b * cap;
        float mx = -INFINITY;
        for (int j = lane; j < n; j += 32) mx = fmaxf(mx, pr[j]);
        mx = warp_reduce_max(mx);
        const bool all_masked = mx == -INFINITY;
        float sum = 0.0f;
        if (!all_masked) {
            for (int j = lane; j < n; j += 32) sum += expf(pr[j] - mx);
            sum = warp_reduce_sum(sum);
        }
        const float inv = all_masked ? 0.0f : 1.0f / sum;
        for (int j = lane; j < n; j += 32) {
            const float p = all_masked ? 1.0f / (float)n : expf(pr[j] - mx) * inv;
            pr[j] = round_to<T>(p);
        }
    }
    __syncthreads();
    // ---- 3. ctx = P V: unit u = VP consecutive d of one query row; G key groups j = g mod G when the units do not
    // fill the block, their partial sums added in group order (fp32 accumulation, one rounding)
    const int dku = Dk / VP, units = nb * dku;
    const T* vb = vc + kvo;
    const int G = units < (int)blockDim.x ? (int)blockDim.x / units : 1;
    for (int u0 = 0; u0 < units; u0 += G > 1 ? units : (int)blockDim.x) {
        const int g = G > 1 ? tid / units : 0, u = G > 1 ? tid % units : u0 + tid;
        float acc[VP];
#pragma unroll
        for (int e = 0; e < VP; e++) acc[e] = 0.0f;
        const bool active = g < G && u < units;
        const int b = u / dku, d0 = (u % dku) * VP;
        if (active) {
            const float* pr = ps + (size_t)b * cap;
#pragma unroll 4
            for (int j = g; j < n; j += G) {
                const float pj = pr[j];
                if (VP > 1) {
                    const Vec<T> vv = load_vec(vb + DA_KOFF(j) + d0);
#pragma unroll
                    for (int e = 0; e < VP; e++) acc[e] += pj * to_f32(vv.v[e]);
                } else {
                    acc[0] += pj * to_f32(vb[DA_KOFF(j) + d0]);
                }
            }
        }
        if (G > 1) {
#pragma unroll
            for (int e = 0; e < VP; e++) part[(size_t)tid * VP + e] = acc[e];
            __syncthreads();
            if (tid < units) {
#pragma unroll
                for (int e = 0; e < VP; e++) {
                    float sum = 0.0f;
                    for (int gg = 0; gg < G; gg++) sum += part[((size_t)gg * units + tid) * VP + e];
                    acc[e] = sum;
                }
            }
        }
        if ((G > 1 && tid < units) || (G == 1 && active)) {
            T* out = ctx + (((size_t)i * nb + b) * H + h) * Dk + d0;
            if (VP > 1) {
                Vec<T> ov;
#pragma unroll
                for (int e = 0; e < VP; e++) ov.v[e] = from_f32<T>(acc[e]);
                store_vec(out, ov);
            } else {
                out[0] = from_f32<T>(acc[0]);
            }
        }
    }
#undef DA_KOFF
}


// ---- the warp variant: one warp per (item, head); lane c * 32 + l owns key j = 32 c + l in the scores and the
// softmax (registers, shuffles), and d in [DPL lane, DPL lane + DPL) in P V (the key's probability and cache row come
// by shuffle from the lane that owns the key). No block-wide barrier: 4 independent warps per block.
#define DW_WARPS 4
#define DW_MAXC 4  // keys per lane: at most 128 keys

template <typename T, int NBT, int DPL>
__global__ void decode_attention_warp_kernel1(T* ctx, const T* q, int q_stride, T* kc, T* vc, int T_stride,
                                              const int* pos, int n_keys, const float* bias, int bias_stride,
                                              const int* mask, const T* knew, const T* vnew, int new_stride,
                                              const int* hist, int hist_stride, int nb, int IH, int H) {
    constexpr int Dk = 32 * DPL, P = Vec<T>::size;
    extern __shared__ float dw_smem[];
    pdl_wait();  // nothing before it (cuda/pdl.cuh)
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ih = blockIdx.x * DW_WARPS + warp;
    if (ih >= IH) return;  // whole warps only; nothing below synchronises more than one warp
    const int i = ih / H, h = ih % H;
    const int n = pos ? *pos + 1 : n_keys;
    float* qs = dw_smem + (size_t)warp * NBT * Dk;  // (nb, Dk) this warp's query rows
    if (knew) {  // self-attention: the new key/value row at position t = n - 1 of row i
        const size_t dst = (((size_t)i * H + h) * T_stride + (n - 1)) * Dk;
        const size_t src = (size_t)i * new_stride + (size_t)h * Dk;
        for (int d = lane; d < Dk; d += 32) {
            kc[dst + d] = knew[src + d];
            vc[dst + d] = vnew[src + d];
        }
    }
    for (int e = lane; e < nb * Dk; e += 32)
        qs[e] = to_f32(q[((size_t)i * nb + e / Dk) * q_stride + (size_t)h * Dk + e % Dk]);
    __syncwarp();  // q in shared memory, the appended row visible to the warp
    float sc[DW_MAXC][NBT];
    int hr[DW_MAXC];
#pragma unroll
    for (int c = 0; c < DW_MAXC; c++) {
        const int j = lane + 32 * c;
        hr[c] = hist && j < n ? hist[(size_t)i * hist_stride + j] : i;
#pragma unroll
        for (int b = 0; b < NBT; b++) sc[c][b] = -INFINITY;
        if (j < n) {
            const T* kr = kc + (((size_t)hr[c] * H + h) * T_stride + j) * Dk;
            float acc[NBT];
#pragma unroll
            for (int b = 0; b < NBT; b++) acc[b] = 0.0f;
#pragma unroll
            for (int d0 = 0; d0 < Dk; d0 += P) {
                const Vec<T> kv = load_vec(kr + d0);
#pragma unroll
                for (int b = 0; b < NBT; b++) {
                    if (b >= nb) break;
#pragma unroll
                    for (int e = 0; e < P; e++) acc[b] += qs[b * Dk + d0 + e] * to_f32(kv.v[e]);
                }
            }
            const bool masked = mask && mask[(size_t)i * n_keys + j] == 0;
            const float bj = bias ? bias[(size_t)h * bias_stride + j] : 0.0f;
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                sc[c][b] = da_score<T>(acc[b], bias != NULL, bj, masked);
            }
        }
    }
    // softmax per query row over the lanes (keys >= n hold -inf and get probability 0)
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        if (b >= nb) break;
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < DW_MAXC; c++) mx = fmaxf(mx, sc[c][b]);
        mx = warp_reduce_max(mx);
        const bool all_masked = mx == -INFINITY;
        float sum = 0.0f;
        if (!all_masked) {
#pragma unroll
            for (int c = 0; c < DW_MAXC; c++) sum += lane + 32 * c < n ? expf(sc[c][b] - mx) : 0.0f;
            sum = warp_reduce_sum(sum);
        }
        const float inv = all_masked ? 0.0f : 1.0f / sum;
#pragma unroll
        for (int c = 0; c < DW_MAXC; c++) {
            const float p = lane + 32 * c >= n ? 0.0f : all_masked ? 1.0f / (float)n : expf(sc[c][b] - mx) * inv;
            sc[c][b] = round_to<T>(p);
        }
    }
    // P V
    float acc[NBT][DPL];
#pragma unroll
    for (int b = 0; b < NBT; b++)
#pragma unroll
        for (int e = 0; e < DPL; e++) acc[b][e] = 0.0f;
    const int d0 = lane * DPL;
#pragma unroll
    for (int c = 0; c < DW_MAXC; c++) {
        if (32 * c >= n) break;
#pragma unroll 8
        for (int l = 0; l < 32; l++) {
            const int j = 32 * c + l;
            if (j >= n) break;
            const int row = __shfl_sync(0xffffffffu, hr[c], l);
            const T* vr = vc + (((size_t)row * H + h) * T_stride + j) * Dk + d0;
            float v[DPL];
#pragma unroll
            for (int e = 0; e < DPL; e++) v[e] = to_f32(vr[e]);
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= nb) break;
                const float pb = __shfl_sync(0xffffffffu, sc[c][b], l);
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[b][e] += pb * v[e];
            }
        }
    }
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        if (b >= nb) break;
        T* out = ctx + (((size_t)i * nb + b) * H + h) * Dk + d0;
#pragma unroll
        for (int e = 0; e < DPL; e++) out[e] = from_f32<T>(acc[b][e]);
    }
}

// ---- the split variant: WPP warps per (item, head) split its keys (WPP = 4: one pair per block of DS_WARPS warps;
// WPP = 1: DS_WARPS independent pairs per block, no block barrier); DS_LPK lanes per key, lane `sub` of a key owns
// the DL = PPL * P consecutive d at sub * DL (PPL 16-byte packets) in both the scores and P V. Key j of round r is
// handled by warp (j % KPR) / 4 of the pair and lane group j % 4 of it: j = r * KPR + jw, KPR = 4 WPP keys.
// Latency first: keys and values are loaded RPRE rounds at a time, all loads of a chunk in flight together; the first
// chunk before the grid dependency wait (the caches are not written by the step's previous kernel; the new row of the
// append is not among them), so one round of loads after the wait (q, mask, bias) remains when the keys fit it.
// Scores go through shared memory to the softmax (pair max, then pair sum: two barriers), P V partial sums are added
// over the lanes of a d range (shuffles) and then over the pair's warps (shared memory, warp order): a fixed order,
// deterministic.
#define DS_WARPS 4
#define DS_LPK 8  // lanes per key

template <typename T, int PPL>
__device__ __forceinline__ void ds_load(Vec<T> (&v)[PPL], const T* p) {
#pragma unroll
    for (int k = 0; k < PPL; k++) v[k] = load_vec(p + k * Vec<T>::size);
}

// the score of a key (all NBT query rows) from its packets kv: dot over the lane's d range, then the DS_LPK lanes of
// the key (butterfly: every lane of the key ends with the same sum)
template <typename T, int NBT, int PPL>
__device__ __forceinline__ void ds_dots(const Vec<T> (&kv)[PPL], const float* qs, int nb, int Dk, int d0,
                                        float (&s)[NBT]) {
    constexpr int P = Vec<T>::size;
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        s[b] = 0.0f;
        if (b >= nb) continue;
#pragma unroll
        for (int k = 0; k < PPL; k++)
#pragma unroll
            for (int e = 0; e < P; e++) s[b] += qs[b * Dk + d0 + k * P + e] * to_f32(kv[k].v[e]);
#pragma unroll
        for (int o = DS_LPK / 2; o > 0; o >>= 1) s[b] += __shfl_xor_sync(0xffffffffu, s[b], o);
    }
}

template <int WPP>
__device__ __forceinline__ void ds_sync(void) {
    if (WPP == 1) __syncwarp();
    else __syncthreads();
}

// v[b] <- the max (MAX) or sum of v[b] over the pair's WPP warps (w0 .. w0 + WPP - 1), warps added in order; s_red
// (DS_WARPS, NBT) is written, then read after a ds_sync (the caller syncs before reusing it)
template <int WPP, int NBT, bool MAX>
__device__ __forceinline__ void ds_pair_reduce(float* v, float (*s_red)[NBT], int warp, int w0, int lane) {
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        const float r = MAX ? warp_reduce_max(v[b]) : warp_reduce_sum(v[b]);
        if (lane == 0) s_red[warp][b] = r;
    }
    ds_sync<WPP>();
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        float t = s_red[w0][b];
#pragma unroll
        for (int w = 1; w < WPP; w++) t = MAX ? fmaxf(t, s_red[w0 + w][b]) : t + s_red[w0 + w][b];
        v[b] = t;
    }
}

template <typename T, int NBT, int PPL, int RPRE, int WPP>
__global__ void __launch_bounds__(DS_WARPS * 32, 3)
    decode_attention_split_kernel1(T* ctx, const T* q, int q_stride, T* kc, T* vc, int T_stride, const int* pos,
                                   int n_keys, int cap, const float* bias, int bias_stride, const int* mask,
                                   const T* knew, const T* vnew, int new_stride, const int* hist, int hist_stride,
                                   int nb, int H, int IH) {
    constexpr int P = Vec<T>::size, DL = PPL * P, Dk = DS_LPK * DL, KPR = 4 * WPP, NT = 32 * WPP;
    extern __shared__ float ds_smem[];
    __shared__ float s_red[DS_WARPS][NBT];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane % DS_LPK;
    const int wl = warp % WPP, w0 = warp - wl, tl = wl * 32 + lane;  // the pair's warp / first warp / thread
    const int pair = blockIdx.x * (DS_WARPS / WPP) + warp / WPP;
    const int i = pair / H, h = pair % H;
    const int d0 = sub * DL, jw = 4 * wl + lane / DS_LPK;  // key of round r: r * KPR + jw
    const size_t per_pair = (size_t)nb * Dk + (size_t)nb * cap + (size_t)WPP * nb * Dk;
    float* qs = ds_smem + (size_t)(warp / WPP) * per_pair;  // (nb, Dk) query rows, fp32
    float* ps = qs + (size_t)nb * Dk;                         // (nb, cap) scores
    float* part = ps + (size_t)nb * cap;                      // (WPP, nb, Dk) P V partial sums
    const bool live = pair < IH;                              // warp-uniform (WPP = 1 only can be false)
    const int n = pos ? *pos + 1 : n_keys;
    const int npre = knew ? n - 1 : n;  // keys already in the cache before this launch
    const T* kb = kc + ((size_t)i * H + h) * (size_t)T_stride * Dk + d0;
    const T* vb = vc + ((size_t)i * H + h) * (size_t)T_stride * Dk + d0;
    const ptrdiff_t hstep = (ptrdiff_t)H * T_stride * Dk;  // one cache row
    // key j of this item: its own row, or row hist[i, j] (beam search without reordering)
#define DS_KOFF(j) \
    ((hist ? ((ptrdiff_t)hist[(size_t)i * hist_stride + (j)] - (ptrdiff_t)i) * hstep : (ptrdiff_t)0) + (ptrdiff_t)(j) * Dk)
    // the packets of RPRE rounds from round c0: keys < lim from the cache, the others zero
    Vec<T> kp[RPRE][PPL], vp[RPRE][PPL];
    auto load_chunk = [&](Vec<T>(&dst)[RPRE][PPL], const T* base, int c0, int lim) {
#pragma unroll
        for (int r = 0; r < RPRE; r++) {
            const int j = (c0 + r) * KPR + jw;
#pragma unroll
            for (int k = 0; k < PPL; k++) dst[r][k] = Vec<T>{};
            if (j < lim) ds_load<T, PPL>(dst[r], base + DS_KOFF(j));
        }
    };
    if (live) {
        load_chunk(kp, kb, 0, npre);
        load_chunk(vp, vb, 0, npre);
    }
    pdl_wait();
    pdl_trigger();
    if (!live) return;  // WPP = 1: whole warps, no block barrier below
    if (knew) {  // self-attention: the new key/value row at position t = n - 1 of row i
        const size_t dst = (((size_t)i * H + h) * T_stride + (n - 1)) * Dk, src = (size_t)i * new_stride + (size_t)h * Dk;
        for (int d = tl; d < Dk; d += NT) {
            kc[dst + d] = knew[src + d];
            vc[dst + d] = vnew[src + d];
        }
    }
    for (int e = tl; e < nb * Dk; e += NT) qs[e] = to_f32(q[((size_t)i * nb + e / Dk) * q_stride + (size_t)h * Dk + e % Dk]);
    ds_sync<WPP>();  // q in shared memory, the appended row visible to the pair
    // ---- scores (rounded to X, + bias, masked keys -inf) into ps; the running max of this lane's keys
    const int rounds = CEIL_DIV(n, KPR);
    float mx[NBT];
#pragma unroll
    for (int b = 0; b < NBT; b++) mx[b] = -INFINITY;
    for (int c0 = 0; c0 < rounds; c0 += RPRE) {  // pair-uniform
        if (c0 > 0) load_chunk(kp, kb, c0, n);
#pragma unroll
        for (int r = 0; r < RPRE; r++) {
            if (c0 + r >= rounds) break;  // pair-uniform
            const int j = (c0 + r) * KPR + jw;
            if (c0 == 0 && j >= npre && j < n) ds_load<T, PPL>(kp[r], kb + DS_KOFF(j));  // the appended row
            float s[NBT];
            ds_dots<T, NBT, PPL>(kp[r], qs, nb, Dk, d0, s);
            if (j >= n) continue;
            const bool masked = mask && mask[(size_t)i * n_keys + j] == 0;
            const float bj = bias ? bias[(size_t)h * bias_stride + j] : 0.0f;
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= nb) break;
                const float v = da_score<T>(s[b], bias != NULL, bj, masked);
                if (sub == 0) ps[(size_t)b * cap + j] = v;
                mx[b] = fmaxf(mx[b], v);
            }
        }
    }
    // ---- softmax over the pair's keys: max, then sum of exp (fp32, as attention_softmax_forward)
    ds_pair_reduce<WPP, NBT, true>(mx, s_red, warp, w0, lane);
    const float(&M)[NBT] = mx;  // the pair's maxima
    float inv[NBT];
    float sum[NBT];
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        sum[b] = 0.0f;
        if (b >= nb || M[b] == -INFINITY || sub != 0) continue;  // each key counted once (lane 0 of its group)
        for (int r = 0; r < rounds; r++) {
            const int j = r * KPR + jw;
            if (j < n) sum[b] += expf(ps[(size_t)b * cap + j] - M[b]);
        }
    }
    ds_sync<WPP>();  // every warp has read the maxima
    ds_pair_reduce<WPP, NBT, false>(sum, s_red, warp, w0, lane);
#pragma unroll
    for (int b = 0; b < NBT; b++) inv[b] = M[b] == -INFINITY ? 0.0f : 1.0f / sum[b];
    // ---- P V over this lane's keys and d range (probabilities rounded to X)
    float acc[NBT][DL];
#pragma unroll
    for (int b = 0; b < NBT; b++)
#pragma unroll
        for (int e = 0; e < DL; e++) acc[b][e] = 0.0f;
    for (int c0 = 0; c0 < rounds; c0 += RPRE) {
        if (c0 > 0) load_chunk(vp, vb, c0, n);
#pragma unroll
        for (int r = 0; r < RPRE; r++) {
            const int j = (c0 + r) * KPR + jw;
            if (j >= n) break;  // per lane: no shuffles until the reduction below
            if (c0 == 0 && j >= npre) ds_load<T, PPL>(vp[r], vb + DS_KOFF(j));  // the appended row
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= nb) break;
                // a row with every key masked is uniform 1/n (as attention_softmax_forward)
                const float p =
                    round_to<T>(M[b] == -INFINITY ? 1.0f / (float)n : expf(ps[(size_t)b * cap + j] - M[b]) * inv[b]);
#pragma unroll
                for (int k = 0; k < PPL; k++)
#pragma unroll
                    for (int e = 0; e < P; e++) acc[b][k * P + e] += p * to_f32(vp[r][k].v[e]);
            }
        }
    }
#undef DS_KOFF
    // lanes with the same d range (lane % DS_LPK), then the pair's warps in order
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        if (b >= nb) break;
#pragma unroll
        for (int e = 0; e < DL; e++) {
#pragma unroll
            for (int o = DS_LPK; o < 32; o <<= 1) acc[b][e] += __shfl_xor_sync(0xffffffffu, acc[b][e], o);
            if (lane < DS_LPK) part[((size_t)wl * nb + b) * Dk + d0 + e] = acc[b][e];
        }
    }
    ds_sync<WPP>();
    for (int e = tl; e < nb * Dk; e += NT) {
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < WPP; w++) t += part[(size_t)w * nb * Dk + e];
        const int b = e / Dk, d = e % Dk;
        ctx[(((size_t)i * nb + b) * H + h) * Dk + d] = from_f32<T>(t);
    }
}

// ---- the bulk variant (cross-attention: keys / values not written during the step): one block of DB_THREADS per
// (item, head). Warp 0 stages the pair's n key rows and n value rows in shared memory with bulk copies (cp.async.bulk,
// the TMA's 1-D copy, up to DB_CHUNK bytes each; completion counted in bytes on one mbarrier for K and one for V)
// issued BEFORE the grid dependency wait, so the whole pair is in flight while the previous kernel
// finishes and no registers hold it (several pairs per SM: 33 KB each at Ts 63, Dk 128 bf16: 6 blocks per SM, t5-3b's
// 1024 pairs in 1.3 waves). After the wait: q rows into registers (lane `sub` of a key's DB_LPK lanes owns
// the 16-byte packets sub, sub + 8, ... of the row: conflict-free shared loads), key bias / mask flags into shared
// memory; then
//   1. scores: DB_LPK lanes per key, per-lane sums over its packets in order, then a butterfly over the 8 lanes;
//   2. softmax: every warp computes the rows' max and sum of exp over the scores (the same code on the same data: the
//      same values in every warp, no barrier), as attention_softmax_forward;
//   3. P V: thread (g, u) owns the 16-byte unit u of each query row and the keys j = g mod G (p rounded to X on the
//      fly); the groups of a warp are added by shuffles (xor U, 2U, ...), the warps' (or groups') slices in order.
// Every sum has a fixed order: deterministic.
#define DB_THREADS 128
#define DB_LPK 8             // lanes per key in the scores
#define DB_STATIC_SMEM 1024  // bytes kept from the opt-in limit for the kernel's static shared memory (16 used)
#define DB_CHUNK 32768u      // bytes per bulk copy (beat 4 KB copies and per-thread cp.async: docs/generate.md run 9)

__device__ __forceinline__ unsigned db_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void db_mbar_init(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(db_smem_addr(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// one arrival on bar that expects `bytes` of transactions
__device__ __forceinline__ void db_expect_tx(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(db_smem_addr(bar)), "r"(bytes)
                 : "memory");
#endif
}

// the bulk copy of [src, src + bytes) to dst (16-byte multiples), completing `bytes` transactions on bar
__device__ __forceinline__ void db_bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     db_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(db_smem_addr(bar))
                 : "memory");
#endif
}

__device__ __forceinline__ void db_mbar_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = db_smem_addr(bar);
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(b), "r"(parity)
            : "memory");
#endif
}

// shared memory of one block (byte offsets): K (cap, Dk) X at 0, V (cap, Dk) X, scores (nb, cap) fp32, key bias / mask
// flags (cap) fp32 (-inf: masked), P V slices (4, nb, Dk) fp32 (over K when K is large enough: K is dead by then)
struct DbLayout {
    size_t v, ps, kb, part, total;
};

static __host__ __device__ __forceinline__ DbLayout db_layout(int nb, int Dk, int cap, int xs) {
    DbLayout L;
    const size_t kvb = (size_t)cap * Dk * xs, partb = (size_t)(DB_THREADS / 32) * nb * Dk * sizeof(float);
    L.v = kvb;
    L.ps = 2 * kvb;
    L.kb = L.ps + (size_t)nb * cap * sizeof(float);
    const size_t end = L.kb + (size_t)cap * sizeof(float);
    L.part = partb <= kvb ? 0 : (end + 15) / 16 * 16;
    L.total = partb <= kvb ? end : L.part + partb;
    return L;
}

template <typename T, int NBT, int PPL>
__global__ void __launch_bounds__(DB_THREADS, NBT == 1 ? 6 : 5)
    decode_attention_bulk_kernel1(T* ctx, const T* q, int q_stride, const T* kc, const T* vc, int T_stride, int n,
                                  int cap, const float* bias, int bias_stride, const int* mask, int nb, int H) {
    constexpr int P = Vec<T>::size, Dk = DB_LPK * PPL * P, NT = DB_THREADS, NW = NT / 32;
    constexpr int U = Dk / P, G = NT / U;  // P V: 16-byte units of a row (8 PPL <= 64), key groups
    extern __shared__ __align__(16) unsigned char db_smem[];
    __shared__ uint64_t s_bar[2];  // K, V arrived
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, sub = lane % DB_LPK;
    const int i = blockIdx.x / H, h = blockIdx.x % H;
    const DbLayout L = db_layout(nb, Dk, cap, (int)sizeof(T));
    T* ks = (T*)db_smem;
    T* vs = (T*)(db_smem + L.v);
    float* ps = (float*)(db_smem + L.ps);
    float* kb = (float*)(db_smem + L.kb);
    float* part = (float*)(db_smem + L.part);
    {  // the caches are not written by the step: loaded before the wait (cuda/pdl.cuh)
        const size_t o = ((size_t)i * H + h) * (size_t)T_stride * Dk;
        const unsigned bytes = (unsigned)((size_t)n * Dk * sizeof(T));
        const char *kg = (const char*)(kc + o), *vg = (const char*)(vc + o);
        if (warp == 0) {
            if (lane == 0) {
                db_mbar_init(&s_bar[0]);
                db_mbar_init(&s_bar[1]);
                db_expect_tx(&s_bar[0], bytes);
                db_expect_tx(&s_bar[1], bytes);
            }
            __syncwarp();
            for (unsigned off = lane * DB_CHUNK; off < bytes; off += 32 * DB_CHUNK) {
                const unsigned sz = bytes - off < DB_CHUNK ? bytes - off : DB_CHUNK;
                db_bulk_copy((char*)ks + off, kg + off, sz, &s_bar[0]);
                db_bulk_copy((char*)vs + off, vg + off, sz, &s_bar[1]);
            }
        }
    }
    pdl_wait();
    pdl_trigger();
    // q rows: this lane's packets sub + 8 m (m < PPL) of each row
    Vec<T> qv[NBT][PPL];
#pragma unroll
    for (int b = 0; b < NBT; b++)
#pragma unroll
        for (int m = 0; m < PPL; m++) {
            qv[b][m] = Vec<T>{};
            if (b < nb)
                qv[b][m] = load_vec(q + ((size_t)i * nb + b) * q_stride + (size_t)h * Dk + (sub + DB_LPK * m) * P);
        }
    for (int j = tid; j < n; j += NT)
        kb[j] = mask && mask[(size_t)i * n + j] == 0 ? -INFINITY : bias ? bias[(size_t)h * bias_stride + j] : 0.0f;
    __syncthreads();  // kb; the mbarriers' initialisation visible to every thread
    // ---- 1. scores (rounded to X, + bias, masked keys -inf) into ps
    db_mbar_wait(&s_bar[0], 0);
    for (int j0 = 0; j0 < n; j0 += NT / DB_LPK) {  // block-uniform
        const int j = j0 + tid / DB_LPK;
        float s[NBT];
#pragma unroll
        for (int b = 0; b < NBT; b++) s[b] = 0.0f;
        if (j < n) {
            Vec<T> kv[PPL];
#pragma unroll
            for (int m = 0; m < PPL; m++) kv[m] = load_vec(ks + (size_t)j * Dk + (sub + DB_LPK * m) * P);
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= nb) break;
#pragma unroll
                for (int m = 0; m < PPL; m++)
#pragma unroll
                    for (int e = 0; e < P; e++) s[b] += to_f32(qv[b][m].v[e]) * to_f32(kv[m].v[e]);
            }
        }
#pragma unroll
        for (int b = 0; b < NBT; b++)
#pragma unroll
            for (int o = DB_LPK / 2; o > 0; o >>= 1) s[b] += __shfl_xor_sync(0xffffffffu, s[b], o);
        if (j < n && sub == 0) {
            const float bj = kb[j];
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= nb) break;
                ps[(size_t)b * cap + j] = da_score<T>(s[b], bias != NULL, bj, bj == -INFINITY);
            }
        }
    }
    __syncthreads();  // scores complete; K no longer read (part may reuse it)
    // ---- 2. softmax statistics, per warp (identical in every warp)
    float M[NBT], inv[NBT];
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        M[b] = -INFINITY;
        inv[b] = 0.0f;
        if (b >= nb) continue;
        const float* pr = ps + (size_t)b * cap;
        float mx = -INFINITY;
        for (int j = lane; j < n; j += 32) mx = fmaxf(mx, pr[j]);
        mx = warp_reduce_max(mx);
        float sum = 0.0f;
        if (mx != -INFINITY) {
            for (int j = lane; j < n; j += 32) sum += expf(pr[j] - mx);
            sum = warp_reduce_sum(sum);
        }
        M[b] = mx;
        inv[b] = mx == -INFINITY ? 0.0f : 1.0f / sum;
    }
    // ---- 3. P V
    const int u = tid % U, g = tid / U;
    float acc[NBT][P];
#pragma unroll
    for (int b = 0; b < NBT; b++)
#pragma unroll
        for (int e = 0; e < P; e++) acc[b][e] = 0.0f;
    db_mbar_wait(&s_bar[1], 0);
    for (int j = g; j < n; j += G) {
        const Vec<T> vv = load_vec(vs + (size_t)j * Dk + u * P);
#pragma unroll
        for (int b = 0; b < NBT; b++) {
            if (b >= nb) break;
            // a row with every key masked is uniform 1/n (as attention_softmax_forward)
            const float p =
                round_to<T>(M[b] == -INFINITY ? 1.0f / (float)n : expf(ps[(size_t)b * cap + j] - M[b]) * inv[b]);
#pragma unroll
            for (int e = 0; e < P; e++) acc[b][e] += p * to_f32(vv.v[e]);
        }
    }
    // the groups of a warp (U <= 32), then the slices (warps; for U = 64 the two groups) in order
    constexpr int S = U <= 32 ? NW : G;
    const int slice = U <= 32 ? warp : g;
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        if (b >= nb) break;
#pragma unroll
        for (int e = 0; e < P; e++) {
#pragma unroll
            for (int o = U; o < 32; o <<= 1) acc[b][e] += __shfl_xor_sync(0xffffffffu, acc[b][e], o);
            if (U >= 32 || lane < U) part[((size_t)slice * nb + b) * Dk + u * P + e] = acc[b][e];
        }
    }
    __syncthreads();
    for (int e = tid; e < nb * Dk; e += NT) {
        float t = 0.0f;
#pragma unroll
        for (int s = 0; s < S; s++) t += part[(size_t)s * nb * Dk + e];
        const int b = e / Dk, d = e % Dk;
        ctx[(((size_t)i * nb + b) * H + h) * Dk + d] = from_f32<T>(t);
    }
}

// ---- launchers

template <typename TO>
static void decode_add_rmsnorm_t(void* out, float* x, const void* branch, DType dt_b, const float* w, int N, int D,
                                 float eps, float post_scale, cudaStream_t stream) {
    const bool vec = D % EW_CHUNK == 0 && is_aligned16(out) && is_aligned16(x) && is_aligned16(w) &&
                     (!branch || is_aligned16(branch));
    const int warps = 8;
    const dim3 grid((unsigned)CEIL_DIV(N, warps)), block(warps * 32);
    const bool bb = dt_b == DT_BF16, bh = dt_b == DT_F16;
    if (vec && D <= 32 * EW_CHUNK * 4)
        pdl_launch(decode_add_rmsnorm_kernel2<TO, 4>, grid, block, 0, stream, (TO*)out, x, branch, bb, bh, w, N, D, eps,
                   post_scale);
    else
        pdl_launch(decode_add_rmsnorm_kernel1<TO>, grid, block, 0, stream, (TO*)out, x, branch, bb, bh, w, N, D, eps,
                   post_scale, vec);
}

extern "C" void decode_add_rmsnorm(void* out, DType dt_out, float* x, const void* branch, DType dt_b, const float* w,
                                   int N, int D, float eps, float post_scale, cudaStream_t stream) {
    if (N <= 0 || D <= 0) return;
    DTYPE_DISPATCH(dt_out, decode_add_rmsnorm_t, out, x, branch, dt_b, w, N, D, eps, post_scale, stream);
    CUDA_LAUNCH_CHECK();
}

static size_t da_smem_bytes(int nb, int Dk, int cap) {
    return ((size_t)nb * Dk + (size_t)nb * cap + (size_t)DA_THREADS * 8 + cap) * sizeof(float);
}

extern "C" bool decode_attention_fits(int nb, int Dk, int cap) {
    return nb >= 1 && nb <= DA_MAX_NB && Dk >= 1 && cap >= 1 && da_smem_bytes(nb, Dk, cap) <= DA_MAX_SMEM;
}

template <typename T, bool VEC, int NBT, int TPK, bool VPV>
static void decode_attention_launch(void* ctx, const void* q, int q_stride, void* kc, void* vc, int T_stride,
                                    const int* pos, int n_keys, int cap, const float* bias, int bias_stride,
                                    const int* mask, const void* knew, const void* vnew, int new_stride,
                                    const int* hist, int hist_stride, int I, int nb, int H, int Dk, int threads,
                                    size_t smem, cudaStream_t stream) {
    pdl_launch(decode_attention_kernel1<T, VEC, NBT, TPK, VPV>, dim3((unsigned)(I * H)), dim3((unsigned)threads), smem,
               stream, (T*)ctx, (const T*)q, q_stride, (T*)kc, (T*)vc, T_stride, pos, n_keys, cap, bias, bias_stride,
               mask, (const T*)knew, (const T*)vnew, new_stride, hist, hist_stride, nb, H, Dk);
}

template <typename T, int NBT, int DPL>
static void decode_attention_warp_launch(void* ctx, const void* q, int q_stride, void* kc, void* vc, int T_stride,
                                         const int* pos, int n_keys, const float* bias, int bias_stride,
                                         const int* mask, const void* knew, const void* vnew, int new_stride,
                                         const int* hist, int hist_stride, int I, int nb, int H, cudaStream_t stream) {
    const int IH = I * H;
    const size_t smem = (size_t)DW_WARPS * NBT * 32 * DPL * sizeof(float);
    pdl_launch(decode_attention_warp_kernel1<T, NBT, DPL>, dim3((unsigned)CEIL_DIV(IH, DW_WARPS)), dim3(DW_WARPS * 32),
               smem, stream, (T*)ctx, (const T*)q, q_stride, (T*)kc, (T*)vc, T_stride, pos, n_keys, bias, bias_stride,
               mask, (const T*)knew, (const T*)vnew, new_stride, hist, hist_stride, nb, IH, H);
}

// AUTO takes the split variant for one query row per item: 4 warps per pair for grids of one wave (3 of its blocks fit
// an SM: up to ~170 registers per thread), else 1 warp per pair (DS_WARPS pairs per block)
#define DS_AUTO_BLOCKS_PER_SM 3

static size_t ds_smem_bytes(int nb, int Dk, int cap, int wpp) {
    const int pairs = DS_WARPS / wpp;
    return (size_t)pairs * ((size_t)nb * Dk + (size_t)nb * cap + (size_t)wpp * nb * Dk) * sizeof(float);
}

// the split variant's shapes: 16-byte aligned rows of 1, 2 or 4 packets per lane (bf16/fp16 Dk 64, 128, 256; fp32
// Dk 32, 64, 128), at most 4 query rows, shared memory within DA_MAX_SMEM
static bool ds_supported(bool vec, size_t xs, int nb, int Dk, int cap, int wpp) {
    const size_t row = (size_t)Dk * xs;
    return vec && (row == 128 || row == 256 || row == 512) && nb <= 4 && ds_smem_bytes(nb, Dk, cap, wpp) <= DA_MAX_SMEM;
}

template <typename T, int NBT, int PPL, int WPP>
static void decode_attention_split_launch(void* ctx, const void* q, int q_stride, void* kc, void* vc, int T_stride,
                                          const int* pos, int n_keys, int cap, const float* bias, int bias_stride,
                                          const int* mask, const void* knew, const void* vnew, int new_stride,
                                          const int* hist, int hist_stride, int I, int nb, int H, cudaStream_t stream) {
    constexpr int RPRE = (NBT == 1 ? 8 : 4) / PPL;  // rounds of keys/values per chunk of loads: 32-64 registers
    const int Dk = DS_LPK * PPL * Vec<T>::size, IH = I * H;
    pdl_launch(decode_attention_split_kernel1<T, NBT, PPL, RPRE, WPP>,
               dim3((unsigned)CEIL_DIV(IH, DS_WARPS / WPP)), dim3(DS_WARPS * 32), ds_smem_bytes(nb, Dk, cap, WPP),
               stream, (T*)ctx, (const T*)q, q_stride, (T*)kc, (T*)vc, T_stride, pos, n_keys, cap, bias, bias_stride,
               mask, (const T*)knew, (const T*)vnew, new_stride, hist, hist_stride, nb, H, IH);
}

// the bulk variant's shapes: cross-attention (no pos / append / hist), 16-byte aligned q / key / value rows of 1, 2, 4
// or 8 packets per lane (bf16/fp16 Dk 64-512, fp32 Dk 32-256; 2-4 query rows: Dk <= 128), the block's
// shared memory within the device's opt-in limit (`limit`, 0: that limit); sm_90 (bulk copies, mbarrier tx counts)
static int db_max_smem(void) {
    static int v = -1;
    if (v < 0) {
        int dev = 0, major = 0, optin = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        v = major >= 9 ? optin - DB_STATIC_SMEM : 0;  // the dynamic part's limit
    }
    return v;
}

static bool db_supported(const void* q, int q_stride, const void* kc, const void* vc, const int* pos, const void* knew,
                         const int* hist, size_t xs, int nb, int Dk, int n_keys, int cap, size_t limit) {
    const size_t row = (size_t)Dk * xs;
    const int ppl = (int)(row / 128);
    if (pos || knew || hist || n_keys < 1 || nb < 1 || nb > 4 || row % 128 != 0 || ppl < 1 || ppl > 8 ||
        (nb > 1 && (size_t)ppl * 16 / xs > 16))  // 4 rows: at most 16 elements of a row per lane (registers)
        return false;
    if (!is_aligned16(q) || ((size_t)q_stride * xs) % 16 != 0 || !is_aligned16(kc) || !is_aligned16(vc)) return false;
    const size_t smem = db_layout(nb, Dk, cap, (int)xs).total, max = (size_t)db_max_smem();
    return smem <= max && (limit == 0 || smem <= limit);
}

template <typename T, int NBT, int PPL>
static void decode_attention_bulk_launch(void* ctx, const void* q, int q_stride, const void* kc, const void* vc,
                                         int T_stride, int n_keys, int cap, const float* bias, int bias_stride,
                                         const int* mask, int I, int nb, int H, cudaStream_t stream) {
    constexpr int Dk = DB_LPK * PPL * Vec<T>::size;
    static bool attr_set = false;  // per instantiation: the opt-in shared memory, and the carveout all shared
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(decode_attention_bulk_kernel1<T, NBT, PPL>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, db_max_smem()));  // dynamic part
        CUDA_CHECK(cudaFuncSetAttribute(decode_attention_bulk_kernel1<T, NBT, PPL>,
                                        cudaFuncAttributePreferredSharedMemoryCarveout,
                                        (int)cudaSharedmemCarveoutMaxShared));
        attr_set = true;
    }
    const size_t smem = db_layout(nb, Dk, cap, (int)sizeof(T)).total;
    pdl_launch(decode_attention_bulk_kernel1<T, NBT, PPL>, dim3((unsigned)(I * H)), dim3(DB_THREADS), smem, stream,
               (T*)ctx, (const T*)q, q_stride, (const T*)kc, (const T*)vc, T_stride, n_keys, cap, bias, bias_stride,
               mask, nb, H);
}

// the implementation AUTO picks (t5-3b, H200, docs/generate.md run 8, ms per step with PDL): one query row per item
// (self-attention, greedy cross-attention): SPLIT up to one wave of its blocks (3 per SM: 396 pairs; batch 4 greedy
// 1.68 against WIDE 1.84), self-attention of DA_LARGE_GRID to DA_WIDE_MAX_GRID pairs SPLIT1 (batch 32 greedy 2.53
// against WIDE 2.61; at 512 pairs, 128 blocks of 4 pairs, WIDE won: batch 4 beam 4 2.32 against 2.39; at 4096 pairs
// WARP: batch 32 beam 4 3.35 against 3.63); else
// WIDE up to DA_WIDE_MAX_GRID (item, head) pairs, else WARP (T5TRAIN_GEN_ATTN_LARGE=
// block|wide|warp decides every grid of DA_LARGE_GRID pairs or more instead). Measured on t5-3b (docs/generate.md):
// WIDE beat BLOCK at 128-512 pairs (batch 4); batch 32 greedy (1024 pairs, one row each): WIDE 2.77, BLOCK 3.17, WARP
// 3.34 ms/step; batch 32 beam 4 (cross-attention 1024 pairs of 4 rows, self-attention 4096 pairs of 1 row): WARP for
// both 3.98, WIDE for both 4.23, WIDE only for the 4096-pair self-attention 4.81 ms/step, so WIDE wins at 1024 pairs
// and WARP at 4096.
#define DA_LARGE_GRID 1024
#define DA_WIDE_MAX_GRID 2048
extern "C" DecodeAttnImpl decode_attention_impl_by_name(const char* name) {
    if (!name) return DA_IMPL_AUTO;
    const char* names[] = {"auto", "wide", "block", "warp", "split", "split1", "bulk"};  // DecodeAttnImpl order
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
        if (strcmp(name, names[k]) == 0) return (DecodeAttnImpl)k;
    return DA_IMPL_AUTO;
}

// the variant forced by an environment variable (slot 0: T5TRAIN_GEN_ATTN, every grid; slot 1:
// T5TRAIN_GEN_ATTN_LARGE, grids of DA_LARGE_GRID pairs or more when the split variant does not apply), or
// DA_IMPL_AUTO (read once)
static DecodeAttnImpl da_forced(const char* name, int slot) {
    static int cached[2] = {-1, -1};
    if (cached[slot] < 0) cached[slot] = decode_attention_impl_by_name(getenv(name));
    return (DecodeAttnImpl)cached[slot];
}

// the non-forced choice (the rules above; BULK only where allowed: `bulk_ok`)
static DecodeAttnImpl da_auto(int pairs, int nb, bool self_append, bool vec, size_t xs, int Dk, int cap, bool bulk_ok) {
    const DecodeAttnImpl forced = da_forced("T5TRAIN_GEN_ATTN_LARGE", 1);
    if (bulk_ok) return DA_IMPL_BULK;
    if (nb == 1 && pairs <= DS_AUTO_BLOCKS_PER_SM * device_num_sms() && ds_supported(vec, xs, 1, Dk, cap, 4))
        return DA_IMPL_SPLIT;
    if (nb == 1 && self_append && pairs >= DA_LARGE_GRID && pairs <= DA_WIDE_MAX_GRID &&
        ds_supported(vec, xs, 1, Dk, cap, 1))
        return DA_IMPL_SPLIT1;
    if (pairs < DA_LARGE_GRID) return DA_IMPL_WIDE;
    if (forced != DA_IMPL_AUTO) return forced;
    return pairs <= DA_WIDE_MAX_GRID ? DA_IMPL_WIDE : DA_IMPL_WARP;
}

// AUTO takes BULK for cross-attention whose block fits DB_AUTO_MAX_SMEM (4 or more blocks per SM): every grid of 2-4
// query rows (beams), and grids of one row larger than SPLIT's one wave (> DS_AUTO_BLOCKS_PER_SM blocks per SM).
// Measured (H200, bf16, Ts 63, ms per step, bench_generate 49 2, one call, AUTO before -> BULK): t5-3b batch 32 greedy
// (1024 pairs) 2.406 -> 2.269, beam 4 (1024 pairs of 4 rows) 3.327 -> 3.171, batch 4 beam 4 (128 pairs of 4 rows)
// 2.055 -> 1.994; t5-large (Dk 64) batch 32 greedy (512 pairs) 1.640 -> 1.510, beam 4 2.090 -> 2.062, batch 4 beam 4
// (64 pairs of 4 rows) 1.365 -> 1.294. SPLIT stays for one-row grids of one wave: t5-3b batch 4 greedy (128 pairs)
// SPLIT 1.575, BULK 1.593 (t5-large's 64 pairs: SPLIT 0.998, BULK 0.979). Load paths: the bulk copies of up to 32 KB
// beat 4 KB copies (2.277) and per-thread cp.async (2.301 / beam 3.265); the L2 prefetch of the next wave's pairs was
// 2.253 at greedy but 3.186 with beams (ncu: 15.8 against 15.2 us per call); those three were removed.
// T5TRAIN_GEN_ATTN_BULK=0 turns BULK off in AUTO (A/B measurements; read once)
#define DB_AUTO_MAX_SMEM (48 * 1024)
static bool db_auto_enabled(void) {
    static int cached = -1;
    if (cached < 0) {
        const char* e = getenv("T5TRAIN_GEN_ATTN_BULK");
        cached = !(e && strcmp(e, "0") == 0);
    }
    return cached == 1;
}

template <typename T>
static void decode_attention_t(void* ctx, const void* q, int q_stride, void* kc, void* vc, int T_stride,
                               const int* pos, int n_keys, int cap, const float* bias, int bias_stride,
                               const int* mask, const void* knew, const void* vnew, int new_stride,
                               const int* hist, int hist_stride, int I, int nb, int H, int Dk, DecodeAttnImpl impl,
                               cudaStream_t stream) {
    const size_t smem = da_smem_bytes(nb, Dk, cap);
    const bool vec = (Dk * sizeof(T)) % 16 == 0 && is_aligned16(kc) && is_aligned16(vc) && is_aligned16(ctx);
    const int pairs = I * H;
    if (impl == DA_IMPL_AUTO) {
        const DecodeAttnImpl all = da_forced("T5TRAIN_GEN_ATTN", 0);
        const bool bulk_ok = (nb > 1 || pairs > DS_AUTO_BLOCKS_PER_SM * device_num_sms()) && db_auto_enabled() &&
                             db_supported(q, q_stride, kc, vc, pos, knew, hist, sizeof(T), nb, Dk, n_keys, cap,
                                          DB_AUTO_MAX_SMEM);
        impl = all != DA_IMPL_AUTO ? all : da_auto(pairs, nb, knew != NULL, vec, sizeof(T), Dk, cap, bulk_ok);
    }
    if (impl == DA_IMPL_BULK) {
        if (!db_supported(q, q_stride, kc, vc, pos, knew, hist, sizeof(T), nb, Dk, n_keys, cap, 0)) {
            impl = da_auto(pairs, nb, knew != NULL, vec, sizeof(T), Dk, cap, false);
        } else {
            const int ppl = Dk * (int)sizeof(T) / 128;
#define DB_LAUNCH(NBT, PPL)                                                                                          \
    decode_attention_bulk_launch<T, NBT, PPL>(ctx, q, q_stride, kc, vc, T_stride, n_keys, cap, bias, bias_stride,  \
                                              mask, I, nb, H, stream)
            if (nb == 1) {
                if (ppl == 1) DB_LAUNCH(1, 1);
                else if (ppl == 2) DB_LAUNCH(1, 2);
                else if (ppl == 4) DB_LAUNCH(1, 4);
                else DB_LAUNCH(1, 8);
            } else {  // db_supported: 2-4 query rows up to 16 elements of a row per lane (Dk <= 128)
                if (ppl == 1) DB_LAUNCH(4, 1);
                else if (ppl == 2) DB_LAUNCH(4, 2);
                else if constexpr (sizeof(T) == 4) DB_LAUNCH(4, 4);
            }
#undef DB_LAUNCH
            return;
        }
    }
    // split: 4 warps per pair while the grid is one wave, else 1 (SPLIT1: always 1)
    int wpp = impl == DA_IMPL_SPLIT1 || I * H > DS_AUTO_BLOCKS_PER_SM * device_num_sms() ? 1 : 4;
    if (impl == DA_IMPL_SPLIT1) impl = DA_IMPL_SPLIT;
    if (impl == DA_IMPL_SPLIT && !ds_supported(vec, sizeof(T), nb, Dk, cap, wpp)) wpp = 4;
    if (impl == DA_IMPL_SPLIT && !ds_supported(vec, sizeof(T), nb, Dk, cap, wpp)) impl = DA_IMPL_WIDE;
    if (impl == DA_IMPL_SPLIT) {
        const int ppl = Dk * (int)sizeof(T) / 128;
#define DS_LAUNCH(NBT, PPL, WPP)                                                                                     \
    decode_attention_split_launch<T, NBT, PPL, WPP>(ctx, q, q_stride, kc, vc, T_stride, pos, n_keys, cap, bias,    \
                                                    bias_stride, mask, knew, vnew, new_stride, hist, hist_stride, I, \
                                                    nb, H, stream)
#define DS_LAUNCH_W(NBT, PPL)              \
    do {                                   \
        if (wpp == 1) DS_LAUNCH(NBT, PPL, 1); \
        else DS_LAUNCH(NBT, PPL, 4);       \
    } while (0)
        if (nb == 1) {
            if (ppl == 1) DS_LAUNCH_W(1, 1);
            else if (ppl == 2) DS_LAUNCH_W(1, 2);
            else DS_LAUNCH_W(1, 4);
        } else {
            if (ppl == 1) DS_LAUNCH_W(4, 1);
            else if (ppl == 2) DS_LAUNCH_W(4, 2);
            else DS_LAUNCH_W(4, 4);
        }
#undef DS_LAUNCH_W
#undef DS_LAUNCH
        return;
    }
    // the warp variant: Dk 64 or 128, at most 8 query rows and 128 keys, 16-byte aligned rows
    if (impl == DA_IMPL_WARP && !(vec && (Dk == 64 || Dk == 128) && nb <= 8 && cap <= 32 * DW_MAXC))
        impl = DA_IMPL_BLOCK;
    if (impl == DA_IMPL_WARP) {
#define DW_LAUNCH(NBT, DPL)                                                                                          \
    decode_attention_warp_launch<T, NBT, DPL>(ctx, q, q_stride, kc, vc, T_stride, pos, n_keys, bias, bias_stride,  \
                                              mask, knew, vnew, new_stride, hist, hist_stride, I, nb, H, stream)
        if (Dk == 64) {
            if (nb == 1) DW_LAUNCH(1, 2);
            else if (nb <= 4) DW_LAUNCH(4, 2);
            else DW_LAUNCH(8, 2);
        } else {
            if (nb == 1) DW_LAUNCH(1, 4);
            else if (nb <= 4) DW_LAUNCH(4, 4);
            else DW_LAUNCH(8, 4);
        }
#undef DW_LAUNCH
        return;
    }
    // WIDE: 256 threads, 4 threads per key, 16-byte P V units; BLOCK: 128 threads, a thread per key and per (row, d)
    const bool wide = impl == DA_IMPL_WIDE;
    const int threads = wide ? DA_THREADS : DA_THREADS / 2;
#define DA_LAUNCH(VEC, NBT)                                                                                          \
    do {                                                                                                             \
        if (wide)                                                                                                    \
            decode_attention_launch<T, VEC, NBT, DA_TPK, true>(ctx, q, q_stride, kc, vc, T_stride, pos, n_keys, cap, \
                                                               bias, bias_stride, mask, knew, vnew, new_stride,      \
                                                               hist, hist_stride, I, nb, H, Dk, threads, smem,       \
                                                               stream);                                              \
        else                                                                                                         \
            decode_attention_launch<T, VEC, NBT, 1, false>(ctx, q, q_stride, kc, vc, T_stride, pos, n_keys, cap,     \
                                                           bias, bias_stride, mask, knew, vnew, new_stride, hist,    \
                                                           hist_stride, I, nb, H, Dk, threads, smem, stream);        \
    } while (0)
    if (vec) {
        if (nb == 1) DA_LAUNCH(true, 1);
        else if (nb <= 4) DA_LAUNCH(true, 4);
        else if (nb <= 8) DA_LAUNCH(true, 8);
        else DA_LAUNCH(true, DA_MAX_NB);
    } else {
        if (nb == 1) DA_LAUNCH(false, 1);
        else if (nb <= 4) DA_LAUNCH(false, 4);
        else if (nb <= 8) DA_LAUNCH(false, 8);
        else DA_LAUNCH(false, DA_MAX_NB);
    }
#undef DA_LAUNCH
}

extern "C" void decode_attention(void* ctx, const void* q, int q_stride, void* kc, void* vc, int T_stride,
                                 const int* pos, int n_keys, int cap, const float* bias, int bias_stride,
                                 const int* mask, const void* knew, const void* vnew, int new_stride,
                                 const int* hist, int hist_stride, int I, int nb, int H, int Dk, DType dt,
                                 DecodeAttnImpl impl, cudaStream_t stream) {
    if (I <= 0 || H <= 0 || Dk <= 0) return;
    if (!decode_attention_fits(nb, Dk, cap))
        t5_die(T5_EXIT_FAILURE, "decode_attention: %d rows x (Dk %d + %d keys) do not fit in shared memory", nb, Dk,
               cap);
    if (hist && (nb != 1 || !pos)) t5_die(T5_EXIT_FAILURE, "decode_attention: hist needs nb == 1 and pos");
    if (knew && (nb != 1 || !pos)) t5_die(T5_EXIT_FAILURE, "decode_attention: the append needs nb == 1 and pos");
    if (!pos && n_keys > cap) t5_die(T5_EXIT_FAILURE, "decode_attention: %d keys > cap %d", n_keys, cap);
    DTYPE_DISPATCH(dt, decode_attention_t, ctx, q, q_stride, kc, vc, T_stride, pos, n_keys, cap, bias, bias_stride,
                   mask, knew, vnew, new_stride, hist, hist_stride, I, nb, H, Dk, impl, stream);
    CUDA_LAUNCH_CHECK();
}

// ---- beam search on the device (model/generate.c, beam search without a host synchronisation per step)

// one block per slot (batch item) of nb beams; thread 0 selects, the block permutes the histories
__global__ void decode_beam_select_kernel1(int* tok, float* score, int* hist, int hist_stride, const float* topv,
                                           const int* topi, int nb, int K, int V, int ML, int eos, const int* pos) {
    extern __shared__ int bs_smem[];  // (nb, t + 1) old histories
    __shared__ int s_src[BS_MAX_NB], s_tok[BS_MAX_NB];
    __shared__ float s_val[BS_MAX_NB];
    const int sl = blockIdx.x, t = *pos, tid = threadIdx.x;
    const int nc = nb * K, K2 = 2 * nb;
    if (tid == 0) {
        const bool at_max = t + 2 >= ML;  // cur_len + 1 >= max_length: every continuation hits the length limit
        const float* tv = topv + (size_t)sl * nc;
        const int* ti = topi + (size_t)sl * nc;
        // the 2 nb best of the nb * K candidates in (value desc, beam * V + token asc) order: selection rounds
        float cv[2 * BS_MAX_NB];
        int ckey[2 * BS_MAX_NB];
        float pv = INFINITY;
        long long pk = -1;
        for (int k = 0; k < K2; k++) {
            float bv = -INFINITY;
            long long bk = LLONG_MAX;
            for (int c = 0; c < nc; c++) {
                const float v = tv[c];
                const long long key = (long long)(c / K) * V + ti[c];
                const bool after = v < pv || (v == pv && key > pk);
                const bool better = v > bv || (v == bv && key < bk);
                if (after && better) {
                    bv = v;
                    bk = key;
                }
            }
            cv[k] = bv;
            ckey[k] = (int)(bk == LLONG_MAX ? 0 : bk);
            pv = bv;
            pk = bk;
        }
        // next running beams: the nb best after -1e9 on the candidates that hit </s> or the length limit
        float rv[2 * BS_MAX_NB];
        for (int k = 0; k < K2; k++) {
            const bool hit = ckey[k] % V == eos || at_max;
            rv[k] = cv[k] + (hit ? -1.0e9f : 0.0f);
        }
        float qv = INFINITY;
        int qk = -1;
        for (int j = 0; j < nb; j++) {
            float bv = -INFINITY;
            int bk = INT_MAX;
            for (int k = 0; k < K2; k++) {
                const bool after = rv[k] < qv || (rv[k] == qv && k > qk);
                const bool better = rv[k] > bv || (rv[k] == bv && k < bk);
                if (after && better) {
                    bv = rv[k];
                    bk = k;
                }
            }
            if (bk == INT_MAX) bk = 0;
            s_src[j] = ckey[bk] / V;
            s_tok[j] = ckey[bk] % V;
            s_val[j] = bv;
            qv = bv;
            qk = bk;
        }
    }
    const int n = t + 1;
    for (int e = tid; e < nb * n; e += blockDim.x) {
        const int b = e / n, j = e % n;
        bs_smem[e] = hist[((size_t)sl * nb + b) * hist_stride + j];
    }
    __syncthreads();
    for (int e = tid; e < nb * n; e += blockDim.x) {
        const int b = e / n, j = e % n;
        hist[((size_t)sl * nb + b) * hist_stride + j] = bs_smem[s_src[b] * n + j];
    }
    if (tid < nb) {
        const size_t r = (size_t)sl * nb + tid;
        if (n < hist_stride) hist[r * hist_stride + n] = (int)r;  // the next step appends to the row itself
        tok[r] = s_tok[tid];
        score[r] = s_val[tid];
    }
}

// grid (H, R, planes): dst row r, head h, position j < n_pos <- src row hist[idx[r], j]
template <typename W>
__global__ void decode_gather_hist_kernel1(W* dst, const W* src, const int* idx, const int* hist, int hist_stride,
                                           int H, int Tmax, int dk_w, int n_pos, int n_inner, ptrdiff_t outer_w,
                                           ptrdiff_t inner_w) {
    const int h = blockIdx.x, r = blockIdx.y, p = blockIdx.z;
    const ptrdiff_t po = (ptrdiff_t)(p / n_inner) * outer_w + (ptrdiff_t)(p % n_inner) * inner_w;
    const int* hr = hist + (size_t)idx[r] * hist_stride;
    for (int e = threadIdx.x; e < n_pos * dk_w; e += blockDim.x) {
        const int j = e / dk_w, w = e % dk_w;
        const size_t sr = (size_t)hr[j];
        dst[po + (((size_t)r * H + h) * Tmax + j) * dk_w + w] = src[po + ((sr * H + h) * Tmax + j) * dk_w + w];
    }
}

extern "C" bool decode_beam_select_fits(int nb, int hist_stride) {
    return nb >= 1 && nb <= BS_MAX_NB && (size_t)nb * hist_stride * sizeof(int) <= DA_MAX_SMEM;
}

extern "C" void decode_beam_select(int* tok, float* score, int* hist, int hist_stride, const float* topv,
                                   const int* topi, int I, int nb, int K, int V, int ML, int eos, const int* pos,
                                   cudaStream_t stream) {
    if (I <= 0) return;
    if (!decode_beam_select_fits(nb, hist_stride) || K < 2 * nb)
        t5_die(T5_EXIT_FAILURE, "decode_beam_select: %d beams (K %d, %d positions) not supported", nb, K, hist_stride);
    decode_beam_select_kernel1<<<I, 128, (size_t)nb * hist_stride * sizeof(int), stream>>>(
        tok, score, hist, hist_stride, topv, topi, nb, K, V, ML, eos, pos);
    CUDA_LAUNCH_CHECK();
}

extern "C" void decode_gather_hist(void* dst, const void* src, const int* idx, const int* hist, int hist_stride, int R,
                                   int H, int Tmax, size_t pos_bytes, int n_pos, int n_outer, ptrdiff_t outer_bytes,
                                   int n_inner, ptrdiff_t inner_bytes, cudaStream_t stream) {
    if (R <= 0 || H <= 0 || n_pos <= 0 || n_outer <= 0 || n_inner <= 0) return;
    if ((size_t)n_outer * n_inner > 65535 || R > 65535 || H > 65535)
        t5_die(T5_EXIT_FAILURE, "decode_gather_hist: grid (%d, %d, %d) too large", H, R, n_outer * n_inner);
    const uintptr_t all = (uintptr_t)dst | (uintptr_t)src | pos_bytes | (uintptr_t)outer_bytes | (uintptr_t)inner_bytes;
    dim3 grid((unsigned)H, (unsigned)R, (unsigned)(n_outer * n_inner));
    if ((all & 15u) == 0)
        decode_gather_hist_kernel1<uint4><<<grid, 128, 0, stream>>>((uint4*)dst, (const uint4*)src, idx, hist,
                                                                    hist_stride, H, Tmax, (int)(pos_bytes / 16), n_pos,
                                                                    n_inner, outer_bytes / 16, inner_bytes / 16);
    else if ((all & 3u) == 0)
        decode_gather_hist_kernel1<uint32_t><<<grid, 128, 0, stream>>>((uint32_t*)dst, (const uint32_t*)src, idx, hist,
                                                                       hist_stride, H, Tmax, (int)(pos_bytes / 4),
                                                                       n_pos, n_inner, outer_bytes / 4,
                                                                       inner_bytes / 4);
    else
        decode_gather_hist_kernel1<uint8_t><<<grid, 128, 0, stream>>>((uint8_t*)dst, (const uint8_t*)src, idx, hist,
                                                                      hist_stride, H, Tmax, (int)pos_bytes, n_pos,
                                                                      n_inner, outer_bytes, inner_bytes);
    CUDA_LAUNCH_CHECK();
}
