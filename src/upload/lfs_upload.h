/*
 * lfs_upload.h: the LFS objects of a commit to the Hub's storage, as huggingface_hub's lfs.py does it:
 *
 *   POST <endpoint>/<repo>.git/info/lfs/objects/batch  (application/vnd.git-lfs+json)
 *        {"operation": "upload", "transfers": ["basic", "multipart"], "objects": [{"oid", "size"}],
 *         "hash_algo": "sha256", "ref": {"name": <revision>}}
 *     -> {"objects": [{"oid", "size", "actions": {"upload": {"href", "header"}, "verify": {"href", "header"}}}]}
 *        an object without "actions" is on the Hub already: not sent again (a resumed push);
 *        one with "error": {"code", "message"} fails the push
 *   basic:     PUT href with the file (no token: a pre-signed storage URL)
 *   multipart: header {"chunk_size": N, "1": url, "2": url, ...}: PUT each N-byte slice to its url, keep each answer's
 *              ETag, then POST href {"oid", "parts": [{"partNumber", "etag"}]}
 *   verify:    POST verify.href {"oid", "size"} with the token
 *
 * Sequential (one object at a time): a training run's push is a few files, one or a few of them large.
 */
#pragma once
#include <stddef.h>

#include "hub_api.h"
#include "push_files.h"

#ifdef __cplusplus
extern "C" {
#endif

// Uploads every LFS file of l that is neither ignored nor unchanged (computing its sha256 when not known yet).
// Counts the objects and bytes sent into res. 0, or -1 + err.
int lfs_upload_files(HubConn* h, const char* repo_id, PushList* l, PushResult* res, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
