/*
 * bench_generate.c: generation throughput of model/generate.c (generated tokens per second).
 *
 *   make BUILD=build-gen build-gen/bench/bench_generate
 *   build-gen/bench/bench_generate [MAX_LENGTH=128] [REPS=3] [MODELS=t5-small,t5-base]
 *
 * For t5-small and t5-base shapes with random weights (HF init, seed 42) in bf16, eval batch 4 and 32, beams 1
 * and 4: min_length = max_length bans `</s>`, so every sequence runs the same max_length - 1 steps (HF's side,
 * scripts/bench_generate_hf.py, forces the same number of steps the same way). The sources are the same
 * synthetic ids on both sides: row b has len_b = 24 + (13 b mod 40) tokens, token i = 100 + (7919 b + 104729 i)
 * mod 30000, the last one `</s>`, padded to the longest row.
 * tokens/s = B * (max_length - 1) / seconds per batch (one warm-up batch first, then REPS timed batches).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../cuda/check.h"
#include "../../model/generate.h"
#include "../../model/params.h"
#include "../../model/t5_config.h"
#include "../../model/t5_weights.h"
#include "../../src/common.h"
#include "../../src/zero.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int make_sources(int B, int32_t* ids, int32_t* mask, int cap_T) {
    int T = 0;
    for (int b = 0; b < B; b++) T = T5_MAX(T, 24 + (13 * b) % 40);
    if (T > cap_T) t5_die(T5_EXIT_FAILURE, "internal: source length");
    for (int b = 0; b < B; b++) {
        int len = 24 + (13 * b) % 40;
        for (int i = 0; i < T; i++) {
            int v = i < len - 1 ? 100 + (int)(((int64_t)7919 * b + (int64_t)104729 * i) % 30000) : i == len - 1 ? 1 : 0;
            ids[(size_t)b * T + i] = v;
            mask[(size_t)b * T + i] = i < len;
        }
    }
    return T;
}

int main(int argc, char** argv) {
    const int ML = argc > 1 ? atoi(argv[1]) : 128;
    const int reps = argc > 2 ? atoi(argv[2]) : 3;
    const char* models = argc > 3 ? argv[3] : "t5-small,t5-base";
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    printf("bench_generate: %s, bf16, max_length %d (min_length = max_length: %d steps), %d timed batch(es)\n",
           prop.name, ML, ML - 1, reps);
    printf("| model | batch | beams | ms/batch | generated tokens/s | encoder ms | decoder ms | rows/step |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    char* list = strdup(models);
    for (char* name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        T5Config cfg;
        if (!t5_config_preset(name, &cfg)) t5_die(T5_EXIT_USAGE, "unknown preset %s", name);
        ParamTable t;
        char err[4096];
        if (params_build(&t, &cfg, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
        size_t* numel = malloc_check(sizeof(size_t) * t.num_units);
        const char** names = malloc_check(sizeof(char*) * t.num_units);
        for (int u = 0; u < t.num_units; u++) {
            numel[u] = t.units[u].numel;
            names[u] = t.units[u].name;
        }
        cudaStream_t s;
        CUDA_CHECK(cudaStreamCreate(&s));
        ZeroEngine* Z = zero_create(0, DT_BF16, t.num_units, numel, names, err, sizeof err);
        if (!Z) t5_die(T5_EXIT_FAILURE, "%s", err);
        if (t5_weights_init_random(Z, &t, 42, s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
        const int batches[2] = {4, 32}, beams[2] = {1, 4};
        for (int bi = 0; bi < 2; bi++)
            for (int ki = 0; ki < 2; ki++) {
                const int B = batches[bi], nb = beams[ki];
                int32_t* ids = malloc_check(sizeof(int32_t) * (size_t)B * 64);
                int32_t* mask = malloc_check(sizeof(int32_t) * (size_t)B * 64);
                int Ts = make_sources(B, ids, mask, 64);
                GenerateOptions o;
                generate_options_default(&o);
                o.max_length = ML;
                o.min_length = ML;
                o.num_beams = nb;
                T5Generator* G = t5_generator_create(&t, Z, B, Ts, &o, err, sizeof err);
                if (!G) t5_die(T5_EXIT_FAILURE, "%s", err);
                int32_t* out = malloc_check(sizeof(int32_t) * (size_t)B * ML);
                int w = 0;
                if (t5_generate(G, ids, mask, B, Ts, out, &w, s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
                if (w != ML) t5_die(T5_EXIT_FAILURE, "expected width %d, got %d", ML, w);
                t5_generator_reset_stats(G);
                double t0 = now_s();
                for (int r = 0; r < reps; r++)
                    if (t5_generate(G, ids, mask, B, Ts, out, &w, s, err, sizeof err))
                        t5_die(T5_EXIT_FAILURE, "%s", err);
                double dt = (now_s() - t0) / reps;
                const GenerateStats* st = t5_generator_stats(G);
                printf("| %s | %d | %d | %.1f | %.0f | %.2f | %.1f | %.1f |\n", name, B, nb, dt * 1e3,
                       (double)B * (ML - 1) / dt, st->encoder_ms / reps, st->decoder_ms / reps,
                       (double)st->decoder_rows / (double)st->steps);
                fflush(stdout);
                free(out);
                free(ids);
                free(mask);
                t5_generator_destroy(G);
            }
        zero_destroy(Z);
        params_free(&t);
        free(numel);
        free(names);
        CUDA_CHECK(cudaStreamDestroy(s));
    }
    free(list);
    return 0;
}
