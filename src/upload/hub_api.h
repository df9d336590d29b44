/*
 * hub_api.h: the Hub's JSON endpoints a push uses, as huggingface_hub calls them (hf_api.py, _commit_api.py):
 *
 *   POST /api/repos/create                     {"name", "organization", "visibility": "private"} -> {"url"};
 *                                              409: the repo exists (fine: exist_ok, as HF's Trainer)
 *   POST /api/models/<repo>/preupload/<rev>    {"files": [{"path", "sample": base64 of the first 512 bytes, "size"}]}
 *                                              -> {"files": [{"path", "uploadMode": "lfs"|"regular", "shouldIgnore",
 *                                              "oid": the repo's current git blob id / LFS sha256, or null}]}
 *   POST /api/models/<repo>/commit/<rev>       NDJSON: {"key": "header", "value": {"summary", "description"}},
 *                                              then per file {"key": "file", "value": {"path", "content": base64,
 *                                              "encoding": "base64"}} or {"key": "lfsFile", "value": {"path",
 *                                              "algo": "sha256", "oid", "size"}} -> {"commitOid", "commitUrl"}
 *
 * The token goes as "Authorization: Bearer"; every request goes through src/download/http.h (libcurl loaded on first
 * use; transport errors, 429 and 5xx retried with back-off). Errors: -1 + one sentence (the Hub's status and
 * message, and what to do for 401/403/404).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "../download/http.h"
#include "push_files.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char endpoint[1024];  // no trailing '/'
    char* token;          // owned
    char revision[256];   // the branch to commit to ("main")
    char rev_quoted[768]; // percent-encoded for the URLs
    HttpOptions http;
} HubConn;

// endpoint NULL: $HF_ENDPOINT or https://huggingface.co; token NULL or "": hub_token_read(); revision NULL: "main".
// -1 + err when there is no token (a push needs one with write access).
int hub_conn_init(HubConn* h, const char* endpoint, const char* token, const char* revision, bool quiet, char* err,
                  size_t errlen);
void hub_conn_free(HubConn* h);

// Creates model repo `repo` ("name" under the token's user, or "org/name"); an existing one is fine. Writes the
// full id the Hub answers ("user/name") into repo_id.
int hub_api_create_repo(HubConn* h, const char* repo, bool private_repo, char* repo_id, size_t idlen, char* err,
                        size_t errlen);
// Asks the Hub how each file goes (LFS or regular), whether it is ignored, and whether the repo holds it unchanged
// (for that, the sha256 of LFS files and the git blob id of regular ones are computed here).
int hub_api_preupload(HubConn* h, const char* repo_id, PushList* l, char* err, size_t errlen);
// The commit of every file not ignored nor unchanged (regular ones inline, LFS ones by oid: upload them first).
int hub_api_commit(HubConn* h, const char* repo_id, const PushList* l, const char* summary, PushResult* res,
                   char* err, size_t errlen);

// POSTs a JSON body (NULL: none; consumed) to url with this connection's token (no_token: without it, for the
// storage URLs) and wants a 2xx answer: 0 with *answer (NULL when not JSON), or -1 + err: no answer, or
// hub_api_error's sentence about `what`. Shared by the LFS steps.
int hub_api_call(HubConn* h, const char* url, const char* content_type, json_t* body, bool no_token, const char* what,
                 json_t** answer, char* err, size_t errlen);
// The error sentence for a failed call: "<what>: the Hub answered HTTP <status>: <message>" + a hint for 401/403/404.
int hub_api_error(char* err, size_t errlen, const char* what, long status, const char* msg);

// the object of array arr whose string member `key` equals value (the Hub's answers list files and objects), or NULL
const json_t* hub_json_find(const json_t* arr, const char* key, const char* value);

// base64 (RFC 4648, padded) of n bytes, NUL-terminated, malloc'ed
char* hub_base64(const void* data, size_t n);

#ifdef __cplusplus
}
#endif
