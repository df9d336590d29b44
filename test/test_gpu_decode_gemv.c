/*
 * test_gpu_decode_gemv.c: cuda/decode_gemv.cu (small-M projections of the decoder step) against an fp64 reference
 * on the stored bf16/fp16 inputs: M = 1..32 rows (NT = 2 tiles of 8 input rows with 4 warps, NT = 4 with 8 warps,
 * padded rows inside the last tile); K = 8 .. 16384, incl. K not a multiple of the stage (64 / 128 k) and chunks
 * shorter than the stages requested ahead; split-K over clusters of 2-8 blocks and no split; N not a multiple of
 * the 64 rows per block; 6 and 4 stages; the ReLU epilogue; fp16; bit-identical repeated calls; and the shapes it
 * refuses.
 */
#include "test_gpu_util.h"

#include "../cuda/decode_gemv.cuh"

static void gemv_case(DType dt, int M, int N, int K, bool relu) {
    const size_t ob = (size_t)M * N * dtype_size(dt);
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
    // a second call into a fresh poisoned buffer: bit-identical (fixed reduction order, counters reset)
    void* od2 = dev_alloc_poisoned(ob);
    decode_gemv(od2, xd, wd, dt, M, N, K, relu, 0);
    unsigned char *b1 = malloc_check(ob), *b2 = malloc_check(ob);
    CUDA_CHECK(cudaMemcpy(b1, od, ob, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b2, od2, ob, cudaMemcpyDeviceToHost));
    assert_memory_equal(b1, b2, ob);
    free(b1), free(b2);
    cudaFree(od2);
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

static void gemv_cases(void) {
    for (int M = 1; M <= 8; M++) gemv_case(DT_BF16, M, 75, 1000, M % 2 == 0);  // every M, K % 256 != 0
    gemv_case(DT_BF16, 1, 100, 1024, false);
    gemv_case(DT_BF16, 4, 100, 1024, true);
    gemv_case(DT_BF16, 8, 37, 2048, false);
    gemv_case(DT_BF16, 6, 70, 2056, true);      // two chunks at least, the last one 8 elements past a chunk
    gemv_case(DT_BF16, 4, 64, 4096, false);
    gemv_case(DT_BF16, 3, 29, 16384, true);     // split-K down to the smallest chunk
    gemv_case(DT_BF16, 8, 1000, 1024, false);   // many column groups, split-K
    gemv_case(DT_BF16, 4, 4100, 1024, true);    // more column groups: fewer splits
    gemv_case(DT_BF16, 4, 17000, 1024, true);   // enough column groups for no split (one warp per K)
    gemv_case(DT_F16, 5, 50, 1024, false);
    gemv_case(DT_F16, 8, 33, 4096, true);
    gemv_case(DT_F16, 2, 40, 8, false);         // one packet of K
    // M = 9..32: two n-tiles (NT = 2, M <= 16) and four (NT = 4), padded rows inside the last tile
    for (int M = 9; M <= 32; M++) gemv_case(DT_BF16, M, 75, 1000, M % 3 == 0);  // every M, K % 256 != 0
    gemv_case(DT_BF16, 9, 100, 1024, false);
    gemv_case(DT_BF16, 16, 100, 1024, true);
    gemv_case(DT_BF16, 17, 37, 2048, false);
    gemv_case(DT_BF16, 24, 70, 2056, true);     // the last chunk 8 elements past a chunk
    gemv_case(DT_BF16, 31, 29, 16384, true);    // split-K down to the smallest chunk
    gemv_case(DT_BF16, 32, 64, 16384, false);   // split-K, every row
    gemv_case(DT_BF16, 32, 1000, 1024, false);  // many column groups, split-K
    gemv_case(DT_BF16, 16, 4100, 1024, true);   // fewer splits
    gemv_case(DT_BF16, 32, 17000, 1024, true);  // no split (one warp per K)
    gemv_case(DT_BF16, 12, 17000, 1024, false);
    gemv_case(DT_F16, 13, 50, 1024, false);
    gemv_case(DT_F16, 32, 33, 4096, true);
    gemv_case(DT_F16, 20, 40, 8, false);        // one packet of K
    // kernel5's stage pipeline: N past its 64-row tile, K of 1..3 stages (fewer than the stages requested ahead),
    // a long chunk (many slot reuses) with no split
    gemv_case(DT_BF16, 32, 130, 64, true);
    gemv_case(DT_BF16, 11, 65, 136, false);
    gemv_case(DT_BF16, 27, 9000, 4096, false);
    gemv_case(DT_BF16, 5, 40000, 128, true);    // more blocks than 6 stages fit in one wave: 4 stages
}

static void test_decode_gemv_matches_reference(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    gemv_cases();
}

static void test_decode_gemv_refuses(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    void* d = dev_alloc_poisoned(1 << 20);
    assert_false(decode_gemv_supported(DT_F32, 4, 16, 1024, d, d, d));   // fp32: cuBLASLt (exact fixtures)
    assert_false(decode_gemv_supported(DT_BF16, 33, 16, 1024, d, d, d));  // more than 32 rows
    assert_false(decode_gemv_supported(DT_BF16, 0, 16, 1024, d, d, d));   // no rows
    assert_false(decode_gemv_supported(DT_BF16, 4, 16, 100, d, d, d));   // K not a multiple of 8
    assert_false(decode_gemv_supported(DT_BF16, 4, 16, 0, d, d, d));     // no K
    assert_false(decode_gemv_supported(DT_BF16, 4, 16, 1024, (char*)d + 2, d, d));  // unaligned
    assert_true(decode_gemv_supported(DT_BF16, 4, 16, 1024, d, d, d));
    assert_true(decode_gemv_supported(DT_BF16, 8, 32128, 1024, d, d, d));  // t5 lm_head
    assert_true(decode_gemv_supported(DT_BF16, 8, 1024, 16384, d, d, d));  // t5-3b feed-forward output
    assert_true(decode_gemv_supported(DT_BF16, 9, 16, 1024, d, d, d));
    assert_true(decode_gemv_supported(DT_BF16, 32, 4096, 1024, d, d, d));  // batch 8 x 4 beams
    cudaFree(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_gemv_matches_reference),
        cmocka_unit_test(test_decode_gemv_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
