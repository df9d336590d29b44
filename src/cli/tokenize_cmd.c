/*
 * tokenize_cmd.c: `t5train tokenize`: text lines in, HF T5 ids out (or --decode: ids in, text out).
 * One output line per input line, so it can be diffed against HF line by line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "../base/common.h"
#include "../../data/tokenizer.h"

static void tokenize_usage(FILE* f) {
    fprintf(f,
            "usage: t5train tokenize [--model DIR | --tokenizer FILE] [options] [FILE]\n"
            "Reads lines from FILE (or stdin) and prints, one line per input line, the token ids that\n"
            "HF's T5 tokenizer gives for prefix + line (</s> appended).\n"
            "  --model DIR          model directory holding spiece.model\n"
            "  --tokenizer FILE     a spiece.model file\n"
            "  --source_lang L      source language (default en); with --target_lang picks the default prefix\n"
            "  --target_lang L      target language (default ro)\n"
            "  --source_prefix S    prefix for source text (default \"translate English to Romanian: \"; \"\" for none)\n"
            "  --target             the lines are target-side text: no prefix\n"
            "  --max_length N       truncate to N ids including </s> (default: no truncation)\n"
            "  --decode             the reverse: lines of ids in, text out (skip_special_tokens=True)\n"
            "  --keep_special       with --decode: keep special tokens in the text\n"
            "  --clean_up_tokenization_spaces  with --decode: HF's clean-up (\" .\" -> \".\"; older transformers default)\n"
            "  --help               this text\n");
}

int tokenize_main(int argc, char** argv) {
    const char* model = NULL;
    const char* src_lang = "en";
    const char* tgt_lang = "ro";
    const char* prefix = NULL;
    const char* file = NULL;
    bool target = false, decode = false, keep_special = false, clean_up = false;
    long max_length = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { tokenize_usage(stdout); return T5_EXIT_OK; }
        else if (!strcmp(a, "--target")) target = true;
        else if (!strcmp(a, "--decode")) decode = true;
        else if (!strcmp(a, "--keep_special")) keep_special = true;
        else if (!strcmp(a, "--clean_up_tokenization_spaces")) clean_up = true;
        else if ((!strcmp(a, "--model") || !strcmp(a, "--tokenizer") || !strcmp(a, "--model_name_or_path")) && has_val) model = argv[++i];
        else if (!strcmp(a, "--source_lang") && has_val) src_lang = argv[++i];
        else if (!strcmp(a, "--target_lang") && has_val) tgt_lang = argv[++i];
        else if (!strcmp(a, "--source_prefix") && has_val) prefix = argv[++i];
        else if (!strcmp(a, "--max_length") && has_val) {
            char* end;
            max_length = strtol(argv[++i], &end, 10);
            if (*end || max_length < 1 || max_length > (1L << 30))
                t5_die(T5_EXIT_USAGE, "tokenize: --max_length must be a positive integer, got '%s'", argv[i]);
        } else if (a[0] == '-' && a[1]) {
            t5_die_hint(T5_EXIT_USAGE, "t5train tokenize --help lists the options", "tokenize: unknown or incomplete option '%s'", a);
        } else if (!file) file = a;
        else t5_die(T5_EXIT_USAGE, "tokenize: more than one input file ('%s' and '%s')", file, a);
    }
    if (!model) t5_die_hint(T5_EXIT_USAGE, "pass --model DIR (with spiece.model) or --tokenizer FILE", "tokenize: no tokenizer given");
    char err[1024];
    Tokenizer* tok = tokenizer_open(model, err, sizeof err);
    if (!tok) t5_die(T5_EXIT_USAGE, "%s", err);
    char defprefix[256];
    if (!prefix) {
        tokenizer_default_prefix(src_lang, tgt_lang, defprefix, sizeof defprefix);
        prefix = defprefix;
    }
    if (target) prefix = "";

    FILE* in = stdin;
    const char* name = "<stdin>";
    if (file) {
        in = fopen(file, "rb");
        if (!in) t5_die(T5_EXIT_USAGE, "cannot open %s: %s", file, strerror(errno));
        name = file;
    }
    static char outbuf[1 << 16];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    char* line = NULL;
    size_t lcap = 0;
    ssize_t len;
    long lineno = 0;
    int32_t* ids = NULL;
    size_t cap = 0;
    while ((len = getline(&line, &lcap, in)) >= 0) {
        lineno++;
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (len > 0 && line[len - 1] == '\r') line[--len] = 0;
        if (decode) {
            int n = 0;
            char* p = line;
            while (*p) {
                while (*p == ' ' || *p == '\t') p++;
                if (!*p) break;
                char* end;
                errno = 0;
                long v = strtol(p, &end, 10);
                if (end == p || errno || v < INT32_MIN || v > INT32_MAX)
                    t5_die(T5_EXIT_USAGE, "%s:%ld: not a token id: '%.20s'", name, lineno, p);
                if ((size_t)n + 1 > cap) {
                    cap = cap ? cap * 2 : 256;
                    ids = (int32_t*)realloc_check(ids, cap * sizeof(int32_t));
                }
                ids[n++] = (int32_t)v;
                p = end;
            }
            char* text = tokenizer_decode_ex(tok, ids, n, !keep_special, clean_up);
            fputs(text, stdout);
            fputc('\n', stdout);
            free(text);
        } else {
            size_t bad;
            if (!utf8_validate(line, (size_t)len, &bad))
                t5_die(T5_EXIT_USAGE, "%s:%ld: invalid UTF-8 at byte %zu", name, lineno, bad + 1);
            int n = tokenizer_encode(tok, prefix, line, (size_t)len, (int)max_length, &ids, &cap, err, sizeof err);
            if (n < 0) t5_die(T5_EXIT_FAILURE, "%s:%ld: %s", name, lineno, err);
            for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
            fputc('\n', stdout);
        }
    }
    if (ferror(in)) t5_die(T5_EXIT_FAILURE, "error reading %s: %s", name, strerror(errno));
    if (fflush(stdout) != 0) t5_die(T5_EXIT_FAILURE, "cannot write the output: %s", strerror(errno));
    if (in != stdin) fclose(in);
    free(line);
    free(ids);
    tokenizer_close(tok);
    return T5_EXIT_OK;
}
