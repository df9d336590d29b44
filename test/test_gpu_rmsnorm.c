/*
 * test_gpu_rmsnorm.c: cuda/rmsnorm.cu (T5LayerNorm) against an fp64 CPU reference: forward output and
 * saved rstd for every (weight, output) dtype pair the model uses, the 128-bit path (D % 8 == 0) and
 * the scalar one; backward dx (+=) and dw (= over stale contents, then +=: twice the sum; dw in the output
 * dtype, as the model's gradients are); finite differences of the
 * fp32 path for x and w; bit-identical dw across two runs (deterministic reduction).
 */
#include "test_gpu_util.h"

#include "../cuda/rmsnorm.cuh"

static const float EPS = 1e-6f;

// tolerance by output dtype (the output is rounded once to it; y is rounded to the weight dtype)
static Tol rms_tol(DType dt) {
    switch (dt) {
        case DT_F32: return (Tol){1e-5, 1e-5};
        case DT_F16: return (Tol){1e-3, 2e-3};
        default: return (Tol){1e-2, 1.6e-2};
    }
}

typedef struct {
    int N, D;
    DType dt_w, dt_out, dt_dw;
    bool acc_dw;  // the next rms_backward accumulates into dw
    float *x, *w, *dout, *dx0;  // host inputs (w, dout already rounded to their dtypes)
    void *d_x, *d_w, *d_out, *d_rstd, *d_dout, *d_dx, *d_dw, *d_scratch;
} RmsCase;

static void rms_setup(RmsCase* c, int N, int D, DType dt_w, DType dt_out, DType dt_dw, uint64_t seed) {
    TRng rng = {seed};
    c->dt_dw = dt_dw;
    c->acc_dw = false;
    c->N = N;
    c->D = D;
    c->dt_w = dt_w;
    c->dt_out = dt_out;
    const size_t nd = (size_t)N * D;
    c->x = host_floats(nd);
    c->w = host_floats(D);
    c->dout = host_floats(nd);
    c->dx0 = host_floats(nd);
    for (size_t i = 0; i < nd; i++) c->x[i] = 2.0f * trng_normal(&rng) + 0.3f;
    fill_uniform(c->w, D, &rng, 0.5f, 1.5f);
    fill_uniform(c->dout, nd, &rng, -1.0f, 1.0f);
    fill_uniform(c->dx0, nd, &rng, -1.0f, 1.0f);
    host_round_all(dt_w, c->w, D);
    host_round_all(dt_out, c->dout, nd);
    c->d_x = dev_upload(DT_F32, c->x, nd);
    c->d_w = dev_upload(dt_w, c->w, D);
    c->d_out = dev_alloc_poisoned(nd * dtype_size(dt_out));
    c->d_rstd = dev_alloc_poisoned((size_t)N * 4);
    c->d_dout = dev_upload(dt_out, c->dout, nd);
    c->d_dx = dev_upload(DT_F32, c->dx0, nd);
    c->d_dw = dev_alloc_poisoned((size_t)D * dtype_size(dt_dw));
    c->d_scratch = dev_alloc_poisoned(rmsnorm_backward_scratch_floats(N, D) * 4);
}

static void rms_free(RmsCase* c) {
    free(c->x);
    free(c->w);
    free(c->dout);
    free(c->dx0);
    void* p[] = {c->d_x, c->d_w, c->d_out, c->d_rstd, c->d_dout, c->d_dx, c->d_dw, c->d_scratch};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
}

static void rms_backward(RmsCase* c) {
    rmsnorm_backward((float*)c->d_dx, c->d_dw, c->dt_dw, c->acc_dw, c->d_dout, c->dt_out, (const float*)c->d_x, c->d_w, c->dt_w,
                     (const float*)c->d_rstd, c->N, c->D, (float*)c->d_scratch, 0);
}

// fp64 reference; y is rounded to the weight dtype as the kernel (and HF) does. The rounding of y uses
// the device's fp32 rstd (checked separately against the fp64 one) so that both sides round the same
// fp32 product x * rstd: otherwise values next to a rounding boundary would flip by one 16-bit ulp.
static void rms_reference(const RmsCase* c, const float* rstd_dev, double* out, double* rstd, double* dx, double* dw,
                          int calls) {
    const int N = c->N, D = c->D;
    for (int d = 0; d < D; d++) dw[d] = 0.0;
    for (int n = 0; n < N; n++) {
        const float* x = c->x + (size_t)n * D;
        const float* g = c->dout + (size_t)n * D;
        double ss = 0.0;
        for (int d = 0; d < D; d++) ss += (double)x[d] * x[d];
        const double r = 1.0 / sqrt(ss / D + EPS);
        rstd[n] = r;
        double dot = 0.0;
        for (int d = 0; d < D; d++) dot += (double)g[d] * c->w[d] * x[d];
        for (int d = 0; d < D; d++) {
            const double y = c->dt_w == DT_F32 ? x[d] * r : host_round(c->dt_w, x[d] * rstd_dev[n]);
            out[(size_t)n * D + d] = c->w[d] * y;
            dx[(size_t)n * D + d] = c->dx0[(size_t)n * D + d] + calls * r * ((double)g[d] * c->w[d] - x[d] * r * r * dot / D);
            dw[d] += calls * (double)g[d] * y;
        }
    }
}

static void test_rmsnorm_forward_backward(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const DType pairs[4][2] = {{DT_F32, DT_F32}, {DT_F16, DT_F16}, {DT_BF16, DT_BF16}, {DT_F32, DT_F16}};
    const int Ds[3] = {512, 100, 4096};  // vector path, scalar tail path, one-warp-per-block backward
    bool ok = true;
    for (int di = 0; di < 3; di++)
        for (int p = 0; p < 4; p++) {
            RmsCase c;
            const int N = 37, D = Ds[di];
            rms_setup(&c, N, D, pairs[p][0], pairs[p][1], pairs[p][1], 42 + p + 10 * di);
            const size_t nd = (size_t)N * D;
            rmsnorm_forward(c.d_out, c.dt_out, (float*)c.d_rstd, (const float*)c.d_x, c.d_w, c.dt_w, N, D, EPS, 0);
            rms_backward(&c);  // dw = (over the poison)
            c.acc_dw = true;
            rms_backward(&c);  // dx and dw accumulate
            float *out = host_floats(nd), *rstd = host_floats(N), *dx = host_floats(nd), *dw = host_floats(D);
            dev_download(out, c.dt_out, c.d_out, nd);
            dev_download(rstd, DT_F32, c.d_rstd, N);
            dev_download(dx, DT_F32, c.d_dx, nd);
            dev_download(dw, c.dt_dw, c.d_dw, D);
            double *rout = host_doubles(nd), *rrstd = host_doubles(N), *rdx = host_doubles(nd), *rdw = host_doubles(D);
            rms_reference(&c, rstd, rout, rrstd, rdx, rdw, 2);
            char what[96];
            snprintf(what, sizeof what, "rmsnorm out D=%d w=%s", D, dtype_name(c.dt_w));
            ok &= check_close(what, c.dt_out, out, rout, nd, rms_tol(c.dt_out));
            ok &= check_close("rmsnorm rstd", DT_F32, rstd, rrstd, N, rms_tol(DT_F32));
            // gradients are fp32 math from 16-bit inputs: fp32 accumulation error only
            snprintf(what, sizeof what, "rmsnorm dx (+= twice) D=%d w=%s", D, dtype_name(c.dt_w));
            ok &= check_close(what, c.dt_out, dx, rdx, nd, (Tol){1e-5, 1e-5});
            snprintf(what, sizeof what, "rmsnorm dw (= then +=) D=%d w=%s dw=%s", D, dtype_name(c.dt_w),
                     dtype_name(c.dt_dw));
            // fp32 dw: accumulation error only; 16-bit dw: two roundings (one per call)
            const Tol tdw = c.dt_dw != DT_F32 ? rms_tol(c.dt_dw) : c.dt_w == DT_F32 ? (Tol){1e-4, 1e-5} : (Tol){2e-4, 1e-5};
            ok &= check_close(what, c.dt_dw, dw, rdw, D, tdw);
            free(out);
            free(rstd);
            free(dx);
            free(dw);
            free(rout);
            free(rrstd);
            free(rdx);
            free(rdw);
            rms_free(&c);
        }
    assert_true(ok);
}

// L = sum out * dout; dL/dx and dL/dw from the backward against central differences (fp32 path)
static double rms_loss(RmsCase* c, const float* x, const float* w) {
    const size_t nd = (size_t)c->N * c->D;
    dev_write(c->d_x, DT_F32, x, nd);
    dev_write(c->d_w, DT_F32, w, c->D);
    rmsnorm_forward(c->d_out, DT_F32, (float*)c->d_rstd, (const float*)c->d_x, c->d_w, DT_F32, c->N, c->D, EPS, 0);
    float* out = host_floats(nd);
    dev_download(out, DT_F32, c->d_out, nd);
    const double L = dot_fd(out, c->dout, nd);
    free(out);
    return L;
}

static void test_rmsnorm_finite_differences(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    RmsCase c;
    const int N = 16, D = 256;
    const size_t nd = (size_t)N * D;
    rms_setup(&c, N, D, DT_F32, DT_F32, DT_F32, 9);
    CUDA_CHECK(cudaMemset(c.d_dx, 0, nd * 4));
    rms_loss(&c, c.x, c.w);  // sets rstd
    rms_backward(&c);
    float *dx = host_floats(nd), *dw = host_floats(D), *vx = host_floats(nd), *vw = host_floats(D);
    float *xp = host_floats(nd), *wp = host_floats(D);
    dev_download(dx, DT_F32, c.d_dx, nd);
    dev_download(dw, DT_F32, c.d_dw, D);
    TRng rng = {5};
    for (size_t i = 0; i < nd; i++) vx[i] = trng_normal(&rng);
    for (int i = 0; i < D; i++) vw[i] = trng_normal(&rng);
    const double eps = 1e-2;
    bool ok = true;
    for (size_t i = 0; i < nd; i++) xp[i] = c.x[i] + (float)eps * vx[i];
    double Lp = rms_loss(&c, xp, c.w);
    for (size_t i = 0; i < nd; i++) xp[i] = c.x[i] - (float)eps * vx[i];
    double Lm = rms_loss(&c, xp, c.w);
    ok &= check_fd("rmsnorm dL/dx . v", Lp, Lm, eps, dot_fd(dx, vx, nd), 2e-3);
    for (int i = 0; i < D; i++) wp[i] = c.w[i] + (float)eps * vw[i];
    Lp = rms_loss(&c, c.x, wp);
    for (int i = 0; i < D; i++) wp[i] = c.w[i] - (float)eps * vw[i];
    Lm = rms_loss(&c, c.x, wp);
    ok &= check_fd("rmsnorm dL/dw . v", Lp, Lm, eps, dot_fd(dw, vw, D), 2e-3);
    free(dx);
    free(dw);
    free(vx);
    free(vw);
    free(xp);
    free(wp);
    rms_free(&c);
    assert_true(ok);
}

static void test_rmsnorm_deterministic(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    RmsCase c;
    const int N = 2048, D = 1024;  // many blocks contribute to every dw element
    rms_setup(&c, N, D, DT_BF16, DT_BF16, DT_F32, 11);
    rmsnorm_forward(c.d_out, c.dt_out, (float*)c.d_rstd, (const float*)c.d_x, c.d_w, c.dt_w, N, D, EPS, 0);
    float *a = host_floats(D), *b = host_floats(D);
    rms_backward(&c);
    dev_download(a, DT_F32, c.d_dw, D);
    CUDA_CHECK(cudaMemset(c.d_dw, 0, (size_t)D * 4));
    rms_backward(&c);
    dev_download(b, DT_F32, c.d_dw, D);
    assert_true(check_equal_bits("rmsnorm dw twice (N=2048, D=1024)", a, b, D));
    free(a);
    free(b);
    rms_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_forward_backward),
        cmocka_unit_test(test_rmsnorm_finite_differences),
        cmocka_unit_test(test_rmsnorm_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
