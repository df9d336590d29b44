/*
 * lfs_upload.c: LFS batch, upload (basic or multipart) and verify (see lfs_upload.h).
 */
#include "lfs_upload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "../download/sha256.h"

#define LFS_JSON "application/vnd.git-lfs+json"

// one PUT of bytes [off, off + n) of f to url (no token); the answer's ETag into etag (may be NULL)
static int put_slice(HubConn* h, const PushFile* f, const char* url, int64_t off, int64_t n, char* etag,
                     size_t etaglen, char* err, size_t errlen) {
    HttpRequest rq = {.method = "PUT", .body_path = f->local, .body_offset = off, .body_len = (size_t)n,
                      .no_token = true};
    HttpOptions o = h->http;
    o.label = f->path;
    HttpResponse r;
    if (http_request(url, &o, &rq, &r, err, errlen)) return -1;
    const long status = r.status;
    if (etag) snprintf(etag, etaglen, "%s", r.meta.etag);
    char body[256];
    snprintf(body, sizeof body, "%.200s", r.body ? r.body : "");
    http_response_free(&r);
    if (status < 200 || status >= 300) {
        char what[1200];
        snprintf(what, sizeof what, "uploading %s to the Hub's storage", f->path);
        return hub_api_error(err, errlen, what, status, body);
    }
    return 0;
}

static int upload_multipart(HubConn* h, const PushFile* f, const char* href, const json_t* header, char* err,
                            size_t errlen) {
    const json_t* cs = json_object_get(header, "chunk_size");
    int64_t chunk = json_is_integer(cs) ? (int64_t)json_integer_value(cs)
                    : json_is_string(cs)  ? strtoll(json_string_value(cs), NULL, 10)
                                          : 0;
    if (chunk <= 0) return t5_set_err(err, errlen, "the Hub's LFS answer for %s has a bad chunk_size", f->path);
    const int64_t nparts = (f->size + chunk - 1) / chunk;
    json_t* parts = json_array();
    for (int64_t k = 1; k <= nparts; k++) {
        char key[32];
        snprintf(key, sizeof key, "%lld", (long long)k);
        const json_t* u = json_object_get(header, key);
        if (!json_is_string(u)) {
            json_decref(parts);
            return t5_set_err(err, errlen, "the Hub's LFS answer for %s lists no URL for part %lld of %lld", f->path,
                              (long long)k, (long long)nparts);
        }
        const int64_t off = (k - 1) * chunk;
        char etag[256];
        if (put_slice(h, f, json_string_value(u), off, T5_MIN(chunk, f->size - off), etag, sizeof etag, err, errlen)) {
            json_decref(parts);
            return -1;
        }
        if (!etag[0]) {
            json_decref(parts);
            return t5_set_err(err, errlen, "the Hub's storage answered part %lld of %s without an ETag", (long long)k,
                              f->path);
        }
        json_array_append_new(parts, json_pack("{s:I, s:s}", "partNumber", (json_int_t)k, "etag", etag));
    }
    char what[1200];
    snprintf(what, sizeof what, "completing the multipart upload of %s", f->path);
    json_t* ans = NULL;
    int rc = hub_api_call(h, href, LFS_JSON, json_pack("{s:s, s:o}", "oid", f->sha256, "parts", parts), true, what,
                          &ans, err, errlen);
    json_decref(ans);
    return rc;
}

// the upload (and verify) of one object the batch answer asks for
static int upload_one(HubConn* h, const PushFile* f, const json_t* actions, char* err, size_t errlen) {
    const json_t* up = json_object_get(actions, "upload");
    const json_t* href = up ? json_object_get(up, "href") : NULL;
    if (!json_is_string(href))
        return t5_set_err(err, errlen, "the Hub's LFS answer for %s has no upload href", f->path);
    const json_t* header = json_object_get(up, "header");
    int rc = header && json_object_get(header, "chunk_size")
                 ? upload_multipart(h, f, json_string_value(href), header, err, errlen)
                 : put_slice(h, f, json_string_value(href), 0, f->size, NULL, 0, err, errlen);
    if (rc) return -1;
    const json_t* ver = json_object_get(actions, "verify");
    const json_t* vhref = ver ? json_object_get(ver, "href") : NULL;
    if (json_is_string(vhref)) {
        char what[1200];
        snprintf(what, sizeof what, "verifying the upload of %s", f->path);
        json_t* ans = NULL;
        rc = hub_api_call(h, json_string_value(vhref), LFS_JSON,
                          json_pack("{s:s, s:I}", "oid", f->sha256, "size", (json_int_t)f->size), false, what, &ans,
                          err, errlen);
        json_decref(ans);
    }
    return rc;
}

int lfs_upload_files(HubConn* h, const char* repo_id, PushList* l, PushResult* res, char* err, size_t errlen) {
    int idx[256];
    char url[2400];
    snprintf(url, sizeof url, "%s/%s.git/info/lfs/objects/batch", h->endpoint, repo_id);
    for (int start = 0; start < l->n;) {
        // up to 256 objects per batch request (huggingface_hub's UPLOAD_BATCH_MAX_NUM_FILES)
        int n = 0;
        json_t* objs = json_array();
        for (; start < l->n && n < 256; start++) {
            PushFile* f = &l->v[start];
            if (!f->lfs || f->ignore || f->unchanged) continue;
            if (push_file_sha256(f, h->http.cancel, err, errlen)) {
                json_decref(objs);
                return -1;
            }
            // one object per content: a second file with the same sha256 (a copy) needs no upload of its own
            bool dup = false;
            for (int k = 0; k < n && !dup; k++) dup = strcmp(l->v[idx[k]].sha256, f->sha256) == 0;
            if (dup) continue;
            json_array_append_new(objs, json_pack("{s:s, s:I}", "oid", f->sha256, "size", (json_int_t)f->size));
            idx[n++] = start;
        }
        if (n == 0) {
            json_decref(objs);
            continue;
        }
        json_t* body = json_pack("{s:s, s:[ss], s:o, s:s, s:{s:s}}", "operation", "upload", "transfers", "basic",
                                 "multipart", "objects", objs, "hash_algo", "sha256", "ref", "name", h->revision);
        char what[1200];
        snprintf(what, sizeof what, "asking the Hub where to upload the LFS files of %s", repo_id);
        json_t* ans = NULL;
        if (hub_api_call(h, url, LFS_JSON, body, false, what, &ans, err, errlen)) return -1;
        const json_t* arr = ans ? json_object_get(ans, "objects") : NULL;
        if (!json_is_array(arr)) {
            json_decref(ans);
            return t5_set_err(err, errlen, "the Hub's LFS batch answer has no \"objects\" list");
        }
        for (int k = 0; k < n; k++) {
            PushFile* f = &l->v[idx[k]];
            const json_t* o = hub_json_find(arr, "oid", f->sha256);
            if (!o) {
                json_decref(ans);
                return t5_set_err(err, errlen, "the Hub's LFS batch answer leaves out %s", f->path);
            }
            const json_t* e = json_object_get(o, "error");
            if (e) {
                const json_t* m = json_object_get(e, "message");
                t5_set_err(err, errlen, "the Hub refused the LFS upload of %s: %s", f->path,
                           json_is_string(m) ? json_string_value(m) : "(no message)");
                json_decref(ans);
                return -1;
            }
            const json_t* actions = json_object_get(o, "actions");
            if (!actions || !json_object_get(actions, "upload")) continue;  // the Hub has it already
            if (!h->http.quiet) {
                char sz[32];
                printf("push: uploading %s (%s) to the Hub's LFS storage\n", f->path,
                       http_format_bytes((double)f->size, sz, sizeof sz));
                fflush(stdout);
            }
            if (upload_one(h, f, actions, err, errlen)) {
                json_decref(ans);
                return -1;
            }
            res->n_lfs_uploaded++;
            res->lfs_bytes_uploaded += f->size;
        }
        json_decref(ans);
    }
    return 0;
}
