/*
 * fuzz_safetensors.c: safetensors header validation (src/base/safetensors.c) on arbitrary bytes.
 * Every accepted file is also read tensor by tensor, converted to F32, so an accepted header whose
 * offsets or sizes were wrong would read out of bounds under ASan.
 */
#include "../../src/base/safetensors.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_tmp(data, size, ".safetensors", 0);
    SafeTensors* st = NULL;
    char err[512];
    if (safetensors_open(&st, path, err, sizeof err) != 0) return 0;
    int n = safetensors_count(st);
    for (int i = 0; i < n; i++) {
        const char* name = safetensors_name(st, i);
        const SafeTensorInfo* info = NULL;
        if (safetensors_info(st, name, &info, err, sizeof err) != 0) continue;
        if (info->numel > (1u << 20)) continue;  // the fuzzer's inputs are small; bound the buffer anyway
        float* dst = malloc((info->numel ? info->numel : 1) * sizeof(float));
        safetensors_read(st, name, dst, DT_F32, NULL, -1, err, sizeof err);
        free(dst);
    }
    safetensors_close(st);
    return 0;
}
