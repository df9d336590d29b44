/*
 * grad_accum.cu: gradient accumulation and squared norm for the ZeRO engine (see grad_accum.cuh).
 *
 *   grad_accumulate_kernel1   dst (n) = [dst +] scale * src, 8 elements per thread, fp32 math     (= / +=)
 *   grad_sumsq_kernel1        GRAD_SUMSQ_GRID blocks stride over x; each thread sums (double)x^2, a
 *                             fixed tree per block -> partial[b] (=), non-finite -> bad[b] (=)
 *   grad_sumsq_kernel2        one block: partials in a fixed tree -> *slot, flags OR -> *flag    (=)
 *   grad_sumsq_combine_kernel1 one thread: slots in index order -> (fp64) total, flags -> overflow (=)
 *   grad_sumsq_round_kernel1   one thread: (float) total -> norm2 (=), once every rank's total is summed in
 * No backward: these are the optimizer's bookkeeping. Deterministic (no atomics).
 */
#include "common.cuh"
#include "grad_accum.cuh"

#define SQ_BLOCK 256

// ---- CUDA kernels

template <typename Out, typename In>
__global__ void grad_accumulate_kernel1(Out* dst, const In* src, size_t n, bool add, float scale, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float a[EW_CHUNK], v[EW_CHUNK];
        load_chunk(src, i0, n, vec, v);
        if (add) load_chunk(dst, i0, n, vec, a);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) a[j] = add ? a[j] + scale * v[j] : scale * v[j];
        store_chunk(dst, i0, n, vec, a);
    }
}

template <typename T>
__global__ void grad_sumsq_kernel1(const T* x, size_t n, double* partial, int* bad) {
    __shared__ double s[SQ_BLOCK];
    __shared__ int sb[SQ_BLOCK];
    double acc = 0.0;
    int nonfinite = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float f = to_f32(x[i]);
        if (!isfinite(f)) nonfinite = 1;
        acc += (double)f * (double)f;
    }
    s[threadIdx.x] = acc;
    sb[threadIdx.x] = nonfinite;
    block_sum_or(s, sb);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = s[0];
        bad[blockIdx.x] = sb[0];
    }
}

__global__ void grad_sumsq_kernel2(const double* partial, const int* bad, int count, double* slot, int* flag) {
    __shared__ double s[SQ_BLOCK];
    __shared__ int sb[SQ_BLOCK];
    double acc = 0.0;
    int f = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
        acc += partial[i];
        f |= bad[i];
    }
    s[threadIdx.x] = acc;
    sb[threadIdx.x] = f;
    block_sum_or(s, sb);
    if (threadIdx.x == 0) {
        *slot = s[0];
        *flag = sb[0];
    }
}

__global__ void grad_sumsq_combine_kernel1(const double* slots, const int* flags, int n, double* total, int* overflow) {
    double acc = 0.0;
    int f = 0;
    for (int i = 0; i < n; i++) {
        acc += slots[i];
        f |= flags[i];
    }
    *total = acc;
    *overflow = f;
}

__global__ void grad_sumsq_round_kernel1(const double* total, float* norm2) { *norm2 = (float)*total; }

// ---- kernel launchers

template <typename Out, typename In>
static void accumulate_launch(void* dst, const void* src, size_t n, bool add, float scale, cudaStream_t stream) {
    const bool vec = is_aligned16(dst) && is_aligned16(src);
    grad_accumulate_kernel1<Out, In><<<ew_grid(n), EW_BLOCK, 0, stream>>>((Out*)dst, (const In*)src, n, add, scale, vec);
}
template <typename Out>
static void accumulate_to(void* dst, const void* src, DType dt_src, size_t n, bool add, float scale,
                          cudaStream_t stream) {
    DTYPE_DISPATCH_PAIR(dt_src, accumulate_launch, Out, dst, src, n, add, scale, stream);
}

template <typename T>
static void sumsq_t(const void* x, size_t n, double* partial, int* bad, cudaStream_t stream) {
    grad_sumsq_kernel1<T><<<GRAD_SUMSQ_GRID, SQ_BLOCK, 0, stream>>>((const T*)x, n, partial, bad);
}

extern "C" void grad_accumulate(void* dst, DType dt_dst, const void* src, DType dt_src, size_t n, bool add,
                                float scale, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt_dst, accumulate_to, dst, src, dt_src, n, add, scale, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" size_t grad_sumsq_scratch_bytes(void) { return GRAD_SUMSQ_GRID * (sizeof(double) + sizeof(int)); }

extern "C" void grad_sumsq(const void* x, DType dt, size_t n, double* d_slot, int* d_flag, void* scratch,
                           cudaStream_t stream) {
    double* partial = (double*)scratch;
    int* bad = (int*)(partial + GRAD_SUMSQ_GRID);
    DTYPE_DISPATCH(dt, sumsq_t, x, n, partial, bad, stream);
    CUDA_LAUNCH_CHECK();
    grad_sumsq_kernel2<<<1, SQ_BLOCK, 0, stream>>>(partial, bad, GRAD_SUMSQ_GRID, d_slot, d_flag);
    CUDA_LAUNCH_CHECK();
}

extern "C" void grad_sumsq_combine(const double* slots, const int* flags, int n, double* d_total, int* d_overflow,
                                   cudaStream_t stream) {
    grad_sumsq_combine_kernel1<<<1, 1, 0, stream>>>(slots, flags, n, d_total, d_overflow);
    CUDA_LAUNCH_CHECK();
}

extern "C" void grad_sumsq_round(const double* d_total, float* d_norm2, cudaStream_t stream) {
    grad_sumsq_round_kernel1<<<1, 1, 0, stream>>>(d_total, d_norm2);
    CUDA_LAUNCH_CHECK();
}
