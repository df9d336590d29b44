/*
 * decode_gemv.cu: small-M projections of the decoder step (contract in decode_gemv.cuh).
 *
 * A block of 8 warps computes 8 / S output columns; the S warps of a column split K into S equal ranges (S = 1, 2,
 * 4, 8 as K grows, so that a weight row of 16K elements is read by 8 warps at once). A lane streams every 32nd
 * 16-byte packet of its range of the weight row (8 loads in flight per lane: the kernel is bandwidth-bound on the
 * weights) and the matching packets of the M input rows (small, from L1/L2). Per column: the lane sums, a warp
 * shuffle reduction, then the S partial sums in split order: a fixed order, deterministic.
 */
#include "common.cuh"
#include "decode_gemv.cuh"

#define GV_WARPS 8
#define GV_MAX_M 8

template <typename T, int MT>
__global__ void decode_gemv_kernel1(T* out, const T* in, const T* w, int M, int N, int K, int S, bool relu) {
    constexpr int P = Vec<T>::size;  // elements per 16-byte packet
    __shared__ float part[GV_WARPS][MT];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int cpb = GV_WARPS / S;  // columns per block
    const int col = blockIdx.x * cpb + warp / S, split = warp % S;
    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) acc[m] = 0.0f;
    if (col < N) {
        const int kl = K / S, k0 = split * kl;
        const T* wr = w + (size_t)col * K + k0;
        const T* ir = in + k0;
#pragma unroll 8
        for (int p = lane * P; p < kl; p += 32 * P) {
            const Vec<T> wv = load_vec(wr + p);
#pragma unroll
            for (int m = 0; m < MT; m++) {
                if (m >= M) break;
                const Vec<T> xv = load_vec(ir + (size_t)m * K + p);
#pragma unroll
                for (int e = 0; e < P; e++) acc[m] += to_f32(xv.v[e]) * to_f32(wv.v[e]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MT; m++) {
        if (m >= M) break;
        acc[m] = warp_reduce_sum(acc[m]);
        if (lane == 0) part[warp][m] = acc[m];
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < cpb * M) {
        const int c = t / M, m = t % M, oc = blockIdx.x * cpb + c;
        if (oc < N) {
            float sum = 0.0f;
            for (int sp = 0; sp < S; sp++) sum += part[c * S + sp][m];
            if (relu) sum = fmaxf(sum, 0.0f);
            out[(size_t)m * N + oc] = from_f32<T>(sum);
        }
    }
}

static int gv_splits(int K) { return K >= 8192 ? 8 : K >= 4096 ? 4 : K >= 2048 ? 2 : 1; }

extern "C" bool decode_gemv_supported(DType dt, int M, int N, int K, const void* out, const void* in, const void* w) {
    return (dt == DT_BF16 || dt == DT_F16) && M >= 1 && M <= GV_MAX_M && N >= 1 && K >= 64 &&
           K % (8 * gv_splits(K)) == 0 && K % 64 == 0 && is_aligned16(out) && is_aligned16(in) && is_aligned16(w);
}

template <typename T>
static void decode_gemv_t(void* out, const void* in, const void* w, int M, int N, int K, bool relu,
                          cudaStream_t stream) {
    const int S = gv_splits(K), cpb = GV_WARPS / S;
    const dim3 grid((unsigned)CEIL_DIV(N, cpb));
    if (M <= 4)
        decode_gemv_kernel1<T, 4><<<grid, GV_WARPS * 32, 0, stream>>>((T*)out, (const T*)in, (const T*)w, M, N, K, S,
                                                                       relu);
    else
        decode_gemv_kernel1<T, 8><<<grid, GV_WARPS * 32, 0, stream>>>((T*)out, (const T*)in, (const T*)w, M, N, K, S,
                                                                       relu);
}

extern "C" void decode_gemv(void* out, const void* in, const void* w, DType dt, int M, int N, int K, bool relu,
                            cudaStream_t stream) {
    if (!decode_gemv_supported(dt, M, N, K, out, in, w))
        t5_die(T5_EXIT_FAILURE, "decode_gemv: unsupported %s (M %d, N %d, K %d) or unaligned pointers", dtype_name(dt),
               M, N, K);
    if (dt == DT_BF16) decode_gemv_t<__nv_bfloat16>(out, in, w, M, N, K, relu, stream);
    else decode_gemv_t<__half>(out, in, w, M, N, K, relu, stream);
    CUDA_LAUNCH_CHECK();
}
