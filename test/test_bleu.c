/*
 * test_bleu.c: src/eval/bleu.c against sacreBLEU 2.6.0's own numbers (test/fixtures/bleu/sacrebleu_ref.json,
 * written by scripts/make_bleu_fixtures.py), and the `t5train bleu` command line.
 *
 * Exact: 13a tokenization of every tricky line, every n-gram count/total, sys_len, ref_len, nrefs
 * and the sacreBLEU score line text. Scores: |ours - sacreBLEU| <= 0.01 (the contract), and we
 * also print the largest difference seen (expected ~1e-13: same formulas, same libm).
 * Corpora built from the shared WMT16 validation references are rebuilt here with the same
 * deterministic perturbations as the script (perturb_line == perturb() in the script).
 */
#include "t5test.h"

#include <jansson.h>
#include <math.h>

#include "../src/eval/bleu.h"
#include "../src/base/common.h"

static json_t* g_fix = NULL;
static double g_max_score_diff = 0.0;

static json_t* fixture(void) {
    if (g_fix) return g_fix;
    char path[4096];
    snprintf(path, sizeof path, "%s/test/fixtures/bleu/sacrebleu_ref.json", t5test_repo_dir());
    json_error_t e;
    g_fix = json_load_file(path, 0, &e);
    if (!g_fix) fail_msg("cannot load %s: %s (line %d)", path, e.text, e.line);
    return g_fix;
}

// ---------------------------------------------------------------------------------------------
// the script's perturb(kind, i, line); words are line.split(' ') with empty fields kept

typedef struct {
    char** w;
    int n;
} Words;

static Words words_split(const char* line) {
    Words ws = {0};
    int cap = 16;
    ws.w = malloc_check(cap * sizeof(char*));
    const char* p = line;
    for (;;) {
        const char* sp = strchr(p, ' ');
        size_t len = sp ? (size_t)(sp - p) : strlen(p);
        if (ws.n == cap) ws.w = realloc_check(ws.w, (cap *= 2) * sizeof(char*));
        ws.w[ws.n] = malloc_check(len + 1);
        memcpy(ws.w[ws.n], p, len);
        ws.w[ws.n][len] = '\0';
        ws.n++;
        if (!sp) break;
        p = sp + 1;
    }
    return ws;
}

static void words_free(Words* ws) {
    for (int j = 0; j < ws->n; j++) free(ws->w[j]);
    free(ws->w);
}

// joins the words with keep[j] != 0 by single spaces
static char* words_join(const Words* ws, const int* keep) {
    size_t len = 1;
    for (int j = 0; j < ws->n; j++) len += strlen(ws->w[j]) + 1;
    char* out = malloc_check(len);
    out[0] = '\0';
    bool first = true;
    for (int j = 0; j < ws->n; j++) {
        if (keep && !keep[j]) continue;
        if (!first) strcat(out, " ");
        strcat(out, ws->w[j]);
        first = false;
    }
    return out;
}

static char* perturb_line(const char* kind, int i, const char* line) {
    if (!strcmp(kind, "identity")) return strdup_check(line);
    if (!strcmp(kind, "empty")) return i % 10 == 0 ? strdup_check("") : perturb_line("drop", i, line);
    if (!strcmp(kind, "mixed")) {
        char* d = perturb_line("drop", i, line);
        char* s = perturb_line("swap", i, d);
        free(d);
        return s;
    }
    Words ws = words_split(line);
    int m = ws.n;
    int* keep = malloc_check((size_t)m * sizeof(int));
    for (int j = 0; j < m; j++) keep[j] = 1;
    if (!strcmp(kind, "drop")) {
        for (int j = 0; j < m; j++) keep[j] = (i + j) % 5 != 4;
    } else if (!strcmp(kind, "swap")) {
        for (int j = 0; j < m;) {
            if ((i + j) % 7 == 0 && j + 1 < m) {
                char* t = ws.w[j];
                ws.w[j] = ws.w[j + 1];
                ws.w[j + 1] = t;
                j += 2;
            } else {
                j++;
            }
        }
    } else if (!strcmp(kind, "truncate")) {
        for (int j = 0; j < m; j++) keep[j] = j < m * 2 / 3;
    } else if (!strcmp(kind, "case")) {
        for (int j = 0; j < m; j++)
            if ((i + j) % 3 == 0)
                for (char* c = ws.w[j]; *c; c++)
                    if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 32);
    } else {
        fail_msg("unknown perturbation '%s'", kind);
    }
    char* out = words_join(&ws, keep);
    free(keep);
    words_free(&ws);
    return out;
}

// lines of a text file as the script reads them (newline="\n", rstrip())
static char** read_lines(const char* path, int* n_out) {
    size_t len;
    char* text = t5_read_file(path, &len);
    if (!text) fail_msg("cannot read %s", path);
    int cap = 1024, n = 0;
    char** lines = malloc_check(cap * sizeof(char*));
    size_t start = 0;
    while (start < len) {
        char* nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        text[end] = '\0';
        if (n == cap) lines = realloc_check(lines, (cap *= 2) * sizeof(char*));
        lines[n] = strdup_check(text + start);
        bleu_rstrip(lines[n]);
        n++;
        start = end + 1;
    }
    free(text);
    *n_out = n;
    return lines;
}

// ---------------------------------------------------------------------------------------------
// comparing one corpus with sacreBLEU's numbers

static void check_corpus(const char* name, const char** hyps, const char*** refs, int n_refs, int n,
                         json_t* expect) {
    BleuResult r;
    int rc = bleu_corpus(hyps, refs, n_refs, n, &r);
    if (rc != BLEU_OK) fail_msg("%s: bleu_corpus failed: %s", name, r.error);
    double want = json_real_value(json_object_get(expect, "score"));
    double d = fabs(r.score - want);
    if (d > g_max_score_diff) g_max_score_diff = d;
    if (d > 0.01) fail_msg("%s: score %.6f != sacreBLEU %.6f", name, r.score, want);
    for (int k = 0; k < BLEU_MAX_ORDER; k++) {
        int64_t c = json_integer_value(json_array_get(json_object_get(expect, "counts"), k));
        int64_t t = json_integer_value(json_array_get(json_object_get(expect, "totals"), k));
        if (r.counts[k] != c || r.totals[k] != t)
            fail_msg("%s: order %d: counts/totals %lld/%lld != sacreBLEU %lld/%lld", name, k + 1,
                     (long long)r.counts[k], (long long)r.totals[k], (long long)c, (long long)t);
        double p = json_number_value(json_array_get(json_object_get(expect, "precisions"), k));
        if (fabs(r.precisions[k] - p) > 1e-9)
            fail_msg("%s: precision %d: %.12f != %.12f", name, k + 1, r.precisions[k], p);
    }
    assert_int_equal(r.sys_len, json_integer_value(json_object_get(expect, "sys_len")));
    assert_int_equal(r.ref_len, json_integer_value(json_object_get(expect, "ref_len")));
    assert_int_equal(r.nrefs, json_integer_value(json_object_get(expect, "nrefs")));
    assert_true(fabs(r.bp - json_number_value(json_object_get(expect, "bp"))) < 1e-12);
    assert_true(fabs(r.ratio - json_number_value(json_object_get(expect, "ratio"))) < 1e-12);
    // str(BLEUScore): the text line, byte for byte
    char line[512];
    bleu_format_score(&r, 2, line, sizeof line);
    assert_string_equal(line, json_string_value(json_object_get(expect, "text")));
    // chrF2
    double chrf = 0.0;
    char err[256];
    assert_int_equal(chrf_corpus(hyps, refs, n_refs, n, &chrf, err, sizeof err), BLEU_OK);
    double want_chrf = json_number_value(json_object_get(expect, "chrf"));
    print_message("# %-24s BLEU %10.6f (sacreBLEU %10.6f, |diff| %.1e)  chrF2 %10.6f (sacreBLEU %10.6f)\n", name,
                  r.score, want, d, chrf, want_chrf);
    if (fabs(chrf - want_chrf) > 0.01) fail_msg("%s: chrF %.6f != sacreBLEU %.6f", name, chrf, want_chrf);
}

static void test_tokenize_13a(void** state) {
    (void)state;
    json_t* cases = json_object_get(fixture(), "tokenize_13a");
    assert_true(json_array_size(cases) >= 30);
    int bad = 0;
    size_t i;
    json_t* c;
    json_array_foreach(cases, i, c) {
        const char* in = json_string_value(json_object_get(c, "in"));
        const char* want = json_string_value(json_object_get(c, "out"));
        char* got = bleu_tokenize_13a(in);
        if (strcmp(got, want) != 0) {
            print_message("case %zu: in  [%s]\n  ours [%s]\n  want [%s]\n", i, in, got, want);
            bad++;
        }
        free(got);
    }
    assert_int_equal(bad, 0);
}

static void test_corpora_inline(void** state) {
    (void)state;
    json_t* corpora = json_object_get(fixture(), "corpora");
    size_t ci;
    json_t* c;
    int n_checked = 0;
    json_array_foreach(corpora, ci, c) {
        if (strcmp(json_string_value(json_object_get(c, "source")), "inline") != 0) continue;
        const char* name = json_string_value(json_object_get(c, "name"));
        json_t* jh = json_object_get(c, "hyps");
        json_t* jr = json_object_get(c, "refs");
        int n = (int)json_array_size(jh), n_refs = (int)json_array_size(jr);
        const char** hyps = calloc_check((size_t)n + 1, sizeof(char*));
        const char*** refs = calloc_check((size_t)n_refs, sizeof(char**));
        for (int i = 0; i < n; i++) hyps[i] = json_string_value(json_array_get(jh, i));
        for (int r = 0; r < n_refs; r++) {
            refs[r] = calloc_check((size_t)n + 1, sizeof(char*));
            // a JSON null is sacreBLEU's None (no reference): json_string_value gives NULL
            for (int i = 0; i < n; i++) refs[r][i] = json_string_value(json_array_get(json_array_get(jr, r), i));
        }
        check_corpus(name, hyps, refs, n_refs, n, json_object_get(c, "expect"));
        for (int r = 0; r < n_refs; r++) free(refs[r]);
        free(refs);
        free(hyps);
        n_checked++;
    }
    assert_true(n_checked >= 15);
}

static void test_corpora_validation(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char path[4096];
    int n_ro = 0, n_en = 0;
    snprintf(path, sizeof path, "%s/wmt16-ro-en/validation.ro", t5test_data_dir());
    char** ro = read_lines(path, &n_ro);
    snprintf(path, sizeof path, "%s/wmt16-ro-en/validation.en", t5test_data_dir());
    char** en = read_lines(path, &n_en);
    assert_int_equal(n_ro, 1999);
    assert_int_equal(n_en, 1999);

    json_t* corpora = json_object_get(fixture(), "corpora");
    size_t ci;
    json_t* c;
    int n_checked = 0;
    json_array_foreach(corpora, ci, c) {
        if (strcmp(json_string_value(json_object_get(c, "source")), "validation") != 0) continue;
        const char* name = json_string_value(json_object_get(c, "name"));
        int limit = (int)json_integer_value(json_object_get(c, "limit"));
        int n = limit ? limit : n_ro;
        json_t* jh = json_object_get(c, "hyp");
        json_t* jr = json_object_get(c, "refs");
        int n_refs = (int)json_array_size(jr);
        char** hyps = malloc_check((size_t)n * sizeof(char*));
        char*** refs = malloc_check((size_t)n_refs * sizeof(char**));
        char** hb = !strcmp(json_string_value(json_object_get(jh, "base")), "en") ? en : ro;
        const char* hp = json_string_value(json_object_get(jh, "perturb"));
        for (int i = 0; i < n; i++) hyps[i] = perturb_line(hp, i, hb[i]);
        for (int r = 0; r < n_refs; r++) {
            json_t* spec = json_array_get(jr, r);
            char** rb = !strcmp(json_string_value(json_object_get(spec, "base")), "en") ? en : ro;
            const char* rp = json_string_value(json_object_get(spec, "perturb"));
            refs[r] = malloc_check((size_t)n * sizeof(char*));
            for (int i = 0; i < n; i++) refs[r][i] = perturb_line(rp, i, rb[i]);
        }
        check_corpus(name, (const char**)hyps, (const char***)refs, n_refs, n, json_object_get(c, "expect"));
        for (int i = 0; i < n; i++) free(hyps[i]);
        for (int r = 0; r < n_refs; r++) {
            for (int i = 0; i < n; i++) free(refs[r][i]);
            free(refs[r]);
        }
        free(hyps);
        free(refs);
        n_checked++;
    }
    assert_true(n_checked >= 10);
    print_message("# largest |BLEU - sacreBLEU| so far: %.2e\n", g_max_score_diff);
    for (int i = 0; i < n_ro; i++) free(ro[i]);
    for (int i = 0; i < n_en; i++) free(en[i]);
    free(ro);
    free(en);
}

// streaming (the evaluator's path) must give the one-call result, segment by segment
static void test_streaming_matches_corpus(void** state) {
    (void)state;
    const char* hyps[] = {"Vremea e frumoasă azi.", "", "Un test, cu 1.000 de lei."};
    const char* r1[] = {"Vremea este frumoasă azi.", "ceva", "Un test cu 1.000 de lei."};
    const char* r2[] = {"Azi vremea e frumoasă.", NULL, "Un test, cu 1000 de lei."};
    const char** refs[] = {r1, r2};
    BleuResult a, b;
    assert_int_equal(bleu_corpus(hyps, refs, 2, 3, &a), BLEU_OK);
    BleuStats st;
    bleu_stats_init(&st, false);
    for (int i = 0; i < 3; i++) {
        const char* seg[2] = {r1[i], r2[i]};
        assert_int_equal(bleu_stats_add(&st, hyps[i], seg, 2, NULL, 0), BLEU_OK);
    }
    bleu_stats_compute(&st, &b);
    bleu_stats_free(&st);
    assert_true(a.score == b.score);
    assert_int_equal(a.nrefs, -1);  // 2, 1, 2 references: sacreBLEU's "var"
    char sig[200];
    bleu_format_signature(&a, sig, sizeof sig);
    assert_string_equal(sig, "nrefs:var|case:mixed|eff:no|tok:13a|smooth:exp|version:" BLEU_SACREBLEU_VERSION);
}

// the evaluator's threads: segments scored into separate statistics and merged give the one-pass totals, whatever
// the cut (every count is a sum; nrefs "var" once two parts disagree, or within one part)
static void test_stats_merge(void** state) {
    (void)state;
    const char* hyps[] = {"Vremea e frumoasă azi.", "", "Un test, cu 1.000 de lei.", "Ana are mere .", "x y z"};
    const char* r1[] = {"Vremea este frumoasă azi.", "ceva", "Un test cu 1.000 de lei.", "Ana are mere.", "x y"};
    const char* r2[] = {"Azi vremea e frumoasă.", NULL, "Un test, cu 1000 de lei.", NULL, NULL};
    const int n = 5;
    for (int nref = 1; nref <= 2; nref++) {
        BleuStats whole;
        bleu_stats_init(&whole, true);
        for (int i = 0; i < n; i++) {
            const char* seg[2] = {r1[i], r2[i]};
            assert_int_equal(bleu_stats_add(&whole, hyps[i], seg, nref, NULL, 0), BLEU_OK);
        }
        for (int cut = 0; cut <= n; cut++) {
            BleuStats a, b;
            bleu_stats_init(&a, true);
            bleu_stats_init(&b, true);
            for (int i = 0; i < n; i++) {
                const char* seg[2] = {r1[i], r2[i]};
                assert_int_equal(bleu_stats_add(i < cut ? &a : &b, hyps[i], seg, nref, NULL, 0), BLEU_OK);
            }
            bleu_stats_merge(&a, &b);
            assert_int_equal(a.sys_len, whole.sys_len);
            assert_int_equal(a.ref_len, whole.ref_len);
            assert_memory_equal(a.counts, whole.counts, sizeof a.counts);
            assert_memory_equal(a.totals, whole.totals, sizeof a.totals);
            assert_memory_equal(a.chrf, whole.chrf, sizeof a.chrf);
            assert_int_equal(a.n_segments, n);
            assert_int_equal(a.tok_period_lines, whole.tok_period_lines);
            assert_int_equal(a.nrefs, whole.nrefs);
            BleuResult ra, rw;
            bleu_stats_compute(&a, &ra);
            bleu_stats_compute(&whole, &rw);
            assert_true(ra.score == rw.score);
            bleu_stats_free(&a);
            bleu_stats_free(&b);
        }
        assert_int_equal(whole.nrefs, nref == 1 ? 1 : -1);
        assert_int_equal(whole.tok_period_lines, 1);
        bleu_stats_free(&whole);
    }
}

static void test_bad_input(void** state) {
    (void)state;
    // strict UTF-8, as Python's decoder
    const char* bad[] = {"\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ab\xC3",
                         "\x80", "\xFF", "ok \xE2\x82", "\xF5\x80\x80\x80"};
    for (size_t k = 0; k < T5_ARRAY_LEN(bad); k++) {
        size_t off = 99;
        if (bleu_utf8_valid(bad[k], strlen(bad[k]), &off)) fail_msg("case %zu accepted", k);
    }
    size_t off = 0;
    assert_false(bleu_utf8_valid("ok \xE2\x82", 6, &off));
    assert_int_equal(off, 3);
    assert_true(bleu_utf8_valid("ș ț ă î â 😀 \xF4\x8F\xBF\xBF", strlen("ș ț ă î â 😀 \xF4\x8F\xBF\xBF"), NULL));

    const char* hyps[] = {"bun", "r\xC3(u"};
    const char* r1[] = {"bun", "rău"};
    const char** refs[] = {r1};
    BleuResult r;
    assert_int_equal(bleu_corpus(hyps, refs, 1, 2, &r), BLEU_ERR_UTF8);
    assert_contains(r.error, "invalid UTF-8 in the hypothesis of segment 2");
    const char* none[] = {"x", NULL};
    const char** refs2[] = {none};
    const char* hyps2[] = {"x", "y"};
    assert_int_equal(bleu_corpus(hyps2, refs2, 1, 2, &r), BLEU_ERR_NO_REF);
    assert_contains(r.error, "segment 2 has no reference");
    assert_int_equal(bleu_corpus(hyps2, refs2, 0, 2, &r), BLEU_ERR_ARG);
}

// run_translation.py's postprocess_text strip() and the CLI's rstrip()
static void test_strip(void** state) {
    (void)state;
    char s[] = " \t\xC2\xA0\xE3\x80\x80 Bună ziua \xE2\x80\xA8\x1f\r\n";
    assert_string_equal(bleu_strip(s), "Bună ziua");
    char t[] = "x\xE2\x80\x8B";  // U+200B is not whitespace for Python
    assert_string_equal(bleu_strip(t), "x\xE2\x80\x8B");
    char u[] = " \n ";
    assert_string_equal(bleu_strip(u), "");
    char v[] = "  a b  ";
    bleu_rstrip(v);
    assert_string_equal(v, "  a b");
}

// ---------------------------------------------------------------------------------------------
// the command line

static void write_lines(const char* path, json_t* arr) {
    FILE* f = fopen(path, "wb");
    assert_non_null(f);
    size_t i;
    json_t* v;
    json_array_foreach(arr, i, v) fprintf(f, "%s\n", json_string_value(v));
    fclose(f);
}

static char g_hyp[4096], g_ref1[4096], g_ref2[4096];

static void cli_files(void) {
    json_t* cli = json_object_get(fixture(), "cli");
    snprintf(g_hyp, sizeof g_hyp, "%s/hyp.txt", t5test_tmpdir());
    snprintf(g_ref1, sizeof g_ref1, "%s/ref1.txt", t5test_tmpdir());
    snprintf(g_ref2, sizeof g_ref2, "%s/ref2.txt", t5test_tmpdir());
    write_lines(g_hyp, json_object_get(cli, "hyp"));
    write_lines(g_ref1, json_array_get(json_object_get(cli, "refs"), 0));
    write_lines(g_ref2, json_array_get(json_object_get(cli, "refs"), 1));
}

static void test_cli_json_matches_sacrebleu(void** state) {
    (void)state;
    cli_files();
    json_t* cli = json_object_get(fixture(), "cli");
    static char out[65536];
    int rc = t5test_run(out, sizeof out, "%s bleu %s '%s' '%s' '%s' 2>/dev/null", t5test_bin(),
                        json_string_value(json_object_get(cli, "args_2refs")), g_hyp, g_ref1, g_ref2);
    assert_int_equal(rc, 0);
    assert_string_equal(out, json_string_value(json_object_get(cli, "stdout_2refs")));
    rc = t5test_run(out, sizeof out, "%s bleu %s '%s' '%s' 2>/dev/null", t5test_bin(),
                    json_string_value(json_object_get(cli, "args_1ref")), g_hyp, g_ref1);
    assert_int_equal(rc, 0);
    assert_string_equal(out, json_string_value(json_object_get(cli, "stdout_1ref")));
}

static void test_cli_text(void** state) {
    (void)state;
    cli_files();
    char out[8192];
    int rc = t5test_run(out, sizeof out, "%s bleu '%s' '%s'", t5test_bin(), g_hyp, g_ref1);
    assert_int_equal(rc, 0);
    assert_string_equal(out,
                        "BLEU = 41.48 100.0/100.0/100.0/100.0 (BP = 0.415 ratio = 0.532 hyp_len = 200 ref_len = 376)\n"
                        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" BLEU_SACREBLEU_VERSION "\n");
    rc = t5test_run(out, sizeof out, "%s bleu -b '%s' '%s'", t5test_bin(), g_hyp, g_ref1);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "41.48\n");
    rc = t5test_run(out, sizeof out, "%s bleu --help", t5test_bin());
    assert_int_equal(rc, 0);
    assert_contains(out, "usage: t5train bleu");
}

static void test_cli_errors(void** state) {
    (void)state;
    cli_files();
    char out[8192], p[4096];
    // usage errors: exit 2
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu", t5test_bin()), 2);
    assert_contains(out, "expected HYP_FILE and at least one REF_FILE");
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu '%s'", t5test_bin(), g_hyp), 2);
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu --frobnicate '%s' '%s'", t5test_bin(), g_hyp, g_ref1), 2);
    assert_contains(out, "unknown option '--frobnicate'");
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu -w x '%s' '%s'", t5test_bin(), g_hyp, g_ref1), 2);
    // bad files: input errors, exit 2, one line naming the file
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu '%s' /nonexistent/ref.txt", t5test_bin(), g_hyp), 2);
    assert_contains(out, "t5train: error: cannot read reference file '/nonexistent/ref.txt'");
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu '%s' '%s'", t5test_bin(), g_hyp, t5test_tmpdir()), 2);
    assert_contains(out, "is a directory");
    snprintf(p, sizeof p, "%s/short.txt", t5test_tmpdir());
    t5test_write_file(p, "one\ntwo\n");
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu '%s' '%s'", t5test_bin(), p, g_ref1), 2);
    assert_contains(out, "different lengths: hypothesis file");
    assert_contains(out, "has 2 lines");
    snprintf(p, sizeof p, "%s/bad.txt", t5test_tmpdir());
    t5test_write_file(p, "good line\nbad \xC3\x28 line\n");
    char r2[4096];
    snprintf(r2, sizeof r2, "%s/r2.txt", t5test_tmpdir());
    t5test_write_file(r2, "a\nb\n");
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu '%s' '%s'", t5test_bin(), p, r2), 2);
    assert_contains(out, "hypothesis file");
    assert_contains(out, "line 2 is not valid UTF-8 (byte 5 of the line)");
    snprintf(p, sizeof p, "%s/empty.txt", t5test_tmpdir());
    t5test_write_file(p, "");
    assert_int_equal(t5test_run(out, sizeof out, "%s bleu '%s' '%s'", t5test_bin(), p, p), 2);
    assert_contains(out, "contains no sentence");
    // the error is one line, no crash output
    assert_null(strchr(out, '\n') == NULL ? NULL : strchr(strchr(out, '\n') + 1, '\n'));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenize_13a),
        cmocka_unit_test(test_corpora_inline),
        cmocka_unit_test(test_corpora_validation),
        cmocka_unit_test(test_streaming_matches_corpus),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_strip),
        cmocka_unit_test(test_cli_json_matches_sacrebleu),
        cmocka_unit_test(test_cli_text),
        cmocka_unit_test(test_cli_errors),
        cmocka_unit_test(test_stats_merge),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_fix) json_decref(g_fix);
    return rc;
}
