/*
 * wmt16_sources.c: WMT16 ro-en from its sources, the HF wmt16 builder's way (see wmt16_sources.h).
 */
#include "wmt16_sources.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/common.h"
#include "dynlib.h"
#include "http.h"
#include "sha256.h"

// Recorded by HF's wmt16 builder (dataset_infos.json, config ro-en, download_checksums).
const Wmt16Source WMT16_RO_EN_SOURCES[WMT16_NSRC] = {
    {"training-parallel-ep-v8.zip",
     "https://huggingface.co/datasets/wmt/wmt16/resolve/main-zip/translation-task/training-parallel-ep-v8.zip",
     "387e570a6812948e30c64885e64a1d3735a66b7c0bc424fcff1208ef11110149", 225190342},
    {"en-ro.tmx.gz", "https://opus.nlpl.eu/download.php?f=SETIMES/v2/tmx/en-ro.tmx.gz",
     "56bfaa2a8c8bdfccb7b50cc926067e2291347d807004e81faab8762ddbf26302", 23458958},
    {"dev.zip", "https://huggingface.co/datasets/wmt/wmt19/resolve/main-zip/translation-task/dev.zip",
     "d796e363740fdc4261aa6f5a3d2f8223e3adaee7d737b7724863325b8956dfd1", 38714274},
};
// the builder's split sizes for ro-en, checked (as a warning) when the recorded sources are used
static const int64_t HF_COUNTS[3] = {610320, 1999, 1999};

int wmt16_default_data_dir(char* out, size_t len, char* err, size_t errlen) {
    const char* h = getenv("HOME");
    if (!h || !*h) return t5_set_err(err, errlen, "HOME is unset: pass --data_dir DIR for the prepared WMT16 data");
    snprintf(out, len, "%s/.cache/t5train/data", h);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// growing arrays of examples

typedef struct {
    char** ro;
    char** en;
    int64_t n, cap;
} Pairs;

static void pairs_add(Pairs* p, char* ro, char* en) {
    // the builder: `if not all(ex.values()): continue` (an empty side drops the example; whitespace is kept)
    if (!ro || !en || !*ro || !*en) {
        free(ro);
        free(en);
        return;
    }
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 4096;
        p->ro = realloc_check(p->ro, (size_t)p->cap * sizeof(char*));
        p->en = realloc_check(p->en, (size_t)p->cap * sizeof(char*));
    }
    p->ro[p->n] = ro;
    p->en[p->n] = en;
    p->n++;
}

static void pairs_free(Pairs* p) {
    for (int64_t i = 0; i < p->n; i++) {
        free(p->ro[i]);
        free(p->en[i]);
    }
    free(p->ro);
    free(p->en);
    memset(p, 0, sizeof *p);
}

static char* dup_n(const char* s, size_t n) {
    char* d = malloc_check(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

// ---------------------------------------------------------------------------------------------
// the three formats

// length of s[0..n) without the trailing whitespace Python's str.rstrip() removes (ASCII whitespace,
// \x1c-\x1f, and the Unicode spaces U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F,
// U+3000 in UTF-8)
static size_t py_rstrip_len(const char* s, size_t n) {
    const unsigned char* u = (const unsigned char*)s;
    for (;;) {
        if (n >= 1 && ((u[n - 1] >= 0x09 && u[n - 1] <= 0x0d) || u[n - 1] == ' ' ||
                       (u[n - 1] >= 0x1c && u[n - 1] <= 0x1f))) {
            n--;
            continue;
        }
        if (n >= 2 && u[n - 2] == 0xc2 && (u[n - 1] == 0x85 || u[n - 1] == 0xa0)) {
            n -= 2;
            continue;
        }
        if (n >= 3) {
            unsigned a = u[n - 3], b = u[n - 2], c = u[n - 1];
            bool ws = (a == 0xe1 && b == 0x9a && c == 0x80) ||                 // U+1680
                      (a == 0xe2 && b == 0x80 && (c <= 0x8a || c == 0xa8 || c == 0xa9 || c == 0xaf)) ||
                      (a == 0xe2 && b == 0x81 && c == 0x9f) ||                 // U+205F
                      (a == 0xe3 && b == 0x80 && c == 0x80);                   // U+3000
            if (ws) {
                n -= 3;
                continue;
            }
        }
        return n;
    }
}

// lines of a buffer split on '\n' only (Python iterating a binary file); a last line without '\n' counts
typedef struct {
    const char* p;
    const char* end;
} LineIter;

static bool next_line(LineIter* it, const char** s, size_t* n) {
    if (it->p >= it->end) return false;
    const char* nl = memchr(it->p, '\n', (size_t)(it->end - it->p));
    const char* e = nl ? nl : it->end;
    *s = it->p;
    *n = (size_t)(e - it->p);
    it->p = nl ? nl + 1 : it->end;
    return true;
}

// europarl: zip(ro lines, en lines), each rstripped
static void parse_parallel_text(const char* ro, size_t nro, const char* en, size_t nen, Pairs* out) {
    LineIter a = {ro, ro + nro}, b = {en, en + nen};
    const char *s1, *s2;
    size_t n1, n2;
    while (next_line(&a, &s1, &n1) && next_line(&b, &s2, &n2))
        pairs_add(out, dup_n(s1, py_rstrip_len(s1, n1)), dup_n(s2, py_rstrip_len(s2, n2)));
}

// SGML: text-mode lines (universal newlines: \r\n, \r and \n end a line); re.match(r'<seg id="\d+">(.*)</seg>')
// at the line start; the text up to the LAST "</seg>" of the line, unchanged
static char** parse_sgm(const char* buf, size_t n, int64_t* count) {
    char** segs = NULL;
    int64_t k = 0, cap = 0;
    const char* p = buf;
    const char* end = buf + n;
    while (p < end) {
        const char* e = p;
        while (e < end && *e != '\n' && *e != '\r') e++;
        size_t len = (size_t)(e - p);
        if (len > 9 && strncmp(p, "<seg id=\"", 9) == 0) {
            const char* d = p + 9;
            const char* de = d;
            while (de < e && *de >= '0' && *de <= '9') de++;
            if (de > d && de + 2 <= e && de[0] == '"' && de[1] == '>') {
                const char* text = de + 2;
                const char* close = NULL;
                for (const char* q = text; q + 6 <= e; q++)
                    if (memcmp(q, "</seg>", 6) == 0) close = q;
                if (close) {
                    if (k == cap) {
                        cap = cap ? 2 * cap : 1024;
                        segs = realloc_check(segs, (size_t)cap * sizeof(char*));
                    }
                    segs[k++] = dup_n(text, (size_t)(close - text));
                }
            }
        }
        p = e;
        if (p < end && *p == '\r') {
            p++;
            if (p < end && *p == '\n') p++;
        } else if (p < end && *p == '\n') {
            p++;
        }
    }
    *count = k;
    return segs;
}

static void parse_parallel_sgm(const char* ro, size_t nro, const char* en, size_t nen, Pairs* out) {
    int64_t a = 0, b = 0;
    char** r = parse_sgm(ro, nro, &a);
    char** e = parse_sgm(en, nen, &b);
    int64_t m = T5_MIN(a, b);
    for (int64_t i = 0; i < m; i++) pairs_add(out, r[i], e[i]);
    for (int64_t i = m; i < a; i++) free(r[i]);
    for (int64_t i = m; i < b; i++) free(e[i]);
    free(r);
    free(e);
}

// XML text: entities decoded, "\r\n" and lone "\r" -> "\n" (XML end-of-line handling)
static char* xml_text(const char* s, size_t n) {
    char* out = malloc_check(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            out[k++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n') i++;
        } else if (s[i] == '&') {
            const char* semi = memchr(s + i, ';', T5_MIN(n - i, (size_t)12));
            size_t el = semi ? (size_t)(semi - (s + i)) : 0;
            const char* ent = s + i + 1;
            unsigned long cp = 0;
            bool ok = true;
            if (!semi) ok = false;
            else if (el == 3 && !strncmp(ent, "lt", 2)) cp = '<';
            else if (el == 3 && !strncmp(ent, "gt", 2)) cp = '>';
            else if (el == 4 && !strncmp(ent, "amp", 3)) cp = '&';
            else if (el == 5 && !strncmp(ent, "quot", 4)) cp = '"';
            else if (el == 5 && !strncmp(ent, "apos", 4)) cp = '\'';
            else if (el > 2 && ent[0] == '#') cp = ent[1] == 'x' ? strtoul(ent + 2, NULL, 16) : strtoul(ent + 1, NULL, 10);
            else ok = false;
            if (!ok || cp == 0 || cp > 0x10ffff) {
                out[k++] = s[i];
                continue;
            }
            if (cp < 0x80) out[k++] = (char)cp;
            else if (cp < 0x800) {
                out[k++] = (char)(0xc0 | (cp >> 6));
                out[k++] = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x10000) {
                out[k++] = (char)(0xe0 | (cp >> 12));
                out[k++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                out[k++] = (char)(0x80 | (cp & 0x3f));
            } else {
                out[k++] = (char)(0xf0 | (cp >> 18));
                out[k++] = (char)(0x80 | ((cp >> 12) & 0x3f));
                out[k++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                out[k++] = (char)(0x80 | (cp & 0x3f));
            }
            i += el;
        } else {
            out[k++] = s[i];
        }
    }
    out[k] = 0;
    return out;
}

static const char* find_n(const char* p, const char* end, const char* needle) {
    size_t nl = strlen(needle);
    for (; p + nl <= end; p++)
        if (memcmp(p, needle, nl) == 0) return p;
    return NULL;
}

// TMX: for each <tu>, {xml:lang of each <tuv>: text of its <seg> before any child element}
static void parse_tmx(const char* buf, size_t n, Pairs* out) {
    const char* end = buf + n;
    const char* p = buf;
    for (;;) {
        const char* tu = find_n(p, end, "<tu");
        if (!tu) break;
        if (tu + 3 < end && tu[3] != '>' && tu[3] != ' ' && tu[3] != '\n' && tu[3] != '\t' && tu[3] != '\r') {
            p = tu + 3;  // <tuv ...> outside a <tu>: not ours
            continue;
        }
        const char* tu_end = find_n(tu, end, "</tu>");
        if (!tu_end) break;
        char *ro = NULL, *en = NULL;
        const char* q = tu;
        for (;;) {
            const char* tuv = find_n(q, tu_end, "<tuv");
            if (!tuv) break;
            const char* gt = memchr(tuv, '>', (size_t)(tu_end - tuv));
            if (!gt) break;
            char lang[16] = "";
            const char* la = find_n(tuv, gt, "xml:lang=");
            if (la) {
                la += 9;
                char quote = *la++;
                const char* le = memchr(la, quote, (size_t)(gt - la));
                if (le && (size_t)(le - la) < sizeof lang) {
                    memcpy(lang, la, (size_t)(le - la));
                    lang[le - la] = 0;
                }
            }
            const char* tuv_end = find_n(gt, tu_end, "</tuv>");
            if (!tuv_end) tuv_end = tu_end;
            const char* seg = find_n(gt, tuv_end, "<seg");
            char* text = NULL;
            if (seg) {
                const char* sgt = memchr(seg, '>', (size_t)(tuv_end - seg));
                if (sgt && sgt[-1] != '/') {
                    const char* t = sgt + 1;
                    const char* te = memchr(t, '<', (size_t)(tuv_end - t));
                    if (!te) te = tuv_end;
                    text = xml_text(t, (size_t)(te - t));
                }
            }
            if (!strcmp(lang, "ro")) {
                free(ro);
                ro = text;
            } else if (!strcmp(lang, "en")) {
                free(en);
                en = text;
            } else {
                free(text);
            }
            q = tuv_end;
        }
        pairs_add(out, ro, en);
        p = tu_end + 5;
    }
}

// ---------------------------------------------------------------------------------------------
// downloads and archives

static int fetch_source(const Wmt16Source* s, const char* dl_dir, const char* mirror, bool quiet, char* path,
                        size_t pathlen, char* err, size_t errlen) {
    snprintf(path, pathlen, "%s/%s", dl_dir, s->name);
    char lockp[4400], part[4400], url[4096];
    snprintf(lockp, sizeof lockp, "%.4300s.lock", path);
    snprintf(part, sizeof part, "%.4300s.incomplete", path);
    if (mirror && *mirror) snprintf(url, sizeof url, "%s/%s", mirror, s->name);
    else snprintf(url, sizeof url, "%s", s->url);
    int fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0664);
    if (fd < 0) return t5_set_err(err, errlen, "cannot open %s: %s", lockp, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (!quiet) fprintf(stderr, "waiting for another process that is downloading %s\n", s->name);
        while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {}
    }
    int rc = 0;
    if (!t5_is_file(path)) {
        HttpOptions h;
        http_options_default(&h);
        h.quiet = quiet;
        h.label = s->name;
        long status = 0;
        for (int attempt = 0; attempt < 2 && rc == 0; attempt++) {
            if (http_download(url, part, s->size, &h, &status, err, errlen) != 0) {
                rc = -1;
                break;
            }
            char hex[65];
            if (sha256_file_hex(part, hex) != 0) {
                rc = t5_set_err(err, errlen, "cannot read %s back: %s", part, strerror(errno));
                break;
            }
            if (strcmp(hex, s->sha256) != 0) {
                unlink(part);
                if (attempt == 0) {
                    if (!quiet) fprintf(stderr, "%s: sha256 %s, expected %s; downloading again\n", s->name, hex, s->sha256);
                    continue;
                }
                rc = t5_set_err(err, errlen, "%s from %s: sha256 %s does not match the recorded %s (the file changed "
                                "upstream, or a proxy altered it); nothing was kept", s->name, url, hex, s->sha256);
                break;
            }
            if (rename(part, path) != 0) rc = t5_set_err(err, errlen, "cannot move %s to %s: %s", part, path, strerror(errno));
            break;
        }
    }
    flock(fd, LOCK_UN);
    close(fd);
    return rc;
}

#ifdef T5_HAVE_ARCHIVE
// reads the members of `path` named in want[] (raw: the single decompressed stream when want has one
// entry named ""), into bufs/lens. 0, or -1 + err naming the archive and what is missing.
static int read_members(const char* path, const char* const* want, int nwant, char** bufs, size_t* lens, bool quiet,
                        char* err, size_t errlen) {
    const ArchiveApi* A = dynlib_archive(err, errlen);
    if (!A) return -1;
    struct archive* a = A->read_new();
    A->read_support_filter_all(a);
    bool raw = nwant == 1 && want[0][0] == 0;
    if (raw) A->read_support_format_raw(a);
    else A->read_support_format_all(a);
    if (A->read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        int rc = t5_set_err(err, errlen, "cannot open the archive %s: %s", path, A->error_string(a));
        A->read_free(a);
        return rc;
    }
    if (!quiet) fprintf(stderr, "extracting %s\n", path);
    int found = 0;
    struct archive_entry* e;
    int r;
    while (found < nwant && (r = A->read_next_header(a, &e)) == ARCHIVE_OK) {
        const char* name = A->entry_pathname(e);
        int idx = -1;
        for (int i = 0; i < nwant; i++)
            if (raw || (name && strcmp(name, want[i]) == 0)) idx = i;
        if (idx < 0 || bufs[idx]) continue;
        size_t cap = 1 << 20, n = 0;
        char* b = malloc_check(cap);
        for (;;) {
            if (cap - n < (1 << 16)) {
                cap *= 2;
                b = realloc_check(b, cap);
            }
            la_ssize_t got = A->read_data(a, b + n, cap - n - 1);
            if (got < 0) {
                free(b);
                int rc = t5_set_err(err, errlen, "%s in %s is damaged: %s", raw ? "the stream" : name, path,
                                    A->error_string(a));
                A->read_free(a);
                return rc;
            }
            if (got == 0) break;
            n += (size_t)got;
        }
        b[n] = 0;
        bufs[idx] = b;
        lens[idx] = n;
        found++;
    }
    A->read_free(a);
    for (int i = 0; i < nwant; i++)
        if (!bufs[i]) return t5_set_err(err, errlen, "%s has no member %s", path, want[i]);
    return 0;
}
#else
static int read_members(const char* path, const char* const* want, int nwant, char** bufs, size_t* lens, bool quiet,
                        char* err, size_t errlen) {
    (void)want, (void)nwant, (void)bufs, (void)lens, (void)quiet;
    return t5_set_err(err, errlen, "cannot extract %s: this t5train was built without libarchive headers "
                      "(HINT: bash scripts/install_deps.sh, then rebuild)", path);
}
#endif

// ---------------------------------------------------------------------------------------------
// output

static int write_jsonl(const char* dir, const char* split, const Pairs* p, char* err, size_t errlen) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s.jsonl", dir, split);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) return t5_set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    for (int64_t i = 0; i < p->n; i++) {
        json_t* en = json_string(p->en[i]);
        json_t* ro = json_string(p->ro[i]);
        if (!en || !ro) {
            json_decref(en);
            json_decref(ro);
            fclose(f);
            unlink(tmp);
            return t5_set_err(err, errlen, "%s example %lld is not valid UTF-8", split, (long long)i + 1);
        }
        json_t* tr = json_object();
        json_object_set_new(tr, "en", en);
        json_object_set_new(tr, "ro", ro);
        json_t* o = json_object();
        json_object_set_new(o, "translation", tr);
        char* s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(o);
        fputs(s, f);
        fputc('\n', f);
        free(s);
    }
    bool ok = fflush(f) == 0 && !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return t5_set_err(err, errlen, "cannot write %s: %s (disk full?)", path, strerror(e));
    }
    return 0;
}

int wmt16_prepare(const char* data_dir, const Wmt16Options* opt, char* err, size_t errlen) {
    Wmt16Options o;
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    const Wmt16Source* src = o.sources ? o.sources : WMT16_RO_EN_SOURCES;
    const char* mirror = o.mirror ? o.mirror : getenv("T5TRAIN_WMT16_MIRROR");
    char dl[4096], out_dir[4096];
    snprintf(dl, sizeof dl, "%s/downloads", data_dir);
    snprintf(out_dir, sizeof out_dir, "%s/wmt16-ro-en", data_dir);
    if (t5_mkdir_p(dl) != 0 || t5_mkdir_p(out_dir) != 0)
        return t5_set_err(err, errlen, "cannot create %s: %s", dl, strerror(errno));
    if (!o.quiet) fprintf(stderr, "preparing WMT16 ro-en (as HF's wmt16 builder) into %s\n", out_dir);
    char paths[WMT16_NSRC][4200];
    for (int i = 0; i < WMT16_NSRC; i++)
        if (fetch_source(&src[i], dl, mirror, o.quiet, paths[i], sizeof paths[i], err, errlen) != 0) return -1;

    Pairs split[3];
    memset(split, 0, sizeof split);
    int rc = 0;
    {  // train: europarl, then SETimes
        const char* want[2] = {"training-parallel-ep-v8/europarl-v8.ro-en.ro", "training-parallel-ep-v8/europarl-v8.ro-en.en"};
        char* b[2] = {NULL, NULL};
        size_t n[2] = {0, 0};
        rc = read_members(paths[WMT16_SRC_EUROPARL], want, 2, b, n, o.quiet, err, errlen);
        if (rc == 0) parse_parallel_text(b[0], n[0], b[1], n[1], &split[0]);
        free(b[0]);
        free(b[1]);
        if (rc == 0) {
            const char* w1[1] = {""};
            char* t[1] = {NULL};
            size_t tn[1] = {0};
            rc = read_members(paths[WMT16_SRC_SETIMES], w1, 1, t, tn, o.quiet, err, errlen);
            if (rc == 0) parse_tmx(t[0], tn[0], &split[0]);
            free(t[0]);
        }
    }
    if (rc == 0) {  // validation and test from dev.zip
        const char* want[4] = {"dev/newsdev2016-roen-src.ro.sgm", "dev/newsdev2016-roen-ref.en.sgm",
                               "dev/newstest2016-roen-src.ro.sgm", "dev/newstest2016-roen-ref.en.sgm"};
        char* b[4] = {NULL, NULL, NULL, NULL};
        size_t n[4] = {0, 0, 0, 0};
        rc = read_members(paths[WMT16_SRC_DEV], want, 4, b, n, o.quiet, err, errlen);
        if (rc == 0) {
            parse_parallel_sgm(b[0], n[0], b[1], n[1], &split[1]);
            parse_parallel_sgm(b[2], n[2], b[3], n[3], &split[2]);
        }
        for (int i = 0; i < 4; i++) free(b[i]);
    }
    static const char* names[3] = {"train", "validation", "test"};
    for (int s = 0; s < 3 && rc == 0; s++) {
        if (split[s].n == 0) rc = t5_set_err(err, errlen, "WMT16 ro-en %s: no examples in the sources", names[s]);
        else rc = write_jsonl(out_dir, names[s], &split[s], err, errlen);
        if (rc == 0 && !o.quiet) fprintf(stderr, "  %s/%s.jsonl: %lld examples\n", out_dir, names[s], (long long)split[s].n);
        if (rc == 0 && src == WMT16_RO_EN_SOURCES && split[s].n != HF_COUNTS[s])
            t5_warn("WMT16 ro-en %s has %lld examples; HF's builder records %lld", names[s], (long long)split[s].n,
                    (long long)HF_COUNTS[s]);
    }
    for (int s = 0; s < 3; s++) pairs_free(&split[s]);
    return rc;
}
