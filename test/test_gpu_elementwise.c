/*
 * test_gpu_elementwise.c: cuda/elementwise.cu. cast between every pair of dtypes (round to nearest even,
 * compared bit for bit with the host rounding), scale_inplace, fill, add_inplace (+=), split_heads and
 * merge_heads against index arithmetic (both the 16-byte packet path and the element path), and
 * merge_heads(split_heads(x)) == x.
 */
#include "test_gpu_util.h"

#include "../cuda/elementwise.cuh"

static void test_cast_all_pairs(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const size_t n = 10007;
    TRng rng = {1};
    float* x = host_floats(n);
    for (size_t i = 0; i < n; i++) x[i] = trng_normal(&rng) * (i % 3 == 0 ? 1000.0f : 1.0f);
    x[0] = 65519.0f;  // rounds to 65504 in fp16
    x[1] = 1e-8f;     // fp16 subnormal range
    x[2] = -0.0f;
    float *got = host_floats(n);
    double* ref = host_doubles(n);
    bool ok = true;
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 3; o++) {
            const DType di = ALL_DTYPES[i], dout = ALL_DTYPES[o];
            float* xi = host_floats(n);
            memcpy(xi, x, n * 4);
            host_round_all(di, xi, n);
            void *din = dev_upload(di, xi, n), *dst = dev_alloc_poisoned(n * dtype_size(dout));
            cast(dst, dout, din, di, n, 0);
            dev_download(got, dout, dst, n);
            for (size_t k = 0; k < n; k++) ref[k] = host_round(dout, xi[k]);
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", dtype_name(di), dtype_name(dout));
            ok &= check_close(what, dout, got, ref, n, (Tol){0, 0});
            free(xi);
            CUDA_CHECK(cudaFree(din));
            CUDA_CHECK(cudaFree(dst));
        }
    free(x);
    free(got);
    free(ref);
    assert_true(ok);
}

static void test_scale_fill_add(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const size_t n = 4099;
    TRng rng = {2};
    float *x = host_floats(n), *acc = host_floats(n), *got = host_floats(n);
    double* ref = host_doubles(n);
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        const DType dt = ALL_DTYPES[di];
        fill_uniform(x, n, &rng, -3, 3);
        fill_uniform(acc, n, &rng, -3, 3);
        host_round_all(dt, x, n);
        void *dx = dev_upload(dt, x, n), *dacc = dev_upload(DT_F32, acc, n);
        scale_inplace(dx, dt, n, 0.37f, 0);
        dev_download(got, dt, dx, n);
        for (size_t i = 0; i < n; i++) ref[i] = host_round(dt, x[i] * 0.37f);  // fp32 product rounded once
        ok &= check_close("scale_inplace", dt, got, ref, n, (Tol){0, 0});
        dev_write(dx, dt, x, n);
        add_inplace((float*)dacc, dx, dt, n, 0);
        add_inplace((float*)dacc + 1, (char*)dx + dtype_size(dt), dt, n - 1, 0);  // misaligned: scalar path
        dev_download(got, DT_F32, dacc, n);
        for (size_t i = 0; i < n; i++) ref[i] = (double)acc[i] + x[i] + (i > 0 ? x[i] : 0.0);
        ok &= check_close("add_inplace (+= twice)", DT_F32, got, ref, n, (Tol){1e-6, 1e-6});
        fill(dx, dt, n, -1.25f, 0);
        dev_download(got, dt, dx, n);
        for (size_t i = 0; i < n; i++) ref[i] = -1.25;
        ok &= check_close("fill", dt, got, ref, n, (Tol){0, 0});
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dacc));
    }
    free(x);
    free(acc);
    free(got);
    free(ref);
    assert_true(ok);
}

static void test_split_merge_heads(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const int shapes[][4] = {{2, 5, 3, 64}, {3, 7, 2, 6}};  // (B,T,H,Dk): packet path, element path
    bool ok = true;
    for (size_t s = 0; s < T5_ARRAY_LEN(shapes); s++)
        for (int di = 0; di < 3; di++) {
            const int B = shapes[s][0], T = shapes[s][1], H = shapes[s][2], Dk = shapes[s][3];
            const DType dt = ALL_DTYPES[di];
            const size_t n = (size_t)B * T * H * Dk;
            float *x = host_floats(n), *got = host_floats(n);
            double* ref = host_doubles(n);
            for (size_t i = 0; i < n; i++) x[i] = (float)(i % 2039) - 1000.0f;  // distinct values, rounded to dt below
            host_round_all(dt, x, n);
            void *din = dev_upload(dt, x, n), *dsp = dev_alloc_poisoned(n * dtype_size(dt));
            void* dback = dev_alloc_poisoned(n * dtype_size(dt));
            split_heads(dsp, din, dt, B, T, H, Dk, 0);
            merge_heads(dback, dsp, dt, B, T, H, Dk, 0);
            dev_download(got, dt, dsp, n);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++)
                    for (int t = 0; t < T; t++)
                        for (int d = 0; d < Dk; d++)
                            ref[(((size_t)b * H + h) * T + t) * Dk + d] = x[(((size_t)b * T + t) * H + h) * Dk + d];
            char what[64];
            snprintf(what, sizeof what, "split_heads B%d T%d H%d Dk%d", B, T, H, Dk);
            ok &= check_close(what, dt, got, ref, n, (Tol){0, 0});
            dev_download(got, dt, dback, n);
            for (size_t i = 0; i < n; i++) ref[i] = x[i];
            ok &= check_close("merge_heads(split_heads(x)) == x", dt, got, ref, n, (Tol){0, 0});
            free(x);
            free(got);
            free(ref);
            CUDA_CHECK(cudaFree(din));
            CUDA_CHECK(cudaFree(dsp));
            CUDA_CHECK(cudaFree(dback));
        }
    assert_true(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cast_all_pairs),
        cmocka_unit_test(test_scale_fill_add),
        cmocka_unit_test(test_split_merge_heads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
