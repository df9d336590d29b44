/*
 * test_gpu_adafactor.c: cuda/adafactor.cu against the CPU reference src/zero/cpu_adafactor.c on the same inputs.
 *
 * Both do the same IEEE fp32 operations; both accumulate their sums (p^2, u^2, row/column sums of g^2+eps1,
 * the sum of the row statistic) in fp64 and round once, in different orders, so an fp32 sum can differ by the
 * rounding of a slightly different fp64 value (expected: almost always bit-identical). Tolerance (fp32): every
 * element of master, exp_avg_sq_row / col / exp_avg_sq, exp_avg within 1e-6 relative to the largest magnitude
 * of that array (master and exp_avg cancel in p - u and in the EMA, so an element-relative bound would be
 * meaningless near zero), the per-tensor lr / RMS / update RMS / divisor within 1e-6 relative, the 16-bit
 * working copies within 1 unit of the last place. Worst errors are printed per case.
 *
 * One plan of 9 tensors: matrices square, tall (> 1024 rows: several column groups), narrow (8 columns: many
 * rows per chunk), wide (70000 columns: one 8-row chunk is 560000 elements), 1 x n, a matrix stepped
 * unfactored, vectors of 1 and 40000 (several chunks), an empty tensor; fp32 / fp16 / bf16 gradients, fp16 /
 * bf16 / no working copy, per-tensor weight decay. Cases: HF Trainer's options (relative_step and
 * scale_parameter off, external lr), relative_step + scale_parameter + beta1 0.9, warmup_init, clipping (a
 * gradient jump, clip_threshold 1) with beta1 and weight decay. 4 steps each with a changing device grad scale
 * (and NULL = 1); then a step with the skip flag set must leave every buffer untouched.
 *
 * test_split_across_ranks (several ZeRO ranks, simulated on one GPU): the same tensors cut into W = 2, 3, 5 slices at
 * odd element boundaries (inside rows), each "rank" a plan over its slices (adafactor_plan_create_reduce, the
 * statistics replicated per rank), stepped in the three phases with the reduce buffers added over the ranks in rank
 * order on the host between them (what the engine's two all-reduces do), against the whole tensors stepped by one
 * plan: masters, replicated row / column statistics (every rank's copy), v, exp_avg, 16-bit copies and the per-tensor
 * scalars within 1e-6 (the fp64 sums are split differently: at most a rounding of an fp32 sum).
 */
#include "t5test.h"

#include <math.h>

#include "../cuda/adafactor.cuh"
#include "../src/base/check.h"
#include "../src/zero/cpu_adafactor.h"
#include "../src/zero/cpu_adam.h"
#include "test_gpu_util.h"

enum { NT = 9 };
static const int64_t ROWS[NT] = {64, 1500, 2100, 8, 1, 30, 1, 1, 0};
static const int64_t COLS[NT] = {64, 300, 8, 70000, 777, 20, 1, 40000, 5};
static const bool FACT[NT] = {true, true, true, true, true, false, false, false, true};
static const DType GDT[NT] = {DT_F32, DT_BF16, DT_F16, DT_F32, DT_BF16, DT_F32, DT_F16, DT_F32, DT_F32};
static const int WORK[NT] = {DT_F16, -1, DT_BF16, DT_BF16, -1, DT_F16, -1, DT_BF16, -1};  // -1: none
static const double WD[NT] = {0.01, 0.0, 0.01, 0.1, 0.0, 0.01, 0.0, 0.01, 0.0};

typedef struct {
    const char* name;
    CpuAdafactorOpts o;
    float grad_jump;  // the gradient of step 3 is multiplied by this (clipping)
} Case;

typedef struct {
    size_t n, nrow, ncol, nv;
    float *p, *row, *col, *v, *m;  // CPU reference state
    void* g;
    uint16_t* w;
    float *dp, *drow, *dcol, *dv, *dm;
    void *dg, *dw;
} Buf;

static float max_abs(const float* x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

// worst |gpu - cpu| / max|cpu| over the array; fails above tol
static double cmp_array(const char* what, const Case* c, int step, int k, const float* dev, const float* ref, size_t n,
                        double tol) {
    if (!n) return 0;
    float* h = malloc(n * sizeof(float));
    CUDA_CHECK(cudaMemcpy(h, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    const double scale = fmax((double)max_abs(ref, n), 1e-30);
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(h[i])) fail_msg("%s step %d tensor %d %s[%zu] = %g (not finite)", c->name, step, k, what, i, h[i]);
        double e = fabs((double)h[i] - (double)ref[i]) / scale;
        if (e > worst) worst = e, wi = i;
    }
    if (worst > tol)
        fail_msg("%s step %d tensor %d %s[%zu]: GPU %.9g CPU %.9g (err %.3e of max %.3e > %.0e)", c->name, step, k, what,
                 wi, h[wi], ref[wi], worst, scale, tol);
    free(h);
    return worst;
}

static double ulp16(uint16_t a, uint16_t b) { return fabs((double)(int16_t)a - (double)(int16_t)b); }

static void run_case(const Case* c) {
    const double TOL = 1e-6;
    TRng rng = {0x5EEDull + (uint64_t)c->grad_jump};
    Buf b[NT];
    AdafactorTensor list[NT];
    const bool beta1 = c->o.has_beta1;
    for (int k = 0; k < NT; k++) {
        Buf* B = &b[k];
        memset(B, 0, sizeof *B);
        B->n = (size_t)(ROWS[k] * COLS[k]);
        B->nrow = FACT[k] ? (size_t)ROWS[k] : 0;
        B->ncol = FACT[k] ? (size_t)COLS[k] : 0;
        B->nv = FACT[k] ? 0 : B->n;
        const size_t n = B->n, gs = dtype_size(GDT[k]);
        B->p = malloc(n * 4 + 4), B->m = calloc(n + 1, 4), B->v = calloc(B->nv + 1, 4);
        B->row = calloc(B->nrow + 1, 4), B->col = calloc(B->ncol + 1, 4);
        B->g = malloc(n * gs + 4), B->w = malloc(n * 2 + 4);
        for (size_t i = 0; i < n; i++) B->p[i] = trng_normal(&rng) * (k == 4 ? 1e-4f : 0.05f);  // k 4: RMS < eps2
        CUDA_CHECK(cudaMalloc((void**)&B->dp, n * 4 + 4));
        CUDA_CHECK(cudaMalloc((void**)&B->dm, n * 4 + 4));
        CUDA_CHECK(cudaMalloc((void**)&B->dv, B->nv * 4 + 4));
        CUDA_CHECK(cudaMalloc((void**)&B->drow, B->nrow * 4 + 4));
        CUDA_CHECK(cudaMalloc((void**)&B->dcol, B->ncol * 4 + 4));
        CUDA_CHECK(cudaMalloc(&B->dg, n * gs + 4));
        CUDA_CHECK(cudaMalloc(&B->dw, n * 2 + 4));
        CUDA_CHECK(cudaMemcpy(B->dp, B->p, n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(B->dm, 0, n * 4 + 4));
        CUDA_CHECK(cudaMemset(B->dv, 0, B->nv * 4 + 4));
        CUDA_CHECK(cudaMemset(B->drow, 0, B->nrow * 4 + 4));
        CUDA_CHECK(cudaMemset(B->dcol, 0, B->ncol * 4 + 4));
        list[k] = (AdafactorTensor){.master = B->dp, .grad = B->dg, .work = WORK[k] < 0 ? NULL : B->dw,
                                    .exp_avg_sq_row = B->drow, .exp_avg_sq_col = B->dcol, .exp_avg_sq = B->dv,
                                    .exp_avg = beta1 ? B->dm : NULL, .rows = FACT[k] ? ROWS[k] : 1,
                                    .cols = FACT[k] ? COLS[k] : ROWS[k] * COLS[k], .factored = FACT[k],
                                    .grad_dtype = GDT[k], .work_dtype = WORK[k] < 0 ? DT_F16 : (DType)WORK[k],
                                    .weight_decay = WD[k]};
    }
    AdafactorPlan* plan = adafactor_plan_create(list, NT);
    float* d_scale;
    int* d_skip;
    CUDA_CHECK(cudaMalloc((void**)&d_scale, 4));
    CUDA_CHECK(cudaMalloc((void**)&d_skip, 4));
    AdafactorScalars* hs = malloc(NT * sizeof(AdafactorScalars));
    double worst_p = 0, worst_s = 0, worst_m = 0, worst_sc = 0, worst_w = 0;
    for (int s = 1; s <= 5; s++) {
        const bool skip = s == 5;
        const float gscale = s == 2 ? 1.0f : (s == 3 ? 0.37f : 1.0f) / 1024.0f;
        for (int k = 0; k < NT; k++) {
            Buf* B = &b[k];
            for (size_t i = 0; i < B->n; i++) {
                float x = trng_normal(&rng) * 1024.0f * 1e-2f * (s == 3 ? c->grad_jump : 1.0f);
                if (s == 2) x /= 1024.0f;  // grad_scale NULL = 1
                if (i % 97 == 5) x = 0.0f;  // exact zeros (eps1 matters)
                if (GDT[k] == DT_F32) ((float*)B->g)[i] = x;
                else if (GDT[k] == DT_F16) ((uint16_t*)B->g)[i] = cpu_adam_f32_to_f16(x);
                else ((uint16_t*)B->g)[i] = cpu_adam_f32_to_bf16(x);
            }
            CUDA_CHECK(cudaMemcpy(B->dg, B->g, B->n * dtype_size(GDT[k]), cudaMemcpyHostToDevice));
        }
        const int step = skip ? 4 : s;  // the skipped step would be step 5; nothing may change
        AdafactorStepArgs a = {.step = skip ? 5 : s, .lr = c->o.lr / (double)s, .eps1 = c->o.eps1, .eps2 = c->o.eps2,
                               .clip_threshold = c->o.clip_threshold, .decay_rate = c->o.decay_rate,
                               .has_beta1 = c->o.has_beta1, .beta1 = c->o.beta1,
                               .scale_parameter = c->o.scale_parameter, .relative_step = c->o.relative_step,
                               .warmup_init = c->o.warmup_init};
        int sk = skip ? 1 : 0;
        CUDA_CHECK(cudaMemcpy(d_scale, &gscale, 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_skip, &sk, 4, cudaMemcpyHostToDevice));
        adafactor_step(plan, &a, s == 2 ? NULL : d_scale, s == 4 ? NULL : d_skip, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(hs, adafactor_plan_scalars(plan), NT * sizeof(AdafactorScalars), cudaMemcpyDeviceToHost));
        CpuAdafactorOpts o = c->o;
        o.lr = a.lr;
        for (int k = 0; k < NT; k++) {
            Buf* B = &b[k];
            if (!B->n) continue;
            CpuAdafactorStepInfo info = {0};
            o.weight_decay = WD[k];  // the GPU plan's per-tensor group value (list[k].weight_decay)
            if (!skip) {
                CpuAdafactorState st = {.rows = list[k].rows, .cols = list[k].cols, .factored = FACT[k],
                                        .exp_avg_sq_row = B->row, .exp_avg_sq_col = B->col, .exp_avg_sq = B->v,
                                        .exp_avg = B->m};
                assert_int_equal(cpu_adafactor_step(&o, s, &st, B->p, B->g, GDT[k], s == 2 ? 1.0f : gscale,
                                                    WORK[k] < 0 ? NULL : B->w, WORK[k] < 0 ? DT_F32 : (DType)WORK[k],
                                                    &info, NULL),
                                 0);
                const float sv[4] = {hs[k].param_rms, hs[k].lr, hs[k].update_rms, hs[k].clip_div};
                const float rv[4] = {info.param_rms, info.lr, info.update_rms, info.clip_div};
                const char* nm[4] = {"param_rms", "lr", "update_rms", "clip_div"};
                for (int q = 0; q < 4; q++) {
                    double e = fabs((double)sv[q] - rv[q]) / fmax(fabs((double)rv[q]), 1e-30);
                    if (e > TOL) fail_msg("%s step %d tensor %d %s: GPU %.9g CPU %.9g", c->name, s, k, nm[q], sv[q], rv[q]);
                    worst_sc = fmax(worst_sc, e);
                }
            }
            worst_p = fmax(worst_p, cmp_array("master", c, step, k, B->dp, B->p, B->n, TOL));
            worst_s = fmax(worst_s, cmp_array("exp_avg_sq_row", c, step, k, B->drow, B->row, B->nrow, TOL));
            worst_s = fmax(worst_s, cmp_array("exp_avg_sq_col", c, step, k, B->dcol, B->col, B->ncol, TOL));
            worst_s = fmax(worst_s, cmp_array("exp_avg_sq", c, step, k, B->dv, B->v, B->nv, TOL));
            if (beta1) worst_m = fmax(worst_m, cmp_array("exp_avg", c, step, k, B->dm, B->m, B->n, TOL));
            if (WORK[k] >= 0) {
                uint16_t* gw = malloc(B->n * 2);
                CUDA_CHECK(cudaMemcpy(gw, B->dw, B->n * 2, cudaMemcpyDeviceToHost));
                for (size_t i = 0; i < B->n; i++) {
                    double u = ulp16(gw[i], B->w[i]);
                    if (u > 1) fail_msg("%s step %d tensor %d work[%zu]: 0x%04x, CPU 0x%04x", c->name, s, k, i, gw[i], B->w[i]);
                    worst_w = fmax(worst_w, u);
                }
                free(gw);
            }
        }
    }
    print_message("%s: worst error (rel. to the array's max, tolerance %.0e): master %.3e, second moments %.3e, "
                  "exp_avg %.3e; lr/RMS/divisor %.3e relative; working copies %.0f ulp\n",
                  c->name, TOL, worst_p, worst_s, worst_m, worst_sc, worst_w);
    adafactor_plan_free(plan);
    CUDA_CHECK(cudaFree(d_scale));
    CUDA_CHECK(cudaFree(d_skip));
    free(hs);
    for (int k = 0; k < NT; k++) {
        Buf* B = &b[k];
        free(B->p), free(B->m), free(B->v), free(B->row), free(B->col), free(B->g), free(B->w);
        CUDA_CHECK(cudaFree(B->dp));
        CUDA_CHECK(cudaFree(B->dm));
        CUDA_CHECK(cudaFree(B->dv));
        CUDA_CHECK(cudaFree(B->drow));
        CUDA_CHECK(cudaFree(B->dcol));
        CUDA_CHECK(cudaFree(B->dg));
        CUDA_CHECK(cudaFree(B->dw));
    }
}

static void test_hf_trainer_options(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    Case c = {.name = "trainer (lr 1e-3, no relative step, no param scale)", .grad_jump = 1};
    cpu_adafactor_default_opts(&c.o);
    c.o.has_lr = true, c.o.lr = 1e-3, c.o.relative_step = false, c.o.scale_parameter = false;
    run_case(&c);
}

static void test_relative_step_beta1(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    Case c = {.name = "relative_step + scale_parameter + beta1 0.9", .grad_jump = 1};
    cpu_adafactor_default_opts(&c.o);
    c.o.has_beta1 = true, c.o.beta1 = 0.9;
    run_case(&c);
}

static void test_warmup_init(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    Case c = {.name = "warmup_init", .grad_jump = 1};
    cpu_adafactor_default_opts(&c.o);
    c.o.warmup_init = true;
    run_case(&c);
}

static void test_clipping_beta1_decay(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    Case c = {.name = "clipping (64x gradient jump) + beta1 0.5 + lr 1e-2", .grad_jump = 64};
    cpu_adafactor_default_opts(&c.o);
    c.o.has_lr = true, c.o.lr = 1e-2, c.o.relative_step = false, c.o.scale_parameter = true;
    c.o.has_beta1 = true, c.o.beta1 = 0.5, c.o.clip_threshold = 1.0, c.o.decay_rate = -0.5;
    run_case(&c);
}


// ---- several ranks, simulated: slices stepped by one plan per rank, the reduce buffers added on the host

enum { SNT = 5 };
static const int64_t SROWS[SNT] = {1500, 8, 30, 1, 1};
static const int64_t SCOLS[SNT] = {300, 70000, 20, 40000, 777};
static const bool SFACT[SNT] = {true, true, true, false, true};

static void split_case(int W, bool beta1) {
    TRng rng = {0xC0FFEEull + (uint64_t)W};
    AdafactorTensor whole[SNT];
    float *hp[SNT], *hg[SNT];
    int64_t n[SNT], len1 = 0, off1[SNT], off2[SNT];
    float *dp[SNT], *dg[SNT], *drow[SNT], *dcol[SNT], *dv[SNT], *dm[SNT];
    uint16_t* dw[SNT];
    for (int k = 0; k < SNT; k++) {
        n[k] = SROWS[k] * SCOLS[k];
        hp[k] = malloc((size_t)n[k] * 4);
        hg[k] = malloc((size_t)n[k] * 4);
        for (int64_t i = 0; i < n[k]; i++) hp[k][i] = trng_normal(&rng) * 0.05f;
        off1[k] = len1;
        off2[k] = k;
        len1 += SFACT[k] ? SROWS[k] + SCOLS[k] + 1 : 1;
        CUDA_CHECK(cudaMalloc((void**)&dp[k], (size_t)n[k] * 4));
        CUDA_CHECK(cudaMalloc((void**)&dg[k], (size_t)n[k] * 4));
        CUDA_CHECK(cudaMalloc((void**)&dv[k], (size_t)n[k] * 4));
        CUDA_CHECK(cudaMalloc((void**)&dm[k], (size_t)n[k] * 4));
        CUDA_CHECK(cudaMalloc((void**)&dw[k], (size_t)n[k] * 2));
        CUDA_CHECK(cudaMalloc((void**)&drow[k], (size_t)SROWS[k] * 4));
        CUDA_CHECK(cudaMalloc((void**)&dcol[k], (size_t)SCOLS[k] * 4));
        CUDA_CHECK(cudaMemcpy(dp[k], hp[k], (size_t)n[k] * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(dv[k], 0, (size_t)n[k] * 4));
        CUDA_CHECK(cudaMemset(dm[k], 0, (size_t)n[k] * 4));
        CUDA_CHECK(cudaMemset(drow[k], 0, (size_t)SROWS[k] * 4));
        CUDA_CHECK(cudaMemset(dcol[k], 0, (size_t)SCOLS[k] * 4));
        whole[k] = (AdafactorTensor){.master = dp[k], .grad = dg[k], .work = dw[k], .exp_avg_sq_row = drow[k],
                                     .exp_avg_sq_col = dcol[k], .exp_avg_sq = dv[k], .exp_avg = dm[k],
                                     .rows = SROWS[k], .cols = SCOLS[k], .factored = SFACT[k], .grad_dtype = DT_F32,
                                     .work_dtype = DT_BF16, .weight_decay = k == 2 ? 0.1 : 0.0};
    }
    AdafactorPlan* ref = adafactor_plan_create(whole, SNT);
    // the ranks: tensor k cut at c_r = r * n / W + 3 r (odd boundaries inside rows), own buffers per rank
    AdafactorPlan* plan[5];
    AdafactorTensor rk[5][SNT];
    int cnt[5];
    int64_t first[5][SNT], count[5][SNT], o1[5][SNT], o2[5][SNT];
    int qidx[5][SNT];  // tensor k's index in rank r's plan, -1: none
    for (int r = 0; r < W; r++) {
        cnt[r] = 0;
        for (int k = 0; k < SNT; k++) {
            const int64_t a = r == 0 ? 0 : T5_MIN(n[k], r * n[k] / W + 3 * r);
            const int64_t b = r == W - 1 ? n[k] : T5_MIN(n[k], (r + 1) * n[k] / W + 3 * (r + 1));
            first[r][k] = a;
            count[r][k] = b - a;
            qidx[r][k] = -1;
            if (b <= a) continue;
            qidx[r][k] = cnt[r];
            AdafactorTensor t = whole[k];
            float *p, *g, *row, *col, *v, *m;
            uint16_t* w;
            CUDA_CHECK(cudaMalloc((void**)&p, (size_t)(b - a) * 4));
            CUDA_CHECK(cudaMalloc((void**)&g, (size_t)(b - a) * 4));
            CUDA_CHECK(cudaMalloc((void**)&v, (size_t)(b - a) * 4));
            CUDA_CHECK(cudaMalloc((void**)&m, (size_t)(b - a) * 4));
            CUDA_CHECK(cudaMalloc((void**)&w, (size_t)(b - a) * 2));
            CUDA_CHECK(cudaMalloc((void**)&row, (size_t)SROWS[k] * 4));
            CUDA_CHECK(cudaMalloc((void**)&col, (size_t)SCOLS[k] * 4));
            CUDA_CHECK(cudaMemcpy(p, hp[k] + a, (size_t)(b - a) * 4, cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemset(v, 0, (size_t)(b - a) * 4));
            CUDA_CHECK(cudaMemset(m, 0, (size_t)(b - a) * 4));
            CUDA_CHECK(cudaMemset(row, 0, (size_t)SROWS[k] * 4));
            CUDA_CHECK(cudaMemset(col, 0, (size_t)SCOLS[k] * 4));
            t.master = p, t.grad = g, t.work = w, t.exp_avg_sq_row = row, t.exp_avg_sq_col = col, t.exp_avg_sq = v;
            t.exp_avg = m;  // read only with beta1
            t.first = a, t.count = b - a;
            o1[r][cnt[r]] = off1[k];
            o2[r][cnt[r]] = off2[k];
            rk[r][cnt[r]++] = t;
        }
        const AdafactorReduce red = {.len1 = len1, .len2 = SNT, .off1 = o1[r], .off2 = o2[r]};
        plan[r] = adafactor_plan_create_reduce(rk[r], cnt[r], &red);
    }
    float* d_scale;
    CUDA_CHECK(cudaMalloc((void**)&d_scale, 4));
    double* h1 = malloc((size_t)len1 * 8);
    double* t1 = malloc((size_t)len1 * 8);
    double worst = 0;
    for (int s = 1; s <= 4; s++) {
        for (int k = 0; k < SNT; k++) {
            for (int64_t i = 0; i < n[k]; i++) hg[k][i] = i % 89 == 7 ? 0.0f : trng_normal(&rng) * (s == 3 ? 40.0f : 1.0f);
            CUDA_CHECK(cudaMemcpy(dg[k], hg[k], (size_t)n[k] * 4, cudaMemcpyHostToDevice));
        }
        // each rank's slices of the gradient
        for (int r = 0; r < W; r++)
            for (int k = 0; k < SNT; k++)
                if (qidx[r][k] >= 0)
                    CUDA_CHECK(cudaMemcpy((void*)rk[r][qidx[r][k]].grad, hg[k] + first[r][k], (size_t)count[r][k] * 4,
                                          cudaMemcpyHostToDevice));
        const float gscale = 0.5f;
        CUDA_CHECK(cudaMemcpy(d_scale, &gscale, 4, cudaMemcpyHostToDevice));
        AdafactorStepArgs a = {.step = s, .lr = 1e-2, .eps1 = 1e-30, .eps2 = 1e-3, .clip_threshold = 1.0,
                               .decay_rate = -0.8, .has_beta1 = beta1, .beta1 = 0.9, .scale_parameter = true};
        adafactor_step(ref, &a, d_scale, NULL, 0);
        // the three phases, the buffers added over the ranks in rank order between them (the engine's all-reduces)
        for (int phase = 0; phase < 3; phase++) {
            for (int r = 0; r < W; r++) {
                if (phase == 0) adafactor_step_begin(plan[r], &a, d_scale, NULL, 0);
                if (phase == 1) adafactor_step_middle(plan[r], &a, d_scale, NULL, 0);
                if (phase == 2) adafactor_step_end(plan[r], &a, d_scale, NULL, 0);
            }
            if (phase == 2) break;
            const int which = phase + 1;
            const int64_t len = which == 1 ? len1 : SNT;
            memset(t1, 0, (size_t)len * 8);
            for (int r = 0; r < W; r++) {
                CUDA_CHECK(cudaMemcpy(h1, adafactor_plan_reduce_buffer(plan[r], which), (size_t)len * 8,
                                      cudaMemcpyDeviceToHost));
                for (int64_t i = 0; i < len; i++) t1[i] += h1[i];
            }
            for (int r = 0; r < W; r++)
                CUDA_CHECK(cudaMemcpy(adafactor_plan_reduce_buffer(plan[r], which), t1, (size_t)len * 8,
                                      cudaMemcpyHostToDevice));
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        // compare every rank's pieces with the whole plan's
        AdafactorScalars hs[SNT], rs[SNT];
        CUDA_CHECK(cudaMemcpy(hs, adafactor_plan_scalars(ref), sizeof hs, cudaMemcpyDeviceToHost));
        for (int k = 0; k < SNT; k++) {
            float* want = malloc((size_t)n[k] * 4);
            float* got = malloc((size_t)n[k] * 4);
            const float* wsrc[4] = {dp[k], dv[k], dm[k], drow[k]};
            const char* nm[5] = {"master", "exp_avg_sq", "exp_avg", "exp_avg_sq_row", "exp_avg_sq_col"};
            for (int arr = 0; arr < 5; arr++) {
                if ((arr == 1 && SFACT[k]) || (arr == 2 && !beta1) || (arr >= 3 && !SFACT[k])) continue;
                const int64_t len = arr == 3 ? SROWS[k] : arr == 4 ? SCOLS[k] : n[k];
                CUDA_CHECK(cudaMemcpy(want, arr == 4 ? dcol[k] : wsrc[arr], (size_t)len * 4, cudaMemcpyDeviceToHost));
                const double scale = fmax((double)max_abs(want, (size_t)len), 1e-30);
                for (int r = 0; r < W; r++) {
                    const int q = qidx[r][k];
                    if (q < 0) continue;
                    const AdafactorTensor* t = &rk[r][q];
                    const float* src = arr == 0 ? t->master : arr == 1 ? t->exp_avg_sq : arr == 2 ? t->exp_avg
                                     : arr == 3 ? t->exp_avg_sq_row : t->exp_avg_sq_col;
                    const int64_t off = arr >= 3 ? 0 : first[r][k], m = arr >= 3 ? len : count[r][k];
                    CUDA_CHECK(cudaMemcpy(got, src, (size_t)m * 4, cudaMemcpyDeviceToHost));
                    for (int64_t i = 0; i < m; i++) {
                        const double e = fabs((double)got[i] - (double)want[off + i]) / scale;
                        if (e > 1e-6)
                            fail_msg("W %d beta1 %d step %d tensor %d rank %d %s[%lld]: %.9g, whole plan %.9g", W, beta1,
                                     s, k, r, nm[arr], (long long)(off + i), got[i], want[off + i]);
                        worst = fmax(worst, e);
                    }
                    if (arr == 0) {  // the 16-bit copy and the scalars, once per rank and tensor
                        uint16_t* gw = malloc((size_t)m * 2);
                        uint16_t* ww = malloc((size_t)n[k] * 2);
                        CUDA_CHECK(cudaMemcpy(gw, t->work, (size_t)m * 2, cudaMemcpyDeviceToHost));
                        CUDA_CHECK(cudaMemcpy(ww, dw[k], (size_t)n[k] * 2, cudaMemcpyDeviceToHost));
                        for (int64_t i = 0; i < m; i++)
                            if (ulp16(gw[i], ww[off + i]) > 1)
                                fail_msg("W %d step %d tensor %d rank %d work[%lld]: 0x%04x, whole 0x%04x", W, s, k, r,
                                         (long long)(off + i), gw[i], ww[off + i]);
                        free(gw);
                        free(ww);
                        CUDA_CHECK(cudaMemcpy(&rs[k], adafactor_plan_scalars(plan[r]) + q, sizeof rs[k],
                                              cudaMemcpyDeviceToHost));
                        const float sv[4] = {rs[k].param_rms, rs[k].lr, rs[k].update_rms, rs[k].clip_div};
                        const float rv[4] = {hs[k].param_rms, hs[k].lr, hs[k].update_rms, hs[k].clip_div};
                        for (int z = 0; z < 4; z++)
                            if (fabs((double)sv[z] - rv[z]) > 1e-6 * fabs((double)rv[z]))
                                fail_msg("W %d step %d tensor %d rank %d scalar %d: %.9g, whole %.9g", W, s, k, r, z,
                                         sv[z], rv[z]);
                    }
                }
            }
            free(want);
            free(got);
        }
    }
    print_message("split over %d ranks%s: 4 steps, worst difference from the whole plan %.3e of the array's max "
                  "(gate 1e-6)\n", W, beta1 ? " (beta1 0.9)" : "", worst);
    for (int r = 0; r < W; r++) {
        for (int q = 0; q < cnt[r]; q++) {
            CUDA_CHECK(cudaFree(rk[r][q].master));
            CUDA_CHECK(cudaFree((void*)rk[r][q].grad));
            CUDA_CHECK(cudaFree(rk[r][q].work));
            CUDA_CHECK(cudaFree(rk[r][q].exp_avg_sq_row));
            CUDA_CHECK(cudaFree(rk[r][q].exp_avg_sq_col));
            CUDA_CHECK(cudaFree(rk[r][q].exp_avg_sq));
            CUDA_CHECK(cudaFree(rk[r][q].exp_avg));
        }
        adafactor_plan_free(plan[r]);
    }
    adafactor_plan_free(ref);
    for (int k = 0; k < SNT; k++) {
        CUDA_CHECK(cudaFree(dp[k]));
        CUDA_CHECK(cudaFree(dg[k]));
        CUDA_CHECK(cudaFree(dv[k]));
        CUDA_CHECK(cudaFree(dm[k]));
        CUDA_CHECK(cudaFree(dw[k]));
        CUDA_CHECK(cudaFree(drow[k]));
        CUDA_CHECK(cudaFree(dcol[k]));
        free(hp[k]);
        free(hg[k]);
    }
    CUDA_CHECK(cudaFree(d_scale));
    free(h1);
    free(t1);
}

static void test_split_across_ranks(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    split_case(2, false);
    split_case(3, true);
    split_case(5, false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_trainer_options),
        cmocka_unit_test(test_relative_step_beta1),
        cmocka_unit_test(test_warmup_init),
        cmocka_unit_test(test_clipping_beta1_decay),
        cmocka_unit_test(test_split_across_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
