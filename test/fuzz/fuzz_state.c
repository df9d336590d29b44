/*
 * fuzz_state.c: the checkpoint state file reader (src/train/checkpoint.c: checkpoint_state_open,
 * _verify, _read) on arbitrary bytes. The CRC32C of the 256-int header is fixed up for half of
 * the inputs (first byte odd), so the fuzzer gets past the header checksum to the blob table.
 */
#include "../../src/train/checkpoint.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    uint8_t* buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    if (size >= 1024 && (buf[0] & 1)) {
        int32_t h[256];
        memcpy(h, buf, sizeof h);
        h[0] = 0x54355354;  // magic
        h[1] = 1;           // version
        int64_t fsize = (int64_t)size;
        if (buf[1] & 1) memcpy(&h[8], &fsize, 8);  // the right file size, most of the time
        h[255] = (int32_t)checkpoint_crc32c(0, h, 255 * sizeof(int32_t));
        memcpy(buf, h, sizeof h);
    }
    const char* path = fuzz_write_tmp(buf, size, ".bin", 0);
    free(buf);
    CheckpointState s;
    char err[512];
    if (checkpoint_state_open(&s, path, err, sizeof err) != 0) return 0;
    checkpoint_state_verify(&s, err, sizeof err);
    for (int i = 0; i < s.nblobs; i++) {
        if (s.blobs[i].nbytes > (1 << 20)) continue;
        void* dst = malloc((size_t)s.blobs[i].nbytes + 1);
        checkpoint_state_read(&s, s.blobs[i].tag, dst, (size_t)s.blobs[i].nbytes, err, sizeof err);
        free(dst);
    }
    checkpoint_state_close(&s);
    return 0;
}
