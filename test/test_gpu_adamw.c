/*
 * test_gpu_adamw.c: cuda/adamw.cu against the CPU scalar path of src/zero/cpu_adam.c on the same inputs.
 * Both perform the same IEEE fp32 operations (explicit FMAs, correctly rounded sqrt and division,
 * round-to-nearest-even 16-bit stores), so master, m, v and the working copies must be bit-identical
 * (tolerance 0: any difference is a bug, not rounding). One plan holds 6 tensors mixing grad dtypes
 * fp32/fp16/bf16, working copies none/fp16/bf16, per-tensor decay, lengths 1, 0, odd and multi-chunk;
 * 4 steps with changing lr, device grad scale (and NULL = 1), AdamW and Adam+L2 modes; then the skip
 * flag must leave every buffer untouched.
 */
#include "t5test.h"

#include <math.h>

#include "../cuda/adamw.cuh"
#include "../src/base/check.h"
#include "../src/zero/cpu_adam.h"

enum { NT = 6 };
static const int64_t lens[NT] = {1000, 4097, 0, 3 * 4096 + 7, 1, 33};
static const DType gdts[NT] = {DT_F32, DT_F16, DT_BF16, DT_BF16, DT_F32, DT_F16};
static const int works[NT] = {DT_F16, DT_BF16, -1, -1, DT_BF16, DT_F16};  // -1: no working copy
static const float wds[NT] = {0.01f, 0.0f, 0.01f, 0.1f, 0.01f, 0.0f};

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static float rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * 0x1p-53) * 2.0f - 1.0f;
}

typedef struct {
    float *p, *m, *v;  // host copies of the CPU reference state
    void* g;
    uint16_t* w;
    float *dp, *dm, *dv;  // device
    void *dg, *dw;
} T;

static void run_mode(bool adamw) {
    T t[NT];
    AdamWTensor list[NT];
    for (int k = 0; k < NT; k++) {
        size_t n = (size_t)lens[k], gs = dtype_size(gdts[k]);
        t[k].p = malloc(n * 4 + 4), t[k].m = calloc(n + 1, 4), t[k].v = calloc(n + 1, 4);
        t[k].g = malloc(n * gs + 4), t[k].w = malloc(n * 2 + 4);
        for (size_t i = 0; i < n; i++) t[k].p[i] = rnd();
        CUDA_CHECK(cudaMalloc((void**)&t[k].dp, n * 4 + 4));
        CUDA_CHECK(cudaMalloc((void**)&t[k].dm, n * 4 + 4));
        CUDA_CHECK(cudaMalloc((void**)&t[k].dv, n * 4 + 4));
        CUDA_CHECK(cudaMalloc(&t[k].dg, n * gs + 4));
        CUDA_CHECK(cudaMalloc(&t[k].dw, n * 2 + 4));
        CUDA_CHECK(cudaMemcpy(t[k].dp, t[k].p, n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(t[k].dm, 0, n * 4 + 4));
        CUDA_CHECK(cudaMemset(t[k].dv, 0, n * 4 + 4));
        list[k] = (AdamWTensor){t[k].dp, t[k].dm, t[k].dv, t[k].dg, works[k] < 0 ? NULL : t[k].dw, lens[k], gdts[k],
                                works[k] < 0 ? DT_F16 : (DType)works[k], wds[k]};
    }
    AdamWPlan* plan = adamw_plan_create(list, NT);
    CpuAdam a;
    cpu_adam_init(&a, 0.9f, 0.999f, 1e-8f, adamw);
    assert_int_equal(cpu_adam_set_simd(&a, CPU_ADAM_SCALAR), 0);
    float* d_scale;
    int* d_skip;
    CUDA_CHECK(cudaMalloc((void**)&d_scale, 4));
    CUDA_CHECK(cudaMalloc((void**)&d_skip, 4));
    for (int s = 1; s <= 5; s++) {
        bool skip = s == 5;
        float lr = 1e-3f / (float)s, gscale = s == 2 ? 1.0f : 1.0f / 1024.0f * (s == 3 ? 0.37f : 1.0f);
        for (int k = 0; k < NT; k++) {
            size_t n = (size_t)lens[k];
            for (size_t i = 0; i < n; i++) {
                float x = rnd() * powf(10.0f, -5.0f + 5.0f * fabsf(rnd())) * 1024.0f;
                if (gdts[k] == DT_F32) ((float*)t[k].g)[i] = x;
                else if (gdts[k] == DT_F16) ((uint16_t*)t[k].g)[i] = cpu_adam_f32_to_f16(x);
                else ((uint16_t*)t[k].g)[i] = cpu_adam_f32_to_bf16(x);
            }
            CUDA_CHECK(cudaMemcpy(t[k].dg, t[k].g, n * dtype_size(gdts[k]), cudaMemcpyHostToDevice));
        }
        if (!skip) cpu_adam_begin_step(&a, s, 0.9f, 0.999f);
        AdamWStepArgs args = {lr, a.beta1, a.beta2, a.eps, a.bias_correction1, a.bias_correction2, adamw};
        int sk = skip ? 1 : 0;
        CUDA_CHECK(cudaMemcpy(d_scale, &gscale, 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_skip, &sk, 4, cudaMemcpyHostToDevice));
        adamw_step(plan, &args, s == 2 ? NULL : d_scale, s == 4 ? NULL : d_skip, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        for (int k = 0; k < NT; k++) {
            size_t n = (size_t)lens[k];
            if (!skip)
                cpu_adam_update(&a, lr, wds[k], t[k].p, t[k].m, t[k].v, t[k].g, gdts[k], gscale,
                                works[k] < 0 ? NULL : t[k].w, works[k] < 0 ? DT_F16 : (DType)works[k], n);
            float* gp = malloc(n * 4 + 4);
            float* gm = malloc(n * 4 + 4);
            float* gv = malloc(n * 4 + 4);
            uint16_t* gw = malloc(n * 2 + 4);
            CUDA_CHECK(cudaMemcpy(gp, t[k].dp, n * 4, cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(gm, t[k].dm, n * 4, cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(gv, t[k].dv, n * 4, cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(gw, t[k].dw, n * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n; i++) {
                if (memcmp(&gp[i], &t[k].p[i], 4) || memcmp(&gm[i], &t[k].m[i], 4) || memcmp(&gv[i], &t[k].v[i], 4))
                    fail_msg("adamw %d step %d tensor %d elem %zu: GPU p %.9g m %.9g v %.9g, CPU p %.9g m %.9g v %.9g",
                             adamw, s, k, i, gp[i], gm[i], gv[i], t[k].p[i], t[k].m[i], t[k].v[i]);
                if (works[k] >= 0 && s < 5 && gw[i] != t[k].w[i])
                    fail_msg("step %d tensor %d elem %zu: working copy 0x%04x, CPU 0x%04x", s, k, i, gw[i], t[k].w[i]);
            }
            free(gp), free(gm), free(gv), free(gw);
        }
    }
    adamw_plan_free(plan);
    CUDA_CHECK(cudaFree(d_scale));
    CUDA_CHECK(cudaFree(d_skip));
    for (int k = 0; k < NT; k++) {
        free(t[k].p), free(t[k].m), free(t[k].v), free(t[k].g), free(t[k].w);
        CUDA_CHECK(cudaFree(t[k].dp));
        CUDA_CHECK(cudaFree(t[k].dm));
        CUDA_CHECK(cudaFree(t[k].dv));
        CUDA_CHECK(cudaFree(t[k].dg));
        CUDA_CHECK(cudaFree(t[k].dw));
    }
}

static void test_adamw_vs_cpu(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    run_mode(true);
}

static void test_adam_l2_vs_cpu(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    run_mode(false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_vs_cpu),
        cmocka_unit_test(test_adam_l2_vs_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
