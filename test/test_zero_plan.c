/*
 * test_zero_plan.c: the ZeRO engine's arithmetic on the CPU (src/zero/plan.h):
 *   - partitions over W = 1..8 ranks: every element of every unit owned by exactly one rank, parts 16-byte
 *     aligned, flat offsets back to back; at W = 1 the flat layout is stage 0's;
 *   - sub-groups within sub_group_size (a unit larger than it alone), the CPU takes the trailing groups and at
 *     most `ratio` of the elements (all at 1, none at 0);
 *   - reduce buckets cover each part exactly, each piece within bucket / W;
 *   - the stage 3 schedule over the model's real trace (model/t5.c t5_model_fetch_trace) for every preset and a
 *     grid of prefetch / live / reuse / persistence knobs, two passes each: a fetched unit is always available,
 *     a released unit is never used again within the reuse distance, prefetching never takes live parameters
 *     beyond the limit plus one unit, no mismatches on the trace, every non-persistent unit released at reset;
 *     an off-trace pass (evaluation's order) is counted as a mismatch and still serves every fetch.
 */
#include "t5test.h"

#include "../model/params.h"
#include "../model/t5.h"
#include "../model/t5_config.h"
#include "../src/base/common.h"
#include "../src/zero/plan.h"

static const size_t k_units[] = {16448, 8, 3145728, 104, 7000, 16, 2621440, 4096};

static void test_partition(void** state) {
    (void)state;
    const int nu = (int)T5_ARRAY_LEN(k_units);
    char err[256];
    for (int W = 1; W <= 8; W++) {
        ZeroLayout Ls[8];
        for (int r = 0; r < W; r++) assert_int_equal(zero_layout_build(&Ls[r], W, r, nu, k_units, 1000000000, 0, err, sizeof err), 0);
        for (int u = 0; u < nu; u++) {
            size_t covered = 0, expect_lo = 0;
            for (int r = 0; r < W; r++) {
                const ZeroLayout* L = &Ls[r];
                assert_int_equal(L->part[u] % 8, 0);
                assert_true(L->part[u] * (size_t)W >= k_units[u]);
                assert_true(L->part[u] * (size_t)W < k_units[u] + 8 * (size_t)W + (size_t)W);
                assert_true(L->hi[u] - L->lo[u] <= L->part[u]);
                if (L->hi[u] > L->lo[u]) {
                    assert_int_equal(L->lo[u], expect_lo);
                    expect_lo = L->hi[u];
                }
                covered += L->hi[u] - L->lo[u];
            }
            assert_int_equal(covered, k_units[u]);
        }
        for (int r = 0; r < W; r++) {
            size_t off = 0;
            for (int u = 0; u < nu; u++) {
                assert_int_equal(Ls[r].part_offset[u], off);
                off += Ls[r].part[u];
            }
            assert_int_equal(Ls[r].part_total, off);
            if (W == 1) {  // stage 0's flat layout
                size_t flat = 0;
                for (int u = 0; u < nu; u++) {
                    assert_int_equal(Ls[r].part_offset[u], flat);
                    flat += k_units[u];
                }
            }
            zero_layout_free(&Ls[r]);
        }
    }
    ZeroLayout L;
    assert_int_equal(zero_layout_build(&L, 2, 2, nu, k_units, 1, 0, err, sizeof err), -1);
    size_t odd[] = {12};
    assert_int_equal(zero_layout_build(&L, 1, 0, 1, odd, 100, 0, err, sizeof err), -1);
    assert_int_equal(zero_layout_build(&L, 1, 0, nu, k_units, 100, 1.5, err, sizeof err), -1);
}

static void test_groups_and_ratio(void** state) {
    (void)state;
    const int nu = (int)T5_ARRAY_LEN(k_units);
    char err[256];
    const int64_t sgs[] = {1, 5000, 3000000, 1000000000};
    const double ratios[] = {0, 0.1, 0.3, 0.5, 0.99, 1};
    for (size_t a = 0; a < T5_ARRAY_LEN(sgs); a++) {
        for (size_t b = 0; b < T5_ARRAY_LEN(ratios); b++) {
            ZeroLayout L;
            assert_int_equal(zero_layout_build(&L, 1, 0, nu, k_units, sgs[a], ratios[b], err, sizeof err), 0);
            int next = 0;
            size_t cpu = 0;
            bool seen_cpu = false;
            for (int g = 0; g < L.num_groups; g++) {
                assert_int_equal(L.group_first[g], next);
                next += L.group_count[g];
                if (L.group_count[g] > 1) assert_true(L.group_numel[g] <= (size_t)sgs[a]);
                if (L.group_cpu[g]) {
                    seen_cpu = true;
                    cpu += L.group_numel[g];
                } else {
                    assert_false(seen_cpu);  // the CPU takes the trailing groups only
                }
            }
            assert_int_equal(next, nu);
            assert_int_equal(cpu, L.cpu_numel);
            if (ratios[b] == 1) assert_int_equal(cpu, L.part_total);
            if (ratios[b] == 0) assert_int_equal(cpu, 0);
            assert_true((double)cpu <= ratios[b] * (double)L.part_total + 0.5);
            for (int u = 0; u < nu; u++) {
                int g = L.unit_group[u];
                assert_true(u >= L.group_first[g] && u < L.group_first[g] + L.group_count[g]);
            }
            zero_layout_free(&L);
        }
    }
}

static void test_buckets(void** state) {
    (void)state;
    const int nu = (int)T5_ARRAY_LEN(k_units);
    char err[256];
    const int64_t buckets[] = {1, 8, 1000, 1048576, 500000000};
    for (int W = 1; W <= 4; W++) {
        ZeroLayout L;
        assert_int_equal(zero_layout_build(&L, W, 0, nu, k_units, 1000000000, 0, err, sizeof err), 0);
        for (size_t b = 0; b < T5_ARRAY_LEN(buckets); b++) {
            for (int u = 0; u < nu; u++) {
                int nb = zero_layout_num_buckets(&L, u, buckets[b]);
                size_t expect = 0;
                for (int k = 0; k < nb; k++) {
                    size_t off, len;
                    zero_layout_bucket(&L, u, buckets[b], k, &off, &len);
                    assert_int_equal(off, expect);
                    assert_true(len > 0);
                    assert_true(len * (size_t)W <= (size_t)T5_MAX(buckets[b], 8 * (int64_t)W));
                    expect += len;
                }
                assert_int_equal(expect, L.part[u]);
            }
        }
        zero_layout_free(&L);
    }
}

// one pass over `order`, checking the schedule's invariants; returns the mismatches of the pass
static int sched_pass(ZeroSched* S, const int* order, int n, size_t max_unit, bool on_trace) {
    ZeroSchedAction acts[4096];
    for (int i = 0; i < n; i++) {
        const int u = order[i];
        const int64_t live0 = S->live;
        int na = zero_sched_fetch(S, u, acts, (int)T5_ARRAY_LEN(acts));
        bool prefetched = false;
        for (int k = 0; k < na; k++) {
            assert_int_equal(acts[k].kind, ZS_GATHER);
            if (acts[k].prefetch) prefetched = true;
            else assert_int_equal(acts[k].unit, u);
        }
        assert_int_equal(S->status[u], ZS_AVAILABLE);
        if (prefetched) {
            // prefetching starts only below the live limit and overshoots it by at most one unit
            (void)live0;
            assert_true(S->live <= S->max_live + (int64_t)max_unit);
        }
        na = zero_sched_release(S, u, acts, (int)T5_ARRAY_LEN(acts));
        if (na) {
            assert_int_equal(acts[0].kind, ZS_RELEASE);
            assert_int_equal(acts[0].unit, u);
            assert_false(S->persistent[u]);
            if (on_trace) {
                int64_t d = zero_sched_reuse_distance(S, i, u);
                assert_true(d < 0 || d > S->max_reuse);
            }
        }
    }
    ZeroSchedAction rel[4096];
    int nr = zero_sched_reset(S, rel, (int)T5_ARRAY_LEN(rel));
    for (int k = 0; k < nr; k++) assert_int_equal(rel[k].kind, ZS_RELEASE);
    for (int u = 0; u < S->num_units; u++)
        if (!S->persistent[u]) assert_int_equal(S->status[u], ZS_NOT_AVAILABLE);
    int m = S->mismatches;
    S->mismatches = 0;
    return m;
}

static void test_schedule_every_preset(void** state) {
    (void)state;
    static const char* presets[] = {"t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b", "google/t5-v1_1-small",
                                    "google/t5-v1_1-xl", "google/flan-t5-xxl"};
    char err[256];
    int checked = 0;
    for (size_t p = 0; p < T5_ARRAY_LEN(presets); p++) {
        T5Config c;
        if (!t5_config_preset(presets[p], &c)) fail_msg("no preset %s", presets[p]);
        ParamTable t;
        if (params_build(&t, &c, err, sizeof err)) fail_msg("%s: %s", presets[p], err);
        int trace[1024];
        int n = t5_model_fetch_trace(&t, trace, 1024);
        assert_int_equal(n, 2 * (c.num_layers + c.num_decoder_layers) + 8);
        size_t* numel = malloc((size_t)t.num_units * sizeof(size_t));
        size_t max_unit = 0;
        for (int u = 0; u < t.num_units; u++) {
            numel[u] = t.units[u].numel;
            max_unit = T5_MAX(max_unit, numel[u]);
        }
        const int64_t D = c.d_model;
        const int64_t prefetch[] = {0, 1, (int64_t)(0.9 * (double)(D * D)), 50000000, (int64_t)1 << 40};
        const int64_t live[] = {0, 1000000, 1000000000};
        const int64_t reuse[] = {0, 1000000, 1000000000, (int64_t)1 << 40};
        const int64_t persist[] = {0, 100000, 10 * D};
        for (size_t a = 0; a < T5_ARRAY_LEN(prefetch); a++)
            for (size_t b = 0; b < T5_ARRAY_LEN(live); b++)
                for (size_t r = 0; r < T5_ARRAY_LEN(reuse); r++)
                    for (size_t q = 0; q < T5_ARRAY_LEN(persist); q++) {
                        ZeroSched S;
                        zero_sched_init(&S, t.num_units, numel, trace, n, prefetch[a], live[b], reuse[r], persist[q]);
                        for (int pass = 0; pass < 2; pass++)
                            assert_int_equal(sched_pass(&S, trace, n, max_unit, true), 0);
                        // evaluation's order: the forward only, twice
                        int fwd[512];
                        int nf = n / 2;
                        for (int i = 0; i < nf; i++) fwd[i] = trace[i];
                        for (int i = 0; i < nf; i++) fwd[nf + i] = trace[i];
                        assert_true(sched_pass(&S, fwd, 2 * nf, max_unit, false) >= 1);
                        assert_int_equal(sched_pass(&S, trace, n, max_unit, true), 0);
                        zero_sched_free(&S);
                        checked++;
                    }
        free(numel);
        params_free(&t);
    }
    print_message("schedule checked for %d (model, knob) settings\n", checked);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partition),
        cmocka_unit_test(test_groups_and_ratio),
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_schedule_every_preset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
