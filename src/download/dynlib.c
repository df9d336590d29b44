/*
 * dynlib.c: dlopen of libcurl and libarchive on first use (see dynlib.h for why).
 */
#include "dynlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"

int dynlib_have_curl(void) {
#ifdef T5_HAVE_CURL
    return 1;
#else
    return 0;
#endif
}

int dynlib_have_archive(void) {
#ifdef T5_HAVE_ARCHIVE
    return 1;
#else
    return 0;
#endif
}

#if defined(T5_HAVE_CURL) || defined(T5_HAVE_ARCHIVE)
// dlopen the first name that loads; NULL and the last dlerror in why
static void* open_first(const char* env, const char* const* names, char* why, size_t whylen) {
    const char* e = getenv(env);
    void* h = NULL;
    why[0] = 0;
    if (e && *e) {
        if ((h = dlopen(e, RTLD_NOW | RTLD_LOCAL))) return h;
        snprintf(why, whylen, "%s", dlerror());
        return NULL;
    }
    for (const char* const* n = names; *n; n++) {
        if ((h = dlopen(*n, RTLD_NOW | RTLD_LOCAL))) return h;
        snprintf(why, whylen, "%s", dlerror());
    }
    return NULL;
}
#endif

#define LOAD_SYM(h, api, field, sym, missing)                              \
    do {                                                                   \
        *(void**)(&(api).field) = dlsym(h, sym);                           \
        if (!(api).field && !(missing)) (missing) = sym;                   \
    } while (0)

#ifdef T5_HAVE_CURL
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CurlApi curl_api;
static int curl_ok;
static char curl_err[1024];

static void curl_load(void) {
    static const char* const names[] = {"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so", NULL};
    char why[512];
    void* h = open_first("T5TRAIN_LIBCURL", names, why, sizeof why);
    if (!h) {
        snprintf(curl_err, sizeof curl_err,
                 "downloads need libcurl, which could not be loaded (%s). HINT: apt-get install libcurl4 "
                 "(or set T5TRAIN_LIBCURL=/path/to/libcurl.so.4), or pass a local directory / HF_HUB_OFFLINE=1",
                 why);
        return;
    }
    const char* missing = NULL;
    LOAD_SYM(h, curl_api, global_init, "curl_global_init", missing);
    LOAD_SYM(h, curl_api, easy_init, "curl_easy_init", missing);
    LOAD_SYM(h, curl_api, easy_setopt, "curl_easy_setopt", missing);
    LOAD_SYM(h, curl_api, easy_perform, "curl_easy_perform", missing);
    LOAD_SYM(h, curl_api, easy_getinfo, "curl_easy_getinfo", missing);
    LOAD_SYM(h, curl_api, easy_cleanup, "curl_easy_cleanup", missing);
    LOAD_SYM(h, curl_api, easy_strerror, "curl_easy_strerror", missing);
    LOAD_SYM(h, curl_api, slist_append, "curl_slist_append", missing);
    LOAD_SYM(h, curl_api, slist_free_all, "curl_slist_free_all", missing);
    LOAD_SYM(h, curl_api, version, "curl_version", missing);
    if (missing) {
        snprintf(curl_err, sizeof curl_err, "the loaded libcurl lacks %s (too old?)", missing);
        return;
    }
    if (curl_api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(curl_err, sizeof curl_err, "curl_global_init failed");
        return;
    }
    curl_ok = 1;
}

const CurlApi* dynlib_curl(char* err, size_t errlen) {
    pthread_once(&curl_once, curl_load);
    if (curl_ok) return &curl_api;
    t5_set_err(err, errlen, "%s", curl_err);
    return NULL;
}
#endif

#ifdef T5_HAVE_ARCHIVE
static pthread_once_t archive_once = PTHREAD_ONCE_INIT;
static ArchiveApi archive_api;
static int archive_ok;
static char archive_err[1024];

static void archive_load(void) {
    static const char* const names[] = {"libarchive.so.13", "libarchive.so", NULL};
    char why[512];
    void* h = open_first("T5TRAIN_LIBARCHIVE", names, why, sizeof why);
    if (!h) {
        snprintf(archive_err, sizeof archive_err,
                 "extracting the dataset archives needs libarchive, which could not be loaded (%s). "
                 "HINT: apt-get install libarchive13 (or set T5TRAIN_LIBARCHIVE=/path/to/libarchive.so.13)",
                 why);
        return;
    }
    const char* missing = NULL;
    LOAD_SYM(h, archive_api, read_new, "archive_read_new", missing);
    LOAD_SYM(h, archive_api, read_support_filter_all, "archive_read_support_filter_all", missing);
    LOAD_SYM(h, archive_api, read_support_format_all, "archive_read_support_format_all", missing);
    LOAD_SYM(h, archive_api, read_support_format_raw, "archive_read_support_format_raw", missing);
    LOAD_SYM(h, archive_api, read_open_filename, "archive_read_open_filename", missing);
    LOAD_SYM(h, archive_api, read_next_header, "archive_read_next_header", missing);
    LOAD_SYM(h, archive_api, read_data, "archive_read_data", missing);
    LOAD_SYM(h, archive_api, read_free, "archive_read_free", missing);
    LOAD_SYM(h, archive_api, error_string, "archive_error_string", missing);
    LOAD_SYM(h, archive_api, entry_pathname, "archive_entry_pathname", missing);
    LOAD_SYM(h, archive_api, filter_count, "archive_filter_count", missing);
    if (missing) {
        snprintf(archive_err, sizeof archive_err, "the loaded libarchive lacks %s (too old?)", missing);
        return;
    }
    archive_ok = 1;
}

const ArchiveApi* dynlib_archive(char* err, size_t errlen) {
    pthread_once(&archive_once, archive_load);
    if (archive_ok) return &archive_api;
    t5_set_err(err, errlen, "%s", archive_err);
    return NULL;
}
#endif
