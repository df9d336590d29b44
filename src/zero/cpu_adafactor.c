/*
 * cpu_adafactor.c: transformers' Adafactor step on the CPU (see cpu_adafactor.h for the arithmetic).
 *
 * Passes over one tensor (fixed partition into blocks, OpenMP across blocks):
 *   factored:   1. sum p^2; per row sum of g^2+eps1; per block column partial sums of g^2+eps1
 *               (then: column sums = partials added in block order; row/col EMAs; row/col factors)
 *               2. sum u^2 with u = (r_i c_j) g_ij          (u recomputed, not stored: no n-sized scratch)
 *               3. apply: u/d*lr, exp_avg, weight decay, p -= u, working copy
 *   unfactored: 1. sum p^2; v = EMA(g^2+eps1); sum u^2 with u = rsqrt(v) g
 *               2. apply (as 3.)
 * Sums are accumulated in double (4 fixed lanes within a row/block, lanes and blocks combined in a fixed
 * order), so nothing depends on the number of threads. fmaf() is used exactly where torch's vectorized
 * kernels use an FMA (add_ with alpha); everything else is one rounded fp32 operation, so contraction of
 * a*b+c into an FMA must stay off in this file (the pragma below; the default -O2 x86-64 build has no FMA
 * instruction anyway, and fmaf is then glibc's correctly rounded fmaf).
 */
#include "cpu_adafactor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "cpu_adam.h"

#pragma GCC optimize("fp-contract=off")

// Elements per block (a block of a 2-D tensor is a whole number of rows, at least one row).
#define ADA_BLOCK ((size_t)1 << 16)
// At most this many row blocks per matrix: bounds the column partial sums to ADA_MAX_BLOCKS * cols doubles.
#define ADA_MAX_BLOCKS ((size_t)64)

void cpu_adafactor_default_opts(CpuAdafactorOpts* o) {
    memset(o, 0, sizeof *o);
    o->has_lr = false;
    o->lr = 0.0;
    o->eps1 = 1e-30;
    o->eps2 = 1e-3;
    o->clip_threshold = 1.0;
    o->decay_rate = -0.8;
    o->has_beta1 = false;
    o->beta1 = 0.0;
    o->weight_decay = 0.0;
    o->scale_parameter = true;
    o->relative_step = true;
    o->warmup_init = false;
}

int cpu_adafactor_check_opts(const CpuAdafactorOpts* o, char* err, size_t errlen) {
    const char* msg = NULL;
    if (o->has_lr && o->relative_step) msg = "Cannot combine manual `lr` and `relative_step=True` options";
    else if (o->warmup_init && !o->relative_step) msg = "`warmup_init=True` requires `relative_step=True`";
    else if (!o->has_lr && !o->relative_step) msg = "Adafactor: `relative_step=False` needs an external `lr`";
    if (!msg) return 0;
    if (err && errlen) snprintf(err, errlen, "%s", msg);
    return -1;
}

size_t cpu_adafactor_state_floats(size_t rows, size_t cols, bool factored, bool has_beta1) {
    size_t n = rows * cols;
    return (factored ? rows + cols : n) + (has_beta1 ? n : 0);
}

CpuAdafactorState cpu_adafactor_state_at(float* base, size_t rows, size_t cols, bool factored, bool has_beta1) {
    CpuAdafactorState s = {.rows = rows, .cols = cols, .factored = factored};
    if (factored) {
        s.exp_avg_sq_row = base;
        s.exp_avg_sq_col = base + rows;
        base += rows + cols;
    } else {
        s.exp_avg_sq = base;
        base += rows * cols;
    }
    if (has_beta1) s.exp_avg = base;
    return s;
}

// HF _get_lr. lr_is_f32: the result is an fp32 tensor (RMS * rel); else a Python float (double).
static double hf_lr(const CpuAdafactorOpts* o, int64_t step, float param_rms, bool* lr_is_f32) {
    double rel = o->lr;
    if (o->relative_step) {
        double min_step = o->warmup_init ? 1e-6 * (double)step : 1e-2;
        double r = 1.0 / sqrt((double)step);
        rel = r < min_step ? r : min_step;  // Python min(min_step, r): first of equals
    }
    *lr_is_f32 = false;
    if (!o->scale_parameter) return rel;  // param_scale = 1.0: 1.0 * rel
    // max(eps2, RMS): the tensor wins when RMS > eps2 (compared in fp32)
    if (param_rms > (float)o->eps2) {
        *lr_is_f32 = true;
        return (double)(param_rms * (float)rel);
    }
    return o->eps2 * rel;
}

float cpu_adafactor_lr(const CpuAdafactorOpts* o, int64_t step, float param_rms) {
    bool f;
    return (float)hf_lr(o, step, param_rms, &f);
}

// ---------------------------------------------------------------------------------------------

typedef struct {
    const CpuAdafactorOpts* o;
    float* p;            // the master of the slice (element first of the tensor at p[0])
    const void* g;       // the gradient, indexed as p
    DType gdt;
    float gscale;
    void* w;             // the 16-bit copy, indexed as p
    DType wdt;
    size_t rows, cols, n;  // the whole tensor (a vector: 1, n); unfactored blocks run over n = the slice's length
    size_t nrms;         // elements of the whole tensor (RMS of the parameter and of the update)
    size_t first, count; // the slice: elements [first, first + count) of the tensor (whole: 0, rows * cols)
    size_t ra, nr;       // factored: the rows the slice touches, [ra, ra + nr)
    size_t rpb, nblk;    // rows per block, blocks (factored); elements per block, blocks (unfactored)
    float eps1, b2, omb2;
    // apply
    float div;   // clip divisor (1: no division)
    float lr;    // fp32 lr
    bool beta1;
    float b1, omb1;
    bool wd;
    float wd_alpha;  // -wd*lr as fp32
} AdaArgs;

static inline float load_g(const AdaArgs* A, size_t i) {
    float x;
    switch (A->gdt) {
        case DT_F16: x = cpu_adam_f16_to_f32(((const uint16_t*)A->g)[i]); break;
        case DT_BF16: x = cpu_adam_bf16_to_f32(((const uint16_t*)A->g)[i]); break;
        default: x = ((const float*)A->g)[i]; break;
    }
    return x * A->gscale;
}

// Sum of squares of x[0..n) in double, 4 fixed lanes combined as (l0 + l1) + (l2 + l3).
static double sumsq_f32(const float* x, size_t n) {
    double l[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) l[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++) l[i & 3] += (double)x[i] * (double)x[i];
    return (l[0] + l[1]) + (l[2] + l[3]);
}

// fp32 result of a double sum, then HF's rms: fp32 sqrt of the sum of squares / fp32(sqrt(numel)).
static float rms_from_sumsq(double s, size_t n) { return sqrtf((float)s) / (float)sqrt((double)n); }

// The per-element tail shared by both layouts: u (the unclipped update) -> new p (and m, work).
static inline void apply_one(const AdaArgs* A, float* m, size_t i, float u) {
    if (A->div != 1.0f) u = u / A->div;
    u = u * A->lr;
    if (A->beta1) {
        float mm = fmaf(u, A->omb1, m[i] * A->b1);
        m[i] = mm;
        u = mm;
    }
    float p = A->p[i];
    if (A->wd) p = fmaf(p, A->wd_alpha, p);
    p = p - u;
    A->p[i] = p;
    if (A->w) {
        if (A->wdt == DT_F16) ((uint16_t*)A->w)[i] = cpu_adam_f32_to_f16(p);
        else ((uint16_t*)A->w)[i] = cpu_adam_f32_to_bf16(p);
    }
}

// ---------------------------------------------------------------------------------------------
// factored (2-D): blocks of whole rows of the slice; a slice's first and last rows may be partial

// the columns [*j0, *j1) of row r inside the slice, and the slice index of (r, 0) as an offset: (r, j) is at
// r * cols + j - first
static inline void row_span(const AdaArgs* A, size_t r, size_t* j0, size_t* j1) {
    const size_t b = r * A->cols, e1 = A->first + A->count;
    *j0 = A->first > b ? A->first - b : 0;
    *j1 = e1 < b + A->cols ? e1 - b : A->cols;
}

static inline void block_rows(const AdaArgs* A, size_t b, size_t* r0, size_t* r1) {
    *r0 = A->ra + b * A->rpb;
    *r1 = b * A->rpb + A->rpb < A->nr ? *r0 + A->rpb : A->ra + A->nr;
}

static void fact_stats_block(const AdaArgs* A, size_t b, double* rowsum, double* colpart, double* psum) {
    size_t r0, r1;
    block_rows(A, b, &r0, &r1);
    double* cp = colpart + b * A->cols;
    for (size_t j = 0; j < A->cols; j++) cp[j] = 0.0;
    double ps = 0.0;
    for (size_t r = r0; r < r1; r++) {
        size_t j0, j1;
        row_span(A, r, &j0, &j1);
        const size_t base = r * A->cols - A->first;  // unsigned wrap-around: base + j is exact for j >= j0
        double l[4] = {0, 0, 0, 0};
        for (size_t j = j0; j < j1; j++) {
            float g = load_g(A, base + j);
            float sq = g * g;
            float uu = sq + A->eps1;
            l[j & 3] += (double)uu;
            cp[j] += (double)uu;
        }
        rowsum[r] = (l[0] + l[1]) + (l[2] + l[3]);
        ps += sumsq_f32(A->p + base + j0, j1 - j0);
    }
    psum[b] = ps;
}

static double fact_update_sumsq_block(const AdaArgs* A, size_t b, const float* rf, const float* cf) {
    size_t r0, r1;
    block_rows(A, b, &r0, &r1);
    double s = 0.0;
    for (size_t r = r0; r < r1; r++) {
        size_t j0, j1;
        row_span(A, r, &j0, &j1);
        const size_t base = r * A->cols - A->first;
        const float ri = rf[r];
        double l[4] = {0, 0, 0, 0};
        for (size_t j = j0; j < j1; j++) {
            float a = ri * cf[j];
            float u = a * load_g(A, base + j);
            l[j & 3] += (double)u * (double)u;
        }
        s += (l[0] + l[1]) + (l[2] + l[3]);
    }
    return s;
}

static void fact_apply_block(const AdaArgs* A, size_t b, const float* rf, const float* cf, float* m) {
    size_t r0, r1;
    block_rows(A, b, &r0, &r1);
    for (size_t r = r0; r < r1; r++) {
        size_t j0, j1;
        row_span(A, r, &j0, &j1);
        const size_t base = r * A->cols - A->first;
        const float ri = rf[r];
        for (size_t j = j0; j < j1; j++) {
            float a = ri * cf[j];
            float u = a * load_g(A, base + j);
            apply_one(A, m, base + j, u);
        }
    }
}

// column sums: the blocks' partials added in block order
static void fact_colsums(const AdaArgs* A, const double* colpart, double* colsum) {
#pragma omp parallel for schedule(static) if (A->cols >= 4096)
    for (size_t j = 0; j < A->cols; j++) {
        double cs = 0.0;
        for (size_t b = 0; b < A->nblk; b++) cs += colpart[b * A->cols + j];
        colsum[j] = cs;
    }
}

// From the whole matrix's row and column sums of g^2+eps1: the row and column EMAs (every row and column) and the
// factors rf = rsqrt(row / mean(row)), cf = rsqrt(col)
static void fact_ema_factors(const AdaArgs* A, float* R, float* C, const double* rowsum, const double* colsum,
                             float* rf, float* cf) {
    // row EMA: mean over the last dim = fp32 sum / cols; fma(mean, 1-b2t, row*b2t)
    const float fcols = (float)A->cols, frows = (float)A->rows;
    for (size_t r = 0; r < A->rows; r++) {
        float mean = (float)rowsum[r] / fcols;
        R[r] = fmaf(mean, A->omb2, R[r] * A->b2);
    }
#pragma omp parallel for schedule(static) if (A->cols >= 4096)
    for (size_t j = 0; j < A->cols; j++) {
        float mean = (float)colsum[j] / frows;
        C[j] = fmaf(mean, A->omb2, C[j] * A->b2);
        cf[j] = 1.0f / sqrtf(C[j]);
    }
    // r_i = rsqrt(row_i / mean(row))
    double rs[4] = {0, 0, 0, 0};
    for (size_t r = 0; r < A->rows; r++) rs[r & 3] += (double)R[r];
    const float rmean = (float)((rs[0] + rs[1]) + (rs[2] + rs[3])) / frows;
    for (size_t r = 0; r < A->rows; r++) rf[r] = 1.0f / sqrtf(R[r] / rmean);
}

// ---------------------------------------------------------------------------------------------
// unfactored (1-D): blocks of the slice's n elements

static void unf_stats_block(const AdaArgs* A, size_t b, float* v, double* psum, double* usum) {
    size_t i0 = b * ADA_BLOCK, i1 = i0 + ADA_BLOCK < A->n ? i0 + ADA_BLOCK : A->n;
    double lu[4] = {0, 0, 0, 0};
    for (size_t i = i0; i < i1; i++) {
        float g = load_g(A, i);
        float sq = g * g;
        float uu = sq + A->eps1;
        float vv = fmaf(uu, A->omb2, v[i] * A->b2);
        v[i] = vv;
        float u = (1.0f / sqrtf(vv)) * g;
        lu[(i - i0) & 3] += (double)u * (double)u;
    }
    usum[b] = (lu[0] + lu[1]) + (lu[2] + lu[3]);
    psum[b] = sumsq_f32(A->p + i0, i1 - i0);
}

static void unf_apply_block(const AdaArgs* A, size_t b, const float* v, float* m) {
    size_t i0 = b * ADA_BLOCK, i1 = i0 + ADA_BLOCK < A->n ? i0 + ADA_BLOCK : A->n;
    for (size_t i = i0; i < i1; i++) {
        float u = (1.0f / sqrtf(v[i])) * load_g(A, i);
        apply_one(A, m, i, u);
    }
}

// ---------------------------------------------------------------------------------------------

void cpu_adafactor_scratch_free(CpuAdafactorScratch* s) {
    free(s->p);
    s->p = NULL;
    s->bytes = 0;
}

// at least `bytes` of scratch in s (8-byte aligned: malloc's)
static void* scratch_get(CpuAdafactorScratch* s, size_t bytes) {
    if (s->bytes < bytes) {
        free(s->p);
        s->p = malloc_check(bytes);
        s->bytes = bytes;
    }
    return s->p;
}

// Sets the fp32 lr, clip divisor and apply constants once the param RMS and the update's sum of squares
// are known.
static void finish_consts(AdaArgs* A, const CpuAdafactorOpts* o, int64_t step, double psum, double usum,
                          CpuAdafactorStepInfo* info) {
    float prms = rms_from_sumsq(psum, A->nrms);
    bool lr_f32;
    double lr = hf_lr(o, step, prms, &lr_f32);
    A->lr = (float)lr;
    float urms = rms_from_sumsq(usum, A->nrms);
    float d = urms / (float)o->clip_threshold;
    if (d < 1.0f) d = 1.0f;  // clamp_(min=1.0); NaN stays NaN
    A->div = d;
    A->beta1 = o->has_beta1;
    A->b1 = (float)o->beta1;
    A->omb1 = (float)(1.0 - o->beta1);
    A->wd = o->weight_decay != 0.0;
    // -wd * lr: a Python float times the fp32 lr tensor, or a Python product of floats
    A->wd_alpha = lr_f32 ? (float)(-o->weight_decay) * A->lr : (float)(-o->weight_decay * lr);
    if (info) {
        info->param_rms = prms;
        info->lr = A->lr;
        info->update_rms = urms;
        info->clip_div = d;
    }
}

// The arguments of one tensor's step over elements [first, first + count) of its rows x cols (whole: 0, rows*cols):
// the blocks (factored: row blocks of >= ADA_BLOCK elements and >= 1 row over the rows the slice touches, at most
// ADA_MAX_BLOCKS of them; unfactored: ADA_BLOCK elements of the slice).
static AdaArgs ada_args(const CpuAdafactorOpts* o, int64_t step, size_t rows, size_t cols, bool factored,
                        size_t first, size_t count, float* master, const void* grad, DType grad_dtype,
                        float grad_scale, void* work, DType work_dtype) {
    const double b2t = 1.0 - pow((double)step, o->decay_rate);
    AdaArgs A = {
        .o = o, .p = master, .g = grad, .gdt = grad_dtype, .gscale = grad_scale,
        .w = (work && work_dtype != DT_F32) ? work : NULL, .wdt = work_dtype,
        .rows = rows, .cols = cols, .n = factored ? rows * cols : count, .nrms = rows * cols,
        .first = first, .count = count,
        .eps1 = (float)o->eps1, .b2 = (float)b2t, .omb2 = (float)(1.0 - b2t),
    };
    if (!factored) {
        A.nblk = (count + ADA_BLOCK - 1) / ADA_BLOCK;
        return A;
    }
    A.ra = first / cols;
    A.nr = (first + count - 1) / cols - A.ra + 1;
    size_t rpb = ADA_BLOCK / cols;
    if (rpb < 1) rpb = 1;
    if ((A.nr + rpb - 1) / rpb > ADA_MAX_BLOCKS) rpb = (A.nr + ADA_MAX_BLOCKS - 1) / ADA_MAX_BLOCKS;
    A.rpb = rpb;
    A.nblk = (A.nr + rpb - 1) / rpb;
    return A;
}

int cpu_adafactor_step(const CpuAdafactorOpts* o, int64_t step, CpuAdafactorState* s, float* master,
                       const void* grad, DType grad_dtype, float grad_scale, void* work, DType work_dtype,
                       CpuAdafactorStepInfo* info, CpuAdafactorScratch* scratch) {
    const size_t rows = s->rows, cols = s->cols, n = rows * cols;
    if (n == 0 || step < 1) return -1;
    CpuAdafactorScratch own = {0};
    CpuAdafactorScratch* sc = scratch ? scratch : &own;
    AdaArgs A = ada_args(o, step, rows, cols, s->factored, 0, n, master, grad, grad_dtype, grad_scale, work,
                         work_dtype);
    float* m = o->has_beta1 ? s->exp_avg : NULL;
    const size_t nblk = A.nblk;

    if (!s->factored) {
        float* v = s->exp_avg_sq;
        double* psum = scratch_get(sc, 2 * nblk * sizeof(double));
        double* usum = psum + nblk;
#pragma omp parallel for schedule(static) if (nblk > 1)
        for (size_t b = 0; b < nblk; b++) unf_stats_block(&A, b, v, psum, usum);
        double ps = 0.0, us = 0.0;
        for (size_t b = 0; b < nblk; b++) {
            ps += psum[b];
            us += usum[b];
        }
        finish_consts(&A, o, step, ps, us, info);
#pragma omp parallel for schedule(static) if (nblk > 1)
        for (size_t b = 0; b < nblk; b++) unf_apply_block(&A, b, v, m);
        cpu_adafactor_scratch_free(&own);
        return 0;
    }

    // doubles first (rowsum, colpart, bsum, colsum), then the floats (rf, cf)
    double* rowsum = scratch_get(sc, (rows + nblk * cols + nblk + cols) * sizeof(double) + (rows + cols) * sizeof(float));
    double* colpart = rowsum + rows;
    double* bsum = colpart + nblk * cols;
    double* colsum = bsum + nblk;
    float* rf = (float*)(colsum + cols);
    float* cf = rf + rows;

#pragma omp parallel for schedule(static) if (nblk > 1)
    for (size_t b = 0; b < nblk; b++) fact_stats_block(&A, b, rowsum, colpart, bsum);
    double ps = 0.0;
    for (size_t b = 0; b < nblk; b++) ps += bsum[b];
    fact_colsums(&A, colpart, colsum);
    fact_ema_factors(&A, s->exp_avg_sq_row, s->exp_avg_sq_col, rowsum, colsum, rf, cf);

#pragma omp parallel for schedule(static) if (nblk > 1)
    for (size_t b = 0; b < nblk; b++) bsum[b] = fact_update_sumsq_block(&A, b, rf, cf);
    double us = 0.0;
    for (size_t b = 0; b < nblk; b++) us += bsum[b];
    finish_consts(&A, o, step, ps, us, info);

#pragma omp parallel for schedule(static) if (nblk > 1)
    for (size_t b = 0; b < nblk; b++) fact_apply_block(&A, b, rf, cf, m);

    cpu_adafactor_scratch_free(&own);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// a slice of a tensor (several ZeRO ranks)

size_t cpu_adafactor_slice_red1_len(const CpuAdafactorSlice* s) { return s->factored ? s->rows + s->cols + 1 : 1; }

static AdaArgs slice_args(const CpuAdafactorOpts* o, int64_t step, const CpuAdafactorSlice* s) {
    return ada_args(o, step, s->rows, s->cols, s->factored, s->first, s->count, s->master, s->grad, s->grad_dtype,
                    s->grad_scale, s->work, s->work_dtype);
}

void cpu_adafactor_slice_sums(const CpuAdafactorOpts* o, int64_t step, const CpuAdafactorSlice* s, double* red1,
                              double* red2, CpuAdafactorScratch* scratch) {
    CpuAdafactorScratch own = {0};
    CpuAdafactorScratch* sc = scratch ? scratch : &own;
    AdaArgs A = slice_args(o, step, s);
    const size_t nblk = A.nblk;
    if (!s->factored) {
        double* psum = scratch_get(sc, 2 * T5_MAX(nblk, (size_t)1) * sizeof(double));
        double* usum = psum + nblk;
#pragma omp parallel for schedule(static) if (nblk > 1)
        for (size_t b = 0; b < nblk; b++) unf_stats_block(&A, b, s->state.exp_avg_sq, psum, usum);
        double ps = 0.0, us = 0.0;
        for (size_t b = 0; b < nblk; b++) {
            ps += psum[b];
            us += usum[b];
        }
        red1[0] = ps;
        *red2 = us;
        cpu_adafactor_scratch_free(&own);
        return;
    }
    const size_t rows = s->rows, cols = s->cols;
    double* colpart = scratch_get(sc, (nblk * cols + nblk) * sizeof(double));
    double* bsum = colpart + nblk * cols;
    for (size_t k = 0; k < rows + cols + 1; k++) red1[k] = 0.0;  // rows outside the slice add nothing
#pragma omp parallel for schedule(static) if (nblk > 1)
    for (size_t b = 0; b < nblk; b++) fact_stats_block(&A, b, red1, colpart, bsum);
    fact_colsums(&A, colpart, red1 + rows);
    double ps = 0.0;
    for (size_t b = 0; b < nblk; b++) ps += bsum[b];
    red1[rows + cols] = ps;
    cpu_adafactor_scratch_free(&own);
}

void cpu_adafactor_slice_factors(const CpuAdafactorOpts* o, int64_t step, const CpuAdafactorSlice* s,
                                 const double* red1, float* factors, double* red2) {
    if (!s->factored) return;  // a vector's sums are all in phase 1
    AdaArgs A = slice_args(o, step, s);
    float* rf = factors;
    float* cf = factors + s->rows;
    fact_ema_factors(&A, s->state.exp_avg_sq_row, s->state.exp_avg_sq_col, red1, red1 + s->rows, rf, cf);
    double* bsum = malloc_check(T5_MAX(A.nblk, (size_t)1) * sizeof(double));
#pragma omp parallel for schedule(static) if (A.nblk > 1)
    for (size_t b = 0; b < A.nblk; b++) bsum[b] = fact_update_sumsq_block(&A, b, rf, cf);
    double us = 0.0;
    for (size_t b = 0; b < A.nblk; b++) us += bsum[b];
    free(bsum);
    *red2 = us;
}

void cpu_adafactor_slice_apply(const CpuAdafactorOpts* o, int64_t step, const CpuAdafactorSlice* s, double psum,
                               double usum, const float* factors, CpuAdafactorStepInfo* info) {
    AdaArgs A = slice_args(o, step, s);
    finish_consts(&A, o, step, psum, usum, info);
    float* m = o->has_beta1 ? s->state.exp_avg : NULL;
    if (!s->factored) {
#pragma omp parallel for schedule(static) if (A.nblk > 1)
        for (size_t b = 0; b < A.nblk; b++) unf_apply_block(&A, b, s->state.exp_avg_sq, m);
        return;
    }
#pragma omp parallel for schedule(static) if (A.nblk > 1)
    for (size_t b = 0; b < A.nblk; b++) fact_apply_block(&A, b, factors, factors + s->rows, m);
}
