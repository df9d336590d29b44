/*
 * common.cuh: device helpers shared by the kernels of cuda/<op>.cu (CUDA C++ only, never included by C).
 *   - dtype traits: load as fp32 / store with round-to-nearest-even for float, __half, __nv_bfloat16;
 *   - Vec<T>: 16-byte packets (4 floats or 8 halves) for 128-bit loads and stores;
 *   - warp and block reductions (fp32, fixed tree order: deterministic for a fixed launch shape);
 *   - Philox-4x32-10, the counter-based RNG of dropout and attention dropout (host and device share
 *     the same code, so dropout_uniform on the host is bit-identical to the device);
 *   - DTYPE_DISPATCH: turns a runtime DType into a template argument at the launcher.
 * Everything here is header-only (templates, __host__ __device__ inline): no definitions with
 * external linkage, so several translation units can include it.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../src/base/check.h"
#include "../src/base/dtype.h"

// ---- dtype traits: fp32 math on every dtype

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// rounds an fp32 value to T and back (models a tensor stored in T between two fp32 computations)
template <typename T>
__device__ __forceinline__ float round_to(float v) { return to_f32<T>(from_f32<T>(v)); }

// ---- 128-bit packets

template <typename T>
struct alignas(16) Vec {
    static constexpr int size = 16 / sizeof(T);
    T v[16 / sizeof(T)];
};

template <typename T>
__device__ __forceinline__ Vec<T> load_vec(const T* p) { return *reinterpret_cast<const Vec<T>*>(p); }
template <typename T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T>& v) { *reinterpret_cast<Vec<T>*>(p) = v; }

// true when every pointer given is 16-byte aligned (the vector path of the elementwise kernels)
static inline bool is_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// the current device's SM count, read once per translation unit (one device per process): launch plans
static inline int device_num_sms(void) {
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    return sms;
}

// ---- reductions (fp32)

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `shared` holds 32 floats. Contains __syncthreads: call from all threads.
__device__ __forceinline__ float block_reduce_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce_sum(v);
    __syncthreads();  // shared may still be read by a previous reduction
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : 0.0f;
    return warp_reduce_sum(v);
}
__device__ __forceinline__ float block_reduce_max(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_reduce_max(v);
}

// ---- Philox-4x32-10 (Salmon et al. 2011), key = seed, block counter g = (lo32(g), hi32(g), 0, 0)
// One Philox call gives 4 words; element counter c uses word (c & 3) of block g = c >> 2, so four consecutive
// elements cost one call (kernels take them in groups of 4 when c is a multiple of 4, the model's case).
// uniform(seed, c) = (word >> 8) * 2^-24, in [0, 1), exact in fp32.

__host__ __device__ __forceinline__ uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return (uint32_t)(((uint64_t)a * (uint64_t)b) >> 32);
#endif
}

__host__ __device__ __forceinline__ void philox4(uint64_t seed, uint64_t g, uint32_t (&w)[4]) {
    uint32_t c0 = (uint32_t)g, c1 = (uint32_t)(g >> 32), c2 = 0u, c3 = 0u;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int r = 0; r < 10; r++) {
        const uint32_t hi0 = philox_mulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint32_t hi1 = philox_mulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

__host__ __device__ __forceinline__ float philox_word_uniform(uint32_t w) {
    return (float)(w >> 8) * (1.0f / 16777216.0f);
}

__host__ __device__ __forceinline__ float philox_uniform(uint64_t seed, uint64_t counter) {
    uint32_t w[4];
    philox4(seed, counter >> 2, w);
    const uint32_t j = (uint32_t)(counter & 3u);  // selects, not a run-time array index (no local memory)
    return philox_word_uniform(j == 0 ? w[0] : j == 1 ? w[1] : j == 2 ? w[2] : w[3]);
}

// multiplier of element `counter` under inverted dropout with probability p (0 or 1/(1-p))
__device__ __forceinline__ float dropout_factor(uint64_t seed, uint64_t counter, float p, float scale) {
    if (p == 0.0f) return 1.0f;  // uniform across the launch: no divergence, no RNG cost
    return philox_uniform(seed, counter) >= p ? scale : 0.0f;
}

// multipliers of the N consecutive elements c0 .. c0+N-1 (N a multiple of 4): N/4 Philox calls when c0 is a
// multiple of 4, else one call per element (same values either way)
template <int N>
__device__ __forceinline__ void dropout_factors(uint64_t seed, uint64_t c0, float p, float scale, float (&f)[N]) {
    static_assert(N % 4 == 0, "dropout_factors takes groups of 4");
    if (p == 0.0f) {
#pragma unroll
        for (int j = 0; j < N; j++) f[j] = 1.0f;
    } else if ((c0 & 3u) == 0) {
#pragma unroll
        for (int b = 0; b < N / 4; b++) {
            uint32_t w[4];
            philox4(seed, (c0 >> 2) + (uint64_t)b, w);
#pragma unroll
            for (int j = 0; j < 4; j++) f[4 * b + j] = philox_word_uniform(w[j]) >= p ? scale : 0.0f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; j++) f[j] = dropout_factor(seed, c0 + (uint64_t)j, p, scale);
    }
}

// ---- launch helpers

// s[0] = sum of s[0..blockDim.x), b[0] = OR of b[0..blockDim.x) in a fixed tree (the same bits for the same inputs):
// the deterministic norm / non-finite reductions (global_norm.cu, grad_accum.cu). blockDim.x a power of two.
__device__ __forceinline__ void block_sum_or(double* s, int* b) {
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < w) {
            s[threadIdx.x] += s[threadIdx.x + w];
            b[threadIdx.x] |= b[threadIdx.x + w];
        }
    }
    __syncthreads();
}

// CEIL_DIV comes from src/base/common.h (through check.h).
static inline int grid_1d(size_t work_items, int block) {
    size_t g = CEIL_DIV(work_items, (size_t)block);
    if (g < 1) g = 1;
    if (g > 65535u * 32u) g = 65535u * 32u;  // grid-stride loops cover the rest
    return (int)g;
}

// Calls F<T>(...) where T is the C++ type of the runtime dtype dt.
#define DTYPE_DISPATCH(dt, F, ...)                                                              \
    do {                                                                                        \
        switch (dt) {                                                                           \
            case DT_F32: F<float>(__VA_ARGS__); break;                                          \
            case DT_F16: F<__half>(__VA_ARGS__); break;                                         \
            case DT_BF16: F<__nv_bfloat16>(__VA_ARGS__); break;                                 \
            default: t5_die(T5_EXIT_FAILURE, "%s: unknown dtype %d", __func__, (int)(dt));      \
        }                                                                                       \
    } while (0)

// ---- 8-element chunks for elementwise kernels: fp32 registers, 128-bit memory accesses when `vec`
// (all pointers 16-byte aligned, decided once by the launcher) and the chunk is whole; bounds-checked
// scalar accesses for the tail. Element i of a chunk is p[i0 + i].

#define EW_CHUNK 8
#define EW_BLOCK 256

template <typename T>
__device__ __forceinline__ void load_chunk(const T* p, size_t i0, size_t n, bool vec, float (&out)[EW_CHUNK]) {
    if (vec && i0 + EW_CHUNK <= n) {
        constexpr int P = Vec<T>::size;
#pragma unroll
        for (int k = 0; k < EW_CHUNK; k += P) {
            const Vec<T> v = load_vec(p + i0 + k);
#pragma unroll
            for (int j = 0; j < P; j++) out[k + j] = to_f32(v.v[j]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) out[j] = i0 + j < n ? to_f32(p[i0 + j]) : 0.0f;
    }
}

template <typename T>
__device__ __forceinline__ void store_chunk(T* p, size_t i0, size_t n, bool vec, const float (&in)[EW_CHUNK]) {
    if (vec && i0 + EW_CHUNK <= n) {
        constexpr int P = Vec<T>::size;
#pragma unroll
        for (int k = 0; k < EW_CHUNK; k += P) {
            Vec<T> v;
#pragma unroll
            for (int j = 0; j < P; j++) v.v[j] = from_f32<T>(in[k + j]);
            store_vec(p + i0 + k, v);
        }
    } else {
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++)
            if (i0 + j < n) p[i0 + j] = from_f32<T>(in[j]);
    }
}

// Elementwise kernels loop `for (size_t c = blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n);
// c += gridDim.x * blockDim.x)` with i0 = c * EW_CHUNK, launched with ew_grid(n) blocks of EW_BLOCK.
__host__ __device__ __forceinline__ size_t ew_chunks(size_t n) { return (n + EW_CHUNK - 1) / EW_CHUNK; }
static inline int ew_grid(size_t n) { return grid_1d(CEIL_DIV(n, (size_t)EW_CHUNK), EW_BLOCK); }

// Calls F<T1, T>(...) where T is the C++ type of dt (second-level dispatch of two-dtype kernels).
#define DTYPE_DISPATCH_PAIR(dt, F, T1, ...)                                                     \
    do {                                                                                        \
        switch (dt) {                                                                           \
            case DT_F32: F<T1, float>(__VA_ARGS__); break;                                      \
            case DT_F16: F<T1, __half>(__VA_ARGS__); break;                                     \
            case DT_BF16: F<T1, __nv_bfloat16>(__VA_ARGS__); break;                             \
            default: t5_die(T5_EXIT_FAILURE, "%s: unknown dtype %d", __func__, (int)(dt));      \
        }                                                                                       \
    } while (0)
