/*
 * readers.c: JSON-lines, parallel text and WMT SGML readers (see readers.h).
 */
#include "readers.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/base/common.h"
#include "tokenizer.h"

// ----------------------------------------------------------------------------
// storage

static void tp_keep_block(TextPairs* tp, char* block) {
    if (tp->n_blocks == tp->cap_blocks) {
        tp->cap_blocks = tp->cap_blocks ? tp->cap_blocks * 2 : 8;
        tp->blocks = (char**)realloc_check(tp->blocks, tp->cap_blocks * sizeof(char*));
    }
    tp->blocks[tp->n_blocks++] = block;
}

static void tp_push(TextPairs* tp, char* s, char* t, int64_t line) {
    if (tp->n == tp->cap) {
        tp->cap = tp->cap ? tp->cap * 2 : 1024;
        tp->src = (char**)realloc_check(tp->src, tp->cap * sizeof(char*));
        tp->tgt = (char**)realloc_check(tp->tgt, tp->cap * sizeof(char*));
        tp->line = (int64_t*)realloc_check(tp->line, tp->cap * sizeof(int64_t));
    }
    tp->src[tp->n] = s;
    tp->tgt[tp->n] = t;
    tp->line[tp->n] = line;
    tp->n++;
}

static bool is_blank(const char* s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\v' && *s != '\f') return false;
    return true;
}

// Keeps the pair or counts it as skipped.
static void tp_add(TextPairs* tp, char* s, char* t, int64_t line) {
    if (is_blank(s) || is_blank(t)) {
        if (!tp->n_skipped_empty) tp->first_skipped_line = line;
        tp->n_skipped_empty++;
        return;
    }
    tp_push(tp, s, t, line);
}

void text_pairs_free(TextPairs* tp) {
    if (!tp) return;
    for (int i = 0; i < tp->n_blocks; i++) free(tp->blocks[i]);
    free(tp->blocks);
    free(tp->src);
    free(tp->tgt);
    free(tp->line);
    memset(tp, 0, sizeof *tp);
}

static char* read_whole(const char* path, size_t* len, char* err, size_t errlen) {
    if (!t5_path_exists(path)) {
        t5_set_err(err, errlen, "file not found: %s", path);
        return NULL;
    }
    if (t5_is_dir(path)) {
        t5_set_err(err, errlen, "%s is a directory, expected a file", path);
        return NULL;
    }
    char* buf = t5_read_file(path, len);
    if (!buf) t5_set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return buf;
}

// Splits buf[0..len) into lines in place (strips \n and a trailing \r), validating each.
// Returns the number of lines or -1 with err set. *lines is malloc'd.
static int64_t split_lines(char* buf, size_t len, const char* path, char*** lines, char* err, size_t errlen) {
    int64_t n = 0, cap = 1024;
    char** v = (char**)malloc_check(cap * sizeof(char*));
    size_t pos = 0;
    while (pos < len) {
        char* nl = (char*)memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t l = end - pos;
        if (l > 0 && buf[pos + l - 1] == '\r') l--;
        int64_t lineno = n + 1;
        if (l > TEXT_MAX_LINE_BYTES) {
            t5_set_err(err, errlen, "%s:%lld: line is %zu bytes, longer than the %zu-byte limit (is this a text file?)",
                    path, (long long)lineno, l, TEXT_MAX_LINE_BYTES);
            free(v);
            return -1;
        }
        if (memchr(buf + pos, 0, l)) {
            t5_set_err(err, errlen, "%s:%lld: line contains a NUL byte (is this a text file?)", path, (long long)lineno);
            free(v);
            return -1;
        }
        size_t bad;
        if (!utf8_validate(buf + pos, l, &bad)) {
            t5_set_err(err, errlen, "%s:%lld: invalid UTF-8 at byte %zu of the line", path, (long long)lineno, bad + 1);
            free(v);
            return -1;
        }
        buf[pos + l] = 0;
        if (n == cap) {
            cap *= 2;
            v = (char**)realloc_check(v, cap * sizeof(char*));
        }
        v[n++] = buf + pos;
        pos = end + 1;
    }
    *lines = v;
    return n;
}

// ----------------------------------------------------------------------------
// parallel plain text

int text_pairs_read_parallel(const char* src_path, const char* tgt_path, TextPairs* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    size_t sl, tl;
    char* sb = read_whole(src_path, &sl, err, errlen);
    if (!sb) return -1;
    char* tb = read_whole(tgt_path, &tl, err, errlen);
    if (!tb) { free(sb); return -1; }
    tp_keep_block(out, sb);
    tp_keep_block(out, tb);
    char **sv = NULL, **tv = NULL;
    int64_t ns = split_lines(sb, sl, src_path, &sv, err, errlen);
    int64_t nt = ns < 0 ? -1 : split_lines(tb, tl, tgt_path, &tv, err, errlen);
    if (ns < 0 || nt < 0) { free(sv); free(tv); text_pairs_free(out); return -1; }
    if (ns != nt) {
        t5_set_err(err, errlen, "parallel files differ in length: %s has %lld lines but %s has %lld (line i of one must translate line i of the other)",
                src_path, (long long)ns, tgt_path, (long long)nt);
        free(sv); free(tv); text_pairs_free(out);
        return -1;
    }
    for (int64_t i = 0; i < ns; i++) tp_add(out, sv[i], tv[i], i + 1);
    free(sv);
    free(tv);
    return 0;
}

// ----------------------------------------------------------------------------
// JSON lines

int text_pairs_read_jsonl(const char* path, const char* src_lang, const char* tgt_lang, TextPairs* out,
                          char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    size_t len;
    char* buf = read_whole(path, &len, err, errlen);
    if (!buf) return -1;
    char** lines = NULL;
    int64_t n = split_lines(buf, len, path, &lines, err, errlen);
    if (n < 0) { free(buf); return -1; }
    // strings are copied into one arena sized by the file (JSON unescaping only shrinks text)
    char* arena = (char*)malloc_check(len + 2 * (size_t)n + 16);
    size_t used = 0;
    tp_keep_block(out, arena);
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        const char* l = lines[i];
        if (is_blank(l)) continue;
        json_error_t jerr;
        json_t* row = json_loads(l, JSON_REJECT_DUPLICATES, &jerr);
        if (!row) {
            t5_set_err(err, errlen, "%s:%lld: invalid JSON: %s (column %d)", path, (long long)(i + 1), jerr.text, jerr.column);
            rc = -1;
            break;
        }
        json_t* tr = json_is_object(row) ? json_object_get(row, "translation") : NULL;
        if (!tr || !json_is_object(tr)) {
            t5_set_err(err, errlen, "%s:%lld: expected {\"translation\": {\"%s\": ..., \"%s\": ...}}, found no \"translation\" object",
                    path, (long long)(i + 1), src_lang, tgt_lang);
            json_decref(row);
            rc = -1;
            break;
        }
        const char* langs[2] = {src_lang, tgt_lang};
        char* strs[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            json_t* v = json_object_get(tr, langs[k]);
            if (!v || !json_is_string(v)) {
                t5_set_err(err, errlen, "%s:%lld: \"translation\" has no %s \"%s\" key%s", path, (long long)(i + 1),
                        v ? "string value for the" : "", langs[k], v ? "" : " (check --source_lang/--target_lang)");
                rc = -1;
                break;
            }
            size_t sl = json_string_length(v);
            const char* sv = json_string_value(v);
            if (memchr(sv, 0, sl)) {
                t5_set_err(err, errlen, "%s:%lld: \"%s\" text contains a NUL character", path, (long long)(i + 1), langs[k]);
                rc = -1;
                break;
            }
            if (used + sl + 1 > len + 2 * (size_t)n + 16) {  // cannot happen; never overflow
                t5_set_err(err, errlen, "%s:%lld: internal error: JSON string larger than its line", path, (long long)(i + 1));
                rc = -1;
                break;
            }
            memcpy(arena + used, sv, sl + 1);
            strs[k] = arena + used;
            used += sl + 1;
        }
        json_decref(row);
        if (rc == 0) tp_add(out, strs[0], strs[1], i + 1);
    }
    free(lines);
    free(buf);
    if (rc) text_pairs_free(out);
    return rc;
}

// ----------------------------------------------------------------------------
// WMT SGML

size_t sgml_unescape(char* s, size_t len) {
    size_t r = 0, w = 0;
    while (r < len) {
        if (s[r] == '&') {
            const char* semi = (const char*)memchr(s + r, ';', T5_MIN(len - r, (size_t)12));
            if (semi) {
                size_t el = (size_t)(semi - (s + r)) + 1;  // includes & and ;
                const char* e = s + r + 1;
                size_t nl = el - 2;
                const char* rep = NULL;
                if (nl == 3 && !memcmp(e, "amp", 3)) rep = "&";
                else if (nl == 2 && !memcmp(e, "lt", 2)) rep = "<";
                else if (nl == 2 && !memcmp(e, "gt", 2)) rep = ">";
                else if (nl == 4 && !memcmp(e, "quot", 4)) rep = "\"";
                else if (nl == 4 && !memcmp(e, "apos", 4)) rep = "'";
                if (rep) {
                    s[w++] = rep[0];
                    r += el;
                    continue;
                }
                if (nl >= 2 && e[0] == '#') {
                    unsigned long cp = 0;
                    bool ok = true, hex = (e[1] == 'x' || e[1] == 'X');
                    size_t k = hex ? 2 : 1;
                    if (k >= nl) ok = false;
                    for (; ok && k < nl; k++) {
                        char c = e[k];
                        int d = (c >= '0' && c <= '9') ? c - '0'
                                : (hex && c >= 'a' && c <= 'f') ? c - 'a' + 10
                                : (hex && c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
                        if (d < 0) ok = false;
                        else cp = cp * (hex ? 16 : 10) + (unsigned long)d;
                        if (cp > 0x10FFFF) ok = false;
                    }
                    if (ok && cp > 0 && !(cp >= 0xD800 && cp <= 0xDFFF)) {
                        // UTF-8 of cp is never longer than the entity text "&#N;" (>= 4 bytes)
                        if (cp < 0x80) s[w++] = (char)cp;
                        else if (cp < 0x800) { s[w++] = (char)(0xC0 | (cp >> 6)); s[w++] = (char)(0x80 | (cp & 0x3F)); }
                        else if (cp < 0x10000) { s[w++] = (char)(0xE0 | (cp >> 12)); s[w++] = (char)(0x80 | ((cp >> 6) & 0x3F)); s[w++] = (char)(0x80 | (cp & 0x3F)); }
                        else { s[w++] = (char)(0xF0 | (cp >> 18)); s[w++] = (char)(0x80 | ((cp >> 12) & 0x3F)); s[w++] = (char)(0x80 | ((cp >> 6) & 0x3F)); s[w++] = (char)(0x80 | (cp & 0x3F)); }
                        r += el;
                        continue;
                    }
                }
            }
        }
        s[w++] = s[r++];
    }
    s[w] = 0;
    return w;
}

typedef struct {
    char** text;
    char** id;
    int64_t* line;
    int64_t n;
} SgmlSegs;

static int sgml_parse(char* buf, size_t len, const char* path, SgmlSegs* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int64_t cap = 0, lineno = 1;
    size_t pos = 0, counted = 0;
    size_t bad;
    if (memchr(buf, 0, len)) {
        t5_set_err(err, errlen, "%s: contains a NUL byte (is this an SGML file?)", path);
        return -1;
    }
    if (!utf8_validate(buf, len, &bad)) {
        int64_t l = 1;
        for (size_t i = 0; i < bad; i++) l += buf[i] == '\n';
        t5_set_err(err, errlen, "%s:%lld: invalid UTF-8", path, (long long)l);
        return -1;
    }
    for (;;) {
        char* seg = (char*)memmem(buf + pos, len - pos, "<seg", 4);
        if (!seg) break;
        size_t at = (size_t)(seg - buf);
        for (; counted < at; counted++) lineno += buf[counted] == '\n';
        char c = seg[4];
        if (c != ' ' && c != '>' && c != '\t') { pos = at + 4; continue; }
        char* gt = (char*)memchr(seg, '>', len - at);
        if (!gt) { t5_set_err(err, errlen, "%s:%lld: unterminated <seg tag", path, (long long)lineno); goto fail; }
        char* close = (char*)memmem(gt + 1, len - (size_t)(gt + 1 - buf), "</seg>", 6);
        if (!close) { t5_set_err(err, errlen, "%s:%lld: <seg> without </seg>", path, (long long)lineno); goto fail; }
        char* nlpos = (char*)memchr(gt + 1, '\n', (size_t)(close - gt - 1));
        if (nlpos) { t5_set_err(err, errlen, "%s:%lld: <seg> text runs over a line break (missing </seg>?)", path, (long long)lineno); goto fail; }
        // id="N" attribute
        char* id = NULL;
        *gt = 0;
        char* ida = strstr(seg, "id=");
        if (ida) {
            ida += 3;
            char q = (*ida == '"' || *ida == '\'') ? *ida++ : 0;
            char* e = ida;
            while (*e && (q ? *e != q : (*e != ' ' && *e != '\t'))) e++;
            *e = 0;
            id = ida;
        }
        char* text = gt + 1;
        *close = 0;
        size_t tl = sgml_unescape(text, (size_t)(close - text));
        // strip surrounding whitespace as sacrebleu / the WMT scripts do
        while (tl && (text[tl - 1] == ' ' || text[tl - 1] == '\t' || text[tl - 1] == '\r')) text[--tl] = 0;
        while (*text == ' ' || *text == '\t') text++;
        if (out->n == cap) {
            cap = cap ? cap * 2 : 1024;
            out->text = (char**)realloc_check(out->text, cap * sizeof(char*));
            out->id = (char**)realloc_check(out->id, cap * sizeof(char*));
            out->line = (int64_t*)realloc_check(out->line, cap * sizeof(int64_t));
        }
        out->text[out->n] = text;
        out->id[out->n] = id;
        out->line[out->n] = lineno;
        out->n++;
        pos = (size_t)(close - buf) + 6;
    }
    return 0;
fail:
    free(out->text); free(out->id); free(out->line);
    memset(out, 0, sizeof *out);
    return -1;
}

int text_pairs_read_sgml(const char* src_path, const char* tgt_path, TextPairs* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    size_t sl, tl;
    char* sb = read_whole(src_path, &sl, err, errlen);
    if (!sb) return -1;
    char* tb = read_whole(tgt_path, &tl, err, errlen);
    if (!tb) { free(sb); return -1; }
    tp_keep_block(out, sb);
    tp_keep_block(out, tb);
    SgmlSegs s, t;
    if (sgml_parse(sb, sl, src_path, &s, err, errlen)) { text_pairs_free(out); return -1; }
    if (sgml_parse(tb, tl, tgt_path, &t, err, errlen)) { free(s.text); free(s.id); free(s.line); text_pairs_free(out); return -1; }
    int rc = 0;
    if (s.n == 0) {
        t5_set_err(err, errlen, "%s: no <seg> elements found", src_path);
        rc = -1;
    } else if (s.n != t.n) {
        t5_set_err(err, errlen, "SGML files differ: %s has %lld segments but %s has %lld", src_path, (long long)s.n, tgt_path, (long long)t.n);
        rc = -1;
    } else {
        for (int64_t i = 0; i < s.n; i++) {
            if (s.id[i] && t.id[i] && strcmp(s.id[i], t.id[i])) {
                t5_set_err(err, errlen, "%s:%lld: segment id \"%s\" does not match id \"%s\" at %s:%lld",
                        src_path, (long long)s.line[i], s.id[i], t.id[i], tgt_path, (long long)t.line[i]);
                rc = -1;
                break;
            }
        }
        if (rc == 0)
            for (int64_t i = 0; i < s.n; i++) tp_add(out, s.text[i], t.text[i], i + 1);
    }
    free(s.text); free(s.id); free(s.line);
    free(t.text); free(t.id); free(t.line);
    if (rc) text_pairs_free(out);
    return rc;
}
