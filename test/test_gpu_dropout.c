/*
 * test_gpu_dropout.c: cuda/dropout.cu. The device RNG is bit-identical to dropout_uniform on the host
 * (masks equal for several p, and the keep decision flips exactly at p = uniform(i)); kept values are
 * x / (1-p), dropped ones exactly 0; the backward regenerates the same mask; (seed, offset) addressing
 * (offset o equals the elements [o, o+n) of offset 0); the residual variants; p = 0 is the identity;
 * the keep rate is 1-p within 5 sigma; every dtype, vector and scalar paths.
 */
#include "test_gpu_util.h"

#include "../cuda/dropout.cuh"

static Tol drop_tol(DType dt) {
    switch (dt) {
        case DT_F32: return (Tol){0, 1e-6};
        case DT_F16: return (Tol){1e-7, 1e-3};  // atol: fp16 subnormals are spaced 6e-8
        default: return (Tol){0, 8e-3};
    }
}

static bool drop_case(DType dt, size_t n, size_t off_elems, float p, uint64_t seed, uint64_t offset) {
    TRng rng = {seed ^ 0x55};
    const size_t es = dtype_size(dt), N = n + off_elems;
    float *x = host_floats(N), *g = host_floats(N), *r0 = host_floats(N), *got = host_floats(N);
    fill_uniform(x, N, &rng, -2, 2);
    fill_uniform(g, N, &rng, -2, 2);
    fill_uniform(r0, N, &rng, -2, 2);
    for (size_t i = 0; i < N; i++)
        if (x[i] == 0.0f) x[i] = 1.0f;  // dropped elements are recognised by 0
    host_round_all(dt, x, N);
    host_round_all(dt, g, N);
    char *dx = dev_upload(dt, x, N), *dg = dev_upload(dt, g, N), *dout = dev_alloc_poisoned(N * es);
    char* dr = dev_upload(DT_F32, r0, N);
    char* dgr = dev_upload(DT_F32, g, N);
    double* ref = host_doubles(N);
    const double scale = 1.0 / (1.0 - p);
    size_t kept = 0;
    bool ok = true;
    char what[96];
    x += off_elems;
    g += off_elems;
    r0 += off_elems;

    dropout_forward(dout + off_elems * es, dx + off_elems * es, dt, n, p, seed, offset, 0);
    dev_download(got, dt, dout + off_elems * es, n);
    for (size_t i = 0; i < n; i++) {
        const bool keep = dropout_uniform(seed, offset + i) >= p;
        kept += keep;
        ref[i] = keep ? x[i] * scale : 0.0;
        if ((got[i] != 0.0f) != keep) {
            if (ok) printf("# mask differs from the host RNG at %zu (u=%.9g p=%g got %g)\n", i,
                           dropout_uniform(seed, offset + i), p, got[i]);
            ok = false;
        }
    }
    snprintf(what, sizeof what, "dropout fwd n=%zu p=%.2f off=%zu", n, p, off_elems);
    ok &= check_close(what, dt, got, ref, n, drop_tol(dt));
    const double sd = sqrt((double)n * p * (1 - p));
    if (fabs((double)(n - kept) - n * p) > 5 * sd + 1) {
        printf("# dropped %zu of %zu, expected %.0f +- %.0f\n", n - kept, n, n * p, sd);
        ok = false;
    }
    dropout_backward(dout + off_elems * es, dg + off_elems * es, dt, n, p, seed, offset, 0);
    dev_download(got, dt, dout + off_elems * es, n);
    for (size_t i = 0; i < n; i++) ref[i] = dropout_uniform(seed, offset + i) >= p ? g[i] * scale : 0.0;
    ok &= check_close("dropout bwd (same mask)", dt, got, ref, n, drop_tol(dt));

    residual_dropout_add((float*)dr + off_elems, dx + off_elems * es, dt, n, p, seed, offset, 0);
    dev_download(got, DT_F32, (float*)dr + off_elems, n);
    for (size_t i = 0; i < n; i++) ref[i] = r0[i] + (dropout_uniform(seed, offset + i) >= p ? x[i] * scale : 0.0);
    ok &= check_close("residual_dropout_add (+=)", DT_F32, got, ref, n, (Tol){1e-6, 1e-6});
    // out of place: out = resid + dropout(x), resid (the in-place result above) unchanged
    float* d_out2 = (float*)dev_alloc_poisoned((n + off_elems) * sizeof(float));
    residual_dropout_add_out(d_out2 + off_elems, (float*)dr + off_elems, dx + off_elems * es, dt, n, p, seed, offset, 0);
    dev_download(got, DT_F32, d_out2 + off_elems, n);
    for (size_t i = 0; i < n; i++) ref[i] += dropout_uniform(seed, offset + i) >= p ? x[i] * scale : 0.0;
    ok &= check_close("residual_dropout_add_out (=)", DT_F32, got, ref, n, (Tol){1e-6, 1e-6});
    CUDA_CHECK(cudaFree(d_out2));
    residual_dropout_backward(dout + off_elems * es, dt, (float*)dgr + off_elems, n, p, seed, offset, 0);
    dev_download(got, dt, dout + off_elems * es, n);
    for (size_t i = 0; i < n; i++) ref[i] = dropout_uniform(seed, offset + i) >= p ? g[i] * scale : 0.0;
    ok &= check_close("residual_dropout_backward", dt, got, ref, n, drop_tol(dt));

    x -= off_elems;
    g -= off_elems;
    r0 -= off_elems;
    free(x);
    free(g);
    free(r0);
    free(got);
    free(ref);
    void* ptrs[] = {dx, dg, dout, dr, dgr};
    for (size_t i = 0; i < T5_ARRAY_LEN(ptrs); i++) CUDA_CHECK(cudaFree(ptrs[i]));
    return ok;
}

static void test_dropout_reference(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    bool ok = true;
    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int di = 0; di < 3; di++)
        for (int pi = 0; pi < 3; pi++) {
            ok &= drop_case(ALL_DTYPES[di], 100000, 0, ps[pi], 1000 + pi, 0);
            ok &= drop_case(ALL_DTYPES[di], 999, 1, ps[pi], 0x123456789abcdefull, (1ull << 33) + 7);  // scalar path
        }
    assert_true(ok);
}

// the keep decision switches exactly at p = uniform(i): only a bit-identical RNG passes this
static void test_dropout_rng_bit_identical(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const uint64_t seed = 0xdeadbeefcafef00dull, offset = 123456789012ull;
    const size_t n = 64;
    float ones[64], got[64];
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    void *dx = dev_upload(DT_F32, ones, n), *dout = dev_alloc_poisoned(n * 4);
    bool ok = true;
    for (size_t i = 0; i < n; i += 7) {
        const float u = dropout_uniform(seed, offset + i);
        if (u <= 0.0f) continue;
        dropout_forward(dout, dx, DT_F32, n, u, seed, offset, 0);  // p = u: element i kept
        dev_download(got, DT_F32, dout, n);
        const bool kept_at = got[i] != 0.0f;
        dropout_forward(dout, dx, DT_F32, n, nextafterf(u, 2.0f), seed, offset, 0);  // just above: dropped
        dev_download(got, DT_F32, dout, n);
        const bool kept_above = got[i] != 0.0f;
        if (!kept_at || kept_above) {
            printf("# element %zu: u = %.9g, kept at p=u: %d, kept at p=u+ulp: %d\n", i, u, kept_at, kept_above);
            ok = false;
        }
    }
    // uniform values are multiples of 2^-24 in [0, 1)
    for (uint64_t c = 0; c < 1000; c++) {
        const float u = dropout_uniform(7, c);
        if (!(u >= 0.0f && u < 1.0f) || u * 16777216.0f != floorf(u * 16777216.0f)) ok = false;
    }
    printf("# dropout RNG: keep decision flips exactly at p = dropout_uniform(i) on the device: %s\n", ok ? "yes" : "NO");
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dout));
    assert_true(ok);
}

// offset addressing, p = 0 identity, seeds differ
static void test_dropout_offsets_and_identity(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const size_t n = 4096, o = 1000;
    float* x = host_floats(n);
    float *a = host_floats(n), *b = host_floats(n);
    TRng rng = {3};
    fill_uniform(x, n, &rng, 0.5f, 1.5f);
    void *dx = dev_upload(DT_F32, x, n), *d1 = dev_alloc_poisoned(n * 4), *d2 = dev_alloc_poisoned(n * 4);
    dropout_forward(d1, dx, DT_F32, n, 0.3f, 42, 0, 0);
    dropout_forward(d2, (float*)dx + o, DT_F32, n - o, 0.3f, 42, o, 0);
    dev_download(a, DT_F32, d1, n);
    dev_download(b, DT_F32, d2, n - o);
    bool ok = check_equal_bits("dropout offset o == tail of offset 0", a + o, b, n - o);
    dropout_forward(d2, dx, DT_F32, n, 0.3f, 43, 0, 0);
    dev_download(b, DT_F32, d2, n);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += (a[i] == 0.0f) == (b[i] == 0.0f);
    printf("# seeds 42 vs 43: %zu of %zu mask entries agree (expected about %.0f)\n", same, n, n * (0.49 + 0.09));
    ok &= same < n * 0.7;
    dropout_forward(d2, dx, DT_F32, n, 0.0f, 42, 0, 0);
    dev_download(b, DT_F32, d2, n);
    ok &= check_equal_bits("dropout p=0 is a copy", x, b, n);
    dropout_forward(dx, dx, DT_F32, n, 0.0f, 42, 0, 0);  // in place p = 0: nothing to do
    dev_download(b, DT_F32, dx, n);
    ok &= check_equal_bits("dropout p=0 in place", x, b, n);
    free(x);
    free(a);
    free(b);
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(d1));
    CUDA_CHECK(cudaFree(d2));
    assert_true(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropout_reference),
        cmocka_unit_test(test_dropout_rng_bit_identical),
        cmocka_unit_test(test_dropout_offsets_and_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
