/*
 * activation.cu: the feed-forward nonlinearities of T5 (see activation.cuh for the contract).
 *   relu:       out (n) X = max(x, 0);                 backward dx (n) X = dout * (out > 0)     (=)
 *   relu_dropout_backward: dx (n) X = round_X(dropout(dout)) * (out > 0), the backward of dropout(relu(x)) in
 *               one pass (the same values as dropout_backward then relu_backward)                (=)
 *   gated gelu: out (n) X = gelu_new(a) * b (fp32 math, one rounding to X);
 *               backward da = dout * b * gelu_new'(a), db = dout * gelu_new(a)               (=)
 * gelu_new(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), HF's "gelu_new" (tanh approximation),
 * computed with tanhf (no fast math). Elementwise, 8 elements per thread, 128-bit accesses when every
 * pointer is 16-byte aligned. In-place (out == x, dx == dout, da == dout) is allowed: each element is
 * read before it is written by the same thread.
 */
#include "activation.cuh"
#include "dropout.cuh"
#include "common.cuh"

// ---- CUDA kernels

__device__ __forceinline__ float gelu_new_f(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// d/dx gelu_new(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3*0.044715 x^2),  t = tanh(k (x + 0.044715 x^3))
__device__ __forceinline__ float gelu_new_grad_f(float x) {
    const float k = 0.7978845608028654f;
    const float t = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

template <typename T>
__global__ void relu_forward_kernel1(T* out, const T* x, size_t n, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float v[EW_CHUNK];
        load_chunk(x, i0, n, vec, v);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) v[j] = v[j] > 0.0f ? v[j] : 0.0f;
        store_chunk(out, i0, n, vec, v);
    }
}

template <typename T>
__global__ void relu_backward_kernel1(T* dx, const T* dout, const T* out, size_t n, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float g[EW_CHUNK], o[EW_CHUNK];
        load_chunk(dout, i0, n, vec, g);
        load_chunk(out, i0, n, vec, o);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) g[j] = o[j] > 0.0f ? g[j] : 0.0f;
        store_chunk(dx, i0, n, vec, g);
    }
}

// dx = dropout(dout) * (out > 0): the backward of dropout(relu(x)) in one pass (dropout.cuh's mask)
template <typename T>
__global__ void relu_dropout_backward_kernel1(T* dx, const T* dout, const T* out, size_t n, float p, float scale,
                                              uint64_t seed, uint64_t offset, bool vec, const uint64_t* seed_dev) {
    if (seed_dev) seed = *seed_dev;
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float g[EW_CHUNK], o[EW_CHUNK], f[EW_CHUNK];
        load_chunk(dout, i0, n, vec, g);
        load_chunk(out, i0, n, vec, o);
        dropout_factors<EW_CHUNK>(seed, offset + i0, p, scale, f);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) g[j] = o[j] > 0.0f ? round_to<T>(g[j] * f[j]) : 0.0f;
        store_chunk(dx, i0, n, vec, g);
    }
}

template <typename T>
__global__ void gated_gelu_forward_kernel1(T* out, const T* a, const T* b, size_t n, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float va[EW_CHUNK], vb[EW_CHUNK];
        load_chunk(a, i0, n, vec, va);
        load_chunk(b, i0, n, vec, vb);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) va[j] = gelu_new_f(va[j]) * vb[j];
        store_chunk(out, i0, n, vec, va);
    }
}

template <typename T>
__global__ void gated_gelu_backward_kernel1(T* da, T* db, const T* dout, const T* a, const T* b, size_t n, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float g[EW_CHUNK], va[EW_CHUNK], vb[EW_CHUNK], ga[EW_CHUNK], gb[EW_CHUNK];
        load_chunk(dout, i0, n, vec, g);
        load_chunk(a, i0, n, vec, va);
        load_chunk(b, i0, n, vec, vb);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) {
            ga[j] = g[j] * vb[j] * gelu_new_grad_f(va[j]);
            gb[j] = g[j] * gelu_new_f(va[j]);
        }
        store_chunk(da, i0, n, vec, ga);
        store_chunk(db, i0, n, vec, gb);
    }
}

// ---- kernel launchers

template <typename T>
static void relu_forward_t(void* out, const void* x, size_t n, cudaStream_t stream) {
    const bool vec = is_aligned16(out) && is_aligned16(x);
    relu_forward_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>((T*)out, (const T*)x, n, vec);
}
template <typename T>
static void relu_backward_t(void* dx, const void* dout, const void* out, size_t n, cudaStream_t stream) {
    const bool vec = is_aligned16(dx) && is_aligned16(dout) && is_aligned16(out);
    relu_backward_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>((T*)dx, (const T*)dout, (const T*)out, n, vec);
}
template <typename T>
static void relu_dropout_backward_t(void* dx, const void* dout, const void* out, size_t n, float p, uint64_t seed,
                                    uint64_t offset, cudaStream_t stream) {
    const bool vec = is_aligned16(dx) && is_aligned16(dout) && is_aligned16(out);
    relu_dropout_backward_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>(
        (T*)dx, (const T*)dout, (const T*)out, n, p, p < 1.0f ? 1.0f / (1.0f - p) : 0.0f, seed, offset, vec,
        dropout_device_seed());
}
template <typename T>
static void gated_gelu_forward_t(void* out, const void* a, const void* b, size_t n, cudaStream_t stream) {
    const bool vec = is_aligned16(out) && is_aligned16(a) && is_aligned16(b);
    gated_gelu_forward_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>((T*)out, (const T*)a, (const T*)b, n, vec);
}
template <typename T>
static void gated_gelu_backward_t(void* da, void* db, const void* dout, const void* a, const void* b, size_t n,
                                  cudaStream_t stream) {
    const bool vec = is_aligned16(da) && is_aligned16(db) && is_aligned16(dout) && is_aligned16(a) && is_aligned16(b);
    gated_gelu_backward_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>((T*)da, (T*)db, (const T*)dout, (const T*)a,
                                                                        (const T*)b, n, vec);
}

extern "C" void relu_forward(void* out, const void* x, DType dt, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt, relu_forward_t, out, x, n, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void relu_backward(void* dx, const void* dout, const void* out, DType dt, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt, relu_backward_t, dx, dout, out, n, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void relu_dropout_backward(void* dx, const void* dout, const void* out, DType dt, size_t n, float p,
                                      uint64_t seed, uint64_t offset, cudaStream_t stream) {
    if (n == 0) return;
    if (!(p >= 0.0f && p <= 1.0f))
        t5_die(T5_EXIT_FAILURE, "relu_dropout_backward: dropout probability %g is outside [0, 1]", p);
    DTYPE_DISPATCH(dt, relu_dropout_backward_t, dx, dout, out, n, p, seed, offset, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void gated_gelu_forward(void* out, const void* a, const void* b, DType dt, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt, gated_gelu_forward_t, out, a, b, n, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void gated_gelu_backward(void* da, void* db, const void* dout, const void* a, const void* b, DType dt,
                                    size_t n, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt, gated_gelu_backward_t, da, db, dout, a, b, n, stream);
    CUDA_LAUNCH_CHECK();
}
