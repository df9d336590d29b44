/*
 * hub_cache.h: the HuggingFace hub cache layout, shared with huggingface_hub / transformers, so a model
 * fetched by either is used by the other:
 *
 *   <root>/models--<org>--<name>/
 *       blobs/<etag>                    file contents, named by the Hub's etag (sha256 for LFS files,
 *                                       git sha1 for small ones); <etag>.incomplete while downloading
 *       snapshots/<commit>/<filename>   relative symlink to ../../blobs/<etag>
 *       refs/<revision>                 the commit a branch or tag pointed at ("main" -> 40 hex digits)
 *       .no_exist/<commit>/<filename>   empty: the Hub said the file does not exist at that commit
 *   <root>/.locks/models--<org>--<name>/<etag>.lock   flock()ed by the process downloading that blob
 *                                       (the same lock file and kind huggingface_hub's filelock takes)
 *
 * Root (the first set): --cache_dir, $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,
 * $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
 * Every write is atomic (temp name + rename), so a reader never sees half a file or half a ref.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HUB_PATHLEN 4096

// The root to read and write (see above); cache_dir NULL/"" uses the environment. 0, or -1 + err.
int hub_cache_root(const char* cache_dir, char* out, size_t len, char* err, size_t errlen);

// "google/flan-t5-xl" -> "models--google--flan-t5-xl" (kind "model"; "dataset" -> "datasets--...").
void hub_cache_repo_folder(const char* kind, const char* repo_id, char* out, size_t len);

// true when s is a 40-hex-digit commit id
bool hub_is_commit(const char* s);

// The commit refs/<revision> names (or revision itself when it is a commit id). 0, or -1 when unknown.
int hub_cache_read_ref(const char* repo_dir, const char* revision, char* commit, size_t len);
// Writes refs/<revision> = commit atomically (nothing written when revision is the commit itself).
int hub_cache_write_ref(const char* repo_dir, const char* revision, const char* commit, char* err, size_t errlen);

// Paths inside a repo folder (out >= HUB_PATHLEN).
void hub_cache_snapshot_path(const char* repo_dir, const char* commit, const char* filename, char* out, size_t len);
void hub_cache_blob_path(const char* repo_dir, const char* etag, char* out, size_t len);

// snapshots/<commit>/<filename> -> relative link to blobs/<etag>, replacing any previous link atomically.
int hub_cache_link(const char* repo_dir, const char* commit, const char* filename, const char* etag, char* err,
                   size_t errlen);

// .no_exist/<commit>/<filename> markers
int hub_cache_mark_missing(const char* repo_dir, const char* commit, const char* filename);
bool hub_cache_is_missing(const char* repo_dir, const char* commit, const char* filename);

// Exclusive lock on <root>/.locks/<folder>/<etag>.lock, blocking; prints one "waiting" line when another
// process holds it (quiet: no line). 0 with *fd set, or -1 + err.
int hub_cache_lock(const char* root, const char* folder, const char* etag, bool quiet, int* fd, char* err,
                   size_t errlen);
void hub_cache_unlock(int fd);

// Moves tmp to path atomically (rename), creating path's folder. 0, or -1 + err.
int hub_cache_place(const char* tmp, const char* path, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
