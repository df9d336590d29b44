/*
 * test_eval_shard.c: the shard arithmetic of src/eval/shard.c for any world size and split size, run the way the
 * evaluation runs it: each rank evaluates its steps (accelerate's round-robin over one GPU's batches, the last
 * partial), keeps its per-step results in step order, and an all-gather lays the ranks' pieces out rank after rank
 * (NCCL's order), for the whole split at once (the loss) or in pieces of a few steps (generation). Checked: every
 * example is evaluated exactly once, every rank runs the same number of steps, eval_shard_slot finds each batch in
 * the gathered buffer, a piece's batches come out in input order and no padding slot is ever read (they hold NAN /
 * -1, which would show), and eval_shard_loss_at over the gathered losses is one GPU's mean bit for bit; the length
 * order is longest first, ties in input order; generation over the length-sorted batches puts every row back at its
 * input index, with the same batches on any number of ranks; the padded positions those batches save.
 */
#include "t5test.h"

#include <math.h>
#include <stdlib.h>

#include "../src/base/common.h"
#include "../src/eval/shard.h"

// a per-example value and a per-batch "loss": the mean of its examples' values, in fp32 as the model returns it
static double value(int64_t e) { return 1.0 / (double)(e + 3) + 0.37 * (double)(e % 5); }
static float batch_mean(int64_t first, int64_t count) {
    double m = 0;
    for (int64_t e = first; e < first + count; e++) m += value(e);
    return (float)(m / (double)count);
}

// one GPU as the trainer ran it before sharding: batches of `batch` in order, sum += (double)loss * rows, / rows
static double one_gpu_loss(int64_t n, int64_t batch) {
    double sum = 0;
    int64_t rows = 0;
    for (int64_t first = 0; first < n; first += batch) {
        const int64_t real = T5_MIN(batch, n - first);
        sum += (double)batch_mean(first, real) * real;
        rows += real;
    }
    return rows ? sum / (double)rows : NAN;
}

// The loss: every rank's `steps` losses (a padding step: NAN) all-gathered rank after rank, reduced by
// eval_shard_loss_at over the round-robin table (eval_shard_batch); also counts how often each example is evaluated.
static void check_loss(const EvalShard* s, int* seen) {
    const int64_t n = s->n, batch = s->batch;
    const int world = s->world;
    float* all = malloc((size_t)(s->steps * world + 1) * sizeof(float));
    int64_t* at = malloc((size_t)(s->steps * world + 1) * sizeof(int64_t));
    for (int r = 0; r < world; r++)
        for (int64_t k = 0; k < s->steps; k++) {
            const int64_t i = eval_shard_batch(s, r, k);
            at[r * s->steps + k] = i;
            all[r * s->steps + k] = NAN;
            if (i < 0) continue;
            int64_t f, c;
            eval_shard_examples(s, i, &f, &c);
            if (c < 1 || c > batch || (c < batch && i != s->n_batches - 1))
                fail_msg("batch %lld has %lld examples", (long long)i, (long long)c);
            for (int64_t e = f; e < f + c; e++) seen[e]++;
            all[r * s->steps + k] = batch_mean(f, c);
        }
    const double got = eval_shard_loss_at(s, at, all), ref = one_gpu_loss(n, batch);
    free(at);
    if (n == 0) {
        if (!isnan(got)) fail_msg("an empty split gave loss %g, not NAN", got);
    } else if (got != ref) {
        fail_msg("n %lld b %lld W %d: loss %.17g, one GPU %.17g (a padding slot read?)", (long long)n, (long long)batch,
                 world, got, ref);
    }
    free(all);
}

// Generation: pieces of `piece` steps; each rank's slot for a step holds its batch's example indices (B rows, -1 in
// the rows a batch does not fill and in padding steps); the examples, read back slot by eval_shard_slot in batch
// order, must be 0, 1, ..., n - 1 and never a -1.
static void check_pieces(const EvalShard* s, int64_t piece) {
    const int64_t B = s->batch, W = s->world;
    int64_t* all = malloc((size_t)(W * piece * B + 1) * sizeof(int64_t));
    int64_t next = 0;
    for (int64_t k0 = 0; k0 < s->steps; k0 += piece) {
        const int64_t nk = T5_MIN(piece, s->steps - k0);
        for (int64_t r = 0; r < W; r++)  // rank r's piece lands at r * nk slots
            for (int64_t kk = 0; kk < nk; kk++) {
                int64_t* slot = all + (r * nk + kk) * B;
                const int64_t i = eval_shard_batch(s, (int)r, k0 + kk);
                int64_t f = 0, c = 0;
                if (i >= 0) eval_shard_examples(s, i, &f, &c);
                for (int64_t j = 0; j < B; j++) slot[j] = j < c ? f + j : -1;
            }
        const int64_t end = T5_MIN((k0 + nk) * W, s->n_batches);
        for (int64_t i = k0 * W; i < end; i++) {
            const int64_t sl = eval_shard_slot(s, i, k0, nk);
            if (sl < 0 || sl >= W * nk) fail_msg("batch %lld: slot %lld outside the piece", (long long)i, (long long)sl);
            int64_t f, c;
            eval_shard_examples(s, i, &f, &c);
            for (int64_t j = 0; j < c; j++, next++)
                if (all[sl * B + j] != next)
                    fail_msg("n %lld b %lld W %lld piece %lld: batch %lld row %lld holds example %lld, input order wants "
                             "%lld", (long long)s->n, (long long)B, (long long)W, (long long)piece, (long long)i,
                             (long long)j, (long long)all[sl * B + j], (long long)next);
        }
    }
    assert_int_equal(next, s->n);
    free(all);
}

static void check_one(int64_t n, int64_t batch, int world) {
    EvalShard s, one;
    eval_shard_plan(&s, n, batch, world);
    eval_shard_plan(&one, n, batch, 1);
    assert_int_equal(s.n_batches, one.n_batches);
    // every rank runs `steps` steps: ceil(batches / W)
    assert_int_equal(s.steps, (s.n_batches + world - 1) / world);
    int* seen = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    check_loss(&s, seen);
    for (int64_t e = 0; e < n; e++)
        if (seen[e] != 1) fail_msg("n %lld b %lld W %d: example %lld evaluated %d times", (long long)n,
                                   (long long)batch, world, (long long)e, seen[e]);
    const int64_t pieces[] = {1, 2, 3, T5_MAX(s.steps, (int64_t)1)};
    for (size_t p = 0; p < T5_ARRAY_LEN(pieces); p++) check_pieces(&s, pieces[p]);
    // each rank's real batches (the sharded-generation line's "batches per rank") count its non-padding steps, and
    // the ranks' counts add up to the split's batches
    int64_t total = 0;
    for (int r = 0; r < world; r++) {
        int64_t real = 0;
        for (int64_t k = 0; k < s.steps; k++) real += eval_shard_batch(&s, r, k) >= 0;
        assert_int_equal(eval_shard_rank_batches(&s, r), real);
        total += real;
    }
    assert_int_equal(total, s.n_batches);
    // the padding slots of the last step: ranks real_at .. W - 1
    if (s.steps > 0) {
        const int real = eval_shard_real_at(&s, s.steps - 1);
        for (int r = 0; r < world; r++)
            assert_int_equal(eval_shard_batch(&s, r, s.steps - 1) < 0, r >= real);
    }
    free(seen);
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
    assert_int_equal(eval_shard_rank_batches(&s, 1), 11);
    assert_int_equal(eval_shard_rank_batches(&s, 2), 10);
    // batch 31 = step 10 of rank 1: in the whole split's gather at 1 x 11 + 10, in a piece of steps 8..10 at 1 x 3 + 2
    assert_int_equal(eval_shard_slot(&s, 31, 0, 11), 21);
    assert_int_equal(eval_shard_slot(&s, 31, 8, 3), 5);
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

// Length-sorted generation as evaluate_generate runs it: the order from the split's lengths, batch i = positions
// [i * B, ..) of it, the batches dealt to W ranks and all-gathered in pieces; each gathered row is put back at its
// example's input index. Checked for W = 1, 2, 3, 4, 8 and pieces of 1, 2, 3 and all steps: every example lands once at
// its input index, each batch holds the same examples whatever W (one GPU's sorted batches, dealt), and its rows are
// the sorted order's (sources non-increasing across the split); the padded positions never exceed the input order's.
static void check_sorted(int64_t n, int64_t B) {
    int32_t* len = malloc((size_t)(n + 1) * sizeof(int32_t));
    int64_t* perm = malloc((size_t)(n + 1) * sizeof(int64_t));
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int64_t e = 0; e < n; e++) {  // lengths 1..48 with many ties
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        len[e] = 1 + (int32_t)((x >> 33) % 48);
    }
    assert_int_equal(eval_shard_order_by_length(len, n, perm), 0);
    for (int64_t p = 1; p < n; p++)
        if (len[perm[p]] > len[perm[p - 1]] || (len[perm[p]] == len[perm[p - 1]] && perm[p] < perm[p - 1]))
            fail_msg("n %lld: position %lld out of order", (long long)n, (long long)p);
    EvalShard one;
    eval_shard_plan(&one, n, B, 1);
    // example -> the batch one GPU puts it in (the sorted order's batches)
    int64_t* batch_of = malloc((size_t)(n + 1) * sizeof(int64_t));
    for (int64_t p = 0; p < n; p++) batch_of[perm[p]] = p / B;
    int64_t* pw = malloc((size_t)(n + 1) * sizeof(int64_t));
    char* used = malloc((size_t)one.n_batches + 1);
    const int ws[] = {1, 2, 3, 4, 8};
    int64_t* placed = malloc((size_t)(n + 1) * sizeof(int64_t));
    for (size_t w = 0; w < T5_ARRAY_LEN(ws); w++) {
        EvalShard s;
        eval_shard_plan(&s, n, B, ws[w]);
        const int64_t W = s.world;
        for (int64_t p = 0; p < n; p++) pw[p] = perm[p];  // the order W ranks generate in: one GPU's, dealt in a snake
        eval_shard_deal_snake(pw, n, B, (int)W);
        const int64_t pieces[] = {1, 2, 3, T5_MAX(s.steps, (int64_t)1)};
        for (size_t pc = 0; pc < T5_ARRAY_LEN(pieces); pc++) {
            const int64_t piece = pieces[pc];
            for (int64_t e = 0; e < n; e++) placed[e] = -1;
            for (int64_t i = 0; i < one.n_batches; i++) used[i] = 0;
            int64_t* all = malloc((size_t)(W * piece * B + 1) * sizeof(int64_t));
            for (int64_t k0 = 0; k0 < s.steps; k0 += piece) {
                const int64_t nk = T5_MIN(piece, s.steps - k0);
                for (int64_t r = 0; r < W; r++)  // rank r generates its batches: rows = the sorted order's examples
                    for (int64_t kk = 0; kk < nk; kk++) {
                        int64_t* slot = all + (r * nk + kk) * B;
                        const int64_t i = eval_shard_batch(&s, (int)r, k0 + kk);
                        int64_t f = 0, c = 0;
                        if (i >= 0) eval_shard_examples(&s, i, &f, &c);
                        for (int64_t j = 0; j < B; j++) slot[j] = j < c ? pw[f + j] : -1;
                    }
                const int64_t end = T5_MIN((k0 + nk) * W, s.n_batches);
                for (int64_t i = k0 * W; i < end; i++) {  // score: each row at its example's input index
                    const int64_t* rows = all + eval_shard_slot(&s, i, k0, nk) * B;
                    int64_t f, c;
                    eval_shard_examples(&s, i, &f, &c);
                    // the rows of one of one GPU's batches, whole, each of those batches dealt once
                    const int64_t src = batch_of[rows[0]];
                    int64_t sf, sc;
                    eval_shard_examples(&one, src, &sf, &sc);
                    if (used[src]++ || sc != c)
                        fail_msg("n %lld B %lld W %lld: batch %lld is one GPU's batch %lld (%lld rows, %lld here), dealt "
                                 "twice or cut", (long long)n, (long long)B, (long long)W, (long long)i, (long long)src,
                                 (long long)sc, (long long)c);
                    for (int64_t j = 0; j < c; j++) {
                        const int64_t e = pw[f + j];
                        if (batch_of[e] != src)
                            fail_msg("n %lld B %lld W %lld: batch %lld mixes one GPU's batches %lld and %lld",
                                     (long long)n, (long long)B, (long long)W, (long long)i, (long long)src,
                                     (long long)batch_of[e]);
                        if (rows[j] != e || placed[e] != -1)
                            fail_msg("n %lld B %lld W %lld piece %lld: batch %lld row %lld holds %lld (want %lld, placed "
                                     "%lld)", (long long)n, (long long)B, (long long)W, (long long)piece, (long long)i,
                                     (long long)j, (long long)rows[j], (long long)e, (long long)placed[e]);
                        placed[e] = rows[j];
                    }
                }
            }
            for (int64_t e = 0; e < n; e++)  // input order restored: every example at its own index
                if (placed[e] != e) fail_msg("n %lld B %lld W %lld: input index %lld holds %lld", (long long)n,
                                             (long long)B, (long long)W, (long long)e, (long long)placed[e]);
            free(all);
        }
    }
    const int64_t sorted = eval_shard_padded_positions(len, perm, n, B, 0, 0);
    const int64_t input = eval_shard_padded_positions(len, NULL, n, B, 0, 0);
    if (sorted > input) fail_msg("n %lld B %lld: sorted batches pad to %lld positions, input order %lld", (long long)n,
                                 (long long)B, (long long)sorted, (long long)input);
    free(placed);
    free(used);
    free(pw);
    free(batch_of);
    free(perm);
    free(len);
}

static void test_sorted_order_restored(void** state) {
    (void)state;
    const int64_t ns[] = {0, 1, 7, 9, 64, 65, 1999};
    const int64_t bs[] = {1, 4, 8, 64};
    for (size_t a = 0; a < T5_ARRAY_LEN(ns); a++)
        for (size_t b = 0; b < T5_ARRAY_LEN(bs); b++) check_sorted(ns[a], bs[b]);
}

// the snake, by hand: every other whole, full group of W batches reversed; W = 1 and the partial last group unchanged;
// on newsdev2016's shape with lengths falling batch by batch, the ranks' sums within one group's spread of each other
static void test_deal_snake(void** state) {
    (void)state;
    int64_t p[9];
    for (int i = 0; i < 9; i++) p[i] = i;
    eval_shard_deal_snake(p, 7, 1, 2);  // B 1, W 2: groups {0 1} {2 3}r {4 5} {6} (partial)
    const int64_t want1[] = {0, 1, 3, 2, 4, 5, 6};
    for (int i = 0; i < 7; i++) assert_int_equal(p[i], want1[i]);
    for (int i = 0; i < 9; i++) p[i] = i;
    eval_shard_deal_snake(p, 9, 2, 2);  // B 2, W 2: {0 1 | 2 3} {4 5 | 6 7}r {8}
    const int64_t want2[] = {0, 1, 2, 3, 6, 7, 4, 5, 8};
    for (int i = 0; i < 9; i++) assert_int_equal(p[i], want2[i]);
    for (int i = 0; i < 9; i++) p[i] = i;
    eval_shard_deal_snake(p, 7, 2, 2);  // the second group [4, 8) is not whole: nothing moves
    for (int i = 0; i < 7; i++) assert_int_equal(p[i], i);
    eval_shard_deal_snake(p, 9, 1, 1);  // one rank: nothing moves
    for (int i = 0; i < 9; i++) assert_int_equal(p[i], i);
    eval_shard_deal_snake(p, 9, 1, 3);  // W 3: {0 1 2} {5 4 3} {6 7 8}
    const int64_t want3[] = {0, 1, 2, 5, 4, 3, 6, 7, 8};
    for (int i = 0; i < 9; i++) assert_int_equal(p[i], want3[i]);
    // 63 batches of 32 on 4 ranks, sorted batch b's length 100 - b: round robin gives rank 0 the longest of every
    // group (sums 1120 1104 1088 1035: 16 a rank apart); the snake keeps ranks 0-2, which also share the partial
    // last group, within two groups' spread (6) of each other (1099 1097 1095 1056)
    enum { N = 1999, BB = 32, WW = 4 };
    int64_t* o = malloc(N * sizeof(int64_t));
    for (int i = 0; i < N; i++) o[i] = i;
    EvalShard s;
    eval_shard_plan(&s, N, BB, WW);
    double rr[WW] = {0}, sn[WW] = {0};
    for (int pass = 0; pass < 2; pass++) {
        if (pass) eval_shard_deal_snake(o, N, BB, WW);
        for (int r = 0; r < WW; r++)
            for (int64_t k = 0; k < s.steps; k++) {
                const int64_t i = eval_shard_batch(&s, r, k);
                if (i < 0) continue;
                int64_t f, c;
                eval_shard_examples(&s, i, &f, &c);
                (pass ? sn : rr)[r] += 100.0 - (double)(o[f] / BB);
            }
    }
    assert_true(rr[0] > rr[1] && rr[1] > rr[2] && rr[2] > rr[3]);
    for (int r = 0; r < WW - 1; r++) assert_true(fabs(sn[r] - sn[0]) <= 6.0 + 1e-9);
    assert_true(sn[0] - sn[2] < rr[0] - rr[2]);
    free(o);
}

// The loss pass dealt by cost (eval_shard_deal_by_cost): for every size, world and random costs, each of one GPU's
// batches is evaluated by exactly one (rank, step), every rank has `steps` steps with padding only in the last round,
// eval_shard_loss_at over the all-gather is one GPU's loss bit for bit, and the ranks' summed costs lie within the
// largest batch's cost of each other (the snake's bound); on a split whose costs fall with the index, round robin's
// spread is larger.
static void test_deal_by_cost(void** state) {
    (void)state;
    const int64_t ns[] = {0, 1, 7, 9, 65, 1999};
    const int64_t bs[] = {1, 8, 32};
    const int ws[] = {1, 2, 3, 4, 8};
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (size_t a = 0; a < T5_ARRAY_LEN(ns); a++)
        for (size_t b = 0; b < T5_ARRAY_LEN(bs); b++)
            for (size_t w = 0; w < T5_ARRAY_LEN(ws); w++) {
                EvalShard s;
                eval_shard_plan(&s, ns[a], bs[b], ws[w]);
                const int64_t nb = s.n_batches, W = s.world, slots = T5_MAX(s.steps * W, (int64_t)1);
                int64_t* cost = malloc((size_t)T5_MAX(nb, (int64_t)1) * sizeof(int64_t));
                int64_t* at = malloc((size_t)slots * sizeof(int64_t));
                int* used = calloc((size_t)T5_MAX(nb, (int64_t)1), sizeof(int));
                int64_t cmax = 0;
                for (int64_t i = 0; i < nb; i++) {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    cost[i] = 1 + (int64_t)((x >> 33) % 5000);
                    cmax = T5_MAX(cmax, cost[i]);
                }
                assert_int_equal(eval_shard_deal_by_cost(&s, cost, at), 0);
                float* all = malloc((size_t)slots * sizeof(float));
                double rmin = 1e300, rmax = -1;
                for (int64_t r = 0; r < W; r++) {
                    double sum = 0;
                    for (int64_t k = 0; k < s.steps; k++) {
                        const int64_t i = at[r * s.steps + k];
                        all[r * s.steps + k] = NAN;
                        if (i < 0) {
                            if (k != s.steps - 1) fail_msg("a padding step before the last round");
                            continue;
                        }
                        if (i >= nb || used[i]++) fail_msg("batch %lld dealt twice or out of range", (long long)i);
                        int64_t f, c;
                        eval_shard_examples(&s, i, &f, &c);
                        all[r * s.steps + k] = batch_mean(f, c);
                        sum += (double)cost[i];
                    }
                    rmin = fmin(rmin, sum);
                    rmax = fmax(rmax, sum);
                }
                for (int64_t i = 0; i < nb; i++)
                    if (used[i] != 1) fail_msg("batch %lld dealt %d times", (long long)i, used[i]);
                if (W == 1)  // one rank: input order
                    for (int64_t k = 0; k < nb; k++) assert_int_equal(at[k], k);
                const double got = eval_shard_loss_at(&s, at, all), ref = one_gpu_loss(s.n, s.batch);
                if (nb > 0 && got != ref) fail_msg("loss %.17g, one GPU %.17g", got, ref);
                if (nb == 0) assert_true(isnan(got));
                if (nb > 0 && !(rmax - rmin <= (double)cmax))
                    fail_msg("n %lld B %lld W %lld: the ranks' costs %g..%g, largest batch %lld", (long long)s.n,
                             (long long)s.batch, (long long)W, rmin, rmax, (long long)cmax);
                free(all);
                free(used);
                free(at);
                free(cost);
            }
    // falling costs (63 batches of 32 on 4 ranks, cost 100 - i): round robin gives 1120 1104 1088 1035
    EvalShard s;
    eval_shard_plan(&s, 1999, 32, 4);
    int64_t cost[63], at[64];
    for (int i = 0; i < 63; i++) cost[i] = 100 - i;
    assert_int_equal(eval_shard_deal_by_cost(&s, cost, at), 0);
    int64_t sums[4] = {0};
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 16; k++)
            if (at[r * 16 + k] >= 0) sums[r] += cost[at[r * 16 + k]];
    // the last, partial round goes to ranks 3, 2, 1 (an odd round): 1059 1096 1096 1096, the slowest at 1096
    assert_int_equal(sums[0], 1059);
    for (int r = 1; r < 4; r++) assert_int_equal(sums[r], 1096);
}

// the padded positions, by hand: lengths {5, 9, 5, 1, 9, 7, 5} in batches of 3
static void test_padded_positions(void** state) {
    (void)state;
    const int32_t len[] = {5, 9, 5, 1, 9, 7, 5};
    int64_t perm[7];
    assert_int_equal(eval_shard_order_by_length(len, 7, perm), 0);  // 1 4 5 | 0 2 6 | 3
    // input order: {5 9 5} 3 x 9 + {1 9 7} 3 x 9 + {5} 1 x 5 = 59; sorted: 3 x 9 + 3 x 5 + 1 x 1 = 43
    assert_int_equal(eval_shard_padded_positions(len, NULL, 7, 3, 0, 0), 59);
    assert_int_equal(eval_shard_padded_positions(len, perm, 7, 3, 0, 0), 43);
    // rounded to multiples of 8 (fp16's pad_to_multiple_of): 3 x 16 + 3 x 16 + 8 = 104; sorted 48 + 24 + 8 = 80
    assert_int_equal(eval_shard_padded_positions(len, NULL, 7, 3, 0, 8), 104);
    assert_int_equal(eval_shard_padded_positions(len, perm, 7, 3, 0, 8), 80);
    // pad_to_max_length (every batch at max_source_length 12): sorting saves nothing
    assert_int_equal(eval_shard_padded_positions(len, NULL, 7, 3, 12, 0), 84);
    assert_int_equal(eval_shard_padded_positions(len, perm, 7, 3, 12, 0), 84);
    assert_int_equal(eval_shard_padded_positions(len, perm, 0, 3, 0, 0), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_size),
        cmocka_unit_test(test_newsdev_numbers),
        cmocka_unit_test(test_order_by_length),
        cmocka_unit_test(test_sorted_order_restored),
        cmocka_unit_test(test_deal_snake),
        cmocka_unit_test(test_deal_by_cost),
        cmocka_unit_test(test_padded_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
