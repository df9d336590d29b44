/*
 * test_gpu_decode_gemv.c: cuda/decode_gemv.cu (small-M projections of the decoder step) against an fp64 reference
 * on the stored bf16/fp16 inputs: M = 1, 4, 8 rows; K = 1024, 2048, 4096, 16384 (every split factor); N not a multiple
 * of the columns per block; the ReLU epilogue; and the shapes it refuses.
 */
#include "test_gpu_util.h"

#include "../cuda/decode_gemv.cuh"

static void gemv_case(DType dt, int M, int N, int K, bool relu) {
    TRng rng = {(uint64_t)(M * 131 + N * 7 + K)};
    const size_t ni = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
    float *x = host_floats(ni), *w = host_floats(nw);
    fill_uniform(x, ni, &rng, -1.0f, 1.0f);
    fill_uniform(w, nw, &rng, -1.0f, 1.0f);
    host_round_all(dt, x, ni);
    host_round_all(dt, w, nw);
    void *xd = dev_upload(dt, x, ni), *wd = dev_upload(dt, w, nw);
    void* od = dev_alloc_poisoned(no * dtype_size(dt));
    assert_true(decode_gemv_supported(dt, M, N, K, od, xd, wd));
    decode_gemv(od, xd, wd, dt, M, N, K, relu, 0);
    float* got = host_floats(no);
    dev_download(got, dt, od, no);
    double* ref = host_doubles(no);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) acc += (double)x[(size_t)m * K + k] * w[(size_t)n * K + k];
            ref[(size_t)m * N + n] = relu && acc < 0.0 ? 0.0 : acc;
        }
    char what[96];
    snprintf(what, sizeof what, "decode_gemv M %d N %d K %d%s", M, N, K, relu ? " relu" : "");
    // one rounding of the output to dt, plus fp32 accumulation over K terms of size ~1 (sum ~ sqrt(K))
    const Tol tol = {1e-4 * sqrt((double)K), dt == DT_BF16 ? 8e-3 : 1e-3};
    assert_true(check_close(what, dt, got, ref, no, tol));
    cudaFree(xd), cudaFree(wd), cudaFree(od);
    free(x), free(w), free(got), free(ref);
}

static void test_decode_gemv_matches_reference(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    gemv_case(DT_BF16, 1, 100, 1024, false);
    gemv_case(DT_BF16, 4, 100, 1024, true);
    gemv_case(DT_BF16, 8, 37, 2048, false);
    gemv_case(DT_BF16, 4, 64, 4096, false);
    gemv_case(DT_BF16, 3, 29, 16384, true);
    gemv_case(DT_F16, 5, 50, 1024, false);
}

static void test_decode_gemv_refuses(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    void* d = dev_alloc_poisoned(1 << 20);
    assert_false(decode_gemv_supported(DT_F32, 4, 16, 1024, d, d, d));   // fp32: cuBLASLt (exact fixtures)
    assert_false(decode_gemv_supported(DT_BF16, 9, 16, 1024, d, d, d));  // more than 8 rows
    assert_false(decode_gemv_supported(DT_BF16, 4, 16, 100, d, d, d));   // K not a multiple of 64
    assert_false(decode_gemv_supported(DT_BF16, 4, 16, 1024, (char*)d + 2, d, d));  // unaligned
    assert_true(decode_gemv_supported(DT_BF16, 4, 16, 1024, d, d, d));
    cudaFree(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_gemv_matches_reference),
        cmocka_unit_test(test_decode_gemv_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
