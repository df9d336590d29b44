/*
 * cross_entropy.cu: fused softmax cross-entropy over the vocabulary with HF semantics
 * (CrossEntropyLoss(ignore_index=-100), mean over the non-ignored tokens), optionally label-smoothed as the
 * Trainer's LabelSmoother (epsilon e); see cross_entropy.cuh.
 *   logits (N,V) X, labels (N) int32, lse_n = logsumexp(logits[n]), mean_n = sum_k logits[n,k] / V.
 *   losses (N) fp32 = (1-e) (lse_n - logits[n, label]) + e (lse_n - mean_n) (0 for ignored rows)   (=)
 *     (e = 0: the plain cross-entropy; the e term is LabelSmoother's -sum_k log p_k / V per token)
 *   loss (1) fp32 = sum_n losses[n] / count, count = #(labels != -100); 0 when count == 0    (=)
 *     (LabelSmoother divides the nll sum by count and the smoothed sum by count * V: the same mean)
 *   dlogits (N,V) X = grad_scale * (softmax(logits[n]) - (1-e) onehot(label) - e / V) / count, 0 rows when
 *     ignored (=) (may alias logits; NULL skips it)
 * A label outside [0,V) that is not -100 makes its row's loss NaN (and so the mean loss): a visible
 * failure instead of a silent wrong loss; the data pipeline is expected to prevent it.
 * Three launches, no host synchronisation: (1) one block counts the non-ignored labels into scratch;
 * (2) one block per row: an online max/sum pass (fp32) then the gradient pass, 128-bit accesses when
 * V % 8 == 0; (3) one block sums the losses in a fixed order (deterministic) and divides.
 * scratch layout: [0,256) the count (int32), then N floats for the per-row losses when losses == NULL.
 */
#include "common.cuh"
#include "cross_entropy.cuh"

// ---- CUDA kernels

__global__ void cross_entropy_count_kernel1(int* count, const int* labels, int N) {
    __shared__ float red[32];
    float c = 0.0f;  // exact: counts stay far below 2^24
    for (int i = threadIdx.x; i < N; i += blockDim.x) c += labels[i] != -100 ? 1.0f : 0.0f;
    c = block_reduce_sum(c, red);
    if (threadIdx.x == 0) *count = (int)c;
}

// merge two (max, sum of exp(x - max)) pairs
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    const float mm = fmaxf(m, m2);
    if (mm == -INFINITY) return;  // both empty
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

template <typename T>
__global__ void cross_entropy_forward_backward_kernel1(float* losses, T* dlogits, const T* logits, const int* labels,
                                                       const int* count, int V, float grad_scale, float smoothing,
                                                       bool vec) {
    __shared__ float sh_m[32], sh_s[32], sh_x[32];
    __shared__ float sh_label_logit;
    const int n = blockIdx.x;
    const int label = labels[n];
    const bool ignored = label == -100;
    const bool bad = !ignored && (label < 0 || label >= V);
    const T* x = logits + (size_t)n * V;
    if (threadIdx.x == 0) sh_label_logit = (!ignored && !bad) ? to_f32(x[label]) : 0.0f;  // read before any write

    // pass 1: per-thread online (max, sum), then a block merge; with smoothing also the plain sum of the logits
    float m = -INFINITY, s = 0.0f, sx = 0.0f;
    for (int i0 = threadIdx.x * EW_CHUNK; i0 < V; i0 += blockDim.x * EW_CHUNK) {
        float v[EW_CHUNK];
        load_chunk(x, i0, V, vec, v);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) {
            if (i0 + j >= V) break;
            sx += v[j];
            if (v[j] > m) {
                s = s * expf(m - v[j]) + 1.0f;
                m = v[j];
            } else if (v[j] > -INFINITY) {  // a -inf logit adds nothing (and must not make NaN)
                s += expf(v[j] - m);
            }
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
        sx += __shfl_xor_sync(0xffffffffu, sx, o);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) {
        sh_m[warp] = m;
        sh_s[warp] = s;
        sh_x[warp] = sx;
    }
    __syncthreads();
    m = -INFINITY;
    s = 0.0f;
    sx = 0.0f;
    for (int w = 0; w < nwarps; w++) {  // same order in every thread (deterministic)
        lse_merge(m, s, sh_m[w], sh_s[w]);
        sx += sh_x[w];
    }
    const float lse = m + logf(s);
    if (threadIdx.x == 0) {
        const float nll = lse - sh_label_logit;
        // smoothing == 0 keeps the plain loss bit for bit (no (1-0) * nll + 0 * ... rounding, no inf * 0)
        const float l = smoothing == 0.0f ? nll : (1.0f - smoothing) * nll + smoothing * (lse - sx / (float)V);
        losses[n] = ignored ? 0.0f : bad ? NAN : l;
    }

    // pass 2: gradient
    if (!dlogits) return;
    const int cnt = *count;
    const float g = ignored || cnt == 0 ? 0.0f : grad_scale / (float)cnt;
    const float hit = 1.0f - smoothing, floor_ = smoothing / (float)V;  // the smoothed target: (1-e) onehot + e/V
    T* dx = dlogits + (size_t)n * V;
    for (int i0 = threadIdx.x * EW_CHUNK; i0 < V; i0 += blockDim.x * EW_CHUNK) {
        float v[EW_CHUNK];
        load_chunk(x, i0, V, vec, v);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) v[j] = g * (expf(v[j] - lse) - floor_ - (i0 + j == label ? hit : 0.0f));
        store_chunk(dx, i0, V, vec, v);
    }
}

__global__ void cross_entropy_mean_kernel1(float* loss, const float* losses, const int* count, int N) {
    __shared__ float red[32];
    float s = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += losses[i];
    s = block_reduce_sum(s, red);
    if (threadIdx.x == 0) {
        const int c = *count;
        *loss = c > 0 ? s / (float)c : 0.0f;
    }
}

// ---- kernel launchers

extern "C" size_t cross_entropy_scratch_bytes(int N) { return 256 + (((size_t)(N > 0 ? N : 0) * 4 + 255) & ~(size_t)255); }

template <typename T>
static void cross_entropy_rows_t(float* losses, void* dlogits, const void* logits, const int* labels,
                                 const int* count, int N, int V, float grad_scale, float smoothing,
                                 cudaStream_t stream) {
    const bool vec = V % EW_CHUNK == 0 && is_aligned16(logits) && (!dlogits || is_aligned16(dlogits));
    cross_entropy_forward_backward_kernel1<T><<<N, 512, 0, stream>>>(losses, (T*)dlogits, (const T*)logits, labels,
                                                                     count, V, grad_scale, smoothing, vec);
}

extern "C" void cross_entropy_forward_backward(float* loss, float* losses, void* dlogits, const void* logits, DType dt,
                                               const int* labels, int N, int V, float grad_scale, void* scratch,
                                               cudaStream_t stream) {
    cross_entropy_smoothed_forward_backward(loss, losses, dlogits, logits, dt, labels, N, V, grad_scale, 0.0f, scratch,
                                            stream);
}

extern "C" void cross_entropy_smoothed_forward_backward(float* loss, float* losses, void* dlogits, const void* logits,
                                                        DType dt, const int* labels, int N, int V, float grad_scale,
                                                        float label_smoothing, void* scratch, cudaStream_t stream) {
    if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f))
        t5_die(T5_EXIT_FAILURE, "cross_entropy_forward_backward: label smoothing %g outside [0, 1)",
               (double)label_smoothing);
    if (N <= 0) {
        if (loss) CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), stream));
        return;
    }
    if (V <= 0) t5_die(T5_EXIT_FAILURE, "cross_entropy_forward_backward: vocabulary size %d", V);
    int* count = (int*)scratch;
    if (!losses) losses = (float*)((char*)scratch + 256);
    cross_entropy_count_kernel1<<<1, 1024, 0, stream>>>(count, labels, N);
    CUDA_LAUNCH_CHECK();
    DTYPE_DISPATCH(dt, cross_entropy_rows_t, losses, dlogits, logits, labels, count, N, V, grad_scale, label_smoothing,
                   stream);
    CUDA_LAUNCH_CHECK();
    if (loss) {
        cross_entropy_mean_kernel1<<<1, 1024, 0, stream>>>(loss, losses, count, N);
        CUDA_LAUNCH_CHECK();
    }
}
