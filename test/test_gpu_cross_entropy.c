/*
 * test_gpu_cross_entropy.c: cuda/cross_entropy.cu against an fp64 CPU reference with HF semantics:
 * -100 labels ignored (0 loss, 0 gradient rows), mean over the counted tokens, grad_scale on the
 * gradient only; every dtype, V % 8 == 0 (128-bit path) and odd V, the T5 vocabulary; dlogits in place;
 * all labels ignored (loss 0, gradient 0); finite differences of the fp32 loss.
 * Label smoothing (cross_entropy_smoothed_forward_backward, HF's LabelSmoother): the same cases with epsilon 0.1
 * and 0.5 against test/cross_entropy_ref.h (itself checked against a numpy transcription of LabelSmoother by
 * test_label_smoothing.c), finite differences of the smoothed loss, and epsilon 0 equal bit for bit to the plain
 * launcher. A kernel that ignores epsilon misses the loss by >= 1e-2 relative and every gradient entry by eps/(V n).
 */
#include "test_gpu_util.h"

#include "../cuda/cross_entropy.cuh"
#include "cross_entropy_ref.h"

static Tol ce_grad_tol(DType dt) {
    switch (dt) {
        case DT_F32: return (Tol){1e-7, 1e-5};
        case DT_F16: return (Tol){1e-6, 1e-3};
        default: return (Tol){1e-5, 8e-3};
    }
}

static bool ce_case(DType dt, int N, int V, bool all_ignored, bool in_place, float grad_scale, float eps,
                    uint64_t seed) {
    TRng rng = {seed};
    const size_t n = (size_t)N * V;
    float* logits = host_floats(n);
    int* labels = (int*)calloc((size_t)N, sizeof(int));
    for (size_t i = 0; i < n; i++) logits[i] = 3.0f * trng_normal(&rng);
    host_round_all(dt, logits, n);
    for (int i = 0; i < N; i++) labels[i] = (all_ignored || i % 4 == 3) ? -100 : (int)(trng_next(&rng) % (uint64_t)V);
    if (!all_ignored) labels[0] = V - 1;
    void *d_logits = dev_upload(dt, logits, n), *d_labels = dev_upload_int(labels, N);
    void* d_dlogits = in_place ? d_logits : dev_alloc_poisoned(n * dtype_size(dt));
    void *d_loss = dev_alloc_poisoned(4), *d_losses = dev_alloc_poisoned((size_t)N * 4);
    void* d_scratch = dev_alloc_poisoned(cross_entropy_scratch_bytes(N));
    if (eps == 0.0f)
        cross_entropy_forward_backward((float*)d_loss, (float*)d_losses, d_dlogits, d_logits, dt, (const int*)d_labels,
                                       N, V, grad_scale, d_scratch, 0);
    else
        cross_entropy_smoothed_forward_backward((float*)d_loss, (float*)d_losses, d_dlogits, d_logits, dt,
                                                (const int*)d_labels, N, V, grad_scale, eps, d_scratch, 0);
    float loss, *losses = host_floats(N), *dl = host_floats(n);
    dev_download(&loss, DT_F32, d_loss, 1);
    dev_download(losses, DT_F32, d_losses, N);
    dev_download(dl, dt, d_dlogits, n);
    double *rl = host_doubles(N), *rdl = host_doubles(n);
    const double rloss = ce_ref_smoothed(logits, labels, N, V, eps, grad_scale, rl, rdl);
    char what[96];
    snprintf(what, sizeof what, "ce losses N%d V%d eps %g%s%s", N, V, (double)eps, all_ignored ? " all-ignored" : "",
             in_place ? " in-place" : "");
    bool ok = check_close(what, dt, losses, rl, N, (Tol){2e-5, 2e-6});
    ok &= check_close("ce loss (mean over counted)", dt, &loss, &rloss, 1, (Tol){2e-5, 2e-6});
    ok &= check_close("ce dlogits", dt, dl, rdl, n, ce_grad_tol(dt));
    free(logits);
    free(labels);
    free(losses);
    free(dl);
    free(rl);
    free(rdl);
    if (!in_place) CUDA_CHECK(cudaFree(d_dlogits));
    void* p[] = {d_logits, d_labels, d_loss, d_losses, d_scratch};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
    return ok;
}

static void test_cross_entropy_reference(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        const DType dt = ALL_DTYPES[di];
        ok &= ce_case(dt, 9, 1000, false, false, 4.0f, 0.0f, 1 + di);
        ok &= ce_case(dt, 7, 999, false, false, 1.0f, 0.0f, 4 + di);     // odd V: scalar path
        ok &= ce_case(dt, 12, 32128, false, true, 1024.0f, 0.0f, 7 + di);  // T5 vocabulary, in place, fp16 loss scale
        ok &= ce_case(dt, 5, 64, true, false, 1.0f, 0.0f, 10 + di);       // every label ignored
    }
    assert_true(ok);
}

// label smoothing: the same shapes with epsilon 0.1 (the usual recipe) and 0.5
static void test_cross_entropy_label_smoothing_reference(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        const DType dt = ALL_DTYPES[di];
        ok &= ce_case(dt, 9, 1000, false, false, 4.0f, 0.1f, 21 + di);
        ok &= ce_case(dt, 7, 999, false, false, 1.0f, 0.5f, 24 + di);      // odd V: scalar path
        ok &= ce_case(dt, 12, 32128, false, true, 1024.0f, 0.1f, 27 + di);  // T5 vocabulary, in place
        ok &= ce_case(dt, 5, 64, true, false, 1.0f, 0.1f, 30 + di);        // every label ignored: 0, not 0/0
    }
    assert_true(ok);
}

// epsilon 0 through the smoothed launcher is the plain launcher bit for bit (loss, losses, dlogits)
static void test_cross_entropy_smoothing_zero_is_plain(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const int N = 8, V = 1000;
    const size_t n = (size_t)N * V;
    TRng rng = {77};
    float* logits = host_floats(n);
    int labels[8];
    for (size_t i = 0; i < n; i++) logits[i] = 3.0f * trng_normal(&rng);
    for (int i = 0; i < N; i++) labels[i] = i == 3 ? -100 : (int)(trng_next(&rng) % V);
    void *d_logits = dev_upload(DT_F32, logits, n), *d_labels = dev_upload_int(labels, N);
    void *d_scratch = dev_alloc_poisoned(cross_entropy_scratch_bytes(N)), *d_out[2][3];
    for (int r = 0; r < 2; r++) {
        d_out[r][0] = dev_alloc_poisoned(4);
        d_out[r][1] = dev_alloc_poisoned((size_t)N * 4);
        d_out[r][2] = dev_alloc_poisoned(n * 4);
    }
    cross_entropy_forward_backward((float*)d_out[0][0], (float*)d_out[0][1], d_out[0][2], d_logits, DT_F32,
                                   (const int*)d_labels, N, V, 2.0f, d_scratch, 0);
    cross_entropy_smoothed_forward_backward((float*)d_out[1][0], (float*)d_out[1][1], d_out[1][2], d_logits, DT_F32,
                                            (const int*)d_labels, N, V, 2.0f, 0.0f, d_scratch, 0);
    const size_t bytes[3] = {4, (size_t)N * 4, n * 4};
    bool same = true;
    for (int j = 0; j < 3; j++) {
        char *a = (char*)malloc(bytes[j]), *b = (char*)malloc(bytes[j]);
        CUDA_CHECK(cudaMemcpy(a, d_out[0][j], bytes[j], cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b, d_out[1][j], bytes[j], cudaMemcpyDeviceToHost));
        same &= memcmp(a, b, bytes[j]) == 0;
        free(a);
        free(b);
        for (int r = 0; r < 2; r++) CUDA_CHECK(cudaFree(d_out[r][j]));
    }
    printf("# epsilon 0 vs plain launcher: %s\n", same ? "bit-identical" : "DIFFERENT");
    free(logits);
    void* p[] = {d_logits, d_labels, d_scratch};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
    assert_true(same);
}

// L = mean loss (fp32 path): finite differences of the losses against <dlogits, v>
static double ce_loss(void* d_logits, const float* logits, size_t n, void* d_labels, void* d_losses, void* d_scratch,
                      int N, int V, int count, float eps) {
    dev_write(d_logits, DT_F32, logits, n);
    cross_entropy_smoothed_forward_backward(NULL, (float*)d_losses, NULL, d_logits, DT_F32, (const int*)d_labels, N, V,
                                            1.0f, eps, d_scratch, 0);
    float* l = host_floats(N);
    dev_download(l, DT_F32, d_losses, N);
    double s = 0.0;
    for (int i = 0; i < N; i++) s += l[i];
    free(l);
    return s / count;
}

static bool ce_fd_case(float ls) {
    const int N = 10, V = 500;
    const size_t n = (size_t)N * V;
    TRng rng = {31};
    float *logits = host_floats(n), *v = host_floats(n), *xp = host_floats(n), *dl = host_floats(n);
    int labels[10];
    int count = 0;
    for (size_t i = 0; i < n; i++) logits[i] = 2.0f * trng_normal(&rng);
    for (size_t i = 0; i < n; i++) v[i] = trng_normal(&rng);
    for (int i = 0; i < N; i++) {
        labels[i] = i == 2 ? -100 : (int)(trng_next(&rng) % V);
        count += labels[i] != -100;
    }
    void *d_logits = dev_upload(DT_F32, logits, n), *d_labels = dev_upload_int(labels, N);
    void *d_losses = dev_alloc_poisoned((size_t)N * 4), *d_scratch = dev_alloc_poisoned(cross_entropy_scratch_bytes(N));
    void* d_dl = dev_alloc_poisoned(n * 4);
    cross_entropy_smoothed_forward_backward(NULL, (float*)d_losses, d_dl, d_logits, DT_F32, (const int*)d_labels, N, V,
                                            1.0f, ls, d_scratch, 0);
    dev_download(dl, DT_F32, d_dl, n);
    const double eps = 1e-2;
    for (size_t i = 0; i < n; i++) xp[i] = logits[i] + (float)eps * v[i];
    const double Lp = ce_loss(d_logits, xp, n, d_labels, d_losses, d_scratch, N, V, count, ls);
    for (size_t i = 0; i < n; i++) xp[i] = logits[i] - (float)eps * v[i];
    const double Lm = ce_loss(d_logits, xp, n, d_labels, d_losses, d_scratch, N, V, count, ls);
    char what[80];
    snprintf(what, sizeof what, "cross_entropy (smoothing %g) dL/dlogits . v", (double)ls);
    const bool ok = check_fd(what, Lp, Lm, eps, dot_fd(dl, v, n), 2e-3);
    free(logits);
    free(v);
    free(xp);
    free(dl);
    void* p[] = {d_logits, d_labels, d_losses, d_scratch, d_dl};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
    return ok;
}

static void test_cross_entropy_finite_differences(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    bool ok = ce_fd_case(0.0f);
    ok &= ce_fd_case(0.1f);
    ok &= ce_fd_case(0.5f);
    assert_true(ok);
}

// a label outside [0,V) that is not -100: that row's loss and the mean are NaN (visible), the others stay
static void test_cross_entropy_bad_label(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const int N = 3, V = 16;
    float logits[48];
    for (int i = 0; i < N * V; i++) logits[i] = (float)(i % 7) * 0.25f;
    const int labels[3] = {2, V, -100};
    void *d_logits = dev_upload(DT_F32, logits, (size_t)N * V), *d_labels = dev_upload_int(labels, N);
    void *d_loss = dev_alloc_poisoned(4), *d_losses = dev_alloc_poisoned(N * 4);
    void* d_scratch = dev_alloc_poisoned(cross_entropy_scratch_bytes(N));
    cross_entropy_forward_backward((float*)d_loss, (float*)d_losses, NULL, d_logits, DT_F32, (const int*)d_labels, N, V,
                                   1.0f, d_scratch, 0);
    float loss, losses[3];
    dev_download(&loss, DT_F32, d_loss, 1);
    dev_download(losses, DT_F32, d_losses, N);
    printf("# bad label: losses %g %g %g, loss %g\n", losses[0], losses[1], losses[2], loss);
    assert_true(isfinite(losses[0]) && losses[0] > 0.0f);
    assert_true(isnan(losses[1]));
    assert_true(losses[2] == 0.0f);
    assert_true(isnan(loss));
    void* p[] = {d_logits, d_labels, d_loss, d_losses, d_scratch};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_entropy_reference),
        cmocka_unit_test(test_cross_entropy_label_smoothing_reference),
        cmocka_unit_test(test_cross_entropy_smoothing_zero_is_plain),
        cmocka_unit_test(test_cross_entropy_bad_label),
        cmocka_unit_test(test_cross_entropy_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
