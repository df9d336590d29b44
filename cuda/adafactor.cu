/*
 * adafactor.cu: fused multi-tensor Adafactor (transformers' Adafactor.step arithmetic) over a fixed list of
 * tensors. There is no backward: this is the optimizer step.
 *
 *   master:             (rows*cols) fp32 per tensor, updated in place (=)
 *   grad:               (rows*cols) fp32 / fp16 / bf16, read, times *d_grad_scale
 *   work:               (rows*cols) fp16 / bf16 or none, = 16-bit(new master), round to nearest even
 *   exp_avg_sq_row/col: (rows) / (cols) fp32, 2-D tensors (factored); exp_avg_sq (n) fp32, 1-D tensors
 *   exp_avg:            (n) fp32 with beta1
 * Per tensor, t = step (src/zero/cpu_adafactor.h has the same formulas; every fp32 operation here is the
 * CPU reference's, written with __f*_rn intrinsics so nvcc cannot contract or reorder):
 *   g = grad*gs;  uu = g*g + eps1;  b2t = 1 - t^decay_rate
 *   2-D: row_i = fma(mean_j uu, 1-b2t, row_i*b2t); col_j = fma(mean_i uu, 1-b2t, col_j*b2t)
 *        u = (rf_i * cf_j) * g,  rf_i = 1/sqrt(row_i / mean(row)),  cf_j = 1/sqrt(col_j)
 *   1-D: v = fma(uu, 1-b2t, v*b2t); u = (1/sqrt(v)) * g
 *   lr = _get_lr(RMS(p)); u /= max(1, rms(u)/clip); u *= lr; [beta1: m = fma(u, 1-b1, m*b1); u = m]
 *   [wd: p = fma(p, -wd*lr, p)]; p = p - u
 * Sums (p^2, u^2, row and column sums of uu, the sum of row) are accumulated in fp64 with fixed trees and
 * rounded once to fp32, as the CPU reference (which sums in a different fixed order: an fp32 sum can differ
 * by the rounding of a different fp64 value, in practice never more than 1 ulp, usually 0).
 *
 * Work split (all tables built once by the plan; every launch covers every tensor):
 *   chunks:   a 1-D tensor in ranges of ADAF_CHUNK elements; a matrix in ranges of whole rows (at least
 *             ADAF_MIN_ROWS rows, about ADAF_CHUNK elements); one block per chunk. A slice of a matrix
 *             (several ZeRO ranks: elements [first, first + count)) takes the rows it touches, clipped to the
 *             slice: its first and last rows may be partial.
 *   colunits: a matrix in groups of ADAF_COL_ROWS rows x ADAF_COL_SLAB columns; one block per unit (32 columns
 *             x 8 row lanes, coalesced 32-float row segments), writing one fp64 partial per (group, column).
 * Kernels, in stream order (three phases: several ranks all-reduce the reduce buffers between them):
 *   begin   buffers 1 and 2 cleared
 *   1 rowstats   (chunks)  matrix: one warp per row, row sum of uu -> buffer 1; 1-D: v EMA in place and the
 *                          chunk's sum of u^2; both: the chunk's sum of p^2 (p before the step)
 *   2 colstats   (colunits) fp64 column partials of uu per row group
 *   3 colsum     (one block per matrix) column sums from the partials in group order -> buffer 1
 *   4 tsum1      (one thread per tensor) chunk sums of p^2 in chunk order -> buffer 1; a vector's u^2 -> buffer 2
 *   middle
 *   5 factors    (one block per matrix) row and column EMAs from buffer 1, sum(row) -> rf, cf
 *   6 updsumsq   (chunks of matrices) the chunk's sum of u^2, u recomputed from rf, cf, g (not stored)
 *   7 tsum2      (one thread per tensor) a matrix's chunk sums of u^2 -> buffer 2
 *   end
 *   8 scalars    (one thread per tensor) RMS, lr, clip divisor, -wd*lr from the buffers
 *   9 apply      (chunks) u recomputed, clipped, scaled, momentum, weight decay, p -= u, working copy
 * Every kernel returns at once when *d_skip != 0. Deterministic: fixed launch shapes and reduction trees; on one
 * GPU (nothing reduced between the phases) the sums are those of the six-kernel plan this one replaced, bit for bit
 * (each fp64 sum is formed in the same order and only stored in between).
 */
#include <math.h>

#include "adafactor.cuh"
#include "common.cuh"

#define ADAF_BLOCK 256
#define ADAF_WARPS (ADAF_BLOCK / 32)
#define ADAF_CHUNK 16384
#define ADAF_MIN_ROWS ADAF_WARPS
#define ADAF_COL_ROWS 1024
#define ADAF_COL_SLAB 32

typedef struct {
    AdafactorTensor t;    // t.first / t.count: the slice (count = n when whole)
    int64_t n;            // elements of the whole tensor (rows * cols)
    int64_t colpart_off;  // fp64 scratch: ngroups * cols column partials (factored)
    int64_t cf_off;       // fp32 scratch: cols column factors (factored)
    int64_t rf_off;       // fp32 scratch: rows row factors (factored)
    int64_t red1_off;     // buffer 1: [rows row sums | cols column sums | sum p^2] (factored) or [sum p^2]
    int64_t red2_off;     // buffer 2: sum u^2
    int g0;               // first row group the slice touches (factored)
    int ngroups;          // row groups of ADAF_COL_ROWS the slice touches (factored)
    int first_chunk, nchunks;
} AdafDevTensor;

typedef struct {
    int tensor;
    int64_t start, end;  // element range of the tensor (a matrix: whole rows, clipped to the slice)
} AdafChunk;

typedef struct {
    int tensor;
    int group;   // rows [group * ADAF_COL_ROWS, ...)
    int64_t c0;  // columns [c0, c0 + ADAF_COL_SLAB)
} AdafColUnit;

struct AdafactorPlan {
    int count;
    int nchunks, ncolunits, nfactored;
    AdafDevTensor* d_tensors;  // (count)
    AdafChunk* d_chunks;       // (nchunks)
    AdafColUnit* d_colunits;   // (ncolunits)
    int* d_factored;           // (nfactored) tensor indices of the matrices
    double* d_colpart;         // column partials
    float* d_factors;          // cf and rf
    double* d_psum;            // (nchunks) sum of p^2 per chunk
    double* d_usum;            // (nchunks) sum of u^2 per chunk
    AdafactorScalars* d_scalars;  // (count)
    double* d_red1;            // (len1) reduce buffer 1
    double* d_red2;            // (len2) reduce buffer 2
    int64_t len1, len2;
    size_t scratch_bytes;
};

// the per-step constants every kernel reads (fp32 values rounded from Python doubles, as torch does)
typedef struct {
    float eps1, b2, omb2;  // eps1, b2t, 1 - b2t
    float b1, omb1;        // beta1, 1 - beta1
    bool has_beta1;
    bool scale_parameter;
    double rel;            // the relative step (or the external lr)
    double eps2;
    float eps2_f;
    float clip;
} AdafConsts;

// ---- CUDA kernels

__device__ __forceinline__ float adaf_load_grad(const void* g, DType dt, int64_t i, float gs) {
    float x;
    if (dt == DT_F16) x = __half2float(((const __half*)g)[i]);
    else if (dt == DT_BF16) x = __bfloat162float(((const __nv_bfloat16*)g)[i]);
    else x = ((const float*)g)[i];
    return __fmul_rn(x, gs);
}

__device__ __forceinline__ float adaf_rsqrt(float x) { return __fdiv_rn(1.0f, __fsqrt_rn(x)); }

__device__ __forceinline__ double adaf_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // xor tree: every lane equal
    return v;
}

// fixed-tree block sum; every thread gets the result
__device__ double adaf_block_sum(double v) {
    __shared__ double sh[ADAF_WARPS];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = adaf_warp_sum(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    double s = 0.0;
    for (int k = 0; k < ADAF_WARPS; k++) s += sh[k];
    __syncthreads();
    return s;
}

// Element i of the tensor (0 <= i - first < count) lives at index i - first of the slice's arrays.
__global__ void adafactor_rowstats_kernel1(const AdafDevTensor* tensors, const AdafChunk* chunks, AdafConsts k,
                                           const float* d_grad_scale, const int* d_skip, double* psum,
                                           double* usum, double* red1) {
    if (d_skip && *d_skip) return;
    const AdafChunk c = chunks[blockIdx.x];
    const AdafDevTensor T = tensors[c.tensor];
    const float gs = d_grad_scale ? *d_grad_scale : 1.0f;
    const int64_t f = T.t.first;
    double pacc = 0.0, uacc = 0.0;
    if (T.t.factored) {
        const int64_t cols = T.t.cols, r0 = c.start / cols, r1 = CEIL_DIV(c.end, cols);
        const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
        for (int64_t r = r0 + wid; r < r1; r += ADAF_WARPS) {
            // the row's columns inside the chunk (a slice's first / last row may be partial)
            const int64_t jlo = c.start > r * cols ? c.start - r * cols : 0;
            const int64_t jhi = c.end < (r + 1) * cols ? c.end - r * cols : cols;
            double acc = 0.0;
            for (int64_t j = jlo + lane; j < jhi; j += 32) {
                const float g = adaf_load_grad(T.t.grad, T.t.grad_dtype, r * cols + j - f, gs);
                acc += (double)__fadd_rn(__fmul_rn(g, g), k.eps1);
            }
            acc = adaf_warp_sum(acc);
            if (lane == 0) red1[T.red1_off + r] = acc;  // this rank's row sum (the EMA waits for every rank's)
        }
        for (int64_t i = c.start + threadIdx.x; i < c.end; i += ADAF_BLOCK) {
            const double p = (double)T.t.master[i - f];
            pacc += p * p;  // exact product: an fma would give the same sum
        }
    } else {
        float* v = T.t.exp_avg_sq;
        for (int64_t i = c.start + threadIdx.x; i < c.end; i += ADAF_BLOCK) {
            const float g = adaf_load_grad(T.t.grad, T.t.grad_dtype, i - f, gs);
            const float uu = __fadd_rn(__fmul_rn(g, g), k.eps1);
            const float vv = __fmaf_rn(uu, k.omb2, __fmul_rn(v[i - f], k.b2));
            v[i - f] = vv;
            const double u = (double)__fmul_rn(adaf_rsqrt(vv), g);
            uacc += u * u;
            const double p = (double)T.t.master[i - f];
            pacc += p * p;
        }
    }
    pacc = adaf_block_sum(pacc);
    uacc = adaf_block_sum(uacc);
    if (threadIdx.x == 0) {
        psum[blockIdx.x] = pacc;
        usum[blockIdx.x] = uacc;  // a matrix's is overwritten by updsumsq
    }
}

__global__ void adafactor_colstats_kernel1(const AdafDevTensor* tensors, const AdafColUnit* units, AdafConsts k,
                                           const float* d_grad_scale, const int* d_skip, double* colpart) {
    if (d_skip && *d_skip) return;
    __shared__ double sh[ADAF_WARPS][ADAF_COL_SLAB];
    const AdafColUnit cu = units[blockIdx.x];
    const AdafDevTensor T = tensors[cu.tensor];
    const float gs = d_grad_scale ? *d_grad_scale : 1.0f;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int64_t cols = T.t.cols, j = cu.c0 + lane;
    const int64_t f = T.t.first, e1 = f + T.t.count;
    // the group's rows the slice touches; an element outside the slice adds nothing
    const int64_t rs = f / cols, re = CEIL_DIV(e1, cols);
    int64_t r0 = (int64_t)cu.group * ADAF_COL_ROWS;
    int64_t r1 = r0 + ADAF_COL_ROWS < T.t.rows ? r0 + ADAF_COL_ROWS : T.t.rows;
    if (r0 < rs) r0 = rs;
    if (r1 > re) r1 = re;
    double acc = 0.0;
    if (j < cols)
        for (int64_t r = r0 + wid; r < r1; r += ADAF_WARPS) {
            const int64_t e = r * cols + j;
            if (e < f || e >= e1) continue;
            const float g = adaf_load_grad(T.t.grad, T.t.grad_dtype, e - f, gs);
            acc += (double)__fadd_rn(__fmul_rn(g, g), k.eps1);
        }
    sh[wid][lane] = acc;
    __syncthreads();
    if (wid == 0 && j < cols) {
        double s = 0.0;
        for (int w = 0; w < ADAF_WARPS; w++) s += sh[w][lane];
        colpart[T.colpart_off + (int64_t)(cu.group - T.g0) * cols + j] = s;
    }
}

// the column sums of each matrix (partials in group order) into buffer 1
__global__ void adafactor_colsum_kernel1(const AdafDevTensor* tensors, const int* factored, const int* d_skip,
                                         const double* colpart, double* red1) {
    if (d_skip && *d_skip) return;
    const AdafDevTensor T = tensors[factored[blockIdx.x]];
    const int64_t cols = T.t.cols;
    const double* cp = colpart + T.colpart_off;
    double* out = red1 + T.red1_off + T.t.rows;
    for (int64_t j = threadIdx.x; j < cols; j += ADAF_BLOCK) {
        double cs = 0.0;
        for (int g = 0; g < T.ngroups; g++) cs += cp[(int64_t)g * cols + j];
        out[j] = cs;
    }
}

// per tensor: the chunks' sums in chunk order. phase 1: sum p^2 (buffer 1) and a vector's sum u^2 (buffer 2);
// phase 2: a matrix's sum u^2 (buffer 2)
__global__ void adafactor_tsum_kernel1(const AdafDevTensor* tensors, int count, int phase, const int* d_skip,
                                       const double* psum, const double* usum, double* red1, double* red2) {
    if (d_skip && *d_skip) return;
    const int ti = blockIdx.x * blockDim.x + threadIdx.x;
    if (ti >= count) return;
    const AdafDevTensor T = tensors[ti];
    if (T.nchunks == 0) return;
    double ps = 0.0, us = 0.0;
    for (int q = 0; q < T.nchunks; q++) {
        ps += psum[T.first_chunk + q];
        us += usum[T.first_chunk + q];
    }
    if (phase == 1) red1[T.red1_off + (T.t.factored ? T.t.rows + T.t.cols : 0)] = ps;
    if ((phase == 1) != T.t.factored) red2[T.red2_off] = us;
}

// row and column EMAs from the whole matrix's sums (every rank holding a slice does the same: replicated), factors
__global__ void adafactor_factors_kernel1(const AdafDevTensor* tensors, const int* factored, AdafConsts k,
                                          const int* d_skip, const double* red1, float* factors) {
    if (d_skip && *d_skip) return;
    const AdafDevTensor T = tensors[factored[blockIdx.x]];
    const int64_t rows = T.t.rows, cols = T.t.cols;
    const float frows = (float)rows, fcols = (float)cols;
    float* C = T.t.exp_avg_sq_col;
    float* R = T.t.exp_avg_sq_row;
    float* cf = factors + T.cf_off;
    float* rf = factors + T.rf_off;
    const double* rsum = red1 + T.red1_off;
    const double* csum = rsum + rows;
    for (int64_t j = threadIdx.x; j < cols; j += ADAF_BLOCK) {
        const float mean = __fdiv_rn((float)csum[j], frows);
        const float cc = __fmaf_rn(mean, k.omb2, __fmul_rn(C[j], k.b2));
        C[j] = cc;
        cf[j] = adaf_rsqrt(cc);
    }
    double rs = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += ADAF_BLOCK) {
        const float mean = __fdiv_rn((float)rsum[r], fcols);
        const float rr = __fmaf_rn(mean, k.omb2, __fmul_rn(R[r], k.b2));
        R[r] = rr;
        rs += (double)rr;
    }
    rs = adaf_block_sum(rs);
    const float rmean = __fdiv_rn((float)rs, frows);
    for (int64_t r = threadIdx.x; r < rows; r += ADAF_BLOCK) rf[r] = adaf_rsqrt(__fdiv_rn(R[r], rmean));
}

// the unclipped update of element i of a matrix chunk whose first row is r0 (cols < 2^28, so offsets from the
// row r0 * cols fit 32 bits: a chunk spans at most ADAF_MIN_ROWS + 1 rows of such width)
__device__ __forceinline__ float adaf_fact_update(const AdafDevTensor& T, const float* factors, int64_t r0, int64_t i,
                                                  float gs) {
    const uint32_t loc = (uint32_t)(i - r0 * T.t.cols), c = (uint32_t)T.t.cols;
    const uint32_t rr = loc / c, j = loc - rr * c;
    const float a = __fmul_rn(factors[T.rf_off + r0 + rr], factors[T.cf_off + j]);
    return __fmul_rn(a, adaf_load_grad(T.t.grad, T.t.grad_dtype, i - T.t.first, gs));
}

__global__ void adafactor_updsumsq_kernel1(const AdafDevTensor* tensors, const AdafChunk* chunks,
                                           const float* d_grad_scale, const int* d_skip, const float* factors,
                                           double* usum) {
    if (d_skip && *d_skip) return;
    const AdafChunk c = chunks[blockIdx.x];
    const AdafDevTensor T = tensors[c.tensor];
    if (!T.t.factored) return;  // block-uniform
    const float gs = d_grad_scale ? *d_grad_scale : 1.0f;
    const int64_t r0 = c.start / T.t.cols;
    double acc = 0.0;
    for (int64_t i = c.start + threadIdx.x; i < c.end; i += ADAF_BLOCK) {
        const double u = (double)adaf_fact_update(T, factors, r0, i, gs);
        acc += u * u;
    }
    acc = adaf_block_sum(acc);
    if (threadIdx.x == 0) usum[blockIdx.x] = acc;
}

__global__ void adafactor_scalars_kernel1(const AdafDevTensor* tensors, int count, AdafConsts k, const int* d_skip,
                                          const double* red1, const double* red2, AdafactorScalars* out) {
    if (d_skip && *d_skip) return;
    const int ti = blockIdx.x * blockDim.x + threadIdx.x;
    if (ti >= count) return;
    const AdafDevTensor T = tensors[ti];
    if (T.nchunks == 0) return;
    const double ps = red1[T.red1_off + (T.t.factored ? T.t.rows + T.t.cols : 0)];
    const double us = red2[T.red2_off];
    const float sqn = (float)sqrt((double)T.n);
    const float prms = __fdiv_rn(__fsqrt_rn((float)ps), sqn);
    // HF _get_lr: rel * max(eps2, RMS) with a tensor RMS (fp32 product) when RMS > eps2, else Python floats
    float lr;
    double lrd = k.rel;
    bool lr_f32 = false;
    if (!k.scale_parameter) {
        lr = (float)lrd;
    } else if (prms > k.eps2_f) {
        lr = __fmul_rn(prms, (float)k.rel);
        lr_f32 = true;
    } else {
        lrd = __dmul_rn(k.eps2, k.rel);
        lr = (float)lrd;
    }
    const float urms = __fdiv_rn(__fsqrt_rn((float)us), sqn);
    float d = __fdiv_rn(urms, k.clip);
    if (d < 1.0f) d = 1.0f;  // clamp_(min=1.0); NaN stays NaN
    const double wd = T.t.weight_decay;
    const float wda = lr_f32 ? __fmul_rn((float)(-wd), lr) : (float)__dmul_rn(-wd, lrd);
    out[ti] = AdafactorScalars{prms, lr, urms, d, wda};
}

__global__ void adafactor_apply_kernel1(const AdafDevTensor* tensors, const AdafChunk* chunks, AdafConsts k,
                                        const float* d_grad_scale, const int* d_skip, const float* factors,
                                        const AdafactorScalars* scalars) {
    if (d_skip && *d_skip) return;
    const AdafChunk c = chunks[blockIdx.x];
    const AdafDevTensor T = tensors[c.tensor];
    const AdafactorScalars S = scalars[c.tensor];
    const float gs = d_grad_scale ? *d_grad_scale : 1.0f;
    const int64_t r0 = T.t.factored ? c.start / T.t.cols : 0;
    const int64_t f = T.t.first;
    const bool wd = T.t.weight_decay != 0.0;
    float* m = T.t.exp_avg;
    for (int64_t i = c.start + threadIdx.x; i < c.end; i += ADAF_BLOCK) {
        const int64_t li = i - f;  // in the slice's arrays
        float u = T.t.factored ? adaf_fact_update(T, factors, r0, i, gs)
                               : __fmul_rn(adaf_rsqrt(T.t.exp_avg_sq[li]),
                                           adaf_load_grad(T.t.grad, T.t.grad_dtype, li, gs));
        if (S.clip_div != 1.0f) u = __fdiv_rn(u, S.clip_div);
        u = __fmul_rn(u, S.lr);
        if (k.has_beta1) {
            const float mm = __fmaf_rn(u, k.omb1, __fmul_rn(m[li], k.b1));
            m[li] = mm;
            u = mm;
        }
        float p = T.t.master[li];
        if (wd) p = __fmaf_rn(p, S.wd_alpha, p);
        p = __fsub_rn(p, u);
        T.t.master[li] = p;
        if (T.t.work) {
            if (T.t.work_dtype == DT_F16) ((__half*)T.t.work)[li] = __float2half_rn(p);
            else ((__nv_bfloat16*)T.t.work)[li] = __float2bfloat16_rn(p);
        }
    }
}

// ---- launchers

// One tensor's work split (plan and scratch arithmetic): the slice [f, f + c), its chunks and (a matrix) the rows
// it touches [ra, rb] in row groups g0 .. g0 + ngroups - 1.
typedef struct {
    int64_t n, f, c, ra, rb, rpc, nchunks;
    int g0, ngroups;
} AdafGeom;

static AdafGeom adaf_geom(const AdafactorTensor* t, int i) {
    AdafGeom g;
    memset(&g, 0, sizeof g);
    if (t->rows < 0 || t->cols < 0)
        t5_die(T5_EXIT_FAILURE, "adafactor plan: tensor %d has shape (%lld, %lld)", i, (long long)t->rows,
               (long long)t->cols);
    g.n = t->rows * t->cols;
    g.f = t->first;
    g.c = t->count ? t->count : g.n;
    if (t->first < 0 || t->count < 0 || (t->count == 0 && t->first != 0) || g.f + g.c > g.n)
        t5_die(T5_EXIT_FAILURE, "adafactor plan: tensor %d: slice [%lld, +%lld) of %lld elements", i,
               (long long)t->first, (long long)t->count, (long long)g.n);
    if (g.n == 0) return g;
    if (t->factored) {
        if (t->cols >= ((int64_t)1 << 28))
            t5_die(T5_EXIT_FAILURE, "adafactor plan: tensor %d has %lld columns (the limit is 2^28)", i,
                   (long long)t->cols);
        g.rpc = T5_MAX((int64_t)ADAF_MIN_ROWS, (int64_t)ADAF_CHUNK / t->cols);
        g.ra = g.f / t->cols;
        g.rb = (g.f + g.c - 1) / t->cols;
        g.nchunks = CEIL_DIV(g.rb - g.ra + 1, g.rpc);
        g.g0 = (int)(g.ra / ADAF_COL_ROWS);
        g.ngroups = (int)(g.rb / ADAF_COL_ROWS) - g.g0 + 1;
    } else {
        g.nchunks = CEIL_DIV(g.c, (int64_t)ADAF_CHUNK);
    }
    return g;
}

// doubles of tensor t's slots in reduce buffer 1
static int64_t adaf_red1_len(const AdafactorTensor* t) { return t->factored ? t->rows + t->cols + 1 : 1; }

size_t adafactor_plan_scratch_bytes_for(const AdafactorTensor* tensors, int count, const AdafactorReduce* red) {
    int64_t nchunks = 0, colpart = 0, nfactors = 0, len1 = 0;
    for (int i = 0; i < count; i++) {
        const AdafactorTensor* t = &tensors[i];
        const AdafGeom g = adaf_geom(t, i);
        len1 += adaf_red1_len(t);
        if (g.n <= 0) continue;
        nchunks += g.nchunks;
        if (t->factored) {
            colpart += (int64_t)g.ngroups * t->cols;
            nfactors += t->cols + t->rows;
        }
    }
    const int64_t l1 = red ? red->len1 : len1, l2 = red ? red->len2 : count;
    return (size_t)(colpart ? colpart : 1) * sizeof(double) + (size_t)(nfactors ? nfactors : 1) * sizeof(float) +
           2 * (size_t)(nchunks ? nchunks : 1) * sizeof(double) + (size_t)(count ? count : 1) * sizeof(AdafactorScalars) +
           (size_t)(T5_MAX(l1, (int64_t)1) + T5_MAX(l2, (int64_t)1)) * sizeof(double);
}

AdafactorPlan* adafactor_plan_create(const AdafactorTensor* tensors, int count) {
    return adafactor_plan_create_reduce(tensors, count, NULL);
}

AdafactorPlan* adafactor_plan_create_reduce(const AdafactorTensor* tensors, int count, const AdafactorReduce* red) {
    AdafactorPlan* plan = (AdafactorPlan*)calloc_check(1, sizeof(AdafactorPlan));
    plan->count = count;
    AdafDevTensor* ht = (AdafDevTensor*)calloc_check((size_t)(count ? count : 1), sizeof(AdafDevTensor));
    int64_t nchunks = 0, ncolunits = 0, colpart = 0, nfactors = 0, len1 = 0;
    int nfact = 0;
    for (int i = 0; i < count; i++) {
        const AdafactorTensor* t = &tensors[i];
        if (t->work && t->work_dtype == DT_F32)
            t5_die(T5_EXIT_FAILURE, "adafactor_plan_create: tensor %d: an fp32 working copy is the master itself", i);
        const AdafGeom g = adaf_geom(t, i);
        ht[i].t = *t;
        ht[i].t.count = g.c;
        ht[i].n = g.n;
        ht[i].first_chunk = (int)nchunks;
        ht[i].red1_off = red ? red->off1[i] : len1;
        ht[i].red2_off = red ? red->off2[i] : i;
        len1 += adaf_red1_len(t);
        if (red && (ht[i].red1_off < 0 || ht[i].red1_off + adaf_red1_len(t) > red->len1 || ht[i].red2_off < 0 ||
                    ht[i].red2_off >= red->len2))
            t5_die(T5_EXIT_FAILURE, "adafactor_plan_create: tensor %d's reduce slots (%lld, %lld) outside (%lld, %lld)",
                   i, (long long)ht[i].red1_off, (long long)ht[i].red2_off, (long long)red->len1, (long long)red->len2);
        if (g.n == 0) continue;
        ht[i].nchunks = (int)g.nchunks;
        if (t->factored) {
            ht[i].g0 = g.g0;
            ht[i].ngroups = g.ngroups;
            ht[i].colpart_off = colpart;
            colpart += (int64_t)g.ngroups * t->cols;
            ht[i].cf_off = nfactors;
            ht[i].rf_off = nfactors + t->cols;
            nfactors += t->cols + t->rows;
            ncolunits += (int64_t)g.ngroups * CEIL_DIV(t->cols, (int64_t)ADAF_COL_SLAB);
            nfact++;
        }
        nchunks += g.nchunks;
    }
    plan->len1 = red ? red->len1 : len1;
    plan->len2 = red ? red->len2 : count;
    if (nchunks > 2147483647 || ncolunits > 2147483647)
        t5_die(T5_EXIT_FAILURE, "adafactor_plan_create: %lld chunks / %lld column units exceed the grid limit",
               (long long)nchunks, (long long)ncolunits);
    AdafChunk* hc = (AdafChunk*)malloc_check((size_t)(nchunks ? nchunks : 1) * sizeof(AdafChunk));
    AdafColUnit* hu = (AdafColUnit*)malloc_check((size_t)(ncolunits ? ncolunits : 1) * sizeof(AdafColUnit));
    int* hf = (int*)malloc_check((size_t)(nfact ? nfact : 1) * sizeof(int));
    int64_t kc = 0, ku = 0;
    int kf = 0;
    for (int i = 0; i < count; i++) {
        const AdafactorTensor* t = &tensors[i];
        const AdafGeom g = adaf_geom(t, i);
        if (g.n == 0) continue;
        const int64_t e1 = g.f + g.c;
        if (t->factored) {
            for (int64_t r = g.ra; r <= g.rb; r += g.rpc)
                hc[kc++] = AdafChunk{i, T5_MAX(r * t->cols, g.f), T5_MIN(T5_MIN(r + g.rpc, g.rb + 1) * t->cols, e1)};
            for (int q = g.g0; q < g.g0 + g.ngroups; q++)
                for (int64_t c0 = 0; c0 < t->cols; c0 += ADAF_COL_SLAB) hu[ku++] = AdafColUnit{i, q, c0};
            hf[kf++] = i;
        } else {
            for (int64_t s = g.f; s < e1; s += ADAF_CHUNK) hc[kc++] = AdafChunk{i, s, T5_MIN(s + (int64_t)ADAF_CHUNK, e1)};
        }
    }
    plan->nchunks = (int)nchunks;
    plan->ncolunits = (int)ncolunits;
    plan->nfactored = nfact;
    CUDA_CHECK(cudaMalloc((void**)&plan->d_tensors, (size_t)(count ? count : 1) * sizeof(AdafDevTensor)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_chunks, (size_t)(nchunks ? nchunks : 1) * sizeof(AdafChunk)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_colunits, (size_t)(ncolunits ? ncolunits : 1) * sizeof(AdafColUnit)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_factored, (size_t)(nfact ? nfact : 1) * sizeof(int)));
    const size_t scratch = (size_t)(colpart ? colpart : 1) * sizeof(double) +
                           (size_t)(nfactors ? nfactors : 1) * sizeof(float) +
                           2 * (size_t)(nchunks ? nchunks : 1) * sizeof(double) +
                           (size_t)(count ? count : 1) * sizeof(AdafactorScalars) +
                           (size_t)(T5_MAX(plan->len1, (int64_t)1) + T5_MAX(plan->len2, (int64_t)1)) * sizeof(double);
    plan->scratch_bytes = scratch;
    if (scratch != adafactor_plan_scratch_bytes_for(tensors, count, red))
        t5_die(T5_EXIT_FAILURE, "internal: adafactor_plan_create's scratch (%zu bytes) is not adafactor_plan_scratch_bytes_for's",
               scratch);
    CUDA_CHECK(cudaMalloc((void**)&plan->d_colpart, (size_t)(colpart ? colpart : 1) * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_factors, (size_t)(nfactors ? nfactors : 1) * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_psum, (size_t)(nchunks ? nchunks : 1) * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_usum, (size_t)(nchunks ? nchunks : 1) * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_scalars, (size_t)(count ? count : 1) * sizeof(AdafactorScalars)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_red1, (size_t)T5_MAX(plan->len1, (int64_t)1) * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_red2, (size_t)T5_MAX(plan->len2, (int64_t)1) * sizeof(double)));
    CUDA_CHECK(cudaMemset(plan->d_scalars, 0, (size_t)(count ? count : 1) * sizeof(AdafactorScalars)));
    if (count) CUDA_CHECK(cudaMemcpy(plan->d_tensors, ht, (size_t)count * sizeof(AdafDevTensor), cudaMemcpyHostToDevice));
    if (nchunks) CUDA_CHECK(cudaMemcpy(plan->d_chunks, hc, (size_t)nchunks * sizeof(AdafChunk), cudaMemcpyHostToDevice));
    if (ncolunits)
        CUDA_CHECK(cudaMemcpy(plan->d_colunits, hu, (size_t)ncolunits * sizeof(AdafColUnit), cudaMemcpyHostToDevice));
    if (nfact) CUDA_CHECK(cudaMemcpy(plan->d_factored, hf, (size_t)nfact * sizeof(int), cudaMemcpyHostToDevice));
    free(ht);
    free(hc);
    free(hu);
    free(hf);
    return plan;
}

void adafactor_plan_free(AdafactorPlan* plan) {
    if (!plan) return;
    CUDA_CHECK(cudaFree(plan->d_tensors));
    CUDA_CHECK(cudaFree(plan->d_chunks));
    CUDA_CHECK(cudaFree(plan->d_colunits));
    CUDA_CHECK(cudaFree(plan->d_factored));
    CUDA_CHECK(cudaFree(plan->d_colpart));
    CUDA_CHECK(cudaFree(plan->d_factors));
    CUDA_CHECK(cudaFree(plan->d_psum));
    CUDA_CHECK(cudaFree(plan->d_usum));
    CUDA_CHECK(cudaFree(plan->d_scalars));
    CUDA_CHECK(cudaFree(plan->d_red1));
    CUDA_CHECK(cudaFree(plan->d_red2));
    free(plan);
}

size_t adafactor_plan_scratch_bytes(const AdafactorPlan* plan) { return plan ? plan->scratch_bytes : 0; }

const AdafactorScalars* adafactor_plan_scalars(const AdafactorPlan* plan) { return plan->d_scalars; }

double* adafactor_plan_reduce_buffer(const AdafactorPlan* plan, int which) {
    return which == 1 ? plan->d_red1 : plan->d_red2;
}

double adafactor_rel_step(const AdafactorStepArgs* a) {
    double rel = a->lr;
    if (a->relative_step) {
        const double min_step = a->warmup_init ? 1e-6 * (double)a->step : 1e-2;
        const double r = 1.0 / sqrt((double)a->step);
        rel = r < min_step ? r : min_step;  // Python min(min_step, r)
    }
    return rel;
}

static AdafConsts adaf_consts(const AdafactorStepArgs* a) {
    if (a->step < 1) t5_die(T5_EXIT_FAILURE, "adafactor_step: step %lld (HF's state step starts at 1)", (long long)a->step);
    const double b2t = 1.0 - pow((double)a->step, a->decay_rate);
    AdafConsts k;
    k.eps1 = (float)a->eps1;
    k.b2 = (float)b2t;
    k.omb2 = (float)(1.0 - b2t);
    k.has_beta1 = a->has_beta1;
    k.b1 = (float)a->beta1;
    k.omb1 = (float)(1.0 - a->beta1);
    k.scale_parameter = a->scale_parameter;
    k.rel = adafactor_rel_step(a);
    k.eps2 = a->eps2;
    k.eps2_f = (float)a->eps2;
    k.clip = (float)a->clip_threshold;
    return k;
}

void adafactor_step_begin(const AdafactorPlan* plan, const AdafactorStepArgs* a, const float* d_grad_scale,
                          const int* d_skip, cudaStream_t stream) {
    const AdafConsts k = adaf_consts(a);
    // every slot this rank does not write (rows outside its slice, tensors of other ranks) must add 0
    CUDA_CHECK(cudaMemsetAsync(plan->d_red1, 0, (size_t)T5_MAX(plan->len1, (int64_t)1) * sizeof(double), stream));
    CUDA_CHECK(cudaMemsetAsync(plan->d_red2, 0, (size_t)T5_MAX(plan->len2, (int64_t)1) * sizeof(double), stream));
    if (plan->nchunks == 0) return;
    adafactor_rowstats_kernel1<<<(unsigned)plan->nchunks, ADAF_BLOCK, 0, stream>>>(
        plan->d_tensors, plan->d_chunks, k, d_grad_scale, d_skip, plan->d_psum, plan->d_usum, plan->d_red1);
    CUDA_LAUNCH_CHECK();
    if (plan->ncolunits) {
        adafactor_colstats_kernel1<<<(unsigned)plan->ncolunits, ADAF_BLOCK, 0, stream>>>(
            plan->d_tensors, plan->d_colunits, k, d_grad_scale, d_skip, plan->d_colpart);
        CUDA_LAUNCH_CHECK();
        adafactor_colsum_kernel1<<<(unsigned)plan->nfactored, ADAF_BLOCK, 0, stream>>>(
            plan->d_tensors, plan->d_factored, d_skip, plan->d_colpart, plan->d_red1);
        CUDA_LAUNCH_CHECK();
    }
    adafactor_tsum_kernel1<<<(unsigned)CEIL_DIV(plan->count, 128), 128, 0, stream>>>(
        plan->d_tensors, plan->count, 1, d_skip, plan->d_psum, plan->d_usum, plan->d_red1, plan->d_red2);
    CUDA_LAUNCH_CHECK();
}

void adafactor_step_middle(const AdafactorPlan* plan, const AdafactorStepArgs* a, const float* d_grad_scale,
                           const int* d_skip, cudaStream_t stream) {
    const AdafConsts k = adaf_consts(a);
    if (plan->nchunks == 0 || plan->nfactored == 0) return;
    adafactor_factors_kernel1<<<(unsigned)plan->nfactored, ADAF_BLOCK, 0, stream>>>(
        plan->d_tensors, plan->d_factored, k, d_skip, plan->d_red1, plan->d_factors);
    CUDA_LAUNCH_CHECK();
    adafactor_updsumsq_kernel1<<<(unsigned)plan->nchunks, ADAF_BLOCK, 0, stream>>>(
        plan->d_tensors, plan->d_chunks, d_grad_scale, d_skip, plan->d_factors, plan->d_usum);
    CUDA_LAUNCH_CHECK();
    adafactor_tsum_kernel1<<<(unsigned)CEIL_DIV(plan->count, 128), 128, 0, stream>>>(
        plan->d_tensors, plan->count, 2, d_skip, plan->d_psum, plan->d_usum, plan->d_red1, plan->d_red2);
    CUDA_LAUNCH_CHECK();
}

void adafactor_step_end(const AdafactorPlan* plan, const AdafactorStepArgs* a, const float* d_grad_scale,
                        const int* d_skip, cudaStream_t stream) {
    const AdafConsts k = adaf_consts(a);
    if (plan->nchunks == 0) return;
    adafactor_scalars_kernel1<<<(unsigned)CEIL_DIV(plan->count, 128), 128, 0, stream>>>(
        plan->d_tensors, plan->count, k, d_skip, plan->d_red1, plan->d_red2, plan->d_scalars);
    CUDA_LAUNCH_CHECK();
    adafactor_apply_kernel1<<<(unsigned)plan->nchunks, ADAF_BLOCK, 0, stream>>>(
        plan->d_tensors, plan->d_chunks, k, d_grad_scale, d_skip, plan->d_factors, plan->d_scalars);
    CUDA_LAUNCH_CHECK();
}

void adafactor_step(const AdafactorPlan* plan, const AdafactorStepArgs* a, const float* d_grad_scale,
                    const int* d_skip, cudaStream_t stream) {
    if (plan->nchunks == 0) return;
    adafactor_step_begin(plan, a, d_grad_scale, d_skip, stream);
    adafactor_step_middle(plan, a, d_grad_scale, d_skip, stream);
    adafactor_step_end(plan, a, d_grad_scale, d_skip, stream);
}
