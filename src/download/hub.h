/*
 * hub.h: a T5 model from the HuggingFace Hub into the HF cache (hub_cache.h), through the Hub's file API
 * (<endpoint>/<repo>/resolve/<revision>/<file>), the way transformers' from_pretrained fills it:
 *
 *   config.json (required), model.safetensors, else model.safetensors.index.json and every shard it names
 *   (a repo with only pytorch_model.bin is an error naming scripts/convert_bin_to_safetensors.py; the .bin
 *   is not downloaded), then, when the repo has them: generation_config.json, spiece.model, tokenizer.json,
 *   tokenizer_config.json, special_tokens_map.json.
 *
 * Per file: HEAD (X-Repo-Commit, X-Linked-Etag / ETag, X-Linked-Size / Content-Length); if
 * snapshots/<commit>/<file> or blobs/<etag> is there nothing is fetched; else, under the blob's lock, GET
 * into blobs/<etag>.incomplete (resumed when a previous run left one), sha256 of an LFS file checked against
 * its etag, renamed to blobs/<etag>, linked from the snapshot; refs/<revision> written last.
 * A snapshot already complete for refs/<revision> (or for a commit id) is used without any request.
 *
 * Environment: HF_ENDPOINT (https://huggingface.co), HF_TOKEN (else $HF_HOME/token,
 * ~/.cache/huggingface/token), HF_HUB_OFFLINE=1 (no request: the cache or an error), proxies as libcurl
 * reads them (http.h).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// What a dry run would download (HubOptions.dry): the Hub is asked (HEAD requests only), nothing is written.
#define HUB_DRY_MAX 64
typedef struct {
    int n_files;                   // files the cache lacks (each would be downloaded)
    char files[HUB_DRY_MAX][256];  // their names
    int64_t sizes[HUB_DRY_MAX];    // their sizes in bytes (-1: the Hub did not say)
    int64_t bytes;                 // sum of the known sizes
    int n_cached;                  // files of the model already in the cache
    bool shards_unknown;           // model.safetensors.index.json is not in the cache: its shards are not listed
    char commit[128];              // the commit the revision points at on the Hub
    char repo_dir[4700];           // the cache folder the files would go to (HUB_PATHLEN + the repo folder)
} HubDryRun;

typedef struct {
    const char* revision;   // NULL: "main"
    const char* cache_dir;  // NULL: the HF rules (hub_cache_root)
    const char* endpoint;   // NULL: $HF_ENDPOINT, else https://huggingface.co
    const char* token;      // NULL: $HF_TOKEN, else the token file
    bool offline;           // true, or HF_HUB_OFFLINE=1: no network
    bool quiet;             // no progress lines
    HubDryRun* dry;         // non-NULL: a dry run: HEAD requests only, fills *dry, writes nothing (no cache
                            // folder, lock, blob, link, .no_exist marker or ref); dir gets the snapshot path
} HubOptions;

void hub_options_default(HubOptions* o);

// true when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set to 1/true/yes/on
bool hub_offline_from_env(void);

// Makes `repo_id` ("t5-small", "google/flan-t5-xl") complete in the cache and writes its snapshot folder
// into dir. 0, or -1 + err (one sentence first, then HINT lines).
int hub_fetch_model(const char* repo_id, const HubOptions* opt, char* dir, size_t dirlen, char* err, size_t errlen);

// true when `name` looks like a Hub repo id (not a path): "name" or "org/name", no "./", "../", leading
// "/" or "~", only [A-Za-z0-9._-] in each part.
bool hub_is_repo_id(const char* name);

// The token huggingface_hub would send: $HF_TOKEN, $HUGGING_FACE_HUB_TOKEN, else the file $HF_TOKEN_PATH,
// $HF_HOME/token or ~/.cache/huggingface/token (what `hf auth login` writes), trimmed; NULL when none (malloc'ed).
char* hub_token_read(void);
// The Hub's address: `given`, else $HF_ENDPOINT, else https://huggingface.co; no trailing '/'.
void hub_endpoint(const char* given, char* out, size_t len);
// Percent-encodes every byte but the unreserved ones (a revision in a URL may hold '/').
void hub_url_quote(const char* s, char* out, size_t len);

#ifdef __cplusplus
}
#endif
