/*
 * test_gpu_activation.c: cuda/activation.cu (relu, gated gelu_new) against fp64 CPU references for
 * every dtype, on the 128-bit path and on misaligned/odd-length views (scalar path), in place, plus
 * central finite differences of the fp32 backward.
 */
#include "test_gpu_util.h"

#include "../cuda/activation.cuh"

static Tol act_tol(DType dt) {
    switch (dt) {
        case DT_F32: return (Tol){1e-6, 1e-5};
        case DT_F16: return (Tol){1e-4, 1e-3};
        default: return (Tol){1e-3, 8e-3};
    }
}

static double gelu_new_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double gelu_new_grad_ref(double x) {
    const double k = sqrt(2.0 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// off = element offset of the view (1 makes every pointer misaligned: scalar path)
static bool act_case(DType dt, size_t n, size_t off, uint64_t seed) {
    TRng rng = {seed};
    const size_t es = dtype_size(dt), N = n + off;
    float *a = host_floats(N), *b = host_floats(N), *g = host_floats(N);
    fill_uniform(a, N, &rng, -4, 4);
    fill_uniform(b, N, &rng, -2, 2);
    fill_uniform(g, N, &rng, -1, 1);
    host_round_all(dt, a, N);
    host_round_all(dt, b, N);
    host_round_all(dt, g, N);
    char *da = dev_upload(dt, a, N), *db = dev_upload(dt, b, N), *dg = dev_upload(dt, g, N);
    char *dout = dev_alloc_poisoned(N * es), *dga = dev_alloc_poisoned(N * es), *dgb = dev_alloc_poisoned(N * es);
    float* got = host_floats(N);
    double* ref = host_doubles(N);
    bool ok = true;
    char what[96];

    relu_forward(dout + off * es, da + off * es, dt, n, 0);
    dev_download(got, dt, dout + off * es, n);
    for (size_t i = 0; i < n; i++) ref[i] = a[off + i] > 0 ? a[off + i] : 0.0;
    snprintf(what, sizeof what, "relu fwd n=%zu off=%zu", n, off);
    ok &= check_close(what, dt, got, ref, n, (Tol){0, 0});
    relu_backward(dga + off * es, dg + off * es, dout + off * es, dt, n, 0);
    dev_download(got, dt, dga + off * es, n);
    for (size_t i = 0; i < n; i++) ref[i] = a[off + i] > 0 ? g[off + i] : 0.0;
    ok &= check_close("relu bwd", dt, got, ref, n, (Tol){0, 0});
    // in place: x -> relu(x), then dout -> dx in place
    char* dinpl = dev_upload(dt, a, N);
    relu_forward(dinpl + off * es, dinpl + off * es, dt, n, 0);
    dev_download(got, dt, dinpl + off * es, n);
    for (size_t i = 0; i < n; i++) ref[i] = a[off + i] > 0 ? a[off + i] : 0.0;
    ok &= check_close("relu fwd in place", dt, got, ref, n, (Tol){0, 0});
    CUDA_CHECK(cudaFree(dinpl));

    gated_gelu_forward(dout + off * es, da + off * es, db + off * es, dt, n, 0);
    dev_download(got, dt, dout + off * es, n);
    for (size_t i = 0; i < n; i++) ref[i] = gelu_new_ref(a[off + i]) * b[off + i];
    snprintf(what, sizeof what, "gated_gelu fwd n=%zu off=%zu", n, off);
    ok &= check_close(what, dt, got, ref, n, act_tol(dt));
    gated_gelu_backward(dga + off * es, dgb + off * es, dg + off * es, da + off * es, db + off * es, dt, n, 0);
    dev_download(got, dt, dga + off * es, n);
    for (size_t i = 0; i < n; i++) ref[i] = g[off + i] * b[off + i] * gelu_new_grad_ref(a[off + i]);
    ok &= check_close("gated_gelu bwd da", dt, got, ref, n, act_tol(dt));
    dev_download(got, dt, dgb + off * es, n);
    for (size_t i = 0; i < n; i++) ref[i] = g[off + i] * gelu_new_ref(a[off + i]);
    ok &= check_close("gated_gelu bwd db", dt, got, ref, n, act_tol(dt));

    free(a);
    free(b);
    free(g);
    free(got);
    free(ref);
    void* p[] = {da, db, dg, dout, dga, dgb};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
    return ok;
}

static void test_activation_reference(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        ok &= act_case(ALL_DTYPES[di], 4096, 0, 1 + di);     // 128-bit path
        ok &= act_case(ALL_DTYPES[di], 1003, 0, 4 + di);     // odd tail
        ok &= act_case(ALL_DTYPES[di], 1000, 1, 7 + di);     // misaligned view: scalar path
        ok &= act_case(ALL_DTYPES[di], 300000, 0, 10 + di);  // several waves of the grid-stride loop
    }
    assert_true(ok);
}

// L = sum out * g; finite differences of the fp32 backward along random directions
static double act_loss(bool gated, void* d_a, void* d_b, void* d_out, const float* a, const float* b, const float* g,
                       size_t n) {
    dev_write(d_a, DT_F32, a, n);
    dev_write(d_b, DT_F32, b, n);
    if (gated) gated_gelu_forward(d_out, d_a, d_b, DT_F32, n, 0);
    else relu_forward(d_out, d_a, DT_F32, n, 0);
    float* out = host_floats(n);
    dev_download(out, DT_F32, d_out, n);
    const double L = dot_fd(out, g, n);
    free(out);
    return L;
}

static void test_activation_finite_differences(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const size_t n = 5000;
    TRng rng = {99};
    float *a = host_floats(n), *b = host_floats(n), *g = host_floats(n), *va = host_floats(n), *vb = host_floats(n);
    float *ap = host_floats(n), *bp = host_floats(n), *ga = host_floats(n), *gb = host_floats(n);
    fill_uniform(a, n, &rng, -3, 3);
    fill_uniform(b, n, &rng, -2, 2);
    fill_uniform(g, n, &rng, -1, 1);
    for (size_t i = 0; i < n; i++) {
        va[i] = trng_normal(&rng);
        vb[i] = trng_normal(&rng);
        if (fabsf(a[i]) < 0.05f) a[i] += 0.1f;  // keep relu's kink out of reach of +-eps
    }
    void *d_a = dev_upload(DT_F32, a, n), *d_b = dev_upload(DT_F32, b, n), *d_g = dev_upload(DT_F32, g, n);
    void *d_out = dev_alloc_poisoned(n * 4), *d_ga = dev_alloc_poisoned(n * 4), *d_gb = dev_alloc_poisoned(n * 4);
    const double eps = 1e-2;
    bool ok = true;
    for (int gated = 0; gated < 2; gated++) {
        // analytic gradients at (a, b)
        act_loss(gated, d_a, d_b, d_out, a, b, g, n);
        if (gated) gated_gelu_backward(d_ga, d_gb, d_g, d_a, d_b, DT_F32, n, 0);
        else relu_backward(d_ga, d_g, d_out, DT_F32, n, 0);
        dev_download(ga, DT_F32, d_ga, n);
        if (gated) dev_download(gb, DT_F32, d_gb, n);
        const double e = eps;
        for (size_t i = 0; i < n; i++) ap[i] = a[i] + (float)e * va[i];
        double Lp = act_loss(gated, d_a, d_b, d_out, ap, b, g, n);
        for (size_t i = 0; i < n; i++) ap[i] = a[i] - (float)e * va[i];
        double Lm = act_loss(gated, d_a, d_b, d_out, ap, b, g, n);
        if (!gated) {
            // relu is piecewise linear: exact unless x +- eps v crosses 0 (|a| >= 0.05 needs |v| > 5 for that)
            ok &= check_fd("relu dL/dx . v", Lp, Lm, e, dot_fd(ga, va, n), 2e-3);
        } else {
            ok &= check_fd("gated_gelu dL/da . v", Lp, Lm, e, dot_fd(ga, va, n), 2e-3);
            for (size_t i = 0; i < n; i++) bp[i] = b[i] + (float)e * vb[i];
            Lp = act_loss(gated, d_a, d_b, d_out, a, bp, g, n);
            for (size_t i = 0; i < n; i++) bp[i] = b[i] - (float)e * vb[i];
            Lm = act_loss(gated, d_a, d_b, d_out, a, bp, g, n);
            ok &= check_fd("gated_gelu dL/db . v", Lp, Lm, e, dot_fd(gb, vb, n), 2e-3);
        }
    }
    float* bufs[] = {a, b, g, va, vb, ap, bp, ga, gb};
    for (size_t i = 0; i < T5_ARRAY_LEN(bufs); i++) free(bufs[i]);
    void* p[] = {d_a, d_b, d_g, d_out, d_ga, d_gb};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
    assert_true(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activation_reference),
        cmocka_unit_test(test_activation_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
