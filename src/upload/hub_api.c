/*
 * hub_api.c: repo creation, preupload and commit (see hub_api.h).
 */
#include "hub_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "../download/hub.h"
#include "../download/sha1.h"
#include "../download/sha256.h"

char* hub_base64(const void* data, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char* p = (const unsigned char*)data;
    char* out = malloc_check(4 * ((n + 2) / 3) + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[o++] = A[v >> 18 & 63];
        out[o++] = A[v >> 12 & 63];
        out[o++] = i + 1 < n ? A[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? A[v & 63] : '=';
    }
    out[o] = 0;
    return out;
}

const json_t* hub_json_find(const json_t* arr, const char* key, const char* value) {
    size_t i;
    const json_t* it;
    json_array_foreach(arr, i, it) {
        const json_t* v = json_object_get(it, key);
        if (json_is_string(v) && strcmp(json_string_value(v), value) == 0) return it;
    }
    return NULL;
}

int hub_conn_init(HubConn* h, const char* endpoint, const char* token, const char* revision, bool quiet, char* err,
                  size_t errlen) {
    memset(h, 0, sizeof *h);
    hub_endpoint(endpoint, h->endpoint, sizeof h->endpoint);
    h->token = token && *token ? strdup_check(token) : hub_token_read();
    if (!h->token)
        return t5_set_err(err, errlen, "pushing to the Hub needs a token with write access: pass --hub_token, set "
                          "HF_TOKEN, or log in once with `hf auth login` (it writes ~/.cache/huggingface/token)");
    snprintf(h->revision, sizeof h->revision, "%s", revision && *revision ? revision : "main");
    hub_url_quote(h->revision, h->rev_quoted, sizeof h->rev_quoted);
    http_options_default(&h->http);
    h->http.token = h->token;
    h->http.quiet = quiet;
    return 0;
}

void hub_conn_free(HubConn* h) {
    free(h->token);
    h->token = NULL;
}

int hub_api_error(char* err, size_t errlen, const char* what, long status, const char* msg) {
    const char* hint = "";
    if (status == 401 || status == 403)
        hint = " (HINT: the token must have write access to the repo: a \"write\" token from "
               "https://huggingface.co/settings/tokens, given with --hub_token or HF_TOKEN)";
    else if (status == 404)
        hint = " (HINT: check --hub_model_id and --hub_revision: the branch must exist)";
    return t5_set_err(err, errlen, "%s: the Hub answered HTTP %ld%s%s%s", what, status, msg && *msg ? ": " : "",
                      msg ? msg : "", hint);
}

// the Hub's message of an error answer: X-Error-Message, else the JSON body's "error", else the body's start
static void error_message(const HttpResponse* r, const json_t* answer, char* msg, size_t len) {
    msg[0] = 0;
    if (r->meta.error_message[0]) {
        snprintf(msg, len, "%s", r->meta.error_message);
        return;
    }
    const json_t* e = answer ? json_object_get(answer, "error") : NULL;
    if (e && json_is_string(e)) snprintf(msg, len, "%s", json_string_value(e));
    else if (e && json_is_object(e) && json_is_string(json_object_get(e, "message")))
        snprintf(msg, len, "%s", json_string_value(json_object_get(e, "message")));
    else if (r->body && r->body_len) snprintf(msg, len, "%.200s", r->body);
    for (char* p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

static int post_raw(HubConn* h, const char* url, const char* content_type, const char* body, size_t n, bool no_token,
                    json_t** answer, long* status, char* msg, size_t msglen, char* err, size_t errlen) {
    HttpRequest rq = {.method = "POST", .content_type = content_type, .accept = NULL, .body = body, .body_len = n,
                      .no_token = no_token};
    if (content_type && strstr(content_type, "git-lfs")) rq.accept = content_type;
    HttpResponse r;
    *answer = NULL;
    if (http_request(url, &h->http, &rq, &r, err, errlen)) return -1;
    *status = r.status;
    json_error_t je;
    *answer = r.body_len ? json_loads(r.body, 0, &je) : NULL;
    if (msg && msglen) {
        msg[0] = 0;
        if (r.status < 200 || r.status >= 300) error_message(&r, *answer, msg, msglen);
    }
    http_response_free(&r);
    return 0;
}

// the answer whatever its status (*status; msg: the Hub's message of a non-2xx), or -1 + err when none came
static int post_json(HubConn* h, const char* url, const char* content_type, const json_t* body, bool no_token,
                     json_t** answer, long* status, char* msg, size_t msglen, char* err, size_t errlen) {
    char* text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text) return t5_set_err(err, errlen, "out of memory building a request to %s", url);
    int rc = post_raw(h, url, content_type ? content_type : "application/json", text, text ? strlen(text) : 0,
                      no_token, answer, status, msg, msglen, err, errlen);
    free(text);
    return rc;
}

int hub_api_call(HubConn* h, const char* url, const char* content_type, json_t* body, bool no_token, const char* what,
                 json_t** answer, char* err, size_t errlen) {
    long status = 0;
    char msg[512];
    int rc = post_json(h, url, content_type, body, no_token, answer, &status, msg, sizeof msg, err, errlen);
    json_decref(body);
    if (rc) return -1;
    if (status < 200 || status >= 300) {
        json_decref(*answer);
        *answer = NULL;
        return hub_api_error(err, errlen, what, status, msg);
    }
    return 0;
}

int hub_api_create_repo(HubConn* h, const char* repo, bool private_repo, char* repo_id, size_t idlen, char* err,
                        size_t errlen) {
    const char* slash = strchr(repo, '/');
    json_t* body = json_object();
    if (slash) {
        json_object_set_new(body, "name", json_string(slash + 1));
        json_object_set_new(body, "organization", json_stringn(repo, (size_t)(slash - repo)));
    } else {
        json_object_set_new(body, "name", json_string(repo));
        json_object_set_new(body, "organization", json_null());
    }
    // huggingface_hub >= 1.0: "visibility" (HF's Trainer passes hub_private_repo, None by default: the Hub's default)
    if (private_repo) json_object_set_new(body, "visibility", json_string("private"));
    char url[1200], msg[512], what[1400];
    snprintf(url, sizeof url, "%s/api/repos/create", h->endpoint);
    snprintf(what, sizeof what, "creating repo %s on %s", repo, h->endpoint);
    json_t* ans = NULL;
    long status = 0;
    int rc = post_json(h, url, NULL, body, false, &ans, &status, msg, sizeof msg, err, errlen);
    json_decref(body);
    if (rc) return -1;
    if (status == 401 || status == 402 || status == 403) {
        // huggingface_hub's create_repo(exist_ok=True): a token that may not create repos in the namespace (a
        // fine-grained token with write access to this repo only) still pushes to a repo that exists
        char info[1200];
        snprintf(info, sizeof info, "%s/api/models/%s", h->endpoint, repo);
        HttpRequest rq = {.method = "GET"};
        HttpResponse r;
        char e2[256];
        if (strchr(repo, '/') && http_request(info, &h->http, &rq, &r, e2, sizeof e2) == 0) {
            const bool exists = r.status >= 200 && r.status < 300;
            http_response_free(&r);
            if (exists) {
                json_decref(ans);
                snprintf(repo_id, idlen, "%s", repo);
                return 0;
            }
        }
    }
    if ((status < 200 || status >= 300) && status != 409) {
        json_decref(ans);
        return hub_api_error(err, errlen, what, status, msg);
    }
    // {"url": "<endpoint>/<user or org>/<name>"} (also in the 409 answer): the full id
    snprintf(repo_id, idlen, "%s", repo);
    const json_t* u = ans ? json_object_get(ans, "url") : NULL;
    if (u && json_is_string(u)) {
        const char* s = json_string_value(u);
        const char* scheme = strstr(s, "://");
        const char* path = scheme ? strchr(scheme + 3, '/') : NULL;
        // huggingface_hub's RepoUrl: what follows the endpoint (which may have a path: a proxy), else the host
        const char* ep = strstr(h->endpoint, "://");
        ep = ep ? ep + 3 : h->endpoint;
        const size_t nep = strlen(ep);
        if (scheme && nep && strncmp(scheme + 3, ep, nep) == 0 && scheme[3 + nep] == '/') path = scheme + 3 + nep;
        if (path && path[1]) snprintf(repo_id, idlen, "%s", path + 1);
    }
    json_decref(ans);
    size_t n = strlen(repo_id);
    while (n && repo_id[n - 1] == '/') repo_id[--n] = 0;
    return 0;
}

// the first bytes and the size of every file; the sha256 of every file is computed later, when its mode is known
static int read_samples(PushList* l, char* err, size_t errlen) {
    for (int i = 0; i < l->n; i++) {
        PushFile* f = &l->v[i];
        FILE* fp = fopen(f->local, "rb");
        if (!fp) return t5_set_err(err, errlen, "cannot read %s: %s", f->local, strerror(errno));
        f->nsample = fread(f->sample, 1, (size_t)T5_MIN(f->size, (int64_t)PUSH_SAMPLE), fp);  // (the recorded bytes)
        fclose(fp);
    }
    return 0;
}

// the oid the Hub gives a file of this mode: sha256 of an LFS file, the git blob id of a regular one
static int local_oid(HubConn* h, PushFile* f, char* oid, size_t len, char* err, size_t errlen) {
    if (f->lfs) {
        if (push_file_sha256(f, h->http.cancel, err, errlen)) return -1;
        snprintf(oid, len, "%s", f->sha256);
        return 0;
    }
    char* data = push_file_read(f, err, errlen);
    if (!data) return -1;
    char hex[41];
    sha1_git_blob_hex(data, (size_t)f->size, hex);
    free(data);
    snprintf(oid, len, "%s", hex);
    return 0;
}

int hub_api_preupload(HubConn* h, const char* repo_id, PushList* l, char* err, size_t errlen) {
    if (read_samples(l, err, errlen)) return -1;
    char url[2400], what[1400];
    snprintf(url, sizeof url, "%s/api/models/%s/preupload/%s", h->endpoint, repo_id, h->rev_quoted);
    snprintf(what, sizeof what, "asking the Hub how to upload the files of %s", repo_id);
    for (int start = 0; start < l->n; start += 256) {  // huggingface_hub's chunks of 256 files
        const int end = T5_MIN(l->n, start + 256);
        json_t* files = json_array();
        for (int i = start; i < end; i++) {
            char* b64 = hub_base64(l->v[i].sample, l->v[i].nsample);
            json_array_append_new(files, json_pack("{s:s, s:s, s:I}", "path", l->v[i].path, "sample", b64, "size",
                                                   (json_int_t)l->v[i].size));
            free(b64);
        }
        json_t* ans = NULL;
        if (hub_api_call(h, url, NULL, json_pack("{s:o}", "files", files), false, what, &ans, err, errlen)) return -1;
        const json_t* arr = ans ? json_object_get(ans, "files") : NULL;
        if (!json_is_array(arr)) {
            json_decref(ans);
            return t5_set_err(err, errlen, "%s: the answer has no \"files\" list (is %s a HuggingFace Hub?)", what,
                              h->endpoint);
        }
        for (int i = start; i < end; i++) {
            PushFile* f = &l->v[i];
            const json_t* info = hub_json_find(arr, "path", f->path);
            const json_t* mode = info ? json_object_get(info, "uploadMode") : NULL;
            if (!json_is_string(mode) || (strcmp(json_string_value(mode), "lfs") != 0 &&
                                          strcmp(json_string_value(mode), "regular") != 0)) {
                json_decref(ans);
                return t5_set_err(err, errlen, "%s: no upload mode for %s in the answer", what, f->path);
            }
            // an empty file cannot go to LFS storage: regular, as huggingface_hub does
            f->lfs = strcmp(json_string_value(mode), "lfs") == 0 && f->size > 0;
            f->ignore = json_is_true(json_object_get(info, "shouldIgnore"));
            const json_t* roid = json_object_get(info, "oid");
            f->unchanged = false;
            if (json_is_string(roid)) {
                char oid[80];
                if (local_oid(h, f, oid, sizeof oid, err, errlen)) {
                    json_decref(ans);
                    return -1;
                }
                f->unchanged = strcmp(oid, json_string_value(roid)) == 0;
            }
        }
        json_decref(ans);
    }
    return 0;
}

// appends one JSON line to the growing NDJSON body
static void ndjson_add(char** buf, size_t* n, size_t* cap, json_t* line) {
    char* s = json_dumps(line, JSON_COMPACT);
    json_decref(line);
    if (!s) t5_die(T5_EXIT_FAILURE, "out of memory building a commit");
    size_t ls = strlen(s);
    if (*n + ls + 2 > *cap) {
        *cap = T5_MAX(*cap * 2, *n + ls + 2);
        *buf = realloc_check(*buf, *cap);
    }
    memcpy(*buf + *n, s, ls);
    *n += ls;
    (*buf)[(*n)++] = '\n';
    (*buf)[*n] = 0;
    free(s);
}

int hub_api_commit(HubConn* h, const char* repo_id, const PushList* l, const char* summary, PushResult* res,
                   char* err, size_t errlen) {
    char* buf = NULL;
    size_t n = 0, cap = 0;
    ndjson_add(&buf, &n, &cap, json_pack("{s:s, s:{s:s, s:s}}", "key", "header", "value", "summary", summary,
                                         "description", ""));
    for (int i = 0; i < l->n; i++) {
        const PushFile* f = &l->v[i];
        if (f->ignore || f->unchanged) continue;
        if (f->lfs) {
            ndjson_add(&buf, &n, &cap, json_pack("{s:s, s:{s:s, s:s, s:s, s:I}}", "key", "lfsFile", "value", "path",
                                                 f->path, "algo", "sha256", "oid", f->sha256, "size",
                                                 (json_int_t)f->size));
            res->n_lfs++;
        } else {
            char* data = push_file_read(f, err, errlen);
            if (!data) {
                free(buf);
                return -1;
            }
            char* b64 = hub_base64(data, (size_t)f->size);
            free(data);
            ndjson_add(&buf, &n, &cap, json_pack("{s:s, s:{s:s, s:s, s:s}}", "key", "file", "value", "content", b64,
                                                 "path", f->path, "encoding", "base64"));
            free(b64);
            res->n_regular++;
        }
    }
    char url[2400], msg[512], what[1400];
    snprintf(url, sizeof url, "%s/api/models/%s/commit/%s", h->endpoint, repo_id, h->rev_quoted);
    snprintf(what, sizeof what, "committing to %s (revision %s)", repo_id, h->revision);
    json_t* ans = NULL;
    long status = 0;
    int rc = post_raw(h, url, "application/x-ndjson", buf, n, false, &ans, &status, msg, sizeof msg, err, errlen);
    free(buf);
    if (rc) return -1;
    if (status < 200 || status >= 300) {
        json_decref(ans);
        return hub_api_error(err, errlen, what, status, msg);
    }
    const json_t* oid = ans ? json_object_get(ans, "commitOid") : NULL;
    const json_t* cu = ans ? json_object_get(ans, "commitUrl") : NULL;
    snprintf(res->commit_oid, sizeof res->commit_oid, "%s", json_is_string(oid) ? json_string_value(oid) : "");
    snprintf(res->commit_url, sizeof res->commit_url, "%s", json_is_string(cu) ? json_string_value(cu) : "");
    res->committed = true;
    json_decref(ans);
    return 0;
}
