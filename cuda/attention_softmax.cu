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
 * Dropout element index = ((b*H + h)*Tq + q)*Tk + k, counter = offset + index (dropout.cuh's RNG).
 * Forward: one warp per (b,h,q) row, three passes over the row (max, sum, write; the row stays in L1).
 * Backward: one warp per (h,q) row looping b in order (deterministic dbias without atomics); the B
 * row dot products are kept in shared memory.
 */
#include "attention_softmax.cuh"
#include "common.cuh"

// ---- CUDA kernels

template <typename T>
__global__ void attention_softmax_forward_kernel1(T* probs, T* probs_drop, const float* scores, const float* bias,
                                                  const int* key_mask, bool causal, int q_offset, int B, int H,
                                                  int Tq, int Tk, float p, float scale, uint64_t seed,
                                                  uint64_t offset) {
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= (size_t)B * H * Tq) return;
    const int q = (int)(row % Tq);
    const int h = (int)((row / Tq) % H);
    const int b = (int)(row / ((size_t)Tq * H));
    const float* srow = scores + row * Tk;
    const float* brow = bias ? bias + ((size_t)h * Tq + q) * Tk : nullptr;
    const int* mrow = key_mask ? key_mask + (size_t)b * Tk : nullptr;
    const int kmax = causal ? q + q_offset : Tk - 1;  // keys above kmax are masked

    float mx = -INFINITY;
    for (int k = lane; k < Tk && k <= kmax; k += 32) {
        if (mrow && mrow[k] == 0) continue;
        mx = fmaxf(mx, srow[k] + (brow ? brow[k] : 0.0f));
    }
    mx = warp_reduce_max(mx);
    const bool all_masked = mx == -INFINITY;
    float sum = 0.0f;
    if (!all_masked) {
        for (int k = lane; k < Tk && k <= kmax; k += 32) {
            if (mrow && mrow[k] == 0) continue;
            sum += expf(srow[k] + (brow ? brow[k] : 0.0f) - mx);
        }
        sum = warp_reduce_sum(sum);
    }
    const float inv = all_masked ? 0.0f : 1.0f / sum;
    T* prow = probs + row * Tk;
    T* drow = probs_drop + row * Tk;
    const uint64_t base = offset + row * Tk;
    for (int k = lane; k < Tk; k += 32) {
        float pr;
        if (all_masked) pr = 1.0f / (float)Tk;
        else if (k > kmax || (mrow && mrow[k] == 0)) pr = 0.0f;
        else pr = expf(srow[k] + (brow ? brow[k] : 0.0f) - mx) * inv;
        const T pt = from_f32<T>(pr);
        prow[k] = pt;
        if (probs_drop != probs) drow[k] = from_f32<T>(to_f32(pt) * dropout_factor(seed, base + k, p, scale));
    }
}

// grid: ceil(H*Tq / warps) blocks of `warps` warps; dynamic smem warps * B floats
template <typename T>
__global__ void attention_softmax_backward_kernel1(T* dscores, float* dbias, const T* dprobs_drop, const T* probs,
                                                   int B, int H, int Tq, int Tk, float p, float scale,
                                                   uint64_t seed, uint64_t offset) {
    extern __shared__ float dots_sh[];  // (warps, B)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t hq = (size_t)blockIdx.x * (blockDim.x >> 5) + warp;
    if (hq >= (size_t)H * Tq) return;
    float* dots = dots_sh + (size_t)warp * B;
    const size_t bstride = (size_t)H * Tq * Tk;  // elements between batch entries
    for (int b = 0; b < B; b++) {
        const size_t r0 = (size_t)b * bstride + hq * Tk;  // element index of (b,h,q,0)
        float dot = 0.0f;
        for (int k = lane; k < Tk; k += 32)
            dot += to_f32(dprobs_drop[r0 + k]) * dropout_factor(seed, offset + r0 + k, p, scale) * to_f32(probs[r0 + k]);
        dot = warp_reduce_sum(dot);
        if (lane == 0) dots[b] = dot;
    }
    __syncwarp();
    for (int k = lane; k < Tk; k += 32) {
        float acc = 0.0f;
        for (int b = 0; b < B; b++) {
            const size_t i = (size_t)b * bstride + hq * Tk + k;
            const float dp = to_f32(dprobs_drop[i]) * dropout_factor(seed, offset + i, p, scale);
            const float ds = to_f32(probs[i]) * (dp - dots[b]);
            dscores[i] = from_f32<T>(ds);
            acc += ds;
        }
        if (dbias) dbias[hq * Tk + k] += acc;
    }
}

// ---- kernel launchers

static float attn_dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

template <typename T>
static void attention_softmax_forward_t(void* probs, void* probs_drop, const float* scores, const float* bias,
                                        const int* key_mask, bool causal, int q_offset, int B, int H, int Tq, int Tk,
                                        float p, uint64_t seed, uint64_t offset, cudaStream_t stream) {
    const int warps = 8;
    const size_t rows = (size_t)B * H * Tq;
    attention_softmax_forward_kernel1<T><<<(unsigned)CEIL_DIV(rows, (size_t)warps), warps * 32, 0, stream>>>(
        (T*)probs, (T*)probs_drop, scores, bias, key_mask, causal, q_offset, B, H, Tq, Tk, p, attn_dropout_scale(p),
        seed, offset);
}

template <typename T>
static void attention_softmax_backward_t(void* dscores, float* dbias, const void* dprobs_drop, const void* probs,
                                         int B, int H, int Tq, int Tk, float p, uint64_t seed, uint64_t offset,
                                         cudaStream_t stream) {
    const int warps = 4;
    const size_t smem = (size_t)warps * B * sizeof(float);
    const size_t rows = (size_t)H * Tq;
    attention_softmax_backward_kernel1<T><<<(unsigned)CEIL_DIV(rows, (size_t)warps), warps * 32, smem, stream>>>(
        (T*)dscores, dbias, (const T*)dprobs_drop, (const T*)probs, B, H, Tq, Tk, p, attn_dropout_scale(p), seed,
        offset);
}

extern "C" void attention_softmax_forward(void* probs, void* probs_drop, DType dt, const float* scores,
                                          const float* bias, const int* key_mask, bool causal, int q_offset, int B,
                                          int H, int Tq, int Tk, float dropout_p, uint64_t seed, uint64_t offset,
                                          cudaStream_t stream) {
    if (B <= 0 || H <= 0 || Tq <= 0 || Tk <= 0) return;
    if (!(dropout_p >= 0.0f && dropout_p <= 1.0f))
        t5_die(T5_EXIT_FAILURE, "attention_softmax_forward: dropout probability %g is outside [0, 1]", dropout_p);
    if (dropout_p > 0.0f && probs_drop == probs)
        t5_die(T5_EXIT_FAILURE, "attention_softmax_forward: probs_drop must differ from probs when dropout_p > 0 "
                                "(the backward needs the probabilities before dropout)");
    if (!probs_drop) probs_drop = probs;
    DTYPE_DISPATCH(dt, attention_softmax_forward_t, probs, probs_drop, scores, bias, key_mask, causal, q_offset, B, H,
                   Tq, Tk, dropout_p, seed, offset, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void attention_softmax_backward(void* dscores, float* dbias, DType dt, const void* dprobs_drop,
                                           const void* probs, int B, int H, int Tq, int Tk, float dropout_p,
                                           uint64_t seed, uint64_t offset, cudaStream_t stream) {
    if (B <= 0 || H <= 0 || Tq <= 0 || Tk <= 0) return;
    if ((size_t)B * 4 * sizeof(float) > 48 * 1024)
        t5_die(T5_EXIT_FAILURE, "attention_softmax_backward: batch %d is above the supported 3072", B);
    DTYPE_DISPATCH(dt, attention_softmax_backward_t, dscores, dbias, dprobs_drop, probs, B, H, Tq, Tk, dropout_p,
                   seed, offset, stream);
    CUDA_LAUNCH_CHECK();
}
