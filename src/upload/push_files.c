/*
 * push_files.c: the files of a commit (see push_files.h).
 */
#include "push_files.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/common.h"
#include "../download/sha256.h"

// huggingface_hub's DEFAULT_IGNORE_PATTERNS (never pushed, whatever the caller asks)
static const char* const DEFAULT_IGNORE[] = {".git", ".git/*", "*/.git", "**/.git/**", ".cache/huggingface",
                                             ".cache/huggingface/*", "*/.cache/huggingface",
                                             "**/.cache/huggingface/**", NULL};

bool push_path_ignored(const char* path, const char* const* patterns) {
    for (const char* const* p = patterns; p && *p; p++) {
        char pat[1024];
        size_t n = strlen(*p);
        snprintf(pat, sizeof pat, "%s%s", *p, n && (*p)[n - 1] == '/' ? "*" : "");
        if (fnmatch(pat, path, 0) == 0) return true;
    }
    return false;
}

int push_list_add(PushList* l, const char* local, const char* path, char* err, size_t errlen) {
    struct stat st;
    if (stat(local, &st) != 0 || !S_ISREG(st.st_mode))
        return t5_set_err(err, errlen, "cannot push %s: %s", local, errno ? strerror(errno) : "not a file");
    PushFile* f = NULL;
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i].path, path) == 0) {
            f = &l->v[i];
            free(f->local);
            free(f->path);
            break;
        }
    if (!f) {
        if (l->n == l->cap) {
            l->cap = l->cap ? 2 * l->cap : 16;
            l->v = realloc_check(l->v, (size_t)l->cap * sizeof *l->v);
        }
        f = &l->v[l->n++];
    }
    memset(f, 0, sizeof *f);
    f->local = strdup_check(local);
    f->path = strdup_check(path);
    f->size = (int64_t)st.st_size;
    return 0;
}

static int cmp_names(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

// rel: the path below the walked folder ("" at its top)
static int walk(PushList* l, const char* dir, const char* rel, const char* prefix, const char* const* ignore,
                char* err, size_t errlen) {
    DIR* d = opendir(dir);
    if (!d) return t5_set_err(err, errlen, "cannot read folder %s: %s", dir, strerror(errno));
    char** names = NULL;
    int n = 0, cap = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            names = realloc_check(names, (size_t)cap * sizeof *names);
        }
        names[n++] = strdup_check(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char* full = t5_path_join(dir, names[i]);
        size_t lr = strlen(rel) + strlen(names[i]) + 2;
        char* r = malloc_check(lr);
        snprintf(r, lr, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
        struct stat st;
        if (stat(full, &st) != 0) {
            rc = t5_set_err(err, errlen, "cannot read %s: %s", full, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            if (!push_path_ignored(r, DEFAULT_IGNORE)) rc = walk(l, full, r, prefix, ignore, err, errlen);
        } else if (S_ISREG(st.st_mode) && !push_path_ignored(r, DEFAULT_IGNORE) && !push_path_ignored(r, ignore)) {
            size_t lp = strlen(r) + (prefix ? strlen(prefix) : 0) + 2;
            char* p = malloc_check(lp);
            snprintf(p, lp, "%s%s%s", prefix && *prefix ? prefix : "", prefix && *prefix ? "/" : "", r);
            rc = push_list_add(l, full, p, err, errlen);
            free(p);
        }
        free(r);
        free(full);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int push_list_add_folder(PushList* l, const char* folder, const char* prefix, const char* const* ignore, char* err,
                         size_t errlen) {
    if (!t5_is_dir(folder)) return t5_set_err(err, errlen, "cannot push %s: not a folder", folder);
    return walk(l, folder, "", prefix, ignore, err, errlen);
}

void push_list_free(PushList* l) {
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].local);
        free(l->v[i].path);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int changed_err(const PushFile* f, int64_t got, char* err, size_t errlen) {
    if (got < 0) return t5_set_err(err, errlen, "cannot read %s: %s", f->local, strerror(errno));
    return t5_set_err(err, errlen, "cannot read %s: it has %lld bytes, %lld when the push began (it changed while "
                      "being pushed)", f->local, (long long)got, (long long)f->size);
}

int push_file_sha256(PushFile* f, const volatile int* cancel, char* err, size_t errlen) {
    if (f->sha256[0]) return 0;
    FILE* fp = fopen(f->local, "rb");
    if (!fp) return changed_err(f, -1, err, errlen);
    Sha256 s;
    sha256_init(&s);
    static __thread uint8_t buf[1 << 16];  // (each pushing thread its own)
    int64_t left = f->size;
    size_t n = 0;
    while (left > 0 && !(cancel && *cancel) && (n = fread(buf, 1, (size_t)T5_MIN(left, (int64_t)sizeof buf), fp)) > 0) {
        sha256_update(&s, buf, n);
        left -= (int64_t)n;
    }
    const int bad = ferror(fp);
    fclose(fp);
    if (cancel && *cancel) return t5_set_err(err, errlen, "cancelled while hashing %s", f->local);
    if (bad) return changed_err(f, -1, err, errlen);
    if (left > 0) return changed_err(f, f->size - left, err, errlen);
    sha256_final_hex(&s, f->sha256);
    return 0;
}

char* push_file_read(const PushFile* f, char* err, size_t errlen) {
    FILE* fp = fopen(f->local, "rb");
    if (!fp) {
        changed_err(f, -1, err, errlen);
        return NULL;
    }
    char* data = malloc_check((size_t)f->size + 1);
    const size_t got = fread(data, 1, (size_t)f->size, fp);
    fclose(fp);
    data[got] = 0;
    if ((int64_t)got != f->size) {
        changed_err(f, (int64_t)got, err, errlen);
        free(data);
        return NULL;
    }
    return data;
}
