/*
 * dataset.c: split resolution, parallel tokenization and the memory-mapped token cache
 * (see dataset.h for the layout and lookup order).
 */
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../src/base/common.h"
#include "../src/base/signals.h"
#include "readers.h"

#define CACHE_MAGIC 0x4B543554  // "T5TK"
#define CACHE_VERSION 1
#define CACHE_HEADER_INTS 256
#define CACHE_HEADER_BYTES (CACHE_HEADER_INTS * sizeof(int32_t))

// header slots (int32 indices; 64-bit values take two slots, little-endian)
enum {
    H_MAGIC = 0, H_VERSION = 1, H_HEADER_INTS = 2,
    H_N = 4, H_N_SRC_TOK = 6, H_N_TGT_TOK = 8,
    H_MAX_SRC = 10, H_MAX_TGT = 11, H_VOCAB = 12, H_FORMAT = 13,
    H_KEY = 14, H_CHECKSUM = 16, H_SKIPPED = 18, H_FIRST_SKIPPED = 20, H_FILE_BYTES = 22,
};

struct Dataset {
    int64_t n_all;             // examples in the split (after skipping empty pairs)
    int64_t n;                 // examples used (max_samples applied)
    const int64_t* src_off;    // (n_all+1,)
    const int64_t* tgt_off;    // (n_all+1,)
    const int32_t* src_ids;    // (src_off[n_all],)
    const int32_t* tgt_ids;    // (tgt_off[n_all],)
    const int64_t* line;       // (n_all,)
    void* map;                 // cache mapping (or NULL)
    size_t map_len;
    void* mem[5];              // owned arrays when tokenized without a readable cache
    char* src_path;
    char* cache_path;
    bool from_cache;
    int64_t skipped;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void data_options_default(DataOptions* opt) {
    memset(opt, 0, sizeof *opt);
    opt->source_lang = "en";
    opt->target_lang = "ro";
    opt->max_source_length = 1024;
    opt->max_target_length = 128;
    opt->val_max_target_length = 0;
    for (int i = 0; i < 3; i++) opt->max_samples[i] = -1;
    opt->train_batch_size = 8;
    opt->eval_batch_size = 8;
    opt->seed = 42;
    opt->rank = 0;
    opt->world_size = 1;
    opt->shuffle = true;
}

const char* data_split_name(DataSplit split) {
    static const char* names[3] = {"train", "validation", "test"};
    return (unsigned)split < 3 ? names[split] : "?";
}

// ----------------------------------------------------------------------------
// hashing

static uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}
static uint64_t fnv_str(const char* s, uint64_t h) { return fnv1a64(s ? s : "\x01(null)", s ? strlen(s) + 1 : 8, h); }
static uint64_t fnv_u64(uint64_t v, uint64_t h) { return fnv1a64(&v, sizeof v, h); }

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Word-wise checksum of the cache body, in 4 MiB chunks hashed in parallel and folded in order.
static uint64_t body_checksum(const unsigned char* p, size_t n) {
    const size_t chunk = (size_t)4 << 20;
    int64_t nchunks = (int64_t)((n + chunk - 1) / chunk);
    uint64_t* hs = (uint64_t*)malloc_check((size_t)(nchunks ? nchunks : 1) * sizeof(uint64_t));
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        size_t a = (size_t)c * chunk, b = T5_MIN(n, a + chunk);
        uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)c;
        size_t i = a;
        for (; i + 8 <= b; i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            h = rotl64(h ^ (w * 0x87C37B91114253D5ULL), 31) * 0x4CF5AD432745937FULL;
        }
        for (; i < b; i++) h = (h ^ p[i]) * 0x100000001B3ULL;
        hs[c] = h;
    }
    uint64_t h = 14695981039346656037ULL ^ n;
    for (int64_t c = 0; c < nchunks; c++) h = fnv_u64(hs[c], h);
    free(hs);
    return h;
}

// ----------------------------------------------------------------------------
// file resolution

static bool ends_with(const char* s, const char* suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static char* str_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static char* str_printf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char* s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) t5_die(T5_EXIT_FAILURE, "out of memory");
    va_end(ap);
    return s;
}

static int resolve_explicit(const DataOptions* opt, DataSplit split, char** sp, char** tp, char* fmt, char* err, size_t errlen) {
    const char* f = opt->split_file[split];
    const char* g = opt->split_target_file[split];
    const char* sl = opt->source_lang;
    const char* tl = opt->target_lang;
    const char* key = data_split_name(split);
    if (ends_with(f, ".json") || ends_with(f, ".jsonl")) {
        if (!t5_is_file(f)) { t5_set_err(err, errlen, "%s_file not found: %s", key, f); return -1; }
        *sp = strdup_check(f); *tp = NULL; *fmt = 'j';
        return 0;
    }
    if (ends_with(f, ".sgm")) {
        char* other = NULL;
        if (g) other = strdup_check(g);
        else {
            // newsdev2016-enro-src.en.sgm -> newsdev2016-enro-ref.ro.sgm
            char* pat = str_printf("-src.%s.sgm", sl);
            if (ends_with(f, pat)) {
                size_t base = strlen(f) - strlen(pat);
                other = str_printf("%.*s-ref.%s.sgm", (int)base, f, tl);
            }
            free(pat);
        }
        if (!other) { t5_set_err(err, errlen, "%s_file %s is SGML but no target file was given and its name does not end in -src.%s.sgm", key, f, sl); return -1; }
        if (!t5_is_file(f)) { t5_set_err(err, errlen, "%s_file not found: %s", key, f); free(other); return -1; }
        if (!t5_is_file(other)) { t5_set_err(err, errlen, "target SGML file not found: %s (pair of %s)", other, f); free(other); return -1; }
        *sp = strdup_check(f); *tp = other; *fmt = 's';
        return 0;
    }
    if (g) {
        if (!t5_is_file(f)) { t5_set_err(err, errlen, "%s_file not found: %s", key, f); return -1; }
        if (!t5_is_file(g)) { t5_set_err(err, errlen, "%s target file not found: %s", key, g); return -1; }
        *sp = strdup_check(f); *tp = strdup_check(g); *fmt = 't';
        return 0;
    }
    char* suf = str_printf(".%s", sl);
    if (ends_with(f, suf) && t5_is_file(f)) {
        size_t base = strlen(f) - strlen(suf);
        char* other = str_printf("%.*s.%s", (int)base, f, tl);
        free(suf);
        if (!t5_is_file(other)) { t5_set_err(err, errlen, "%s: found %s but not its parallel file %s", key, f, other); free(other); return -1; }
        *sp = strdup_check(f); *tp = other; *fmt = 't';
        return 0;
    }
    free(suf);
    char* a = str_printf("%s.%s", f, sl);
    char* b = str_printf("%s.%s", f, tl);
    if (t5_is_file(a) && t5_is_file(b)) { *sp = a; *tp = b; *fmt = 't'; return 0; }
    t5_set_err(err, errlen, "%s_file %s: not found (looked for %s, and for the pair %s + %s)", key, f, f, a, b);
    free(a); free(b);
    return -1;
}

int dataset_resolve_files(const DataOptions* opt, DataSplit split, char** src_path, char** tgt_path, char* format,
                          char* err, size_t errlen) {
    *src_path = *tgt_path = NULL;
    if ((unsigned)split > 2) { t5_set_err(err, errlen, "bad split %d", (int)split); return -1; }
    if (!opt->source_lang || !opt->target_lang || !*opt->source_lang || !*opt->target_lang) {
        t5_set_err(err, errlen, "source_lang and target_lang must be set");
        return -1;
    }
    if (!strcmp(opt->source_lang, opt->target_lang)) {
        t5_set_err(err, errlen, "source_lang and target_lang are both '%s'", opt->source_lang);
        return -1;
    }
    if (opt->split_file[split]) return resolve_explicit(opt, split, src_path, tgt_path, format, err, errlen);
    if (!opt->dataset_name) {
        t5_set_err(err, errlen, "no %s data: give --dataset (e.g. wmt16-ro-en) or --%s_file", data_split_name(split), data_split_name(split));
        return -1;
    }
    char name[256];
    if (opt->dataset_config && *opt->dataset_config && !strchr(opt->dataset_name, '-'))
        snprintf(name, sizeof name, "%s-%s", opt->dataset_name, opt->dataset_config);
    else
        snprintf(name, sizeof name, "%s", opt->dataset_name);
    // "wmt16-ro-en": the direction must use the pair's languages
    const char* dash = strchr(name, '-');
    if (dash) {
        char pair[64];
        snprintf(pair, sizeof pair, "%s", dash + 1);
        char* d2 = strchr(pair, '-');
        if (d2) {
            *d2 = 0;
            const char *l1 = pair, *l2 = d2 + 1;
            bool ok = (!strcmp(opt->source_lang, l1) && !strcmp(opt->target_lang, l2)) ||
                      (!strcmp(opt->source_lang, l2) && !strcmp(opt->target_lang, l1));
            if (!ok) {
                t5_set_err(err, errlen, "dataset %s has languages %s and %s, but source_lang=%s target_lang=%s", name, l1, l2,
                        opt->source_lang, opt->target_lang);
                return -1;
            }
        }
    }
    const char* dirs[3];
    const char* why[3] = {"data_dir", "$T5TRAIN_DATA", "default cache"};
    char* home_dir = NULL;
    dirs[0] = opt->data_dir;
    dirs[1] = getenv("T5TRAIN_DATA");
    const char* home = getenv("HOME");
    if (home && *home) home_dir = str_printf("%s/.cache/t5train/data", home);
    dirs[2] = home_dir;
    const char* sp = data_split_name(split);
    size_t used = 0;
    char looked[2048] = {0};
    int rc = -1;
    for (int d = 0; d < 3 && rc; d++) {
        if (!dirs[d] || !*dirs[d]) continue;
        char* j = str_printf("%s/%s/%s.jsonl", dirs[d], name, sp);
        char* a = str_printf("%s/%s/%s.%s", dirs[d], name, sp, opt->source_lang);
        char* b = str_printf("%s/%s/%s.%s", dirs[d], name, sp, opt->target_lang);
        if (t5_is_file(j)) { *src_path = j; *format = 'j'; rc = 0; free(a); free(b); break; }
        if (t5_is_file(a) && t5_is_file(b)) { *src_path = a; *tgt_path = b; *format = 't'; rc = 0; free(j); break; }
        if (t5_is_file(a) != t5_is_file(b)) {
            t5_set_err(err, errlen, "%s split of %s is incomplete: %s exists but %s does not", sp, name,
                    t5_is_file(a) ? a : b, t5_is_file(a) ? b : a);
            free(j); free(a); free(b); free(home_dir);
            return -1;
        }
        used += (size_t)snprintf(looked + used, used < sizeof looked ? sizeof looked - used : 0, "%s%s (%s), %s + %s",
                                 used ? "; " : "", j, why[d], a, b);
        if (used >= sizeof looked) used = sizeof looked - 1;
        free(j); free(a); free(b);
    }
    free(home_dir);
    if (rc) {
        t5_set_err(err, errlen, "no %s split of %s found; looked for: %s. HINT: run scripts/prepare_wmt16.sh, set --data_dir or $T5TRAIN_DATA, or pass --%s_file",
                sp, name, used ? looked : "(no search directory: data_dir, $T5TRAIN_DATA and $HOME are all unset)", sp);
    }
    return rc;
}

// ----------------------------------------------------------------------------
// tokenization

typedef struct {
    int32_t* src; size_t src_cap, src_n;
    int32_t* tgt; size_t tgt_cap, tgt_n;
    int32_t* src_len; int32_t* tgt_len;  // per example of the chunk
} TokChunk;

static int push_ids(int32_t** v, size_t* cap, size_t* n, const int32_t* ids, int k) {
    if (*n + (size_t)k > *cap) {
        size_t nc = *cap ? *cap : 4096;
        while (nc < *n + (size_t)k) nc *= 2;
        int32_t* nv = (int32_t*)realloc(*v, nc * sizeof(int32_t));
        if (!nv) return -1;
        *v = nv;
        *cap = nc;
    }
    memcpy(*v + *n, ids, (size_t)k * sizeof(int32_t));
    *n += (size_t)k;
    return 0;
}

typedef struct {
    int64_t n;
    int64_t* src_off; int64_t* tgt_off;
    int32_t* src_ids; int32_t* tgt_ids;
    int64_t* line;
} TokArrays;

static int tokenize_pairs(const TextPairs* tp, const Tokenizer* tok, const char* prefix, int max_src, int max_tgt,
                          int num_threads, const char* path, TokArrays* out, char* err, size_t errlen) {
    const int64_t CH = 512;
    int64_t n = tp->n;
    int64_t nch = (n + CH - 1) / CH;
    TokChunk* ch = (TokChunk*)calloc_check((size_t)(nch ? nch : 1), sizeof(TokChunk));
    int64_t err_at = INT64_MAX;
    char first_err[512] = {0};
    int nt = num_threads > 0 ? num_threads : omp_get_max_threads();
#pragma omp parallel num_threads(nt)
    {
        int32_t* buf = NULL;
        size_t cap = 0;
        char e[512];
#pragma omp for schedule(dynamic, 1)
        for (int64_t c = 0; c < nch; c++) {
            int64_t a = c * CH, b = T5_MIN(n, a + CH);
            TokChunk* k = &ch[c];
            k->src_len = (int32_t*)malloc((size_t)(b - a) * sizeof(int32_t));
            k->tgt_len = (int32_t*)malloc((size_t)(b - a) * sizeof(int32_t));
            for (int64_t i = a; i < b; i++) {
                int64_t seen;
#pragma omp atomic read
                seen = err_at;
                if (seen != INT64_MAX) break;
                const char* msg = NULL;
                int ns = tokenizer_encode(tok, prefix, tp->src[i], strlen(tp->src[i]), max_src, &buf, &cap, e, sizeof e);
                if (ns < 0 || !k->src_len || push_ids(&k->src, &k->src_cap, &k->src_n, buf, ns)) msg = ns < 0 ? e : "out of memory";
                int ntg = msg ? 0 : tokenizer_encode(tok, NULL, tp->tgt[i], strlen(tp->tgt[i]), max_tgt, &buf, &cap, e, sizeof e);
                if (!msg && (ntg < 0 || !k->tgt_len || push_ids(&k->tgt, &k->tgt_cap, &k->tgt_n, buf, ntg))) msg = ntg < 0 ? e : "out of memory";
                if (msg) {
#pragma omp critical(tok_err)
                    if (i < err_at) {
                        err_at = i;
                        snprintf(first_err, sizeof first_err, "%s", msg);
                    }
                    break;
                }
                k->src_len[i - a] = ns;
                k->tgt_len[i - a] = ntg;
            }
        }
        free(buf);
    }
    int rc = 0;
    if (err_at != INT64_MAX) {
        t5_set_err(err, errlen, "%s:%lld: %s", path, (long long)tp->line[err_at], first_err);
        rc = -1;
    } else {
        size_t ts = 0, tt = 0;
        for (int64_t c = 0; c < nch; c++) { ts += ch[c].src_n; tt += ch[c].tgt_n; }
        out->n = n;
        out->src_off = (int64_t*)malloc_check((size_t)(n + 1) * sizeof(int64_t));
        out->tgt_off = (int64_t*)malloc_check((size_t)(n + 1) * sizeof(int64_t));
        out->src_ids = (int32_t*)malloc_check((ts ? ts : 1) * sizeof(int32_t));
        out->tgt_ids = (int32_t*)malloc_check((tt ? tt : 1) * sizeof(int32_t));
        out->line = (int64_t*)malloc_check((size_t)(n ? n : 1) * sizeof(int64_t));
        memcpy(out->line, tp->line, (size_t)n * sizeof(int64_t));
        int64_t os = 0, ot = 0;
        for (int64_t c = 0; c < nch; c++) {
            int64_t a = c * CH, b = T5_MIN(n, a + CH);
            memcpy(out->src_ids + os, ch[c].src, ch[c].src_n * sizeof(int32_t));
            memcpy(out->tgt_ids + ot, ch[c].tgt, ch[c].tgt_n * sizeof(int32_t));
            int64_t ps = os, pt = ot;
            for (int64_t i = a; i < b; i++) {
                out->src_off[i] = ps; ps += ch[c].src_len[i - a];
                out->tgt_off[i] = pt; pt += ch[c].tgt_len[i - a];
            }
            os += (int64_t)ch[c].src_n;
            ot += (int64_t)ch[c].tgt_n;
        }
        out->src_off[n] = os;
        out->tgt_off[n] = ot;
    }
    for (int64_t c = 0; c < nch; c++) { free(ch[c].src); free(ch[c].tgt); free(ch[c].src_len); free(ch[c].tgt_len); }
    free(ch);
    return rc;
}

// ----------------------------------------------------------------------------
// cache

static void hdr_set64(int32_t* h, int slot, int64_t v) { memcpy(h + slot, &v, 8); }
static int64_t hdr_get64(const int32_t* h, int slot) { int64_t v; memcpy(&v, h + slot, 8); return v; }

// Layout sizes for n examples with ts/tt tokens.
static size_t cache_body_bytes(int64_t n, int64_t ts, int64_t tt) {
    return 2 * (size_t)(n + 1) * 8 + (size_t)(ts + tt) * 4 + (size_t)n * 8;
}

// Writes the arrays as a cache file (temp + rename). Returns 0 or -1 with err set.
static int cache_write(const char* path, const TokArrays* a, uint64_t key, int max_src, int max_tgt, int vocab, char format,
                       int64_t skipped, int64_t first_skipped, char* err, size_t errlen) {
    int64_t n = a->n, ts = a->src_off[n], tt = a->tgt_off[n];
    size_t body = cache_body_bytes(n, ts, tt);
    unsigned char* buf = (unsigned char*)malloc(body ? body : 1);
    if (!buf) { t5_set_err(err, errlen, "out of memory building the token cache"); return -1; }
    size_t o = 0;
#define PUT(ptr, bytes) do { memcpy(buf + o, (ptr), (bytes)); o += (bytes); } while (0)
    PUT(a->src_off, (size_t)(n + 1) * 8);
    PUT(a->tgt_off, (size_t)(n + 1) * 8);
    PUT(a->line, (size_t)n * 8);  // int64 arrays first: every array stays naturally aligned
    PUT(a->src_ids, (size_t)ts * 4);
    PUT(a->tgt_ids, (size_t)tt * 4);
#undef PUT
    int32_t hdr[CACHE_HEADER_INTS];
    memset(hdr, 0, sizeof hdr);
    hdr[H_MAGIC] = CACHE_MAGIC;
    hdr[H_VERSION] = CACHE_VERSION;
    hdr[H_HEADER_INTS] = CACHE_HEADER_INTS;
    hdr_set64(hdr, H_N, n);
    hdr_set64(hdr, H_N_SRC_TOK, ts);
    hdr_set64(hdr, H_N_TGT_TOK, tt);
    hdr[H_MAX_SRC] = max_src;
    hdr[H_MAX_TGT] = max_tgt;
    hdr[H_VOCAB] = vocab;
    hdr[H_FORMAT] = format;
    hdr_set64(hdr, H_KEY, (int64_t)key);
    hdr_set64(hdr, H_CHECKSUM, (int64_t)body_checksum(buf, body));
    hdr_set64(hdr, H_SKIPPED, skipped);
    hdr_set64(hdr, H_FIRST_SKIPPED, first_skipped);
    hdr_set64(hdr, H_FILE_BYTES, (int64_t)(CACHE_HEADER_BYTES + body));
    char* tmp = str_printf("%s.tmp.%d", path, (int)getpid());
    signals_track_tmp(tmp);  // removed if SIGINT/SIGTERM stops the process while tokenizing (signals.h)
    FILE* f = fopen(tmp, "wb");
    int rc = 0;
    if (!f) {
        t5_set_err(err, errlen, "cannot write token cache %s: %s", tmp, strerror(errno));
        rc = -1;
    } else {
        bool ok = fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr && fwrite(buf, 1, body, f) == body;
        ok = (fflush(f) == 0) && ok;
        ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp, path) != 0) {
            t5_set_err(err, errlen, "cannot write token cache %s: %s", path, strerror(errno));
            unlink(tmp);
            rc = -1;
        }
    }
    signals_untrack_tmp(tmp);
    free(tmp);
    free(buf);
    return rc;
}

// Opens and validates a cache. Returns 1 when valid (ds filled), 0 when absent/stale/corrupt
// (*why says which), -1 on an I/O error that is not worth rebuilding over.
static int cache_open(const char* path, uint64_t key, int max_src, int max_tgt, Dataset* ds, char* why, size_t whylen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(why, whylen, "no cache yet"); return 0; }
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < CACHE_HEADER_BYTES) {
        snprintf(why, whylen, "cache %s is truncated (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return 0;
    }
    int32_t hdr[CACHE_HEADER_INTS];
    if (pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr) { snprintf(why, whylen, "cache %s: short read", path); close(fd); return 0; }
    if (hdr[H_MAGIC] != CACHE_MAGIC) { snprintf(why, whylen, "cache %s: bad magic", path); close(fd); return 0; }
    if (hdr[H_VERSION] != CACHE_VERSION || hdr[H_HEADER_INTS] != CACHE_HEADER_INTS) { snprintf(why, whylen, "cache %s: version %d, expected %d", path, hdr[H_VERSION], CACHE_VERSION); close(fd); return 0; }
    if ((uint64_t)hdr_get64(hdr, H_KEY) != key || hdr[H_MAX_SRC] != max_src || hdr[H_MAX_TGT] != max_tgt) {
        snprintf(why, whylen, "cache %s is stale (source files, tokenizer or options changed)", path);
        close(fd);
        return 0;
    }
    int64_t n = hdr_get64(hdr, H_N), ts = hdr_get64(hdr, H_N_SRC_TOK), tt = hdr_get64(hdr, H_N_TGT_TOK);
    if (n < 0 || ts < 0 || tt < 0 || n > ((int64_t)1 << 40) || ts > ((int64_t)1 << 40) || tt > ((int64_t)1 << 40)) {
        snprintf(why, whylen, "cache %s: corrupt header", path);
        close(fd);
        return 0;
    }
    size_t body = cache_body_bytes(n, ts, tt);
    if ((int64_t)(CACHE_HEADER_BYTES + body) != hdr_get64(hdr, H_FILE_BYTES) || (size_t)st.st_size != CACHE_HEADER_BYTES + body) {
        snprintf(why, whylen, "cache %s is truncated or has trailing bytes (%lld bytes, header says %lld)", path,
                 (long long)st.st_size, (long long)(CACHE_HEADER_BYTES + body));
        close(fd);
        return 0;
    }
    void* map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) { snprintf(why, whylen, "cannot map cache %s: %s", path, strerror(errno)); return 0; }
    const unsigned char* b = (const unsigned char*)map + CACHE_HEADER_BYTES;
    if ((int64_t)body_checksum(b, body) != hdr_get64(hdr, H_CHECKSUM)) {
        snprintf(why, whylen, "cache %s is corrupt (checksum mismatch)", path);
        munmap(map, (size_t)st.st_size);
        return 0;
    }
    const int64_t* so = (const int64_t*)b;
    const int64_t* to = so + (n + 1);
    const int64_t* ln = to + (n + 1);
    const int32_t* si = (const int32_t*)(ln + n);
    const int32_t* ti = si + ts;
    // offsets: monotonic, start 0, end at the counts; a bad one would index out of the mapping
    bool ok = so[0] == 0 && to[0] == 0 && so[n] == ts && to[n] == tt;
    for (int64_t i = 0; ok && i < n; i++) ok = so[i + 1] > so[i] && to[i + 1] > to[i];
    if (!ok) {
        snprintf(why, whylen, "cache %s is corrupt (bad offsets)", path);
        munmap(map, (size_t)st.st_size);
        return 0;
    }
    ds->n_all = n;
    ds->src_off = so;
    ds->tgt_off = to;
    ds->src_ids = si;
    ds->tgt_ids = ti;
    ds->line = ln;
    ds->map = map;
    ds->map_len = (size_t)st.st_size;
    ds->skipped = hdr_get64(hdr, H_SKIPPED);
    return 1;
}

static uint64_t file_key(const char* path, uint64_t h) {
    struct stat st;
    char* rp = realpath(path, NULL);
    h = fnv_str(rp ? rp : path, h);
    free(rp);
    if (stat(path, &st) == 0) {
        h = fnv_u64((uint64_t)st.st_size, h);
        h = fnv_u64((uint64_t)st.st_mtim.tv_sec, h);
        h = fnv_u64((uint64_t)st.st_mtim.tv_nsec, h);
        h = fnv_u64((uint64_t)st.st_ino, h);
    }
    return h;
}

// ----------------------------------------------------------------------------
// open

char* dataset_default_cache_dir(void) {
    const char* c = getenv("T5TRAIN_CACHE");
    if (c) return strdup_check(c);
    return getenv("HOME") ? str_printf("%s/.cache/t5train/tokens", getenv("HOME")) : NULL;
}

Dataset* dataset_open(const DataOptions* opt, DataSplit split, const Tokenizer* tok_in, char* err, size_t errlen) {
    char *src_path = NULL, *tgt_path = NULL, fmt = 0;
    if (dataset_resolve_files(opt, split, &src_path, &tgt_path, &fmt, err, errlen)) return NULL;
    int max_src = opt->max_source_length;
    int max_tgt = (split != DATA_SPLIT_TRAIN && opt->val_max_target_length > 0) ? opt->val_max_target_length : opt->max_target_length;
    char defprefix[256];
    const char* prefix = opt->source_prefix;
    if (!prefix) {
        tokenizer_default_prefix(opt->source_lang, opt->target_lang, defprefix, sizeof defprefix);
        prefix = defprefix;
    }
    // tokenizer identity (content hash) without loading it
    uint64_t tok_hash;
    char* model_path = NULL;
    if (tok_in) {
        tok_hash = tokenizer_hash(tok_in);
        model_path = strdup_check(tokenizer_model_path(tok_in));
    } else if (tokenizer_file_hash(opt->tokenizer_path, &model_path, &tok_hash, err, errlen)) {
        free(src_path); free(tgt_path);
        return NULL;
    }
    // cache key: name part (stable for this split/options) and content part (+ sizes and mtimes)
    uint64_t name_h = 14695981039346656037ULL;
    name_h = fnv_str(src_path, name_h);
    name_h = fnv_str(tgt_path, name_h);
    name_h = fnv_str(opt->source_lang, name_h);
    name_h = fnv_str(opt->target_lang, name_h);
    name_h = fnv_str(prefix, name_h);
    name_h = fnv_u64((uint64_t)max_src, name_h);
    name_h = fnv_u64((uint64_t)max_tgt, name_h);
    name_h = fnv_str(model_path, name_h);
    uint64_t key = fnv_u64(tok_hash, name_h);
    key = fnv_u64((uint64_t)fmt, key);
    key = file_key(src_path, key);
    if (tgt_path) key = file_key(tgt_path, key);
    free(model_path);

    Dataset* ds = (Dataset*)calloc_check(1, sizeof(Dataset));
    ds->src_path = src_path;
    char why[768] = "cache disabled";
    if (!opt->no_cache) {
        char* dir = NULL;
        if (opt->cache_dir) dir = strdup_check(opt->cache_dir);
        else dir = dataset_default_cache_dir();
        if (dir) {
            const char* base = strrchr(src_path, '/');
            base = base ? base + 1 : src_path;
            ds->cache_path = str_printf("%s/%s-%s-%s%s-%016llx.tokens", dir, base, data_split_name(split), opt->source_lang,
                                        opt->target_lang, (unsigned long long)name_h);
            int r = cache_open(ds->cache_path, key, max_src, max_tgt, ds, why, sizeof why);
            if (r == 1) {
                ds->from_cache = true;
            } else if (opt->cache_read_only) {  // tokenize in memory, write nothing
                snprintf(why, sizeof why, "no cache written: read-only");
                free(ds->cache_path);
                ds->cache_path = NULL;
            } else if (t5_mkdir_p(dir) != 0) {
                t5_warn("cannot create token cache directory %s: %s (tokenizing in memory)", dir, strerror(errno));
                free(ds->cache_path);
                ds->cache_path = NULL;
            }
        }
        free(dir);
    }
    if (!ds->from_cache) {
        TextPairs tp;
        int rc = fmt == 'j' ? text_pairs_read_jsonl(src_path, opt->source_lang, opt->target_lang, &tp, err, errlen)
                 : fmt == 's' ? text_pairs_read_sgml(src_path, tgt_path, &tp, err, errlen)
                              : text_pairs_read_parallel(src_path, tgt_path, &tp, err, errlen);
        if (rc) { free(tgt_path); dataset_close(ds); return NULL; }
        if (tp.n == 0) {
            t5_set_err(err, errlen, "%s: no usable %s pairs (%lld skipped as empty)", src_path, data_split_name(split), (long long)tp.n_skipped_empty);
            text_pairs_free(&tp); free(tgt_path); dataset_close(ds);
            return NULL;
        }
        Tokenizer* own = NULL;
        const Tokenizer* tok = tok_in;
        if (!tok) {
            own = tokenizer_open(opt->tokenizer_path, err, errlen);
            if (!own) { text_pairs_free(&tp); free(tgt_path); dataset_close(ds); return NULL; }
            tok = own;
        }
        double t0 = now_s();
        int nt = opt->num_threads > 0 ? opt->num_threads : omp_get_max_threads();
        if (!opt->quiet)
            fprintf(stderr, "t5train: tokenizing %lld %s pairs of %s with %d threads (%s)\n", (long long)tp.n,
                    data_split_name(split), src_path, nt, why);
        TokArrays a;
        memset(&a, 0, sizeof a);
        rc = tokenize_pairs(&tp, tok, prefix, max_src, max_tgt, nt, src_path, &a, err, errlen);
        int64_t skipped = tp.n_skipped_empty, first_skipped = tp.first_skipped_line;
        text_pairs_free(&tp);
        if (rc) { tokenizer_close(own); free(tgt_path); dataset_close(ds); return NULL; }
        if (!opt->quiet)
            fprintf(stderr, "t5train: tokenized %lld pairs in %.2f s (%lld + %lld tokens)\n", (long long)a.n, now_s() - t0,
                    (long long)a.src_off[a.n], (long long)a.tgt_off[a.n]);
        if (ds->cache_path) {
            char werr[512];
            if (cache_write(ds->cache_path, &a, key, max_src, max_tgt, tokenizer_vocab_size(tok), fmt, skipped, first_skipped,
                            werr, sizeof werr)) {
                t5_warn("%s (continuing without a cache)", werr);
                free(ds->cache_path);
                ds->cache_path = NULL;
            }
        }
        tokenizer_close(own);
        ds->n_all = a.n;
        ds->src_off = a.src_off; ds->mem[0] = a.src_off;
        ds->tgt_off = a.tgt_off; ds->mem[1] = a.tgt_off;
        ds->src_ids = a.src_ids; ds->mem[2] = a.src_ids;
        ds->tgt_ids = a.tgt_ids; ds->mem[3] = a.tgt_ids;
        ds->line = a.line; ds->mem[4] = a.line;
        ds->skipped = skipped;
        if (skipped && !opt->quiet)
            t5_warn("%s: skipped %lld %s pairs with an empty side (first at line %lld)", src_path, (long long)skipped,
                    data_split_name(split), (long long)first_skipped);
    }
    free(tgt_path);
    int64_t ms = opt->max_samples[split];
    ds->n = (ms >= 0 && ms < ds->n_all) ? ms : ds->n_all;
    return ds;
}

void dataset_close(Dataset* ds) {
    if (!ds) return;
    if (ds->map) munmap(ds->map, ds->map_len);
    for (int i = 0; i < 5; i++) free(ds->mem[i]);
    free(ds->src_path);
    free(ds->cache_path);
    free(ds);
}

int64_t dataset_size(const Dataset* ds) { return ds->n; }

void dataset_get(const Dataset* ds, int64_t i, const int32_t** src, int* n_src, const int32_t** tgt, int* n_tgt) {
    *src = ds->src_ids + ds->src_off[i];
    *n_src = (int)(ds->src_off[i + 1] - ds->src_off[i]);
    *tgt = ds->tgt_ids + ds->tgt_off[i];
    *n_tgt = (int)(ds->tgt_off[i + 1] - ds->tgt_off[i]);
}

int64_t dataset_line(const Dataset* ds, int64_t i) {
    return ds->line[i];
}

int dataset_source_length(const Dataset* ds, int64_t i) { return (int)(ds->src_off[i + 1] - ds->src_off[i]); }
const char* dataset_source_path(const Dataset* ds) { return ds->src_path; }
const char* dataset_cache_path(const Dataset* ds) { return ds->cache_path; }
bool dataset_from_cache(const Dataset* ds) { return ds->from_cache; }
int64_t dataset_skipped_empty(const Dataset* ds) { return ds->skipped; }

int64_t dataset_num_tokens(const Dataset* ds, bool target) {
    return target ? ds->tgt_off[ds->n] - ds->tgt_off[0] : ds->src_off[ds->n] - ds->src_off[0];
}

void dataset_activation_lengths(const DataOptions* opt, Dataset* const* ds, int n, int* max_src, int* max_tgt) {
    const int cap_s = opt->max_source_length;
    const int cap_t = opt->max_target_length > opt->val_max_target_length ? opt->max_target_length
                                                                            : opt->val_max_target_length;
    int64_t s = 1, t = 1;
    for (int k = 0; k < n; k++) {
        if (!ds[k]) continue;
        for (int64_t i = 0; i < ds[k]->n; i++) {  // the cache's offsets: lengths without touching the ids
            int64_t ls = ds[k]->src_off[i + 1] - ds[k]->src_off[i], lt = ds[k]->tgt_off[i + 1] - ds[k]->tgt_off[i];
            if (ls > s) s = ls;
            if (lt > t) t = lt;
        }
    }
    if (opt->pad_to_max_length) {
        s = cap_s;
        t = cap_t;
    }
    if (s > cap_s) s = cap_s;
    if (t > cap_t) t = cap_t;
    *max_src = (int)((s + 7) / 8 * 8);
    *max_tgt = (int)((t + 7) / 8 * 8);
}
