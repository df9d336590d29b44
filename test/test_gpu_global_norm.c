/*
 * test_gpu_global_norm.c: cuda/global_norm.cu against a CPU fp64 reference on the same inputs.
 *  - norm2 of 5 buffers (fp32, fp16, bf16; odd lengths; one empty; one spanning many chunks): the device
 *    sums fp64 squares in another order than the CPU, which changes the fp64 sum by < n * 2^-53
 *    relative (~1e-10 here), far below one fp32 ulp; so the fp32 result must be within 1 ulp of the
 *    CPU sum rounded to fp32 (|d| <= 2^-23 |ref|);
 *  - the overflow flag for an inf in an fp32 buffer and a NaN in an fp16 buffer, 0 otherwise;
 *  - determinism: two runs give identical bits;
 *  - global_norm_clip_scale bit-identical to ds_grad_inv_scale (src/train/grad_clip.c) for several loss
 *    scales and clips, and the -1 norm convention under overflow.
 */
#include "t5test.h"

#include <math.h>

#include "../src/base/check.h"
#include "../cuda/global_norm.cuh"
#include "../src/zero/cpu_adam.h"
#include "../src/train/grad_clip.h"

enum { NB = 5 };
static const int64_t lens[NB] = {1, 8191, 0, 100003, 3 * 8192 + 5};
static const DType dts[NB] = {DT_F32, DT_F16, DT_BF16, DT_BF16, DT_F32};

static uint64_t rs = 88172645463325252ull;
static float rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * 0x1p-53) * 2.0f - 1.0f;
}

typedef struct {
    void* host[NB];
    void* dev[NB];
    GradBuffer bufs[NB];
} Grads;

static void grads_make(Grads* G) {
    for (int b = 0; b < NB; b++) {
        size_t es = dtype_size(dts[b]), n = (size_t)lens[b];
        G->host[b] = malloc(n * es + 1);
        for (size_t i = 0; i < n; i++) {
            float x = rnd() * powf(10.0f, 3.0f * rnd());  // up to 1e3: squares well inside fp16/fp32
            if (dts[b] == DT_F32) ((float*)G->host[b])[i] = x;
            else if (dts[b] == DT_F16) ((uint16_t*)G->host[b])[i] = cpu_adam_f32_to_f16(x);
            else ((uint16_t*)G->host[b])[i] = cpu_adam_f32_to_bf16(x);
        }
        CUDA_CHECK(cudaMalloc(&G->dev[b], n * es + 1));
        CUDA_CHECK(cudaMemcpy(G->dev[b], G->host[b], n * es, cudaMemcpyHostToDevice));
        G->bufs[b] = (GradBuffer){G->dev[b], lens[b], dts[b]};
    }
}

static double cpu_norm2(Grads* G) {
    double s = 0.0;
    for (int b = 0; b < NB; b++)
        for (int64_t i = 0; i < lens[b]; i++) {
            float x = dts[b] == DT_F32   ? ((float*)G->host[b])[i]
                      : dts[b] == DT_F16 ? cpu_adam_f16_to_f32(((uint16_t*)G->host[b])[i])
                                         : cpu_adam_bf16_to_f32(((uint16_t*)G->host[b])[i]);
            s += (double)x * x;
        }
    return s;
}

static void run(GlobalNormPlan* plan, float* norm2, int* ovf) {
    float* d_n;
    int* d_o;
    CUDA_CHECK(cudaMalloc((void**)&d_n, 4));
    CUDA_CHECK(cudaMalloc((void**)&d_o, 4));
    CUDA_CHECK(cudaMemset(d_o, 0x55, 4));
    global_norm_compute(plan, d_n, d_o, 0);
    CUDA_CHECK(cudaMemcpy(norm2, d_n, 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ovf, d_o, 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_n));
    CUDA_CHECK(cudaFree(d_o));
}

static void test_norm_and_overflow(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    Grads G;
    grads_make(&G);
    GlobalNormPlan* plan = global_norm_plan_create(G.bufs, NB);
    float n2, n2b;
    int ovf;
    run(plan, &n2, &ovf);
    double ref = cpu_norm2(&G);
    float reff = (float)ref;
    print_message("# norm2 %.9g, CPU fp64 %.17g\n", n2, ref);
    if (fabs((double)n2 - reff) > fabs(reff) * 0x1p-23) fail_msg("norm2 %.9g vs CPU %.9g", n2, reff);
    assert_int_equal(ovf, 0);
    run(plan, &n2b, &ovf);
    assert_memory_equal(&n2, &n2b, 4);  // deterministic
    // an inf in buffer 4 (fp32), then a NaN in buffer 1 (fp16) instead
    float inf = INFINITY;
    CUDA_CHECK(cudaMemcpy((float*)G.dev[4] + 7, &inf, 4, cudaMemcpyHostToDevice));
    run(plan, &n2, &ovf);
    assert_int_equal(ovf, 1);
    CUDA_CHECK(cudaMemcpy(G.dev[4], G.host[4], (size_t)lens[4] * 4, cudaMemcpyHostToDevice));
    uint16_t hnan = 0x7e00;
    CUDA_CHECK(cudaMemcpy((uint16_t*)G.dev[1] + 8190, &hnan, 2, cudaMemcpyHostToDevice));
    run(plan, &n2, &ovf);
    assert_int_equal(ovf, 1);
    CUDA_CHECK(cudaMemcpy(G.dev[1], G.host[1], (size_t)lens[1] * 2, cudaMemcpyHostToDevice));
    run(plan, &n2, &ovf);
    assert_int_equal(ovf, 0);
    global_norm_plan_free(plan);
    for (int b = 0; b < NB; b++) {
        CUDA_CHECK(cudaFree(G.dev[b]));
        free(G.host[b]);
    }
}

static void test_clip_scale(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const float norm2s[] = {0.09f, 9.0f, 2.6843546e10f, 1e18f, 1234.5f};
    const float scales[] = {1.0f, 1024.0f, 65536.0f, 4294967296.0f};
    const float clips[] = {0.0f, 1.0f, 0.5f};
    float *d_n2, *d_inv, *d_norm;
    int* d_o;
    CUDA_CHECK(cudaMalloc((void**)&d_n2, 4));
    CUDA_CHECK(cudaMalloc((void**)&d_inv, 4));
    CUDA_CHECK(cudaMalloc((void**)&d_norm, 4));
    CUDA_CHECK(cudaMalloc((void**)&d_o, 4));
    for (int ov = 0; ov < 2; ov++)
        for (size_t a = 0; a < sizeof norm2s / 4; a++)
            for (size_t b = 0; b < sizeof scales / 4; b++)
                for (size_t c = 0; c < sizeof clips / 4; c++) {
                    CUDA_CHECK(cudaMemcpy(d_n2, &norm2s[a], 4, cudaMemcpyHostToDevice));
                    CUDA_CHECK(cudaMemcpy(d_o, &ov, 4, cudaMemcpyHostToDevice));
                    global_norm_clip_scale(d_n2, d_o, scales[b], clips[c], d_inv, d_norm, 0);
                    float inv, norm;
                    CUDA_CHECK(cudaMemcpy(&inv, d_inv, 4, cudaMemcpyDeviceToHost));
                    CUDA_CHECK(cudaMemcpy(&norm, d_norm, 4, cudaMemcpyDeviceToHost));
                    float want_norm = ov ? -1.0f : sqrtf(norm2s[a]);
                    float want = ds_grad_inv_scale(want_norm, scales[b], clips[c]);
                    if (memcmp(&norm, &want_norm, 4) || memcmp(&inv, &want, 4))
                        fail_msg("norm2 %g scale %g clip %g overflow %d: norm %.9g inv %.9g, CPU %.9g %.9g", norm2s[a],
                                 scales[b], clips[c], ov, norm, inv, want_norm, want);
                }
    CUDA_CHECK(cudaFree(d_n2));
    CUDA_CHECK(cudaFree(d_inv));
    CUDA_CHECK(cudaFree(d_norm));
    CUDA_CHECK(cudaFree(d_o));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norm_and_overflow),
        cmocka_unit_test(test_clip_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
