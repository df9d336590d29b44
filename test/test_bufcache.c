/*
 * test_bufcache.c: the run-time unit buffers' rule (src/zero/bufcache.h) and the estimate's replay of it
 * (src/zero/estimate.c), on the CPU:
 *   - the rule: a size class per distinct size; take gives the oldest free buffer of the class once another buffer
 *     (any class) was given back after it, else a fresh one; bytes = buffers made x class size;
 *   - the stage 3 schedule and the backward's gradient order of every preset (model/t5.c t5_model_fetch_trace,
 *     t5_model_grad_trace), replayed here with the homework configuration's knobs: no buffer is ever held by two
 *     units, each class makes at most one buffer more than the units of that class live at once, the gradient
 *     order takes and gives each unit's gradient exactly once per step, and zero_estimate's gathered and gradient
 *     bytes are this replay's.
 */
#include "t5test.h"

#include "../model/params.h"
#include "../model/t5.h"
#include "../model/t5_config.h"
#include "../src/base/common.h"
#include "../src/zero/bufcache.h"
#include "../src/zero/estimate.h"
#include "../src/zero/plan.h"

static void test_rule(void** state) {
    (void)state;
    const size_t bytes[] = {100, 300};
    BufCache C;
    bufcache_init(&C, 2, bytes, 1);
    bool fresh;
    int a = bufcache_take(&C, 0, &fresh);
    assert_true(fresh);
    assert_int_equal(a, 0);
    bufcache_give(&C, 0, a);
    int b = bufcache_take(&C, 0, &fresh);  // a is the newest give: quarantined
    assert_true(fresh);
    assert_int_equal(b, 1);
    int x = bufcache_take(&C, 1, &fresh);  // the other class makes its own
    assert_true(fresh);
    assert_int_equal(x, 0);
    bufcache_give(&C, 1, x);               // one give after a: a is free to take now
    int c = bufcache_take(&C, 0, &fresh);
    assert_false(fresh);
    assert_int_equal(c, a);
    bufcache_give(&C, 0, b);
    bufcache_give(&C, 0, c);
    int d = bufcache_take(&C, 0, &fresh);  // the oldest free one first
    assert_false(fresh);
    assert_int_equal(d, b);
    assert_int_equal(bufcache_bytes(&C), 2 * 100 + 300);
    bufcache_reset(&C);
    assert_int_equal(bufcache_bytes(&C), 0);
    bufcache_free(&C);

    // largest first; a size joins the next larger class when at least BUFCACHE_MERGE (0.7) of it
    const size_t sizes[] = {80, 0, 100, 80, 65, 45, 1000, 69};
    int cls[8];
    size_t cb[8];
    assert_int_equal(bufcache_classes(sizes, 8, cls, cb), 4);
    const int want[] = {1, -1, 1, 1, 2, 3, 0, 2};
    for (int i = 0; i < 8; i++) assert_int_equal(cls[i], want[i]);
    const size_t want_bytes[] = {1000, 100, 69, 45};
    for (int c = 0; c < 4; c++) assert_int_equal(cb[c], want_bytes[c]);
}

// take/give with the checks of the header; returns the bytes made
typedef struct {
    BufCache C;
    int* cls;
    int* id;
    int* holder;  // [class * 1024 + id] unit holding it, -1
    int* live;    // (classes) units of the class holding a buffer now
    int* peak;    // (classes) the most at once
} Replay;

static void replay_init(Replay* R, int nu, const size_t* bytes) {
    size_t* cb = malloc(sizeof(size_t) * (size_t)nu);
    R->cls = malloc(sizeof(int) * (size_t)nu);
    R->id = malloc(sizeof(int) * (size_t)nu);
    const int nc = bufcache_classes(bytes, nu, R->cls, cb);
    bufcache_init(&R->C, nc, cb, BUFCACHE_QUARANTINE);
    free(cb);
    for (int u = 0; u < nu; u++) R->id[u] = -1;
    R->holder = malloc(sizeof(int) * (size_t)nc * 1024);
    for (int i = 0; i < nc * 1024; i++) R->holder[i] = -1;
    R->live = calloc((size_t)nc, sizeof(int));
    R->peak = calloc((size_t)nc, sizeof(int));
}

static void replay_take(Replay* R, int u) {
    const int c = R->cls[u];
    if (c < 0 || R->id[u] >= 0) return;
    bool fresh;
    const int id = bufcache_take(&R->C, c, &fresh);
    assert_true(id < 1024);
    if (R->holder[c * 1024 + id] >= 0) fail_msg("buffer %d of class %d taken by unit %d while unit %d holds it", id, c, u,
                                                R->holder[c * 1024 + id]);
    R->holder[c * 1024 + id] = u;
    R->id[u] = id;
    R->live[c]++;
    R->peak[c] = T5_MAX(R->peak[c], R->live[c]);
}

static void replay_give(Replay* R, int u) {
    const int c = R->cls[u];
    if (c < 0 || R->id[u] < 0) return;
    R->holder[c * 1024 + R->id[u]] = -1;
    bufcache_give(&R->C, c, R->id[u]);
    R->id[u] = -1;
    R->live[c]--;
}

static size_t replay_done(Replay* R) {
    for (int c = 0; c < R->C.nclass; c++)
        if (R->C.made[c] > R->peak[c] + BUFCACHE_QUARANTINE)
            fail_msg("class %d (%zu bytes) made %d buffers for at most %d at once", c, R->C.bytes[c], R->C.made[c],
                     R->peak[c]);
    const size_t b = bufcache_bytes(&R->C);
    if (getenv("BUFCACHE_DEBUG"))
        for (int c = 0; c < R->C.nclass; c++)
            print_message("  class %d: %zu bytes, made %d, at most %d at once\n", c, R->C.bytes[c], R->C.made[c], R->peak[c]);
    bufcache_free(&R->C);
    free(R->cls);
    free(R->id);
    free(R->holder);
    free(R->live);
    free(R->peak);
    return b;
}

static void test_replay_every_preset(void** state) {
    (void)state;
    static const char* presets[] = {"t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b", "google/t5-v1_1-small",
                                    "google/t5-v1_1-xl", "google/flan-t5-xxl"};
    char err[256];
    for (size_t p = 0; p < T5_ARRAY_LEN(presets); p++) {
        T5Config c;
        if (!t5_config_preset(presets[p], &c)) fail_msg("no preset %s", presets[p]);
        ParamTable t;
        if (params_build(&t, &c, err, sizeof err)) fail_msg("%s: %s", presets[p], err);
        const int nu = t.num_units;
        int trace[1024], gtrace[1024];
        const int n = t5_model_fetch_trace(&t, trace, 1024);
        const int ng = t5_model_grad_trace(&t, gtrace, 1024);
        size_t* numel = malloc((size_t)nu * sizeof(size_t));
        size_t* bytes = malloc((size_t)nu * sizeof(size_t));
        for (int u = 0; u < nu; u++) numel[u] = t.units[u].numel, bytes[u] = numel[u] * 2;
        // the gradient order: every unit taken once and given once, the give after the take
        int* seen = calloc((size_t)nu, sizeof(int));
        for (int i = 0; i < ng; i++) {
            const int g = gtrace[i], u = (g > 0 ? g : -g) - 1;
            assert_true(u >= 0 && u < nu);
            if (g > 0) assert_int_equal(seen[u]++, 0);
            else assert_int_equal(seen[u]++, 1);
        }
        for (int u = 0; u < nu; u++) assert_int_equal(seen[u], 2);
        free(seen);
        // the homework configuration's knobs ("auto" for a d_model D: prefetch 0.9 D^2, persistence 10 D)
        const int64_t D = c.d_model, prefetch = (int64_t)(0.9 * (double)(D * D)), live = 1000000000,
                      reuse = 1000000000, persist = 10 * D;
        ZeroSched S;
        zero_sched_init(&S, nu, numel, trace, n, prefetch, live, reuse, persist);
        Replay R;
        replay_init(&R, nu, bytes);
        ZeroSchedAction acts[1024];
        for (int pass = 0; pass < 3; pass++) {
            int na = zero_sched_reset(&S, acts, 1024);
            for (int k = 0; k < na; k++) replay_give(&R, acts[k].unit);
            for (int i = 0; i < n; i++) {
                na = zero_sched_fetch(&S, trace[i], acts, 1024);
                for (int k = 0; k < na; k++)
                    if (acts[k].kind == ZS_GATHER) replay_take(&R, acts[k].unit);
                na = zero_sched_release(&S, trace[i], acts, 1024);
                for (int k = 0; k < na; k++) replay_give(&R, acts[k].unit);
            }
        }
        const int64_t peak_live = S.peak_live;
        zero_sched_free(&S);
        const size_t gathered = replay_done(&R);
        replay_init(&R, nu, bytes);
        for (int step = 0; step < 2; step++)
            for (int i = 0; i < ng; i++) {
                const int g = gtrace[i];
                if (g > 0) replay_take(&R, g - 1);
                else replay_give(&R, -g - 1);
            }
        const size_t grads = replay_done(&R);
        // zero_estimate's figures for the same model and knobs (fp16 weights and gradients)
        ZeroOptions o = {0};
        o.stage = 3;
        o.world = 1;
        o.working_dtype = o.grad_dtype = o.accum_dtype = o.comm_dtype = DT_F16;
        o.offload_optimizer = o.offload_param = true;
        o.ratio = 1.0;
        o.sub_group_size = 1000000000;
        o.reduce_bucket_size = D * D;
        o.prefetch_bucket_size = prefetch;
        o.max_live_parameters = live;
        o.max_reuse_distance = reuse;
        o.persistence_threshold = persist;
        o.trace = trace;
        o.trace_len = n;
        o.grad_trace = gtrace;
        o.grad_trace_len = ng;
        ZeroMemEstimate e;
        if (zero_estimate(&o, nu, numel, &e, err, sizeof err)) fail_msg("%s: %s", presets[p], err);
        assert_int_equal(e.gpu_gathered_peak, gathered);
        assert_int_equal(e.gpu_grad_peak, grads);
        print_message("%-22s gathered %7.3f GiB (schedule's live peak %7.3f GiB), gradients %7.3f GiB\n", presets[p],
                      (double)gathered / (1 << 30), (double)peak_live * 2 / (1 << 30), (double)grads / (1 << 30));
        free(numel);
        free(bytes);
        params_free(&t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_replay_every_preset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
