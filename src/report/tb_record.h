/*
 * tb_record.h: the record framing of TensorBoard event files (TFRecord), no protobuf involved.
 *
 * A file is a sequence of records, each
 *     uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
 * with masked_crc(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 over CRC-32C (Castagnoli, reflected 0x82F63B78),
 * as tensorboard's record writer / reader (and TensorFlow's lib/io/record_writer) define it.
 * The writer (tb_writer.c) frames its events with tb_record_frame; the reader here checks both CRCs, so tests
 * (and anyone) can verify a file without protobuf.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// CRC-32C of n bytes, continuing from crc (start with 0).
uint32_t tb_crc32c(uint32_t crc, const void* data, size_t n);
// TensorBoard's masked CRC: rotate right by 15, add 0xa282ead8.
uint32_t tb_masked_crc32c(const void* data, size_t n);

#define TB_RECORD_OVERHEAD 16  // 8 (length) + 4 (length CRC) + 4 (data CRC)

// Writes the framed record of data[0..n) into out (n + TB_RECORD_OVERHEAD bytes).
void tb_record_frame(unsigned char* out, const void* data, size_t n);

// Reads the next record from f into *data (malloc'd, *n bytes). Returns 1 (a record), 0 (clean end of file),
// or -1 with a message in err: truncated header or data, length CRC or data CRC mismatch (named, with both
// values), a length over max_len.
int tb_record_read(FILE* f, unsigned char** data, size_t* n, size_t max_len, char* err, size_t errcap);

#ifdef __cplusplus
}
#endif
