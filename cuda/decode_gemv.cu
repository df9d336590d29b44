/*
 * decode_gemv.cu: small-M projections of the decoder step (contract in decode_gemv.cuh).
 *
 * decode_gemv_kernel5: the weights stream through a cp.async pipeline in shared memory into tensor-core mmas
 * (mma.sync m16n8k16, bf16/fp16 in, fp32 accumulation), the weights as the A operand (16 weight rows per fragment)
 * and the M <= 32 input rows as the B operand (NT = 2 or 4 n-tiles of 8 rows), so W is read from HBM once whatever M
 * is and neither conversions nor FMAs nor shuffle reductions cost issue slots.
 *   grid (ceil(N / G5_BN), S), W warps (4; 8 at NT = 4); block (x, s) owns the G5_BN = 64 weight rows
 *   n0 = x G5_BN .. over the K chunk s: [s KC, min(K, (s + 1) KC)), KC a multiple of BK = 16 W. A stage is BK k of
 *   the block's weight rows and of the MR = 8 NT input rows (rows >= M, k >= the chunk end and weight rows >= N are
 *   zero-filled by cp.async), 16-byte chunks XOR-swizzled by row (conflict-free ldmatrix). ST - 1 stages (ST = 4 or
 *   6 by the plan) of weights are requested before the grid dependency wait (cuda/pdl.cuh: weights are not written
 *   by the step), the inputs after it.
 *   Warp w takes the 16 k of slot w of every stage: 4 A fragments (the block's 64 weight rows, ldmatrix.x4) times NT
 *   B fragments (the input rows) = 4 NT mmas, fp32 accumulators c[mt][nt] for weight rows 16 mt + g (+ 8) and input
 *   rows 8 nt + 2t (+ 1). At the end the W warps' partial sums are added in warp order through shared memory.
 *   S = 1: ReLU, one rounding to dt, store. S > 1: the S blocks of a column block are one thread-block cluster
 *   (1, S, 1), S <= 8; each publishes its block sums in shared memory and block r adds slice r of the outputs over
 *   the cluster's shared memory in split order 0..S-1 (no workspace, no counters, no atomics). Deterministic: the
 *   mma sequence of a warp, the warp order and the split order are fixed for a given (M, N, K).
 * History (H200, bench_generate's GEMM table; docs/generate.md): kernel1 (8 warps, one column per warp, FMA)
 * 1.8-1.9 TB/s at M = 4; kernel2 (4 columns per warp, inputs staged in shared memory, FMA) 2.6-2.8 TB/s at M = 4;
 * kernel3/kernel4 (the same mmas with the weights in registers, 16 packets in flight per lane, split-K partials in a
 * global workspace added by the last warp to arrive) 2.5-3.3 TB/s at M = 4 and slower than cuBLASLt at M = 16, 32 (its
 * inputs re-read per warp and the last warp's serial reduction); kernel5 3.3-3.7 TB/s on the no-split shapes at
 * M = 4 and ahead of cuBLASLt in the t5-3b step at 4, 16 and 32 rows (run 9).
 */
#include <stdlib.h>
#include <string.h>

#include <cooperative_groups.h>

#include "common.cuh"
#include "decode_gemv.cuh"
#include "pdl.cuh"

namespace cg = cooperative_groups;

#define GV_MAX_M 32                      // 4 n-tiles of 8 input rows

// ---------------------------------------------------------------------------------------------
// kernel

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

#define G5_BN 64                         // weight rows (output columns) per block: 4 m16 tiles
#define G5_MAX_S 8                       // splits of K: one cluster of the portable size
#define G5_SMEM_PER_SM (200 * 1024)      // the plan's budget of shared memory per SM (of 228 KB)
#define G5_RED_LD (G5_BN + 4)            // fp32 row of the warp-sum buffer (+4: conflict-free stores)

__device__ __forceinline__ uint32_t g5_smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
// 16 bytes global -> shared, bypassing L1; src_bytes = 0 writes zeros (rows and k past the ends)
__device__ __forceinline__ void g5_cp16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void g5_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void g5_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void g5_ldsm4(unsigned int* r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// byte offset of 16-byte chunk c (0..2W-1) of row r in a stage tile of 32 W-byte rows (16 W k of bf16/fp16); the XOR
// permutes the 8 chunks of each 128-byte half, so the 8 rows an ldmatrix reads at one chunk hit 8 different bank groups
template <int W>
__device__ __forceinline__ uint32_t g5_swz(int r, int c) { return (uint32_t)(r * 32 * W + ((c ^ (r & 7)) << 4)); }

template <int NT, int ST, int W>
constexpr size_t g5_smem_bytes() {
    constexpr size_t stages = (size_t)ST * (G5_BN + 8 * NT) * (16 * W) * 2;
    constexpr size_t red = ((size_t)W * G5_RED_LD + G5_BN) * 8 * NT * 4;  // red + blk
    return stages > red ? stages : red;
}

template <typename T, int NT, int ST, int W>
__global__ void __launch_bounds__(W * 32)
    decode_gemv_kernel5(T* out, const T* in, const T* w, int M, int N, int K, int KC, bool relu) {
    constexpr int MR = 8 * NT;                       // input rows held per stage
    constexpr int BK = 16 * W, CPR = 2 * W;            // k per stage (a 16-k slot per warp), 16-byte chunks per row
    constexpr int WST = G5_BN * BK * 2, XST = MR * BK * 2;  // stage bytes
    constexpr int NTH = W * 32;
    extern __shared__ __align__(128) unsigned char g5_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int S = gridDim.y, split = blockIdx.y, n0 = blockIdx.x * G5_BN;
    const int k0 = split * KC, k1 = min(K, k0 + KC), nk = CEIL_DIV(k1 - k0, BK);
    const uint32_t sbase = g5_smem_addr(g5_smem);
    auto sw = [&](int slot) { return sbase + (uint32_t)(slot * (WST + XST)); };
    // stage i: thread tid copies chunks tid, tid + NTH, ... of the weight tile (row = chunk / CPR)
    auto load_w = [&](int i) {
        if (i >= nk) return;
        const int kb = k0 + i * BK;
        const uint32_t d = sw(i % ST);
#pragma unroll
        for (int j = 0; j < G5_BN * CPR / NTH; j++) {
            const int e = tid + j * NTH, r = e / CPR, c = e % CPR, n = n0 + r, k = kb + 8 * c;
            const bool ok = n < N && k < k1;
            g5_cp16(d + g5_swz<W>(r, c), ok ? (const void*)(w + (size_t)n * K + k) : (const void*)w, ok ? 16 : 0);
        }
    };
    auto load_x = [&](int i) {
        if (i >= nk) return;
        const int kb = k0 + i * BK;
        const uint32_t d = sw(i % ST) + WST;
#pragma unroll
        for (int j = 0; j < MR * CPR / NTH; j++) {
            const int e = tid + j * NTH, r = e / CPR, c = e % CPR, k = kb + 8 * c;
            const bool ok = r < M && k < k1;
            g5_cp16(d + g5_swz<W>(r, c), ok ? (const void*)(in + (size_t)r * K + k) : (const void*)in, ok ? 16 : 0);
        }
    };
    // before the grid dependency wait: the weights of the first ST - 1 stages (one group each)
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        load_w(i);
        g5_commit();
    }
    pdl_wait();
    pdl_trigger();
#pragma unroll
    for (int i = 0; i < ST - 1; i++) load_x(i);
    g5_commit();
    float c[4][NT][4];
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) c[mt][nt][0] = c[mt][nt][1] = c[mt][nt][2] = c[mt][nt][3] = 0.0f;
    for (int i = 0; i < nk; i++) {
        // stage i landed: the first time every group (the inputs came last), then all but the ST - 2 newest
        if (i == 0) g5_wait<0>();
        else g5_wait<ST - 2>();
        __syncthreads();  // stage i visible to all; slot (i - 1) % ST free for stage i + ST - 1
        load_w(i + ST - 1);
        load_x(i + ST - 1);
        g5_commit();
        const uint32_t ws = sw(i % ST), xs = ws + WST;
        unsigned int a[4][4], b[NT / 2][4];
#pragma unroll
        for (int mt = 0; mt < 4; mt++) g5_ldsm4(a[mt], ws + g5_swz<W>(16 * mt + (lane & 15), 2 * warp + (lane >> 4)));
#pragma unroll
        for (int p = 0; p < NT / 2; p++)
            g5_ldsm4(b[p], xs + g5_swz<W>(16 * p + (lane & 7) + ((lane >> 4) << 3), 2 * warp + ((lane >> 3) & 1)));
#pragma unroll
        for (int mt = 0; mt < 4; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++) gv_mma<T>(c[mt][nt], a[mt], &b[nt >> 1][2 * (nt & 1)]);
    }
    g5_wait<0>();
    __syncthreads();  // every warp done with the stages: the buffer becomes red[warp][m][G5_RED_LD], then blk[m][n]
    float* red = reinterpret_cast<float*>(g5_smem);
    float* blk = red + W * MR * G5_RED_LD;
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int n = 16 * mt + g + (i >> 1) * 8, m = 8 * nt + 2 * t + (i & 1);
                red[(warp * MR + m) * G5_RED_LD + n] = c[mt][nt][i];
            }
    __syncthreads();
    const int E = M * G5_BN;  // (m, n) of the block, n fastest
    if (S == 1) {
        for (int e = tid; e < E; e += NTH) {
            const int m = e / G5_BN, n = e % G5_BN;
            if (n0 + n >= N) continue;
            float s = 0.0f;
#pragma unroll
            for (int v = 0; v < W; v++) s += red[(v * MR + m) * G5_RED_LD + n];  // warp order
            out[(size_t)m * N + n0 + n] = from_f32<T>(relu ? fmaxf(s, 0.0f) : s);
        }
        return;
    }
    // S > 1: the S blocks of this column block form a cluster (1, S, 1); each publishes its block sums in shared
    // memory, then block r adds slice r of the (m, n) in split order 0..S-1 from the cluster's shared memory
    for (int e = tid; e < E; e += NTH) {
        const int m = e / G5_BN, n = e % G5_BN;
        float s = 0.0f;
#pragma unroll
        for (int v = 0; v < W; v++) s += red[(v * MR + m) * G5_RED_LD + n];
        blk[e] = s;
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const float* rb[G5_MAX_S];
#pragma unroll
    for (int r = 0; r < G5_MAX_S; r++) rb[r] = r < S ? cluster.map_shared_rank(blk, r) : blk;
    const int lo = (int)((long)E * split / S), hi = (int)((long)E * (split + 1) / S);
    for (int e = lo + tid; e < hi; e += NTH) {
        const int m = e / G5_BN, n = e % G5_BN;
        float v[G5_MAX_S];
#pragma unroll
        for (int r = 0; r < G5_MAX_S; r++) v[r] = r < S ? rb[r][e] : 0.0f;
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < G5_MAX_S; r++)
            if (r < S) s += v[r];
        if (n0 + n < N) out[(size_t)m * N + n0 + n] = from_f32<T>(relu ? fmaxf(s, 0.0f) : s);
    }
    cluster.sync();  // no block leaves while another reads its shared memory
}

// ---------------------------------------------------------------------------------------------
// launchers

// a positive integer from the environment (plan overrides for benchmarks), else dflt
static int gv_env_int(const char* name, int dflt) {
    const char* v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}

// kernel5's plan: splits S (doubled while the grid has fewer than T5TRAIN_GEMV5_BPS blocks per SM, default 1, the
// chunks keep >= 4 stages and S stays within a portable cluster), the chunk KC (a multiple of BK), and the stages
// ST (4 or 6): 6 when a block then takes at most half of G5_SMEM_PER_SM (so that the next kernel's blocks, launched
// early by PDL, and a cluster's blocks find room on an SM) and one wave of the grid's blocks fits it.
// Measured (t5-3b step, H200, docs/generate.md run 9): 6 stages beat 8 in the step (batch 4 beam 4: 2.03 against
// 2.11 ms) although the GEMM table, calls of one shape back to back, favoured 8 on the two no-split shapes; 12
// stages (1 block per SM) doubled the split shapes' times. T5TRAIN_GEMV5_ST=4|6 forces ST (benchmarks).
static int g5_bps(void) {
    static int v = 0;
    if (!v) v = gv_env_int("T5TRAIN_GEMV5_BPS", 1);
    return v;
}
static void g5_plan(int N, int K, int NT, int W, int sms, int* S_out, int* KC_out, int* ST_out) {
    static int st_forced = -1;
    if (st_forced < 0) st_forced = gv_env_int("T5TRAIN_GEMV5_ST", 0);
    const int blocks = CEIL_DIV(N, G5_BN), BK = 16 * W;
    int S = 1;
    while ((long)blocks * S < (long)g5_bps() * sms && K / (2 * S) >= 4 * BK && 2 * S <= G5_MAX_S) S *= 2;
    const int KC = CEIL_DIV(CEIL_DIV(K, S), BK) * BK;
    S = CEIL_DIV(K, KC);
    const long per_sm = CEIL_DIV((long)blocks * S, (long)sms), stage = (long)(G5_BN + 8 * NT) * BK * 2;
    int ST = 4;
    if (2 * 6 * stage <= G5_SMEM_PER_SM && per_sm * 6 * stage <= G5_SMEM_PER_SM) ST = 6;
    if (st_forced == 4 || st_forced == 6) ST = st_forced;
    if (W == 8) ST = 4;  // (4 stages of 24 KB at 8 warps, 32 rows: 96 KB)
    *S_out = S, *KC_out = KC, *ST_out = ST;
}

template <typename T, int NT, int ST, int W>
static void decode_gemv5_launch_st(T* out, const T* in, const T* w, int M, int N, int K, int S, int KC, bool relu,
                                   cudaStream_t stream) {
    static bool attr = false;  // (per instantiation) the dynamic shared memory may exceed 48 KB
    constexpr size_t smem = g5_smem_bytes<NT, ST, W>();
    if (!attr) {
        CUDA_CHECK(cudaFuncSetAttribute(decode_gemv_kernel5<T, NT, ST, W>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = true;
    }
    pdl_launch_cluster(decode_gemv_kernel5<T, NT, ST, W>, dim3((unsigned)CEIL_DIV(N, G5_BN), (unsigned)S),
                       dim3(W * 32), smem, stream, S, out, in, w, M, N, K, KC, relu);
}

// warps per block (16 k each per stage): 8 at 17..32 rows (t5-3b batch-32 greedy step 2.40 ms against 2.63 with 4,
// run 9), 4 below
static int g5_warps(int NT) { return NT == 4 ? 8 : 4; }

template <typename T, int NT>
static void decode_gemv5_launch(T* out, const T* in, const T* w, int M, int N, int K, bool relu, cudaStream_t stream) {
    int S = 1, KC = 0, ST = 4;
    const int W = g5_warps(NT);
    g5_plan(N, K, NT, W, device_num_sms(), &S, &KC, &ST);
    if (W == 8) decode_gemv5_launch_st<T, NT, 4, 8>(out, in, w, M, N, K, S, KC, relu, stream);
    else if (ST == 6) decode_gemv5_launch_st<T, NT, 6, 4>(out, in, w, M, N, K, S, KC, relu, stream);
    else decode_gemv5_launch_st<T, NT, 4, 4>(out, in, w, M, N, K, S, KC, relu, stream);
}

extern "C" bool decode_gemv_supported(DType dt, int M, int N, int K, const void* out, const void* in, const void* w) {
    return (dt == DT_BF16 || dt == DT_F16) && M >= 1 && M <= GV_MAX_M && N >= 1 && K >= 8 && K % 8 == 0 &&
           is_aligned16(out) && is_aligned16(in) && is_aligned16(w);
}

extern "C" void decode_gemv(void* out, const void* in, const void* w, DType dt, int M, int N, int K, bool relu,
                            cudaStream_t stream) {
    if (!decode_gemv_supported(dt, M, N, K, out, in, w))
        t5_die(T5_EXIT_FAILURE, "decode_gemv: unsupported %s (M %d, N %d, K %d) or unaligned pointers", dtype_name(dt),
               M, N, K);
    if (dt == DT_BF16 && M <= 16)
        decode_gemv5_launch<__nv_bfloat16, 2>((__nv_bfloat16*)out, (const __nv_bfloat16*)in, (const __nv_bfloat16*)w,
                                              M, N, K, relu, stream);
    else if (dt == DT_BF16)
        decode_gemv5_launch<__nv_bfloat16, 4>((__nv_bfloat16*)out, (const __nv_bfloat16*)in, (const __nv_bfloat16*)w,
                                              M, N, K, relu, stream);
    else if (M <= 16)
        decode_gemv5_launch<__half, 2>((__half*)out, (const __half*)in, (const __half*)w, M, N, K, relu, stream);
    else decode_gemv5_launch<__half, 4>((__half*)out, (const __half*)in, (const __half*)w, M, N, K, relu, stream);
    CUDA_LAUNCH_CHECK();
}
