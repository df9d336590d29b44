/*
 * decode_gemv.cu: small-M projections of the decoder step (contract in decode_gemv.cuh).
 *
 * decode_gemv_kernel4: tensor cores (mma.sync m16n8k16, bf16/fp16 in, fp32 accumulation) with the weights as the
 * A operand (16 weight rows) and the M <= 32 input rows as the B operand, NT = ceil(M / 8) n-tiles of 8 rows
 * (templates NT = 1, 2, 4): a warp keeps one weight fragment and applies it to the NT tiles, so W is streamed once
 * whatever M is, and neither conversions nor FMAs nor a shuffle reduction cost issue slots.
 *   grid (ceil(N / 64), S), 4 warps per block; warp w of block (x, s) owns the 16 weight rows
 *   n0 = (4 x + w) * 16 .. +16 over the K chunk s: [s KC, min(K, (s + 1) KC)), KC a multiple of 256.
 *   - Lane (g, t) = (lane / 4, lane % 4) reads 16-byte packets of W rows n0 + g and n0 + g + 8 at k = kb + 32 u + 8 t
 *     (U = 8 steps of 32 k per round: 16 packets, 256 bytes in flight per lane) and the packets of input rows
 *     g + 8 j (tile j) at the same k (zero for rows >= M, not read; the inputs are small and stay in L1/L2). A dot
 *     product does not depend on the order of k, so a packet's 8 elements are the k slots {2t, 2t+1, 2t+8, 2t+9} of
 *     two mmas, for A and B alike.
 *   - Accumulator j holds out rows 8 j + 2t, 8 j + 2t + 1 of columns n0 + g, n0 + g + 8: no reduction across lanes.
 *   - S = 1: ReLU, one rounding to dt, store. S > 1: the warp stores its fp32 partial sums to gv_ws (S, M, N); the
 *     last warp of the 16 columns to arrive (a counter per 16 columns, reset by that warp) adds the S partials in
 *     split order 0..S-1, then ReLU, then the one rounding. Deterministic: the mma sequence of a warp and the split
 *     order are fixed for a given (M, N, K), whichever warp comes last.
 *   S is chosen from the shape (gv_plan): doubled from 1 while the grid has fewer than GV_WARPS_PER_SM tasks (16
 *   columns x chunk) per SM, the chunks keep >= GV_KC_MIN elements and S x M x N fits the workspace.
 *   The workspace and the counters are static device memory (no allocation, graph-capture safe); so two calls may
 *   not run at the same time on one device (the decoder step runs on one stream).
 * History (H200, bench_generate's table, M = 4): kernel1 (8 warps, one column per warp, FMA) 1.8-1.9 TB/s; kernel2
 * (4 columns per warp, inputs staged in shared memory, FMA, block split-K) 2.6-2.8 TB/s at M = 4 and 1.7-1.9 at
 * M = 8 with one block per K, slower with block splits (1.0-1.8 TB/s). kernel3 = kernel4 at NT = 1 (M <= 8).
 * kernel4 at M = 16, 32 (H200, W rotated through 256 MiB): loading the inputs with the weights (U = 4) was 1-7% slower
 * than the late loads (U = 8) except lm_head at M = 32 (see the launcher); both remain slower than cuBLASLt at M = 16,
 * 32 on most t5-3b shapes (docs/generate.md).
 */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "decode_gemv.cuh"
#include "pdl.cuh"

#define GV_WARPS 4                      // warps per block
#define GV_U 8                          // 32-k steps per round: 2 x 8 weight packets in flight per lane
#define GV_COLS (GV_WARPS * 16)         // output columns per block
#define GV_MAX_M 32                     // 4 n-tiles of 8 input rows
#define GV_KC_MIN 256                   // smallest chunk the plan splits down to (one round of GV_U steps)
#define GV_WARPS_PER_SM 4               // tasks per SM the splits aim at (t5-3b step: 4 beat 8, 16)
#define GV_WS_FLOATS (1 << 20)          // split-K partials (S, M, N) fp32: 4 MiB
#define GV_MAX_GROUPS 8192              // counters, one per 16 columns: N <= 131072 when split

__device__ float gv_ws[GV_WS_FLOATS];
__device__ unsigned int gv_count[GV_MAX_GROUPS];

// ---------------------------------------------------------------------------------------------
// kernels

// d (16 x 8) += a (16 x 16) . b (16 x 8), fp32 accumulation (PTX mma.sync m16n8k16 row.col)
template <typename T>
__device__ __forceinline__ void gv_mma(float* d, const unsigned int* a, const unsigned int* b);
template <>
__device__ __forceinline__ void gv_mma<__nv_bfloat16>(float* d, const unsigned int* a, const unsigned int* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void gv_mma<__half>(float* d, const unsigned int* a, const unsigned int* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// weights: read once, keep out of L1
__device__ __forceinline__ uint4 gv_load_stream(const void* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// One warp: 16 weight rows (the A fragment, from 2 x U 16-byte packets per lane and round) times NT n-tiles of 8
// input rows (B fragments), NT accumulators of 4 floats; the weights are read once whatever M is.
// XJIT = false: the NT x U input packets of a round are loaded with its 2 U weight packets (registers 8 U + 4 NT U).
// XJIT = true: all weight loads of the round first, then the input packets of step u just before its mmas (L1
// hits), so U = 8 (256 weight bytes in flight per lane) fits at NT = 2, 4 as well.
// min 4 blocks per SM (<= 128 registers): ptxas then issues the loads of a round together; with no minimum it
// interleaved them with the mmas (3 loads in flight, 44 registers; seen in the SASS of kernel3). NT = 4 with XJIT
// needs 166 registers: 3 blocks per SM (at 4 it spilled).
template <typename T, int NT, int U, bool XJIT>
__global__ void __launch_bounds__(GV_WARPS * 32, NT == 4 && XJIT ? 3 : 4)
    decode_gemv_kernel4(T* out, const T* in, const T* w, int M, int N, int K, int KC, bool relu) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int S = gridDim.y, split = blockIdx.y;
    const int grp = blockIdx.x * GV_WARPS + warp, n0 = grp * 16;
    const int k0 = split * KC, k1 = min(K, k0 + KC);
    const T* w0 = w + (size_t)min(n0 + g, N - 1) * K;  // rows past N read row N - 1 (never stored)
    const T* w1 = w + (size_t)min(n0 + g + 8, N - 1) * K;
    const T* xr = in + (size_t)g * K;                   // input row g + 8 j at xr + 8 j K, loaded only when < M
    // before the grid dependency wait (cuda/pdl.cuh): only the weights, which nothing in the step writes (the first
    // round's packets into registers)
    uint4 a0[U], a1[U];
    auto load_w = [&](int kr) {
        const int kb = kr + 8 * t;
        // unconditional weight loads (a k past the chunk reads its last packet, then counts as zero), so that all
        // of them are in flight together
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = min(kb + 32 * u, k1 - 8);
            a0[u] = gv_load_stream(w0 + k);
            a1[u] = gv_load_stream(w1 + k);
        }
    };
    load_w(k0);
    pdl_wait();
    pdl_trigger();
    if (n0 >= N) return;  // whole warp (no block-wide synchronisation below)
    float c[NT][4];  // tile j: (cols n0 + g, n0 + g + 8) x (rows 8 j + 2t, 8 j + 2t + 1)
#pragma unroll
    for (int j = 0; j < NT; j++) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    for (int kr = k0; kr < k1; kr += 32 * U) {  // warp-uniform trip count (mma.sync needs the whole warp)
        const int kb = kr + 8 * t;
        // input rows >= M are not read (zero)
        uint4 x[NT][XJIT ? 1 : U];
        if (kr != k0) load_w(kr);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = min(kb + 32 * u, k1 - 8);
            if (!XJIT)
#pragma unroll
                for (int j = 0; j < NT; j++)
                    x[j][u] = g + 8 * j < M ? __ldg(reinterpret_cast<const uint4*>(xr + (size_t)8 * j * K + k)) : z;
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            if (kb + 32 * u >= k1) {
                a0[u] = a1[u] = z;
                if (!XJIT)
#pragma unroll
                    for (int j = 0; j < NT; j++) x[j][u] = z;
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const unsigned int alo[4] = {a0[u].x, a1[u].x, a0[u].y, a1[u].y};
            const unsigned int ahi[4] = {a0[u].z, a1[u].z, a0[u].w, a1[u].w};
            if (XJIT) {  // the input packets of step u only now (L1 hits), after all of the round's weight loads
                const int k = kb + 32 * u;
#pragma unroll
                for (int j = 0; j < NT; j++)
                    x[j][0] = g + 8 * j < M && k < k1 ? __ldg(reinterpret_cast<const uint4*>(xr + (size_t)8 * j * K + k))
                                                      : z;
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int ux = XJIT ? 0 : u;
                const unsigned int blo[2] = {x[j][ux].x, x[j][ux].y}, bhi[2] = {x[j][ux].z, x[j][ux].w};
                gv_mma<T>(c[j], alo, blo);
                gv_mma<T>(c[j], ahi, bhi);
            }
        }
    }
    const int m0 = 2 * t;
    if (S == 1) {
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int m = 8 * j + m0 + (i & 1), n = n0 + g + (i >> 1) * 8;
                if (m < M && n < N) out[(size_t)m * N + n] = from_f32<T>(relu ? fmaxf(c[j][i], 0.0f) : c[j][i]);
            }
        return;
    }
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int m = 8 * j + m0 + (i & 1), n = n0 + g + (i >> 1) * 8;
            if (m < M && n < N) gv_ws[((size_t)split * M + m) * N + n] = c[j][i];
        }
    __threadfence();
    __syncwarp();
    unsigned int prev = 0;
    if (lane == 0) prev = atomicAdd(&gv_count[grp], 1u);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    if (prev != (unsigned int)(S - 1)) return;
    __threadfence();
    // the last warp of these 16 columns: (M, 16) sums in split order
    for (int i = lane; i < M * 16; i += 32) {
        const int m = i >> 4, n = n0 + (i & 15);
        if (n >= N) continue;
        float sum = 0.0f;
        for (int s = 0; s < S; s++) sum += __ldcg(&gv_ws[((size_t)s * M + m) * N + n]);
        out[(size_t)m * N + n] = from_f32<T>(relu ? fmaxf(sum, 0.0f) : sum);
    }
    if (lane == 0) gv_count[grp] = 0;  // ready for the next call (stream order)
}

// ---------------------------------------------------------------------------------------------
// launchers

static int gv_num_sms(void) {  // read once (one device per process)
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    return sms;
}

// tuning of the plan, for benchmarks: T5TRAIN_GEMV_WPS (tasks per SM the splits aim at, every NT) and
// T5TRAIN_GEMV_KCMIN (smallest chunk, rounded up to a multiple of 256), read once
static int gv_env_int(const char* name, int dflt) {
    const char* v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}
static int gv_wps(void) {
    static int v = 0;
    if (!v) v = gv_env_int("T5TRAIN_GEMV_WPS", GV_WARPS_PER_SM);  // 4 measured best at M = 16, 32 too (2, 8 slower)
    return v;
}
static int gv_kc_min(void) {
    static int v = 0;
    if (!v) v = CEIL_DIV(gv_env_int("T5TRAIN_GEMV_KCMIN", GV_KC_MIN), 256) * 256;
    return v;
}

// splits S and chunk KC for (M, N, K) on sms SMs: doubled only while the partials (S, M, N) fit the workspace and
// the counters, so every shape has a plan (S = 1 at worst)
static void gv_plan(int M, int N, int K, int sms, int* S_out, int* KC_out) {
    const int groups = CEIL_DIV(N, 16), kc_min = gv_kc_min();
    int S = 1;
    while ((long)groups * S < (long)gv_wps() * sms && K / (2 * S) >= kc_min &&
           (long)2 * S * M * N <= GV_WS_FLOATS && groups <= GV_MAX_GROUPS)
        S *= 2;
    const int KC = CEIL_DIV(CEIL_DIV(K, S), 256) * 256;  // lane-aligned chunks, the last one shorter
    S = CEIL_DIV(K, KC);
    *S_out = S, *KC_out = KC;
}

extern "C" bool decode_gemv_supported(DType dt, int M, int N, int K, const void* out, const void* in, const void* w) {
    return (dt == DT_BF16 || dt == DT_F16) && M >= 1 && M <= GV_MAX_M && N >= 1 && K >= 8 && K % 8 == 0 &&
           is_aligned16(out) && is_aligned16(in) && is_aligned16(w);
}

template <typename T>
static void decode_gemv_t(void* out, const void* in, const void* w, int M, int N, int K, bool relu, int S, int KC,
                          cudaStream_t stream) {
    const dim3 grid((unsigned)CEIL_DIV(N, GV_COLS), (unsigned)S), block(GV_WARPS * 32);
    T* o = (T*)out;
    const T *x = (const T*)in, *wt = (const T*)w;
    static int xjit = -1;  // T5TRAIN_GEMV_XJIT=0: inputs loaded with the weights at NT = 2, 4 too (for benchmarks)
    if (xjit < 0) {
        const char* e = getenv("T5TRAIN_GEMV_XJIT");
        xjit = !(e && strcmp(e, "0") == 0);
    }
    // NT = 4 with late input loads needs 166 registers (3 blocks per SM): only when the grid fits in one wave of
    // those (lm_head at M = 32, 502 blocks: 29.2 us against 21.8 with the 4-block variant on the H200)
    const bool jit4 = xjit && (long)grid.x * grid.y <= 3L * gv_num_sms();
    if (M <= 8) pdl_launch(decode_gemv_kernel4<T, 1, GV_U, false>, grid, block, 0, stream, o, x, wt, M, N, K, KC, relu);
    else if (M <= 16 && xjit)
        pdl_launch(decode_gemv_kernel4<T, 2, GV_U, true>, grid, block, 0, stream, o, x, wt, M, N, K, KC, relu);
    else if (M <= 16)
        pdl_launch(decode_gemv_kernel4<T, 2, GV_U / 2, false>, grid, block, 0, stream, o, x, wt, M, N, K, KC, relu);
    else if (jit4)
        pdl_launch(decode_gemv_kernel4<T, 4, GV_U, true>, grid, block, 0, stream, o, x, wt, M, N, K, KC, relu);
    else pdl_launch(decode_gemv_kernel4<T, 4, GV_U / 2, false>, grid, block, 0, stream, o, x, wt, M, N, K, KC, relu);
}

extern "C" void decode_gemv(void* out, const void* in, const void* w, DType dt, int M, int N, int K, bool relu,
                            cudaStream_t stream) {
    int S = 1, KC = 0;
    if (!decode_gemv_supported(dt, M, N, K, out, in, w))
        t5_die(T5_EXIT_FAILURE, "decode_gemv: unsupported %s (M %d, N %d, K %d) or unaligned pointers", dtype_name(dt),
               M, N, K);
    gv_plan(M, N, K, gv_num_sms(), &S, &KC);
    // the split partials (S, M, N) fp32 and one counter per 16 columns must fit the static workspace
    if (S > 1 && ((size_t)S * M * N > GV_WS_FLOATS || CEIL_DIV(N, 16) > GV_MAX_GROUPS))
        t5_die(T5_EXIT_FAILURE, "internal: decode_gemv plan S %d for (M %d, N %d) exceeds the workspace", S, M, N);
    if (dt == DT_BF16) decode_gemv_t<__nv_bfloat16>(out, in, w, M, N, K, relu, S, KC, stream);
    else decode_gemv_t<__half>(out, in, w, M, N, K, relu, S, KC, stream);
    CUDA_LAUNCH_CHECK();
}
