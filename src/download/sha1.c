/*
 * sha1.c: SHA-1 (FIPS 180-4 section 6.1), see sha1.h.
 */
#include "sha1.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static inline uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void block(uint32_t h[5], const uint8_t p[64]) {
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) f = (b & c) | (~b & d), k = 0x5a827999;
        else if (i < 40) f = b ^ c ^ d, k = 0x6ed9eba1;
        else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8f1bbcdc;
        else f = b ^ c ^ d, k = 0xca62c1d6;
        uint32_t t = rotl(a, 5) + f + e + k + w[i];
        e = d; d = c; c = rotl(b, 30); b = a; a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
}

typedef struct {
    uint32_t h[5];
    uint64_t n;
    uint8_t buf[64];
    size_t nbuf;
} Sha1;

static void update(Sha1* s, const uint8_t* p, size_t n) {
    s->n += n;
    while (n) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf == 64) {
            block(s->h, s->buf);
            s->nbuf = 0;
        }
    }
}

void sha1_hex2(const void* a, size_t na, const void* b, size_t nb, char hex[41]) {
    Sha1 s = {{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0}, 0, {0}, 0};
    update(&s, (const uint8_t*)a, na);
    if (b) update(&s, (const uint8_t*)b, nb);
    const uint64_t bits = s.n * 8;
    const uint8_t one = 0x80, zero = 0;
    update(&s, &one, 1);
    while (s.nbuf != 56) update(&s, &zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
    update(&s, len, 8);
    for (int i = 0; i < 5; i++) snprintf(hex + 8 * i, 9, "%08x", s.h[i]);
}

void sha1_git_blob_hex(const void* data, size_t n, char hex[41]) {
    char head[32];
    int nh = snprintf(head, sizeof head, "blob %zu", n);
    // the header's NUL is part of the object
    sha1_hex2(head, (size_t)nh + 1, data, n, hex);
}
