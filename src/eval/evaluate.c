/*
 * evaluate.c: generation-based evaluation (see evaluate.h for the HF semantics reproduced).
 */
#include "evaluate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../base/common.h"
#include "../report/results.h"

int64_t evaluate_count_nonpad(const int32_t* row, int width, int pad) {
    int64_t n = 0;
    for (int i = 0; i < width; i++) n += row[i] != pad;
    return n;
}

double evaluate_round4(double x) {
    if (!isfinite(x)) return x;
    char buf[64];
    snprintf(buf, sizeof buf, "%.4f", x);  // glibc: correctly rounded, ties to even, as Python's round()
    double r = strtod(buf, NULL);
    return r == 0.0 ? 0.0 * x : r;  // keep the sign of zero as round(-0.00001, 4) == -0.0
}

char* evaluate_postprocess(const Tokenizer* tok, const int32_t* ids, int n, bool clean_up) {
    char* s = tokenizer_decode_ex(tok, ids, n, true, clean_up);
    char* b = bleu_strip(s);
    if (b != s) memmove(s, b, strlen(b) + 1);
    return s;
}

char* evaluate_join_lines(char* const* lines, int64_t n, size_t* len) {
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) total += strlen(lines[i]) + 1;
    char* out = malloc_check(total + 1);
    size_t p = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t l = strlen(lines[i]);
        memcpy(out + p, lines[i], l);
        p += l;
        if (i + 1 < n) out[p++] = '\n';
    }
    out[p] = 0;
    if (len) *len = p;
    return out;
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void evaluate_result_free(EvalGenResult* r) {
    if (r->predictions) {
        for (int64_t i = 0; i < r->num_samples; i++) free(r->predictions[i]);
        free(r->predictions);
    }
    memset(r, 0, sizeof *r);
}

int evaluate_generate(ZeroEngine* Z, const ParamTable* t, const Tokenizer* tok, const Dataset* ds,
                      const DataOptions* dopt, const EvalGenConfig* cfg, cudaStream_t stream, EvalGenResult* out,
                      char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    snprintf(out->prefix, sizeof out->prefix, "%s", cfg->prefix ? cfg->prefix : "eval");
    if (generate_options_check(&cfg->gen, err, errlen)) return -1;
    const int64_t N = dataset_size(ds);
    if (N <= 0) {
        snprintf(err, errlen, "the %s data set is empty (%s, after max_%s_samples): nothing to generate for",
                 strcmp(out->prefix, "predict") == 0 ? "prediction" : "evaluation",
                 dataset_source_path(ds) ? dataset_source_path(ds) : "no file", out->prefix);
        return -1;
    }
    if (dopt->eval_batch_size < 1) {
        snprintf(err, errlen, "per_device_eval_batch_size = %d must be >= 1", dopt->eval_batch_size);
        return -1;
    }
    // the longest padded source a batch can have
    int max_len = 1;
    for (int64_t i = 0; i < N; i++) max_len = T5_MAX(max_len, dataset_source_length(ds, i));
    int max_Ts = max_len;
    if (dopt->pad_to_max_length && dopt->max_source_length > max_Ts) max_Ts = dopt->max_source_length;
    if (dopt->pad_to_multiple_of > 1)
        max_Ts = (int)CEIL_DIV((size_t)max_Ts, (size_t)dopt->pad_to_multiple_of) * dopt->pad_to_multiple_of;

    T5Generator* G = t5_generator_create(t, Z, dopt->eval_batch_size, max_Ts, &cfg->gen, err, errlen);
    if (!G) return -1;
    if (cfg->no_cuda_graphs) t5_generator_set_cuda_graphs(G, false);
    DataLoader* dl = dataloader_open(ds, dopt, false, err, errlen);
    if (!dl) {
        t5_generator_destroy(G);
        return -1;
    }
    const double t0 = wall_s();
    const int ML = cfg->gen.max_length, pad = t->cfg.pad_token_id;
    const int B = dopt->eval_batch_size;
    int32_t* gen = malloc_check((size_t)B * ML * sizeof(int32_t));
    int32_t* ids = malloc_check((size_t)B * max_Ts * sizeof(int32_t));
    int32_t* mask = malloc_check((size_t)B * max_Ts * sizeof(int32_t));
    int64_t* rows = malloc_check((size_t)B * sizeof(int64_t));
    char** preds = cfg->keep_predictions ? calloc_check((size_t)N, sizeof(char*)) : NULL;
    BleuStats st;
    bleu_stats_init(&st, false);
    int64_t n_done = 0, nonpad = 0, n_steps = 0;
    const int64_t n_batches = dataloader_num_batches(dl);
    int rc = 0;
    Batch batch = {0};
    while (dataloader_next_batch(dl, &batch)) {
        n_steps++;
        // drop the eval padding rows (example_index -1, multi-rank runs)
        int nb = 0;
        for (int r = 0; r < batch.B; r++) {
            if (batch.example_index[r] < 0) continue;
            memcpy(ids + (size_t)nb * batch.Ts, batch.input_ids + (size_t)r * batch.Ts, (size_t)batch.Ts * 4);
            memcpy(mask + (size_t)nb * batch.Ts, batch.attention_mask + (size_t)r * batch.Ts, (size_t)batch.Ts * 4);
            rows[nb++] = batch.example_index[r];
        }
        if (nb == 0) continue;
        int width = 0;
        if (t5_generate(G, ids, mask, nb, batch.Ts, gen, &width, stream, err, errlen)) {
            rc = -1;
            break;
        }
        for (int r = 0; r < nb; r++) {
            const int32_t* row = gen + (size_t)r * ML;
            nonpad += evaluate_count_nonpad(row, width, pad);
            const int32_t *src, *tgt;
            int n_src, n_tgt;
            dataset_get(ds, rows[r], &src, &n_src, &tgt, &n_tgt);
            char* hyp = evaluate_postprocess(tok, row, width, false);
            char* ref = evaluate_postprocess(tok, tgt, n_tgt, false);
            const char* refs[1] = {ref};
            char berr[256];
            if (bleu_stats_add(&st, hyp, refs, 1, berr, sizeof berr) != BLEU_OK) {
                snprintf(err, errlen, "BLEU of example %lld (line %lld): %s", (long long)rows[r],
                         (long long)dataset_line(ds, rows[r]), berr);
                rc = -1;
            }
            free(hyp);
            free(ref);
            if (preds) {
                free(preds[rows[r]]);
                preds[rows[r]] = evaluate_postprocess(tok, row, width, true);
            }
            n_done++;
        }
        if (rc) break;
        if (cfg->progress && n_batches >= 10 && n_steps % (n_batches / 10) == 0)
            fprintf(stderr, "generation: %lld/%lld batches\n", (long long)n_steps, (long long)n_batches);
    }
    batch_free(&batch);
    if (rc == 0) {
        bleu_stats_compute(&st, &out->bleu_detail);
        out->bleu = evaluate_round4(out->bleu_detail.score);
        out->gen_len = evaluate_round4(n_done ? (double)nonpad / (double)n_done : 0.0);
        out->num_samples = n_done;
        out->num_steps = n_steps;
        out->runtime = wall_s() - t0;
        out->gen = *t5_generator_stats(G);
        if (preds) {
            // dataset order; every example appears once with a single rank
            int64_t k = 0;
            for (int64_t i = 0; i < N; i++)
                if (preds[i]) preds[k++] = preds[i];
            out->predictions = preds;
            out->num_samples = k;
            preds = NULL;
        }
    }
    if (preds) {
        for (int64_t i = 0; i < N; i++) free(preds[i]);
        free(preds);
    }
    bleu_stats_free(&st);
    free(gen);
    free(ids);
    free(mask);
    free(rows);
    dataloader_close(dl);
    t5_generator_destroy(G);
    return rc;
}

void evaluate_add_metrics(json_t* m, const EvalGenResult* r) {
    char key[64];
    snprintf(key, sizeof key, "%s_bleu", r->prefix);
    results_set_real(m, key, r->bleu);
    snprintf(key, sizeof key, "%s_gen_len", r->prefix);
    results_set_real(m, key, r->gen_len);
    results_speed_metrics(m, r->prefix, r->runtime, r->num_samples, r->num_steps, -1);
    snprintf(key, sizeof key, "%s_samples", r->prefix);
    results_set_int(m, key, r->num_samples);
}

int evaluate_write_predictions(const char* output_dir, const EvalGenResult* r, char* err, size_t errlen) {
    if (!r->predictions) {
        snprintf(err, errlen, "no predictions kept (EvalGenConfig.keep_predictions was false)");
        return -1;
    }
    size_t len = 0;
    char* text = evaluate_join_lines(r->predictions, r->num_samples, &len);
    char* path = t5_path_join(output_dir, "generated_predictions.txt");
    int rc = results_write_atomic(path, text, len, err, errlen);
    free(path);
    free(text);
    return rc;
}
