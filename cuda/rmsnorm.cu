/*
 * rmsnorm.cu: T5LayerNorm = RMS norm without mean or bias, fp32 statistics (see rmsnorm.cuh).
 *   forward:  rstd[n] (N) fp32 = 1/sqrt(mean_d x[n,d]^2 + eps)            x (N,D) fp32, w (D) dt_w
 *             y = x * rstd (fp32); NOTE(numerics): when w is fp16/bf16, y is rounded to w's dtype first (HF casts the
 *             normalised hidden state to the weight dtype before the multiply), then
 *             out[n,d] (N,D) dt_out = round(w[d] * y)
 *   backward: dx (N,D) fp32 += rstd * (dy - x * rstd^2 * mean_d(dy * x)),  dy = dout * w     (+=)
 *             dw (D)   fp32 += sum_n dout[n,d] * y[n,d]                                        (+=)
 *             (the rounding of y is passed straight through, as autograd does for a cast)
 * Layout: one warp per row, lanes own 8-element chunks (128-bit accesses when D % 8 == 0 and the
 * pointers are aligned). Rows of D <= 1024 stay in registers between the passes (kernel2: every input read
 * once); longer rows re-read them (kernel1). Both compute the same values. The dw reduction is deterministic: each block accumulates its rows in shared
 * memory (one row of D floats per warp, rows assigned to warps by a fixed rule), sums its warps in
 * order into scratch (nblk, D), and a second kernel sums the nblk partials in a fixed order into dw.
 * nblk depends on N and D only (one row per warp up to 1024 blocks), so the bits do not depend on the GPU model.
 */
#include "common.cuh"
#include "rmsnorm.cuh"

// ---- CUDA kernels

template <typename TW, typename TO>
__global__ void rmsnorm_forward_kernel1(TO* out, float* rstd, const float* x, const TW* w, int N, int D, float eps,
                                        bool vec) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const float* xr = x + (size_t)row * D;
    float ss = 0.0f;
    for (int i0 = lane * EW_CHUNK; i0 < D; i0 += 32 * EW_CHUNK) {
        float v[EW_CHUNK];
        load_chunk(xr, i0, D, vec, v);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) ss += v[j] * v[j];
    }
    ss = warp_reduce_sum(ss);
    const float r = rsqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[row] = r;
    TO* outr = out + (size_t)row * D;
    for (int i0 = lane * EW_CHUNK; i0 < D; i0 += 32 * EW_CHUNK) {
        float v[EW_CHUNK], wv[EW_CHUNK];
        load_chunk(xr, i0, D, vec, v);
        load_chunk(w, i0, D, vec, wv);
#pragma unroll
        for (int j = 0; j < EW_CHUNK; j++) v[j] = wv[j] * round_to<TW>(v[j] * r);
        store_chunk(outr, i0, D, vec, v);
    }
}

// D <= 32 * 8 * RMS_NC: the lane's chunks of the row stay in registers between the two passes (x is read once).
// Same values as kernel1 (same operations, same order).
#define RMS_NC 4
template <typename TW, typename TO>
__global__ void rmsnorm_forward_kernel2(TO* out, float* rstd, const float* x, const TW* w, int N, int D, float eps,
                                        bool vec) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const float* xr = x + (size_t)row * D;
    float v[RMS_NC][EW_CHUNK];
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < RMS_NC; c++) {
        const int i0 = (lane + 32 * c) * EW_CHUNK;
        if (i0 < D) {
            load_chunk(xr, i0, D, vec, v[c]);
#pragma unroll
            for (int j = 0; j < EW_CHUNK; j++) ss += v[c][j] * v[c][j];
        }
    }
    ss = warp_reduce_sum(ss);
    const float r = rsqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[row] = r;
    TO* outr = out + (size_t)row * D;
#pragma unroll
    for (int c = 0; c < RMS_NC; c++) {
        const int i0 = (lane + 32 * c) * EW_CHUNK;
        if (i0 < D) {
            float wv[EW_CHUNK];
            load_chunk(w, i0, D, vec, wv);
#pragma unroll
            for (int j = 0; j < EW_CHUNK; j++) v[c][j] = wv[j] * round_to<TW>(v[c][j] * r);
            store_chunk(outr, i0, D, vec, v[c]);
        }
    }
}

// backward for D <= 32 * 8 * RMS_NC: x, dout and w of the row read once into registers. Same values as kernel1.
template <typename TW, typename TO>
__global__ void rmsnorm_backward_kernel2(float* dx, float* partial, const TO* dout, const float* x, const TW* w,
                                         const float* rstd, int N, int D, bool vec) {
    extern __shared__ float dw_sh[];  // (nwarps, D)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float* dw_w = dw_sh + (size_t)warp * D;
    for (int i = lane; i < D; i += 32) dw_w[i] = 0.0f;
    __syncwarp();
    for (int row = blockIdx.x * nwarps + warp; row < N; row += gridDim.x * nwarps) {
        const float* xr = x + (size_t)row * D;
        const TO* gr = dout + (size_t)row * D;
        const float r = rstd[row];
        float v[RMS_NC][EW_CHUNK], gw[RMS_NC][EW_CHUNK];
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < RMS_NC; c++) {
            const int i0 = (lane + 32 * c) * EW_CHUNK;
            if (i0 < D) {
                float g[EW_CHUNK], wv[EW_CHUNK];
                load_chunk(xr, i0, D, vec, v[c]);
                load_chunk(gr, i0, D, vec, g);
                load_chunk(w, i0, D, vec, wv);
#pragma unroll
                for (int j = 0; j < EW_CHUNK; j++) {
                    dot += g[j] * wv[j] * v[c][j];
                    gw[c][j] = g[j];  // keep dout; dy = dout * w is formed below exactly as kernel1 does
                }
            }
        }
        dot = warp_reduce_sum(dot);
        const float cc = r * r * dot / (float)D;
        float* dxr = dx + (size_t)row * D;
#pragma unroll
        for (int c = 0; c < RMS_NC; c++) {
            const int i0 = (lane + 32 * c) * EW_CHUNK;
            if (i0 < D) {
                float wv[EW_CHUNK], d[EW_CHUNK];
                load_chunk(w, i0, D, vec, wv);
                load_chunk(dxr, i0, D, vec, d);
#pragma unroll
                for (int j = 0; j < EW_CHUNK; j++) {
                    d[j] += r * (gw[c][j] * wv[j] - v[c][j] * cc);
                    if (i0 + j < D) dw_w[i0 + j] += gw[c][j] * round_to<TW>(v[c][j] * r);
                }
                store_chunk(dxr, i0, D, vec, d);
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < nwarps; k++) s += dw_sh[(size_t)k * D + i];
        partial[(size_t)blockIdx.x * D + i] = s;
    }
}

// grid = nblk blocks of nwarps warps; row n goes to warp (n % (nblk*nwarps)); dynamic smem nwarps*D floats
template <typename TW, typename TO>
__global__ void rmsnorm_backward_kernel1(float* dx, float* partial, const TO* dout, const float* x, const TW* w,
                                         const float* rstd, int N, int D, bool vec) {
    extern __shared__ float dw_sh[];  // (nwarps, D)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float* dw_w = dw_sh + (size_t)warp * D;
    for (int i = lane; i < D; i += 32) dw_w[i] = 0.0f;
    __syncwarp();
    for (int row = blockIdx.x * nwarps + warp; row < N; row += gridDim.x * nwarps) {
        const float* xr = x + (size_t)row * D;
        const TO* gr = dout + (size_t)row * D;
        const float r = rstd[row];
        float dot = 0.0f;  // sum_d dy * x
#pragma unroll 4
        for (int i0 = lane * EW_CHUNK; i0 < D; i0 += 32 * EW_CHUNK) {
            float v[EW_CHUNK], g[EW_CHUNK], wv[EW_CHUNK];
            load_chunk(xr, i0, D, vec, v);
            load_chunk(gr, i0, D, vec, g);
            load_chunk(w, i0, D, vec, wv);
#pragma unroll
            for (int j = 0; j < EW_CHUNK; j++) dot += g[j] * wv[j] * v[j];
        }
        dot = warp_reduce_sum(dot);
        const float c = r * r * dot / (float)D;
        float* dxr = dx + (size_t)row * D;
#pragma unroll 4
        for (int i0 = lane * EW_CHUNK; i0 < D; i0 += 32 * EW_CHUNK) {
            float v[EW_CHUNK], g[EW_CHUNK], wv[EW_CHUNK], d[EW_CHUNK];
            load_chunk(xr, i0, D, vec, v);
            load_chunk(gr, i0, D, vec, g);
            load_chunk(w, i0, D, vec, wv);
            load_chunk(dxr, i0, D, vec, d);
#pragma unroll
            for (int j = 0; j < EW_CHUNK; j++) {
                d[j] += r * (g[j] * wv[j] - v[j] * c);
                if (i0 + j < D) dw_w[i0 + j] += g[j] * round_to<TW>(v[j] * r);  // this lane owns i0+j
            }
            store_chunk(dxr, i0, D, vec, d);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < nwarps; k++) s += dw_sh[(size_t)k * D + i];
        partial[(size_t)blockIdx.x * D + i] = s;
    }
}

// dw[d] (=|+=) sum_b partial[b, d], summed in fp32 and rounded once to G. Block (32, RMS_DW_GROUPS): column
// d = 32*blockIdx.x + threadIdx.x (coalesced 128-byte rows), row group g sums b = g, g + GROUPS, ... in order, then
// thread g = 0 adds the group sums in order: a fixed summation order (deterministic) with GROUPS loads in flight
// per column instead of one thread walking all nblk partials serially (~11 us per call at nblk = 256).
#define RMS_DW_GROUPS 16
template <typename G>
__global__ void rmsnorm_dw_reduce_kernel2(G* dw, const float* partial, int nblk, int D, bool accumulate) {
    __shared__ float part[RMS_DW_GROUPS][33];
    const int d = blockIdx.x * 32 + threadIdx.x, g = threadIdx.y;
    float s = 0.0f;
    if (d < D)
        for (int b = g; b < nblk; b += RMS_DW_GROUPS) s += partial[(size_t)b * D + d];
    part[g][threadIdx.x] = s;
    __syncthreads();
    if (g == 0 && d < D) {
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < RMS_DW_GROUPS; k++) t += part[k][threadIdx.x];
        dw[d] = from_f32<G>(accumulate ? to_f32<G>(dw[d]) + t : t);
    }
}

// ---- kernel launchers

static int rmsnorm_backward_warps(int D) { return D <= 3072 ? 4 : 1; }
// one row per warp up to 1024 blocks (the kernel is latency-bound: a warp's rows are serial; with 4 rows per warp
// it took ~26 us at any N <= 1024 on an H200, one row per warp leaves one row's latency)
static int rmsnorm_backward_blocks(int N, int D) {
    return N < 1 ? 1 : T5_MIN(CEIL_DIV(N, rmsnorm_backward_warps(D)), 1024);
}

extern "C" size_t rmsnorm_backward_scratch_floats(int N, int D) {
    return (size_t)rmsnorm_backward_blocks(N, D) * (size_t)D;
}

template <typename TO, typename TW>
static void rmsnorm_forward_tt(void* out, float* rstd, const float* x, const void* w, int N, int D, float eps,
                               cudaStream_t stream) {
    const bool vec = D % EW_CHUNK == 0 && is_aligned16(out) && is_aligned16(x) && is_aligned16(w);
    const int warps = 8;
    if (D <= 32 * EW_CHUNK * RMS_NC)
        rmsnorm_forward_kernel2<TW, TO><<<CEIL_DIV(N, warps), warps * 32, 0, stream>>>((TO*)out, rstd, x,
                                                                                        (const TW*)w, N, D, eps, vec);
    else
        rmsnorm_forward_kernel1<TW, TO><<<CEIL_DIV(N, warps), warps * 32, 0, stream>>>((TO*)out, rstd, x,
                                                                                        (const TW*)w, N, D, eps, vec);
}
template <typename TO>
static void rmsnorm_forward_t(void* out, float* rstd, const float* x, const void* w, DType dt_w, int N, int D,
                              float eps, cudaStream_t stream) {
    DTYPE_DISPATCH_PAIR(dt_w, rmsnorm_forward_tt, TO, out, rstd, x, w, N, D, eps, stream);
}

template <typename G>
static void rmsnorm_dw_reduce_t(void* dw, const float* partial, int nblk, int D, bool accumulate, cudaStream_t stream) {
    rmsnorm_dw_reduce_kernel2<G><<<CEIL_DIV(D, 32), dim3(32, RMS_DW_GROUPS), 0, stream>>>((G*)dw, partial, nblk, D,
                                                                                       accumulate);
}

template <typename TO, typename TW>
static void rmsnorm_backward_tt(float* dx, void* dw, DType dt_dw, bool accumulate_dw, const void* dout, const float* x,
                                const void* w, const float* rstd, int N, int D, float* scratch, cudaStream_t stream) {
    const bool vec = D % EW_CHUNK == 0 && is_aligned16(dx) && is_aligned16(dout) && is_aligned16(x) && is_aligned16(w);
    const int nblk = rmsnorm_backward_blocks(N, D), warps = rmsnorm_backward_warps(D);
    const size_t smem = (size_t)warps * D * sizeof(float);
    if (smem > 48 * 1024) {
        // one-time attribute per instantiation; cheap host call, no synchronisation
        CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_backward_kernel1<TW, TO>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    }
    if (D <= 32 * EW_CHUNK * RMS_NC)
        rmsnorm_backward_kernel2<TW, TO><<<nblk, warps * 32, smem, stream>>>(dx, scratch, (const TO*)dout, x,
                                                                            (const TW*)w, rstd, N, D, vec);
    else
        rmsnorm_backward_kernel1<TW, TO><<<nblk, warps * 32, smem, stream>>>(dx, scratch, (const TO*)dout, x,
                                                                            (const TW*)w, rstd, N, D, vec);
    CUDA_LAUNCH_CHECK();
    DTYPE_DISPATCH(dt_dw, rmsnorm_dw_reduce_t, dw, scratch, nblk, D, accumulate_dw, stream);
}
template <typename TO>
static void rmsnorm_backward_t(float* dx, void* dw, DType dt_dw, bool accumulate_dw, const void* dout, const float* x,
                               const void* w, DType dt_w, const float* rstd, int N, int D, float* scratch,
                               cudaStream_t stream) {
    DTYPE_DISPATCH_PAIR(dt_w, rmsnorm_backward_tt, TO, dx, dw, dt_dw, accumulate_dw, dout, x, w, rstd, N, D, scratch,
                        stream);
}

extern "C" void rmsnorm_forward(void* out, DType dt_out, float* rstd, const float* x, const void* w, DType dt_w, int N,
                                int D, float eps, cudaStream_t stream) {
    if (N <= 0 || D <= 0) return;
    DTYPE_DISPATCH(dt_out, rmsnorm_forward_t, out, rstd, x, w, dt_w, N, D, eps, stream);
    CUDA_LAUNCH_CHECK();
}

extern "C" void rmsnorm_backward(float* dx, void* dw, DType dt_dw, bool accumulate_dw, const void* dout, DType dt_out,
                                 const float* x, const void* w, DType dt_w, const float* rstd, int N, int D,
                                 float* scratch, cudaStream_t stream) {
    if (N <= 0 || D <= 0) return;
    if (D > 12288) t5_die(T5_EXIT_FAILURE, "rmsnorm_backward: D = %d is above the supported 12288", D);
    DTYPE_DISPATCH(dt_out, rmsnorm_backward_t, dx, dw, dt_dw, accumulate_dw, dout, x, w, dt_w, rstd, N, D, scratch,
                   stream);
    CUDA_LAUNCH_CHECK();
}
