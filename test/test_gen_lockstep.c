/*
 * test_gen_lockstep.c: generation in lockstep over several ranks (model/gen_lockstep.h, used by model/generate.c when
 * ZeRO-3 gathers on demand: every decoder step's fetches are collectives, so every rank must launch the same steps).
 *
 * The votes and moves are checked directly, then the device beam search's host loop (model/generate.c t5_generate:
 * steps launched up to LAG ahead, a compaction waits until every launched step is processed) is simulated on W ranks
 * with random batches: items finishing at random steps, some past max_length, compaction granularities 1-8 items,
 * lags 1-5, padding batches (t5_generator_set_lockstep_idle). Required: every rank launches the same steps in the
 * same iterations; no rank processes a step it has not launched; no rank compacts before it processed every step it
 * launched; the ranks stop together exactly when the last real item is finished (no earlier: no output is cut; no
 * later); the move is never GEN_LOCKSTEP_BROKEN. The simulation without the agreement (each rank alone, the loop as
 * it is without lockstep) shows that the launches would differ, i.e. that the agreement is what keeps them equal.
 */
#include "t5test.h"

#include "../model/gen_lockstep.h"
#include "../src/base/common.h"

static void test_votes_and_moves(void** state) {
    (void)state;
    assert_int_equal(gen_lockstep_vote(0, false), 0);
    assert_int_equal(gen_lockstep_vote(0, true), 0);  // nothing live: never asks for a drain
    assert_int_equal(gen_lockstep_vote(3, false), 1);
    assert_int_equal(gen_lockstep_vote(3, true), 2);
    bool dr = true;
    assert_int_equal(gen_lockstep_beam_move(0, 0, false, false, &dr), GEN_LOCKSTEP_STOP);
    // a finished rank steps on, draining when another rank drains
    assert_int_equal(gen_lockstep_beam_move(1, 0, false, false, &dr), GEN_LOCKSTEP_STEP_ON);
    assert_false(dr);
    assert_int_equal(gen_lockstep_beam_move(2, 0, false, false, &dr), GEN_LOCKSTEP_STEP_ON);
    assert_true(dr);
    // live, another rank drains, no layout change here: steps on without launching
    dr = false;
    assert_int_equal(gen_lockstep_beam_move(2, 4, false, false, &dr), GEN_LOCKSTEP_STEP_ON);
    assert_true(dr);
    assert_int_equal(gen_lockstep_beam_move(2, 4, true, true, &dr), GEN_LOCKSTEP_DRAIN);
    assert_true(dr);
    assert_int_equal(gen_lockstep_beam_move(1, 4, true, false, &dr), GEN_LOCKSTEP_LAYOUT);
    assert_false(dr);
    assert_int_equal(gen_lockstep_beam_move(1, 4, false, false, &dr), GEN_LOCKSTEP_LAYOUT);
    assert_false(dr);
    // a rank that would compact now while another drains: the launches differed (a bug)
    assert_int_equal(gen_lockstep_beam_move(2, 4, true, false, &dr), GEN_LOCKSTEP_BROKEN);
}

#define MAXW 4
#define MAXB 8
#define MAXIT 256

typedef struct {
    int B, fin[MAXB];  // item i finishes when the step at cur_len == fin[i] is processed
    bool idle;         // a padding step's batch
    int cur_len, launch_len, I;
    bool draining, done[MAXB], stopped;
    int launched[MAXIT];  // steps launched at each iteration
} SimRank;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int rnd(int n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

// One iteration of generate.c's device beam search loop on rank r up to the vote; returns the vote
static int sim_until_vote(SimRank* r, int it, int ML, int lag, int m_items, bool* compact, bool* want_drain, int* live,
                          int* newI) {
    r->launched[it] = 0;
    while (!r->draining && r->launch_len < ML && r->launch_len - r->cur_len < lag) {
        r->launch_len++;
        r->launched[it]++;
    }
    // process step t = cur_len - 1: it was launched when launch_len was cur_len
    if (r->launch_len <= r->cur_len)
        fail_msg("iteration %d: the step at cur_len %d is processed but not launched (launch_len %d, lag %d, ML %d, "
                 "draining %d)", it, r->cur_len, r->launch_len, lag, ML, r->draining);
    const bool at_max = r->cur_len + 1 >= ML;
    for (int i = 0; i < r->B; i++)
        if (!r->done[i] && (r->fin[i] <= r->cur_len || at_max)) r->done[i] = true;
    r->cur_len++;
    *live = 0;
    for (int i = 0; i < r->B; i++) *live += !r->done[i];
    if (r->idle) *live = 0;
    *newI = *live ? (int)CEIL_DIV((size_t)*live, (size_t)m_items) * m_items : r->I;
    if (*newI > r->I) *newI = r->I;
    *compact = *newI < r->I;
    *want_drain = *compact && r->cur_len < r->launch_len;
    return gen_lockstep_vote(*live, *want_drain);
}

// W ranks in lockstep until they stop; returns the iterations run
static int sim_lockstep(SimRank* R, int W, int ML, int lag, int m_items) {
    for (int it = 0; it < MAXIT; it++) {
        bool compact[MAXW], want[MAXW];
        int live[MAXW], newI[MAXW], all = 0;
        for (int w = 0; w < W; w++) {
            const int vote = sim_until_vote(&R[w], it, ML, lag, m_items, &compact[w], &want[w], &live[w], &newI[w]);
            all = T5_MAX(all, vote);  // the all-reduce (max)
        }
        for (int w = 1; w < W; w++)
            if (R[w].launched[it] != R[0].launched[it] || R[w].launch_len != R[0].launch_len)
                fail_msg("iteration %d: rank %d launched %d steps (up to %d), rank 0 %d (up to %d)", it, w,
                         R[w].launched[it], R[w].launch_len, R[0].launched[it], R[0].launch_len);
        bool stop = false;
        for (int w = 0; w < W; w++) {
            SimRank* r = &R[w];
            const GenLockstepMove mv = gen_lockstep_beam_move(all, live[w], compact[w], want[w], &r->draining);
            if (mv == GEN_LOCKSTEP_BROKEN) fail_msg("iteration %d rank %d: a drain at a step not launched here", it, w);
            if (mv == GEN_LOCKSTEP_STOP) {
                stop = true;
                continue;
            }
            if (r->cur_len >= ML) fail_msg("rank %d steps on past max_length", w);
            if (mv == GEN_LOCKSTEP_LAYOUT && compact[w]) {
                if (r->cur_len < r->launch_len)
                    fail_msg("rank %d compacts with %d launched steps unprocessed", w, r->launch_len - r->cur_len);
                r->I = newI[w];
            }
        }
        if (stop) return it + 1;
    }
    fail_msg("no stop after %d iterations", MAXIT);
    return -1;
}

static void sim_case(int W, int ML, int lag, int m_items) {
    SimRank R[MAXW];
    memset(R, 0, sizeof R);
    int last = 0;  // the last step any real item needs (cur_len of its processing)
    for (int w = 0; w < W; w++) {
        SimRank* r = &R[w];
        r->B = 1 + rnd(MAXB);
        r->idle = w > 0 && rnd(4) == 0;  // rank 0 always holds a real batch (shard.h)
        r->I = r->B;
        r->cur_len = r->launch_len = 1;
        int need = 1;
        for (int i = 0; i < r->B; i++) {
            r->fin[i] = 1 + rnd(ML + 3);  // some past max_length: finished by it
            need = T5_MAX(need, T5_MIN(r->fin[i], ML - 1));
        }
        if (!r->idle) last = T5_MAX(last, need);
    }
    const int its = sim_lockstep(R, W, ML, lag, m_items);
    for (int w = 0; w < W; w++) {
        if (R[w].cur_len - 1 != last)
            fail_msg("W %d ML %d lag %d m %d: rank %d stopped after the step at cur_len %d, the last item needs %d", W,
                     ML, lag, m_items, w, R[w].cur_len - 1, last);
        for (int i = 0; i < R[w].B && !R[w].idle; i++)
            if (!R[w].done[i]) fail_msg("rank %d item %d not finished at the stop", w, i);
    }
    (void)its;
}

static void test_beam_simulation(void** state) {
    (void)state;
    int cases = 0;
    for (int W = 1; W <= MAXW; W++)
        for (int ML = 2; ML <= 24; ML += 3)
            for (int lag = 1; lag <= 5; lag++)
                for (int m = 1; m <= 8; m *= 2)
                    for (int rep = 0; rep < 20; rep++, cases++) sim_case(W, ML, lag, m);
    print_message("%d simulated lockstep beam searches\n", cases);
}

// Without the agreement (each rank's own drains), the launches differ between ranks with different batches: the
// lockstep rule is what keeps them equal (this is the case the simulation above guards)
static void test_without_agreement_launches_differ(void** state) {
    (void)state;
    const int ML = 20, lag = 4, m = 1;
    SimRank R[2];
    memset(R, 0, sizeof R);
    const int fins[2][4] = {{3, 12, 12, 12}, {12, 12, 12, 12}};
    for (int w = 0; w < 2; w++) {
        R[w].B = 4;
        R[w].I = 4;
        R[w].cur_len = R[w].launch_len = 1;
        memcpy(R[w].fin, fins[w], sizeof fins[w]);
    }
    bool differ = false;
    for (int it = 0; it < 12 && !differ; it++)
        for (int w = 0; w < 2; w++) {
            bool compact, want;
            int live, newI;
            (void)sim_until_vote(&R[w], it, ML, lag, m, &compact, &want, &live, &newI);
            // generate.c without lockstep: drain while a compaction waits, else lay out
            R[w].draining = want;
            if (!want && compact) R[w].I = newI;
            if (w == 1) differ = R[0].launch_len != R[1].launch_len;
        }
    assert_true(differ);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_votes_and_moves),
        cmocka_unit_test(test_beam_simulation),
        cmocka_unit_test(test_without_agreement_launches_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
