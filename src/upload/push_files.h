/*
 * push_files.h: the files of one commit to the Hub: (file on disk, path in the repo) pairs, from folders walked with
 * huggingface_hub's ignore patterns, and what the Hub's preupload answer says of each (LFS or regular, ignored,
 * already there with the same content).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PUSH_SAMPLE 512  // the bytes of a file the preupload request shows the Hub (huggingface_hub's UploadInfo)

typedef struct {
    char* local;                     // the file on disk
    char* path;                      // its path in the repo ('/'-separated)
    int64_t size;
    unsigned char sample[PUSH_SAMPLE];  // its first bytes
    size_t nsample;
    char sha256[65];                 // of the content (LFS oid); "" until hashed
    // the Hub's preupload answer
    bool lfs;                        // uploadMode "lfs" (an empty file is always regular, as huggingface_hub)
    bool ignore;                     // shouldIgnore (the repo's .gitignore)
    bool unchanged;                  // the repo holds this path with the same content: left out of the commit
} PushFile;

typedef struct {
    PushFile* v;
    int n, cap;
} PushList;

// What a push did (hub_push_files)
typedef struct {
    int n_files;          // files considered
    int n_unchanged;      // left out: already on the Hub with the same content
    int n_ignored;        // left out: the repo's .gitignore
    int n_regular;        // committed inline (base64 in the commit)
    int n_lfs;            // committed as LFS pointers
    int n_lfs_uploaded;   // LFS objects sent (the others the Hub had already)
    int64_t lfs_bytes_uploaded;
    bool committed;       // false: nothing had changed, no commit was made
    char commit_oid[64];  // the new commit (committed)
    char commit_url[512];
} PushResult;

// huggingface_hub's ignore rule (filter_repo_objects): fnmatch with '*' crossing '/'; a pattern ending in '/' means
// everything under it. `patterns` is NULL-terminated (NULL: none).
bool push_path_ignored(const char* path, const char* const* patterns);

// Adds one file as `path` in the repo (an entry with the same path is replaced: the last one wins). 0 or -1 + err.
int push_list_add(PushList* l, const char* local, const char* path, char* err, size_t errlen);
// Adds every file under folder (recursively, sorted, symlinks followed) as prefix/<relative path> (prefix NULL or
// "": the repo's root), leaving out what `ignore` or huggingface_hub's defaults (.git, .cache/huggingface) match.
int push_list_add_folder(PushList* l, const char* folder, const char* prefix, const char* const* ignore, char* err,
                         size_t errlen);
void push_list_free(PushList* l);

// A file's content as the list recorded it: its first f->size bytes (a log appended since the list was made, as the
// trainer's logs are while a background push reads them, is sent as it was then; one that shrank or vanished is an
// error). push_file_sha256 fills f->sha256 once (the LFS oid); cancel (NULL: none): a non-zero *cancel stops the
// hash of a large file within 64 KiB. push_file_read: malloc'ed, NUL-terminated. 0 / the data, or -1 / NULL + err.
int push_file_sha256(PushFile* f, const volatile int* cancel, char* err, size_t errlen);
char* push_file_read(const PushFile* f, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
