/*
 * hub_push.h: one commit of files to a Hub model repo, as huggingface_hub's upload_folder / create_commit does it
 * (hub_api.h, lfs_upload.h): preupload (the Hub says LFS or regular per file, and which files it holds unchanged),
 * the LFS objects uploaded (those the Hub does not have), then one commit. Files already on the Hub with the same
 * content are left out; when nothing changed, no commit is made (huggingface_hub: "No files have been modified since
 * last commit").
 *
 * Environment, as huggingface_hub: HF_ENDPOINT, HF_TOKEN (else the token file: hub_token_read), proxies as libcurl
 * reads them; HF_HUB_OFFLINE=1 refuses to push (one sentence, no request).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "push_files.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char* endpoint;  // NULL: $HF_ENDPOINT, else https://huggingface.co
    const char* token;     // NULL or "": $HF_TOKEN, else the token file
    const char* revision;  // the branch to commit to (NULL: "main")
    bool quiet;            // no progress lines
    const volatile int* cancel;  // NULL, or non-zero once the push is abandoned: its transfers and hashes stop
} HubPushOptions;

// Creates the model repo (exist_ok; private when asked) and writes the Hub's full id of it ("user/name") into
// repo_id. 0, or -1 + one sentence in err.
int hub_push_create_repo(const HubPushOptions* o, const char* repo, bool private_repo, char* repo_id, size_t idlen,
                         char* err, size_t errlen);
// Commits the files of l to repo_id with this message. 0 with *res filled, or -1 + one sentence in err (nothing on
// disk is touched either way).
int hub_push_files(const HubPushOptions* o, const char* repo_id, PushList* l, const char* message, PushResult* res,
                   char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
