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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_trainer_options),
        cmocka_unit_test(test_relative_step_beta1),
        cmocka_unit_test(test_warmup_init),
        cmocka_unit_test(test_clipping_beta1_decay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
