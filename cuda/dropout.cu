/*
 * dropout.cu: inverted dropout with a counter-based RNG (see dropout.cuh for the contract).
 *   keep(i) <=> philox_uniform(seed, offset + i) >= p (word (c & 3) of the Philox block c >> 2: one Philox
 *   call per 4 elements); kept values are multiplied by 1/(1-p) in fp32 and
 *   rounded once to the output dtype. p == 0 is the identity, p >= 1 gives zeros (as torch).
 *   dropout_forward:           out (n) X = dropout(x (n) X)                 (=, in place allowed)
 *   dropout_backward:          dx (n) X = dropout(dout (n) X), same mask    (=, in place allowed)
 *   residual_dropout_add:      resid (n) fp32 += dropout(branch (n) X)      (+=: the residual stream)
 *   residual_dropout_add_out:  out (n) fp32 = resid (n) fp32 + dropout(branch (n) X)   (=; out may be resid)
 *   residual_dropout_backward: dbranch (n) X = dropout(dresid (n) fp32)     (=)
 * The mask is never stored: the backward regenerates it from (seed, offset). The caller advances
 * `offset` by at least n between dropout sites that share a seed.
 * Device seed (CUDA graphs): with dropout_set_device_seed(ptr) on the calling thread, the kernels read the
 * seed from *ptr when they run (one 8-byte load per thread, from L1/L2), not from the launch argument.
 * dropout_uniform is the host copy of the generator (the same Philox code from common.cuh compiled
 * for the host), bit-identical to the device: test_gpu_dropout checks it.
 */
#include "common.cuh"
#include "dropout.cuh"

// ---- CUDA kernels

// out = dropout(in); In and Out may differ in dtype (fp32 residual gradient -> X branch gradient)
template <typename In, typename Out>
__global__ void dropout_forward_kernel1(Out* out, const In* in, size_t n, float p, float scale, uint64_t seed,
                                        uint64_t offset, bool vec, const uint64_t* seed_dev) {
    if (seed_dev) seed = *seed_dev;
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float v[EW_CHUNK];
        load_chunk(in, i0, n, vec, v);
        float f[EW_CHUNK];
        dropout_factors<EW_CHUNK>(seed, offset + i0, p, scale, f);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) v[j] *= f[j];
        store_chunk(out, i0, n, vec, v);
    }
}

// out = resid + dropout(branch) (out == resid: in place)
template <typename T>
__global__ void residual_dropout_add_kernel1(float* out, const float* resid, const T* branch, size_t n, float p,
                                             float scale, uint64_t seed, uint64_t offset, bool vec,
                                             const uint64_t* seed_dev) {
    if (seed_dev) seed = *seed_dev;
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float r[EW_CHUNK], b[EW_CHUNK];
        load_chunk(resid, i0, n, vec, r);
        load_chunk(branch, i0, n, vec, b);
        float f[EW_CHUNK];
        dropout_factors<EW_CHUNK>(seed, offset + i0, p, scale, f);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) r[j] += b[j] * f[j];
        store_chunk(out, i0, n, vec, r);
    }
}

__global__ void dropout_store_seed_kernel1(uint64_t* seed_dev, uint64_t seed) { *seed_dev = seed; }

// ---- kernel launchers

// the device seed of this host thread (dropout.cuh: CUDA-graph support); NULL = use the seed argument
static thread_local const uint64_t* dropout_seed_dev = NULL;

extern "C" void dropout_set_device_seed(const uint64_t* seed_dev) { dropout_seed_dev = seed_dev; }
extern "C" const uint64_t* dropout_device_seed(void) { return dropout_seed_dev; }

extern "C" void dropout_store_seed(uint64_t* seed_dev, uint64_t seed, cudaStream_t stream) {
    dropout_store_seed_kernel1<<<1, 1, 0, stream>>>(seed_dev, seed);
    CUDA_LAUNCH_CHECK();
}

static float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

static void dropout_check_p(float p, const char* who) {
    if (!(p >= 0.0f && p <= 1.0f)) t5_die(T5_EXIT_FAILURE, "%s: dropout probability %g is outside [0, 1]", who, p);
}

template <typename In, typename Out>
static void dropout_launch(void* out, const void* in, size_t n, float p, uint64_t seed, uint64_t offset,
                           cudaStream_t stream) {
    const bool vec = is_aligned16(out) && is_aligned16(in);
    // p == 0: keep everything (uniform >= 0 always), scale 1; the kernel is then a plain copy/cast
    dropout_forward_kernel1<In, Out><<<ew_grid(n), EW_BLOCK, 0, stream>>>((Out*)out, (const In*)in, n, p,
                                                                         dropout_scale(p), seed, offset, vec,
                                                                         dropout_seed_dev);
}

template <typename T>
static void dropout_same_t(void* out, const void* in, size_t n, float p, uint64_t seed, uint64_t offset,
                           cudaStream_t stream) {
    dropout_launch<T, T>(out, in, n, p, seed, offset, stream);
}
template <typename T>
static void dropout_from_f32_t(void* out, const void* in, size_t n, float p, uint64_t seed, uint64_t offset,
                               cudaStream_t stream) {
    dropout_launch<float, T>(out, in, n, p, seed, offset, stream);
}
template <typename T>
static void residual_dropout_add_t(float* out, const float* resid, const void* branch, size_t n, float p,
                                   uint64_t seed, uint64_t offset, cudaStream_t stream) {
    const bool vec = is_aligned16(out) && is_aligned16(resid) && is_aligned16(branch);
    residual_dropout_add_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>(out, resid, (const T*)branch, n, p,
                                                                        dropout_scale(p), seed, offset, vec,
                                                                        dropout_seed_dev);
}

extern "C" float dropout_uniform(uint64_t seed, uint64_t counter) { return philox_uniform(seed, counter); }

extern "C" void dropout_forward(void* out, const void* x, DType dt, size_t n, float p, uint64_t seed, uint64_t offset,
                                cudaStream_t stream) {
    dropout_check_p(p, __func__);
    if (n == 0 || (p == 0.0f && out == x)) return;
    DTYPE_DISPATCH(dt, dropout_same_t, out, x, n, p, seed, offset, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void dropout_backward(void* dx, const void* dout, DType dt, size_t n, float p, uint64_t seed,
                                 uint64_t offset, cudaStream_t stream) {
    dropout_check_p(p, __func__);
    if (n == 0 || (p == 0.0f && dx == dout)) return;
    DTYPE_DISPATCH(dt, dropout_same_t, dx, dout, n, p, seed, offset, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void residual_dropout_add(float* resid, const void* branch, DType dt, size_t n, float p, uint64_t seed,
                                     uint64_t offset, cudaStream_t stream) {
    dropout_check_p(p, __func__);
    if (n == 0) return;
    DTYPE_DISPATCH(dt, residual_dropout_add_t, resid, resid, branch, n, p, seed, offset, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void residual_dropout_add_out(float* out, const float* resid, const void* branch, DType dt, size_t n,
                                         float p, uint64_t seed, uint64_t offset, cudaStream_t stream) {
    dropout_check_p(p, __func__);
    if (n == 0) return;
    DTYPE_DISPATCH(dt, residual_dropout_add_t, out, resid, branch, n, p, seed, offset, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void residual_dropout_backward(void* dbranch, DType dt, const float* dresid, size_t n, float p,
                                          uint64_t seed, uint64_t offset, cudaStream_t stream) {
    dropout_check_p(p, __func__);
    if (n == 0 || (dt == DT_F32 && p == 0.0f && dbranch == (const void*)dresid)) return;
    DTYPE_DISPATCH(dt, dropout_from_f32_t, dbranch, dresid, n, p, seed, offset, stream);
    CUDA_LAUNCH_CHECK();
}
