/*
 * test_eval_shard.c: the shard arithmetic of src/eval/shard.c for any world size and split size: every example is
 * evaluated exactly once, in the batches one GPU forms (the last partial), every rank runs the same number of steps,
 * a step's gathered slots in rank order give the input order once the padding slots (eval_shard_real_at) are
 * dropped, so the eval loss reduced from the gathered buffer is one GPU's bit for bit (a kept padding slot, NAN,
 * would show); the length order is longest first, ties in input order.
 */
#include "t5test.h"

#include <math.h>
#include <stdlib.h>

#include "../src/base/common.h"
#include "../src/eval/shard.h"

// a per-example value and a per-batch "loss": the mean of its examples' values (one GPU's batch means)
static double value(int64_t e) { return 1.0 / (double)(e + 3) + 0.37 * (double)(e % 5); }
static double batch_mean(const EvalShard* s, int64_t i) {
    int64_t first, count;
    eval_shard_examples(s, i, &first, &count);
    double m = 0;
    for (int64_t e = first; e < first + count; e++) m += value(e);
    return m / (double)count;
}

static void check_one(int64_t n, int64_t batch, int world) {
    EvalShard s;
    eval_shard_plan(&s, n, batch, world);
    EvalShard one;
    eval_shard_plan(&one, n, batch, 1);
    assert_int_equal(s.n_batches, one.n_batches);
    // one GPU: eval loss = sum over batches of mean x count, / n (HF's per-batch mean weighted by examples)
    double ref = 0;
    for (int64_t i = 0; i < one.n_batches; i++) {
        int64_t f, c;
        eval_shard_examples(&one, i, &f, &c);
        ref += batch_mean(&one, i) * (double)c;
    }
    // W ranks as the loop is to run them: each rank evaluates its step-k batch (a padding step: anything, here NAN)
    // and the step's all-gather lays the W (mean, count) pairs out in rank order; rank 0 then reduces the gathered
    // buffer slot by slot, keeping the first eval_shard_real_at(k) of each step: the same additions in the same order
    // as one GPU, and any slot it keeps that is not the next batch in input order fails
    double* gm = malloc((size_t)(s.steps * world + 1) * sizeof(double));
    int64_t* gc = malloc((size_t)(s.steps * world + 1) * sizeof(int64_t));
    int64_t* gi = malloc((size_t)(s.steps * world + 1) * sizeof(int64_t));
    int* seen = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    for (int64_t k = 0; k < s.steps; k++)
        for (int r = 0; r < world; r++) {
            const int64_t i = eval_shard_batch(&s, r, k), slot = k * world + r;
            gi[slot] = i;
            gm[slot] = NAN;
            gc[slot] = 0;
            if (i < 0) continue;
            int64_t f, c;
            eval_shard_examples(&s, i, &f, &c);
            if (c < 1 || c > batch || (c < batch && i != s.n_batches - 1))
                fail_msg("batch %lld has %lld examples", (long long)i, (long long)c);
            for (int64_t e = f; e < f + c; e++) seen[e]++;
            gm[slot] = batch_mean(&s, i);
            gc[slot] = c;
        }
    int64_t next = 0;  // the next batch expected in input order
    double got = 0;
    for (int64_t k = 0; k < s.steps; k++) {
        const int real = eval_shard_real_at(&s, k);
        for (int r = 0; r < world; r++) {
            const int64_t slot = k * world + r;
            if (r >= real) {
                if (gi[slot] != -1) fail_msg("n %lld b %lld W %d: slot (%lld, %d) past the real ones holds batch %lld",
                                             (long long)n, (long long)batch, world, (long long)k, r, (long long)gi[slot]);
                continue;
            }
            if (gi[slot] != next) fail_msg("n %lld b %lld W %d: slot (%lld, %d) holds batch %lld, input order wants %lld",
                                           (long long)n, (long long)batch, world, (long long)k, r,
                                           (long long)gi[slot], (long long)next);
            next++;
            got += gm[slot] * (double)gc[slot];
        }
    }
    assert_int_equal(next, s.n_batches);
    for (int64_t e = 0; e < n; e++)
        if (seen[e] != 1) fail_msg("n %lld b %lld W %d: example %lld evaluated %d times", (long long)n,
                                   (long long)batch, world, (long long)e, seen[e]);
    if (got != ref) fail_msg("n %lld b %lld W %d: loss sum %.17g, one GPU %.17g (a padding slot kept?)", (long long)n,
                             (long long)batch, world, got, ref);
    // every rank runs `steps` steps: ceil(batches / W); no rank idles a whole step unless batches < W
    assert_int_equal(s.steps, (s.n_batches + world - 1) / world);
    free(seen);
    free(gm);
    free(gc);
    free(gi);
}

static void test_every_size(void** state) {
    (void)state;
    const int64_t ns[] = {0, 1, 2, 7, 8, 9, 63, 64, 65, 1999, 2000};
    const int64_t bs[] = {1, 3, 8, 64};
    const int ws[] = {1, 2, 3, 4, 8};
    for (size_t a = 0; a < T5_ARRAY_LEN(ns); a++)
        for (size_t b = 0; b < T5_ARRAY_LEN(bs); b++)
            for (size_t w = 0; w < T5_ARRAY_LEN(ws); w++) check_one(ns[a], bs[b], ws[w]);
}

// newsdev2016 in batches of 64 on 4 GPUs: 32 batches (the last of 15), 8 steps, no padding slot
static void test_newsdev_numbers(void** state) {
    (void)state;
    EvalShard s;
    eval_shard_plan(&s, 1999, 64, 4);
    assert_int_equal(s.n_batches, 32);
    assert_int_equal(s.steps, 8);
    assert_int_equal(eval_shard_real_at(&s, 7), 4);
    int64_t f, c;
    eval_shard_examples(&s, 31, &f, &c);
    assert_int_equal(f, 1984);
    assert_int_equal(c, 15);
    assert_int_equal(eval_shard_batch(&s, 3, 7), 31);
    eval_shard_plan(&s, 1999, 64, 3);  // 32 batches on 3 GPUs: 11 steps, the last with 2 real slots
    assert_int_equal(s.steps, 11);
    assert_int_equal(eval_shard_real_at(&s, 10), 2);
    assert_int_equal(eval_shard_batch(&s, 2, 10), -1);
}

static void test_order_by_length(void** state) {
    (void)state;
    const int32_t len[] = {5, 9, 5, 1, 9, 7, 5};
    int64_t perm[7];
    assert_int_equal(eval_shard_order_by_length(len, 7, perm), 0);
    const int64_t want[] = {1, 4, 5, 0, 2, 6, 3};  // longest first, ties in input order
    for (int i = 0; i < 7; i++) assert_int_equal(perm[i], want[i]);
    assert_int_equal(eval_shard_order_by_length(len, 0, perm), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_size),
        cmocka_unit_test(test_newsdev_numbers),
        cmocka_unit_test(test_order_by_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
