/*
 * sha1.h: SHA-1 (FIPS 180-4), for the git object id of a small file: the Hub's preupload answer names a regular
 * (non-LFS) file already in a repo by its git blob id, sha1("blob <size>\0" + content), and a push leaves an
 * unchanged file out of its commit as huggingface_hub does. Not for security.
 */
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// sha1 of the two buffers one after the other (b may be NULL), as 40 lowercase hex characters + NUL
void sha1_hex2(const void* a, size_t na, const void* b, size_t nb, char hex[41]);
// git's blob id of data: sha1("blob <n>\0" data)
void sha1_git_blob_hex(const void* data, size_t n, char hex[41]);

#ifdef __cplusplus
}
#endif
