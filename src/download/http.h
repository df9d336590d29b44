/*
 * http.h: HTTP transfers with libcurl (loaded on first use, dynlib.h): metadata requests and downloads
 * to a file with resume, retries and a progress bar.
 *
 * - Proxies come from the environment as libcurl reads them (http_proxy, https_proxy / HTTPS_PROXY,
 *   all_proxy, no_proxy; libcurl ignores upper-case HTTP_PROXY on purpose).
 * - Retries: transport errors (refused, reset, timeout, short transfer) and HTTP 429 / 5xx are retried
 *   up to max_retries times with exponential back-off (retry_base_s * 2^k, capped at 30 s); a download
 *   resumes from the bytes already on disk (Range: bytes=N-), and starts over when the server ignores
 *   the range (answers 200 instead of 206).
 * - 4xx other than 429 are not retried: the caller gets the status and the Hub's X-Error-Code.
 * - Stalls: a transfer below 1 byte/s for $T5TRAIN_HTTP_STALL_S (60) seconds is a transport error.
 * Errors are returned (-1 + one sentence in err), never exit.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char* token;    // "Authorization: Bearer <token>" (NULL: none); libcurl drops it on redirects to other hosts
    int max_retries;      // 5
    double retry_base_s;  // 1.0 ($T5TRAIN_HTTP_RETRY_BASE_S overrides; tests use 0.05)
    bool quiet;           // no progress bar
    const char* label;    // name shown in the progress bar (the file name)
    // http_request only: when set and *cancel turns non-zero (another thread: a background push abandoned), the
    // transfer in flight is aborted within about a second and no retry follows; the call fails with "cancelled"
    const volatile int* cancel;
} HttpOptions;

void http_options_default(HttpOptions* o);

typedef struct {
    long status;              // final HTTP status (0: no response)
    char etag[256];           // ETag, normalised: no W/ prefix, no quotes
    char linked_etag[256];    // X-Linked-Etag (the Hub's sha256 of an LFS file), normalised
    char repo_commit[128];    // X-Repo-Commit
    char location[2048];      // Location of a redirect
    char error_code[128];     // X-Error-Code (RepoNotFound, EntryNotFound, RevisionNotFound, GatedRepo)
    char error_message[512];  // X-Error-Message
    int64_t linked_size;      // X-Linked-Size, -1 if absent
    int64_t content_length;   // Content-Length, -1 if absent
} HttpMeta;

// HEAD url without following redirects (the Hub answers LFS files with a 302 to its CDN and needs the
// headers of that answer). Returns 0 with meta filled whatever the status (after retries of 429/5xx), or
// -1 + err when no answer came (transport failure after retries).
int http_head(const char* url, const HttpOptions* opt, HttpMeta* meta, char* err, size_t errlen);

// GET url (following redirects) into path. Bytes already in path are kept and the transfer resumes after
// them. expected_size >= 0: the final size must match it (else an error, the partial file kept for resume).
// 0 on success; -1 + err otherwise, with *status the last HTTP status (0: transport failure).
int http_download(const char* url, const char* path, int64_t expected_size, const HttpOptions* opt, long* status,
                  char* err, size_t errlen);

// A request with a body (POST / PUT), its answer kept in memory: the Hub's JSON APIs and uploads (src/upload/).
typedef struct {
    const char* method;        // "POST", "PUT", "GET"
    const char* content_type;  // Content-Type (NULL: none)
    const char* accept;        // Accept (NULL: none)
    const char* body;          // in-memory body (NULL with body_path: the file slice below)
    size_t body_len;
    const char* body_path;     // or: bytes [body_offset, body_offset + body_len) of this file (an LFS upload)
    int64_t body_offset;
    bool no_token;             // do not send opt->token (a pre-signed storage URL rejects a second credential)
} HttpRequest;

typedef struct {
    long status;        // final HTTP status
    HttpMeta meta;      // its headers (etag: a multipart part's ETag)
    char* body;         // the answer's body, NUL-terminated (malloc'ed; http_response_free), up to 64 MiB kept
    size_t body_len;
} HttpResponse;

// Sends req to url (following redirects) and keeps the answer. Transport errors, 429 and 5xx are retried as the
// downloads are (a file body is re-read from its offset). 0 with *resp filled whatever the final status (the caller
// reads 4xx), or -1 + err when no answer came. The caller frees resp with http_response_free.
int http_request(const char* url, const HttpOptions* opt, const HttpRequest* req, HttpResponse* resp, char* err,
                 size_t errlen);
void http_response_free(HttpResponse* r);

// Human-readable size: "1.5 MiB" (buf >= 32 bytes).
const char* http_format_bytes(double bytes, char* buf, size_t len);

#ifdef __cplusplus
}
#endif
