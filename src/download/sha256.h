/*
 * sha256.h: SHA-256 (FIPS 180-4), streaming, for verifying downloads against the Hub's LFS etags and the
 * data sources' recorded checksums. Written here so the downloader needs no crypto library.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t h[8];
    uint64_t nbytes;      // bytes hashed so far
    uint8_t buf[64];      // partial block
    size_t nbuf;
} Sha256;

void sha256_init(Sha256* s);
void sha256_update(Sha256* s, const void* data, size_t n);
// Writes the digest as 64 lowercase hex characters + NUL into hex (>= 65 bytes).
void sha256_final_hex(Sha256* s, char hex[65]);
// Hashes the whole file at path into hex; 0, or -1 with errno set (the file could not be read).
int sha256_file_hex(const char* path, char hex[65]);

#ifdef __cplusplus
}
#endif
