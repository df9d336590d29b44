/*
 * hub_cache.c: the HuggingFace hub cache layout, refs, snapshots, blobs and locks (see hub_cache.h).
 */
#include "hub_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/common.h"

int hub_cache_root(const char* cache_dir, char* out, size_t len, char* err, size_t errlen) {
    const char* e;
    if (cache_dir && *cache_dir) snprintf(out, len, "%s", cache_dir);
    else if ((e = getenv("HF_HUB_CACHE")) && *e) snprintf(out, len, "%s", e);
    else if ((e = getenv("HUGGINGFACE_HUB_CACHE")) && *e) snprintf(out, len, "%s", e);
    else if ((e = getenv("HF_HOME")) && *e) snprintf(out, len, "%s/hub", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e) snprintf(out, len, "%s/huggingface/hub", e);
    else if ((e = getenv("HOME")) && *e) snprintf(out, len, "%s/.cache/huggingface/hub", e);
    else return t5_set_err(err, errlen, "no HuggingFace cache folder: HF_HUB_CACHE, HF_HOME and HOME are all unset "
                           "(HINT: pass --cache_dir DIR or set HF_HOME)");
    return 0;
}

void hub_cache_repo_folder(const char* kind, const char* repo_id, char* out, size_t len) {
    size_t n = (size_t)snprintf(out, len, "%ss--", kind && *kind ? kind : "model");
    for (const char* p = repo_id; *p && n + 3 < len; p++) {
        if (*p == '/') {
            out[n++] = '-';
            out[n++] = '-';
        } else {
            out[n++] = *p;
        }
    }
    out[n] = 0;
}

bool hub_is_commit(const char* s) {
    if (!s || strlen(s) != 40) return false;
    for (const char* p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

int hub_cache_read_ref(const char* repo_dir, const char* revision, char* commit, size_t len) {
    if (hub_is_commit(revision)) {
        snprintf(commit, len, "%s", revision);
        return 0;
    }
    char path[HUB_PATHLEN];
    snprintf(path, sizeof path, "%s/refs/%s", repo_dir, revision);
    size_t n = 0;
    char* s = t5_read_file(path, &n);
    if (!s) return -1;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = 0;
    int rc = n > 0 ? 0 : -1;
    if (rc == 0) snprintf(commit, len, "%s", s);
    free(s);
    return rc;
}

static int mkdir_parent(const char* path) {
    char* d = strdup_check(path);
    char* slash = strrchr(d, '/');
    int rc = 0;
    if (slash && slash != d) {
        *slash = 0;
        rc = t5_mkdir_p(d);
    }
    free(d);
    return rc;
}

// writes text to path through a unique temp name and rename
static int write_atomic(const char* path, const char* text, char* err, size_t errlen) {
    if (mkdir_parent(path) != 0) return t5_set_err(err, errlen, "cannot create the folder of %s: %s", path, strerror(errno));
    char tmp[HUB_PATHLEN + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) return t5_set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return t5_set_err(err, errlen, "cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

int hub_cache_write_ref(const char* repo_dir, const char* revision, const char* commit, char* err, size_t errlen) {
    if (!revision || strcmp(revision, commit) == 0) return 0;
    char path[HUB_PATHLEN];
    snprintf(path, sizeof path, "%s/refs/%s", repo_dir, revision);
    // huggingface_hub writes the bare commit without a newline
    return write_atomic(path, commit, err, errlen);
}

void hub_cache_snapshot_path(const char* repo_dir, const char* commit, const char* filename, char* out, size_t len) {
    snprintf(out, len, "%s/snapshots/%s/%s", repo_dir, commit, filename);
}

void hub_cache_blob_path(const char* repo_dir, const char* etag, char* out, size_t len) {
    snprintf(out, len, "%s/blobs/%s", repo_dir, etag);
}

int hub_cache_link(const char* repo_dir, const char* commit, const char* filename, const char* etag, char* err,
                   size_t errlen) {
    char link[HUB_PATHLEN], target[HUB_PATHLEN], tmp[HUB_PATHLEN + 64];
    hub_cache_snapshot_path(repo_dir, commit, filename, link, sizeof link);
    if (mkdir_parent(link) != 0)
        return t5_set_err(err, errlen, "cannot create the folder of %s: %s", link, strerror(errno));
    // snapshots/<commit>/<a/b/file> -> ../../(../ per folder in filename)blobs/<etag>
    size_t n = 0;
    n += (size_t)snprintf(target + n, sizeof target - n, "../../");
    for (const char* p = filename; *p; p++)
        if (*p == '/') n += (size_t)snprintf(target + n, sizeof target - n, "../");
    snprintf(target + n, sizeof target - n, "blobs/%s", etag);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", link, (int)getpid());
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, link) != 0) {
        int e = errno;
        unlink(tmp);
        return t5_set_err(err, errlen, "cannot link %s -> %s: %s", link, target, strerror(e));
    }
    return 0;
}

int hub_cache_mark_missing(const char* repo_dir, const char* commit, const char* filename) {
    char path[HUB_PATHLEN];
    snprintf(path, sizeof path, "%s/.no_exist/%s/%s", repo_dir, commit, filename);
    return write_atomic(path, "", NULL, 0);
}

bool hub_cache_is_missing(const char* repo_dir, const char* commit, const char* filename) {
    char path[HUB_PATHLEN];
    snprintf(path, sizeof path, "%s/.no_exist/%s/%s", repo_dir, commit, filename);
    return t5_path_exists(path);
}

int hub_cache_lock(const char* root, const char* folder, const char* etag, bool quiet, int* fd, char* err,
                   size_t errlen) {
    char path[HUB_PATHLEN];
    snprintf(path, sizeof path, "%s/.locks/%s/%s.lock", root, folder, etag);
    if (mkdir_parent(path) != 0)
        return t5_set_err(err, errlen, "cannot create the lock folder of %s: %s", path, strerror(errno));
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0664);
    if (f < 0) return t5_set_err(err, errlen, "cannot open the lock %s: %s", path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {
            int e = errno;
            close(f);
            return t5_set_err(err, errlen, "cannot lock %s: %s", path, strerror(e));
        }
        if (!quiet) fprintf(stderr, "waiting for another process that is downloading the same file (%s)\n", path);
        while (flock(f, LOCK_EX) != 0) {
            if (errno != EINTR) {
                int e = errno;
                close(f);
                return t5_set_err(err, errlen, "cannot lock %s: %s", path, strerror(e));
            }
        }
    }
    *fd = f;
    return 0;
}

void hub_cache_unlock(int fd) {
    if (fd < 0) return;
    flock(fd, LOCK_UN);
    close(fd);
}

int hub_cache_place(const char* tmp, const char* path, char* err, size_t errlen) {
    if (mkdir_parent(path) != 0) return t5_set_err(err, errlen, "cannot create the folder of %s: %s", path, strerror(errno));
    if (rename(tmp, path) != 0) return t5_set_err(err, errlen, "cannot move %s to %s: %s", tmp, path, strerror(errno));
    return 0;
}
