/*
 * crc32c.h: CRC-32C (Castagnoli), zlib-style chaining: crc(crc(0, a), b) == crc(0, a||b); the check value of
 * "123456789" is 0xE3069283. Used by the checkpoint state files and the TensorBoard record framing.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// SSE4.2 when available, else the table version.
uint32_t t5_crc32c(uint32_t crc, const void* data, size_t n);
// The table version (tests compare the two).
uint32_t t5_crc32c_sw(uint32_t crc, const void* data, size_t n);

#ifdef __cplusplus
}
#endif
