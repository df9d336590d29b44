/*
 * test_eval_score.c: generation's scoring on several threads (src/eval/score.h) gives the one thread's result:
 * newsdev2016 (the real tokenizer, 1,999 examples, ../shared via T5TRAIN_DATA) with rows made from the references
 * themselves (BLEU 100), from other examples' references, cut short (early </s>, then the fill) and empty, scored
 * with 1 thread, 16 threads, 3 threads, and 16 runs asked for inside an outer parallel region where OpenMP gives the
 * inner region a team of one (what OMP_THREAD_LIMIT or OMP_DYNAMIC can do): the same BLEU statistics, per-example
 * lengths and prediction texts; and a bad row in
 * the middle is reported as one thread reports it (the first failing row, its segment numbering).
 */
#include "t5test.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../data/dataset.h"
#include "../data/tokenizer.h"
#include "../src/base/common.h"
#include "../src/eval/evaluate.h"
#include "../src/eval/score.h"

enum { ML = 64, RS = ML + 1 };

typedef struct {
    BleuStats st;
    int32_t *len, *nonpad;
    char** preds;
    int threads;
} Scored;

// max_threads < 0: -max_threads runs asked for from inside an outer parallel region (the inner team is one thread)
static int run(const Tokenizer* tok, const Dataset* ds, const EvalScoreItem* items, int64_t n, int max_threads,
               Scored* out, char* err, size_t errlen) {
    const int64_t N = dataset_size(ds);
    memset(out, 0, sizeof *out);
    bleu_stats_init(&out->st, false);
    out->len = calloc_check((size_t)N, sizeof(int32_t));
    out->nonpad = calloc_check((size_t)N, sizeof(int32_t));
    out->preds = calloc_check((size_t)N, sizeof(char*));
    const EvalScorer sc = {.tok = tok, .ds = ds, .max_length = ML, .eos = 1, .pad = 0, .fill = 0,
                           .own_len = out->len, .own_nonpad = out->nonpad, .preds = out->preds};
    const int keep = omp_get_max_threads(), keep_levels = omp_get_max_active_levels();
    omp_set_num_threads(max_threads < 0 ? -max_threads : max_threads);
    int rc = 0, team = 0;
    if (max_threads < 0) {
        omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
        {
#pragma omp single
            {
                rc = eval_score_rows(&sc, &out->st, items, n, &out->threads, err, errlen);
#pragma omp parallel
                team = omp_get_num_threads();  // what the scorer's inner region got
            }
        }
        omp_set_max_active_levels(keep_levels);
        assert_int_equal(team, 1);
    } else {
        rc = eval_score_rows(&sc, &out->st, items, n, &out->threads, err, errlen);
    }
    omp_set_num_threads(keep);
    return rc;
}

static void scored_free(Scored* s, int64_t N) {
    for (int64_t e = 0; e < N; e++) free(s->preds[e]);
    free(s->preds);
    free(s->len);
    free(s->nonpad);
    bleu_stats_free(&s->st);
}

static void assert_same(const Scored* a, const Scored* b, int64_t N) {
    assert_int_equal(a->st.sys_len, b->st.sys_len);
    assert_int_equal(a->st.ref_len, b->st.ref_len);
    assert_memory_equal(a->st.counts, b->st.counts, sizeof a->st.counts);
    assert_memory_equal(a->st.totals, b->st.totals, sizeof a->st.totals);
    assert_int_equal(a->st.n_segments, b->st.n_segments);
    assert_int_equal(a->st.tok_period_lines, b->st.tok_period_lines);
    assert_int_equal(a->st.nrefs, b->st.nrefs);
    assert_memory_equal(a->len, b->len, (size_t)N * sizeof(int32_t));
    assert_memory_equal(a->nonpad, b->nonpad, (size_t)N * sizeof(int32_t));
    for (int64_t e = 0; e < N; e++) {
        assert_true((a->preds[e] == NULL) == (b->preds[e] == NULL));
        if (a->preds[e]) assert_string_equal(a->preds[e], b->preds[e]);
    }
}

static void test_threads_same_result(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char err[1024];
    char* tdir = t5_path_join(t5test_data_dir(), "t5-spiece");
    Tokenizer* tok = tokenizer_open(tdir, err, sizeof err);
    free(tdir);
    if (!tok) fail_msg("%s", err);
    DataOptions o;
    data_options_default(&o);
    o.dataset_name = "wmt16-ro-en";
    o.data_dir = t5test_data_dir();
    o.source_lang = "en";
    o.target_lang = "ro";
    o.max_source_length = 128;
    o.max_target_length = ML - 1;  // a reference fits a row (decoder start first)
    o.no_cache = true;
    o.quiet = true;
    Dataset* ds = dataset_open(&o, DATA_SPLIT_VALIDATION, tok, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    const int64_t N = dataset_size(ds);
    assert_int_equal(N, 1999);
    // rows in a shuffled example order, as sorted batches give them; batch = position / 32
    int32_t* rows = calloc_check((size_t)N * RS, sizeof(int32_t));
    EvalScoreItem* items = calloc_check((size_t)N, sizeof *items);
    uint32_t r = 7;
    int64_t* perm = malloc_check((size_t)N * sizeof(int64_t));
    for (int64_t e = 0; e < N; e++) perm[e] = e;
    for (int64_t e = N - 1; e > 0; e--) {
        r = r * 1664525u + 1013904223u;
        const int64_t k = (int64_t)(r >> 8) % (e + 1), t = perm[e];
        perm[e] = perm[k];
        perm[k] = t;
    }
    for (int64_t p = 0; p < N; p++) {
        const int64_t e = perm[p];
        int32_t* row = rows + (size_t)p * RS;
        const int32_t *src, *tgt;
        int ns, nt;
        // kind 0: the reference itself; 1: another example's; 2: the reference cut at 3 tokens then </s>; 3: empty
        const int kind = (int)(p % 4);
        dataset_get(ds, kind == 1 ? (e + 1) % N : e, &src, &ns, &tgt, &nt);
        int32_t* ids = row + 1;
        ids[0] = 0;  // the decoder start
        int len = 1;
        if (kind == 3) ids[len++] = 1;
        else if (kind == 2) {
            for (int j = 0; j < 3 && j < nt - 1; j++) ids[len++] = tgt[j];
            ids[len++] = 1;
        } else
            for (int j = 0; j < nt && len < ML; j++) ids[len++] = tgt[j];  // ends with </s>
        row[0] = ML;  // the batch's width: the fill (pad) past the row's end
        items[p] = (EvalScoreItem){.row = row, .example = e, .batch = p / 32};
    }
    Scored one, many, capped, nested;
    if (run(tok, ds, items, N, 1, &one, err, sizeof err)) fail_msg("%s", err);
    if (run(tok, ds, items, N, 16, &many, err, sizeof err)) fail_msg("%s", err);
    if (run(tok, ds, items, N, 3, &capped, err, sizeof err)) fail_msg("%s", err);
    if (run(tok, ds, items, N, -16, &nested, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(one.threads, 1);
    assert_int_equal(nested.threads, 16);  // 16 runs asked for, one thread to run them
    print_message("threads asked: %d, %d, %d (nested: a team of one); sys_len %lld, ref_len %lld\n", many.threads,
                  capped.threads, nested.threads, (long long)one.st.sys_len, (long long)one.st.ref_len);
    assert_same(&one, &many, N);
    assert_same(&one, &capped, N);
    assert_same(&one, &nested, N);
    for (int64_t e = 0; e < N; e++) assert_true(one.len[e] >= 1 && one.preds[e] != NULL);
    BleuResult br;
    bleu_stats_compute(&one.st, &br);
    assert_true(br.score > 20 && br.score < 100);  // a quarter exact, a quarter other sentences
    scored_free(&one, N);
    scored_free(&many, N);
    scored_free(&capped, N);
    scored_free(&nested, N);

    // a row with a non-fill id past its end, at position 1234: the error one thread gives, at any thread count
    int32_t* bad = rows + (size_t)1234 * RS;
    const int len = evaluate_row_length(bad + 1, ML, 1);
    assert_true(len < ML - 1);
    bad[1 + ML - 1] = 5;
    char e1[1024], e16[1024];
    assert_int_equal(run(tok, ds, items, N, 1, &one, e1, sizeof e1), -1);
    assert_int_equal(run(tok, ds, items, N, 16, &many, e16, sizeof e16), -1);
    assert_string_equal(e1, e16);
    char want[64];
    snprintf(want, sizeof want, "example %lld: position %d", (long long)perm[1234], ML - 1);
    assert_contains(e1, want);
    scored_free(&one, N);
    scored_free(&many, N);
    free(perm);
    free(items);
    free(rows);
    dataset_close(ds);
    tokenizer_close(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads_same_result)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
