/*
 * test_gpu_embedding.c: cuda/embedding.cu. Forward is an exact gather for every table dtype (128-bit
 * and scalar paths); backward dtable += sums the rows of repeated ids (doubles when called twice; the
 * gradient table in the case's dtype, as training keeps it),
 * bit-identical across runs with heavy repetition (the pad id); finite differences.
 */
#include "test_gpu_util.h"

#include "../cuda/embedding.cuh"

static bool emb_case(DType dt, int N, int D, int V, uint64_t seed) {
    TRng rng = {seed};
    int* ids = (int*)calloc((size_t)N, sizeof(int));
    for (int i = 0; i < N; i++) ids[i] = i % 5 == 0 ? 0 : (int)(trng_next(&rng) % (uint64_t)V);  // pad 0 repeats
    ids[N - 1] = V - 1;
    const size_t nt = (size_t)V * D, no = (size_t)N * D;
    float *table = host_floats(nt), *dout = host_floats(no), *dt0 = host_floats(nt), *got = host_floats(nt > no ? nt : no);
    fill_uniform(table, nt, &rng, -1, 1);
    host_round_all(dt, table, nt);
    fill_uniform(dout, no, &rng, -1, 1);
    fill_uniform(dt0, nt, &rng, -1, 1);
    host_round_all(dt, dt0, nt);
    void *d_ids = dev_upload_int(ids, N), *d_table = dev_upload(dt, table, nt), *d_out = dev_alloc_poisoned(no * 4);
    void *d_dout = dev_upload(DT_F32, dout, no), *d_dtable = dev_upload(dt, dt0, nt);
    void* d_scratch = dev_alloc_poisoned(embedding_backward_scratch_bytes(N));
    embedding_forward((float*)d_out, (const int*)d_ids, d_table, dt, N, D, 0);
    embedding_backward(d_dtable, dt, (const float*)d_dout, (const int*)d_ids, N, D, V, d_scratch, 0);
    embedding_backward(d_dtable, dt, (const float*)d_dout, (const int*)d_ids, N, D, V, d_scratch, 0);
    double* ref = host_doubles(nt > no ? nt : no);
    dev_download(got, DT_F32, d_out, no);
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) ref[(size_t)n * D + d] = table[(size_t)ids[n] * D + d];
    char what[64];
    snprintf(what, sizeof what, "embedding fwd N%d D%d V%d", N, D, V);
    bool ok = check_close(what, dt, got, ref, no, (Tol){0, 0});
    dev_download(got, dt, d_dtable, nt);
    for (size_t i = 0; i < nt; i++) ref[i] = dt0[i];
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) ref[(size_t)ids[n] * D + d] += 2.0 * dout[(size_t)n * D + d];
    // two roundings to dt per element (one per call): 2 ulp of the largest partial sum
    const Tol gt = dt == DT_F32 ? (Tol){1e-5, 1e-5} : dt == DT_F16 ? (Tol){2e-3, 2e-3} : (Tol){1.6e-2, 1.6e-2};
    ok &= check_close("embedding dtable (+= twice)", dt, got, ref, nt, gt);
    free(ids);
    free(table);
    free(dout);
    free(dt0);
    free(got);
    free(ref);
    void* p[] = {d_ids, d_table, d_out, d_dout, d_dtable, d_scratch};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
    return ok;
}

static void test_embedding_reference(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        ok &= emb_case(ALL_DTYPES[di], 50, 64, 97, 1 + di);
        ok &= emb_case(ALL_DTYPES[di], 33, 20, 11, 4 + di);       // D % 8 != 0, many repeats
        ok &= emb_case(ALL_DTYPES[di], 1000, 128, 32128, 7 + di);  // T5 vocabulary
    }
    assert_true(ok);
}

static void test_embedding_deterministic_and_fd(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const int N = 4096, D = 256, V = 300;
    TRng rng = {21};
    int* ids = (int*)calloc((size_t)N, sizeof(int));
    for (int i = 0; i < N; i++) ids[i] = i % 2 ? 0 : (int)(trng_next(&rng) % (uint64_t)V);  // half of them pad
    const size_t nt = (size_t)V * D, no = (size_t)N * D;
    float *table = host_floats(nt), *dout = host_floats(no), *a = host_floats(nt), *b = host_floats(nt);
    float *v = host_floats(nt), *tp = host_floats(nt), *out = host_floats(no);
    fill_uniform(table, nt, &rng, -1, 1);
    fill_uniform(dout, no, &rng, -1, 1);
    void *d_ids = dev_upload_int(ids, N), *d_table = dev_upload(DT_F32, table, nt), *d_out = dev_alloc_poisoned(no * 4);
    void *d_dout = dev_upload(DT_F32, dout, no), *d_dtable = dev_alloc_poisoned(nt * 4);
    void* d_scratch = dev_alloc_poisoned(embedding_backward_scratch_bytes(N));
    CUDA_CHECK(cudaMemset(d_dtable, 0, nt * 4));
    embedding_backward(d_dtable, DT_F32, (const float*)d_dout, (const int*)d_ids, N, D, V, d_scratch, 0);
    dev_download(a, DT_F32, d_dtable, nt);
    CUDA_CHECK(cudaMemset(d_dtable, 0, nt * 4));
    embedding_backward(d_dtable, DT_F32, (const float*)d_dout, (const int*)d_ids, N, D, V, d_scratch, 0);
    dev_download(b, DT_F32, d_dtable, nt);
    bool ok = check_equal_bits("embedding dtable twice (2048 pad rows)", a, b, nt);
    // L = sum out * dout is linear in the table: the finite difference must match <dtable, v>
    for (size_t i = 0; i < nt; i++) v[i] = trng_normal(&rng);
    const double eps = 1e-2;
    double L[2];
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < nt; i++) tp[i] = table[i] + (s ? -1.0f : 1.0f) * (float)eps * v[i];
        dev_write(d_table, DT_F32, tp, nt);
        embedding_forward((float*)d_out, (const int*)d_ids, d_table, DT_F32, N, D, 0);
        dev_download(out, DT_F32, d_out, no);
        L[s] = dot_fd(out, dout, no);
    }
    ok &= check_fd("embedding dL/dtable . v", L[0], L[1], eps, dot_fd(a, v, nt), 1e-3);
    free(ids);
    float* bufs[] = {table, dout, a, b, v, tp, out};
    for (size_t i = 0; i < T5_ARRAY_LEN(bufs); i++) free(bufs[i]);
    void* p[] = {d_ids, d_table, d_out, d_dout, d_dtable, d_scratch};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
    assert_true(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_reference),
        cmocka_unit_test(test_embedding_deterministic_and_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
