/*
 * test_gpu_decode_fused.c: cuda/decode_fused.cu (the fused decoder-step kernels of model/generate.c).
 *   decode_add_rmsnorm: bit-identical to the unfused chain it replaces (residual_dropout_add p = 0, rmsnorm_forward
 *     with fp32 weights, scale_inplace, cast), fp32 / bf16 outputs, vector and scalar paths.
 *   decode_attention: against an fp64 reference on the stored inputs (bf16: with the kernel's roundings of the
 *     scores and probabilities modelled): cross-attention with nb = 4 query rows per item and a key mask (one item
 *     with every key but one masked), and self-attention over a cache with the append of the new key/value row at
 *     position t = *pos, the relative-position bias, and untouched cache positions above t; the bulk variant over
 *     every dtype, Dk 32-256, 1-4 rows, 1-512 keys (fully masked rows included) and t5-3b's 1024-pair grid.
 */
#include "test_gpu_util.h"

#include "../cuda/decode_fused.cuh"
#include "../cuda/dropout.cuh"
#include "../cuda/elementwise.cuh"
#include "../cuda/rmsnorm.cuh"

static void add_rmsnorm_case(DType dt_out, int N, int D, float post, bool with_branch) {
    TRng rng = {7 + (uint64_t)D};
    const size_t n = (size_t)N * D;
    float *x = host_floats(n), *br = host_floats(n), *w = host_floats(D);
    fill_uniform(x, n, &rng, -2.0f, 2.0f);
    fill_uniform(br, n, &rng, -1.0f, 1.0f);
    fill_uniform(w, D, &rng, 0.5f, 1.5f);
    const DType dtb = DT_BF16;
    float* xa = dev_upload(DT_F32, x, n);
    float* xb = dev_upload(DT_F32, x, n);
    void* bd = dev_upload(dtb, br, n);
    float* wd = dev_upload(DT_F32, w, D);
    void* oa = dev_alloc_poisoned(n * dtype_size(dt_out));
    void* ob = dev_alloc_poisoned(n * dtype_size(dt_out));
    float* o32 = dev_alloc_poisoned(n * 4);
    float* rstd = dev_alloc_poisoned((size_t)N * 4);
    // unfused chain
    if (with_branch) residual_dropout_add(xa, bd, dtb, n, 0.0f, 0, 0, 0);
    rmsnorm_forward(o32, DT_F32, rstd, xa, wd, DT_F32, N, D, 1e-6f, 0);
    if (post != 1.0f) scale_inplace(o32, DT_F32, n, post, 0);
    cast(oa, dt_out, o32, DT_F32, n, 0);
    // fused
    decode_add_rmsnorm(ob, dt_out, xb, with_branch ? bd : NULL, dtb, wd, N, D, 1e-6f, post, 0);
    float *ha = host_floats(n), *hb = host_floats(n);
    dev_download(ha, dt_out, oa, n);
    dev_download(hb, dt_out, ob, n);
    char what[96];
    snprintf(what, sizeof what, "add_rmsnorm out N %d D %d", N, D);
    assert_true(check_equal_bits(what, ha, hb, n));
    dev_download(ha, DT_F32, xa, n);
    dev_download(hb, DT_F32, xb, n);
    snprintf(what, sizeof what, "add_rmsnorm residual N %d D %d", N, D);
    assert_true(check_equal_bits(what, ha, hb, n));
    cudaFree(xa), cudaFree(xb), cudaFree(bd), cudaFree(wd), cudaFree(oa), cudaFree(ob), cudaFree(o32), cudaFree(rstd);
    free(x), free(br), free(w), free(ha), free(hb);
}

static void test_add_rmsnorm_matches_unfused_chain(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    add_rmsnorm_case(DT_BF16, 5, 1024, 1.0f, true);
    add_rmsnorm_case(DT_BF16, 3, 1024, 1.0f / sqrtf(1024.0f), true);
    add_rmsnorm_case(DT_F32, 4, 512, 1.0f, true);
    add_rmsnorm_case(DT_BF16, 3, 100, 1.0f, true);  // D not a multiple of 8: scalar path
    add_rmsnorm_case(DT_BF16, 2, 768, 1.0f, false);
}

// fp64 reference of one (row, head): scores over keys [0, n), masked keys skipped, bf16 roundings modelled; a row
// with every key masked is uniform 1/n (as attention_softmax_forward)
static void attn_ref(double* out, const float* q, const float* K, const float* V, const float* bias, const int* mask,
                     int n, int Dk, DType dt) {
    double s[512], mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < n; j++) {
        double d = 0.0;
        for (int e = 0; e < Dk; e++) d += (double)q[e] * K[(size_t)j * Dk + e];
        d = host_round(dt, (float)d);
        if (bias) d += bias[j];
        s[j] = mask && !mask[j] ? -INFINITY : d;
        if (s[j] > mx) mx = s[j];
    }
    for (int j = 0; j < n; j++) sum += s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
    for (int e = 0; e < Dk; e++) out[e] = 0.0;
    for (int j = 0; j < n; j++) {
        const double p = host_round(dt, (float)(mx == -INFINITY   ? 1.0 / n
                                                : s[j] == -INFINITY ? 0.0
                                                                    : exp(s[j] - mx) / sum));
        for (int e = 0; e < Dk; e++) out[e] += p * V[(size_t)j * Dk + e];
    }
}

static Tol attn_tol(DType dt) { return dt == DT_F32 ? (Tol){1e-5, 1e-5} : (Tol){2e-2, 2e-2}; }

static const char* impl_name(DecodeAttnImpl k) {
    return k == DA_IMPL_WIDE     ? "wide"
           : k == DA_IMPL_BLOCK  ? "block"
           : k == DA_IMPL_SPLIT  ? "split"
           : k == DA_IMPL_SPLIT1 ? "split1"
           : k == DA_IMPL_BULK   ? "bulk"
                                 : "warp";
}

// I items x H heads; item i keys j < Ts - 7 i unmasked (i < 3; none left when Ts <= 7 i: uniform), item 2 only key 5
// (none when Ts <= 5), items >= 3 every third key masked
static void cross_case_ih(DType dt, DecodeAttnImpl impl, int I, int H, int nb, int Dk, int Ts) {
    const int HD = H * Dk, R = I * nb;
    TRng rng = {11};
    const size_t nq = (size_t)R * HD, nk = (size_t)I * H * Ts * Dk;
    float *q = host_floats(nq), *K = host_floats(nk), *V = host_floats(nk);
    fill_uniform(q, nq, &rng, -1.0f, 1.0f);
    fill_uniform(K, nk, &rng, -1.0f, 1.0f);
    fill_uniform(V, nk, &rng, -1.0f, 1.0f);
    host_round_all(dt, q, nq);
    host_round_all(dt, K, nk);
    host_round_all(dt, V, nk);
    int* mask = calloc((size_t)I * Ts, sizeof(int));
    for (int i = 0; i < I; i++)
        for (int j = 0; j < Ts; j++) mask[i * Ts + j] = i >= 3 ? j % 3 != 1 : i == 2 ? j == 5 : j < Ts - 7 * i;
    void *qd = dev_upload(dt, q, nq), *kd = dev_upload(dt, K, nk), *vd = dev_upload(dt, V, nk);
    int* md = dev_upload_int(mask, (size_t)I * Ts);
    void* cd = dev_alloc_poisoned(nq * dtype_size(dt));
    decode_attention(cd, qd, HD, kd, vd, Ts, NULL, Ts, Ts, NULL, 0, md, NULL, NULL, 0, NULL, 0, I, nb, H, Dk, dt, impl,
                     0);
    float* got = host_floats(nq);
    dev_download(got, dt, cd, nq);
    double* ref = host_doubles(nq);
    float qrow[256];
    for (int i = 0; i < I; i++)
        for (int b = 0; b < nb; b++)
            for (int h = 0; h < H; h++) {
                const int r = i * nb + b;
                for (int e = 0; e < Dk; e++) qrow[e] = q[(size_t)r * HD + h * Dk + e];
                const size_t ko = ((size_t)i * H + h) * Ts * Dk;
                attn_ref(ref + (size_t)r * HD + h * Dk, qrow, K + ko, V + ko, NULL, mask + i * Ts, Ts, Dk, dt);
            }
    char what[112];
    snprintf(what, sizeof what, "decode_attention %s cross %s I %d H %d nb %d Dk %d Ts %d + mask", impl_name(impl),
             dt == DT_F32 ? "fp32" : dt == DT_F16 ? "fp16" : "bf16", I, H, nb, Dk, Ts);
    assert_true(check_close(what, dt, got, ref, nq, attn_tol(dt)));
    cudaFree(qd), cudaFree(kd), cudaFree(vd), cudaFree(md), cudaFree(cd);
    free(q), free(K), free(V), free(mask), free(got), free(ref);
}

static void cross_case(DType dt, DecodeAttnImpl impl, int nb, int Dk, int Ts) {
    cross_case_ih(dt, impl, 3, 2, nb, Dk, Ts);
}

static void self_case(DType dt, int Dk, bool use_hist, DecodeAttnImpl impl, int Tmax, int t) {
    const int R = 3, H = 2, HD = H * Dk;
    TRng rng = {23 + (uint64_t)Dk};
    const size_t nqkv = (size_t)R * 3 * HD, nc = (size_t)R * H * Tmax * Dk;
    float *qkv = host_floats(nqkv), *K = host_floats(nc), *V = host_floats(nc), *bias = host_floats((size_t)H * Tmax);
    fill_uniform(qkv, nqkv, &rng, -1.0f, 1.0f);
    fill_uniform(K, nc, &rng, -1.0f, 1.0f);
    fill_uniform(V, nc, &rng, -1.0f, 1.0f);
    fill_uniform(bias, (size_t)H * Tmax, &rng, -2.0f, 2.0f);
    host_round_all(dt, qkv, nqkv);
    host_round_all(dt, K, nc);
    host_round_all(dt, V, nc);
    void *qd = dev_upload(dt, qkv, nqkv), *kd = dev_upload(dt, K, nc), *vd = dev_upload(dt, V, nc);
    float* bd = dev_upload(DT_F32, bias, (size_t)H * Tmax);
    int* pd = dev_upload_int(&t, 1);
    // hist: key j of row r from cache row (r + j) % R for j < t (beam histories), the new row t from row r
    int* hist = malloc_check(sizeof(int) * (size_t)R * Tmax);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < Tmax; j++) hist[r * Tmax + j] = j < t ? (r + j) % R : r;
    int* hd = dev_upload_int(hist, (size_t)R * Tmax);
    void* cd = dev_alloc_poisoned((size_t)R * HD * dtype_size(dt));
    const size_t xs = dtype_size(dt);
    decode_attention(cd, qd, 3 * HD, kd, vd, Tmax, pd, Tmax, Tmax, bd, Tmax, NULL, (char*)qd + HD * xs,
                     (char*)qd + 2 * HD * xs, 3 * HD, use_hist ? hd : NULL, Tmax, R, 1, H, Dk, dt, impl, 0);
    // the expected caches: position t of every (row, head) = the new k / v
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++)
            for (int e = 0; e < Dk; e++) {
                const size_t c = (((size_t)r * H + h) * Tmax + t) * Dk + e;
                K[c] = qkv[(size_t)r * 3 * HD + HD + h * Dk + e];
                V[c] = qkv[(size_t)r * 3 * HD + 2 * HD + h * Dk + e];
            }
    float* gk = host_floats(nc);
    double* rk = host_doubles(nc);
    dev_download(gk, dt, kd, nc);
    for (size_t i = 0; i < nc; i++) rk[i] = K[i];
    assert_true(check_close("decode_attention append: key cache", dt, gk, rk, nc, (Tol){0, 0}));
    dev_download(gk, dt, vd, nc);
    for (size_t i = 0; i < nc; i++) rk[i] = V[i];
    assert_true(check_close("decode_attention append: value cache", dt, gk, rk, nc, (Tol){0, 0}));
    float* got = host_floats((size_t)R * HD);
    double* ref = host_doubles((size_t)R * HD);
    dev_download(got, dt, cd, (size_t)R * HD);
    float* Kh = host_floats((size_t)Tmax * Dk);
    float* Vh = host_floats((size_t)Tmax * Dk);
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++) {
            for (int j = 0; j <= t; j++) {
                const int pr = use_hist ? hist[r * Tmax + j] : r;
                const size_t ko = (((size_t)pr * H + h) * Tmax + j) * Dk;
                memcpy(Kh + (size_t)j * Dk, K + ko, (size_t)Dk * sizeof(float));
                memcpy(Vh + (size_t)j * Dk, V + ko, (size_t)Dk * sizeof(float));
            }
            attn_ref(ref + (size_t)r * HD + h * Dk, qkv + (size_t)r * 3 * HD + h * Dk, Kh, Vh,
                     bias + (size_t)h * Tmax, NULL, t + 1, Dk, dt);
        }
    free(Kh), free(Vh);
    char what[80];
    snprintf(what, sizeof what, "decode_attention %s self Dk %d t %d%s", impl_name(impl), Dk, t, use_hist ? " hist" : "");
    assert_true(check_close(what, dt, got, ref, (size_t)R * HD, attn_tol(dt)));
    cudaFree(qd), cudaFree(kd), cudaFree(vd), cudaFree(bd), cudaFree(pd), cudaFree(cd), cudaFree(hd);
    free(qkv), free(K), free(V), free(bias), free(gk), free(rk), free(got), free(ref), free(hist);
}

static void test_decode_attention_cross(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    for (int k = DA_IMPL_WIDE; k <= DA_IMPL_BULK; k++) {
        cross_case(DT_F32, (DecodeAttnImpl)k, 4, 64, 37);
        cross_case(DT_BF16, (DecodeAttnImpl)k, 4, 64, 37);
    }
    // the split variant's shapes: 1 and 4 query rows (3 rows run the 4-row template), 1, 2, 4 packets per lane,
    // keys past the rounds loaded before the wait (16 keys per round; 64-128 prefetched)
    cross_case(DT_BF16, DA_IMPL_SPLIT, 1, 128, 150);
    cross_case(DT_BF16, DA_IMPL_SPLIT, 3, 128, 150);
    cross_case(DT_BF16, DA_IMPL_SPLIT, 4, 64, 200);
    cross_case(DT_BF16, DA_IMPL_SPLIT, 1, 256, 70);
    cross_case(DT_F32, DA_IMPL_SPLIT, 1, 128, 90);
    cross_case(DT_F32, DA_IMPL_SPLIT, 4, 32, 130);
    cross_case(DT_BF16, DA_IMPL_WIDE, 1, 128, 150);
    cross_case(DT_BF16, DA_IMPL_SPLIT1, 1, 128, 150);
    cross_case(DT_BF16, DA_IMPL_SPLIT1, 4, 64, 200);
    cross_case(DT_F32, DA_IMPL_SPLIT1, 1, 32, 130);
}

// the bulk variant (K / V staged by bulk copies before the grid wait): every dtype, Dk 64 / 128 / 256 (fp32 also 32),
// 1 and 2-4 query rows, Ts = 1 (every row masked but item 0's key), non-multiples of 8 / 16, beyond one pass of 16
// keys, up to 512 keys (Dk 128 bf16 at 512 keys does not fit shared memory: the fallback), and a grid of 1024 pairs
// (t5-3b's batch-32 cross-attention shape: Ts 63, Dk 128, H 32)
static void test_decode_attention_cross_bulk(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const DType dts[3] = {DT_F32, DT_BF16, DT_F16};
    const int Tss[6] = {1, 7, 17, 37, 63, 150};
    for (int t = 0; t < 3; t++) {
        const DType dt = dts[t];
        for (int k = 0; k < 6; k++) {
            cross_case(dt, DA_IMPL_BULK, 1, 128, Tss[k]);
            cross_case(dt, DA_IMPL_BULK, 4, 64, Tss[k]);
        }
        cross_case(dt, DA_IMPL_BULK, 1, 64, 63);
        cross_case(dt, DA_IMPL_BULK, 1, 256, 45);
        cross_case(dt, DA_IMPL_BULK, 3, 128, 63);
        cross_case(dt, DA_IMPL_BULK, 2, 256, 33);  // bf16/fp16: 2-4 rows at Dk 256 fall back
        cross_case(dt, DA_IMPL_BULK, 1, 64, 512);
        cross_case(dt, DA_IMPL_BULK, 4, 64, 300);
    }
    cross_case(DT_F32, DA_IMPL_BULK, 1, 32, 63);
    cross_case(DT_F32, DA_IMPL_BULK, 4, 32, 100);
    cross_case(DT_BF16, DA_IMPL_BULK, 1, 128, 512);  // 256 KB of K / V: falls back
    cross_case_ih(DT_BF16, DA_IMPL_BULK, 32, 32, 1, 128, 63);
    cross_case_ih(DT_BF16, DA_IMPL_BULK, 32, 32, 4, 128, 63);
    cross_case_ih(DT_F32, DA_IMPL_BULK, 48, 32, 1, 64, 50);
    cross_case_ih(DT_BF16, DA_IMPL_AUTO, 32, 32, 1, 128, 63);  // AUTO's pick for t5-3b batch 32
}

static void test_decode_attention_self_append(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    for (int k = DA_IMPL_WIDE; k <= DA_IMPL_BULK; k++) {  // bulk: cross-attention only (falls back)
        const DecodeAttnImpl impl = (DecodeAttnImpl)k;
        self_case(DT_F32, 128, false, impl, 32, 19);
        self_case(DT_BF16, 128, false, impl, 32, 19);
        self_case(DT_BF16, 64, false, impl, 32, 19);
        self_case(DT_F32, 20, false, impl, 32, 19);  // Dk * 4 not a multiple of 16: scalar loads (warp, split: block/wide)
        self_case(DT_F32, 128, true, impl, 32, 19);
        self_case(DT_BF16, 64, true, impl, 32, 19);
        self_case(DT_BF16, 128, true, impl, 32, 0);  // the first step: only the appended key
    }
    // split: the appended key inside and past the prefetched rounds, histories
    self_case(DT_BF16, 128, false, DA_IMPL_SPLIT, 160, 63);
    self_case(DT_BF16, 128, true, DA_IMPL_SPLIT, 160, 64);
    self_case(DT_BF16, 128, true, DA_IMPL_SPLIT, 160, 140);
    self_case(DT_BF16, 64, true, DA_IMPL_SPLIT, 160, 127);
    self_case(DT_F32, 64, true, DA_IMPL_SPLIT, 160, 150);
    self_case(DT_BF16, 128, true, DA_IMPL_SPLIT1, 160, 140);
    self_case(DT_BF16, 128, false, DA_IMPL_SPLIT1, 160, 15);
    self_case(DT_BF16, 64, true, DA_IMPL_SPLIT1, 160, 16);
}

static void test_decode_attention_fits(void** state) {
    (void)state;
    assert_true(decode_attention_fits(4, 128, 512));
    assert_false(decode_attention_fits(64, 128, 4096));
    assert_false(decode_attention_fits(65, 8, 8));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_rmsnorm_matches_unfused_chain),
        cmocka_unit_test(test_decode_attention_cross),
        cmocka_unit_test(test_decode_attention_cross_bulk),
        cmocka_unit_test(test_decode_attention_self_append),
        cmocka_unit_test(test_decode_attention_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
