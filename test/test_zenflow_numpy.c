/*
 * test_zenflow_numpy.c: ZenFlow's CPU half (src/zero/zenflow_{select,sched,ref}.c) against a numpy transcription of
 * DeepSpeed's ZenFlow (scripts/zenflow_numpy.py, written from DeepSpeed's own files; its output is the committed
 * fixture test/fixtures/zenflow/numpy_case.json), on the CPU: one 2-D weight (3, 8) with topk_ratio 0.25 and one
 * 1-D weight (5), select_strategy "step" with select_interval 4, update_interval 2, full_warm_up_rounds 1,
 * 14 micro-steps of the fixture's gradients:
 *   - every micro-step's plan (selection, update boundary, selective step) equals the transcription's;
 *   - the selected columns at the end are the same;
 *   - the working weights and the CPU AdamW's fp32 master at the end agree with the transcription's float64 values
 *     within fp32 rounding (atol 2e-6, rtol 1e-5).
 */
#include "t5test.h"

#include <jansson.h>
#include <math.h>

#include "../src/base/common.h"
#include "../src/zero/zenflow_ref.h"
#include "../src/zero/zenflow_sched.h"
#include "../src/zero/zenflow_select.h"

static json_t* g_fix;

static json_t* fixture(void) {
    if (g_fix) return g_fix;
    char path[4096];
    snprintf(path, sizeof path, "%s/test/fixtures/zenflow/numpy_case.json", t5test_repo_dir());
    json_error_t e;
    g_fix = json_load_file(path, 0, &e);
    if (!g_fix) fail_msg("cannot load %s: %s (line %d)", path, e.text, e.line);
    return g_fix;
}

static double num(const json_t* o, const char* key) {
    const json_t* v = json_object_get(o, key);
    if (!json_is_number(v)) fail_msg("fixture: %s is not a number", key);
    return json_number_value(v);
}

// a JSON array of numbers, or of arrays of numbers (one matrix), flattened row-major into out[n]
static void flatten(const json_t* a, float* outf, double* outd, size_t n) {
    size_t k = 0;
    size_t i;
    const json_t* row;
    json_array_foreach(a, i, row) {
        if (json_is_array(row)) {
            size_t j;
            const json_t* x;
            json_array_foreach(row, j, x) {
                if (k >= n) fail_msg("fixture: more values than %zu", n);
                if (outf) outf[k] = (float)json_number_value(x);
                if (outd) outd[k] = json_number_value(x);
                k++;
            }
        } else {
            if (k >= n) fail_msg("fixture: more values than %zu", n);
            if (outf) outf[k] = (float)json_number_value(row);
            if (outd) outd[k] = json_number_value(row);
            k++;
        }
    }
    if (k != n) fail_msg("fixture: %zu values, expected %zu", k, n);
}

static double g_worst = 0.0;  // the largest error as a fraction of its tolerance

static void expect_close(const float* got, const double* want, size_t n, const char* what) {
    const double atol = 2e-6, rtol = 1e-5;
    for (size_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - want[i]), tol = atol + rtol * fabs(want[i]);
        g_worst = fmax(g_worst, err / tol);
        if (!(err <= tol)) fail_msg("%s[%zu]: %.9g, the transcription %.9g (err %.3g > tol %.3g)", what, i, got[i], want[i], err, tol);
    }
}

static void test_against_numpy(void** state) {
    (void)state;
    const json_t* f = fixture();
    const json_t* jo = json_object_get(f, "opts");
    ZenflowOpts o = zenflow_opts_default();
    o.topk_ratio = num(jo, "topk_ratio");
    assert_string_equal(json_string_value(json_object_get(jo, "select_strategy")), "step");
    o.select_strategy = ZENFLOW_SELECT_STEP;
    o.select_interval = (int64_t)num(jo, "select_interval");
    o.update_interval = (int64_t)num(jo, "update_interval");
    o.full_warm_up_rounds = (int64_t)num(jo, "full_warm_up_rounds");
    const float lr = (float)num(f, "lr"), wd = (float)num(f, "weight_decay"), eps = (float)num(f, "eps");
    const json_t* betas = json_object_get(f, "betas");
    const float b1 = (float)json_number_value(json_array_get(betas, 0)), b2 = (float)json_number_value(json_array_get(betas, 1));
    const json_t* shapes = json_object_get(f, "shapes");
    const int64_t R = json_integer_value(json_array_get(json_array_get(shapes, 0), 0));
    const int64_t C = json_integer_value(json_array_get(json_array_get(shapes, 0), 1));
    const int64_t N1 = json_integer_value(json_array_get(json_array_get(shapes, 1), 0));
    assert_true(R > 0 && C > 0 && N1 > 0 && R * C <= 64 && N1 <= 64);

    ZenflowSched s;
    char err[256];
    if (zenflow_sched_init(&s, &o, 0, 0, false, err, sizeof err)) fail_msg("%s", err);
    float w2[64], w1[64], g2[64], g1[64];
    const json_t* w0 = json_object_get(f, "w0");
    flatten(json_array_get(w0, 0), w2, NULL, (size_t)(R * C));
    flatten(json_array_get(w0, 1), w1, NULL, (size_t)N1);
    ZenflowRefTensor t2, t1;
    zenflow_ref_init(&t2, R, C, false, zenflow_select_count(C, o.topk_ratio, 2), w2, b1, b2, eps);
    zenflow_ref_init(&t1, 1, N1, true, 0, w1, b1, b2, eps);

    const json_t* grads = json_object_get(f, "grads");
    const json_t* plan = json_object_get(f, "plan");
    assert_int_equal(json_array_size(grads), json_array_size(plan));
    for (size_t m = 0; m < json_array_size(grads); m++) {
        const json_t* gs = json_array_get(grads, m);
        flatten(json_array_get(gs, 0), g2, NULL, (size_t)(R * C));
        flatten(json_array_get(gs, 1), g1, NULL, (size_t)N1);
        const ZenflowStepPlan p = zenflow_sched_begin(&s);
        const json_t* want = json_array_get(plan, m);
        if (p.select != json_is_true(json_object_get(want, "select")) ||
            p.update != json_is_true(json_object_get(want, "update")) ||
            p.selective != json_is_true(json_object_get(want, "selective")))
            fail_msg("micro-step %zu: plan select %d update %d selective %d, the transcription's %d %d %d", m, p.select,
                     p.update, p.selective, json_is_true(json_object_get(want, "select")),
                     json_is_true(json_object_get(want, "update")), json_is_true(json_object_get(want, "selective")));
        zenflow_ref_step(&t2, &p, g2, lr, wd, NULL, 0);
        zenflow_ref_step(&t1, &p, g1, lr, wd, NULL, 0);
    }
    const json_t* sel = json_array_get(json_object_get(f, "final_sel"), 0);
    assert_int_equal((int64_t)json_array_size(sel), t2.k);
    for (int64_t j = 0; j < t2.k; j++) assert_int_equal(t2.sel[j], json_integer_value(json_array_get(sel, (size_t)j)));
    double want2[64], want1[64];
    flatten(json_array_get(json_object_get(f, "final_work"), 0), NULL, want2, (size_t)(R * C));
    flatten(json_array_get(json_object_get(f, "final_work"), 1), NULL, want1, (size_t)N1);
    expect_close(t2.work, want2, (size_t)(R * C), "2-D work");
    expect_close(t1.work, want1, (size_t)N1, "1-D work");
    flatten(json_array_get(json_object_get(f, "final_master"), 0), NULL, want2, (size_t)(R * C));
    flatten(json_array_get(json_object_get(f, "final_master"), 1), NULL, want1, (size_t)N1);
    expect_close(t2.master, want2, (size_t)(R * C), "2-D master");
    expect_close(t1.master, want1, (size_t)N1, "1-D master");
    printf("# ZenFlow reference vs numpy transcription (%zu micro-steps): plans equal, selected columns equal, "
           "weights and master within tolerance, worst %.1f%% of tolerance\n",
           json_array_size(grads), 100.0 * g_worst);
    zenflow_ref_free(&t2);
    zenflow_ref_free(&t1);
    zenflow_sched_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_numpy),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_fix) json_decref(g_fix);
    return rc;
}
