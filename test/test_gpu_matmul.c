/*
 * test_gpu_matmul.c: the cuBLASLt wrapper of cuda/matmul.cu against an fp64 CPU GEMM.
 * Every transpose combination at odd sizes (M=7 N=33 K=40) and a tile-sized one, every input dtype,
 * D in the input dtype and in fp32; strided batches with a broadcast operand; beta = 1 accumulation;
 * the RELU epilogue; linear_forward/linear_backward (dw assigned over poison, then accumulated: doubles; also
 * with 16-bit dw);
 * a misaligned operand is refused with a message naming it.
 * matmul_set_tf32 (HF --tf32): fp32 GEMMs then carry TF32's input rounding (max error relative to max |D| between
 * 2e-5 and 5e-3, where fp32 stays under 1e-5), 16-bit GEMMs give the same bits either way, and turning it off
 * restores full fp32.
 * matmul_batched_ptr (pointer-array batches with explicit leading dimensions): the attention GEMMs on the
 * heads of (B*T, H*Dk) tensors (S = Q K^T into contiguous (B,H,Tq,Tk), P V and P^T Q written into heads,
 * Tq != Tk, Dk 8 and 4 (8-byte aligned 16-bit heads)), every dtype, against the same fp64 reference.
 */
#include <unistd.h>

#include "test_gpu_util.h"

#include "../cuda/matmul.cuh"

// tolerance by (A/B dtype, D dtype); fp32 D keeps fp32 accumulation error only (would fail with TF32)
static Tol matmul_tol(DType dt_ab, DType dt_d) {
    if (dt_d == DT_F32) return dt_ab == DT_F32 ? (Tol){1e-5, 1e-5} : (Tol){5e-5, 1e-5};
    return dt_d == DT_F16 ? (Tol){1e-3, 1e-3} : (Tol){1e-2, 8e-3};
}

// D (M,N) = alpha op(A) op(B) + beta D, fp64
static void ref_gemm(double* D, const float* A, const float* B, int M, int N, int K, bool ta, bool tb, double alpha,
                     double beta) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
                const double a = ta ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
                const double b = tb ? B[(size_t)n * K + k] : B[(size_t)k * N + n];
                s += a * b;
            }
            D[(size_t)m * N + n] = alpha * s + beta * D[(size_t)m * N + n];
        }
}

static bool run_case(int M, int N, int K, bool ta, bool tb, DType dt, DType dt_d, int batch, bool bcast_b,
                     float alpha, float beta, GemmEpilogue epi, uint64_t seed) {
    TRng rng = {seed};
    const size_t na = (size_t)M * K, nb = (size_t)K * N, nd = (size_t)M * N;
    const int batch_b = bcast_b ? 1 : batch;
    float* A = host_floats(na * batch);
    float* B = host_floats(nb * batch_b);
    float* D0 = host_floats(nd * batch);
    float* got = host_floats(nd * batch);
    double* ref = host_doubles(nd * batch);
    fill_uniform(A, na * batch, &rng, -1.0f, 1.0f);
    fill_uniform(B, nb * batch_b, &rng, -1.0f, 1.0f);
    fill_uniform(D0, nd * batch, &rng, -1.0f, 1.0f);
    host_round_all(dt, A, na * batch);
    host_round_all(dt, B, nb * batch_b);
    host_round_all(dt_d, D0, nd * batch);
    void* dA = dev_upload(dt, A, na * batch);
    void* dB = dev_upload(dt, B, nb * batch_b);
    void* dD = beta != 0.0f ? dev_upload(dt_d, D0, nd * batch) : dev_alloc_poisoned(nd * batch * dtype_size(dt_d));

    GemmDesc g;
    memset(&g, 0, sizeof g);
    g.M = M;
    g.N = N;
    g.K = K;
    g.trans_a = ta;
    g.trans_b = tb;
    g.dt_ab = dt;
    g.dt_d = dt_d;
    g.batch = batch;
    g.stride_a = (int64_t)na;
    g.stride_b = bcast_b ? 0 : (int64_t)nb;
    g.stride_d = (int64_t)nd;
    g.alpha = alpha;
    g.beta = beta;
    g.epilogue = epi;
    matmul(&g, dD, dA, dB, 0);
    dev_download(got, dt_d, dD, nd * batch);

    for (int b = 0; b < batch; b++) {
        double* r = ref + (size_t)b * nd;
        for (size_t i = 0; i < nd; i++) r[i] = D0[(size_t)b * nd + i];
        ref_gemm(r, A + (size_t)b * na, B + (size_t)(bcast_b ? 0 : b) * nb, M, N, K, ta, tb, alpha, beta);
        if (epi == GEMM_EPI_RELU)
            for (size_t i = 0; i < nd; i++) r[i] = r[i] > 0 ? r[i] : 0.0;
    }
    char what[128];
    snprintf(what, sizeof what, "gemm %dx%dx%d %c%c b%d%s%s%s D=%s", M, N, K, ta ? 'T' : 'N', tb ? 'T' : 'N', batch,
             bcast_b ? " bcastB" : "", beta != 0.0f ? " beta" : "", epi == GEMM_EPI_RELU ? " relu" : "",
             dtype_name(dt_d));
    const bool ok = check_close(what, dt, got, ref, nd * batch, matmul_tol(dt, dt_d));
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dD));
    free(A);
    free(B);
    free(D0);
    free(got);
    free(ref);
    return ok;
}

static void test_matmul_transposes(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    matmul_init();
    const int sizes[2][3] = {{7, 33, 40}, {64, 128, 256}};
    bool ok = true;
    for (int s = 0; s < 2; s++)
        for (int di = 0; di < 3; di++)
            for (int out32 = 0; out32 < 2; out32++) {
                const DType dt = ALL_DTYPES[di], dt_d = out32 ? DT_F32 : dt;
                if (dt == DT_F32 && !out32) continue;  // fp32 in, fp32 out covered once
                for (int t = 0; t < 4; t++)
                    ok &= run_case(sizes[s][0], sizes[s][1], sizes[s][2], t & 1, t & 2, dt, dt_d, 1, false, 1.0f,
                                   0.0f, GEMM_EPI_NONE, 100 + t + 10 * di);
            }
    assert_true(ok);
}

static void test_matmul_batched_beta(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    matmul_init();
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        const DType dt = ALL_DTYPES[di];
        ok &= run_case(16, 24, 32, false, true, dt, dt, 3, false, 1.0f, 0.0f, GEMM_EPI_NONE, 7);   // Q K^T shape
        ok &= run_case(16, 24, 32, false, false, dt, DT_F32, 3, true, 0.5f, 1.0f, GEMM_EPI_NONE, 8);  // bcast + beta
        ok &= run_case(7, 33, 40, true, false, dt, DT_F32, 2, false, 1.0f, 1.0f, GEMM_EPI_NONE, 9);   // dW += odd
        ok &= run_case(8, 40, 24, true, true, dt, dt, 1, false, 1.0f, 1.0f, GEMM_EPI_NONE, 10);
        ok &= run_case(32, 64, 48, false, true, dt, dt, 1, false, 1.0f, 0.0f, GEMM_EPI_RELU, 11);
    }
    assert_true(ok);
}

// linear layer: out = x W^T; dinp = dout W (assign, then accumulate); dw += dout^T x (twice doubles)
static void test_linear_forward_backward(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    matmul_init();
    const int M = 24, N = 40, K = 56;
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        const DType dt = ALL_DTYPES[di];
        TRng rng = {1234 + di};
        float *x = host_floats((size_t)M * K), *w = host_floats((size_t)N * K), *dout = host_floats((size_t)M * N);
        fill_uniform(x, (size_t)M * K, &rng, -1, 1);
        fill_uniform(w, (size_t)N * K, &rng, -1, 1);
        fill_uniform(dout, (size_t)M * N, &rng, -1, 1);
        host_round_all(dt, x, (size_t)M * K);
        host_round_all(dt, w, (size_t)N * K);
        host_round_all(dt, dout, (size_t)M * N);
        void *dx = dev_upload(dt, x, (size_t)M * K), *dw_ = dev_upload(dt, w, (size_t)N * K);
        void* ddout = dev_upload(dt, dout, (size_t)M * N);
        void* dy = dev_alloc_poisoned((size_t)M * N * dtype_size(dt));
        void* dinp = dev_alloc_poisoned((size_t)M * K * 4);
        void* dwgrad = dev_alloc_poisoned((size_t)N * K * 4);
        void* dwgrad_x = dev_alloc_poisoned((size_t)N * K * dtype_size(dt));

        linear_forward(dy, dt, dx, dw_, dt, M, N, K, 0);
        float* got = host_floats((size_t)M * N);
        double* ref = host_doubles((size_t)N * K > (size_t)M * N ? (size_t)N * K : (size_t)M * N);
        dev_download(got, dt, dy, (size_t)M * N);
        memset(ref, 0, sizeof(double) * (size_t)M * N);
        ref_gemm(ref, x, w, M, N, K, false, true, 1, 0);
        ok &= check_close("linear_forward", dt, got, ref, (size_t)M * N, matmul_tol(dt, dt));
        free(got);

        // dinp in fp32: assigned, then accumulated (doubles)
        got = host_floats((size_t)M * K);
        linear_backward(dinp, DT_F32, false, dwgrad, DT_F32, false, ddout, dx, dw_, dt, M, N, K, 0);
        dev_download(got, DT_F32, dinp, (size_t)M * K);
        memset(ref, 0, sizeof(double) * (size_t)M * K);
        ref_gemm(ref, dout, w, M, K, N, false, false, 1, 0);
        ok &= check_close("linear_backward dinp (=)", dt, got, ref, (size_t)M * K, matmul_tol(dt, DT_F32));
        linear_backward(dinp, DT_F32, true, dwgrad, DT_F32, true, ddout, dx, dw_, dt, M, N, K, 0);
        dev_download(got, DT_F32, dinp, (size_t)M * K);
        for (size_t i = 0; i < (size_t)M * K; i++) ref[i] *= 2;
        ok &= check_close("linear_backward dinp (+=)", dt, got, ref, (size_t)M * K, matmul_tol(dt, DT_F32));
        free(got);

        // dw after (=) then (+=) = 2 dout^T x
        got = host_floats((size_t)N * K);
        dev_download(got, DT_F32, dwgrad, (size_t)N * K);
        memset(ref, 0, sizeof(double) * (size_t)N * K);
        ref_gemm(ref, dout, x, N, K, M, true, false, 2, 0);
        ok &= check_close("linear_backward dw (= then +=)", dt, got, ref, (size_t)N * K, matmul_tol(dt, DT_F32));
        // the same with dw in the input dtype (16-bit gradients, fp32 accumulation in the GEMM)
        linear_backward(NULL, DT_F32, false, dwgrad_x, dt, false, ddout, dx, dw_, dt, M, N, K, 0);
        linear_backward(NULL, DT_F32, false, dwgrad_x, dt, true, ddout, dx, dw_, dt, M, N, K, 0);
        dev_download(got, dt, dwgrad_x, (size_t)N * K);
        ok &= check_close("linear_backward dw in dt (= then +=)", dt, got, ref, (size_t)N * K, matmul_tol(dt, dt));
        free(got);

        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dw_));
        CUDA_CHECK(cudaFree(ddout));
        CUDA_CHECK(cudaFree(dy));
        CUDA_CHECK(cudaFree(dinp));
        CUDA_CHECK(cudaFree(dwgrad));
        CUDA_CHECK(cudaFree(dwgrad_x));
        free(x);
        free(w);
        free(dout);
        free(ref);
    }
    assert_true(ok);
}

// the same shape twice gives bit-identical results (cached plan, no atomics)
static void test_matmul_deterministic(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    matmul_init();
    const int M = 96, N = 64, K = 4096;  // long K: split-K candidates
    TRng rng = {77};
    float* A = host_floats((size_t)K * M);
    float* B = host_floats((size_t)K * N);
    fill_uniform(A, (size_t)K * M, &rng, -1, 1);
    fill_uniform(B, (size_t)K * N, &rng, -1, 1);
    void* dA = dev_upload(DT_BF16, A, (size_t)K * M);
    void* dB = dev_upload(DT_BF16, B, (size_t)K * N);
    void* dD = dev_alloc_poisoned((size_t)M * N * 4);
    float* r1 = host_floats((size_t)M * N);
    float* r2 = host_floats((size_t)M * N);
    GemmDesc g = {.M = M, .N = N, .K = K, .trans_a = true, .trans_b = false, .dt_ab = DT_BF16, .dt_d = DT_F32,
                  .batch = 1, .alpha = 1.0f, .beta = 0.0f, .epilogue = GEMM_EPI_NONE};
    matmul(&g, dD, dA, dB, 0);
    dev_download(r1, DT_F32, dD, (size_t)M * N);
    dev_poison(dD, (size_t)M * N * 4);
    matmul(&g, dD, dA, dB, 0);
    dev_download(r2, DT_F32, dD, (size_t)M * N);
    assert_true(check_equal_bits("gemm twice (dW shape, K=4096)", r1, r2, (size_t)M * N));
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dD));
    free(A);
    free(B);
    free(r1);
    free(r2);
}

// a misaligned operand: one-line error naming the operand, exit 1. Runs this program again with
// T5TEST_MATMUL_MISALIGNED set, so the failing process is a fresh one.
static void matmul_misaligned_child(void) {
    static char buf[256] __attribute__((aligned(256)));
    GemmDesc g = {.M = 4, .N = 8, .K = 8, .dt_ab = DT_F16, .dt_d = DT_F16, .batch = 1, .alpha = 1.0f};
    matmul(&g, buf, buf + 2, buf, 0);  // A is off by 2 bytes: refused before any CUDA call
    exit(0);
}

static void test_matmul_misaligned(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = 0;
    char out[4096];
    int rc = t5test_run(out, sizeof out, "T5TEST_MATMUL_MISALIGNED=1 '%s'", self);
    printf("# child (rc %d) said: %s", rc, out);
    assert_int_equal(rc, 1);
    assert_contains(out, "operand A");
    assert_contains(out, "16-byte aligned");
}

// head h of sequence b of a (Bn*T, H*Dk) tensor, copied out to a packed (T, Dk)
static void heads_extract(float* out, const float* full, int b, int h, int T, int H, int Dk) {
    for (int t = 0; t < T; t++)
        for (int j = 0; j < Dk; j++) out[(size_t)t * Dk + j] = full[((size_t)b * T + t) * H * Dk + (size_t)h * Dk + j];
}

// device array of Bn*H pointers: heads (b*T*H*Dk + h*Dk) or contiguous matrices (i*mat) of elements es bytes
static void** ptrs_upload(void* base, size_t es, int Bn, int H, int T, int Dk, size_t mat) {
    void** h = malloc((size_t)Bn * H * sizeof(void*));
    for (int b = 0; b < Bn; b++)
        for (int hh = 0; hh < H; hh++) {
            const size_t off = mat ? (size_t)(b * H + hh) * mat : (size_t)b * T * H * Dk + (size_t)hh * Dk;
            h[b * H + hh] = (char*)base + off * es;
        }
    void** d = NULL;
    CUDA_CHECK(cudaMalloc((void**)&d, (size_t)Bn * H * sizeof(void*)));
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)Bn * H * sizeof(void*), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// power-of-two alignment (bytes, <= 256) of offsets o1, o2 (0 = none)
static int test_align(size_t o1, size_t o2) {
    int a = 256;
    while (a > 1 && (o1 % (size_t)a || o2 % (size_t)a)) a >>= 1;
    return a;
}

static bool run_heads_case(DType dt, int Bn, int H, int Tq, int Tk, int Dk, uint64_t seed) {
    TRng rng = {seed};
    const int HD = H * Dk, BH = Bn * H;
    const size_t nq = (size_t)Bn * Tq * HD, nk = (size_t)Bn * Tk * HD, np = (size_t)BH * Tq * Tk;
    const size_t es = dtype_size(dt);
    float *Q = host_floats(nq), *Kt = host_floats(nk), *P = host_floats(np);
    fill_uniform(Q, nq, &rng, -1, 1);
    fill_uniform(Kt, nk, &rng, -1, 1);
    fill_uniform(P, np, &rng, -1, 1);
    host_round_all(dt, Q, nq);
    host_round_all(dt, Kt, nk);
    host_round_all(dt, P, np);
    void *dQ = dev_upload(dt, Q, nq), *dK = dev_upload(dt, Kt, nk), *dP = dev_upload(dt, P, np);
    void* dS32 = dev_alloc_poisoned(np * 4);
    void* dSx = dev_alloc_poisoned(np * es);
    void* dC = dev_alloc_poisoned(nq * es);   // (Bn*Tq, HD) = P V
    void* dG = dev_alloc_poisoned(nk * es);   // (Bn*Tk, HD) = P^T Q
    void** pQ = ptrs_upload(dQ, es, Bn, H, Tq, Dk, 0);
    void** pK = ptrs_upload(dK, es, Bn, H, Tk, Dk, 0);
    void** pC = ptrs_upload(dC, es, Bn, H, Tq, Dk, 0);
    void** pG = ptrs_upload(dG, es, Bn, H, Tk, Dk, 0);
    void** pP = ptrs_upload(dP, es, Bn, H, 0, 0, (size_t)Tq * Tk);
    void** pS32 = ptrs_upload(dS32, 4, Bn, H, 0, 0, (size_t)Tq * Tk);
    void** pSx = ptrs_upload(dSx, es, Bn, H, 0, 0, (size_t)Tq * Tk);
    const int al_q = test_align((size_t)Tq * HD * es, (size_t)Dk * es), al_k = test_align((size_t)Tk * HD * es, (size_t)Dk * es);
    const int al_p = test_align((size_t)Tq * Tk * es, 0), al_s32 = test_align((size_t)Tq * Tk * 4, 0);
    bool ok = true;

    // S (BH, Tq, Tk) = Q_i K_i^T, D fp32 and D dt
    GemmDesc g = {.M = Tq, .N = Tk, .K = Dk, .trans_a = false, .trans_b = true, .dt_ab = dt, .dt_d = DT_F32,
                  .batch = BH, .lda = HD, .ldb = HD, .ldd = 0, .alpha = 1.0f, .beta = 0.0f};
    ok &= matmul_batched_ptr_supported(&g, al_q, al_k, al_s32);
    matmul_batched_ptr(&g, pS32, (const void* const*)pQ, (const void* const*)pK, al_q, al_k, al_s32, 0);
    g.dt_d = dt;
    matmul_batched_ptr(&g, pSx, (const void* const*)pQ, (const void* const*)pK, al_q, al_k, al_p, 0);
    // C heads (Tq, Dk) = P_i V_i (V = the K tensor), written into (Bn*Tq, HD)
    GemmDesc gc = {.M = Tq, .N = Dk, .K = Tk, .trans_a = false, .trans_b = false, .dt_ab = dt, .dt_d = dt,
                   .batch = BH, .lda = 0, .ldb = HD, .ldd = HD, .alpha = 1.0f, .beta = 0.0f};
    matmul_batched_ptr(&gc, pC, (const void* const*)pP, (const void* const*)pK, al_p, al_k, al_q, 0);
    // G heads (Tk, Dk) = P_i^T Q_i, written into (Bn*Tk, HD)
    GemmDesc gg = {.M = Tk, .N = Dk, .K = Tq, .trans_a = true, .trans_b = false, .dt_ab = dt, .dt_d = dt,
                   .batch = BH, .lda = 0, .ldb = HD, .ldd = HD, .alpha = 1.0f, .beta = 0.0f};
    matmul_batched_ptr(&gg, pG, (const void* const*)pP, (const void* const*)pQ, al_p, al_q, al_k, 0);

    float *S32 = host_floats(np), *Sx = host_floats(np), *C = host_floats(nq), *G = host_floats(nk);
    dev_download(S32, DT_F32, dS32, np);
    dev_download(Sx, dt, dSx, np);
    dev_download(C, dt, dC, nq);
    dev_download(G, dt, dG, nk);
    double *rS = host_doubles(np), *rC = host_doubles(nq), *rG = host_doubles(nk);
    float *q = host_floats((size_t)Tq * Dk), *k = host_floats((size_t)Tk * Dk);
    double *c = host_doubles((size_t)Tq * Dk), *gk = host_doubles((size_t)Tk * Dk);
    for (int b = 0; b < Bn; b++)
        for (int h = 0; h < H; h++) {
            const int i = b * H + h;
            heads_extract(q, Q, b, h, Tq, H, Dk);
            heads_extract(k, Kt, b, h, Tk, H, Dk);
            double* s = rS + (size_t)i * Tq * Tk;
            memset(s, 0, sizeof(double) * Tq * Tk);
            ref_gemm(s, q, k, Tq, Tk, Dk, false, true, 1, 0);
            memset(c, 0, sizeof(double) * Tq * Dk);
            ref_gemm(c, P + (size_t)i * Tq * Tk, k, Tq, Dk, Tk, false, false, 1, 0);
            memset(gk, 0, sizeof(double) * Tk * Dk);
            ref_gemm(gk, P + (size_t)i * Tq * Tk, q, Tk, Dk, Tq, true, false, 1, 0);
            for (int t = 0; t < Tq; t++)
                for (int j = 0; j < Dk; j++) rC[((size_t)b * Tq + t) * HD + (size_t)h * Dk + j] = c[(size_t)t * Dk + j];
            for (int t = 0; t < Tk; t++)
                for (int j = 0; j < Dk; j++) rG[((size_t)b * Tk + t) * HD + (size_t)h * Dk + j] = gk[(size_t)t * Dk + j];
        }
    char what[128];
    snprintf(what, sizeof what, "ptr-array Q K^T (B%d H%d Tq%d Tk%d Dk%d) D=f32", Bn, H, Tq, Tk, Dk);
    ok &= check_close(what, dt, S32, rS, np, matmul_tol(dt, DT_F32));
    snprintf(what, sizeof what, "ptr-array Q K^T (B%d H%d Tq%d Tk%d Dk%d) D=%s", Bn, H, Tq, Tk, Dk, dtype_name(dt));
    ok &= check_close(what, dt, Sx, rS, np, matmul_tol(dt, dt));
    snprintf(what, sizeof what, "ptr-array P V into heads (B%d H%d Tq%d Tk%d Dk%d)", Bn, H, Tq, Tk, Dk);
    ok &= check_close(what, dt, C, rC, nq, matmul_tol(dt, dt));
    snprintf(what, sizeof what, "ptr-array P^T Q into heads (B%d H%d Tq%d Tk%d Dk%d)", Bn, H, Tq, Tk, Dk);
    ok &= check_close(what, dt, G, rG, nk, matmul_tol(dt, dt));

    void* bufs[] = {dQ, dK, dP, dS32, dSx, dC, dG, pQ, pK, pC, pG, pP, pS32, pSx};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) CUDA_CHECK(cudaFree(bufs[i]));
    float* hf[] = {Q, Kt, P, S32, Sx, C, G, q, k};
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) free(hf[i]);
    free(rS);
    free(rC);
    free(rG);
    free(c);
    free(gk);
    return ok;
}

// max |got - ref| / max |ref| of one (M,N,K) = (64,128,256) NN GEMM in dtype dt (D in dt), inputs uniform [-1, 1]
static double gemm_rel_err(DType dt, float* got) {
    const int M = 64, N = 128, K = 256;
    TRng rng = {77};
    float* A = host_floats((size_t)M * K);
    float* B = host_floats((size_t)K * N);
    double* ref = host_doubles((size_t)M * N);
    fill_uniform(A, (size_t)M * K, &rng, -1.0f, 1.0f);
    fill_uniform(B, (size_t)K * N, &rng, -1.0f, 1.0f);
    host_round_all(dt, A, (size_t)M * K);
    host_round_all(dt, B, (size_t)K * N);
    void* dA = dev_upload(dt, A, (size_t)M * K);
    void* dB = dev_upload(dt, B, (size_t)K * N);
    void* dD = dev_alloc_poisoned((size_t)M * N * dtype_size(dt));
    GemmDesc g;
    memset(&g, 0, sizeof g);
    g.M = M, g.N = N, g.K = K, g.dt_ab = dt, g.dt_d = dt, g.batch = 1, g.alpha = 1.0f;
    matmul(&g, dD, dA, dB, 0);
    dev_download(got, dt, dD, (size_t)M * N);
    for (size_t i = 0; i < (size_t)M * N; i++) ref[i] = 0.0;
    ref_gemm(ref, A, B, M, N, K, false, false, 1.0, 0.0);
    double err = 0.0, mag = 0.0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        err = fmax(err, fabs(got[i] - ref[i]));
        mag = fmax(mag, fabs(ref[i]));
    }
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dD));
    free(A);
    free(B);
    free(ref);
    return err / mag;
}

static void test_matmul_tf32(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    matmul_init();
    const size_t n = 64 * 128;
    float* off16 = host_floats(n);
    float* on16 = host_floats(n);
    float* f32 = host_floats(n);
    const double e_off = gemm_rel_err(DT_F32, f32);
    gemm_rel_err(DT_BF16, off16);
    matmul_set_tf32(true);
    const double e_on = gemm_rel_err(DT_F32, f32);
    gemm_rel_err(DT_BF16, on16);
    matmul_set_tf32(false);
    const double e_back = gemm_rel_err(DT_F32, f32);
    print_message("tf32: fp32 GEMM max error / max |D|: off %.3g, on %.3g, off again %.3g\n", e_off, e_on, e_back);
    assert_true(e_off < 1e-5 && e_back < 1e-5);
    assert_true(e_on > 2e-5 && e_on < 5e-3);
    assert_memory_equal(off16, on16, n * sizeof(float));  // 16-bit GEMMs: the same bits
    free(off16);
    free(on16);
    free(f32);
}

static void test_matmul_batched_ptr_heads(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    matmul_init();
    bool ok = true;
    for (int di = 0; di < 3; di++) {
        const DType dt = ALL_DTYPES[di];
        ok &= run_heads_case(dt, 2, 3, 5, 7, 8, 300 + di);    // cross-attention shape, odd T
        ok &= run_heads_case(dt, 2, 3, 6, 6, 4, 310 + di);    // fixture heads: H 3, Dk 4 (8-byte heads, 24-byte rows)
        ok &= run_heads_case(dt, 2, 4, 48, 40, 64, 320 + di);  // t5 heads (Dk 64)
    }
    assert_true(ok);
}

int main(void) {
    if (getenv("T5TEST_MATMUL_MISALIGNED")) matmul_misaligned_child();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_transposes),       cmocka_unit_test(test_matmul_batched_beta),
        cmocka_unit_test(test_linear_forward_backward), cmocka_unit_test(test_matmul_deterministic),
        cmocka_unit_test(test_matmul_misaligned),       cmocka_unit_test(test_matmul_batched_ptr_heads),
        cmocka_unit_test(test_matmul_tf32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
