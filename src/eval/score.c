/*
 * score.c: generated rows scored on several threads with the one thread's result (contract in score.h).
 */
#include "score.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "../base/common.h"
#include "evaluate.h"

// One item into st. Touches only its example's entries of sc, so items of distinct examples run at once.
static int score_one(const EvalScorer* sc, BleuStats* st, const EvalScoreItem* it, char* err, size_t errlen) {
    const int32_t* row = it->row;
    const int64_t e = it->example;
    const int width = row[0];
    if (width < 0 || width > sc->max_length) {
        snprintf(err, errlen, "internal: example %lld (batch %lld) is not in the gathered results", (long long)e,
                 (long long)it->batch);
        return -1;
    }
    // gen_len's count, independent of this batch's width: the row's own part, the fill past it checked
    const int len = evaluate_row_length(row + 1, width, sc->eos);
    for (int x = len; x < width; x++)
        if (row[1 + x] != sc->fill) {
            snprintf(err, errlen, "internal: example %lld: position %d of %d holds %d after the row's end at %d, not "
                     "the fill %d", (long long)e, x, width, row[1 + x], len, sc->fill);
            return -1;
        }
    sc->own_len[e] = len;
    sc->own_nonpad[e] = (int32_t)evaluate_count_nonpad(row + 1, len, sc->pad);
    const int32_t *src, *tgt;
    int n_src, n_tgt;
    dataset_get(sc->ds, e, &src, &n_src, &tgt, &n_tgt);
    char* hyp = evaluate_postprocess(sc->tok, row + 1, width, false);
    char* ref = evaluate_postprocess(sc->tok, tgt, n_tgt, false);
    const char* refs[1] = {ref};
    char berr[256];
    const bool bad = bleu_stats_add(st, hyp, refs, 1, berr, sizeof berr) != BLEU_OK;
    free(hyp);
    free(ref);
    if (bad) {
        snprintf(err, errlen, "BLEU of example %lld (line %lld): %s", (long long)e,
                 (long long)dataset_line(sc->ds, e), berr);
        return -1;
    }
    if (sc->preds) sc->preds[e] = evaluate_postprocess(sc->tok, row + 1, width, true);
    return 0;
}

int eval_score_rows(const EvalScorer* sc, BleuStats* st, const EvalScoreItem* items, int64_t n, int* threads,
                    char* err, size_t errlen) {
    if (n <= 0) return 0;
    int T = (int)T5_MIN(T5_MAX(n / EVAL_SCORE_ROWS_PER_THREAD, (int64_t)1), (int64_t)EVAL_SCORE_MAX_THREADS);
    T = T5_MIN(T, omp_get_max_threads());
    *threads = T5_MAX(*threads, T);
    BleuStats* run = calloc_check((size_t)T, sizeof *run);
    int64_t* bad_at = malloc_check((size_t)T * sizeof(int64_t));
    char(*msg)[512] = calloc_check((size_t)T, sizeof *msg);
    const int64_t seg0 = st->n_segments;
    for (int t = 0; t < T; t++) {
        bleu_stats_init(&run[t], st->with_chrf);
        run[t].n_segments = seg0 + n * t / T;  // error messages number segments as one thread would
        bad_at[t] = -1;
    }
    // T runs whatever team OpenMP gives (OMP_THREAD_LIMIT or OMP_DYNAMIC may give fewer threads): each thread takes
    // runs t, t + team, ...; a run's statistics are its own, so the merge below is the same for any team
#pragma omp parallel num_threads(T) if (T > 1)
    {
        const int team = omp_get_num_threads();
        for (int t = omp_get_thread_num(); t < T; t += team)
            for (int64_t p = n * t / T; p < n * (t + 1) / T && bad_at[t] < 0; p++)
                if (score_one(sc, &run[t], &items[p], msg[t], sizeof msg[t])) bad_at[t] = p;
    }
    int rc = 0;
    for (int t = 0; t < T; t++) {
        if (rc == 0 && bad_at[t] >= 0) {  // runs in item order: the first one that failed holds the first failure
            snprintf(err, errlen, "%s", msg[t]);
            rc = -1;
        }
        run[t].n_segments -= seg0 + n * t / T;
        bleu_stats_merge(st, &run[t]);
        bleu_stats_free(&run[t]);
    }
    free(run);
    free(bad_at);
    free(msg);
    return rc;
}
