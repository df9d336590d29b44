/*
 * http.c: libcurl transfers with resume, retries and a progress bar (see http.h).
 */
#include "http.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/common.h"
#include "dynlib.h"

void http_options_default(HttpOptions* o) {
    memset(o, 0, sizeof *o);
    o->max_retries = 5;
    o->retry_base_s = 1.0;
}

const char* http_format_bytes(double b, char* buf, size_t len) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, len, "%.0f %s", b, units[u]);
    else snprintf(buf, len, "%.1f %s", b, units[u]);
    return buf;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double retry_base(const HttpOptions* o) {
    const char* e = getenv("T5TRAIN_HTTP_RETRY_BASE_S");
    if (e && *e) return atof(e);
    return o->retry_base_s > 0 ? o->retry_base_s : 1.0;
}

// (in slices of 0.1 s when the caller may cancel: an abandoned push does not sleep out its back-off)
static void backoff_sleep(const HttpOptions* o, int attempt) {
    double s = retry_base(o) * pow(2.0, attempt);
    if (s > 30.0) s = 30.0;
    while (s > 0 && !(o->cancel && *o->cancel)) {
        const double d = o->cancel && s > 0.1 ? 0.1 : s;
        struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
        nanosleep(&ts, NULL);
        s -= d;
    }
}

// strips W/ and surrounding quotes: W/"abc" -> abc
static void normalise_etag(char* s) {
    char* p = s;
    if (strncmp(p, "W/", 2) == 0) p += 2;
    size_t n = strlen(p);
    if (n >= 2 && p[0] == '"' && p[n - 1] == '"') {
        p++;
        n -= 2;
    }
    memmove(s, p, n);
    s[n] = 0;
}

#ifdef T5_HAVE_CURL

// ---------------------------------------------------------------------------------------------
// response headers

static void copy_value(char* dst, size_t cap, const char* v, size_t n) {
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
    while (n && *v == ' ') {
        v++;
        n--;
    }
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t header_cb(char* buf, size_t size, size_t nitems, void* user) {
    HttpMeta* m = (HttpMeta*)user;
    size_t n = size * nitems;
    if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        // a new response (after a redirect or a 100 Continue): forget the previous one's headers
        long keep_status = 0;
        memset(m, 0, sizeof *m);
        m->status = keep_status;
        m->linked_size = -1;
        m->content_length = -1;
        return n;
    }
    const char* colon = memchr(buf, ':', n);
    if (!colon) return n;
    size_t klen = (size_t)(colon - buf);
    const char* v = colon + 1;
    size_t vlen = n - klen - 1;
    char tmp[64];
#define HDR_IS(name) (klen == strlen(name) && strncasecmp(buf, name, klen) == 0)
    if (HDR_IS("etag")) {
        copy_value(m->etag, sizeof m->etag, v, vlen);
        normalise_etag(m->etag);
    } else if (HDR_IS("x-linked-etag")) {
        copy_value(m->linked_etag, sizeof m->linked_etag, v, vlen);
        normalise_etag(m->linked_etag);
    } else if (HDR_IS("x-repo-commit")) {
        copy_value(m->repo_commit, sizeof m->repo_commit, v, vlen);
    } else if (HDR_IS("location")) {
        copy_value(m->location, sizeof m->location, v, vlen);
    } else if (HDR_IS("x-error-code")) {
        copy_value(m->error_code, sizeof m->error_code, v, vlen);
    } else if (HDR_IS("x-error-message")) {
        copy_value(m->error_message, sizeof m->error_message, v, vlen);
    } else if (HDR_IS("x-linked-size")) {
        copy_value(tmp, sizeof tmp, v, vlen);
        m->linked_size = strtoll(tmp, NULL, 10);
    } else if (HDR_IS("content-length")) {
        copy_value(tmp, sizeof tmp, v, vlen);
        m->content_length = strtoll(tmp, NULL, 10);
    }
#undef HDR_IS
    return n;
}

static bool transport_retryable(CURLcode c) {
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

static bool status_retryable(long s) { return s == 429 || (s >= 500 && s <= 599); }

static struct curl_slist* common_headers(const CurlApi* c, const HttpOptions* o) {
    struct curl_slist* h = NULL;
    if (o->token && *o->token) {
        char* a = malloc_check(strlen(o->token) + 32);
        sprintf(a, "Authorization: Bearer %s", o->token);
        h = c->slist_append(h, a);
        free(a);
    }
    h = c->slist_append(h, "Accept-Encoding: identity");
    return h;
}

static void common_setopt(const CurlApi* c, CURL* h, const char* url, struct curl_slist* hdrs) {
    c->easy_setopt(h, CURLOPT_URL, url);
    c->easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    c->easy_setopt(h, CURLOPT_USERAGENT, "t5train/1.0");
    c->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    c->easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    const char* st = getenv("T5TRAIN_HTTP_STALL_S");
    long stall = st && *st ? atol(st) : 60;
    c->easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    c->easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall > 0 ? stall : 60L);
}

// libcurl, and opt or the defaults (into *dflt) when NULL
static const CurlApi* begin(const HttpOptions** opt, HttpOptions* dflt, char* err, size_t errlen) {
    const CurlApi* c = dynlib_curl(err, errlen);
    if (c && !*opt) {
        http_options_default(dflt);
        *opt = dflt;
    }
    return c;
}

int http_head(const char* url, const HttpOptions* opt, HttpMeta* meta, char* err, size_t errlen) {
    HttpOptions dflt;
    const CurlApi* c = begin(&opt, &dflt, err, errlen);
    if (!c) return -1;
    char cur[4096];
    snprintf(cur, sizeof cur, "%s", url);
    int redirects = 0;
    for (int attempt = 0;; attempt++) {
        CURL* h = c->easy_init();
        if (!h) return t5_set_err(err, errlen, "curl_easy_init failed");
        struct curl_slist* hdrs = common_headers(c, opt);
        common_setopt(c, h, cur, hdrs);
        c->easy_setopt(h, CURLOPT_NOBODY, 1L);
        c->easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        c->easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
        c->easy_setopt(h, CURLOPT_HEADERDATA, meta);
        memset(meta, 0, sizeof *meta);
        meta->linked_size = meta->content_length = -1;
        CURLcode rc = c->easy_perform(h);
        long status = 0;
        c->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        c->easy_cleanup(h);
        c->slist_free_all(hdrs);
        meta->status = status;
        if (rc != CURLE_OK) {
            // a name that does not resolve is no network (or a wrong HF_ENDPOINT / proxy): answered at once, as
            // huggingface_hub does for its metadata request, instead of ~30 s of back-off before the same error
            bool no_name = rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY;
            if (transport_retryable(rc) && !no_name && attempt < opt->max_retries) {
                backoff_sleep(opt, attempt);
                continue;
            }
            return t5_set_err(err, errlen, "cannot reach %s: %s (after %d attempt%s)", cur, c->easy_strerror(rc),
                              attempt + 1, attempt ? "s" : "");
        }
        if (status_retryable(status) && attempt < opt->max_retries) {
            backoff_sleep(opt, attempt);
            continue;
        }
        // a relative redirect is the Hub moving a renamed repo: follow it (an absolute one is the CDN of an
        // LFS file, whose headers the caller wants)
        if (status >= 301 && status <= 308 && meta->location[0] == '/' && redirects < 5) {
            const char* scheme_end = strstr(cur, "://");
            const char* path_start = scheme_end ? strchr(scheme_end + 3, '/') : NULL;
            size_t origin = path_start ? (size_t)(path_start - cur) : strlen(cur);
            char next[4096];
            snprintf(next, sizeof next, "%.*s%s", (int)origin, cur, meta->location);
            snprintf(cur, sizeof cur, "%s", next);
            redirects++;
            attempt = -1;
            continue;
        }
        return 0;
    }
}

// ---------------------------------------------------------------------------------------------
// downloads

typedef struct {
    FILE* f;
    const char* path;
    CURL* h;
    const CurlApi* c;
    int64_t offset;        // bytes on disk before this attempt
    int64_t written;       // bytes written in this attempt
    bool checked;          // status of the response checked at the first body byte
    bool to_file;          // 2xx: body goes to the file; else into errbody
    bool restarted;        // the server ignored the Range: file truncated
    bool write_failed;
    char errbody[512];
    size_t nerr;
    // progress
    const HttpOptions* opt;
    int64_t total;         // expected total size (-1 unknown)
    double t0, last;
    int64_t last_bytes;
    double rate;
    bool tty;
    bool printed;
} Sink;

static size_t write_cb(char* data, size_t size, size_t nmemb, void* user) {
    Sink* s = (Sink*)user;
    size_t n = size * nmemb;
    if (!s->checked) {
        s->checked = true;
        long status = 0;
        s->c->easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
        s->to_file = status >= 200 && status < 300;
        if (s->to_file && s->offset > 0 && status == 200) {
            // the server sent the whole file: start over
            if (ftruncate(fileno(s->f), 0) != 0 || fseeko(s->f, 0, SEEK_SET) != 0) {
                s->write_failed = true;
                return 0;
            }
            s->offset = 0;
            s->restarted = true;
        }
    }
    if (!s->to_file) {
        size_t take = T5_MIN(n, sizeof s->errbody - 1 - s->nerr);
        memcpy(s->errbody + s->nerr, data, take);
        s->nerr += take;
        s->errbody[s->nerr] = 0;
        return n;
    }
    if (fwrite(data, 1, n, s->f) != n) {
        s->write_failed = true;
        return 0;
    }
    s->written += (int64_t)n;
    return n;
}

static void progress_print(Sink* s, bool final) {
    if (s->opt->quiet) return;
    double t = now_s();
    int64_t have = s->offset + s->written;
    if (!final) {
        double min_gap = s->tty ? 0.2 : 10.0;
        if (t - s->last < min_gap) return;
    }
    double dt = t - s->last;
    if (dt > 0 && s->last > 0) {
        double inst = (double)(have - s->last_bytes) / dt;
        s->rate = s->rate > 0 ? 0.7 * s->rate + 0.3 * inst : inst;
    }
    s->last = t;
    s->last_bytes = have;
    char a[32], b[32], r[32], eta[32] = "";
    http_format_bytes((double)have, a, sizeof a);
    double elapsed = t - s->t0;
    double avg = elapsed > 0 ? (double)s->written / elapsed : 0;
    double rate = final ? avg : s->rate;
    http_format_bytes(rate, r, sizeof r);
    char line[512];
    if (s->total > 0) {
        http_format_bytes((double)s->total, b, sizeof b);
        double pct = 100.0 * (double)have / (double)s->total;
        if (!final && rate > 0) {
            long e = (long)((double)(s->total - have) / rate);
            snprintf(eta, sizeof eta, " ETA %ld:%02ld", e / 60, e % 60);
        } else if (final) {
            snprintf(eta, sizeof eta, " in %.1f s", elapsed);
        }
        snprintf(line, sizeof line, "%s: %s / %s %3.0f%% %s/s%s", s->opt->label ? s->opt->label : "download", a, b, pct,
                 r, eta);
    } else {
        snprintf(line, sizeof line, "%s: %s %s/s", s->opt->label ? s->opt->label : "download", a, r);
    }
    if (s->tty) fprintf(stderr, "\r%-78s%s", line, final ? "\n" : "");
    else fprintf(stderr, "%s\n", line);
    s->printed = true;
}

static int xferinfo_cb(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    Sink* s = (Sink*)user;
    if (s->total < 0 && dltotal > 0 && s->to_file) s->total = s->offset + (int64_t)dltotal;
    if (s->to_file) progress_print(s, false);
    return 0;
}

static int64_t file_size(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (int64_t)st.st_size;
}

int http_download(const char* url, const char* path, int64_t expected_size, const HttpOptions* opt, long* status_out,
                  char* err, size_t errlen) {
    long dummy;
    if (!status_out) status_out = &dummy;
    *status_out = 0;
    HttpOptions dflt;
    const CurlApi* c = begin(&opt, &dflt, err, errlen);
    if (!c) return -1;
    double t_start = now_s();
    bool announced = false;
    for (int attempt = 0;; attempt++) {
        int64_t have = file_size(path);
        if (have < 0) have = 0;
        if (expected_size >= 0 && have == expected_size && have > 0) return 0;  // already complete
        if (expected_size >= 0 && have > expected_size) {
            // longer than it should be: not a prefix of the file we want
            if (truncate(path, 0) != 0)
                return t5_set_err(err, errlen, "cannot truncate %s: %s", path, strerror(errno));
            have = 0;
        }
        FILE* f = fopen(path, have > 0 ? "r+b" : "wb");
        if (!f) return t5_set_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
        if (fseeko(f, (off_t)have, SEEK_SET) != 0) {
            fclose(f);
            return t5_set_err(err, errlen, "cannot seek in %s: %s", path, strerror(errno));
        }
        if (!opt->quiet && have > 0 && !announced) {
            char a[32];
            fprintf(stderr, "%s: resuming after %s already downloaded\n", opt->label ? opt->label : path,
                    http_format_bytes((double)have, a, sizeof a));
        }
        announced = true;
        CURL* h = c->easy_init();
        if (!h) {
            fclose(f);
            return t5_set_err(err, errlen, "curl_easy_init failed");
        }
        Sink s;
        memset(&s, 0, sizeof s);
        s.f = f;
        s.path = path;
        s.h = h;
        s.c = c;
        s.offset = have;
        s.opt = opt;
        s.total = expected_size;
        s.t0 = t_start;
        s.tty = isatty(2);
        struct curl_slist* hdrs = common_headers(c, opt);
        common_setopt(c, h, url, hdrs);
        c->easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        c->easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
        c->easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
        c->easy_setopt(h, CURLOPT_WRITEDATA, &s);
        c->easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        c->easy_setopt(h, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
        c->easy_setopt(h, CURLOPT_XFERINFODATA, &s);
        if (have > 0) c->easy_setopt(h, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)have);
        CURLcode rc = c->easy_perform(h);
        long status = 0;
        c->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        c->easy_cleanup(h);
        c->slist_free_all(hdrs);
        bool flush_bad = fflush(f) != 0;
        fclose(f);
        *status_out = status;
        if (s.write_failed || flush_bad)
            return t5_set_err(err, errlen, "cannot write %s: %s (disk full?)", path, strerror(errno));
        if (rc == CURLE_RANGE_ERROR || status == 416) {
            // the range starts at or past the end: what we have is either complete or not this file
            if (expected_size < 0 || have != expected_size) {
                if (truncate(path, 0) != 0)
                    return t5_set_err(err, errlen, "cannot truncate %s: %s", path, strerror(errno));
            }
            if (attempt < opt->max_retries) continue;
        }
        if (rc != CURLE_OK && rc != CURLE_HTTP_RETURNED_ERROR) {
            if (s.printed && s.tty && !opt->quiet) fputc('\n', stderr);
            // the first connection's name does not resolve: no network, answered at once (as in http_head)
            bool no_name = attempt == 0 && (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY);
            if (transport_retryable(rc) && !no_name && attempt < opt->max_retries) {
                if (!opt->quiet)
                    fprintf(stderr, "%s: transfer interrupted (%s), retrying (%d/%d)\n",
                            opt->label ? opt->label : url, c->easy_strerror(rc), attempt + 1, opt->max_retries);
                backoff_sleep(opt, attempt);
                continue;
            }
            return t5_set_err(err, errlen, "download of %s failed: %s (after %d attempts; the %lld bytes received "
                              "are kept in %s and the next run resumes)", url, c->easy_strerror(rc), attempt + 1,
                              (long long)file_size(path), path);
        }
        if (status < 200 || status >= 300) {
            if (status_retryable(status) && attempt < opt->max_retries) {
                if (!opt->quiet)
                    fprintf(stderr, "%s: server answered %ld, retrying (%d/%d)\n", opt->label ? opt->label : url,
                            status, attempt + 1, opt->max_retries);
                backoff_sleep(opt, attempt);
                continue;
            }
            // keep the message of a JSON error body short
            for (char* p = s.errbody; *p; p++)
                if (*p == '\n' || *p == '\r') *p = ' ';
            return t5_set_err(err, errlen, "download of %s failed: HTTP %ld%s%s", url, status,
                              s.errbody[0] ? ": " : "", s.errbody);
        }
        int64_t got = file_size(path);
        if (expected_size >= 0 && got != expected_size) {
            if (got < expected_size && attempt < opt->max_retries) {
                backoff_sleep(opt, attempt);
                continue;  // short: resume
            }
            return t5_set_err(err, errlen, "download of %s ended at %lld bytes, expected %lld", url, (long long)got,
                              (long long)expected_size);
        }
        if (!opt->quiet) {
            if (s.total < 0) s.total = got;
            progress_print(&s, true);
        }
        return 0;
    }
}

// ---------------------------------------------------------------------------------------------
// requests with a body, the answer in memory (the Hub's JSON APIs, LFS uploads)

#define HTTP_BODY_KEEP ((size_t)64 << 20)

typedef struct {
    const HttpRequest* req;
    FILE* f;           // body_path, positioned at body_offset
    size_t sent;       // body bytes handed to libcurl
    HttpResponse* resp;
    size_t cap;
    Sink bar;          // upload progress (written = bytes sent), printed as the downloads' bar
    bool show;         // the bar is printed (else the callback only watches opt->cancel)
} ReqCtx;

static size_t req_read_cb(char* buf, size_t size, size_t nitems, void* user) {
    ReqCtx* r = (ReqCtx*)user;
    size_t want = T5_MIN(size * nitems, r->req->body_len - r->sent);
    if (want == 0) return 0;
    size_t got;
    if (r->f) {
        got = fread(buf, 1, want, r->f);
        if (got == 0) return CURL_READFUNC_ABORT;  // the file shrank under us
    } else {
        memcpy(buf, r->req->body + r->sent, want);
        got = want;
    }
    r->sent += got;
    return got;
}

static size_t req_write_cb(char* data, size_t size, size_t nmemb, void* user) {
    ReqCtx* r = (ReqCtx*)user;
    size_t n = size * nmemb;
    HttpResponse* o = r->resp;
    size_t take = o->body_len + n > HTTP_BODY_KEEP ? HTTP_BODY_KEEP - o->body_len : n;
    if (o->body_len + take + 1 > r->cap) {
        r->cap = T5_MAX(r->cap * 2, o->body_len + take + 1);
        o->body = realloc_check(o->body, r->cap);
    }
    memcpy(o->body + o->body_len, data, take);
    o->body_len += take;
    o->body[o->body_len] = 0;
    return n;
}

static bool cancelled(const HttpOptions* o) { return o->cancel && *o->cancel; }

static int req_xferinfo_cb(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    ReqCtx* r = (ReqCtx*)user;
    if (cancelled(r->bar.opt)) return 1;  // libcurl aborts the transfer (CURLE_ABORTED_BY_CALLBACK)
    r->bar.written = (int64_t)ulnow;
    if (r->show) progress_print(&r->bar, false);
    return 0;
}

void http_response_free(HttpResponse* r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

int http_request(const char* url, const HttpOptions* opt, const HttpRequest* req, HttpResponse* resp, char* err,
                 size_t errlen) {
    memset(resp, 0, sizeof *resp);
    HttpOptions dflt;
    const CurlApi* c = begin(&opt, &dflt, err, errlen);
    if (!c) return -1;
    HttpOptions o = *opt;
    if (req->no_token) o.token = NULL;
    const bool has_body = req->body || req->body_path;
    const bool is_put = strcmp(req->method, "PUT") == 0;
    const double t0 = now_s();
    for (int attempt = 0;; attempt++) {
        if (cancelled(&o)) return t5_set_err(err, errlen, "cancelled: %s was not sent", url);
        ReqCtx r;
        memset(&r, 0, sizeof r);
        r.req = req;
        r.resp = resp;
        http_response_free(resp);
        if (req->body_path) {
            r.f = fopen(req->body_path, "rb");
            if (!r.f || fseeko(r.f, (off_t)req->body_offset, SEEK_SET) != 0) {
                if (r.f) fclose(r.f);
                return t5_set_err(err, errlen, "cannot read %s: %s", req->body_path, strerror(errno));
            }
        }
        // a large body's progress, as a download's (bytes, rate, ETA)
        r.bar.opt = &o;
        r.bar.total = (int64_t)req->body_len;
        r.bar.t0 = t0;
        r.bar.tty = isatty(2);
        const bool show = !o.quiet && req->body_path && req->body_len >= ((size_t)1 << 20);
        CURL* h = c->easy_init();
        if (!h) {
            if (r.f) fclose(r.f);
            return t5_set_err(err, errlen, "curl_easy_init failed");
        }
        struct curl_slist* hdrs = common_headers(c, &o);
        char line[256];
        if (req->content_type) {
            snprintf(line, sizeof line, "Content-Type: %s", req->content_type);
            hdrs = c->slist_append(hdrs, line);
        }
        if (req->accept) {
            snprintf(line, sizeof line, "Accept: %s", req->accept);
            hdrs = c->slist_append(hdrs, line);
        }
        hdrs = c->slist_append(hdrs, "Expect:");  // no 100-continue round trip
        common_setopt(c, h, url, hdrs);
        c->easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        c->easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
        c->easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
        c->easy_setopt(h, CURLOPT_HEADERDATA, &resp->meta);
        c->easy_setopt(h, CURLOPT_WRITEFUNCTION, req_write_cb);
        c->easy_setopt(h, CURLOPT_WRITEDATA, &r);
        if (has_body) {
            c->easy_setopt(h, CURLOPT_READFUNCTION, req_read_cb);
            c->easy_setopt(h, CURLOPT_READDATA, &r);
            if (is_put) {
                c->easy_setopt(h, CURLOPT_UPLOAD, 1L);
                c->easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
            } else {
                c->easy_setopt(h, CURLOPT_POST, 1L);
                c->easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
                if (strcmp(req->method, "POST") != 0) c->easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
            }
        } else if (strcmp(req->method, "GET") != 0) {
            c->easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
        }
        r.show = show;
        if (show || o.cancel) {  // (libcurl calls it about once a second even when no byte moves)
            c->easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
            c->easy_setopt(h, CURLOPT_XFERINFOFUNCTION, req_xferinfo_cb);
            c->easy_setopt(h, CURLOPT_XFERINFODATA, &r);
        }
        memset(&resp->meta, 0, sizeof resp->meta);
        resp->meta.linked_size = resp->meta.content_length = -1;
        CURLcode rc = c->easy_perform(h);
        long status = 0;
        c->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        c->easy_cleanup(h);
        c->slist_free_all(hdrs);
        if (r.f) fclose(r.f);
        resp->status = resp->meta.status = status;
        if (cancelled(&o)) return t5_set_err(err, errlen, "cancelled: %s was not sent to the end", url);
        if (rc != CURLE_OK) {
            if (r.bar.printed && r.bar.tty) fputc('\n', stderr);
            bool no_name = rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY;
            if (transport_retryable(rc) && !no_name && attempt < o.max_retries) {
                backoff_sleep(&o, attempt);
                continue;
            }
            return t5_set_err(err, errlen, "cannot reach %s: %s (after %d attempt%s)", url, c->easy_strerror(rc),
                              attempt + 1, attempt ? "s" : "");
        }
        if (status_retryable(status) && attempt < o.max_retries) {
            if (!o.quiet)
                fprintf(stderr, "%s: server answered %ld, retrying (%d/%d)\n", o.label ? o.label : url, status,
                        attempt + 1, o.max_retries);
            backoff_sleep(&o, attempt);
            continue;
        }
        if (show && status >= 200 && status < 300) progress_print(&r.bar, true);
        if (!resp->body) resp->body = calloc_check(1, 1);
        return 0;
    }
}

#else  // !T5_HAVE_CURL

void http_response_free(HttpResponse* r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

int http_request(const char* url, const HttpOptions* opt, const HttpRequest* req, HttpResponse* resp, char* err,
                 size_t errlen) {
    (void)opt;
    (void)req;
    memset(resp, 0, sizeof *resp);
    return t5_set_err(err, errlen, "cannot reach %s: this t5train was built without libcurl headers "
                      "(HINT: bash scripts/install_deps.sh, then rebuild)", url);
}

int http_head(const char* url, const HttpOptions* opt, HttpMeta* meta, char* err, size_t errlen) {
    (void)opt;
    memset(meta, 0, sizeof *meta);
    return t5_set_err(err, errlen, "cannot fetch %s: this t5train was built without libcurl headers "
                      "(HINT: bash scripts/install_deps.sh, then rebuild)", url);
}

int http_download(const char* url, const char* path, int64_t expected_size, const HttpOptions* opt, long* status,
                  char* err, size_t errlen) {
    (void)path;
    (void)expected_size;
    (void)opt;
    if (status) *status = 0;
    return t5_set_err(err, errlen, "cannot fetch %s: this t5train was built without libcurl headers "
                      "(HINT: bash scripts/install_deps.sh, then rebuild)", url);
}

// keep the helpers used only with libcurl referenced
static void unused_helpers(void) __attribute__((unused));
static void unused_helpers(void) {
    (void)now_s;
    (void)backoff_sleep;
    (void)normalise_etag;
}

#endif
