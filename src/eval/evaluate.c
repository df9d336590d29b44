/*
 * evaluate.c: generation-based evaluation's CPU pieces, the result and its outputs (evaluate.h has the HF semantics
 * reproduced; the generation loop is evaluate_generate.c).
 */
#include "evaluate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../base/common.h"
#include "../report/results.h"

int64_t evaluate_count_nonpad(const int32_t* row, int width, int pad) {
    int64_t n = 0;
    for (int i = 0; i < width; i++) n += row[i] != pad;
    return n;
}

int evaluate_row_length(const int32_t* row, int width, int eos) {
    for (int j = 1; j < width; j++)
        if (row[j] == eos) return j + 1;
    return width;
}

int64_t evaluate_hf_nonpad(const int32_t* own_len, const int32_t* own_nonpad, int64_t n, int64_t batch,
                           bool fill_counts) {
    int64_t total = 0;
    for (int64_t first = 0; first < n; first += batch) {
        const int64_t end = T5_MIN(first + batch, n);
        int32_t w = 0;
        for (int64_t e = first; e < end; e++) w = T5_MAX(w, own_len[e]);
        for (int64_t e = first; e < end; e++) total += own_nonpad[e] + (fill_counts ? w - own_len[e] : 0);
    }
    return total;
}

void evaluate_sort_line(const EvalGenResult* r, char* buf, size_t cap) {
    if (cap == 0) return;
    buf[0] = 0;
    if (!r->sorted) return;
    snprintf(buf, cap, "%s generation: batches sorted by source length: %lld padded source positions (input order: "
             "%lld)", r->prefix, (long long)r->src_positions, (long long)r->src_positions_input);
}

void evaluate_time_line(const EvalGenResult* r, char* buf, size_t cap) {
    snprintf(buf, cap, "%s generation time (this rank): generating %.3f s (encoder %.0f ms, decoder %.0f ms on the GPU, "
             "%lld CUDA graphs captured), gathering %.3f s, scoring %.3f s on %d threads", r->prefix, r->gen_s,
             r->gen.encoder_ms, r->gen.decoder_ms, (long long)r->gen.graphs_captured, r->gather_s, r->score_s,
             r->score_threads);
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

void evaluate_result_free(EvalGenResult* r) {
    if (r->predictions) {
        for (int64_t i = 0; i < r->num_samples; i++) free(r->predictions[i]);
        free(r->predictions);
    }
    free(r->ranks);
    memset(r, 0, sizeof *r);
}

void evaluate_shard_line(const EvalGenResult* r, char* buf, size_t cap) {
    if (cap == 0) return;
    buf[0] = 0;
    if (r->world <= 1 || !r->ranks) return;
    static const char* how[] = {"on one rank", "whole split on every rank", "sharded", "sharded in lockstep (steps agreed)"};
    static const char* names[] = {"batches per rank", "padding", "decoder steps", "agreements", "unit gathers"};
    const int m = r->mode >= EVAL_GEN_ONE_RANK && r->mode <= EVAL_GEN_LOCKSTEP ? (int)r->mode : 0;
    size_t k = (size_t)snprintf(buf, cap, "%s generation on %d ranks, %s: ", r->prefix, r->world, how[m]);
    for (int f = 0; f < (int)T5_ARRAY_LEN(names); f++) {
        k += (size_t)snprintf(buf + T5_MIN(k, cap - 1), k < cap ? cap - k : 1, "%s%s", f ? " | " : "", names[f]);
        for (int w = 0; w < r->world; w++) {
            const EvalGenRankCounts* c = &r->ranks[w];
            const int64_t v[] = {c->batches, c->padding, c->steps, c->agreements, c->gathers};
            k += (size_t)snprintf(buf + T5_MIN(k, cap - 1), k < cap ? cap - k : 1, " %lld", (long long)v[f]);
        }
    }
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
