/*
 * dynlib.h: libcurl and libarchive, loaded with dlopen the first time a download or an extraction is
 * needed, never at start-up.
 *
 * Why dlopen: libcurl4-openssl pulls a long chain of shared libraries (OpenSSL, nghttp2, libssh, LDAP,
 * Kerberos, libpsl, librtmp, ...), and libarchive its compressors; t5train also runs on GPU machines where
 * only the libraries we carry exist. Linked with dlopen, the binary starts anywhere; only the download
 * paths need libcurl.so.4 / libarchive.so.13, and when they are missing the error says which package to
 * install. The headers (libcurl4-openssl-dev, libarchive-dev) are needed at build time only, for the types
 * and constants; without them the Makefile leaves T5_HAVE_CURL / T5_HAVE_ARCHIVE undefined and the loaders
 * answer "built without ...".
 *
 * Library names tried: $T5TRAIN_LIBCURL, libcurl.so.4, libcurl-gnutls.so.4, libcurl.so;
 *                      $T5TRAIN_LIBARCHIVE, libarchive.so.13, libarchive.so.
 */
#pragma once
#include <stddef.h>

#ifdef T5_HAVE_CURL
#include <curl/curl.h>
#endif
#ifdef T5_HAVE_ARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#ifdef T5_HAVE_CURL
typedef struct {
    CURLcode (*global_init)(long flags);
    CURL* (*easy_init)(void);
    CURLcode (*easy_setopt)(CURL* c, CURLoption opt, ...);
    CURLcode (*easy_perform)(CURL* c);
    CURLcode (*easy_getinfo)(CURL* c, CURLINFO info, ...);
    void (*easy_cleanup)(CURL* c);
    const char* (*easy_strerror)(CURLcode code);
    struct curl_slist* (*slist_append)(struct curl_slist* l, const char* s);
    void (*slist_free_all)(struct curl_slist* l);
    char* (*version)(void);
} CurlApi;
#endif

#ifdef T5_HAVE_ARCHIVE
typedef struct {
    struct archive* (*read_new)(void);
    int (*read_support_filter_all)(struct archive* a);
    int (*read_support_format_all)(struct archive* a);
    int (*read_support_format_raw)(struct archive* a);
    int (*read_open_filename)(struct archive* a, const char* path, size_t block);
    int (*read_next_header)(struct archive* a, struct archive_entry** e);
    la_ssize_t (*read_data)(struct archive* a, void* buf, size_t n);
    int (*read_free)(struct archive* a);
    const char* (*error_string)(struct archive* a);
    const char* (*entry_pathname)(struct archive_entry* e);
    int (*filter_count)(struct archive* a);
} ArchiveApi;
#endif

// The loaded API (initialised once, thread-safe), or NULL with one sentence in err.
#ifdef T5_HAVE_CURL
const CurlApi* dynlib_curl(char* err, size_t errlen);
#endif
#ifdef T5_HAVE_ARCHIVE
const ArchiveApi* dynlib_archive(char* err, size_t errlen);
#endif

// true when this binary was built with the libcurl / libarchive headers (download support compiled in).
int dynlib_have_curl(void);
int dynlib_have_archive(void);

#ifdef __cplusplus
}
#endif
