/*
 * test_fuzz_short.c: the short fuzz run of CI (issue 14): each libFuzzer harness of test/fuzz/ (safetensors
 * header, checkpoint state file, data readers, config/CLI front end) is compiled in here with its entry point
 * renamed and fed its committed seed corpus (test/fuzz/corpus/<harness>/) plus 600 deterministic mutations
 * of every seed (byte flips, truncations, insertions of structural bytes, repeated chunks). A crash or abort
 * fails the test program; the long runs under ASan/UBSan with libFuzzer are `bash test/fuzz/build.sh` (see
 * docs/reliability.md).
 */
#include "t5test.h"

#include <dirent.h>
#include <stdint.h>

#include "../src/base/common.h"

#define LLVMFuzzerTestOneInput fuzz_one_safetensors
#include "fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_state
#include "fuzz/fuzz_state.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_readers
#include "fuzz/fuzz_readers.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_config
#include "fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput

#define MUTATIONS 600

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

// one mutation of seed into out (capacity cap); returns its length
static size_t mutate(const uint8_t* seed, size_t n, uint8_t* out, size_t cap) {
    static const uint8_t STRUCT[] = {'{', '}', '[', ']', '"', ',', ':', '\n', '<', '>', '/', '-', '0', '9',
                                     0x00, 0xFF, 0x80, 0xC3, 'e', '.', ' '};
    size_t len = T5_MIN(n, cap);
    memcpy(out, seed, len);
    int edits = 1 + (int)(next_rand() % 8);
    for (int k = 0; k < edits; k++) {
        uint64_t r = next_rand();
        switch (r % 5) {
            case 0:  // flip a byte
                if (len) out[next_rand() % len] ^= (uint8_t)(1u << (next_rand() % 8));
                break;
            case 1:  // truncate
                if (len) len = next_rand() % len;
                break;
            case 2:  // insert a structural byte
                if (len < cap) {
                    size_t at = len ? next_rand() % (len + 1) : 0;
                    memmove(out + at + 1, out + at, len - at);
                    out[at] = STRUCT[next_rand() % sizeof STRUCT];
                    len++;
                }
                break;
            case 3:  // repeat a chunk
                if (len > 1) {
                    size_t a = next_rand() % len, l = 1 + next_rand() % T5_MIN(len - a, (size_t)64);
                    if (len + l <= cap) {
                        memmove(out + a + l, out + a, len - a);
                        len += l;
                    }
                }
                break;
            default:  // overwrite 8 bytes with a random value (lengths, offsets, counts)
                if (len >= 8) {
                    uint64_t v = next_rand() >> (next_rand() % 64);
                    memcpy(out + next_rand() % (len - 7), &v, 8);
                }
                break;
        }
    }
    return len;
}

static int run_harness(const char* corpus, int (*one)(const uint8_t*, size_t)) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/test/fuzz/corpus/%s", t5test_repo_dir(), corpus);
    DIR* d = opendir(dir);
    if (!d) fail_msg("no seed corpus %s", dir);
    int inputs = 0, seeds = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char* p = t5_path_join(dir, e->d_name);
        size_t n = 0;
        char* seed = t5_read_file(p, &n);
        free(p);
        if (!seed) continue;
        seeds++;
        one((const uint8_t*)seed, n);
        inputs++;
        size_t cap = n + 256;
        uint8_t* buf = malloc_check(cap);
        for (int m = 0; m < MUTATIONS; m++) {
            size_t len = mutate((const uint8_t*)seed, n, buf, cap);
            one(buf, len);
            inputs++;
        }
        free(buf);
        free(seed);
    }
    closedir(d);
    if (seeds == 0) fail_msg("empty seed corpus %s", dir);
    // the harnesses' scratch files
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -f /tmp/t5fuzz.%d.*", (int)getpid());
    if (system(cmd) != 0) print_message("could not remove /tmp/t5fuzz.%d.*\n", (int)getpid());
    print_message("%s: %d inputs (%d seeds x %d mutations), no crash\n", corpus, inputs, seeds, MUTATIONS + 1);
    return inputs;
}

static void test_safetensors(void** s) { (void)s; assert_true(run_harness("safetensors", fuzz_one_safetensors) > 0); }
static void test_state(void** s) { (void)s; assert_true(run_harness("state", fuzz_one_state) > 0); }
static void test_readers(void** s) { (void)s; assert_true(run_harness("readers", fuzz_one_readers) > 0); }
static void test_config(void** s) { (void)s; assert_true(run_harness("config", fuzz_one_config) > 0); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors),
        cmocka_unit_test(test_state),
        cmocka_unit_test(test_readers),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
