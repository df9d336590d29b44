/*
 * fuzz_readers.c: the WMT16 data readers (data/readers.c) on arbitrary bytes: JSON lines, parallel
 * text (the input split at its first 0xFF byte into the two sides) and SGML (same split).
 */
#include "../../data/readers.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t mode = data[0] % 3;
    data++, size--;
    TextPairs tp;
    char err[512];
    if (mode == 0) {
        const char* p = fuzz_write_tmp(data, size, ".jsonl", 0);
        memset(&tp, 0, sizeof tp);
        if (text_pairs_read_jsonl(p, "en", "ro", &tp, err, sizeof err) == 0) text_pairs_free(&tp);
        return 0;
    }
    const uint8_t* cut = memchr(data, 0xFF, size);
    size_t a = cut ? (size_t)(cut - data) : size / 2;
    size_t b0 = cut ? a + 1 : a;
    const char* sp = fuzz_write_tmp(data, a, mode == 1 ? ".en" : ".en.sgm", 0);
    const char* tp_ = fuzz_write_tmp(data + b0, size - b0, mode == 1 ? ".ro" : ".ro.sgm", 1);
    memset(&tp, 0, sizeof tp);
    int rc = mode == 1 ? text_pairs_read_parallel(sp, tp_, &tp, err, sizeof err)
                       : text_pairs_read_sgml(sp, tp_, &tp, err, sizeof err);
    if (rc == 0) text_pairs_free(&tp);
    return 0;
}
