/*
 * test_gpu_zenflow.c: cuda/zenflow.cu (ZenFlow's GPU half) against ZenFlow's CPU half (src/zero/zenflow_select.c,
 * zenflow_ref.c; docs/zero.md "ZenFlow"):
 *   - column importance from fp32 / fp16 / bf16 gradients, random and tie-laden (values from a set of 4, a NaN
 *     column), C in {8, 37, 1024, 65536}: bit-identical to zenflow_column_importance (same fp64 order);
 *   - the top-k set for k in {0, 1, zenflow_select_count(C, 0.1, 2), C - 1, C}: equal to zenflow_select_topk's,
 *     from those importances and from crafted ones (NaN of both signs, +-inf, -0 and +0, negatives, subnormals,
 *     runs of equal values);
 *   - 20 micro-steps of a zenflow_sched plan (select_strategy "step", select_interval 4, update_interval 2,
 *     full_warm_up_rounds 1, topk_ratio 0.25) on a (64, 96) weight and a 1-D weight of 96, the engine's future
 *     flow written out (host: master, acc, the CPU AdamW; GPU: selection, selective AdamW, keep / restore):
 *       fp32 working weights: equal to zenflow_ref's work within fp32 rounding (expected: bit for bit);
 *       fp16 / bf16: within a bound of 40 roundings of the working dtype (2 per micro-step, nothing amplifies);
 *       every dtype: bit for bit equal to a host emulation of the same flow (the CPU AdamW's arithmetic on
 *       the gathered columns, round to nearest even on the scatter), selective m, v and the selected set too.
 * The emulation's fp32 run is checked against zenflow_ref bit for bit without a GPU (test_emulation_is_ref), so
 * the GPU tests compare with a reference that runs here.
 */
#include "t5test.h"

#include <math.h>

#include "../cuda/zenflow.cuh"
#include "../src/base/check.h"
#include "../src/zero/cpu_adam.h"
#include "../src/zero/zenflow_ref.h"
#include "../src/zero/zenflow_sched.h"
#include "../src/zero/zenflow_select.h"
#include "test_gpu_util.h"

// ---------------------------------------------------------------------------------------------
// importance and top-k

// bit-identical, any NaN equal to any NaN (the GPU's fp64 NaN is canonical, x86 propagates the operand's payload)
static bool check_equal_or_nan(const char* what, const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) {
            printf("# %s: differs at %zu: %.9g vs %.9g\n", what, i, a[i], b[i]);
            return false;
        }
    printf("# %s: %zu elements bit-identical (NaN as NaN)\n", what, n);
    return true;
}

static bool same_set(const char* what, const int64_t* cpu, const int32_t* gpu, int64_t k) {
    for (int64_t i = 0; i < k; i++)
        if (cpu[i] != (int64_t)gpu[i]) {
            printf("# %s: position %lld of %lld: GPU column %d, CPU column %lld\n", what, (long long)i, (long long)k,
                   gpu[i], (long long)cpu[i]);
            return false;
        }
    return true;
}

// top-k of the importance held in imp (C, host) for the k edge cases: GPU set == CPU set. Returns false on a
// mismatch (after printing it).
static bool check_topk_all_k(const char* what, const float* imp, int64_t C) {
    const int64_t ks[5] = {0, 1, zenflow_select_count(C, 0.1, 2), C - 1, C};
    int64_t* cpu = calloc((size_t)C + 1, sizeof *cpu);
    int32_t* gpu = calloc((size_t)C + 1, sizeof *gpu);
    bool ok = true;
    for (int i = 0; i < 5 && ok; i++) {
        const int64_t k = ks[i];
        ZenflowGpuTensor t;
        zenflow_gpu_init(&t, 1, C, false, k, DT_F32, 0.0f);
        CUDA_CHECK(cudaMemcpy(t.importance, imp, (size_t)C * sizeof(float), cudaMemcpyHostToDevice));
        if (k > 0) CUDA_CHECK(cudaMemset(t.sel, 0xFF, (size_t)k * sizeof(int32_t)));  // -1: a column never written
        zenflow_select_topk_gpu(&t, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        if (k > 0) CUDA_CHECK(cudaMemcpy(gpu, t.sel, (size_t)k * sizeof(int32_t), cudaMemcpyDeviceToHost));
        zenflow_select_topk(imp, C, k, cpu);
        char name[160];
        snprintf(name, sizeof name, "%s C %lld k %lld", what, (long long)C, (long long)k);
        ok = same_set(name, cpu, gpu, k);
        zenflow_gpu_free(&t);
    }
    if (ok) printf("# %-40s C %-6lld top-k sets equal for k = 0, 1, 0.1 C, C-1, C\n", what, (long long)C);
    fflush(stdout);
    free(cpu);
    free(gpu);
    return ok;
}

static const float tie_values[4] = {0.0f, 0.5f, 1.0f, 2.0f};  // exact in every dtype, sums of them too

static void test_importance_and_topk(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const int64_t Cs[4] = {8, 37, 1024, 65536};
    const int64_t Rs[4] = {64, 33, 40, 9};
    TRng rng = {0x5eed2801};
    bool ok = true;
    for (int ci = 0; ci < 4; ci++)
        for (int di = 0; di < 3; di++)
            for (int ties = 0; ties < 2; ties++) {
                const int64_t R = Rs[ci], C = Cs[ci];
                const DType dt = ALL_DTYPES[di];
                const size_t n = (size_t)(R * C);
                float* g = host_floats(n);
                for (size_t i = 0; i < n; i++) {
                    if (ties) g[i] = tie_values[trng_next(&rng) % 4] * ((trng_next(&rng) & 1) ? -1.0f : 1.0f);
                    else g[i] = trng_normal(&rng) * powf(10.0f, (float)(trng_next(&rng) % 7) - 4.0f);
                }
                if (ties && C > 3) g[2 * C + 3] = NAN;  // column 3's importance is NaN: ranked first
                host_round_all(dt, g, n);
                float* cpu = host_floats((size_t)C);
                float* gpu = host_floats((size_t)C);
                zenflow_column_importance(g, R, C, cpu);
                void* dg = dev_upload(dt, g, n);
                float* dimp = (float*)dev_alloc_poisoned((size_t)C * sizeof(float));
                zenflow_column_importance_gpu(dg, dt, R, C, dimp, 0);
                CUDA_CHECK(cudaDeviceSynchronize());
                CUDA_CHECK(cudaMemcpy(gpu, dimp, (size_t)C * sizeof(float), cudaMemcpyDeviceToHost));
                char what[96];
                snprintf(what, sizeof what, "importance %s (%lld, %lld) %s", dtype_name(dt), (long long)R,
                         (long long)C, ties ? "ties" : "random");
                ok = check_equal_or_nan(what, gpu, cpu, (size_t)C) && ok;
                // the selection from the GPU's importance through the whole GPU path (importance, then top-k)
                const int64_t k = zenflow_select_count(C, 0.1, 3);
                ZenflowGpuTensor t;
                zenflow_gpu_init(&t, R, C, false, k, dt, 0.0f);
                zenflow_gpu_select(&t, dg, dt, 0);
                CUDA_CHECK(cudaDeviceSynchronize());
                int32_t* gsel = calloc((size_t)k + 1, sizeof *gsel);
                int64_t* csel = calloc((size_t)k + 1, sizeof *csel);
                CUDA_CHECK(cudaMemcpy(gsel, t.sel, (size_t)k * sizeof(int32_t), cudaMemcpyDeviceToHost));
                zenflow_select_topk(cpu, C, k, csel);
                ok = same_set(what, csel, gsel, k) && ok;
                zenflow_gpu_free(&t);
                free(gsel);
                free(csel);
                ok = check_topk_all_k(what, cpu, C) && ok;
                CUDA_CHECK(cudaFree(dg));
                CUDA_CHECK(cudaFree(dimp));
                free(g);
                free(cpu);
                free(gpu);
            }
    if (!ok) fail_msg("the GPU importance or selection differs from the CPU half (see above)");
}

// importance values the gradient path rarely makes: NaN of both signs, +-inf, -0 / +0, negatives, subnormals, runs
static void test_topk_special_values(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const float specials[12] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 2.0f, 1e-40f, -1e-40f, 3.5f};
    const int64_t Cs[4] = {8, 37, 1024, 65536};
    TRng rng = {0x70bc};
    bool ok = true;
    for (int ci = 0; ci < 4; ci++) {
        const int64_t C = Cs[ci];
        float* imp = host_floats((size_t)C);
        for (int64_t c = 0; c < C; c++) imp[c] = specials[trng_next(&rng) % 12];
        ok = check_topk_all_k("special values", imp, C) && ok;
        for (int64_t c = 0; c < C; c++) imp[c] = 1.0f;  // all equal: the first k columns
        ok = check_topk_all_k("all equal", imp, C) && ok;
        free(imp);
    }
    if (!ok) fail_msg("the GPU top-k differs from zenflow_select_topk (see above)");
}

// ---------------------------------------------------------------------------------------------
// 20 micro-steps: the flow of one tensor, on the GPU or emulated on the host

enum { STEPS = 20 };
static const float BETA1 = 0.9f, BETA2 = 0.999f, EPS = 1e-8f, WD = 0.01f;

static ZenflowOpts flow_opts(void) {
    ZenflowOpts o = zenflow_opts_default();
    o.topk_ratio = 0.25;
    o.select_strategy = ZENFLOW_SELECT_STEP;
    o.select_interval = 4;
    o.update_interval = 2;
    o.full_warm_up_rounds = 1;
    return o;
}

static float flow_lr(int64_t m) { return 1e-3f * (1.0f - 0.02f * (float)m); }

// the gradients and initial weights of a case, identical for every run of it
static void flow_inputs(int64_t R, int64_t C, DType dt, float* w0, float* grads /* (STEPS, R, C) */) {
    TRng rng = {0xf10e + (uint64_t)C * 7 + (uint64_t)R};
    const size_t n = (size_t)(R * C);
    for (size_t i = 0; i < n; i++) w0[i] = 0.02f * trng_normal(&rng);
    host_round_all(dt, w0, n);
    for (int s = 0; s < STEPS; s++) {
        float* g = grads + (size_t)s * n;
        for (size_t i = 0; i < n; i++) g[i] = trng_normal(&rng) * (1.0f + (float)((i % (size_t)C) % 5));
        host_round_all(dt, g, n);
    }
}

typedef struct {
    int64_t R, C, k;
    bool is_1d;
    DType wdt;
    // host: what the engine keeps on the host (DeepSpeed's CPU half)
    float *master, *m, *v, *acc;  // (R, C)
    float* work;                  // (R, C) the working weights' values (the emulation's own; the GPU's downloaded)
    CpuAdam cpu, selc;            // the CPU AdamW; the selective AdamW's step count and bias corrections
    int64_t selective_steps;
    // emulation of the GPU half, (R, k) layouts as cuda/zenflow.cu
    int64_t* sel;
    float *sel_p, *sel_g, *sel_m, *sel_v, *kept, *imp;
    // the GPU half
    bool gpu;
    ZenflowGpuTensor t;
    void* dwork;  // (R, C) wdt
    void* dgrad;  // (R, C) wdt
} Flow;

static void flow_init(Flow* f, int64_t R, int64_t C, bool is_1d, int64_t k, DType wdt, const float* w0, bool gpu) {
    memset(f, 0, sizeof *f);
    f->R = is_1d ? 1 : R, f->C = C, f->is_1d = is_1d, f->k = is_1d ? C : k, f->wdt = wdt, f->gpu = gpu;
    const size_t n = (size_t)(f->R * C), ns = (size_t)(f->R * f->k);
    f->master = host_floats(n), f->m = host_floats(n), f->v = host_floats(n), f->acc = host_floats(n);
    f->work = host_floats(n);
    memcpy(f->work, w0, n * sizeof(float));
    memcpy(f->master, w0, n * sizeof(float));
    cpu_adam_init(&f->cpu, BETA1, BETA2, EPS, true);
    cpu_adam_init(&f->selc, BETA1, BETA2, EPS, true);
    f->sel = calloc((size_t)f->k + 1, sizeof *f->sel);
    if (is_1d)
        for (int64_t c = 0; c < C; c++) f->sel[c] = c;
    f->sel_p = host_floats(ns), f->sel_g = host_floats(ns), f->sel_m = host_floats(ns), f->sel_v = host_floats(ns);
    f->kept = host_floats(ns), f->imp = host_floats((size_t)C);
    if (gpu) {
        zenflow_gpu_init(&f->t, f->R, C, is_1d, f->k, wdt, WD);
        f->dwork = dev_upload(wdt, w0, n);
        f->dgrad = dev_alloc_poisoned(n * dtype_size(wdt));
    }
}

static void flow_free(Flow* f) {
    free(f->master), free(f->m), free(f->v), free(f->acc), free(f->work), free(f->sel);
    free(f->sel_p), free(f->sel_g), free(f->sel_m), free(f->sel_v), free(f->kept), free(f->imp);
    if (f->gpu) {
        zenflow_gpu_free(&f->t);
        CUDA_CHECK(cudaFree(f->dwork));
        CUDA_CHECK(cudaFree(f->dgrad));
    }
}

// dst (R, k) = src[:, sel]; src (R, C)
static void emu_gather(const Flow* f, const float* src, float* dst) {
    for (int64_t r = 0; r < f->R; r++)
        for (int64_t j = 0; j < f->k; j++) dst[r * f->k + j] = src[r * f->C + f->sel[j]];
}
// dst[:, sel] = wdt(src), round to nearest even
static void emu_scatter(const Flow* f, const float* src, float* dst) {
    for (int64_t r = 0; r < f->R; r++)
        for (int64_t j = 0; j < f->k; j++) dst[r * f->C + f->sel[j]] = host_round(f->wdt, src[r * f->k + j]);
}

static void flow_selective_step(Flow* f, float lr) {
    if (f->k == 0) return;
    f->selective_steps++;
    cpu_adam_begin_step(&f->selc, f->selective_steps, BETA1, BETA2);
    if (f->gpu) {
        const AdamWStepArgs a = {lr, f->selc.beta1, f->selc.beta2, f->selc.eps, f->selc.bias_correction1,
                                 f->selc.bias_correction2, true};
        zenflow_gpu_selective_step(&f->t, f->dwork, &a, NULL, NULL, 0);
    } else {
        emu_gather(f, f->work, f->sel_p);
        cpu_adam_update(&f->selc, lr, WD, f->sel_p, f->sel_m, f->sel_v, f->sel_g, DT_F32, 1.0f, NULL, DT_F32,
                        (size_t)(f->R * f->k));
        emu_scatter(f, f->sel_p, f->work);
    }
}

// one micro-step, zenflow_ref_step's order (zenflow_ref.h), with the host / GPU split of the future engine
static void flow_step(Flow* f, const ZenflowStepPlan* p, const float* g, float lr) {
    const size_t n = (size_t)(f->R * f->C), ns = (size_t)(f->R * f->k);
    if (f->gpu) dev_write(f->dgrad, f->wdt, g, n);  // the micro-step's gradient, on the GPU (already wdt-exact)
    if (p->sync_master) {                           // master = work
        if (f->gpu) dev_download(f->work, f->wdt, f->dwork, n);
        memcpy(f->master, f->work, n * sizeof(float));
    }
    if (p->select) {
        if (f->gpu) zenflow_gpu_select(&f->t, f->dgrad, f->wdt, 0);
        else {
            memset(f->sel_m, 0, ns * sizeof(float));
            memset(f->sel_v, 0, ns * sizeof(float));
            if (!f->is_1d) {
                zenflow_column_importance(g, f->R, f->C, f->imp);
                zenflow_select_topk(f->imp, f->C, f->k, f->sel);
            }
        }
    }
    for (size_t i = 0; i < n; i++) f->acc[i] += g[i];
    if (p->selective) {
        if (f->gpu) zenflow_gpu_gather_grad(&f->t, f->dgrad, f->wdt, 0);
        else emu_gather(f, g, f->sel_g);
        if (p->update) {
            if (f->gpu) zenflow_gpu_keep(&f->t, f->dwork, 0);
            else emu_gather(f, f->work, f->kept);
        } else flow_selective_step(f, lr);
    }
    if (p->update) {
        cpu_adam_begin_step(&f->cpu, p->cpu_step, BETA1, BETA2);
        cpu_adam_update(&f->cpu, lr, WD, f->master, f->m, f->v, f->acc, DT_F32, 1.0f, NULL, DT_F32, n);
        for (size_t i = 0; i < n; i++) f->work[i] = host_round(f->wdt, f->master[i]);  // the 16-bit copy
        if (f->gpu) dev_write(f->dwork, f->wdt, f->master, n);  // the same values, rounded by dev_write
        memset(f->acc, 0, n * sizeof(float));
        if (p->selective) {
            if (f->gpu) zenflow_gpu_restore(&f->t, f->dwork, 0);
            else emu_scatter(f, f->kept, f->work);
            flow_selective_step(f, lr);
        }
    }
    if (f->gpu) CUDA_CHECK(cudaDeviceSynchronize());
}

// runs the 20 micro-steps of a case: the reference (zenflow_ref, fp32) and a flow (GPU or emulated)
static void run_case(int64_t R, int64_t C, bool is_1d, DType wdt, bool gpu, ZenflowRefTensor* ref, Flow* f) {
    const size_t n = (size_t)((is_1d ? 1 : R) * C);
    float* w0 = host_floats(n);
    float* grads = host_floats(n * STEPS);
    flow_inputs(is_1d ? 1 : R, C, wdt, w0, grads);
    const ZenflowOpts o = flow_opts();
    const int64_t k = zenflow_select_count(C, o.topk_ratio, 3);
    zenflow_ref_init(ref, R, C, is_1d, k, w0, BETA1, BETA2, EPS);
    flow_init(f, R, C, is_1d, k, wdt, w0, gpu);
    ZenflowSched s;
    char err[256];
    if (zenflow_sched_init(&s, &o, 0, 0, false, err, sizeof err)) fail_msg("zenflow_sched_init: %s", err);
    for (int st = 0; st < STEPS; st++) {
        const ZenflowStepPlan p = zenflow_sched_begin(&s);
        const float lr = flow_lr(p.micro_step);
        zenflow_ref_step(ref, &p, grads + (size_t)st * n, lr, WD, NULL, 0);
        flow_step(f, &p, grads + (size_t)st * n, lr);
    }
    if (gpu) {  // the GPU's state, for the comparisons
        dev_download(f->work, wdt, f->dwork, n);
        const size_t ns = (size_t)(f->R * f->k);
        CUDA_CHECK(cudaMemcpy(f->sel_m, f->t.sel_m, ns * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(f->sel_v, f->t.sel_v, ns * sizeof(float), cudaMemcpyDeviceToHost));
        int32_t* sel = calloc((size_t)f->k + 1, sizeof *sel);
        CUDA_CHECK(cudaMemcpy(sel, f->t.sel, (size_t)f->k * sizeof(int32_t), cudaMemcpyDeviceToHost));
        for (int64_t j = 0; j < f->k; j++) f->sel[j] = sel[j];
        free(sel);
    }
    zenflow_sched_free(&s);
    free(w0);
    free(grads);
}

// The tolerance of a flow's working weights against zenflow_ref's fp32 ones. fp32: rounding only (the flow is
// expected to be bit-identical). 16-bit: each micro-step rounds a weight at most twice (the copy of the CPU's
// master, the selective AdamW's scatter), each rounding moves it by at most u |w| (u = 2^-8 bf16, 2^-11 fp16), and
// nothing amplifies an earlier difference (AdamW's move depends on g only; the decay multiplies by 1 - lr wd), so
// the difference is at most 2 STEPS u max|w|. wmax: a bound of |w| over the run.
static Tol flow_tol(DType wdt, double wmax) {
    const double u = wdt == DT_BF16 ? 0x1p-8 : 0x1p-11;
    return wdt == DT_F32 ? (Tol){1e-7, 1e-6} : (Tol){2.0 * STEPS * u * wmax, 0.0};
}

static double flow_wmax(const ZenflowRefTensor* ref, double* rw) {
    double wmax = 0.0;  // the final weights plus every step's largest AdamW move (about lr, twice for margin)
    for (int64_t i = 0; i < ref->R * ref->C; i++) rw[i] = ref->work[i], wmax = fmax(wmax, fabs(rw[i]));
    return wmax + 2.0 * STEPS * 1e-3;
}

// every 2-D selective step was a fp32 AdamW on work[:, sel]: selected columns must have moved
static bool selection_was_used(const ZenflowRefTensor* ref) { return ref->selective_steps > 0 && ref->k > 0; }

// The emulation in fp32 is zenflow_ref, bit for bit (runs without a GPU: the GPU tests' second reference).
static void test_emulation_is_ref(void** state) {
    (void)state;
    for (int is_1d = 0; is_1d < 2; is_1d++) {
        ZenflowRefTensor ref;
        Flow f;
        run_case(64, 96, is_1d, DT_F32, false, &ref, &f);
        assert_true(selection_was_used(&ref));
        const size_t n = (size_t)(ref.R * ref.C);
        if (!check_equal_bits(is_1d ? "emulation vs zenflow_ref, 1-D" : "emulation vs zenflow_ref, (64, 96)", f.work,
                              ref.work, n))
            fail_msg("the host emulation of the GPU flow is not zenflow_ref in fp32");
        for (int64_t j = 0; j < ref.k; j++) assert_int_equal(f.sel[j], ref.sel[j]);
        // the (R, k) state is the (k, R) state transposed
        for (int64_t j = 0; j < ref.k; j++)
            for (int64_t r = 0; r < ref.R; r++) {
                assert_memory_equal(&f.sel_m[r * f.k + j], &ref.sel_m[j * ref.R + r], 4);
                assert_memory_equal(&f.sel_v[r * f.k + j], &ref.sel_v[j * ref.R + r], 4);
            }
        zenflow_ref_free(&ref);
        flow_free(&f);
        // 16-bit working weights: the emulation (the GPU's expected bits) within the tolerance of the GPU test
        for (int di = 1; di < 3; di++) {
            run_case(64, 96, is_1d, ALL_DTYPES[di], false, &ref, &f);
            double* rw = host_doubles((size_t)(ref.R * ref.C));
            const double wmax = flow_wmax(&ref, rw);
            if (!check_close(is_1d ? "emulation vs zenflow_ref, 1-D" : "emulation vs zenflow_ref, (64, 96)",
                             ALL_DTYPES[di], f.work, rw, (size_t)(ref.R * ref.C), flow_tol(ALL_DTYPES[di], wmax)))
                fail_msg("the 16-bit emulation is outside the tolerance the GPU test applies");
            free(rw);
            zenflow_ref_free(&ref);
            flow_free(&f);
        }
    }
}

static void gpu_flow_case(int64_t R, int64_t C, bool is_1d, DType wdt, bool* ok) {
    ZenflowRefTensor ref;
    Flow g, e;
    run_case(R, C, is_1d, wdt, true, &ref, &g);
    zenflow_ref_free(&ref);
    run_case(R, C, is_1d, wdt, false, &ref, &e);
    const size_t n = (size_t)(ref.R * ref.C), ns = (size_t)(g.R * g.k);
    char what[96];
    snprintf(what, sizeof what, "zenflow %s (%lld, %lld) vs ref", is_1d ? "1-D" : "2-D", (long long)ref.R,
             (long long)C);
    // against zenflow_ref's fp32 work: fp32 rounding (expected 0); 16-bit: 40 roundings of |w|max (2 per step)
    double* rw = host_doubles(n);
    const double wmax = flow_wmax(&ref, rw);
    *ok = check_close(what, wdt, g.work, rw, n, flow_tol(wdt, wmax)) && *ok;
    // against the emulation: bit for bit
    snprintf(what, sizeof what, "zenflow %s %s GPU vs emulation work", is_1d ? "1-D" : "2-D", dtype_name(wdt));
    *ok = check_equal_bits(what, g.work, e.work, n) && *ok;
    snprintf(what, sizeof what, "zenflow %s %s GPU vs emulation sel_m", is_1d ? "1-D" : "2-D", dtype_name(wdt));
    *ok = check_equal_bits(what, g.sel_m, e.sel_m, ns) && *ok;
    snprintf(what, sizeof what, "zenflow %s %s GPU vs emulation sel_v", is_1d ? "1-D" : "2-D", dtype_name(wdt));
    *ok = check_equal_bits(what, g.sel_v, e.sel_v, ns) && *ok;
    for (int64_t j = 0; j < g.k; j++)
        if (g.sel[j] != e.sel[j]) {
            printf("# selected column %lld: GPU %lld, emulation %lld\n", (long long)j, (long long)g.sel[j],
                   (long long)e.sel[j]);
            *ok = false;
            break;
        }
    free(rw);
    zenflow_ref_free(&ref);
    flow_free(&g);
    flow_free(&e);
}

static void test_selective_flow(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        gpu_flow_case(64, 96, false, ALL_DTYPES[di], &ok);
        gpu_flow_case(1, 96, true, ALL_DTYPES[di], &ok);
    }
    if (!ok) fail_msg("the GPU ZenFlow flow differs from the CPU half (see above)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emulation_is_ref),
        cmocka_unit_test(test_importance_and_topk),
        cmocka_unit_test(test_topk_special_values),
        cmocka_unit_test(test_selective_flow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
