/*
 * bleu_cmd.c: `t5train bleu HYP_FILE REF_FILE [REF_FILE...]`, corpus BLEU like the sacreBLEU CLI
 * (`sacrebleu REF... -i HYP`): every line is read as UTF-8 (LF-separated, as Python's
 * open(newline="\n")), rstrip()'d, and scored with sacreBLEU's defaults (src/eval/bleu.c).
 *
 * Exit codes: 0 ok, 2 usage errors, 1 bad files (missing/unreadable, invalid UTF-8, NUL bytes,
 * line-count mismatch, empty hypothesis file).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../eval/bleu.h"
#include "commands.h"
#include "../base/common.h"

static void bleu_usage(FILE* f) {
    fprintf(f,
            "usage: t5train bleu [options] HYP_FILE REF_FILE [REF_FILE...]\n"
            "\n"
            "Corpus BLEU of HYP_FILE against one or more reference files (one segment per line),\n"
            "exactly as sacreBLEU %s with its defaults: tokenize 13a, smooth exp, case-sensitive,\n"
            "max n-gram order 4, no effective order. Several REF_FILEs are multiple references.\n"
            "\n"
            "options:\n"
            "  --json, -f json   print the JSON object of `sacrebleu -f json`\n"
            "  --chrf            also print chrF2 (sacreBLEU CHRF defaults: nc 6, nw 0, beta 2)\n"
            "  --score-only, -b  print only the score(s)\n"
            "  --width N, -w N   decimals of the score (default 2, as str(BLEUScore); the sacreBLEU\n"
            "                    CLI defaults to 1: `-f json -w 1` reproduces its JSON byte for byte)\n"
            "  --help, -h        this help\n"
            "\n"
            "Output (text): the score line, e.g.\n"
            "  BLEU = 27.12 59.1/33.4/20.9/13.5 (BP = 1.000 ratio = 1.012 hyp_len = 4530 ref_len = 4476)\n"
            "followed by the sacreBLEU signature line\n"
            "  nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:%s\n",
            BLEU_SACREBLEU_VERSION, BLEU_SACREBLEU_VERSION);
}

typedef struct {
    const char* path;
    char* text;    // whole file, lines cut in place
    char** lines;  // (n,) rstrip()'d lines
    int n;
} LineFile;

// Reads path as sacreBLEU does (utf-8, newline="\n", line.rstrip()); an unusable file is an input
// error (exit 2).
static void line_file_read(LineFile* lf, const char* path, const char* what) {
    lf->path = path;
    if (t5_is_dir(path)) t5_die(T5_EXIT_USAGE, "%s file '%s' is a directory", what, path);
    size_t len = 0;
    lf->text = t5_read_file(path, &len);
    if (!lf->text) t5_die(T5_EXIT_USAGE, "cannot read %s file '%s': %s", what, path, strerror(errno));
    int cap = 1024, n = 0;
    lf->lines = malloc_check(cap * sizeof(char*));
    size_t start = 0;
    int lineno = 0;
    while (start < len) {
        char* nl = memchr(lf->text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - lf->text) : len;
        lineno++;
        char* line = lf->text + start;
        size_t ll = end - start;
        if (memchr(line, '\0', ll))
            t5_die(T5_EXIT_USAGE, "%s file '%s' line %d contains a NUL byte (not a text file?)", what, path,
                   lineno);
        size_t bad = 0;
        if (!bleu_utf8_valid(line, ll, &bad))
            t5_die(T5_EXIT_USAGE, "%s file '%s' line %d is not valid UTF-8 (byte %zu of the line)", what, path,
                   lineno, bad + 1);
        line[ll] = '\0';
        bleu_rstrip(line);
        if (n == cap) lf->lines = realloc_check(lf->lines, (cap *= 2) * sizeof(char*));
        lf->lines[n++] = line;
        start = end + 1;
    }
    lf->n = n;
}

// chrF2 JSON / text in sacreBLEU's format (CHRFScore has no verbose part)
static void chrf_format(double score, int nrefs, bool json, int width, char* buf, size_t cap) {
    char nr[24], sig[160], sc[48];
    if (nrefs < 0) snprintf(nr, sizeof nr, "var");
    else snprintf(nr, sizeof nr, "%d", nrefs);
    snprintf(sig, sizeof sig, "nrefs:%s|case:mixed|eff:yes|nc:%d|nw:0|space:no|version:%s", nr,
             CHRF_CHAR_ORDER, BLEU_SACREBLEU_VERSION);
    if (!json) {
        snprintf(buf, cap, "chrF%d = %.*f\n%s", CHRF_BETA, width, score, sig);
        return;
    }
    bleu_format_py_float(score, width, sc, sizeof sc);
    snprintf(buf, cap,
             "{\n \"name\": \"chrF%d\",\n \"score\": %s,\n \"signature\": \"%s\",\n \"nrefs\": \"%s\",\n"
             " \"case\": \"mixed\",\n \"eff\": \"yes\",\n \"nc\": \"%d\",\n \"nw\": \"0\",\n"
             " \"space\": \"no\",\n \"version\": \"%s\"\n}",
             CHRF_BETA, sc, sig, nr, CHRF_CHAR_ORDER, BLEU_SACREBLEU_VERSION);
}

int bleu_main(int argc, char** argv) {
    bool json = false, chrf = false, score_only = false;
    int width = 2;
    const char** files = malloc_check((size_t)(argc > 0 ? argc : 1) * sizeof(char*));
    int n_files = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bleu_usage(stdout);
            free(files);
            return T5_EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--format")) {
            if (i + 1 >= argc) t5_die(T5_EXIT_USAGE, "bleu: %s needs a value (json or text)", a);
            const char* v = argv[++i];
            if (!strcmp(v, "json")) json = true;
            else if (!strcmp(v, "text")) json = false;
            else t5_die(T5_EXIT_USAGE, "bleu: unknown format '%s' (expected json or text)", v);
        } else if (!strcmp(a, "-w") || !strcmp(a, "--width")) {
            char* end = NULL;
            if (i + 1 >= argc) t5_die(T5_EXIT_USAGE, "bleu: %s needs a value (decimals, 0..10)", a);
            long w = strtol(argv[++i], &end, 10);
            if (!end || *end || end == argv[i] || w < 0 || w > 10)
                t5_die(T5_EXIT_USAGE, "bleu: bad %s '%s' (expected an integer 0..10)", a, argv[i]);
            width = (int)w;
        } else if (!strcmp(a, "--chrf")) {
            chrf = true;
        } else if (!strcmp(a, "--score-only") || !strcmp(a, "-b")) {
            score_only = true;
        } else if (a[0] == '-' && a[1] != '\0' && strcmp(a, "--") != 0) {
            t5_die_hint(T5_EXIT_USAGE, "run `t5train bleu --help`", "bleu: unknown option '%s'", a);
        } else if (!strcmp(a, "--")) {
            for (i++; i < argc; i++) files[n_files++] = argv[i];
        } else {
            files[n_files++] = a;
        }
    }
    if (n_files < 2) {
        bleu_usage(stderr);
        t5_die(T5_EXIT_USAGE, "bleu: expected HYP_FILE and at least one REF_FILE (got %d file%s)", n_files,
               n_files == 1 ? "" : "s");
    }

    int n_refs = n_files - 1;
    LineFile hyp = {0};
    LineFile* refs = calloc_check((size_t)n_refs, sizeof(LineFile));
    line_file_read(&hyp, files[0], "hypothesis");
    for (int r = 0; r < n_refs; r++) line_file_read(&refs[r], files[r + 1], "reference");
    if (hyp.n == 0) t5_die(T5_EXIT_USAGE, "hypothesis file '%s' contains no sentence", hyp.path);
    for (int r = 0; r < n_refs; r++) {
        if (refs[r].n != hyp.n)
            t5_die(T5_EXIT_USAGE,
                   "system and reference streams have different lengths: hypothesis file '%s' has %d "
                   "lines, reference file '%s' has %d",
                   hyp.path, hyp.n, refs[r].path, refs[r].n);
    }

    BleuStats st;
    bleu_stats_init(&st, chrf);
    const char** seg = malloc_check((size_t)n_refs * sizeof(char*));
    char err[256];
    for (int i = 0; i < hyp.n; i++) {
        for (int r = 0; r < n_refs; r++) seg[r] = refs[r].lines[i];
        if (bleu_stats_add(&st, hyp.lines[i], seg, n_refs, err, sizeof err) != BLEU_OK)
            t5_die(T5_EXIT_FAILURE, "%s (line %d)", err, i + 1);
    }
    BleuResult res;
    bleu_stats_compute(&st, &res);
    if (res.tok_period_lines >= 100) {
        t5_warn("That's 100 lines that end in a tokenized period ('.')");
        t5_warn("It looks like you forgot to detokenize your test data, which may hurt your score.");
    }

    char buf[2048], cbuf[1024];
    if (chrf) chrf_format(bleu_stats_chrf(&st), res.nrefs, json, width, cbuf, sizeof cbuf);
    if (score_only && !json) {
        printf("%.*f\n", width, res.score);
        if (chrf) printf("%.*f\n", width, bleu_stats_chrf(&st));
    } else if (json) {
        bleu_format_json(&res, width, buf, sizeof buf);
        if (chrf) printf("[\n%s,\n%s\n]\n", buf, cbuf);  // sacreBLEU's list for several metrics
        else printf("%s\n", buf);
    } else {
        bleu_format_score(&res, width, buf, sizeof buf);
        printf("%s\n", buf);
        bleu_format_signature(&res, buf, sizeof buf);
        printf("%s\n", buf);
        if (chrf) printf("%s\n", cbuf);
    }

    bleu_stats_free(&st);
    free(seg);
    free(hyp.text);
    free(hyp.lines);
    for (int r = 0; r < n_refs; r++) {
        free(refs[r].text);
        free(refs[r].lines);
    }
    free(refs);
    free(files);
    return T5_EXIT_OK;
}
