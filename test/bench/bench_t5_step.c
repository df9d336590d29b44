/*
 * bench_t5_step.c: time of one T5 training step's forward + backward (ours), per (model, shape, dtype).
 *
 *   build-x/bench/bench_t5_step [--models t5-small,t5-base,t5-large,t5-3b] [--shapes 1x48x48,8x128x128]
 *       [--dtypes bf16,fp16] [--modes eager,graph] [--warmup 3] [--iters 20] [--dropout P] [--layers N]
 *       [--init fast|hf] [--grad-dtype same|fp32] [--csv FILE]
 *
 * What is timed (CUDA events around each step, after `warmup` untimed steps; the median of `iters`):
 *   zero_begin_grads (bookkeeping only) + t5_model_forward_backward (forward with loss and dlogits, backward
 *   writing every parameter gradient), train mode (dropout = the config's 0.1 unless --dropout), stage-0
 *   engine (fp32 master, X working weights, X gradients, or fp32 gradients with --grad-dtype fp32, the
 *   trainer's data_types.grad_accum_dtype "fp32"), mixed precision exactly as the trainer runs it. No optimizer step (this model has none yet in the step). The batch is set once before
 *   timing (random ids in [2, V), no padding, labels = random ids), as a real step finds it already on the GPU.
 *   modes: eager = kernels launched one by one; graph = T5ModelOptions.cuda_graph (captured once, replayed).
 * Peak memory: device memory in use by the process beyond the CUDA context (cudaMemGetInfo, measured at
 * start and after the timed steps; everything is preallocated: engine, activation arena, cuBLASLt workspace).
 * Model FLOPs (docs/benchmarks.md): 6 * (Penc * B*Ts + Pdec * B*Tt + Plm * B*Tt) + attention, where Penc/Pdec
 * are the encoder/decoder stack parameters (blocks + final norm, relative bias included), Plm = V*D, and
 * attention = 12 * B * H * Dk * (L*Ts*Ts + Ld*(Tt*Tt + Tt*Ts)) (QK^T and PV, forward + 2x backward, full
 * squares: the causal half is computed too). MFU = FLOPs / time / 989 TFLOP/s (H100/H200 SXM dense bf16
 * datasheet; --peak-tflops to change).
 * --init fast: the same distributions as t5_weights_init_random (HF _init_weights), generated on every core
 *   (the reference initialiser is single-threaded: ~1 min for t5-3b); --init hf uses t5_weights_init_random.
 * --layers N: override the number of encoder and decoder blocks (profiling a short model of the same shapes).
 * Each row is printed as text and, with --csv, as "model,dtype,B,Ts,Tt,mode,ms_median,ms_min,ms_max,tok_s,
 * mem_gib,act_gib,flops,mfu,loss".
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/base/check.h"
#include "../../cuda/matmul.cuh"
#include "../../model/params.h"
#include "../../model/t5.h"
#include "../../model/t5_config.h"
#include "../../model/t5_weights.h"
#include "../../src/base/common.h"
#include "../../model/zero.h"

typedef struct {
    char models[512], shapes[256], dtypes[64], modes[64], init[16], grad_dtype[16];
    const char* csv;
    int warmup, iters, layers;
    float dropout;  // < 0: the config's
    double peak_tflops;
} Args;

// ---------------------------------------------------------------------------------------------
// random init, same distributions as t5_weights_init_random (HF T5PreTrainedModel._init_weights, factor 1)

static double bench_init_std(const T5Config* c, ParamRole r) {
    const double D = c->d_model, Dk = c->d_kv, H = c->num_heads, F = c->d_ff;
    switch (r) {
        case ROLE_EMBED:
        case ROLE_LM_HEAD: return 1.0;
        case ROLE_SA_Q:
        case ROLE_CA_Q: return pow(D * Dk, -0.5);
        case ROLE_SA_K: case ROLE_SA_V: case ROLE_CA_K: case ROLE_CA_V: return pow(D, -0.5);
        case ROLE_SA_O: case ROLE_CA_O: return pow(H * Dk, -0.5);
        case ROLE_SA_RELBIAS: return pow(D, -0.5);
        case ROLE_FF_WI: case ROLE_FF_WI0: case ROLE_FF_WI1: return pow(D, -0.5);
        case ROLE_FF_WO: return pow(F, -0.5);
        default: return 0.0;  // layer norms: 1
    }
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void bench_init_fast(ZeroEngine* Z, const ParamTable* t, uint64_t seed) {
    size_t maxn = 0;
    for (int u = 0; u < t->num_units; u++) maxn = T5_MAX(maxn, t->units[u].numel);
    float* h = malloc_check(maxn * sizeof(float));
    for (int u = 0; u < t->num_units; u++) {
        const UnitDesc* U = &t->units[u];
        memset(h, 0, U->numel * sizeof(float));
        for (int i = U->first_param; i < U->first_param + U->num_params; i++) {
            const ParamDesc* p = &t->params[i];
            float* dst = h + p->offset;
            const double sd = bench_init_std(&t->cfg, p->role);
            const size_t n = p->numel, chunk = 1 << 16;
#pragma omp parallel for schedule(static)
            for (size_t c0 = 0; c0 < n; c0 += chunk) {
                uint64_t st = mix64(seed ^ mix64(((uint64_t)i << 40) ^ c0));
                for (size_t k = c0; k < T5_MIN(n, c0 + chunk); k += 2) {
                    if (sd == 0.0) {
                        dst[k] = 1.0f;
                        if (k + 1 < n) dst[k + 1] = 1.0f;
                        continue;
                    }
                    st += 0x9E3779B97F4A7C15ull;
                    uint64_t r = mix64(st);
                    float u1 = ((float)(r >> 40) + 0.5f) * (1.0f / 16777216.0f);
                    float u2 = (float)((r >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
                    float rad = (float)sd * sqrtf(-2.0f * logf(u1));
                    dst[k] = rad * cosf(6.2831853f * u2);
                    if (k + 1 < n) dst[k + 1] = rad * sinf(6.2831853f * u2);
                }
            }
        }
        CUDA_CHECK(cudaMemcpy(zero_master(Z, u), h, U->numel * sizeof(float), cudaMemcpyHostToDevice));
    }
    free(h);
}

// ---------------------------------------------------------------------------------------------

static double model_flops(const ParamTable* t, int B, int Ts, int Tt) {
    const T5Config* c = &t->cfg;
    double penc = 0, pdec = 0;
    for (int i = 0; i < t->num_params; i++) {
        if (t->params[i].stack == STACK_ENCODER) penc += (double)t->params[i].numel;
        if (t->params[i].stack == STACK_DECODER) pdec += (double)t->params[i].numel;
    }
    const double plm = (double)c->vocab_size * c->d_model;
    const double attn = 12.0 * B * c->num_heads * c->d_kv *
                        ((double)c->num_layers * Ts * Ts + (double)c->num_decoder_layers * ((double)Tt * Tt + (double)Tt * Ts));
    return 6.0 * (penc * B * Ts + pdec * B * Tt + plm * B * Tt) + attn;
}

static int cmp_float(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

static size_t used_bytes(size_t free0) {
    size_t f = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&f, &tot));
    return free0 > f ? free0 - f : 0;
}

static void bench_one(const Args* a, const ParamTable* t, ZeroEngine* Z, DType dt, int B, int Ts, int Tt, bool graph,
                      size_t free0, FILE* csv, cudaStream_t s) {
    const T5Config* c = &t->cfg;
    char err[1024];
    T5ModelOptions opt = {.max_B = B, .max_Ts = Ts, .max_Tt = Tt, .dtype = dt,
                          .dropout_rate = a->dropout >= 0 ? a->dropout : c->dropout_rate, .cuda_graph = graph};
    T5Model* M = t5_model_create(t, Z, &opt, err, sizeof err);
    if (!M) t5_die(T5_EXIT_FAILURE, "%s", err);
    t5_model_set_train(M, true);
    int* ids = malloc_check((size_t)B * Ts * sizeof(int));
    int* lab = malloc_check((size_t)B * Tt * sizeof(int));
    uint64_t st = 12345;
    for (int i = 0; i < B * Ts; i++) ids[i] = 2 + (int)(mix64(++st) % (uint64_t)(c->vocab_size - 2));
    for (int i = 0; i < B * Tt; i++) lab[i] = 2 + (int)(mix64(++st) % (uint64_t)(c->vocab_size - 2));
    T5Batch batch = {.B = B, .Ts = Ts, .Tt = Tt, .input_ids = ids, .labels = lab};
    if (t5_model_set_batch(M, &batch, s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);

    const int n = a->iters;
    cudaEvent_t* ev = malloc_check((size_t)(n + 1) * sizeof(cudaEvent_t));
    for (int i = 0; i <= n; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    uint64_t seed = 1;
    for (int i = 0; i < a->warmup; i++) {
        zero_begin_grads(Z, s);
        t5_model_forward_backward(M, 1.0f, seed++, s);
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    // back-to-back steps, an event between consecutive ones: step i = ev[i] -> ev[i+1]
    CUDA_CHECK(cudaEventRecord(ev[0], s));
    for (int i = 0; i < n; i++) {
        zero_begin_grads(Z, s);
        t5_model_forward_backward(M, 1.0f, seed++, s);
        CUDA_CHECK(cudaEventRecord(ev[i + 1], s));
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    float* ms = malloc_check((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    qsort(ms, (size_t)n, sizeof(float), cmp_float);
    const double med = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    const float loss = t5_model_loss(M, s);
    const size_t mem = used_bytes(free0);
    const double flops = model_flops(t, B, Ts, Tt);
    const double tok_s = (double)B * (Ts + Tt) / (med * 1e-3);
    const double mfu = flops / (med * 1e-3) / (a->peak_tflops * 1e12);
    const char* mode = graph ? "graph" : "eager";
    printf("%-10s %-5s %2d x (%3d + %3d) %-5s  %9.3f ms (min %8.3f max %8.3f)  %10.0f tok/s  mem %7.2f GiB "
           "(act %6.2f)  %8.3f TFLOP  MFU %5.1f%%  loss %.4f  graphs %d\n",
           c->name, dtype_name(dt), B, Ts, Tt, mode, med, ms[0], ms[n - 1], tok_s, mem / 1073741824.0,
           t5_model_activation_bytes(M) / 1073741824.0, flops / 1e12, 100 * mfu, loss, t5_model_num_graphs(M));
    fflush(stdout);
    if (csv) {
        fprintf(csv, "%s,%s,%d,%d,%d,%s,%.4f,%.4f,%.4f,%.1f,%.4f,%.4f,%.6e,%.5f,%.6f\n", c->name, dtype_name(dt), B, Ts,
                Tt, mode, med, ms[0], ms[n - 1], tok_s, mem / 1073741824.0, t5_model_activation_bytes(M) / 1073741824.0,
                flops, mfu, loss);
        fflush(csv);
    }
    for (int i = 0; i <= n; i++) CUDA_CHECK(cudaEventDestroy(ev[i]));
    free(ev);
    free(ms);
    free(ids);
    free(lab);
    t5_model_destroy(M);
}

static bool in_list(const char* list, const char* item) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
        if (!strcmp(tok, item)) return true;
    return false;
}

int main(int argc, char** argv) {
    Args a = {.models = "t5-small,t5-base,t5-large,t5-3b", .shapes = "1x48x48,8x128x128", .dtypes = "bf16,fp16",
              .modes = "eager,graph", .init = "fast", .grad_dtype = "same", .warmup = 3, .iters = 20, .dropout = -1, .peak_tflops = 989.0};
    for (int i = 1; i < argc; i++) {
        const char* k = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) t5_die(T5_EXIT_USAGE, "bench_t5_step: %s needs a value", k);
        i++;
        if (!strcmp(k, "--models")) snprintf(a.models, sizeof a.models, "%s", v);
        else if (!strcmp(k, "--shapes")) snprintf(a.shapes, sizeof a.shapes, "%s", v);
        else if (!strcmp(k, "--dtypes")) snprintf(a.dtypes, sizeof a.dtypes, "%s", v);
        else if (!strcmp(k, "--modes")) snprintf(a.modes, sizeof a.modes, "%s", v);
        else if (!strcmp(k, "--init")) snprintf(a.init, sizeof a.init, "%s", v);
        else if (!strcmp(k, "--grad-dtype")) snprintf(a.grad_dtype, sizeof a.grad_dtype, "%s", v);
        else if (!strcmp(k, "--warmup")) a.warmup = atoi(v);
        else if (!strcmp(k, "--iters")) a.iters = atoi(v);
        else if (!strcmp(k, "--layers")) a.layers = atoi(v);
        else if (!strcmp(k, "--dropout")) a.dropout = (float)atof(v);
        else if (!strcmp(k, "--peak-tflops")) a.peak_tflops = atof(v);
        else if (!strcmp(k, "--csv")) a.csv = v;
        else t5_die(T5_EXIT_USAGE, "bench_t5_step: unknown option %s", k);
    }
    if (a.iters < 1 || a.warmup < 0) t5_die(T5_EXIT_USAGE, "bench_t5_step: --iters >= 1 and --warmup >= 0");
    if (strcmp(a.init, "fast") && strcmp(a.init, "hf")) t5_die(T5_EXIT_USAGE, "bench_t5_step: --init fast|hf");
    if (strcmp(a.grad_dtype, "same") && strcmp(a.grad_dtype, "fp32"))
        t5_die(T5_EXIT_USAGE, "bench_t5_step: --grad-dtype same|fp32");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) t5_die(T5_EXIT_FAILURE, "bench_t5_step needs a GPU");
    CUDA_CHECK(cudaFree(0));
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    size_t free0 = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    printf("bench_t5_step: %s, %d SMs, %.1f GiB; warmup %d, median of %d; MFU against %.0f TFLOP/s\n", prop.name,
           prop.multiProcessorCount, total / 1073741824.0, a.warmup, a.iters, a.peak_tflops);
    FILE* csv = a.csv ? fopen_check(a.csv, "w") : NULL;
    if (csv)
        fprintf(csv, "model,dtype,B,Ts,Tt,mode,ms_median,ms_min,ms_max,tok_s,mem_gib,act_gib,flops,mfu,loss\n");
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    char mbuf[512];
    snprintf(mbuf, sizeof mbuf, "%s", a.models);
    char* msave = NULL;
    for (char* model = strtok_r(mbuf, ",", &msave); model; model = strtok_r(NULL, ",", &msave)) {
        T5Config cfg;
        if (!t5_config_preset(model, &cfg))
            t5_die(T5_EXIT_USAGE, "bench_t5_step: unknown model %s (presets: %s)", model, t5_config_preset_names());
        if (a.layers > 0) {
            cfg.num_layers = a.layers;
            cfg.num_decoder_layers = a.layers;
        }
        ParamTable t;
        char err[1024];
        if (params_build(&t, &cfg, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
        size_t* numel = malloc_check((size_t)t.num_units * sizeof(size_t));
        const char** names = malloc_check((size_t)t.num_units * sizeof(char*));
        for (int u = 0; u < t.num_units; u++) {
            numel[u] = t.units[u].numel;
            names[u] = t.units[u].name;
        }
        const DType dts[2] = {DT_BF16, DT_F16};
        for (int d = 0; d < 2; d++) {
            if (!in_list(a.dtypes, dtype_name(dts[d]))) continue;
            const DType gdt = strcmp(a.grad_dtype, "fp32") ? dts[d] : DT_F32;
            ZeroEngine* Z = zero_create_ex(0, dts[d], gdt, t.num_units, numel, names, err, sizeof err);
            if (!Z) t5_die(T5_EXIT_FAILURE, "%s", err);
            if (!strcmp(a.init, "hf")) {
                if (t5_weights_init_random(Z, &t, 42, s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
            } else {
                bench_init_fast(Z, &t, 42);
                zero_sync_working(Z, s);
            }
            char sbuf[256];
            snprintf(sbuf, sizeof sbuf, "%s", a.shapes);
            char* ssave = NULL;
            for (char* sh = strtok_r(sbuf, ",", &ssave); sh; sh = strtok_r(NULL, ",", &ssave)) {
                int B, Ts, Tt;
                if (sscanf(sh, "%dx%dx%d", &B, &Ts, &Tt) != 3 || B <= 0 || Ts <= 0 || Tt <= 0)
                    t5_die(T5_EXIT_USAGE, "bench_t5_step: bad shape %s (want BxTsxTt)", sh);
                if (in_list(a.modes, "eager")) bench_one(&a, &t, Z, dts[d], B, Ts, Tt, false, free0, csv, s);
                if (in_list(a.modes, "graph")) bench_one(&a, &t, Z, dts[d], B, Ts, Tt, true, free0, csv, s);
            }
            zero_destroy(Z);
        }
        free(numel);
        free(names);
        params_free(&t);
    }
    if (csv) fclose(csv);
    CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
}
