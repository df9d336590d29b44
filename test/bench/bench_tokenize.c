/*
 * bench_tokenize.c: token-cache build throughput and cache open time.
 *
 *   make BUILD=build-data build-data/bench/bench_tokenize
 *   T5TRAIN_DATA=../shared/data build-data/bench/bench_tokenize [LINES=610320] [THREADS=all]
 *
 * Builds a parallel corpus of LINES pairs by repeating the ~21k en-ro pairs of
 * $T5TRAIN_DATA/en-ro-extra (the size of the WMT16 ro-en train split), tokenizes it en->ro with the
 * T5 prefix (max_source_length 1024, max_target_length 128) into a fresh cache with all cores,
 * then opens the cache again. Prints pairs/s, tokens/s and the open time.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../data/dataset.h"
#include "../../src/base/common.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
    long lines = argc > 1 ? atol(argv[1]) : 610320;
    int threads = argc > 2 ? atoi(argv[2]) : omp_get_max_threads();
    const char* data = getenv("T5TRAIN_DATA");
    if (!data) data = "../shared/data";
    const char* files[][2] = {
        {"en-ro-extra/flores101/devtest.en", "en-ro-extra/flores101/devtest.ro"},
        {"en-ro-extra/mlqe-pe-ro-en/dev.en", "en-ro-extra/mlqe-pe-ro-en/dev.ro"},
        {"en-ro-extra/mlqe-pe-ro-en/test20.en", "en-ro-extra/mlqe-pe-ro-en/test20.ro"},
        {"en-ro-extra/mlqe-pe-ro-en/train.en", "en-ro-extra/mlqe-pe-ro-en/train.ro"},
        {"en-ro-extra/ntrex128/newstest2019.en", "en-ro-extra/ntrex128/newstest2019.ro"},
        {"en-ro-extra/tatoeba/tatoeba-test-v2021-03-30.en", "en-ro-extra/tatoeba/tatoeba-test-v2021-03-30.ro"},
    };
    char dir[] = "/tmp/t5bench.XXXXXX";
    if (!mkdtemp(dir)) t5_die(T5_EXIT_FAILURE, "mkdtemp failed");
    char pre[256], cache[256];
    snprintf(pre, sizeof pre, "%s/train", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    // one block of all pairs, then repeated until `lines`
    const char* langs[2] = {"en", "ro"};
    for (int k = 0; k < 2; k++) {
        size_t cap = 0, len = 0;
        char* block = NULL;
        for (size_t f = 0; f < T5_ARRAY_LEN(files); f++) {
            char* p = t5_path_join(data, files[f][k]);
            size_t l;
            char* b = t5_read_file(p, &l);
            if (!b) t5_die(T5_EXIT_FAILURE, "cannot read %s (set T5TRAIN_DATA)", p);
            if (len + l + 1 > cap) { cap = (len + l + 1) * 2; block = realloc_check(block, cap); }
            memcpy(block + len, b, l);
            len += l;
            if (l && b[l - 1] != '\n') block[len++] = '\n';
            free(b);
            free(p);
        }
        long per = 0;
        for (size_t i = 0; i < len; i++) per += block[i] == '\n';
        char path[300];
        snprintf(path, sizeof path, "%s.%s", pre, langs[k]);
        FILE* f = fopen_check(path, "wb");
        long left = lines;
        while (left > 0) {
            if (left >= per) { fwrite_check(block, 1, len, f, path); left -= per; continue; }
            size_t i = 0;
            for (long n = 0; n < left; i++) n += block[i] == '\n';
            fwrite_check(block, 1, i, f, path);
            left = 0;
        }
        fclose_check(f, path);
        free(block);
    }
    DataOptions o;
    data_options_default(&o);
    o.split_file[DATA_SPLIT_TRAIN] = pre;
    char* model = t5_path_join(data, "t5-spiece/spiece.model");
    o.tokenizer_path = model;
    o.cache_dir = cache;
    o.num_threads = threads;
    char err[1024];
    double t0 = now_s();
    Dataset* ds = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    double t_build = now_s() - t0;
    if (!ds) t5_die(T5_EXIT_FAILURE, "%s", err);
    int64_t n = dataset_size(ds);
    int64_t tok = dataset_num_tokens(ds, false) + dataset_num_tokens(ds, true);
    dataset_close(ds);
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        t0 = now_s();
        ds = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
        double t = now_s() - t0;
        if (!ds || !dataset_from_cache(ds)) t5_die(T5_EXIT_FAILURE, "cache was not reused");
        if (t < best) best = t;
        dataset_close(ds);
    }
    printf("bench_tokenize: %lld pairs, %lld tokens, %d threads\n", (long long)n, (long long)tok, threads);
    printf("  first run (read + tokenize + write cache): %.2f s = %.0f pairs/s, %.0f tokens/s\n", t_build, n / t_build, tok / t_build);
    printf("  cache open (mmap + validate + checksum, warm page cache, best of 3): %.3f s\n", best);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) t5_warn("could not remove %s", dir);
    free(model);
    return 0;
}
