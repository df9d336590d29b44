/*
 * test_gpu_t5_parity.c: the whole T5 model (forward, loss, backward) against HF transformers references
 * (test/fixtures/t5, made by scripts/make_t5_fixtures.py: tiny v1.0 ReLU/tied and v1.1 gated-gelu/untied
 * checkpoints, batch.json, reference loss / logits / every gradient in fp32 and under fp16/bf16 autocast).
 *
 * Tolerances, one table per precision (printed with every comparison):
 *   fp32:       loss relative error <= 1e-5; logits and every gradient relative L2 error <= 1e-4
 *   fp16, bf16: loss relative error <= 1e-2; logits and every gradient relative L2 error <= 5e-2
 * relative L2 error = ||ours - ref||_2 / ||ref||_2 (a zero reference needs ||ours|| <= 1e-6).
 * Each tensor prints its error and the % of the tolerance used, then the worst tensor.
 *
 * Also: determinism (same seed, dropout on -> bit-identical loss and gradients; another seed differs),
 * gradient checkpointing (bit-identical gradients to no checkpointing), the ZeroEngine contract (every unit
 * released and grad_ready once), and `t5train dump-grads` end to end (values and bad input).
 */
#include <math.h>

#include "t5test.h"

#include "../src/base/check.h"
#include "../cuda/elementwise.cuh"
#include "../model/params.h"
#include "../model/t5.h"
#include "../model/t5_config.h"
#include "../model/t5_weights.h"
#include "../src/base/common.h"
#include "../src/base/safetensors.h"
#include "../model/zero.h"

typedef struct {
    const char* name;
    double loss_rel, tensor_rel;
} Tolerance;

static const Tolerance tolerances[] = {
    {"fp32", 1e-5, 1e-4},
    {"fp16", 1e-2, 5e-2},
    {"bf16", 1e-2, 5e-2},
};

static const Tolerance* tolerance_for(DType dt) {
    switch (dt) {
        case DT_F32: return &tolerances[0];
        case DT_F16: return &tolerances[1];
        case DT_BF16: return &tolerances[2];
    }
    fail_msg("no tolerance for dtype %d", (int)dt);
    return NULL;
}

static char* fixture_path(const char* rel) {
    char* d = t5_path_join(t5test_repo_dir(), "test/fixtures/t5");
    char* p = t5_path_join(d, rel);
    free(d);
    return p;
}

static void require_fixtures(void) {
    char* p = fixture_path("batch.json");
    bool ok = t5_is_file(p);
    free(p);
    if (!ok) fail_msg("test/fixtures/t5/batch.json missing: run scripts/make_t5_fixtures.py");
}

// ---------------------------------------------------------------------------------------------
// a loaded model

typedef struct {
    T5Config cfg;
    ParamTable t;
    ZeroEngine* Z;
    T5Model* M;
    T5Batch batch;
    cudaStream_t s;
} Run;

static void run_open_g(Run* r, const char* model, DType dt, DType gdt, bool ckpt, float dropout) {
    memset(r, 0, sizeof *r);
    char err[4096];
    char* dir = fixture_path(model);
    char* cfgp = t5_path_join(dir, "config.json");
    char* wp = t5_path_join(dir, "model.safetensors");
    char* bp = fixture_path("batch.json");
    if (t5_config_load_json(cfgp, &r->cfg, err, sizeof err)) fail_msg("%s", err);
    if (params_build(&r->t, &r->cfg, err, sizeof err)) fail_msg("%s", err);
    CUDA_CHECK(cudaStreamCreate(&r->s));
    size_t* numel = malloc(sizeof(size_t) * r->t.num_units);
    const char** names = malloc(sizeof(char*) * r->t.num_units);
    for (int u = 0; u < r->t.num_units; u++) {
        numel[u] = r->t.units[u].numel;
        names[u] = r->t.units[u].name;
    }
    r->Z = zero_create_ex(0, dt, gdt, r->t.num_units, numel, names, err, sizeof err);
    if (!r->Z) fail_msg("%s", err);
    free(numel);
    free(names);
    if (t5_weights_load(r->Z, &r->t, wp, r->s, err, sizeof err)) fail_msg("%s", err);
    if (t5_batch_load_json(bp, &r->batch, err, sizeof err)) fail_msg("%s", err);
    T5ModelOptions opt = {.max_B = r->batch.B, .max_Ts = r->batch.Ts, .max_Tt = r->batch.Tt, .dtype = dt,
                          .gradient_checkpointing = ckpt, .keep_logits = true, .dropout_rate = dropout};
    r->M = t5_model_create(&r->t, r->Z, &opt, err, sizeof err);
    if (!r->M) fail_msg("%s", err);
    t5_model_set_train(r->M, dropout > 0);
    // exercise our shift-right: the fixture's decoder_input_ids are HF's _shift_right of the labels
    T5Batch b = r->batch;
    b.decoder_input_ids = NULL;
    if (t5_model_set_batch(r->M, &b, r->s, err, sizeof err)) fail_msg("%s", err);
    free(dir);
    free(cfgp);
    free(wp);
    free(bp);
}

// gradients in the run dtype, as training keeps them
static void run_open(Run* r, const char* model, DType dt, bool ckpt, float dropout) {
    run_open_g(r, model, dt, dt, ckpt, dropout);
}

static float run_step(Run* r, uint64_t seed) {
    // NaN in every gradient first: the backward must write each one (no clearing pass exists)
    fill(zero_flat_grad(r->Z), zero_grad_dtype(r->Z), zero_flat_numel(r->Z), NAN, r->s);
    zero_begin_grads(r->Z, r->s);
    t5_model_forward(r->M, true, 1.0f, seed, r->s);
    t5_model_backward(r->M, r->s);
    float loss = t5_model_loss(r->M, r->s);
    CUDA_CHECK(cudaStreamSynchronize(r->s));
    assert_true(zero_all_released(r->Z));
    assert_int_equal(zero_num_grads_ready(r->Z), r->t.num_units);
    return loss;
}

static float* run_grads(Run* r) {
    size_t n = zero_flat_numel(r->Z);
    float* g = malloc(n * sizeof(float));
    zero_grads_to_host_f32(r->Z, g, r->s);
    return g;
}

static const float* grad_of(Run* r, const float* flat, int pidx) {
    const ParamDesc* p = &r->t.params[pidx];
    return flat + zero_unit_offset(r->Z, p->unit) + p->offset;
}

static void run_close(Run* r) {
    t5_model_destroy(r->M);
    zero_destroy(r->Z);
    params_free(&r->t);
    t5_batch_free(&r->batch);
    CUDA_CHECK(cudaStreamDestroy(r->s));
}

// ---------------------------------------------------------------------------------------------
// comparison

static double rel_l2(const float* a, const float* ref, size_t n, double* ref_norm) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    *ref_norm = sqrt(den);
    if (den == 0) return sqrt(num) <= 1e-6 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

static int parse_rows(const char* s, int* rows, int cap) {
    int n = 0;
    while (s && *s && n < cap) {
        rows[n++] = (int)strtol(s, (char**)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

typedef struct {
    double worst_frac;
    char worst_name[128];
    int failures, checked;
} Tally;

static void tally(Tally* T, const char* name, double err, double tol, double ref_norm) {
    double frac = err / tol;
    T->checked++;
    bool ok = err <= tol;
    if (!ok) T->failures++;
    print_message("# %-4s %-75s rel %.3e (%6.1f%% of %.0e) |ref| %.3e\n", ok ? "OK" : "BAD", name, err, 100 * frac,
                  tol, ref_norm);
    if (frac > T->worst_frac || T->worst_name[0] == 0) {
        T->worst_frac = frac;
        snprintf(T->worst_name, sizeof T->worst_name, "%s", name);
    }
}

static void check_parity(const char* model, DType dt, DType gdt) {
    const Tolerance* tol = tolerance_for(dt);
    const char* P = dtype_name(dt);
    Run r;
    run_open_g(&r, model, dt, gdt, false, 0.0f);
    print_message("# %s %s, gradients in %s\n", model, P, dtype_name(gdt));
    float loss = run_step(&r, 1);
    float* g = run_grads(&r);

    char err[1024], key[256];
    char rel[64];
    snprintf(rel, sizeof rel, "ref_%s.safetensors", model);
    char* refp = fixture_path(rel);
    SafeTensors* st = NULL;
    if (safetensors_open(&st, refp, err, sizeof err)) fail_msg("%s", err);
    print_message("# %s %s: tolerance table '%s' (loss rel %.0e, tensors rel L2 %.0e)\n", model, P, tol->name,
                  tol->loss_rel, tol->tensor_rel);
    Tally T = {0};

    float ref_loss;
    snprintf(key, sizeof key, "%s.loss", P);
    if (safetensors_read(st, key, &ref_loss, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
    double lerr = fabs((double)loss - ref_loss) / fabs((double)ref_loss);
    print_message("# %s %s loss ours %.9g ref %.9g\n", model, P, loss, ref_loss);
    tally(&T, "loss", lerr, tol->loss_rel, fabs(ref_loss));

    // logits rows
    const int V = r.cfg.vocab_size;
    snprintf(key, sizeof key, "%s.logits_rows", P);
    int rows[64];
    int nr = parse_rows(safetensors_metadata(st, key), rows, 64);
    assert_true(nr > 0);
    size_t nlog = (size_t)r.batch.B * r.batch.Tt * V;
    void* lx = malloc(nlog * dtype_size(dt));
    float* logits = malloc(nlog * sizeof(float));
    CUDA_CHECK(cudaMemcpy(lx, t5_model_logits(r.M), nlog * dtype_size(dt), cudaMemcpyDeviceToHost));
    safetensors_convert(logits, DT_F32, lx, dt, nlog);
    float* ref = malloc((size_t)nr * V * sizeof(float));
    snprintf(key, sizeof key, "%s.logits", P);
    if (safetensors_read(st, key, ref, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
    for (int i = 0; i < nr; i++) {
        double rn;
        double e = rel_l2(logits + (size_t)rows[i] * V, ref + (size_t)i * V, (size_t)V, &rn);
        char nm[64];
        snprintf(nm, sizeof nm, "logits row %d", rows[i]);
        tally(&T, nm, e, tol->tensor_rel, rn);
    }
    free(ref);
    free(lx);
    free(logits);

    // gradients: every parameter; (V, D) matrices as selected rows in fp16/bf16
    int grows[40000];
    int ngr = parse_rows(safetensors_metadata(st, "grad_rows"), grows, 40000);
    for (int i = 0; i < r.t.num_params; i++) {
        const ParamDesc* p = &r.t.params[i];
        const float* ours = grad_of(&r, g, i);
        snprintf(key, sizeof key, "%s.grad.%s", P, p->name);
        double rn, e;
        if (safetensors_has(st, key)) {
            float* rg = malloc(p->numel * sizeof(float));
            if (safetensors_read(st, key, rg, DT_F32, p->shape, p->ndim, err, sizeof err)) fail_msg("%s", err);
            e = rel_l2(ours, rg, p->numel, &rn);
            free(rg);
        } else {
            snprintf(key, sizeof key, "%s.grad_rows.%s", P, p->name);
            if (!safetensors_has(st, key)) fail_msg("reference %s has no gradient for %s", refp, p->name);
            assert_true(ngr > 0);
            size_t Dm = (size_t)p->shape[1];
            float* rg = malloc((size_t)ngr * Dm * sizeof(float));
            float* sel = malloc((size_t)ngr * Dm * sizeof(float));
            if (safetensors_read(st, key, rg, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
            for (int k = 0; k < ngr; k++) memcpy(sel + (size_t)k * Dm, ours + (size_t)grows[k] * Dm, Dm * sizeof(float));
            e = rel_l2(sel, rg, (size_t)ngr * Dm, &rn);
            free(rg);
            free(sel);
        }
        char nm[160];
        snprintf(nm, sizeof nm, "grad %s", p->name);
        tally(&T, nm, e, tol->tensor_rel, rn);
    }
    print_message("# %s %s: %d tensors checked, %d over tolerance; worst %s at %.1f%% of tolerance\n", model, P,
                  T.checked, T.failures, T.worst_name, 100 * T.worst_frac);
    safetensors_close(st);
    free(refp);
    free(g);
    run_close(&r);
    if (T.failures) fail_msg("%s %s: %d tensors over tolerance (worst %s)", model, P, T.failures, T.worst_name);
}

static void test_parity_v10_fp32(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_parity("tiny_v10", DT_F32, DT_F32); }
static void test_parity_v11_fp32(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_parity("tiny_v11", DT_F32, DT_F32); }
static void test_parity_v10_fp16(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_parity("tiny_v10", DT_F16, DT_F16); }
static void test_parity_v11_fp16(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_parity("tiny_v11", DT_F16, DT_F16); }
static void test_parity_v10_bf16(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_parity("tiny_v10", DT_BF16, DT_BF16); }
static void test_parity_v11_bf16(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_parity("tiny_v11", DT_BF16, DT_BF16); }
// data_types.grad_accum_dtype "fp32": 16-bit weights, fp32 gradient buffers
static void test_parity_v10_fp16_g32(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_parity("tiny_v10", DT_F16, DT_F32); }
static void test_parity_v11_bf16_g32(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_parity("tiny_v11", DT_BF16, DT_F32); }

// ---------------------------------------------------------------------------------------------
// determinism and checkpointing (dropout on)

static void compare_runs(const char* what, Run* a, Run* b, float la, float lb, bool expect_equal) {
    float* ga = run_grads(a);
    float* gb = run_grads(b);
    size_t n = zero_flat_numel(a->Z);
    bool same = memcmp(&la, &lb, sizeof la) == 0 && memcmp(ga, gb, n * sizeof(float)) == 0;
    size_t ndiff = 0;
    for (size_t i = 0; i < n; i++) ndiff += memcmp(&ga[i], &gb[i], sizeof(float)) != 0;
    print_message("# %s: loss %.9g vs %.9g, %zu of %zu gradient values differ\n", what, la, lb, ndiff, n);
    free(ga);
    free(gb);
    if (expect_equal && !same) fail_msg("%s: not bit-identical", what);
    if (!expect_equal && same) fail_msg("%s: identical but should differ", what);
}

static void check_determinism(const char* model, DType dt) {
    Run a;
    run_open(&a, model, dt, false, 0.1f);
    float l1 = run_step(&a, 42);
    float* g1 = run_grads(&a);
    float l2 = run_step(&a, 42);  // same model object, same seed, grads re-zeroed
    float* g2 = run_grads(&a);
    size_t n = zero_flat_numel(a.Z);
    print_message("# %s %s dropout 0.1 seed 42 twice: loss %.9g %.9g\n", model, dtype_name(dt), l1, l2);
    assert_memory_equal(&l1, &l2, sizeof l1);
    assert_memory_equal(g1, g2, n * sizeof(float));
    // a fresh model object gives the same bits too
    Run b;
    run_open(&b, model, dt, false, 0.1f);
    float l3 = run_step(&b, 42);
    compare_runs("fresh model, same seed", &a, &b, l2, l3, true);
    // another seed: dropout really is applied
    float l4 = run_step(&b, 43);
    compare_runs("seed 42 vs 43", &a, &b, l2, l4, false);
    // eval mode: no dropout, differs from the train-mode loss
    free(g1);
    free(g2);
    run_close(&a);
    run_close(&b);
}

static void test_determinism_fp32(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_determinism("tiny_v11", DT_F32); }
static void test_determinism_bf16(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_determinism("tiny_v10", DT_BF16); }

static void check_ckpt(const char* model, DType dt) {
    Run a, b;
    run_open(&a, model, dt, false, 0.1f);
    run_open(&b, model, dt, true, 0.1f);
    float la = run_step(&a, 7), lb = run_step(&b, 7);
    char what[128];
    snprintf(what, sizeof what, "%s %s gradient checkpointing on vs off", model, dtype_name(dt));
    compare_runs(what, &a, &b, la, lb, true);
    run_close(&a);
    run_close(&b);
}

static void test_ckpt_fp32(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_ckpt("tiny_v11", DT_F32); check_ckpt("tiny_v10", DT_F32); }
static void test_ckpt_fp16(void** s) { (void)s; T5_REQUIRE_GPU(); require_fixtures(); check_ckpt("tiny_v11", DT_F16); }

// ---------------------------------------------------------------------------------------------
// t5train dump-grads end to end

static void test_dump_grads_cli(void** s) {
    (void)s;
    T5_REQUIRE_GPU();
    require_fixtures();
    char out[16384], err[1024];
    char* mdir = fixture_path("tiny_v11");
    char* bp = fixture_path("batch.json");
    char* refp = fixture_path("ref_tiny_v11.safetensors");
    char* op = t5_path_join(t5test_tmpdir(), "grads.safetensors");
    int rc = t5test_run(out, sizeof out, "%s dump-grads --model %s --batch %s --out %s --dtype fp32", t5test_bin(),
                        mdir, bp, op);
    if (rc != 0) fail_msg("dump-grads exited %d:\n%s", rc, out);
    SafeTensors *mine = NULL, *ref = NULL;
    if (safetensors_open(&mine, op, err, sizeof err)) fail_msg("%s", err);
    if (safetensors_open(&ref, refp, err, sizeof err)) fail_msg("%s", err);
    float l, rl;
    if (safetensors_read(mine, "loss", &l, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
    if (safetensors_read(ref, "fp32.loss", &rl, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
    print_message("# dump-grads loss %.9g ref %.9g\n", l, rl);
    assert_true(fabs((double)l - rl) <= 1e-5 * fabs((double)rl));
    const char* name = "decoder.block.2.layer.1.EncDecAttention.q.weight";
    const SafeTensorInfo* info;
    if (safetensors_info(mine, name, &info, err, sizeof err)) fail_msg("%s", err);
    float* a = malloc(info->numel * 4);
    float* b = malloc(info->numel * 4);
    char key[256];
    snprintf(key, sizeof key, "fp32.grad.%s", name);
    if (safetensors_read(mine, name, a, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
    if (safetensors_read(ref, key, b, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
    double rn;
    double e = rel_l2(a, b, info->numel, &rn);
    print_message("# dump-grads %s rel L2 %.3e\n", name, e);
    assert_true(e <= 1e-4);
    if (safetensors_info(mine, "logits", &info, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(info->ndim, 3);
    assert_int_equal(info->shape[2], 32128);
    free(a);
    free(b);
    safetensors_close(mine);
    safetensors_close(ref);

    // bad input: clear one-line errors, non-zero exits
    rc = t5test_run(out, sizeof out, "%s dump-grads --model %s --batch /nonexistent.json --out %s", t5test_bin(), mdir, op);
    assert_int_equal(rc, 2);
    assert_contains(out, "/nonexistent.json");
    char* bad = t5_path_join(t5test_tmpdir(), "bad.json");
    t5test_write_file(bad, "{\"input_ids\": [[5, 6, 1]], \"labels\": [[7, 1]], \"lables\": [[1]]}");
    rc = t5test_run(out, sizeof out, "%s dump-grads --model %s --batch %s --out %s", t5test_bin(), mdir, bad, op);
    assert_int_equal(rc, 2);
    assert_contains(out, "unknown key \"lables\"");
    t5test_write_file(bad, "{\"input_ids\": [[5, 6, 1], [5, 1]], \"labels\": [[7, 1], [7, 1]]}");
    rc = t5test_run(out, sizeof out, "%s dump-grads --model %s --batch %s --out %s", t5test_bin(), mdir, bad, op);
    assert_int_equal(rc, 2);
    assert_contains(out, "row 1");
    t5test_write_file(bad, "{\"input_ids\": [[5, 99999, 1]], \"labels\": [[7, 1]]}");
    rc = t5test_run(out, sizeof out, "%s dump-grads --model %s --batch %s --out %s", t5test_bin(), mdir, bad, op);
    assert_int_equal(rc, 2);
    assert_contains(out, "input_ids[0][1] = 99999");
    rc = t5test_run(out, sizeof out, "%s dump-grads --model %s --batch %s --out %s --dtype fp8", t5test_bin(), mdir, bp, op);
    assert_int_equal(rc, 2);
    assert_contains(out, "fp8");
    rc = t5test_run(out, sizeof out, "%s dump-grads --model %s --batch %s --out %s --dtype bf16 --grad-dtype fp16",
                    t5test_bin(), mdir, bp, op);
    assert_int_equal(rc, 2);
    assert_contains(out, "--grad-dtype 'fp16'");
    free(bad);
    free(mdir);
    free(bp);
    free(refp);
    free(op);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_v10_fp32), cmocka_unit_test(test_parity_v11_fp32),
        cmocka_unit_test(test_parity_v10_fp16), cmocka_unit_test(test_parity_v11_fp16),
        cmocka_unit_test(test_parity_v10_bf16), cmocka_unit_test(test_parity_v11_bf16),
        cmocka_unit_test(test_parity_v10_fp16_g32), cmocka_unit_test(test_parity_v11_bf16_g32),
        cmocka_unit_test(test_determinism_fp32), cmocka_unit_test(test_determinism_bf16),
        cmocka_unit_test(test_ckpt_fp32),       cmocka_unit_test(test_ckpt_fp16),
        cmocka_unit_test(test_dump_grads_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
