/*
 * fuzz_common.h: helpers shared by the libFuzzer harnesses (test/fuzz/README.md).
 *
 * The readers under test take paths (they mmap or stream files, as in a run), so each input is
 * written to one per-process temporary file first. The harnesses never print: a reader's error
 * return is the expected outcome for most inputs; a crash, a sanitizer report or a leak is a bug.
 */
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// writes data to /tmp/t5fuzz.<pid>.<suffix> and returns the path (static buffer per suffix slot)
static inline const char* fuzz_write_tmp(const uint8_t* data, size_t size, const char* suffix, int slot) {
    static char paths[4][256];
    char* p = paths[slot & 3];
    snprintf(p, 256, "/tmp/t5fuzz.%d.%d%s", (int)getpid(), slot, suffix);
    FILE* f = fopen(p, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    return p;
}
