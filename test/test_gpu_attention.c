/*
 * test_gpu_attention.c: cuda/attention_softmax.cu against an fp64 CPU reference.
 * Forward with bias, padding mask, causal mask with q_offset, a fully masked row (uniform), dropout
 * (mask regenerated on the host with dropout_uniform); backward dscores (=) and dbias (+=, doubles
 * when called twice); central finite differences of the fp32 path (with dropout) for scores and bias.
 */
#include "test_gpu_util.h"

#include "../cuda/attention_softmax.cuh"
#include "../cuda/dropout.cuh"

static Tol attn_tol(DType dt) {
    switch (dt) {
        case DT_F32: return (Tol){1e-6, 1e-5};
        case DT_F16: return (Tol){1e-4, 1e-3};
        default: return (Tol){1e-3, 8e-3};
    }
}

typedef struct {
    int B, H, Tq, Tk, q_offset;
    bool causal, use_bias, use_mask;
    float p;
    uint64_t seed, offset;
} AttnShape;

static bool attn_masked(const AttnShape* s, const int* mask, int b, int q, int k) {
    return (s->use_mask && mask[b * s->Tk + k] == 0) || (s->causal && k > q + s->q_offset);
}

static void attn_ref_forward(const AttnShape* s, double* probs, const float* scores, const float* bias, const int* mask) {
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++)
            for (int q = 0; q < s->Tq; q++) {
                const size_t r = (((size_t)b * s->H + h) * s->Tq + q) * s->Tk;
                double mx = -INFINITY, sum = 0.0;
                for (int k = 0; k < s->Tk; k++)
                    if (!attn_masked(s, mask, b, q, k))
                        mx = fmax(mx, scores[r + k] + (s->use_bias ? bias[((size_t)h * s->Tq + q) * s->Tk + k] : 0.0));
                for (int k = 0; k < s->Tk; k++) {
                    double e = 0.0;
                    if (mx == -INFINITY) e = 1.0;  // fully masked row: uniform
                    else if (!attn_masked(s, mask, b, q, k))
                        e = exp(scores[r + k] + (s->use_bias ? bias[((size_t)h * s->Tq + q) * s->Tk + k] : 0.0) - mx);
                    probs[r + k] = e;
                    sum += e;
                }
                for (int k = 0; k < s->Tk; k++) probs[r + k] /= sum;
            }
}

static float attn_factor(const AttnShape* s, size_t i) {
    if (s->p == 0.0f) return 1.0f;
    return dropout_uniform(s->seed, s->offset + i) >= s->p ? 1.0f / (1.0f - s->p) : 0.0f;
}

typedef struct {
    AttnShape s;
    DType dt;
    float *scores, *bias, *dpd, *dbias0;
    int* mask;
    void *d_scores, *d_bias, *d_mask, *d_probs, *d_pdrop, *d_dpd, *d_dscores, *d_dbias;
} AttnCase;

static void attn_setup(AttnCase* c, AttnShape s, DType dt, uint64_t seed) {
    TRng rng = {seed};
    c->s = s;
    c->dt = dt;
    const size_t n = (size_t)s.B * s.H * s.Tq * s.Tk, nb = (size_t)s.H * s.Tq * s.Tk;
    c->scores = host_floats(n);
    c->bias = host_floats(nb);
    c->dpd = host_floats(n);
    c->dbias0 = host_floats(nb);
    c->mask = (int*)calloc((size_t)s.B * s.Tk, sizeof(int));
    for (size_t i = 0; i < n; i++) c->scores[i] = 3.0f * trng_normal(&rng);
    for (size_t i = 0; i < nb; i++) c->bias[i] = trng_normal(&rng);
    fill_uniform(c->dpd, n, &rng, -1.0f, 1.0f);
    host_round_all(dt, c->dpd, n);
    fill_uniform(c->dbias0, nb, &rng, -1.0f, 1.0f);
    for (int b = 0; b < s.B; b++)
        for (int k = 0; k < s.Tk; k++) {
            int keep = 1;
            if (b == 1) keep = k < s.Tk - 3;  // padding at the end
            if (b == 2) keep = 0;             // every key masked: uniform rows
            c->mask[b * s.Tk + k] = keep;
        }
    c->d_scores = dev_upload(DT_F32, c->scores, n);
    c->d_bias = dev_upload(DT_F32, c->bias, nb);
    c->d_mask = dev_upload_int(c->mask, (size_t)s.B * s.Tk);
    c->d_probs = dev_alloc_poisoned(n * dtype_size(dt));
    c->d_pdrop = s.p > 0 ? dev_alloc_poisoned(n * dtype_size(dt)) : c->d_probs;
    c->d_dpd = dev_upload(dt, c->dpd, n);
    c->d_dscores = dev_alloc_poisoned(n * dtype_size(dt));
    c->d_dbias = dev_upload(DT_F32, c->dbias0, nb);
}

static void attn_free(AttnCase* c) {
    free(c->scores);
    free(c->bias);
    free(c->dpd);
    free(c->dbias0);
    free(c->mask);
    CUDA_CHECK(cudaFree(c->d_scores));
    CUDA_CHECK(cudaFree(c->d_bias));
    CUDA_CHECK(cudaFree(c->d_mask));
    if (c->d_pdrop != c->d_probs) CUDA_CHECK(cudaFree(c->d_pdrop));
    CUDA_CHECK(cudaFree(c->d_probs));
    CUDA_CHECK(cudaFree(c->d_dpd));
    CUDA_CHECK(cudaFree(c->d_dscores));
    CUDA_CHECK(cudaFree(c->d_dbias));
}

static void attn_fwd(AttnCase* c) {
    const AttnShape* s = &c->s;
    attention_softmax_forward(c->d_probs, c->d_pdrop, c->dt, (const float*)c->d_scores,
                              s->use_bias ? (const float*)c->d_bias : NULL, s->use_mask ? (const int*)c->d_mask : NULL,
                              s->causal, s->q_offset, s->B, s->H, s->Tq, s->Tk, s->p, s->seed, s->offset, 0);
}
static void attn_bwd(AttnCase* c) {
    const AttnShape* s = &c->s;
    attention_softmax_backward(c->d_dscores, (float*)c->d_dbias, c->dt, c->d_dpd, c->d_probs, s->B, s->H, s->Tq, s->Tk,
                               s->p, s->seed, s->offset, 0);
}

static bool attn_check_case(AttnShape s, DType dt, uint64_t seed) {
    AttnCase c;
    attn_setup(&c, s, dt, seed);
    const size_t n = (size_t)s.B * s.H * s.Tq * s.Tk, nb = (size_t)s.H * s.Tq * s.Tk;
    attn_fwd(&c);
    attn_bwd(&c);
    attn_bwd(&c);
    float *probs = host_floats(n), *pdrop = host_floats(n), *ds = host_floats(n), *db = host_floats(nb);
    dev_download(probs, dt, c.d_probs, n);
    dev_download(pdrop, dt, c.d_pdrop, n);
    dev_download(ds, dt, c.d_dscores, n);
    dev_download(db, DT_F32, c.d_dbias, nb);
    double *rp = host_doubles(n), *rpd = host_doubles(n), *rds = host_doubles(n), *rdb = host_doubles(nb);
    attn_ref_forward(&s, rp, c.scores, c.bias, c.mask);
    // dropout of the stored probabilities, then the backward from the stored probabilities
    for (size_t i = 0; i < n; i++) rpd[i] = (double)probs[i] * attn_factor(&s, i);
    for (size_t i = 0; i < nb; i++) rdb[i] = c.dbias0[i];
    for (size_t r = 0; r < n / s.Tk; r++) {
        double dot = 0.0;
        for (int k = 0; k < s.Tk; k++) dot += (double)c.dpd[r * s.Tk + k] * attn_factor(&s, r * s.Tk + k) * probs[r * s.Tk + k];
        for (int k = 0; k < s.Tk; k++) {
            const size_t i = r * s.Tk + k;
            rds[i] = probs[i] * ((double)c.dpd[i] * attn_factor(&s, i) - dot);
            rdb[(r % ((size_t)s.H * s.Tq)) * s.Tk + k] += 2.0 * rds[i];
        }
    }
    char what[128];
    snprintf(what, sizeof what, "attn probs B%d H%d %dx%d%s%s%s p=%.1f", s.B, s.H, s.Tq, s.Tk, s.causal ? " causal" : "",
             s.use_mask ? " mask" : "", s.use_bias ? " bias" : "", s.p);
    bool ok = check_close(what, dt, probs, rp, n, attn_tol(dt));
    if (s.p > 0) ok &= check_close("attn probs_drop", dt, pdrop, rpd, n, attn_tol(dt));
    ok &= check_close("attn dscores", dt, ds, rds, n, attn_tol(dt));
    ok &= check_close("attn dbias (+= twice)", DT_F32, db, rdb, nb, (Tol){1e-5, 1e-5});
    free(probs);
    free(pdrop);
    free(ds);
    free(db);
    free(rp);
    free(rpd);
    free(rds);
    free(rdb);
    attn_free(&c);
    return ok;
}

static void test_attention_softmax_reference(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    // encoder self-attention (bias + padding + a fully masked batch entry), decoder causal, cross-attention,
    // a KV-cache step (Tq=1, q_offset), long rows (Tk > 32 lanes), dropout
    const AttnShape shapes[] = {
        {3, 2, 7, 7, 0, false, true, true, 0.0f, 1, 0},
        {3, 2, 9, 9, 0, true, true, false, 0.0f, 1, 0},
        {3, 2, 5, 11, 0, false, false, true, 0.0f, 1, 0},
        {3, 2, 1, 13, 6, true, true, true, 0.0f, 1, 0},
        {3, 3, 9, 70, 0, false, true, true, 0.1f, 1234, 777},
        {3, 2, 70, 70, 0, true, true, true, 0.5f, 99, 0},
        // rows held in registers with 2 and 4 key groups per lane, rows past 512 keys (three-pass kernel), more
        // batch entries than warps per block, and a backward whose B x Tk floats exceed shared memory
        {2, 2, 3, 200, 0, true, true, true, 0.1f, 5, 0},
        {2, 1, 4, 300, 0, false, true, true, 0.0f, 1, 0},
        {2, 1, 3, 600, 0, true, true, true, 0.1f, 7, 3},
        {35, 1, 2, 40, 0, false, true, true, 0.1f, 8, 0},
        {35, 1, 2, 400, 0, false, true, true, 0.0f, 1, 0},
    };
    bool ok = true;
    for (size_t i = 0; i < T5_ARRAY_LEN(shapes); i++)
        for (int di = 0; di < 3; di++) ok &= attn_check_case(shapes[i], ALL_DTYPES[di], 10 + i);
    assert_true(ok);
}

// L = sum probs_drop * dpd (fp32, dropout p=0.2, masks): the backward against central differences
static double attn_loss(AttnCase* c, const float* scores, const float* bias) {
    const AttnShape* s = &c->s;
    const size_t n = (size_t)s->B * s->H * s->Tq * s->Tk;
    dev_write(c->d_scores, DT_F32, scores, n);
    dev_write(c->d_bias, DT_F32, bias, (size_t)s->H * s->Tq * s->Tk);
    attn_fwd(c);
    float* pd = host_floats(n);
    dev_download(pd, DT_F32, c->d_pdrop, n);
    const double L = dot_fd(pd, c->dpd, n);
    free(pd);
    return L;
}

static void test_attention_softmax_finite_differences(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    AttnCase c;
    const AttnShape s = {3, 2, 6, 40, 0, true, true, true, 0.2f, 4321, 5};
    attn_setup(&c, s, DT_F32, 3);
    // no fully masked rows here: their forward is constant (uniform) while the backward passes the
    // softmax gradient as HF's autograd does through finfo.min, so finite differences cannot see it
    for (int k = 0; k < s.Tk; k++) c.mask[2 * s.Tk + k] = k % 3 != 1;  // key 0 kept: causal row 0 not empty
    CUDA_CHECK(cudaMemcpy(c.d_mask, c.mask, (size_t)s.B * s.Tk * sizeof(int), cudaMemcpyHostToDevice));
    const size_t n = (size_t)s.B * s.H * s.Tq * s.Tk, nb = (size_t)s.H * s.Tq * s.Tk;
    CUDA_CHECK(cudaMemset(c.d_dbias, 0, nb * 4));
    attn_loss(&c, c.scores, c.bias);
    attn_bwd(&c);
    float *ds = host_floats(n), *db = host_floats(nb), *v = host_floats(n), *vb = host_floats(nb);
    float *sp = host_floats(n), *bp = host_floats(nb);
    dev_download(ds, DT_F32, c.d_dscores, n);
    dev_download(db, DT_F32, c.d_dbias, nb);
    TRng rng = {17};
    for (size_t i = 0; i < n; i++) v[i] = trng_normal(&rng);
    for (size_t i = 0; i < nb; i++) vb[i] = trng_normal(&rng);
    const double eps = 1e-2;
    bool ok = true;
    for (size_t i = 0; i < n; i++) sp[i] = c.scores[i] + (float)eps * v[i];
    double Lp = attn_loss(&c, sp, c.bias);
    for (size_t i = 0; i < n; i++) sp[i] = c.scores[i] - (float)eps * v[i];
    double Lm = attn_loss(&c, sp, c.bias);
    ok &= check_fd("attn dL/dscores . v (p=0.2)", Lp, Lm, eps, dot_fd(ds, v, n), 2e-3);
    for (size_t i = 0; i < nb; i++) bp[i] = c.bias[i] + (float)eps * vb[i];
    Lp = attn_loss(&c, c.scores, bp);
    for (size_t i = 0; i < nb; i++) bp[i] = c.bias[i] - (float)eps * vb[i];
    Lm = attn_loss(&c, c.scores, bp);
    ok &= check_fd("attn dL/dbias . v (p=0.2)", Lp, Lm, eps, dot_fd(db, vb, nb), 2e-3);
    free(ds);
    free(db);
    free(v);
    free(vb);
    free(sp);
    free(bp);
    attn_free(&c);
    assert_true(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_softmax_reference),
        cmocka_unit_test(test_attention_softmax_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
