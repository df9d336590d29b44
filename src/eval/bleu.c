/*
 * bleu.c: sacreBLEU-exact corpus BLEU (13a, smooth "exp") and chrF2 on the CPU. See bleu.h for the
 * contract and docs/bleu.md for what is matched and how it is tested.
 *
 * The 13a tokenizer is four Python regexes applied to a str. Every character class in them is
 * ASCII-only ([^0-9] is the only negated one), so running them over UTF-8 bytes gives the same
 * string as running them over code points: a multibyte character is never inside a class, and
 * its continuation bytes can never start or end a match (they are neither [.,] nor [0-9] nor '-').
 * The Unicode-aware parts are str.rstrip() and str.split(), which use Python's whitespace set.
 */
#include "bleu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"

// ----------------------------------------------------------------------------
// UTF-8 helpers

bool bleu_utf8_valid(const char* s, size_t len, size_t* bad_offset) {
    const unsigned char* p = (const unsigned char*)s;
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        size_t n = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) lo = 0xA0;        // overlong
            if (c == 0xED) hi = 0x9F;        // surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) lo = 0x90;        // overlong
            if (c == 0xF4) hi = 0x8F;        // above U+10FFFF
        } else {
            if (bad_offset) *bad_offset = i;
            return false;
        }
        if (i + n >= len) {  // truncated sequence at the end
            if (bad_offset) *bad_offset = i;
            return false;
        }
        for (size_t k = 1; k <= n; k++) {
            unsigned char b = p[i + k];
            unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
            if (b < l || b > h) {
                if (bad_offset) *bad_offset = i;
                return false;
            }
        }
        i += n + 1;
    }
    return true;
}

// byte length of the (valid) UTF-8 character starting with lead byte c
static inline int utf8_char_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    return 4;
}

// Byte length of the Python-whitespace character at p (NUL-terminated, valid UTF-8), or 0.
static inline int ws_len(const unsigned char* p) {
    unsigned char c = p[0];
    if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return 1;
    if (c == 0xC2) return (p[1] == 0x85 || p[1] == 0xA0) ? 2 : 0;
    if (c == 0xE1) return (p[1] == 0x9A && p[2] == 0x80) ? 3 : 0;
    if (c == 0xE2) {
        if (p[1] == 0x80 && ((p[2] >= 0x80 && p[2] <= 0x8A) || p[2] == 0xA8 || p[2] == 0xA9 || p[2] == 0xAF))
            return 3;
        if (p[1] == 0x81 && p[2] == 0x9F) return 3;
        return 0;
    }
    if (c == 0xE3) return (p[1] == 0x80 && p[2] == 0x80) ? 3 : 0;
    return 0;
}

// Length of s after Python's str.rstrip().
static size_t rstrip_len(const char* s) {
    const unsigned char* p = (const unsigned char*)s;
    size_t i = 0, end = 0;
    while (p[i]) {
        int w = ws_len(p + i);
        if (w) {
            i += w;
        } else {
            i += utf8_char_len(p[i]);
            end = i;
        }
    }
    return end;
}

void bleu_rstrip(char* s) { s[rstrip_len(s)] = '\0'; }

char* bleu_strip(char* s) {
    unsigned char* p = (unsigned char*)s;
    size_t start = 0;
    int w;
    while (p[start] && (w = ws_len(p + start)) > 0) start += w;
    size_t end = start + rstrip_len(s + start);
    s[end] = '\0';
    return s + start;
}

// ----------------------------------------------------------------------------
// growable byte buffer

typedef struct {
    char* data;
    size_t len, cap;
} Buf;

static void buf_reserve(Buf* b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    b->data = realloc_check(b->data, cap);
    b->cap = cap;
}
static inline void buf_putc(Buf* b, char c) {
    buf_reserve(b, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}
static inline void buf_put(Buf* b, const char* s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

// Python's str.replace(old, new) over in[0..n): all non-overlapping occurrences, left to right.
static void replace_all(Buf* out, const char* in, size_t n, const char* old, const char* new_) {
    size_t lo = strlen(old), ln = strlen(new_);
    out->len = 0;
    buf_reserve(out, n);
    out->data[0] = '\0';
    size_t i = 0;
    while (i < n) {
        if (i + lo <= n && memcmp(in + i, old, lo) == 0) {
            buf_put(out, new_, ln);
            i += lo;
        } else {
            buf_putc(out, in[i]);
            i++;
        }
    }
}

static inline bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

// the class of 13a's first regex: [\{-\~\[-\` -\&\(-\+\:-\@\/]
static inline bool in_13a_class(unsigned char c) {
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
           (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

char* bleu_tokenize_13a(const char* line) {
    Buf a = {0}, b = {0};
    // BLEU._preprocess_segment: line.rstrip()
    size_t n = rstrip_len(line);
    buf_put(&a, line, n);
    // Tokenizer13a: language-independent part
    replace_all(&b, a.data, a.len, "<skipped>", "");
    replace_all(&a, b.data, b.len, "-\n", "");
    replace_all(&b, a.data, a.len, "\n", " ");
    if (memchr(b.data, '&', b.len)) {
        replace_all(&a, b.data, b.len, "&quot;", "\"");
        replace_all(&b, a.data, a.len, "&amp;", "&");
        replace_all(&a, b.data, b.len, "&lt;", "<");
        replace_all(&b, a.data, a.len, "&gt;", ">");
    }
    // f' {line} ' and regex 1: ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> ' \1 '
    a.len = 0;
    buf_putc(&a, ' ');
    buf_putc(&a, ' ');
    buf_putc(&a, ' ');  // the leading ' ' is itself in the class: ' ' -> '   '
    for (size_t i = 0; i < b.len; i++) {
        unsigned char c = (unsigned char)b.data[i];
        if (in_13a_class(c)) {
            buf_putc(&a, ' ');
            buf_putc(&a, (char)c);
            buf_putc(&a, ' ');
        } else {
            buf_putc(&a, (char)c);
        }
    }
    buf_put(&a, "   ", 3);
    // regex 2: ([^0-9])([\.,]) -> '\1 \2 ' (non-overlapping, left to right)
    b.len = 0;
    buf_reserve(&b, a.len);
    for (size_t i = 0; i < a.len;) {
        unsigned char c = (unsigned char)a.data[i];
        if (i + 1 < a.len && !is_digit(c) && (a.data[i + 1] == '.' || a.data[i + 1] == ',')) {
            buf_putc(&b, (char)c);
            buf_putc(&b, ' ');
            buf_putc(&b, a.data[i + 1]);
            buf_putc(&b, ' ');
            i += 2;
        } else {
            buf_putc(&b, (char)c);
            i++;
        }
    }
    // regex 3: ([\.,])([^0-9]) -> ' \1 \2'
    a.len = 0;
    buf_reserve(&a, b.len);
    for (size_t i = 0; i < b.len;) {
        unsigned char c = (unsigned char)b.data[i];
        if (i + 1 < b.len && (c == '.' || c == ',') && !is_digit((unsigned char)b.data[i + 1])) {
            buf_putc(&a, ' ');
            buf_putc(&a, (char)c);
            buf_putc(&a, ' ');
            buf_putc(&a, b.data[i + 1]);
            i += 2;
        } else {
            buf_putc(&a, (char)c);
            i++;
        }
    }
    // regex 4: ([0-9])(-) -> '\1 \2 '
    b.len = 0;
    buf_reserve(&b, a.len);
    for (size_t i = 0; i < a.len;) {
        unsigned char c = (unsigned char)a.data[i];
        if (i + 1 < a.len && is_digit(c) && a.data[i + 1] == '-') {
            buf_putc(&b, (char)c);
            buf_putc(&b, ' ');
            buf_putc(&b, '-');
            buf_putc(&b, ' ');
            i += 2;
        } else {
            buf_putc(&b, (char)c);
            i++;
        }
    }
    // ' '.join(line.split()) with Python's Unicode whitespace
    a.len = 0;
    buf_reserve(&a, b.len);
    a.data[0] = '\0';
    const unsigned char* p = (const unsigned char*)b.data;
    size_t i = 0;
    while (p[i]) {
        int w;
        while (p[i] && (w = ws_len(p + i)) > 0) i += w;
        if (!p[i]) break;
        if (a.len) buf_putc(&a, ' ');
        size_t start = i;
        while (p[i] && ws_len(p + i) == 0) i += utf8_char_len(p[i]);
        buf_put(&a, b.data + start, i - start);
    }
    free(b.data);
    return a.data;
}

// ----------------------------------------------------------------------------
// n-gram hash table: keys are byte spans (an n-gram of a 13a-tokenized line is the substring
// "tok1 tok2 ... tokn", since tokens are joined by single spaces and hold no whitespace; a char
// n-gram is a substring of whole code points). Entries are cleared through the used list.

typedef struct {
    const char* key;  // NULL = empty slot
    uint32_t len;
    int32_t order;    // n (1-based)
    int64_t hyp;      // count in the hypothesis
    int64_t ref_max;  // max count over the references seen so far (BLEU), or ref count (chrF)
    int64_t ref_cur;  // count in the reference being added
    int32_t stamp;    // which reference ref_cur belongs to
} NgramEntry;

typedef struct {
    NgramEntry* slots;  // (cap,)
    size_t cap;
    size_t* used;       // (cap,) indices of occupied slots
    size_t n_used;
    Buf tok[2];         // scratch strings
} NgramTable;

static uint64_t hash_bytes(const char* s, size_t n) {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

// Empties the table and makes room for at least n_keys keys.
static void table_reset(NgramTable* t, size_t n_keys) {
    for (size_t k = 0; k < t->n_used; k++) t->slots[t->used[k]].key = NULL;
    t->n_used = 0;
    size_t want = 64;
    while (want < 2 * n_keys + 1) want *= 2;
    if (want > t->cap) {
        free(t->slots);
        free(t->used);
        t->slots = calloc_check(want, sizeof(NgramEntry));
        t->used = malloc_check(want * sizeof(size_t));
        t->cap = want;
    }
}

static NgramEntry* table_get(NgramTable* t, const char* key, size_t len, int order) {
    size_t mask = t->cap - 1;
    size_t i = (size_t)hash_bytes(key, len) & mask;
    for (;;) {
        NgramEntry* e = &t->slots[i];
        if (!e->key) {
            e->key = key;
            e->len = (uint32_t)len;
            e->order = order;
            e->hyp = e->ref_max = e->ref_cur = 0;
            e->stamp = -1;
            t->used[t->n_used++] = i;
            return e;
        }
        if (e->len == len && e->order == order && memcmp(e->key, key, len) == 0) return e;
        i = (i + 1) & mask;
    }
}

// Token start offsets of a 13a-tokenized string (single spaces); returns the count.
static size_t split_tokens(const char* s, size_t** starts, size_t* cap) {
    size_t n = 0;
    size_t len = strlen(s);
    if (len == 0) return 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == 0 || s[i - 1] == ' ') {
            if (n + 1 >= *cap) {
                *cap = *cap ? 2 * *cap : 64;
                *starts = realloc_check(*starts, *cap * sizeof(size_t));
            }
            (*starts)[n++] = i;
        }
    }
    // sentinel: one past the end, as if a token started after a trailing space
    (*starts)[n] = len + 1;
    return n;
}

// ----------------------------------------------------------------------------
// statistics

typedef struct {
    NgramTable table;
    char** ref_tok;       // (n_refs,) tokenized references
    size_t** ref_starts;  // (n_refs,) token starts
    size_t* ref_starts_cap;
    size_t* ref_ntok;
    int ref_slots;
    size_t* hyp_starts;
    size_t hyp_starts_cap;
    size_t* cp_off[2];    // chrF: code point offsets of the whitespace-free hyp / ref
    size_t cp_cap[2];
} Scratch;

void bleu_stats_init(BleuStats* st, bool with_chrf) {
    memset(st, 0, sizeof(*st));
    st->nrefs = -2;
    st->with_chrf = with_chrf;
    st->scratch = calloc_check(1, sizeof(Scratch));
}

void bleu_stats_merge(BleuStats* into, const BleuStats* from) {
    into->sys_len += from->sys_len;
    into->ref_len += from->ref_len;
    for (int k = 0; k < BLEU_MAX_ORDER; k++) {
        into->counts[k] += from->counts[k];
        into->totals[k] += from->totals[k];
    }
    for (int k = 0; k < CHRF_CHAR_ORDER; k++)
        for (int j = 0; j < 3; j++) into->chrf[k][j] += from->chrf[k][j];
    into->n_segments += from->n_segments;
    into->tok_period_lines += from->tok_period_lines;
    if (from->nrefs != -2) into->nrefs = into->nrefs == -2 || into->nrefs == from->nrefs ? from->nrefs : -1;
}

void bleu_stats_free(BleuStats* st) {
    Scratch* sc = st->scratch;
    if (!sc) return;
    free(sc->table.slots);
    free(sc->table.used);
    free(sc->table.tok[0].data);
    free(sc->table.tok[1].data);
    for (int r = 0; r < sc->ref_slots; r++) free(sc->ref_starts[r]);
    free(sc->ref_tok);
    free(sc->ref_starts);
    free(sc->ref_starts_cap);
    free(sc->ref_ntok);
    free(sc->hyp_starts);
    free(sc->cp_off[0]);
    free(sc->cp_off[1]);
    free(sc);
    st->scratch = NULL;
}

static void set_err(char* err, size_t cap, const char* fmt, const char* what, int idx, size_t off) {
    if (err && cap) snprintf(err, cap, fmt, what, idx, off);
}

// Python's ''.join(line.split()) into out, and the code point offsets of the result into *off
// (n + 1 entries, the last = byte length). Returns the number of code points n.
static size_t strip_all_ws(const char* line, Buf* out, size_t** off, size_t* cap) {
    const unsigned char* p = (const unsigned char*)line;
    out->len = 0;
    buf_reserve(out, strlen(line));
    out->data[0] = '\0';
    size_t n = 0;
    for (size_t i = 0; p[i];) {
        int w = ws_len(p + i);
        if (w) {
            i += w;
            continue;
        }
        int cl = utf8_char_len(p[i]);
        if (n + 2 > *cap) {
            *cap = *cap ? 2 * *cap : 256;
            *off = realloc_check(*off, *cap * sizeof(size_t));
        }
        (*off)[n++] = out->len;
        buf_put(out, line + i, (size_t)cl);
        i += cl;
    }
    if (n + 1 > *cap) {
        *cap = n + 1;
        *off = realloc_check(*off, *cap * sizeof(size_t));
    }
    (*off)[n] = out->len;
    return n;
}

static double chrf_f_score(const int64_t stats[CHRF_CHAR_ORDER][3]) {
    // CHRF._compute_f_score with eps_smoothing=False (the sacreBLEU >= 2.0 default)
    const int factor = CHRF_BETA * CHRF_BETA;
    double avg_prec = 0.0, avg_rec = 0.0;
    int effective_order = 0;
    for (int i = 0; i < CHRF_CHAR_ORDER; i++) {
        int64_t n_hyp = stats[i][0], n_ref = stats[i][1], n_match = stats[i][2];
        if (n_hyp > 0 && n_ref > 0) {
            avg_prec += (double)n_match / (double)n_hyp;
            avg_rec += (double)n_match / (double)n_ref;
            effective_order++;
        }
    }
    if (effective_order == 0) {
        avg_prec = avg_rec = 0.0;
    } else {
        avg_prec /= effective_order;
        avg_rec /= effective_order;
    }
    if (avg_prec + avg_rec != 0.0) {
        double score = (1 + factor) * avg_prec * avg_rec;
        score /= ((factor * avg_prec) + avg_rec);
        return 100 * score;
    }
    return 0.0;
}

// chrF statistics of one segment: best reference by segment-level F (first wins ties).
static void chrf_add_segment(Scratch* sc, const char* hyp, const char* const* refs, int n_refs,
                             int64_t out[CHRF_CHAR_ORDER][3]) {
    NgramTable* t = &sc->table;
    size_t nh = strip_all_ws(hyp, &t->tok[0], &sc->cp_off[0], &sc->cp_cap[0]);
    const char* hs = t->tok[0].data;
    double best_f = -1.0;
    for (int r = 0; r < n_refs; r++) {
        if (!refs[r]) continue;
        size_t nr = strip_all_ws(refs[r], &t->tok[1], &sc->cp_off[1], &sc->cp_cap[1]);
        const char* rs = t->tok[1].data;
        int64_t stats[CHRF_CHAR_ORDER][3] = {{0}};
        table_reset(t, (nh + nr) * CHRF_CHAR_ORDER);
        for (int n = 1; n <= CHRF_CHAR_ORDER; n++) {
            for (size_t i = 0; i + n <= nr; i++) {
                const size_t* o = sc->cp_off[1];
                table_get(t, rs + o[i], o[i + n] - o[i], n)->ref_max++;
            }
            for (size_t i = 0; i + n <= nh; i++) {
                const size_t* o = sc->cp_off[0];
                table_get(t, hs + o[i], o[i + n] - o[i], n)->hyp++;
            }
            int64_t hyp_count = nh >= (size_t)n ? (int64_t)(nh - n + 1) : 0;
            int64_t ref_count = nr >= (size_t)n ? (int64_t)(nr - n + 1) : 0;
            // "Don't count hits if no reference exists for that n-gram"
            stats[n - 1][0] = ref_count > 0 ? hyp_count : 0;
            stats[n - 1][1] = ref_count;
        }
        for (size_t k = 0; k < t->n_used; k++) {
            NgramEntry* e = &t->slots[t->used[k]];
            if (e->hyp > 0 && e->ref_max > 0) stats[e->order - 1][2] += T5_MIN(e->hyp, e->ref_max);
        }
        double f = chrf_f_score((const int64_t(*)[3])stats);
        if (f > best_f) {
            best_f = f;
            memcpy(out, stats, sizeof(stats));
        }
    }
}

BleuStatus bleu_stats_add(BleuStats* st, const char* hyp, const char* const* refs, int n_refs,
                          char* err, size_t err_cap) {
    Scratch* sc = st->scratch;
    if (!sc || !hyp || (n_refs > 0 && !refs) || n_refs < 1) {
        if (err && err_cap) snprintf(err, err_cap, "bleu: bad arguments (n_refs = %d)", n_refs);
        return BLEU_ERR_ARG;
    }
    size_t off;
    int seg = (int)st->n_segments + 1;
    if (!bleu_utf8_valid(hyp, strlen(hyp), &off)) {
        set_err(err, err_cap, "invalid UTF-8 in %s of segment %d at byte %zu", "the hypothesis", seg, off);
        return BLEU_ERR_UTF8;
    }
    int present = 0;
    for (int r = 0; r < n_refs; r++) {
        if (!refs[r]) continue;
        present++;
        if (!bleu_utf8_valid(refs[r], strlen(refs[r]), &off)) {
            char what[64];
            snprintf(what, sizeof what, "reference %d", r + 1);
            set_err(err, err_cap, "invalid UTF-8 in %s of segment %d at byte %zu", what, seg, off);
            return BLEU_ERR_UTF8;
        }
    }
    if (present == 0) {
        if (err && err_cap) snprintf(err, err_cap, "segment %d has no reference", seg);
        return BLEU_ERR_NO_REF;
    }
    // sacreBLEU's signature: nrefs is the number of non-None refs, "var" when it differs
    if (st->nrefs == -2) st->nrefs = present;
    else if (st->nrefs != present) st->nrefs = -1;

    if (n_refs > sc->ref_slots) {
        sc->ref_tok = realloc_check(sc->ref_tok, n_refs * sizeof(char*));
        sc->ref_starts = realloc_check(sc->ref_starts, n_refs * sizeof(size_t*));
        sc->ref_starts_cap = realloc_check(sc->ref_starts_cap, n_refs * sizeof(size_t));
        sc->ref_ntok = realloc_check(sc->ref_ntok, n_refs * sizeof(size_t));
        for (int r = sc->ref_slots; r < n_refs; r++) {
            sc->ref_starts[r] = NULL;
            sc->ref_starts_cap[r] = 0;
        }
        sc->ref_slots = n_refs;
    }

    // tokenize everything first, to size the table
    size_t total_tok = 0;
    for (int r = 0; r < n_refs; r++) {
        sc->ref_tok[r] = NULL;
        sc->ref_ntok[r] = 0;
        if (!refs[r]) continue;
        sc->ref_tok[r] = bleu_tokenize_13a(refs[r]);
        sc->ref_ntok[r] = split_tokens(sc->ref_tok[r], &sc->ref_starts[r], &sc->ref_starts_cap[r]);
        total_tok += sc->ref_ntok[r];
    }
    size_t hl = strlen(hyp);
    if (hl >= 2 && hyp[hl - 2] == ' ' && hyp[hl - 1] == '.') st->tok_period_lines++;
    char* htok = bleu_tokenize_13a(hyp);
    size_t nh = split_tokens(htok, &sc->hyp_starts, &sc->hyp_starts_cap);
    total_tok += nh;

    NgramTable* t = &sc->table;
    table_reset(t, total_tok * BLEU_MAX_ORDER);

    // references: max count over references (BLEU._extract_reference_info) and the closest
    // length (BLEU._get_closest_ref_len: smallest |hyp - ref|, ties -> the shorter reference)
    int64_t closest_diff = -1, closest_len = -1;
    for (int r = 0; r < n_refs; r++) {
        if (!sc->ref_tok[r]) continue;
        size_t nt = sc->ref_ntok[r];
        const size_t* s = sc->ref_starts[r];
        for (int n = 1; n <= BLEU_MAX_ORDER; n++) {
            for (size_t i = 0; i + n <= nt; i++) {
                // span from token i to the end of token i+n-1 (= start of token i+n minus 1)
                NgramEntry* e = table_get(t, sc->ref_tok[r] + s[i], s[i + n] - 1 - s[i], n);
                if (e->stamp != r) {
                    e->stamp = r;
                    e->ref_cur = 0;
                }
                e->ref_cur++;
                if (e->ref_cur > e->ref_max) e->ref_max = e->ref_cur;
            }
        }
        int64_t rl = (int64_t)nt, diff = llabs((int64_t)nh - rl);
        if (closest_diff == -1 || diff < closest_diff) {
            closest_diff = diff;
            closest_len = rl;
        } else if (diff == closest_diff && rl < closest_len) {
            closest_len = rl;
        }
    }
    for (int n = 1; n <= BLEU_MAX_ORDER; n++) {
        for (size_t i = 0; i + n <= nh; i++) {
            table_get(t, htok + sc->hyp_starts[i], sc->hyp_starts[i + n] - 1 - sc->hyp_starts[i], n)->hyp++;
            st->totals[n - 1]++;
        }
    }
    for (size_t k = 0; k < t->n_used; k++) {
        NgramEntry* e = &t->slots[t->used[k]];
        if (e->hyp > 0) st->counts[e->order - 1] += T5_MIN(e->hyp, e->ref_max);
    }
    st->sys_len += (int64_t)nh;
    st->ref_len += closest_len;
    free(htok);
    for (int r = 0; r < n_refs; r++) free(sc->ref_tok[r]);

    if (st->with_chrf) {
        int64_t seg_stats[CHRF_CHAR_ORDER][3] = {{0}};
        chrf_add_segment(sc, hyp, refs, n_refs, seg_stats);
        for (int i = 0; i < CHRF_CHAR_ORDER; i++)
            for (int j = 0; j < 3; j++) st->chrf[i][j] += seg_stats[i][j];
    }
    st->n_segments++;
    return BLEU_OK;
}

static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

void bleu_stats_compute(const BleuStats* st, BleuResult* out) {
    memset(out, 0, sizeof(*out));
    out->sys_len = st->sys_len;
    out->ref_len = st->ref_len;
    out->nrefs = st->nrefs == -2 ? 1 : st->nrefs;
    out->n_segments = st->n_segments;
    out->tok_period_lines = st->tok_period_lines;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) {
        out->counts[n] = st->counts[n];
        out->totals[n] = st->totals[n];
    }
    out->ratio = st->ref_len ? (double)st->sys_len / (double)st->ref_len : 0.0;
    // BLEU.compute_bleu, smooth_method "exp", effective_order False
    double bp = 1.0;
    if (st->sys_len < st->ref_len)
        bp = st->sys_len > 0 ? exp(1.0 - (double)st->ref_len / (double)st->sys_len) : 0.0;
    out->bp = bp;
    bool any = false;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) any |= st->counts[n] != 0;
    if (!any) {  // early stop when nothing matches (sacreBLEU #141): score 0, precisions 0
        out->score = 0.0;
        return;
    }
    double smooth_mteval = 1.0;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) {
        if (st->totals[n] == 0) break;
        if (st->counts[n] == 0) {
            smooth_mteval *= 2;
            out->precisions[n] = 100. / (smooth_mteval * (double)st->totals[n]);
        } else {
            out->precisions[n] = 100. * (double)st->counts[n] / (double)st->totals[n];
        }
    }
    double sum = 0.0;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) sum += my_log(out->precisions[n]);
    out->score = bp * exp(sum / BLEU_MAX_ORDER);
}

double bleu_stats_chrf(const BleuStats* st) { return chrf_f_score((const int64_t(*)[3])st->chrf); }

// ----------------------------------------------------------------------------
// one-call API

static int corpus_run(const char** hyps, const char*** refs, int n_refs, int n, bool with_chrf,
                      BleuStats* st, char* err, size_t err_cap) {
    if (n < 0 || n_refs < 1 || (n > 0 && (!hyps || !refs))) {
        snprintf(err, err_cap, "bleu: bad arguments (n = %d, n_refs = %d)", n, n_refs);
        return BLEU_ERR_ARG;
    }
    for (int r = 0; r < n_refs; r++) {
        if (n > 0 && !refs[r]) {
            snprintf(err, err_cap, "bleu: reference stream %d is NULL", r + 1);
            return BLEU_ERR_ARG;
        }
    }
    bleu_stats_init(st, with_chrf);
    const char** seg_refs = malloc_check((size_t)n_refs * sizeof(char*));
    int rc = BLEU_OK;
    for (int i = 0; i < n && rc == BLEU_OK; i++) {
        if (!hyps[i]) {
            snprintf(err, err_cap, "bleu: hypothesis %d is NULL", i + 1);
            rc = BLEU_ERR_ARG;
            break;
        }
        for (int r = 0; r < n_refs; r++) seg_refs[r] = refs[r][i];
        rc = bleu_stats_add(st, hyps[i], seg_refs, n_refs, err, err_cap);
    }
    free(seg_refs);
    if (st->nrefs == -2) st->nrefs = n_refs;
    return rc;
}

int bleu_corpus(const char** hyps, const char*** refs, int n_refs, int n, BleuResult* out) {
    BleuStats st;
    char err[sizeof(out->error)] = "";
    memset(&st, 0, sizeof(st));
    int rc = corpus_run(hyps, refs, n_refs, n, false, &st, err, sizeof err);
    if (rc == BLEU_OK) bleu_stats_compute(&st, out);
    else memset(out, 0, sizeof(*out));
    bleu_stats_free(&st);
    snprintf(out->error, sizeof(out->error), "%s", err);
    return rc;
}

int chrf_corpus(const char** hyps, const char*** refs, int n_refs, int n, double* score, char* err,
                size_t err_cap) {
    BleuStats st;
    char e[256] = "";
    memset(&st, 0, sizeof(st));
    int rc = corpus_run(hyps, refs, n_refs, n, true, &st, e, sizeof e);
    *score = rc == BLEU_OK ? bleu_stats_chrf(&st) : 0.0;
    bleu_stats_free(&st);
    if (err && err_cap) snprintf(err, err_cap, "%s", e);
    return rc;
}

// ----------------------------------------------------------------------------
// formatting

void bleu_format_signature(const BleuResult* r, char* buf, size_t cap) {
    char nrefs[24];
    if (r->nrefs < 0) snprintf(nrefs, sizeof nrefs, "var");
    else snprintf(nrefs, sizeof nrefs, "%d", r->nrefs);
    snprintf(buf, cap, "nrefs:%s|case:mixed|eff:no|tok:13a|smooth:exp|version:%s", nrefs,
             BLEU_SACREBLEU_VERSION);
}

// BLEUScore._verbose
static void format_verbose(const BleuResult* r, char* buf, size_t cap) {
    snprintf(buf, cap,
             "%.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)",
             r->precisions[0], r->precisions[1], r->precisions[2], r->precisions[3], r->bp, r->ratio,
             (long long)r->sys_len, (long long)r->ref_len);
}

void bleu_format_score(const BleuResult* r, int width, char* buf, size_t cap) {
    char v[256];
    format_verbose(r, v, sizeof v);
    snprintf(buf, cap, "BLEU = %.*f %s", width, r->score, v);
}

// Python's repr of a float parsed from "%.{width}f": for the values a score can take (0..100, at
// most a few decimals) that is the fixed string without trailing zeros, keeping one decimal.
void bleu_format_py_float(double x, int width, char* buf, size_t cap) {
    snprintf(buf, cap, "%.*f", width, x);
    if (!strchr(buf, '.')) {  // width 0: repr(27.0) is "27.0"
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, ".0");
        return;
    }
    size_t n = strlen(buf);
    while (n >= 2 && buf[n - 1] == '0' && buf[n - 2] != '.') buf[--n] = '\0';
}

void bleu_format_json(const BleuResult* r, int width, char* buf, size_t cap) {
    char sig[160], v[256], score[48], nrefs[24];
    bleu_format_signature(r, sig, sizeof sig);
    format_verbose(r, v, sizeof v);
    bleu_format_py_float(r->score, width, score, sizeof score);
    if (r->nrefs < 0) snprintf(nrefs, sizeof nrefs, "var");
    else snprintf(nrefs, sizeof nrefs, "%d", r->nrefs);
    snprintf(buf, cap,
             "{\n"
             " \"name\": \"BLEU\",\n"
             " \"score\": %s,\n"
             " \"signature\": \"%s\",\n"
             " \"verbose_score\": \"%s\",\n"
             " \"nrefs\": \"%s\",\n"
             " \"case\": \"mixed\",\n"
             " \"eff\": \"no\",\n"
             " \"tok\": \"13a\",\n"
             " \"smooth\": \"exp\",\n"
             " \"version\": \"%s\"\n"
             "}",
             score, sig, v, nrefs, BLEU_SACREBLEU_VERSION);
}
