/*
 * bench_generate.c: generation throughput of model/generate.c (generated tokens per second).
 *
 *   make BUILD=build-gspeed build-gspeed/bench/bench_generate
 *   build-gspeed/bench/bench_generate [MAX_LENGTH=49] [REPS=3] [MODELS=t5-small,t5-base,t5-large,t5-3b]
 *
 * For T5 shapes with random weights (HF init, seed 42) in bf16, eval batch 4 and 32, beams 1 and 4:
 * min_length = max_length bans `</s>`, so every sequence runs the same max_length - 1 steps (HF's side,
 * scripts/bench_generate_hf.py, forces the same number of steps the same way). The sources are the same
 * synthetic ids on both sides: row b has len_b = 24 + (13 b mod 40) tokens, token i = 100 + (7919 b + 104729 i)
 * mod 30000, the last one `</s>`, padded to the longest row.
 * tokens/s = B * (max_length - 1) / seconds per batch (one warm-up batch first, then REPS timed batches).
 *
 * Per decoder step: "step ms" = (ms per batch - encoder ms) / steps (wall time, everything but the encoder),
 * "GPU step ms" = the decoder's GPU time / steps. The weight-read floor of a step = the bytes of the weights one
 * decoder step reads (decoder blocks without the cross-attention k/v, computed once per batch, plus lm_head) in
 * bf16 / the HBM bandwidth measured here (a 2 GiB device-to-device copy: 2 x bytes / time).
 * First, a table of the decode projections at small M (t5-3b's six shapes, bf16): cuBLASLt (linear_forward) at M = 4,
 * 16, 32, 128 and cuda/decode_gemv.cu at M = 4, 8, 16, 32, in us per call (the calls cycle through copies of W in
 * 256 MiB, so each one reads HBM rather than L2) and weight bytes / time.
 * The generator's environment switches (docs/generate.md) apply, e.g. T5TRAIN_GEN_ATTN=wide, T5TRAIN_GEN_GEMV=0,
 * T5TRAIN_GEN_PDL=0.
 * T5TRAIN_BENCH_CASES=4x1,32x4 runs only those (batch x beams) points. T5TRAIN_BENCH_PROFILE=1 skips the GEMM table
 * and brackets only the timed batches with cudaProfilerStart/Stop, for `ncu --profile-from-start off` (per-kernel
 * times of the decode step, scripts/ncu_step_summary.py).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_profiler_api.h>

#include "../../src/base/check.h"
#include "../../cuda/decode_gemv.cuh"
#include "../../cuda/matmul.cuh"
#include "../../model/generate.h"
#include "../../model/params.h"
#include "../../model/t5_config.h"
#include "../../model/t5_weights.h"
#include "../../src/base/common.h"
#include "../../model/zero.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Random weights for the large shapes: t5_weights_init_random (HF's stds, a Box-Muller draw per element on the
// host) takes about a minute for t5-3b's 2.9e9 parameters, so above 300M parameters each tensor is its HF std times
// consecutive draws from a pool of 2^22 standard normals (from an offset per tensor); norms are 1. The speed
// of generation does not depend on the values (min_length = max_length fixes the work).
static void init_fast(ZeroEngine* Z, const ParamTable* t, cudaStream_t s) {
    const size_t pool_n = (size_t)1 << 22;
    float* pool = malloc_check(pool_n * sizeof(float));
    uint64_t st = 42;
    for (size_t k = 0; k < pool_n; k += 2) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u1 = ((st >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u2 = ((st >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        double r = sqrt(-2.0 * log(u1));
        pool[k] = (float)(r * cos(2.0 * M_PI * u2));
        pool[k + 1] = (float)(r * sin(2.0 * M_PI * u2));
    }
    size_t maxu = 0;
    for (int u = 0; u < t->num_units; u++) maxu = T5_MAX(maxu, t->units[u].numel);
    float* h = malloc_check(maxu * sizeof(float));
    const T5Config* c = &t->cfg;
    for (int u = 0; u < t->num_units; u++) {
        const UnitDesc* U = &t->units[u];
        memset(h, 0, U->numel * sizeof(float));
        for (int i = U->first_param; i < U->first_param + U->num_params; i++) {
            const ParamDesc* p = &t->params[i];
            double sd;
            switch (p->role) {
                case ROLE_EMBED: case ROLE_LM_HEAD: sd = 1.0; break;
                case ROLE_SA_Q: case ROLE_CA_Q: sd = pow((double)c->d_model * c->d_kv, -0.5); break;
                case ROLE_SA_O: case ROLE_CA_O: sd = pow((double)c->num_heads * c->d_kv, -0.5); break;
                case ROLE_FF_WO: sd = pow((double)c->d_ff, -0.5); break;
                case ROLE_SA_LN: case ROLE_CA_LN: case ROLE_FF_LN: case ROLE_FINAL_LN: sd = 0.0; break;
                default: sd = pow((double)c->d_model, -0.5); break;
            }
            float* dst = h + p->offset;
            if (sd == 0.0) {
                for (size_t k = 0; k < p->numel; k++) dst[k] = 1.0f;
                continue;
            }
            const float f = (float)sd;
            const uint32_t salt = 0x9E3779B9u * (uint32_t)(i + 1);
            for (size_t k = 0; k < p->numel; k++) dst[k] = f * pool[(k + salt) & (pool_n - 1)];
        }
        CUDA_CHECK(cudaMemcpy(zero_master(Z, u), h, U->numel * sizeof(float), cudaMemcpyHostToDevice));
    }
    zero_sync_working(Z, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    free(h);
    free(pool);
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
    const int ML = argc > 1 ? atoi(argv[1]) : 49;
    const int reps = argc > 2 ? atoi(argv[2]) : 3;
    const char* models = argc > 3 ? argv[3] : "t5-small,t5-base,t5-large,t5-3b";
    const char* cases = getenv("T5TRAIN_BENCH_CASES");
    const char* pe = getenv("T5TRAIN_BENCH_PROFILE");
    const bool profile = pe && strcmp(pe, "1") == 0;
    if (ML < 2 || reps < 1) t5_die(T5_EXIT_USAGE, "usage: bench_generate [MAX_LENGTH >= 2] [REPS >= 1] [MODELS]");
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    printf("bench_generate: %s, bf16, max_length %d (min_length = max_length: %d steps), %d timed batch(es)\n",
           prop.name, ML, ML - 1, reps);
    // HBM bandwidth: device-to-device copy of 2 GiB (read + write)
    double bw = 0;
    {
        const size_t n = (size_t)2 << 30;
        void *a = NULL, *b = NULL;
        CUDA_CHECK(cudaMalloc(&a, n));
        CUDA_CHECK(cudaMalloc(&b, n));
        CUDA_CHECK(cudaMemset(a, 1, n));
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        CUDA_CHECK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
        float best = 1e30f;
        for (int i = 0; i < 5; i++) {
            CUDA_CHECK(cudaEventRecord(e0, 0));
            CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0));
            CUDA_CHECK(cudaEventRecord(e1, 0));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (ms < best) best = ms;
        }
        bw = 2.0 * (double)n / (best * 1e-3);
        CUDA_CHECK(cudaFree(a));
        CUDA_CHECK(cudaFree(b));
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e1));
    }
    printf("HBM bandwidth (2 GiB device-to-device copy, best of 5): %.2f TB/s\n", bw * 1e-12);
    // decode GEMMs at small M (t5-3b's feed-forward and attention projections, bf16): time against the weight bytes
    // at the bandwidth above (is cuBLASLt at bandwidth for M = batch x beams rows?)
    if (!profile) {
        // (N, K): feed-forward wi and wo, fused q/k/v, lm_head, attention o, cross-attention q
        const int shapes[6][2] = {{16384, 1024}, {1024, 16384}, {12288, 1024},
                                  {32128, 1024}, {1024, 4096},  {4096, 1024}};
        // columns: (cuBLASLt or decode_gemv, M), each cuBLASLt column beside decode_gemv at the same M
        const int cols[8][2] = {{0, 4}, {1, 4}, {1, 8}, {0, 16}, {1, 16}, {0, 32}, {1, 32}, {0, 128}};
        const int ncols = 8;
        // the timed calls cycle through copies of W in 256 MiB (4 of lm_head's 64 MB, 32 of an 8 MB matrix), so
        // that, as in a decoder step, W comes from HBM and not from the 50 MB L2 of the previous call
        const size_t wbytes = (size_t)256 << 20;
        void *w = NULL, *in = NULL, *out = NULL;
        CUDA_CHECK(cudaMalloc(&w, wbytes));
        CUDA_CHECK(cudaMalloc(&in, (size_t)128 * 16384 * 2));
        CUDA_CHECK(cudaMalloc(&out, (size_t)128 * 32128 * 2));
        CUDA_CHECK(cudaMemset(w, 0x3c, wbytes));
        CUDA_CHECK(cudaMemset(in, 0x3c, (size_t)128 * 16384 * 2));
        matmul_init();
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        printf("decode GEMM (bf16, out = in W^T; cuBLASLt = linear_forward, gemv = cuda/decode_gemv.cu): us per call "
               "(mean of 50 back to back, W rotated through 256 MiB) and weight bytes / time\n");
        printf("| N x K |");
        for (int c = 0; c < ncols; c++) printf(" %s M=%d us | GB/s |", cols[c][0] ? "gemv" : "cuBLASLt", cols[c][1]);
        printf(" floor us |\n|");
        for (int c = 0; c < 2 * ncols + 2; c++) printf(" --- |");
        printf("\n");
        for (int si = 0; si < 6; si++) {
            const int N = shapes[si][0], K = shapes[si][1];
            const double wb = (double)N * K * 2;
            const int nrot = (int)(wbytes / ((size_t)N * K * 2));
            printf("| %d x %d |", N, K);
            for (int c = 0; c < ncols; c++) {
                const bool gemv = cols[c][0] != 0;
                const int M = cols[c][1];
                for (int r = 0; r < 51; r++) {  // one warm-up call, then 50 timed
                    const void* wr = (const char*)w + (size_t)(r % nrot) * N * K * 2;
                    if (r == 1) CUDA_CHECK(cudaEventRecord(e0, 0));
                    if (gemv) decode_gemv(out, in, wr, DT_BF16, M, N, K, false, 0);
                    else linear_forward(out, DT_BF16, in, wr, DT_BF16, M, N, K, 0);
                }
                CUDA_CHECK(cudaEventRecord(e1, 0));
                CUDA_CHECK(cudaEventSynchronize(e1));
                float ms_ = 0;
                CUDA_CHECK(cudaEventElapsedTime(&ms_, e0, e1));
                const double us = ms_ * 1e3 / 50;
                printf(" %.2f | %.0f |", us, wb / (us * 1e-6) / 1e9);
            }
            printf(" %.2f |\n", wb / bw * 1e6);
        }
        CUDA_CHECK(cudaFree(w));
        CUDA_CHECK(cudaFree(in));
        CUDA_CHECK(cudaFree(out));
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e1));
        fflush(stdout);
    }
    printf("| model | batch | beams | ms/batch | generated tokens/s | encoder ms | step ms | GPU step ms | rows/step "
           "| graph steps | step weights MB | floor ms | step/floor |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
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
        if (t.total_numel > (size_t)300000000)
            init_fast(Z, &t, s);
        else if (t5_weights_init_random(Z, &t, 42, s, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "%s", err);
        // weights one decoder step reads (bf16): decoder GEMM weights except the cross k/v, and lm_head
        size_t step_numel = 0;
        for (int i = 0; i < t.num_params; i++) {
            const ParamDesc* p = &t.params[i];
            const bool gemm = p->ndim == 2 && p->role != ROLE_SA_RELBIAS;
            if (p->stack == STACK_DECODER && gemm && p->role != ROLE_CA_K && p->role != ROLE_CA_V)
                step_numel += p->numel;
            if (p->role == (cfg.tie_word_embeddings ? ROLE_EMBED : ROLE_LM_HEAD)) step_numel += p->numel;
        }
        const double floor_ms = (double)step_numel * 2.0 / bw * 1e3;
        const int batches[2] = {4, 32}, beams[2] = {1, 4};
        for (int bi = 0; bi < 2; bi++)
            for (int ki = 0; ki < 2; ki++) {
                const int B = batches[bi], nb = beams[ki];
                if (cases) {  // "BxK" entries, comma separated
                    char key[32];
                    snprintf(key, sizeof key, "%dx%d", B, nb);
                    const size_t kl = strlen(key);
                    bool found = false;
                    for (const char* c = cases; (c = strstr(c, key)) != NULL; c += kl)
                        if ((c == cases || c[-1] == ',') && (c[kl] == ',' || c[kl] == 0)) found = true;
                    if (!found) continue;
                }
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
                if (profile) CUDA_CHECK(cudaProfilerStart());
                double t0 = now_s();
                for (int r = 0; r < reps; r++)
                    if (t5_generate(G, ids, mask, B, Ts, out, &w, s, err, sizeof err))
                        t5_die(T5_EXIT_FAILURE, "%s", err);
                double dt = (now_s() - t0) / reps;
                if (profile) CUDA_CHECK(cudaProfilerStop());
                const GenerateStats* st = t5_generator_stats(G);
                const double steps = (double)st->steps / reps;
                const double step_ms = (dt * 1e3 - st->encoder_ms / reps) / steps;
                printf("| %s | %d | %d | %.1f | %.0f | %.2f | %.3f | %.3f | %.1f | %lld/%lld | %.0f | %.3f | %.2f |\n",
                       name, B, nb, dt * 1e3, (double)B * (ML - 1) / dt, st->encoder_ms / reps, step_ms,
                       st->decoder_ms / reps / steps, (double)st->decoder_rows / (double)st->steps,
                       (long long)st->graph_steps, (long long)st->steps, (double)step_numel * 2.0 / 1e6, floor_ms,
                       step_ms / floor_ms);
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
