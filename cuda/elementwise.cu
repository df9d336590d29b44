/*
 * elementwise.cu: small layout and type kernels (see elementwise.cuh).
 *   cast:         out (n) dt_out = in (n) dt_in, round to nearest even           (=)
 *   scale_inplace x (n) dt *= s, fp32 math                                        (in place)
 *   split_heads:  out (B,H,T,Dk) dt = in (B,T,H*Dk) dt                            (=)
 *   merge_heads:  out (B,T,H*Dk) dt = in (B,H,T,Dk) dt                            (=)
 *   fill:         x (n) dt = value (rounded once to dt)                          (=)
 *   add_inplace:  acc (n) fp32 += x (n) dt                                        (+=)
 * No backward of their own: cast/scale are linear (the caller applies the same op to the gradient),
 * merge_heads is the backward of split_heads and vice versa.
 * 8 elements per thread with 128-bit accesses where every pointer is 16-byte aligned; the head
 * permutes move whole 16-byte packets when Dk is a multiple of the packet size.
 */
#include "common.cuh"
#include "elementwise.cuh"

// ---- CUDA kernels

template <typename In, typename Out>
__global__ void cast_kernel1(Out* out, const In* in, size_t n, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float v[EW_CHUNK];
        load_chunk(in, i0, n, vec, v);
        store_chunk(out, i0, n, vec, v);
    }
}

template <typename T>
__global__ void scale_inplace_kernel1(T* x, size_t n, float s, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float v[EW_CHUNK];
        load_chunk(x, i0, n, vec, v);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) v[j] *= s;
        store_chunk(x, i0, n, vec, v);
    }
}

template <typename T>
__global__ void fill_kernel1(T* x, size_t n, float value, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float v[EW_CHUNK];
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) v[j] = value;
        store_chunk(x, i0, n, vec, v);
    }
}

template <typename T>
__global__ void add_inplace_kernel1(float* acc, const T* x, size_t n, bool vec) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ew_chunks(n); c += (size_t)gridDim.x * blockDim.x) {
        const size_t i0 = c * EW_CHUNK;
        float a[EW_CHUNK], v[EW_CHUNK];
        load_chunk(acc, i0, n, vec, a);
        load_chunk(x, i0, n, vec, v);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) a[j] += v[j];
        store_chunk(acc, i0, n, vec, a);
    }
}

// Head permute in units of U (a 16-byte packet, or one element): element u of the output (B,H,T,Dk/P)
// when split, of the output (B,T,H,Dk/P) when merged. P = elements per unit.
template <typename U>
__global__ void heads_permute_kernel1(U* out, const U* in, int B, int T, int H, int Du, bool split) {
    const size_t n = (size_t)B * T * H * Du;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % Du);
        size_t r = i / Du;
        if (split) {  // i indexes (b,h,t,d); read (b,t,h,d)
            const int t = (int)(r % T); r /= T;
            const int h = (int)(r % H);
            const size_t b = r / H;
            out[i] = in[((b * T + t) * H + h) * Du + d];
        } else {  // i indexes (b,t,h,d); read (b,h,t,d)
            const int h = (int)(r % H); r /= H;
            const int t = (int)(r % T);
            const size_t b = r / T;
            out[i] = in[((b * H + h) * T + t) * Du + d];
        }
    }
}

// ---- kernel launchers

template <typename In, typename Out>
static void cast_launch(void* out, const void* in, size_t n, cudaStream_t stream) {
    const bool vec = is_aligned16(out) && is_aligned16(in);
    cast_kernel1<In, Out><<<ew_grid(n), EW_BLOCK, 0, stream>>>((Out*)out, (const In*)in, n, vec);
}
template <typename Out>
static void cast_to_t(void* out, const void* in, DType dt_in, size_t n, cudaStream_t stream) {
    switch (dt_in) {
        case DT_F32: cast_launch<float, Out>(out, in, n, stream); break;
        case DT_F16: cast_launch<__half, Out>(out, in, n, stream); break;
        case DT_BF16: cast_launch<__nv_bfloat16, Out>(out, in, n, stream); break;
        default: t5_die(T5_EXIT_FAILURE, "cast: unknown input dtype %d", (int)dt_in);
    }
}
template <typename T>
static void scale_inplace_t(void* x, size_t n, float s, cudaStream_t stream) {
    scale_inplace_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>((T*)x, n, s, is_aligned16(x));
}
template <typename T>
static void fill_t(void* x, size_t n, float value, cudaStream_t stream) {
    fill_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>((T*)x, n, value, is_aligned16(x));
}
template <typename T>
static void add_inplace_t(float* acc, const void* x, size_t n, cudaStream_t stream) {
    add_inplace_kernel1<T><<<ew_grid(n), EW_BLOCK, 0, stream>>>(acc, (const T*)x, n, is_aligned16(acc) && is_aligned16(x));
}

static void heads_permute(void* out, const void* in, DType dt, int B, int T, int H, int Dk, bool split,
                          cudaStream_t stream) {
    if (B <= 0 || T <= 0 || H <= 0 || Dk <= 0) return;
    const size_t es = dtype_size(dt);
    const size_t n = (size_t)B * T * H * Dk;
    if ((Dk * es) % 16 == 0 && is_aligned16(out) && is_aligned16(in)) {
        const int Du = (int)(Dk * es / 16);
        heads_permute_kernel1<uint4><<<grid_1d(n * es / 16, EW_BLOCK), EW_BLOCK, 0, stream>>>(
            (uint4*)out, (const uint4*)in, B, T, H, Du, split);
    } else if (es == 4) {
        heads_permute_kernel1<uint32_t><<<grid_1d(n, EW_BLOCK), EW_BLOCK, 0, stream>>>(
            (uint32_t*)out, (const uint32_t*)in, B, T, H, Dk, split);
    } else {
        heads_permute_kernel1<uint16_t><<<grid_1d(n, EW_BLOCK), EW_BLOCK, 0, stream>>>(
            (uint16_t*)out, (const uint16_t*)in, B, T, H, Dk, split);
    }
}

extern "C" void cast(void* out, DType dt_out, const void* in, DType dt_in, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt_out, cast_to_t, out, in, dt_in, n, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void scale_inplace(void* x, DType dt, size_t n, float s, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt, scale_inplace_t, x, n, s, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void split_heads(void* out, const void* in, DType dt, int B, int T, int H, int Dk, cudaStream_t stream) {
    heads_permute(out, in, dt, B, T, H, Dk, true, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void merge_heads(void* out, const void* in, DType dt, int B, int T, int H, int Dk, cudaStream_t stream) {
    heads_permute(out, in, dt, B, T, H, Dk, false, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void fill(void* x, DType dt, size_t n, float value, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt, fill_t, x, n, value, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void add_inplace(float* acc, const void* x, DType dt, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    DTYPE_DISPATCH(dt, add_inplace_t, acc, x, n, stream);
    CUDA_LAUNCH_CHECK();
}
