/*
 * tb_record.c: TFRecord framing and CRC-32C for TensorBoard event files (contract in tb_record.h).
 */
#include "tb_record.h"

#include "../base/crc32c.h"

#include <stdlib.h>
#include <string.h>

uint32_t tb_crc32c(uint32_t crc, const void* data, size_t n) { return t5_crc32c(crc, data, n); }

uint32_t tb_masked_crc32c(const void* data, size_t n) {
    uint32_t c = tb_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le(unsigned char* p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_le(const unsigned char* p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

void tb_record_frame(unsigned char* out, const void* data, size_t n) {
    put_le(out, (uint64_t)n, 8);
    put_le(out + 8, tb_masked_crc32c(out, 8), 4);
    if (n) memcpy(out + 12, data, n);
    put_le(out + 12 + n, tb_masked_crc32c(data, n), 4);
}

int tb_record_read(FILE* f, unsigned char** data, size_t* n, size_t max_len, char* err, size_t errcap) {
    *data = NULL;
    *n = 0;
    unsigned char hdr[12];
    size_t got = fread(hdr, 1, sizeof hdr, f);
    if (got == 0 && feof(f)) return 0;
    if (got != sizeof hdr) {
        snprintf(err, errcap, "truncated record header (%zu of 12 bytes)", got);
        return -1;
    }
    uint64_t len = get_le(hdr, 8);
    uint32_t stored = (uint32_t)get_le(hdr + 8, 4), want = tb_masked_crc32c(hdr, 8);
    if (stored != want) {
        snprintf(err, errcap, "length CRC mismatch (stored %08x, computed %08x)", stored, want);
        return -1;
    }
    if (len > max_len) {
        snprintf(err, errcap, "record length %llu over the limit %zu", (unsigned long long)len, max_len);
        return -1;
    }
    unsigned char* buf = (unsigned char*)malloc(len + 4 > 0 ? len + 4 : 1);
    if (!buf) {
        snprintf(err, errcap, "out of memory for a %llu-byte record", (unsigned long long)len);
        return -1;
    }
    got = fread(buf, 1, len + 4, f);
    if (got != len + 4) {
        snprintf(err, errcap, "truncated record: %zu of %llu bytes", got, (unsigned long long)len + 4);
        free(buf);
        return -1;
    }
    stored = (uint32_t)get_le(buf + len, 4);
    want = tb_masked_crc32c(buf, len);
    if (stored != want) {
        snprintf(err, errcap, "data CRC mismatch (stored %08x, computed %08x)", stored, want);
        free(buf);
        return -1;
    }
    *data = buf;
    *n = (size_t)len;
    return 1;
}
