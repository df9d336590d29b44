/*
 * test_zenflow.c: ZenFlow's CPU half (src/zero/zenflow_select.c, zenflow_sched.c, zenflow_ref.c; docs/zero.md
 * "ZenFlow"), on the CPU:
 *   - the number of selected columns (stage 1/2 truncation, may be 0; stage 3 at least 1; Python's int() of the
 *     double product);
 *   - column importance (sum over the rows of |g|) and top-k on hand-worked matrices: ties to the lower column,
 *     NaN first, the result ascending;
 *   - the option checks (every rule, each with the key it names);
 *   - the boundaries for each strategy, written out by hand (step, epoch, auto, warm-up, an update forced early
 *     by a selection boundary), and update_interval "auto" on a constructed sequence of gradient sums, in
 *     ZenFlow's own order (updates every 3rd step) and in DeepSpeed >= 0.18.3's (never);
 *   - the reference step: topk_ratio 1 with update_interval 1, and any 1-D tensor, equal plain AdamW bit for bit;
 *     topk_ratio 0 equals AdamW on the summed gradient at the boundaries with step id = micro-step + 1 (bit for
 *     bit); a mixed case against an independent fp64 transcription of DeepSpeed's algorithm in this file;
 *   - the checkpoint's host side (zenflow_state.c): the schedule and the selective AdamW's step state saved mid-run
 *     (mid-interval, update_interval "auto" with its arrays) and restored into a fresh schedule continue with the
 *     same plans, sums and bias corrections; every header / tensor check with its one line; the blob sizes; a
 *     streamed blob routed to its regions under any cut into pieces.
 */
#include "t5test.h"

#include <math.h>

#include "../src/base/common.h"
#include "../src/zero/cpu_adam.h"
#include "../src/zero/zenflow_ref.h"
#include "../src/zero/zenflow_sched.h"
#include "../src/zero/zenflow_select.h"
#include "../src/zero/zenflow_state.h"
#include "../model/params.h"
#include "../model/t5.h"
#include "../model/t5_config.h"
#include "../src/zero/estimate.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float rng_normal(void) {  // xorshift64* + Box-Muller
    float u[2];
    for (int i = 0; i < 2; i++) {
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        u[i] = (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) * (1.0f / 16777216.0f);
    }
    return sqrtf(-2.0f * logf(u[0] + 1e-7f)) * cosf(6.2831853f * u[1]);
}

// ---------------------------------------------------------------------------------------------
// selection

static void test_select_count(void** state) {
    (void)state;
    assert_int_equal(zenflow_select_count(10, 0.1, 2), 1);
    assert_int_equal(zenflow_select_count(9, 0.1, 2), 0);    // int(0.9): no column at stages 1 and 2
    assert_int_equal(zenflow_select_count(9, 0.1, 3), 1);    // max(1, .) at stage 3
    assert_int_equal(zenflow_select_count(100, 0.29, 1), 28);  // 0.29 * 100 = 28.999999999999996 in double
    assert_int_equal(zenflow_select_count(7, 1.0, 2), 7);
    assert_int_equal(zenflow_select_count(7, 0.0, 2), 0);
    assert_int_equal(zenflow_select_count(7, 0.0, 3), 1);
    assert_int_equal(zenflow_select_count(512, 0.05, 2), 25);  // 25.6
    assert_int_equal(zenflow_select_count(0, 0.5, 3), 0);
}

static void expect_topk(const float* s, int64_t C, int64_t k, const int64_t* want) {
    int64_t got[16];
    zenflow_select_topk(s, C, k, got);
    for (int64_t i = 0; i < k; i++)
        if (got[i] != want[i]) fail_msg("k=%lld: position %lld is column %lld, expected %lld", (long long)k,
                                        (long long)i, (long long)got[i], (long long)want[i]);
}

static void test_importance_and_topk(void** state) {
    (void)state;
    // g (R=3, C=4), row-major; columns' sums of |g|: 2.5, 3, 4, 4
    const float g[12] = {1, -2, 0, 0.5f, -1, 1, 3, 0.5f, 0.5f, 0, -1, -3};
    float s[4];
    zenflow_column_importance(g, 3, 4, s);
    const float want_s[4] = {2.5f, 3, 4, 4};
    for (int c = 0; c < 4; c++)
        if (s[c] != want_s[c]) fail_msg("importance[%d] = %g, expected %g", c, s[c], want_s[c]);
    expect_topk(s, 4, 1, (int64_t[]){2});  // the tie 2 / 3 goes to the lower column
    expect_topk(s, 4, 2, (int64_t[]){2, 3});
    expect_topk(s, 4, 3, (int64_t[]){1, 2, 3});
    expect_topk(s, 4, 4, (int64_t[]){0, 1, 2, 3});
    // ascending output whatever the rank order
    const float s2[5] = {1, 9, 3, 7, 0};
    expect_topk(s2, 5, 2, (int64_t[]){1, 3});
    expect_topk(s2, 5, 3, (int64_t[]){1, 2, 3});
    // NaN ranks first (torch.topk)
    const float s3[3] = {1, NAN, 3};
    expect_topk(s3, 3, 1, (int64_t[]){1});
    expect_topk(s3, 3, 2, (int64_t[]){1, 2});
    // k = 0 writes nothing
    int64_t none[1] = {-7};
    zenflow_select_topk(s2, 5, 0, none);
    assert_int_equal(none[0], -7);
}

// ---------------------------------------------------------------------------------------------
// options

static void expect_opts_err(ZenflowOpts o, const char* want) {
    char err[512] = "";
    int rc = zenflow_opts_check(&o, err, sizeof err);
    if (rc != T5_EXIT_USAGE) fail_msg("accepted (rc %d), expected an error with '%s'", rc, want);
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
}

static void test_opts_check(void** state) {
    (void)state;
    char err[512] = "";
    ZenflowOpts d = zenflow_opts_default();
    assert_int_equal(zenflow_opts_check(&d, err, sizeof err), 0);
    assert_true(d.topk_ratio == 0.1 && d.auto_ratio == 0.99 && d.pt_reserved_cores_perc == 0.5);
    assert_int_equal(d.select_interval, ZENFLOW_AUTO);
    assert_int_equal(d.update_interval, ZENFLOW_AUTO);
    ZenflowOpts o = d;
    o.topk_ratio = 1.5;
    expect_opts_err(o, "topk_ratio 1.5 is outside [0, 1]");
    o = d, o.auto_ratio = -0.1;
    expect_opts_err(o, "auto_ratio");
    o = d, o.pt_reserved_cores_perc = 2;
    expect_opts_err(o, "pt_reserved_cores_perc");
    o = d, o.full_warm_up_rounds = -1;
    expect_opts_err(o, "full_warm_up_rounds -1 is negative");
    o = d, o.select_interval = 4;  // strategy auto with a number: DeepSpeed raises
    expect_opts_err(o, "select_interval 4 with select_strategy \"auto\"");
    o = d, o.select_strategy = ZENFLOW_SELECT_STEP;  // interval still "auto"
    expect_opts_err(o, "select_interval \"auto\" needs select_strategy \"auto\"");
    o = d, o.select_strategy = ZENFLOW_SELECT_STEP, o.select_interval = -2;
    expect_opts_err(o, "select_interval -2 is negative");
    o = d, o.update_interval = 0;
    expect_opts_err(o, "update_interval 0 must be at least 1");
    o = d, o.select_strategy = ZENFLOW_SELECT_STEP, o.select_interval = 2, o.update_interval = 4;
    expect_opts_err(o, "select_interval 2 is below update_interval 4");
    o.select_interval = 4;  // equal is fine
    assert_int_equal(zenflow_opts_check(&o, err, sizeof err), 0);
    o.select_interval = 0;  // 0: select once, no comparison
    assert_int_equal(zenflow_opts_check(&o, err, sizeof err), 0);
    o = d, o.topk_ratio = 0;  // update_interval auto divides by topk_ratio
    expect_opts_err(o, "update_interval \"auto\" needs topk_ratio strictly between 0 and 1");
    o = d, o.topk_ratio = 1;
    expect_opts_err(o, "update_interval \"auto\" needs topk_ratio");
    o.update_interval = 3;  // a fixed interval takes topk_ratio 1
    assert_int_equal(zenflow_opts_check(&o, err, sizeof err), 0);
    // epoch: select_interval x steps per epoch against update_interval, known at init only
    ZenflowSched s;
    o = d, o.select_strategy = ZENFLOW_SELECT_EPOCH, o.select_interval = 1, o.update_interval = 8;
    assert_int_equal(zenflow_sched_init(&s, &o, 5, 0, false, err, sizeof err), T5_EXIT_USAGE);
    if (!strstr(err, "every 5 micro-steps, below update_interval 8")) fail_msg("epoch check: %s", err);
    assert_int_equal(zenflow_sched_init(&s, &o, 8, 0, false, err, sizeof err), 0);
    zenflow_sched_free(&s);
    assert_int_equal(zenflow_sched_init(&s, &o, 0, 0, false, err, sizeof err), 0);  // unknown epoch: S = 0
    assert_int_equal(s.S, 0);
    zenflow_sched_free(&s);
}

// ---------------------------------------------------------------------------------------------
// the schedule

// runs `steps` micro-steps and compares the sets of update / select / warm-up steps with hand-written lists
// (each terminated by -1)
static void expect_schedule(ZenflowOpts o, int64_t steps_per_epoch, int steps, const int* upd, const int* sel,
                            const char* what) {
    ZenflowSched s;
    char err[256];
    if (zenflow_sched_init(&s, &o, steps_per_epoch, 0, false, err, sizeof err)) fail_msg("%s: %s", what, err);
    int iu = 0, is = 0;
    for (int m = 0; m < steps; m++) {
        ZenflowStepPlan p = zenflow_sched_begin(&s);
        assert_int_equal(p.micro_step, m);
        assert_int_equal(p.cpu_step, m + 1);
        const bool want_u = upd[iu] == m, want_s = sel[is] == m;
        if (p.update != want_u) fail_msg("%s: micro-step %d update %d, expected %d", what, m, p.update, want_u);
        if (p.select != want_s) fail_msg("%s: micro-step %d select %d, expected %d", what, m, p.select, want_s);
        if (p.warm_up != (m < o.full_warm_up_rounds) || p.selective == p.warm_up)
            fail_msg("%s: micro-step %d warm_up %d selective %d", what, m, p.warm_up, p.selective);
        if (p.sync_master != (p.select && m != 0)) fail_msg("%s: micro-step %d sync_master", what, m);
        iu += want_u;
        is += want_s;
    }
    zenflow_sched_free(&s);
}

static void test_schedule_fixed(void** state) {
    (void)state;
    ZenflowOpts o = zenflow_opts_default();
    // step strategy, every 8; update every 4: n = 4, 8, 12, 16; selections at m = 0 (end of warm-up), 8, 16
    o.select_strategy = ZENFLOW_SELECT_STEP, o.select_interval = 8, o.update_interval = 4;
    expect_schedule(o, 0, 18, (int[]){3, 7, 11, 15, -1}, (int[]){0, 8, 16, -1}, "step 8 / 4");
    // warm-up 3, update 2, select once (epoch without a known epoch): n = 1, 2 (< W), 3, 5, 7, 9; select m = 3
    o = zenflow_opts_default();
    o.select_strategy = ZENFLOW_SELECT_EPOCH, o.select_interval = 1, o.update_interval = 2, o.full_warm_up_rounds = 3;
    expect_schedule(o, 0, 10, (int[]){0, 1, 2, 4, 6, 8, -1}, (int[]){3, -1}, "warm-up 3 / 2");
    // epoch: 2 epochs of 5 micro-steps = every 10; update every 5
    o = zenflow_opts_default();
    o.select_strategy = ZENFLOW_SELECT_EPOCH, o.select_interval = 2, o.update_interval = 5;
    expect_schedule(o, 5, 21, (int[]){4, 9, 14, 19, -1}, (int[]){0, 10, 20, -1}, "epoch 2x5 / 5");
    // a selection boundary forces an update off the interval's grid: W 1, k 3, S 6:
    // (n - 1) % 3 == 0 -> n = 1, 4, 7, 10, 13; n % 6 == 0 -> n = 6, 12; selections m = 1 (m == W), 6, 12
    o = zenflow_opts_default();
    o.select_strategy = ZENFLOW_SELECT_STEP, o.select_interval = 6, o.update_interval = 3, o.full_warm_up_rounds = 1;
    expect_schedule(o, 0, 14, (int[]){0, 3, 5, 6, 9, 11, 12, -1}, (int[]){1, 6, 12, -1}, "W1 / 3 / step 6");
    // select_strategy auto = every epoch (select_interval 1 x steps per epoch), update every 2
    o = zenflow_opts_default();
    o.update_interval = 2;
    expect_schedule(o, 4, 9, (int[]){1, 3, 5, 7, -1}, (int[]){0, 4, 8, -1}, "auto strategy / 2");
    // update_interval 1: every step
    o.update_interval = 1;
    expect_schedule(o, 0, 4, (int[]){0, 1, 2, 3, -1}, (int[]){0, -1}, "update 1");
}

// update_interval "auto" on constructed sums: tensor 0 has 3 in its selected columns and 9 elsewhere every step,
// tensor 1 has 2 and 9; topk_ratio 0.1 makes the divisors 1 and 9, so `non` grows by 1 a step and `avg` is 3 and 2:
// tensor 1 catches up after 2 steps, tensor 0 after 3; auto_ratio 1 waits for both: the 3rd step asks, the 4th
// is an update boundary (and starts counting again), so updates land at m = 3, 6, 9, ...
static void run_auto(bool prologue_first, int steps, int warm, const int* upd) {
    ZenflowOpts o = zenflow_opts_default();
    o.auto_ratio = 1.0;
    o.full_warm_up_rounds = warm;
    ZenflowSched s;
    char err[256];
    if (zenflow_sched_init(&s, &o, 0, 2, prologue_first, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.threshold, 2);
    int iu = 0;
    for (int m = 0; m < steps; m++) {
        ZenflowStepPlan p = zenflow_sched_begin(&s);
        const bool want = upd[iu] == m;
        if (p.update != want)
            fail_msg("auto (%s order, W %d): micro-step %d update %d, expected %d", prologue_first ? ">= 0.18.3" : "0.17.5",
                     warm, m, p.update, want);
        iu += want;
        if (p.selective) {
            zenflow_sched_observe(&s, 0, 12, 3);
            zenflow_sched_observe(&s, 1, 11, 2);
        }
    }
    zenflow_sched_free(&s);
}

static void test_schedule_auto(void** state) {
    (void)state;
    run_auto(false, 13, 0, (int[]){3, 6, 9, 12, -1});
    // DeepSpeed >= 0.18.3 clears the flag before it is read: no auto boundary at all
    run_auto(true, 13, 0, (int[]){-1});
    // warm-up 2: updates at n <= 2; u counted 1, 2 through warm-up, so at m = 2 (u 3) avg is 3/3 = 1 for tensor 0
    // and 2/3 for tensor 1 while non is 1 for both: both ask at once -> m = 3 updates; then every 3rd step
    run_auto(false, 10, 2, (int[]){0, 1, 3, 6, 9, -1});
    // auto_ratio 0.99 of 2 tensors: int(1.98) = 1 is enough; tensor 1 asks at its 2nd step (m = 1) -> m = 2
    // updates; from then on tensor 1 asks every 2nd step
    ZenflowOpts o = zenflow_opts_default();
    ZenflowSched s;
    char err[256];
    if (zenflow_sched_init(&s, &o, 0, 2, false, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.threshold, 1);
    const int want[] = {2, 4, 6, 8, -1};
    int iu = 0;
    for (int m = 0; m < 9; m++) {
        ZenflowStepPlan p = zenflow_sched_begin(&s);
        if (p.update != (want[iu] == m)) fail_msg("auto_ratio 0.99: micro-step %d update %d", m, p.update);
        iu += want[iu] == m;
        zenflow_sched_observe(&s, 0, 12, 3);
        zenflow_sched_observe(&s, 1, 11, 2);
    }
    zenflow_sched_free(&s);
}

// ---------------------------------------------------------------------------------------------
// the reference step

#define LR 1e-3f
#define WD 0.01f
#define B1 0.9f
#define B2 0.999f
#define EPS 1e-8f

static void fill_normal(float* x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal();
}

static void expect_same_bits(const float* a, const float* b, size_t n, const char* what, int step) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0)
            fail_msg("%s, micro-step %d: element %zu is %.9g, expected %.9g", what, step, i, a[i], b[i]);
}

// plain AdamW (the same cpu_adam arithmetic) over n elements, one step
typedef struct {
    CpuAdam a;
    float *p, *m, *v;
} Plain;

static void plain_init(Plain* q, const float* w0, size_t n) {
    cpu_adam_init(&q->a, B1, B2, EPS, true);
    q->p = malloc_check(n * 4);
    memcpy(q->p, w0, n * 4);
    q->m = calloc_check(n, 4);
    q->v = calloc_check(n, 4);
}
static void plain_step(Plain* q, int64_t step, const float* g, size_t n) {
    cpu_adam_begin_step(&q->a, step, B1, B2);
    cpu_adam_update(&q->a, LR, WD, q->p, q->m, q->v, g, DT_F32, 1.0f, NULL, DT_F32, n);
}
static void plain_free(Plain* q) {
    free(q->p);
    free(q->m);
    free(q->v);
}

// runs `steps` micro-steps of a tensor (R, C) under `o` beside plain AdamW on the same gradients and requires the
// working weights (and, with check_master, the master) to be the same bits every step
static void expect_plain_adamw(ZenflowOpts o, int64_t R, int64_t C, bool is_1d, int steps, bool check_master,
                               const char* what) {
    enum { MAXN = 64 };
    const size_t N = (size_t)(R * C);
    assert_true(N <= MAXN);
    ZenflowSched s;
    char err[256];
    if (zenflow_sched_init(&s, &o, 0, is_1d ? 0 : 1, false, err, sizeof err)) fail_msg("%s: %s", what, err);
    float w0[MAXN], g[MAXN];
    fill_normal(w0, N, 0.5f);
    ZenflowRefTensor t;
    zenflow_ref_init(&t, R, C, is_1d, zenflow_select_count(C, o.topk_ratio, 2), w0, B1, B2, EPS);
    Plain q;
    plain_init(&q, w0, N);
    for (int m = 0; m < steps; m++) {
        fill_normal(g, N, 1e-2f);
        ZenflowStepPlan p = zenflow_sched_begin(&s);
        zenflow_ref_step(&t, &p, g, LR, WD, NULL, 0);
        plain_step(&q, m + 1, g, N);
        expect_same_bits(t.work, q.p, N, what, m);
        if (check_master) expect_same_bits(t.master, q.p, N, what, m);
    }
    zenflow_ref_free(&t);
    plain_free(&q);
    zenflow_sched_free(&s);
}

// topk_ratio 1 and update_interval 1: every column is the selective AdamW's, every step (the CPU's result is
// dropped each step, and equals it): plain AdamW, bit for bit, master too
static void test_ref_topk1_is_adamw(void** state) {
    (void)state;
    ZenflowOpts o = zenflow_opts_default();
    o.topk_ratio = 1.0, o.update_interval = 1;
    assert_int_equal(zenflow_select_count(5, 1.0, 2), 5);
    expect_plain_adamw(o, 3, 5, false, 7, true, "topk 1, update 1: work and master vs AdamW");
}

// a 1-D tensor belongs to the selective AdamW every step whatever the interval: plain AdamW, bit for bit
static void test_ref_1d_is_adamw(void** state) {
    (void)state;
    ZenflowOpts o = zenflow_opts_default();
    o.update_interval = 4;
    expect_plain_adamw(o, 1, 37, true, 9, false, "1-D, update 4: work vs AdamW");
}

// topk_ratio 0 at stage 2: no column selected; the working weights move only at the boundaries n = 3, 6, 9, by
// AdamW on the interval's summed gradient with step id 3, 6, 9 (DeepSpeed's micro-step count)
static void test_ref_topk0_is_delayed_adamw(void** state) {
    (void)state;
    enum { R = 4, C = 3, N = R * C, K = 3, STEPS = 9 };
    ZenflowOpts o = zenflow_opts_default();
    o.topk_ratio = 0.0, o.update_interval = K;
    ZenflowSched s;
    char err[256];
    if (zenflow_sched_init(&s, &o, 0, 1, false, err, sizeof err)) fail_msg("%s", err);
    float w0[N], g[N], sum[N] = {0}, before[N];
    fill_normal(w0, N, 0.5f);
    ZenflowRefTensor t;
    zenflow_ref_init(&t, R, C, false, zenflow_select_count(C, 0.0, 2), w0, B1, B2, EPS);
    assert_int_equal(t.k, 0);
    Plain q;
    plain_init(&q, w0, N);
    for (int m = 0; m < STEPS; m++) {
        fill_normal(g, N, 1e-2f);
        for (int i = 0; i < N; i++) sum[i] += g[i];
        memcpy(before, t.work, sizeof before);
        ZenflowStepPlan p = zenflow_sched_begin(&s);
        zenflow_ref_step(&t, &p, g, LR, WD, NULL, 0);
        if ((m + 1) % K == 0) {
            assert_true(p.update);
            plain_step(&q, m + 1, sum, N);
            memset(sum, 0, sizeof sum);
            expect_same_bits(t.work, q.p, N, "boundary: work vs AdamW(sum, step n)", m);
        } else {
            assert_false(p.update);
            expect_same_bits(t.work, before, N, "between boundaries the work is unchanged", m);
        }
    }
    zenflow_ref_free(&t);
    plain_free(&q);
    zenflow_sched_free(&s);
}

/*
 * An independent fp64 transcription of DeepSpeed's ZenFlow for one 2-D tensor (zenflow_stage_1_and_2.py,
 * ZenFlowSelectiveAdamW, ZenFlowCPUAdam) written from the Python, not from zenflow_ref.c: full-size masks instead
 * of gathered columns, torch's AdamW formula (p *= 1 - lr wd; denom = sqrt(v) / sqrt(1 - b2^t) + eps), the
 * schedule's formulas inline and selection by repeated argmax.
 */
enum { XR = 3, XC = 6, XN = XR * XC };
typedef struct {
    double work[XN], master[XN], m[XN], v[XN], acc[XN];
    double sm[XN], sv[XN];  // the selective state, full size, used where mask is set
    bool mask[XC];
    int64_t sel_steps;
} Indep;

static void indep_adamw(double* p, double* m, double* v, const double* g, int64_t t, const bool* only) {
    const double bc1 = 1 - pow(B1, (double)t), bc2 = 1 - pow(B2, (double)t);
    for (int i = 0; i < XN; i++) {
        if (only && !only[i % XC]) continue;
        p[i] *= 1 - (double)LR * WD;
        m[i] = B1 * m[i] + (1 - (double)B1) * g[i];
        v[i] = B2 * v[i] + (1 - (double)B2) * g[i] * g[i];
        p[i] -= LR / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + EPS);
    }
}

static void indep_step(Indep* x, int64_t mstep, const float* gf, int64_t k, int64_t S, int64_t K, int64_t W) {
    const int64_t n = mstep + 1;
    double g[XN];
    for (int i = 0; i < XN; i++) g[i] = gf[i];
    const bool select = mstep - W >= 0 && (mstep - W == 0 || (S != 0 && mstep % S == 0));
    const bool update = n < W || (n - W) % K == 0 || (S != 0 && n % S == 0);
    if (select) {
        if (mstep != 0) memcpy(x->master, x->work, sizeof x->master);
        memset(x->sm, 0, sizeof x->sm);
        memset(x->sv, 0, sizeof x->sv);
        double imp[XC] = {0};
        for (int i = 0; i < XN; i++) imp[i % XC] += fabs(g[i]);
        memset(x->mask, 0, sizeof x->mask);
        for (int64_t j = 0; j < k; j++) {
            int best = -1;
            for (int c = 0; c < XC; c++)
                if (!x->mask[c] && (best < 0 || imp[c] > imp[best])) best = c;
            x->mask[best] = true;
        }
    }
    for (int i = 0; i < XN; i++) x->acc[i] += g[i];
    double kept[XN];
    if (mstep >= W) {
        if (update) memcpy(kept, x->work, sizeof kept);
        else indep_adamw(x->work, x->sm, x->sv, g, ++x->sel_steps, x->mask);
    }
    if (update) {
        indep_adamw(x->master, x->m, x->v, x->acc, n, NULL);
        memcpy(x->work, x->master, sizeof x->work);
        memset(x->acc, 0, sizeof x->acc);
        if (mstep >= W) {
            for (int i = 0; i < XN; i++)
                if (x->mask[i % XC]) x->work[i] = kept[i];
            indep_adamw(x->work, x->sm, x->sv, g, ++x->sel_steps, x->mask);
        }
    }
}

static void test_ref_mixed_vs_independent(void** state) {
    (void)state;
    const int64_t K = 2, S = 4, W = 1, STEPS = 13;
    const double topk = 0.5;
    ZenflowOpts o = zenflow_opts_default();
    o.topk_ratio = topk, o.select_strategy = ZENFLOW_SELECT_STEP, o.select_interval = S, o.update_interval = K;
    o.full_warm_up_rounds = W;
    ZenflowSched s;
    char err[256];
    if (zenflow_sched_init(&s, &o, 0, 1, false, err, sizeof err)) fail_msg("%s", err);
    float w0[XN], g[XN];
    fill_normal(w0, XN, 0.5f);
    const int64_t k = zenflow_select_count(XC, topk, 2);
    assert_int_equal(k, 3);
    ZenflowRefTensor t;
    zenflow_ref_init(&t, XR, XC, false, k, w0, B1, B2, EPS);
    Indep x;
    memset(&x, 0, sizeof x);
    for (int i = 0; i < XN; i++) x.work[i] = x.master[i] = w0[i];
    double max_rel = 0;
    int selections = 0, updates = 0;
    for (int m = 0; m < STEPS; m++) {
        // columns of different scales so the selection is clear-cut; the ranking changes between selections
        for (int i = 0; i < XN; i++) g[i] = 1e-2f * rng_normal() * (float)(1 + ((i % XC) * 7 + m) % XC);
        ZenflowStepPlan p = zenflow_sched_begin(&s);
        selections += p.select;
        updates += p.update;
        zenflow_ref_step(&t, &p, g, LR, WD, NULL, 0);
        indep_step(&x, m, g, k, S, K, W);
        if (p.select) {
            for (int c = 0, j = 0; c < XC; c++) {
                if (x.mask[c] != (j < k && t.sel[j] == c)) fail_msg("micro-step %d: selections differ at column %d", m, c);
                j += x.mask[c];
            }
        }
        for (int i = 0; i < XN; i++) {
            const double e = fabs(t.work[i] - x.work[i]) / fmax(fabs(x.work[i]), 1e-3);
            if (e > max_rel) max_rel = e;
            if (e > 2e-5) fail_msg("micro-step %d element %d: work %.9g, independent %.9g", m, i, t.work[i], x.work[i]);
            const double em = fabs(t.master[i] - x.master[i]) / fmax(fabs(x.master[i]), 1e-3);
            if (em > 2e-5) fail_msg("micro-step %d element %d: master %.9g, independent %.9g", m, i, t.master[i], x.master[i]);
        }
    }
    print_message("mixed case: %d selections, %d updates, max relative difference %.3g\n", selections, updates, max_rel);
    assert_int_equal(selections, 4);  // m = 1 (W), 4, 8, 12
    assert_true(updates >= 6);
    zenflow_ref_free(&t);
    zenflow_sched_free(&s);
}


// The engine's per-tensor table (src/zero/zenflow.c: zenflow_tensor_shape) and the estimate's bytes
// (zenflow_tensor_gpu_bytes, zero_estimate_zenflow): hand counts, then t5-small's table against its ParamTable
static void test_engine_table_and_estimate(void** state) {
    (void)state;
    // nn.Linear wi of t5-small: (2048, 512); topk 0.1 -> 51 columns at every stage
    ZenflowShape s = zenflow_tensor_shape(2048, 512, 2048 * 512, 0.1, 2);
    assert_int_equal(s.R, 2048);
    assert_int_equal(s.C, 512);
    assert_int_equal(s.k, 51);
    assert_false(s.is_1d);
    // sel 4k + sel_p, sel_g, sel_m, sel_v, kept 5 x 4 R k + importance, keys, ids 5 x 4 C + cub
    assert_int_equal(zenflow_tensor_gpu_bytes(s, 1000), 4 * 51 + 20 * 2048 * 51 + 20 * 512 + 1000);
    // the relative-attention bias (32 buckets, 8 heads): 0 columns at stages 1/2, 1 at stage 3
    assert_int_equal(zenflow_tensor_shape(32, 8, 256, 0.1, 2).k, 0);
    assert_int_equal(zenflow_tensor_shape(32, 8, 256, 0.1, 3).k, 1);
    assert_int_equal(zenflow_tensor_gpu_bytes(zenflow_tensor_shape(32, 8, 256, 0.1, 2), 0), 20 * 8);
    // an RMSNorm weight: every element, never ranked, no top-k scratch
    s = zenflow_tensor_shape(0, 0, 512, 0.1, 2);
    assert_true(s.is_1d);
    assert_int_equal(s.R, 1);
    assert_int_equal(s.C, 512);
    assert_int_equal(s.k, 512);
    assert_int_equal(zenflow_tensor_gpu_bytes(s, 12345), 4 * 512 + 20 * 512);
    assert_int_equal(zenflow_cub_bytes_est(512), 8 * 512 + (1 << 20));
    // t5-small through the model's description (the table the engine builds from): every tensor's shape from the
    // ParamTable, summed independently here
    T5Config c;
    assert_true(t5_config_preset("t5-small", &c));
    ParamTable T;
    char err[256];
    assert_int_equal(params_build(&T, &c, err, sizeof err), 0);
    ZeroOptions o;
    zero_options_default(&o);
    o.stage = 2;
    t5_model_zero_describe(&T, &o);
    assert_int_equal(zero_estimate_zenflow(&o), 0);  // off
    o.zenflow = true;
    o.zenflow_topk_ratio = 0.1;
    for (int stage = 1; stage <= 3; stage++) {
        o.stage = stage;
        uint64_t want = 0, n2d = 0, cub = 0;
        for (int i = 0; i < T.num_params; i++) {
            const ParamDesc* p = &T.params[i];
            const int64_t R = p->ndim == 2 ? p->shape[0] : 1, C = p->ndim == 2 ? p->shape[1] : p->shape[0];
            int64_t k = p->ndim == 2 ? (int64_t)(0.1 * (double)C) : C;
            if (p->ndim == 2 && stage == 3 && k < 1) k = 1;
            want += 4 * (uint64_t)k + 20 * (uint64_t)(R * k);
            if (p->ndim == 2) want += 20 * (uint64_t)C, cub += 8 * (uint64_t)C + (1 << 20), n2d += (uint64_t)(R * C);
        }
        const size_t got = zero_estimate_zenflow(&o);
        print_message("t5-small stage %d, topk_ratio 0.1: ZenFlow GPU state %.1f MiB, %.1f MiB of it cub's guessed "
                      "storage (%.2f bytes per 2-D parameter without it)\n",
                      stage, got / 1048576.0, cub / 1048576.0, (double)(got - cub) / (double)n2d);
        assert_int_equal(got, want + cub);
        // about 20 x topk_ratio bytes per 2-D parameter (1-D tensors: 24 bytes per element, few)
        assert_true(got - cub > 1.9 * (double)n2d && got - cub < 2.3 * (double)n2d);
    }
    // the estimate's peak counts it once
    size_t* numel = malloc((size_t)T.num_units * sizeof(size_t));
    for (int u = 0; u < T.num_units; u++) numel[u] = T.units[u].numel;
    o.stage = 2;
    o.offload_optimizer = true;
    ZeroMemEstimate on, off;
    assert_int_equal(zero_estimate(&o, T.num_units, numel, &on, err, sizeof err), 0);
    o.zenflow = false;
    assert_int_equal(zero_estimate(&o, T.num_units, numel, &off, err, sizeof err), 0);
    assert_int_equal(on.gpu_zenflow, zero_estimate_zenflow(&(ZeroOptions){.zenflow = true, .zenflow_topk_ratio = 0.1,
                                                           .stage = 2, .tensors = o.tensors, .num_tensors = o.num_tensors}));
    assert_int_equal(zero_estimate_gpu_peak(&on) - zero_estimate_gpu_peak(&off), on.gpu_zenflow);
    assert_int_equal(on.gpu_resident, off.gpu_resident);  // allocated after zp_create, outside its check
    free(numel);
    t5_model_zero_free(&o);
    params_free(&T);
}

// ---------------------------------------------------------------------------------------------
// the checkpoint's host side (zenflow_state.c)

// the selective AdamW as zenflow.c steps it: one begin_step per selective micro-step
static void sel_adam_step(CpuAdam* a, int64_t* steps) {
    (*steps)++;
    cpu_adam_begin_step(a, *steps, 0.9f, 0.999f);
}

// sched A runs `first` micro-steps, is saved (header + its auto arrays) and restored into a fresh B; both then run
// `more` micro-steps with the same gradient sums: the same plans, auto sums and bias corrections, bit for bit
static void round_trip(ZenflowOpts o, int64_t spe, int num_2d, int first, int more, const char* what) {
    ZenflowSched a, b;
    char err[512];
    if (zenflow_sched_init(&a, &o, spe, num_2d, false, err, sizeof err) ||
        zenflow_sched_init(&b, &o, spe, num_2d, false, err, sizeof err))
        fail_msg("%s: %s", what, err);
    CpuAdam ca, cb;
    cpu_adam_init(&ca, 0.9f, 0.999f, 1e-8f, true);
    cpu_adam_init(&cb, 0.9f, 0.999f, 1e-8f, true);
    int64_t sa = 0, sb = 0;
    uint64_t seed = 7;
    for (int m = 0; m < first + more; m++) {
        if (m == first) {  // save A, restore into B
            const ZenflowStateHeader h = zenflow_state_header(&o, &a, &ca, sa, 3, true, 5, 100);
            if (zenflow_state_header_check(&h, &o, &b, 5, "ckpt", err, sizeof err))
                fail_msg("%s: a checkpoint of the same config refused: %s", what, err);
            double* arrays = num_2d ? malloc(2 * (size_t)num_2d * sizeof(double)) : NULL;
            if (num_2d) {
                memcpy(arrays, a.avg, (size_t)num_2d * sizeof(double));
                memcpy(arrays + num_2d, a.non, (size_t)num_2d * sizeof(double));
            }
            zenflow_state_restore(&h, arrays, arrays ? arrays + num_2d : NULL, &b, &cb);
            free(arrays);
            sb = h.selective_steps;
            assert_int_equal(h.since_update, 3);
            assert_int_equal(h.gacc_floats, 100);
            assert_int_equal(h.w_ahead, 1);
        }
        const ZenflowStepPlan pa = zenflow_sched_begin(&a);
        if (m < first) {
            if (pa.selective) sel_adam_step(&ca, &sa);
            for (int t = 0; t < num_2d; t++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                const double tot = 10.0 + (double)(seed >> 40) / 1e6, sel = tot * 0.2;
                if (pa.selective) zenflow_sched_observe(&a, t, tot, sel);
            }
            continue;
        }
        const ZenflowStepPlan pb = zenflow_sched_begin(&b);
        if (pa.warm_up != pb.warm_up || pa.select != pb.select || pa.sync_master != pb.sync_master ||
            pa.selective != pb.selective || pa.update != pb.update || pa.micro_step != pb.micro_step ||
            pa.cpu_step != pb.cpu_step)
            fail_msg("%s: micro-step %d: the restored schedule plans update %d select %d, the original %d %d", what, m,
                     pb.update, pb.select, pa.update, pa.select);
        if (pa.selective) {
            sel_adam_step(&ca, &sa);
            sel_adam_step(&cb, &sb);
            if (ca.bias_correction1 != cb.bias_correction1 || ca.bias_correction2 != cb.bias_correction2 ||
                ca.beta1_t != cb.beta1_t || ca.beta2_t != cb.beta2_t || sa != sb)
                fail_msg("%s: micro-step %d: the selective AdamW's bias corrections differ after the restore", what, m);
        }
        for (int t = 0; t < num_2d; t++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const double tot = 10.0 + (double)(seed >> 40) / 1e6, sel = tot * 0.2;
            if (pa.selective) {
                zenflow_sched_observe(&a, t, tot, sel);
                zenflow_sched_observe(&b, t, tot, sel);
            }
            if (a.avg[t] != b.avg[t] || a.non[t] != b.non[t])
                fail_msg("%s: micro-step %d: tensor %d's auto sums differ", what, m, t);
        }
    }
    print_message("%s: saved after %d micro-steps, %d more identical\n", what, first, more);
    zenflow_sched_free(&a);
    zenflow_sched_free(&b);
}

// a header that differs from the run in one thing: the check's code and line
static void expect_header_refused(const ZenflowStateHeader* h, const ZenflowOpts* o, const ZenflowSched* s, int nt,
                                  int code, const char* want) {
    char err[1024] = "";
    const int rc = zenflow_state_header_check(h, o, s, nt, "/c/checkpoint-10/t5train_state.bin", err, sizeof err);
    if (rc != code || !strstr(err, want) || strchr(err, '\n') || !strstr(err, "checkpoint-10"))
        fail_msg("header check: rc %d '%s', expected %d and '%s'", rc, err, code, want);
    print_message("refused as expected: %s\n", err);
}

static void test_state_round_trip(void** state) {
    (void)state;
    ZenflowOpts o = zenflow_opts_default();
    // the GPU test's schedule: step 8 / 4, saved at micro-step 10 (mid-interval) and 12 (an update boundary)
    o.select_strategy = ZENFLOW_SELECT_STEP, o.select_interval = 8, o.update_interval = 4;
    round_trip(o, 0, 0, 10, 14, "step 8 / 4 at 10");
    round_trip(o, 0, 0, 12, 12, "step 8 / 4 at 12");
    // warm-up: saved inside it and at its end
    o.full_warm_up_rounds = 3;
    round_trip(o, 0, 0, 2, 10, "warm-up 3 at 2");
    round_trip(o, 0, 0, 3, 10, "warm-up 3 at 3");
    // update_interval "auto" (refused by the engine today): the flags, u, count and the avg / non arrays carry over
    o = zenflow_opts_default();
    o.auto_ratio = 0.5;
    round_trip(o, 6, 3, 7, 20, "auto at 7");
    round_trip(o, 6, 3, 1, 20, "auto at 1");

    // the checks: each difference its own line
    o = zenflow_opts_default();
    o.select_strategy = ZENFLOW_SELECT_STEP, o.select_interval = 8, o.update_interval = 4;
    ZenflowSched s;
    char err[512];
    if (zenflow_sched_init(&s, &o, 0, 0, false, err, sizeof err)) fail_msg("%s", err);
    CpuAdam c;
    cpu_adam_init(&c, 0.9f, 0.999f, 1e-8f, true);
    const ZenflowStateHeader h0 = zenflow_state_header(&o, &s, &c, 0, 0, false, 4, 0);
    assert_int_equal(zenflow_state_header_check(&h0, &o, &s, 4, "x", err, sizeof err), 0);
    ZenflowStateHeader h = h0;
    h.version = 2;
    expect_header_refused(&h, &o, &s, 4, T5_EXIT_USAGE, "ZenFlow state of version 2, this t5train reads version 1");
    h = h0, h.topk_ratio = 0.2;
    expect_header_refused(&h, &o, &s, 4, T5_EXIT_USAGE, "zero_optimization.zenflow.topk_ratio 0.2, this run has 0.1");
    h = h0, h.update_interval = 2;
    expect_header_refused(&h, &o, &s, 4, T5_EXIT_USAGE, "update_interval 2, this run has 4");
    h = h0, h.select_strategy = ZENFLOW_SELECT_EPOCH;
    expect_header_refused(&h, &o, &s, 4, T5_EXIT_USAGE, "select_strategy \"epoch\", this run has \"step\"");
    h = h0, h.select_interval = 16;
    expect_header_refused(&h, &o, &s, 4, T5_EXIT_USAGE, "select_interval 16, this run has 8");
    h = h0, h.full_warm_up_rounds = 2;
    expect_header_refused(&h, &o, &s, 4, T5_EXIT_USAGE, "full_warm_up_rounds 2, this run has 0");
    h = h0, h.S = 10;
    expect_header_refused(&h, &o, &s, 4, T5_EXIT_USAGE, "selected columns every 10 micro-steps, this run every 8");
    expect_header_refused(&h0, &o, &s, 5, T5_EXIT_USAGE, "ZenFlow state of 4 tensors, this model has 5");
    h = h0, h.since_update = 2;  // an accumulation without its gradient
    expect_header_refused(&h, &o, &s, 4, T5_EXIT_FAILURE, "out of range");
    zenflow_sched_free(&s);
    // tensors
    const ZenflowStateTensor rec = {64, 512, 51};
    assert_int_equal(zenflow_state_tensor_check(&rec, 3, 64, 512, 51, "x", err, sizeof err), 0);
    assert_int_equal(zenflow_state_tensor_check(&rec, 3, 64, 512, 25, "ck", err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, "ZenFlow tensor 3 (64 x 512) has 51 selected columns, this run 25"));
    assert_int_equal(zenflow_state_tensor_check(&rec, 3, 64, 256, 25, "ck", err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, "ZenFlow tensor 3 is 64 x 512, this model's is 64 x 256"));
    // sizes: the header has no padding; records, auto arrays; per tensor sel + m + v (+ the master's columns)
    assert_int_equal(sizeof(ZenflowStateHeader), 160);
    assert_int_equal(zenflow_state_meta_bytes(3, 2), 160 + 3 * 24 + 2 * 2 * 8);
    assert_int_equal(zenflow_state_meta_bytes(0, 0), 160);
    assert_int_equal(zenflow_state_tensor_bytes(4, 2, false), 2 * 4 + 2 * 4 * 2 * 4);
    assert_int_equal(zenflow_state_tensor_bytes(4, 2, true), 2 * 4 + 3 * 4 * 2 * 4);
    assert_int_equal(zenflow_state_tensor_bytes(7, 0, true), 0);
}

// the pieces of a streamed blob (any cut) land in their regions, in order; an empty region gets nothing
typedef struct {
    unsigned char got[4][16];
    size_t filled[4];
    int calls_empty;
    bool unchecked;  // pieces out of order are fine (the call beyond the end)
} RouteSink;

static void route_put(void* ctx, int region, size_t off, const void* src, size_t bytes) {
    RouteSink* r = ctx;
    if (!r->unchecked && off != r->filled[region]) fail_msg("region %d: a piece at %zu after %zu bytes", region, off, r->filled[region]);
    if (bytes == 0) r->calls_empty++;
    memcpy(r->got[region] + off, src, bytes);
    r->filled[region] += bytes;
}

static void test_state_route(void** state) {
    (void)state;
    const ZenflowRegion reg[4] = {{3}, {5}, {0}, {7}};
    unsigned char blob[15];
    for (int i = 0; i < 15; i++) blob[i] = (unsigned char)(i + 1);
    uint64_t seed = 3;
    for (int trial = 0; trial < 200; trial++) {
        RouteSink r;
        memset(&r, 0, sizeof r);
        size_t off = 0;
        while (off < 15) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const size_t n = T5_MIN((size_t)(seed >> 60) + 1, 15 - off);
            if (zenflow_state_route(reg, 4, off, blob + off, n, route_put, &r)) fail_msg("trial %d: route failed", trial);
            off += n;
        }
        const size_t want[4] = {3, 5, 0, 7};
        for (int q = 0; q < 4; q++) assert_int_equal(r.filled[q], want[q]);
        assert_int_equal(r.calls_empty, 0);
        assert_memory_equal(r.got[0], blob, 3);
        assert_memory_equal(r.got[1], blob + 3, 5);
        assert_memory_equal(r.got[3], blob + 8, 7);
    }
    RouteSink r;
    memset(&r, 0, sizeof r);
    r.unchecked = true;
    assert_int_equal(zenflow_state_route(reg, 4, 14, blob, 2, route_put, &r), -1);  // one byte past the end
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_count),
        cmocka_unit_test(test_importance_and_topk),
        cmocka_unit_test(test_opts_check),
        cmocka_unit_test(test_schedule_fixed),
        cmocka_unit_test(test_schedule_auto),
        cmocka_unit_test(test_ref_topk1_is_adamw),
        cmocka_unit_test(test_ref_1d_is_adamw),
        cmocka_unit_test(test_ref_topk0_is_delayed_adamw),
        cmocka_unit_test(test_ref_mixed_vs_independent),
        cmocka_unit_test(test_engine_table_and_estimate),
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_state_route),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
