/*
 * attention_softmax.cu: T5 attention probabilities with position bias, masks and dropout
 * (see attention_softmax.cuh for the contract).
 *   forward:  s[k] = scores[b,h,q,k] + bias[h,q,k] over the keys k that are not masked
 *             (key_mask[b,k] == 0, or causal and k > q + q_offset);
 *             probs[b,h,q,k] (B,H,Tq,Tk) X = exp(s[k] - max s) / sum, 0 for masked keys (fp32 math),
 *             a row with every key masked is uniform 1/Tk (HF adds finfo.min, never -inf);
 *             probs_drop (B,H,Tq,Tk) X = round_X(probs) * dropout factor (may be probs when p == 0).
 *   backward: dp = dprobs_drop * dropout factor (fp32);
 *             dscores (B,H,Tq,Tk) X = probs * (dp - sum_k dp * probs)                              (=)
 *             dbias (H,Tq,Tk) fp32 += sum over b of dscores (fp32 values, b in order)            (+=)
 *             The masked keys have probs == 0, so their gradient is 0 without the mask; a uniform
 *             (fully masked) row passes the softmax gradient as HF does with finfo.min.
 * Scores come in fp32 (the QK^T GEMM writes fp32), so the sum with the bias happens in fp32
 * (NOTE(numerics): HF fp16 adds scores and bias in fp16 first).
 * Dropout element index = ((b*H + h)*Tq + q)*Tk + k, counter = offset + index (dropout.cuh's RNG; the seed
 * comes from dropout.cuh's device seed when one is set, for CUDA graphs).
 * Mixed dtypes (the _ex launchers, the model's path, no cast kernels around them): scores fp32 or X (read
 * as fp32: the same values a cast would give), probs PX = fp32 or X, probs_drop X (written from the PX-rounded
 * probs: bit-identical to rounding a PX probs_drop to X afterwards); backward reads dprobs_drop and probs in
 * PX and writes dscores in X (rounded once from the fp32 softmax gradient, as a cast of a PX dscores would).
 * Forward: one warp per (b,h,q) row; each lane takes 4 consecutive keys at a time: one 8/16-byte access per
 * tensor when Tk % 4 == 0 and the bases are 16-byte aligned, and one Philox call for their 4 dropout words.
 * Rows of up to 128 keys stay in registers (kernel3: one read of scores/bias/mask, one exp per key); longer
 * rows take three passes (kernel2: max, sum, write).
 * Backward: kernel3 (Tk <= 128, B*Tk floats of shared memory): one block per (h,q) with one warp per batch
 * entry b, the row in registers, and dbias summed over b in order from shared memory; kernel2 otherwise: one
 * warp per (h,q) row looping b in order. Both deterministic without atomics.
 */
#include "attention_softmax.cuh"
#include "common.cuh"
#include "dropout.cuh"

// ---- CUDA kernels

// 4 consecutive elements as one 8- or 16-byte access (vec4: Tk % 4 == 0 and 16-byte aligned bases), else scalar
// with bounds (elements at or past `end` read as 0 and are not written)
template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
    T v[4];
};

template <typename T>
__device__ __forceinline__ void load4(const T* p, int k0, int end, bool vec4, float (&out)[4]) {
    if (vec4) {
        const Pack4<T> q = *reinterpret_cast<const Pack4<T>*>(p + k0);
#pragma unroll
        for (int j = 0; j < 4; j++) out[j] = to_f32(q.v[j]);
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++) out[j] = k0 + j < end ? to_f32(p[k0 + j]) : 0.0f;
    }
}

template <typename T>
__device__ __forceinline__ void store4(T* p, int k0, int end, bool vec4, const float (&in)[4]) {
    if (vec4) {
        Pack4<T> q;
#pragma unroll
        for (int j = 0; j < 4; j++) q.v[j] = from_f32<T>(in[j]);
        *reinterpret_cast<Pack4<T>*>(p + k0) = q;
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (k0 + j < end) p[k0 + j] = from_f32<T>(in[j]);
    }
}

// keys k0..k0+3 of a row: s = scores + bias in fp32, ok = not masked (k < kend, key_mask != 0)
template <typename TS>
__device__ __forceinline__ void softmax_load_group(const TS* srow, const float* brow, const int* mrow, int k0,
                                                   int Tk, int kend, bool vec4, float (&v)[4], bool (&ok)[4]) {
    load4(srow, k0, Tk, vec4, v);
    if (brow) {
        float bb[4];
        load4(brow, k0, Tk, vec4, bb);
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] += bb[j];
    }
    int m[4] = {1, 1, 1, 1};
    if (mrow) {
        if (vec4) {
            const int4 q = *reinterpret_cast<const int4*>(mrow + k0);
            m[0] = q.x;
            m[1] = q.y;
            m[2] = q.z;
            m[3] = q.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) m[j] = k0 + j < Tk ? mrow[k0 + j] : 0;
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++) ok[j] = k0 + j < kend && m[j] != 0;
}

// TS scores, TP probs, TD probs_drop (written only when write_drop)
template <typename TS, typename TP, typename TD>
__global__ void attention_softmax_forward_kernel2(TP* probs, TD* probs_drop, const TS* scores, const float* bias,
                                                  const int* key_mask, bool causal, int q_offset, int B, int H,
                                                  int Tq, int Tk, float p, float scale, uint64_t seed,
                                                  uint64_t offset, const uint64_t* seed_dev, bool write_drop,
                                                  bool vec4) {
    if (seed_dev) seed = *seed_dev;
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= (size_t)B * H * Tq) return;
    const int q = (int)(row % Tq);
    const int h = (int)((row / Tq) % H);
    const int b = (int)(row / ((size_t)Tq * H));
    const TS* srow = scores + row * Tk;
    const float* brow = bias ? bias + ((size_t)h * Tq + q) * Tk : nullptr;
    const int* mrow = key_mask ? key_mask + (size_t)b * Tk : nullptr;
    const int kmax = causal ? q + q_offset : Tk - 1;  // keys above kmax are masked
    const int kend = min(Tk, kmax + 1);

    float mx = -INFINITY;
    for (int k0 = 4 * lane; k0 < kend; k0 += 128) {
        float v[4];
        bool ok[4];
        softmax_load_group(srow, brow, mrow, k0, Tk, kend, vec4, v, ok);
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (ok[j]) mx = fmaxf(mx, v[j]);
    }
    mx = warp_reduce_max(mx);
    const bool all_masked = mx == -INFINITY;
    float sum = 0.0f;
    if (!all_masked) {
        for (int k0 = 4 * lane; k0 < kend; k0 += 128) {
            float v[4];
            bool ok[4];
            softmax_load_group(srow, brow, mrow, k0, Tk, kend, vec4, v, ok);
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (ok[j]) sum += expf(v[j] - mx);
        }
        sum = warp_reduce_sum(sum);
    }
    const float inv = all_masked ? 0.0f : 1.0f / sum;
    TP* prow = probs + row * Tk;
    TD* drow = probs_drop + row * Tk;
    const uint64_t base = offset + row * Tk;
    for (int k0 = 4 * lane; k0 < Tk; k0 += 128) {
        float v[4], pr[4], pd[4], f[4];
        bool ok[4];
        softmax_load_group(srow, brow, mrow, k0, Tk, kend, vec4, v, ok);
        if (write_drop) dropout_factors<4>(seed, base + k0, p, scale, f);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (all_masked) pr[j] = 1.0f / (float)Tk;
            else pr[j] = ok[j] ? expf(v[j] - mx) * inv : 0.0f;
            pr[j] = round_to<TP>(pr[j]);
            pd[j] = write_drop ? to_f32(pr[j]) * f[j] : 0.0f;
        }
        store4(prow, k0, Tk, vec4, pr);
        if (write_drop) store4(drow, k0, Tk, vec4, pd);
    }
}

// Rows of at most 128 keys: lane l keeps keys 4l..4l+3 in registers, so scores, bias and mask are read once and exp
// is evaluated once per key (kernel2 makes three passes over the row). Same values as kernel2: the same fp32
// operations in the same order per element, the same warp reductions.
template <typename TS, typename TP, typename TD>
__global__ void attention_softmax_forward_kernel3(TP* probs, TD* probs_drop, const TS* scores, const float* bias,
                                                  const int* key_mask, bool causal, int q_offset, int B, int H,
                                                  int Tq, int Tk, float p, float scale, uint64_t seed,
                                                  uint64_t offset, const uint64_t* seed_dev, bool write_drop,
                                                  bool vec4) {
    if (seed_dev) seed = *seed_dev;
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= (size_t)B * H * Tq) return;
    const int q = (int)(row % Tq);
    const int h = (int)((row / Tq) % H);
    const int b = (int)(row / ((size_t)Tq * H));
    const TS* srow = scores + row * Tk;
    const float* brow = bias ? bias + ((size_t)h * Tq + q) * Tk : nullptr;
    const int* mrow = key_mask ? key_mask + (size_t)b * Tk : nullptr;
    const int kmax = causal ? q + q_offset : Tk - 1;
    const int kend = min(Tk, kmax + 1);
    const int k0 = 4 * lane;

    float v[4];
    bool ok[4] = {false, false, false, false};
    float mx = -INFINITY;
    if (k0 < kend) softmax_load_group(srow, brow, mrow, k0, Tk, kend, vec4, v, ok);
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (ok[j]) mx = fmaxf(mx, v[j]);
    mx = warp_reduce_max(mx);
    const bool all_masked = mx == -INFINITY;
    float sum = 0.0f;
    if (!all_masked) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            v[j] = ok[j] ? expf(v[j] - mx) : 0.0f;
            sum += v[j];
        }
        sum = warp_reduce_sum(sum);
    }
    if (k0 >= Tk) return;
    const float inv = all_masked ? 0.0f : 1.0f / sum;
    float pr[4], pd[4], f[4];
    if (write_drop) dropout_factors<4>(seed, offset + row * Tk + k0, p, scale, f);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (all_masked) pr[j] = 1.0f / (float)Tk;
        else pr[j] = ok[j] ? v[j] * inv : 0.0f;
        pr[j] = round_to<TP>(pr[j]);
        pd[j] = write_drop ? to_f32(pr[j]) * f[j] : 0.0f;
    }
    store4(probs + row * Tk, k0, Tk, vec4, pr);
    if (write_drop) store4(probs_drop + row * Tk, k0, Tk, vec4, pd);
}

// TP dprobs_drop and probs, TO dscores. Block = one (h,q) row of at most 128 keys with one warp per batch entry b
// (bwarps = min(B, 32) warps; warp w takes b = w, w + bwarps, ...), lane l holding keys 4l..4l+3 in registers; each
// warp writes its rows' dscores and its per-b softmax gradients to shared memory; dbias then sums them over b in
// order (fixed order: deterministic, no atomics). dynamic smem: B * Tk floats.
template <typename TP, typename TO>
__global__ void attention_softmax_backward_kernel3(TO* dscores, float* dbias, const TP* dprobs_drop, const TP* probs,
                                                   int B, int H, int Tq, int Tk, float p, float scale,
                                                   uint64_t seed, uint64_t offset, const uint64_t* seed_dev,
                                                   bool vec4) {
    if (seed_dev) seed = *seed_dev;
    extern __shared__ float ds_sh[];  // (B, Tk) fp32 softmax gradients, only when dbias
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const size_t hq = blockIdx.x;  // h*Tq + q
    const size_t bstride = (size_t)H * Tq * Tk;
    const int k0 = 4 * lane;
    for (int b = warp; b < B; b += nw) {
        const size_t r0 = (size_t)b * bstride + hq * Tk;
        float gf[4], pr[4];
        float dot = 0.0f;
        if (k0 < Tk) {
            float f[4];
            dropout_factors<4>(seed, offset + r0 + k0, p, scale, f);
            load4(dprobs_drop + r0, k0, Tk, vec4, gf);
            load4(probs + r0, k0, Tk, vec4, pr);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                gf[j] *= f[j];
                dot += gf[j] * pr[j];
            }
        }
        dot = warp_reduce_sum(dot);
        if (k0 < Tk) {
            float ds[4];
#pragma unroll
            for (int j = 0; j < 4; j++) ds[j] = pr[j] * (gf[j] - dot);
            store4(dscores + r0, k0, Tk, vec4, ds);
            if (dbias)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (k0 + j < Tk) ds_sh[(size_t)b * Tk + k0 + j] = ds[j];
        }
    }
    if (!dbias) return;
    __syncthreads();
    float* drow = dbias + hq * Tk;
    for (int k = threadIdx.x; k < Tk; k += blockDim.x) {
        float acc = 0.0f;
        for (int b = 0; b < B; b++) acc += ds_sh[(size_t)b * Tk + k];
        drow[k] += acc;
    }
}

// TP dprobs_drop and probs, TO dscores.
// grid: ceil(H*Tq / warps) blocks of `warps` warps; dynamic smem warps * B floats
template <typename TP, typename TO>
__global__ void attention_softmax_backward_kernel2(TO* dscores, float* dbias, const TP* dprobs_drop, const TP* probs,
                                                   int B, int H, int Tq, int Tk, float p, float scale,
                                                   uint64_t seed, uint64_t offset, const uint64_t* seed_dev,
                                                   bool vec4) {
    if (seed_dev) seed = *seed_dev;
    extern __shared__ float dots_sh[];  // (warps, B)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t hq = (size_t)blockIdx.x * (blockDim.x >> 5) + warp;
    if (hq >= (size_t)H * Tq) return;
    float* dots = dots_sh + (size_t)warp * B;
    const size_t bstride = (size_t)H * Tq * Tk;  // elements between batch entries
    for (int b = 0; b < B; b++) {
        const size_t r0 = (size_t)b * bstride + hq * Tk;  // element index of (b,h,q,0)
        float dot = 0.0f;
        for (int k0 = 4 * lane; k0 < Tk; k0 += 128) {
            float f[4], g[4], pr[4];
            dropout_factors<4>(seed, offset + r0 + k0, p, scale, f);
            load4(dprobs_drop + r0, k0, Tk, vec4, g);
            load4(probs + r0, k0, Tk, vec4, pr);
#pragma unroll
            for (int j = 0; j < 4; j++) dot += g[j] * f[j] * pr[j];
        }
        dot = warp_reduce_sum(dot);
        if (lane == 0) dots[b] = dot;
    }
    __syncwarp();
    for (int k0 = 4 * lane; k0 < Tk; k0 += 128) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int b = 0; b < B; b++) {
            const size_t r0 = (size_t)b * bstride + hq * Tk;
            float f[4], g[4], pr[4], ds[4];
            dropout_factors<4>(seed, offset + r0 + k0, p, scale, f);
            load4(dprobs_drop + r0, k0, Tk, vec4, g);
            load4(probs + r0, k0, Tk, vec4, pr);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                ds[j] = pr[j] * (g[j] * f[j] - dots[b]);
                acc[j] += ds[j];
            }
            store4(dscores + r0, k0, Tk, vec4, ds);
        }
        if (dbias) {
            float d[4];
            load4(dbias + hq * Tk, k0, Tk, vec4, d);
#pragma unroll
            for (int j = 0; j < 4; j++) d[j] += acc[j];
            store4(dbias + hq * Tk, k0, Tk, vec4, d);
        }
    }
}

// ---- kernel launchers

static float attn_dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

typedef struct {
    void* probs;
    void* probs_drop;
    const void* scores;
    const float* bias;
    const int* key_mask;
    bool causal, write_drop, vec4;
    int q_offset, B, H, Tq, Tk;
    float p;
    uint64_t seed, offset;
} SoftmaxFwdArgs;

template <typename TS, typename TP, typename TD>
static void attention_softmax_forward_launch3(const SoftmaxFwdArgs* a, unsigned grid, int threads,
                                              cudaStream_t stream) {
    attention_softmax_forward_kernel3<TS, TP, TD><<<grid, threads, 0, stream>>>(
        (TP*)a->probs, (TD*)a->probs_drop, (const TS*)a->scores, a->bias, a->key_mask, a->causal, a->q_offset, a->B,
        a->H, a->Tq, a->Tk, a->p, attn_dropout_scale(a->p), a->seed, a->offset, dropout_device_seed(), a->write_drop,
        a->vec4);
}

template <typename TS, typename TP, typename TD>
static void attention_softmax_forward_launch(const SoftmaxFwdArgs* a, cudaStream_t stream) {
    const int warps = 8;
    const size_t rows = (size_t)a->B * a->H * a->Tq;
    const unsigned grid = (unsigned)CEIL_DIV(rows, (size_t)warps);
    // rows of up to 128 keys in registers (kernel3; the training shapes), longer rows in three passes (kernel2)
    if (a->Tk <= 128) attention_softmax_forward_launch3<TS, TP, TD>(a, grid, warps * 32, stream);
    else
        attention_softmax_forward_kernel2<TS, TP, TD><<<grid, warps * 32, 0, stream>>>(
            (TP*)a->probs, (TD*)a->probs_drop, (const TS*)a->scores, a->bias, a->key_mask, a->causal, a->q_offset,
            a->B, a->H, a->Tq, a->Tk, a->p, attn_dropout_scale(a->p), a->seed, a->offset, dropout_device_seed(),
            a->write_drop, a->vec4);
}

// TD = X; scores and probs each fp32 or X
template <typename TD>
static void attention_softmax_forward_td(const SoftmaxFwdArgs* a, DType dt_scores, DType dt_probs,
                                         cudaStream_t stream) {
    const bool s32 = dt_scores == DT_F32, p32 = dt_probs == DT_F32;
    if (s32 && p32) attention_softmax_forward_launch<float, float, TD>(a, stream);
    else if (s32) attention_softmax_forward_launch<float, TD, TD>(a, stream);
    else if (p32) attention_softmax_forward_launch<TD, float, TD>(a, stream);
    else attention_softmax_forward_launch<TD, TD, TD>(a, stream);
}

typedef struct {
    void* dscores;
    float* dbias;
    const void* dprobs_drop;
    const void* probs;
    int B, H, Tq, Tk;
    float p;
    uint64_t seed, offset;
    bool vec4;
} SoftmaxBwdArgs;

template <typename TP, typename TO>
static void attention_softmax_backward_launch3(const SoftmaxBwdArgs* a, cudaStream_t stream) {
    const int warps = T5_MIN(a->B, 32);
    const size_t smem = a->dbias ? (size_t)a->B * a->Tk * sizeof(float) : 0;
    attention_softmax_backward_kernel3<TP, TO><<<(unsigned)((size_t)a->H * a->Tq), warps * 32, smem, stream>>>(
        (TO*)a->dscores, a->dbias, (const TP*)a->dprobs_drop, (const TP*)a->probs, a->B, a->H, a->Tq, a->Tk, a->p,
        attn_dropout_scale(a->p), a->seed, a->offset, dropout_device_seed(), a->vec4);
}

template <typename TP, typename TO>
static void attention_softmax_backward_launch(const SoftmaxBwdArgs* a, cudaStream_t stream) {
    // one block per (h,q) with a warp per batch entry (kernel3) while the B rows of dscores fit in shared memory
    // beside the keys in registers; else one warp per (h,q) looping over b (kernel2)
    if ((size_t)a->B * a->Tk * sizeof(float) <= 48 * 1024 || !a->dbias) {
        if (a->Tk <= 128) return attention_softmax_backward_launch3<TP, TO>(a, stream);
    }
    const int warps = 4;
    const size_t smem = (size_t)warps * a->B * sizeof(float);
    const size_t rows = (size_t)a->H * a->Tq;
    attention_softmax_backward_kernel2<TP, TO><<<(unsigned)CEIL_DIV(rows, (size_t)warps), warps * 32, smem, stream>>>(
        (TO*)a->dscores, a->dbias, (const TP*)a->dprobs_drop, (const TP*)a->probs, a->B, a->H, a->Tq, a->Tk, a->p,
        attn_dropout_scale(a->p), a->seed, a->offset, dropout_device_seed(), a->vec4);
}

template <typename TO>
static void attention_softmax_backward_to(const SoftmaxBwdArgs* a, DType dt_probs, cudaStream_t stream) {
    if (dt_probs == DT_F32) attention_softmax_backward_launch<float, TO>(a, stream);
    else attention_softmax_backward_launch<TO, TO>(a, stream);
}

extern "C" void attention_softmax_forward_ex(void* probs, DType dt_probs, void* probs_drop, DType dt_drop,
                                             const void* scores, DType dt_scores, const float* bias,
                                             const int* key_mask, bool causal, int q_offset, int B, int H, int Tq,
                                             int Tk, float dropout_p, uint64_t seed, uint64_t offset,
                                             cudaStream_t stream) {
    if (B <= 0 || H <= 0 || Tq <= 0 || Tk <= 0) return;
    if (!(dropout_p >= 0.0f && dropout_p <= 1.0f))
        t5_die(T5_EXIT_FAILURE, "attention_softmax_forward: dropout probability %g is outside [0, 1]", dropout_p);
    if (dropout_p > 0.0f && (probs_drop == probs || probs_drop == NULL))
        t5_die(T5_EXIT_FAILURE, "attention_softmax_forward: probs_drop must differ from probs when dropout_p > 0 "
                                "(the backward needs the probabilities before dropout)");
    if ((dt_scores != DT_F32 && dt_scores != dt_drop) || (dt_probs != DT_F32 && dt_probs != dt_drop))
        t5_die(T5_EXIT_FAILURE, "attention_softmax_forward: scores %s and probs %s must be fp32 or the probs_drop "
                                "dtype %s", dtype_name(dt_scores), dtype_name(dt_probs), dtype_name(dt_drop));
    SoftmaxFwdArgs a = {probs, probs_drop, scores, bias, key_mask, causal,
                        probs_drop != NULL && probs_drop != probs, false, q_offset, B, H, Tq, Tk, dropout_p, seed,
                        offset};
    if (!a.write_drop) a.probs_drop = probs;
    a.vec4 = Tk % 4 == 0 && is_aligned16(probs) && is_aligned16(a.probs_drop) && is_aligned16(scores) &&
             (!bias || is_aligned16(bias)) && (!key_mask || is_aligned16(key_mask));
    DTYPE_DISPATCH(dt_drop, attention_softmax_forward_td, &a, dt_scores, dt_probs, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void attention_softmax_backward_ex(void* dscores, DType dt_dscores, float* dbias, const void* dprobs_drop,
                                              const void* probs, DType dt_probs, int B, int H, int Tq, int Tk,
                                              float dropout_p, uint64_t seed, uint64_t offset, cudaStream_t stream) {
    if (B <= 0 || H <= 0 || Tq <= 0 || Tk <= 0) return;
    if ((size_t)B * 4 * sizeof(float) > 48 * 1024)
        t5_die(T5_EXIT_FAILURE, "attention_softmax_backward: batch %d is above the supported 3072", B);
    if (dt_probs != DT_F32 && dt_probs != dt_dscores)
        t5_die(T5_EXIT_FAILURE, "attention_softmax_backward: probs %s must be fp32 or the dscores dtype %s",
               dtype_name(dt_probs), dtype_name(dt_dscores));
    SoftmaxBwdArgs a = {dscores, dbias, dprobs_drop, probs, B, H, Tq, Tk, dropout_p, seed, offset, false};
    a.vec4 = Tk % 4 == 0 && is_aligned16(dscores) && is_aligned16(dprobs_drop) && is_aligned16(probs) &&
             (!dbias || is_aligned16(dbias));
    DTYPE_DISPATCH(dt_dscores, attention_softmax_backward_to, &a, dt_probs, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void attention_softmax_forward(void* probs, void* probs_drop, DType dt, const float* scores,
                                          const float* bias, const int* key_mask, bool causal, int q_offset, int B,
                                          int H, int Tq, int Tk, float dropout_p, uint64_t seed, uint64_t offset,
                                          cudaStream_t stream) {
    attention_softmax_forward_ex(probs, dt, probs_drop, dt, scores, DT_F32, bias, key_mask, causal, q_offset, B, H,
                                 Tq, Tk, dropout_p, seed, offset, stream);
}

extern "C" void attention_softmax_backward(void* dscores, float* dbias, DType dt, const void* dprobs_drop,
                                           const void* probs, int B, int H, int Tq, int Tk, float dropout_p,
                                           uint64_t seed, uint64_t offset, cudaStream_t stream) {
    attention_softmax_backward_ex(dscores, dt, dbias, dprobs_drop, probs, dt, B, H, Tq, Tk, dropout_p, seed, offset,
                                  stream);
}
