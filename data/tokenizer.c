/*
 * tokenizer.c: T5 tokenization on top of SentencePiece, matching HF (see tokenizer.h for the
 * rules and scripts/make_tokenizer_fixtures.py for the reference they were checked against).
 */
#include "tokenizer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/base/common.h"
#include "spm.h"

struct Tokenizer {
    SpmProcessor* sp;
    char* model_path;
    bool has_tokenizer_json;
    uint64_t hash;
    int n_pieces;  // SentencePiece pieces (32000); extra ids follow
    char extra_pieces[T5_NUM_EXTRA_IDS][16];  // "<extra_id_N>" for id n_pieces + 99 - N
};

// ----------------------------------------------------------------------------
// helpers

static uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

bool utf8_validate(const char* s, size_t len, size_t* bad_offset) {
    const unsigned char* p = (const unsigned char*)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        if (c < 0x80) { i++; continue; }
        int n;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else goto bad;
        for (int k = 1; k <= n; k++) {
            if (i + k >= len || (p[i + k] & 0xC0) != 0x80) goto bad;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            goto bad;
        i += n + 1;
    }
    return true;
bad:
    if (bad_offset) *bad_offset = i;
    return false;
}

// ----------------------------------------------------------------------------
// open / close

// spiece.model inside a directory, or the path itself; NULL + err when absent.
static char* resolve_model_path(const char* path, bool* has_json, char* err, size_t errlen) {
    *has_json = false;
    if (!path || !*path) {
        t5_set_err(err, errlen, "no tokenizer given (use --model DIR or --tokenizer FILE)");
        return NULL;
    }
    if (t5_is_dir(path)) {
        char* model_path = t5_path_join(path, "spiece.model");
        char* json = t5_path_join(path, "tokenizer.json");
        *has_json = t5_is_file(json);
        free(json);
        if (!t5_is_file(model_path)) {
            if (*has_json)
                t5_set_err(err, errlen, "%s has tokenizer.json but no spiece.model; t5train reads the SentencePiece model (copy spiece.model from the HF checkpoint)", path);
            else
                t5_set_err(err, errlen, "no spiece.model in model directory %s", path);
            free(model_path);
            return NULL;
        }
        return model_path;
    }
    if (!t5_path_exists(path)) {
        t5_set_err(err, errlen, "tokenizer file not found: %s", path);
        return NULL;
    }
    return strdup_check(path);
}

int tokenizer_file_hash(const char* path, char** model_path, uint64_t* hash, char* err, size_t errlen) {
    bool has_json;
    char* mp = resolve_model_path(path, &has_json, err, errlen);
    if (!mp) return -1;
    size_t flen = 0;
    char* bytes = t5_read_file(mp, &flen);
    if (!bytes) {
        t5_set_err(err, errlen, "cannot read %s: %s", mp, strerror(errno));
        free(mp);
        return -1;
    }
    *hash = fnv1a64(bytes, flen, 14695981039346656037ULL);
    free(bytes);
    if (model_path) *model_path = mp;
    else free(mp);
    return 0;
}

Tokenizer* tokenizer_open(const char* path, char* err, size_t errlen) {
    bool has_json = false;
    char* model_path = resolve_model_path(path, &has_json, err, errlen);
    if (!model_path) return NULL;
    char sperr[512] = {0};
    SpmProcessor* sp = spm_load(model_path, sperr, sizeof sperr);
    if (!sp) {
        t5_set_err(err, errlen, "%s", sperr);
        free(model_path);
        return NULL;
    }
    const char* p0 = spm_id_to_piece(sp, 0);
    const char* p1 = spm_id_to_piece(sp, 1);
    const char* p2 = spm_id_to_piece(sp, 2);
    if (spm_vocab_size(sp) < 4 || strcmp(p0, "<pad>") || strcmp(p1, "</s>") || strcmp(p2, "<unk>")) {
        t5_set_err(err, errlen, "%s is a SentencePiece model but not a T5 one (expected <pad>=0 </s>=1 <unk>=2, found %s %s %s)",
                model_path, p0 ? p0 : "?", p1 ? p1 : "?", p2 ? p2 : "?");
        spm_free(sp);
        free(model_path);
        return NULL;
    }
    size_t flen = 0;
    char* bytes = t5_read_file(model_path, &flen);
    if (!bytes) {
        t5_set_err(err, errlen, "cannot read %s: %s", model_path, strerror(errno));
        spm_free(sp);
        free(model_path);
        return NULL;
    }
    Tokenizer* tok = (Tokenizer*)calloc_check(1, sizeof(Tokenizer));
    tok->sp = sp;
    tok->model_path = model_path;
    tok->has_tokenizer_json = has_json;
    tok->hash = fnv1a64(bytes, flen, 14695981039346656037ULL);
    free(bytes);
    tok->n_pieces = spm_vocab_size(sp);
    for (int k = 0; k < T5_NUM_EXTRA_IDS; k++) snprintf(tok->extra_pieces[k], 16, "<extra_id_%d>", k);
    return tok;
}

void tokenizer_close(Tokenizer* tok) {
    if (!tok) return;
    spm_free(tok->sp);
    free(tok->model_path);
    free(tok);
}

int tokenizer_vocab_size(const Tokenizer* tok) { return tok->n_pieces + T5_NUM_EXTRA_IDS; }
const char* tokenizer_model_path(const Tokenizer* tok) { return tok->model_path; }
bool tokenizer_has_tokenizer_json(const Tokenizer* tok) { return tok->has_tokenizer_json; }
uint64_t tokenizer_hash(const Tokenizer* tok) { return tok->hash; }

const char* tokenizer_id_to_piece(const Tokenizer* tok, int id) {
    if (id < 0 || id >= tokenizer_vocab_size(tok)) return NULL;
    if (id >= tok->n_pieces) return tok->extra_pieces[tok->n_pieces + T5_NUM_EXTRA_IDS - 1 - id];
    return spm_id_to_piece(tok->sp, id);
}

bool tokenizer_is_special(const Tokenizer* tok, int id) {
    return id == T5_PAD_ID || id == T5_EOS_ID || id == T5_UNK_ID || (id >= tok->n_pieces && id < tokenizer_vocab_size(tok));
}

// ----------------------------------------------------------------------------
// encode

// If s[0..n) starts with an added token, returns its byte length and sets *id; else 0.
static size_t match_added_token(const Tokenizer* tok, const char* s, size_t n, int* id) {
    if (n < 4 || s[0] != '<') return 0;
    if (n >= 5 && !memcmp(s, "<pad>", 5)) { *id = T5_PAD_ID; return 5; }
    if (n >= 4 && !memcmp(s, "</s>", 4)) { *id = T5_EOS_ID; return 4; }
    if (n >= 5 && !memcmp(s, "<unk>", 5)) { *id = T5_UNK_ID; return 5; }
    if (n >= 12 && !memcmp(s, "<extra_id_", 10)) {
        // exact spellings "<extra_id_0>".."<extra_id_99>" only (no leading zeros)
        size_t i = 10;
        int v = 0, digits = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9' && digits < 3) { v = v * 10 + (s[i] - '0'); i++; digits++; }
        if (digits == 0 || digits > 2 || i >= n || s[i] != '>') return 0;
        if (digits == 2 && s[10] == '0') return 0;
        *id = tok->n_pieces + T5_NUM_EXTRA_IDS - 1 - v;
        return i + 1;
    }
    return 0;
}

static bool ensure_cap(int32_t** buf, size_t* cap, size_t need) {
    if (*cap >= need) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    int32_t* nb = (int32_t*)realloc(*buf, nc * sizeof(int32_t));
    if (!nb) return false;
    *buf = nb;
    *cap = nc;
    return true;
}

// Encodes one plain-text segment (no added tokens) and appends its ids at *n.
static int encode_segment(const Tokenizer* tok, const char* s, size_t len, int32_t** buf, size_t* cap, size_t* n,
                          char* err, size_t errlen) {
    if (len == 0) return 0;
    char* copy = NULL;
    if (memmem(s, len, "\xC2\x85", 2)) {  // U+0085: whitespace to HF, unknown to SentencePiece
        copy = (char*)malloc(len);
        if (!copy) { t5_set_err(err, errlen, "out of memory"); return -1; }
        memcpy(copy, s, len);
        for (size_t i = 0; i + 1 < len; i++)
            if ((unsigned char)copy[i] == 0xC2 && (unsigned char)copy[i + 1] == 0x85) { copy[i] = ' '; copy[i + 1] = ' '; }
        s = copy;
    }
    // every piece covers at least one byte, plus at most one lone "▁" per byte: 2*len+2 is enough
    if (!ensure_cap(buf, cap, *n + 2 * len + 2)) { free(copy); t5_set_err(err, errlen, "out of memory"); return -1; }
    int k = spm_encode(tok->sp, s, len, *buf + *n, (int)(*cap - *n), err, errlen);
    if (k > (int)(*cap - *n)) {  // cannot happen by the bound above, but never trust it
        if (!ensure_cap(buf, cap, *n + (size_t)k)) { free(copy); t5_set_err(err, errlen, "out of memory"); return -1; }
        k = spm_encode(tok->sp, s, len, *buf + *n, (int)(*cap - *n), err, errlen);
    }
    free(copy);
    if (k < 0) return -1;
    *n += (size_t)k;
    return 0;
}

static int encode_text(const Tokenizer* tok, const char* s, size_t len, int32_t** buf, size_t* cap, size_t* n,
                       char* err, size_t errlen) {
    size_t start = 0;
    for (size_t i = 0; i < len;) {
        const char* lt = (const char*)memchr(s + i, '<', len - i);
        if (!lt) break;
        i = (size_t)(lt - s);
        int id;
        size_t m = match_added_token(tok, s + i, len - i, &id);
        if (!m) { i++; continue; }
        if (encode_segment(tok, s + start, i - start, buf, cap, n, err, errlen)) return -1;
        if (!ensure_cap(buf, cap, *n + 1)) { t5_set_err(err, errlen, "out of memory"); return -1; }
        (*buf)[(*n)++] = id;
        i += m;
        start = i;
    }
    return encode_segment(tok, s + start, len - start, buf, cap, n, err, errlen);
}

int tokenizer_encode(const Tokenizer* tok, const char* prefix, const char* text, size_t len, int max_length,
                     int32_t** buf, size_t* cap, char* err, size_t errlen) {
    size_t n = 0;
    size_t plen = prefix ? strlen(prefix) : 0;
    if (plen) {
        // HF tokenizes the concatenated string; an added token could straddle the seam, so join first
        char* joined = (char*)malloc(plen + len + 1);
        if (!joined) { t5_set_err(err, errlen, "out of memory"); return -1; }
        memcpy(joined, prefix, plen);
        memcpy(joined + plen, text, len);
        joined[plen + len] = 0;
        int rc = encode_text(tok, joined, plen + len, buf, cap, &n, err, errlen);
        free(joined);
        if (rc) return -1;
    } else if (encode_text(tok, text, len, buf, cap, &n, err, errlen)) {
        return -1;
    }
    if (max_length > 0 && n > (size_t)max_length - 1) n = (size_t)max_length - 1;
    if (!ensure_cap(buf, cap, n + 1)) { t5_set_err(err, errlen, "out of memory"); return -1; }
    (*buf)[n++] = T5_EOS_ID;
    if (n > (size_t)INT32_MAX) { t5_set_err(err, errlen, "text too long"); return -1; }
    return (int)n;
}

// ----------------------------------------------------------------------------
// decode

char* tokenizer_decode(const Tokenizer* tok, const int32_t* ids, int n, bool skip_special) {
    size_t cap = 64, len = 0;
    char* out = (char*)malloc_check(cap);
    bool first = true;
    int V = tokenizer_vocab_size(tok);
    for (int i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= V) continue;  // HF: ids without a token are dropped
        if (skip_special && tokenizer_is_special(tok, id)) continue;
        const char* piece = tokenizer_id_to_piece(tok, id);
        size_t pl = strlen(piece);
        if (len + 3 * pl + 1 > cap) {
            while (len + 3 * pl + 1 > cap) cap *= 2;
            out = (char*)realloc_check(out, cap);
        }
        bool special = tokenizer_is_special(tok, id);
        size_t j = 0;
        // Metaspace decoder: "▁" -> " "; the first token loses one leading space
        if (first && !special && pl >= 3 && !memcmp(piece, "\xE2\x96\x81", 3)) j = 3;
        for (; j < pl; j++) {
            if (!special && j + 3 <= pl && !memcmp(piece + j, "\xE2\x96\x81", 3)) {
                out[len++] = ' ';
                j += 2;
            } else {
                out[len++] = piece[j];
            }
        }
        first = false;
    }
    out[len] = 0;
    return out;
}

// HF clean_up_tokenization: the replacements applied one after the other, each over the whole
// string left to right (Python str.replace), in place (every one shrinks the text).
static void clean_up_tokenization(char* s) {
    static const char* pairs[][2] = {{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
                                     {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t k = 0; k < T5_ARRAY_LEN(pairs); k++) {
        const char* from = pairs[k][0];
        const char* to = pairs[k][1];
        size_t fl = strlen(from), tl = strlen(to);
        char* r = s;
        char* w = s;
        while (*r) {
            if (!strncmp(r, from, fl)) {
                memmove(w, to, tl);
                w += tl;
                r += fl;
            } else {
                *w++ = *r++;
            }
        }
        *w = 0;
    }
}

char* tokenizer_decode_ex(const Tokenizer* tok, const int32_t* ids, int n, bool skip_special, bool clean_up) {
    char* s = tokenizer_decode(tok, ids, n, skip_special);
    if (clean_up) clean_up_tokenization(s);
    return s;
}

// ----------------------------------------------------------------------------
// prefix

static const char* lang_name(const char* code) {
    static const char* names[][2] = {
        {"en", "English"}, {"ro", "Romanian"}, {"de", "German"}, {"fr", "French"}, {"es", "Spanish"},
        {"it", "Italian"}, {"pt", "Portuguese"}, {"nl", "Dutch"}, {"cs", "Czech"}, {"ru", "Russian"},
        {"fi", "Finnish"}, {"tr", "Turkish"}, {"et", "Estonian"}, {"lv", "Latvian"}, {"zh", "Chinese"},
        {"ja", "Japanese"}, {"pl", "Polish"}, {"hi", "Hindi"}, {"gu", "Gujarati"}, {"kk", "Kazakh"},
        {"lt", "Lithuanian"},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(names); i++)
        if (!strcmp(names[i][0], code)) return names[i][1];
    return code;
}

void tokenizer_default_prefix(const char* src_lang, const char* tgt_lang, char* out, size_t cap) {
    snprintf(out, cap, "translate %s to %s: ", lang_name(src_lang), lang_name(tgt_lang));
}
