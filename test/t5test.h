/*
 * t5test.h: shared helpers for the cmocka test programs under test/.
 *
 * Each test/test_<name>.c is one program: a list of cmocka unit tests run by
 * T5_TEST_MAIN(tests). test/run_tests.sh runs every program and prints the totals.
 * GPU tests live in test/test_gpu_<name>.c and begin with T5_REQUIRE_GPU(), which skips
 * the test when no GPU is present (a skip, never a pass).
 */
#pragma once
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka needs the four headers above first
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// T5TEST_FILTER=PATTERN (cmocka's wildcards): run only the matching tests of a program (a device call that re-runs one
// test); the others are not run and not counted. Called first in main by the programs that honour it.
static inline void t5test_filter_from_env(void) {
    const char* f = getenv("T5TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
}

// Path of the shared data folder (../shared/data by default, $T5TRAIN_DATA overrides),
// or NULL when absent.
const char* t5test_data_dir(void);
// Path of the built t5train binary ($T5TRAIN_BIN, set by the Makefile), never NULL.
const char* t5test_bin(void);
// Repository root (the current directory of `make test`).
const char* t5test_repo_dir(void);
// A fresh empty temporary directory (removed at exit).
const char* t5test_tmpdir(void);
// The last `n` bytes of `text` (from the line start after the cut): a failed run's own error line stays in a
// failure message (cmocka cuts long messages; a rank 0 prints its config table first)
const char* t5test_tail(const char* text, size_t n);
// Runs a shell command; captures stdout+stderr into out (longer than cap: its head, a marker, its tail). Returns the exit code
// (or 128+signal).
int t5test_run(char* out, size_t cap, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
// Splits a space-separated command line (no quoting) into argv[0] = "t5train", then its words, NULL-terminated;
// the words point into a static copy (valid until the next call). Returns argc.
int t5test_argv(const char* line, char** argv, int cap);
// Writes text to path (creating it), aborts the test on failure.
void t5test_write_file(const char* path, const char* text);
// True when a CUDA device is usable.
bool t5test_have_gpu(void);
// The values of `key` on the step lines (those with "max_steps") of OUT/trainer_log.jsonl, in order, at most cap
// (JSON null: NAN). Fails the test when the file is missing.
int t5test_jsonl_doubles(const char* out, const char* key, double* v, int cap);
// A/model.safetensors against B/model.safetensors, every tensor of A read as fp32: returns the number of elements
// whose fp32 bits differ (0: bit-identical) and sets *rel_l2 (if not NULL) to ||b - a|| / ||a|| over all tensors.
// Fails the test when a file or a tensor of A is missing from B.
size_t t5test_weights_compare(const char* a, const char* b, double* rel_l2);

// Skip the current test when the shared data folder is missing.
#define T5_REQUIRE_DATA()                                                          \
    do {                                                                           \
        if (!t5test_data_dir()) {                                                  \
            print_message("shared data not found (set T5TRAIN_DATA); skipping\n"); \
            skip();                                                                \
        }                                                                          \
    } while (0)

// Skip the current test when there is no GPU (fails instead under `make test-gpu`).
#define T5_REQUIRE_GPU()                                                       \
    do {                                                                       \
        if (!t5test_have_gpu()) {                                              \
            if (getenv("T5TRAIN_REQUIRE_GPU")) fail_msg("no usable CUDA GPU"); \
            skip();                                                            \
        }                                                                      \
    } while (0)

// GPUs this process sees (0 without CUDA)
int t5test_gpu_count(void);

// Skip the current test unless a GPU, the shared data and at least n GPUs are visible.
#define T5_REQUIRE_GPUS(n)                                                        \
    do {                                                                          \
        T5_REQUIRE_GPU();                                                         \
        T5_REQUIRE_DATA();                                                        \
        if (t5test_gpu_count() < (n)) {                                           \
            print_message("skipped: fewer than %d GPUs visible\n", (int)(n));     \
            skip();                                                               \
        }                                                                         \
    } while (0)

// assert that haystack contains needle, printing both when it does not
#define assert_contains(haystack, needle)                                                              \
    do {                                                                                               \
        const char* h_ = (haystack);                                                                   \
        const char* n_ = (needle);                                                                     \
        if (!strstr(h_, n_)) fail_msg("expected to find \"%s\" in:\n-----\n%s\n-----", n_, h_);     \
    } while (0)

#define T5_TEST_MAIN(tests) \
    int main(void) { return cmocka_run_group_tests(tests, NULL, NULL); }
