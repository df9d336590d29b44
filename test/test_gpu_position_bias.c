/*
 * test_gpu_position_bias.c: cuda/position_bias.cu against a CPU reference. The bucket table is random
 * (every bucket id in [0,NB) reachable from many diagonals) so the grouping of the backward is tested
 * harder than with HF's monotone buckets. Forward is an exact gather (tolerance 0) for every table
 * dtype; backward dtable = then += (the gradient table in the case's dtype, as training keeps it: twice the
 * sum, whatever the buffer held before), bit-identical across runs; finite differences.
 */
#include "test_gpu_util.h"

#include "../cuda/position_bias.cuh"

typedef struct {
    int NB, H, Tq, Tk, q_offset, rel_offset;
} PbShape;

static void pb_case(const PbShape* s, DType dt, uint64_t seed, bool* ok) {
    TRng rng = {seed};
    const int nrel = s->rel_offset + s->Tk + 1;  // covers rel in [-rel_offset, Tk]
    int* buckets = (int*)calloc((size_t)nrel, sizeof(int));
    for (int i = 0; i < nrel; i++) buckets[i] = (int)(trng_next(&rng) % (uint64_t)s->NB);
    const size_t nt = (size_t)s->NB * s->H, nb = (size_t)s->H * s->Tq * s->Tk;
    float *table = host_floats(nt), *dbias = host_floats(nb), *dt0 = host_floats(nt);
    for (size_t i = 0; i < nt; i++) table[i] = trng_normal(&rng);
    host_round_all(dt, table, nt);
    fill_uniform(dbias, nb, &rng, -1, 1);
    fill_uniform(dt0, nt, &rng, -1, 1);  // stale contents the first (=) call must overwrite
    void *d_buckets = dev_upload_int(buckets, nrel), *d_table = dev_upload(dt, table, nt);
    void *d_bias = dev_alloc_poisoned(nb * 4), *d_dbias = dev_upload(DT_F32, dbias, nb);
    void* d_dtable = dev_upload(dt, dt0, nt);
    position_bias_forward((float*)d_bias, d_table, dt, (const int*)d_buckets, s->rel_offset, s->NB, s->H, s->Tq, s->Tk,
                          s->q_offset, 0);
    position_bias_backward(d_dtable, dt, false, (const float*)d_dbias, (const int*)d_buckets, s->rel_offset, s->NB, s->H,
                           s->Tq, s->Tk, s->q_offset, 0);
    float* got = host_floats(nb);
    dev_download(got, DT_F32, d_bias, nb);
    double *ref = host_doubles(nb), *rdt = host_doubles(nt), *sumabs = host_doubles(nt);
    for (size_t i = 0; i < nt; i++) rdt[i] = 0.0;
    for (int h = 0; h < s->H; h++)
        for (int q = 0; q < s->Tq; q++)
            for (int k = 0; k < s->Tk; k++) {
                const size_t i = ((size_t)h * s->Tq + q) * s->Tk + k;
                const int b = buckets[k - (q + s->q_offset) + s->rel_offset];
                ref[i] = table[(size_t)b * s->H + h];
                rdt[(size_t)b * s->H + h] += 2.0 * dbias[i];
                sumabs[(size_t)b * s->H + h] += 2.0 * fabs(dbias[i]);
            }
    char what[96];
    snprintf(what, sizeof what, "position_bias fwd H%d %dx%d qoff %d", s->H, s->Tq, s->Tk, s->q_offset);
    *ok &= check_close(what, dt, got, ref, nb, (Tol){0, 0});
    // second backward: accumulates; then two more (=) must equal each other bit for bit
    position_bias_backward(d_dtable, dt, true, (const float*)d_dbias, (const int*)d_buckets, s->rel_offset, s->NB, s->H,
                           s->Tq, s->Tk, s->q_offset, 0);
    float* gdt = host_floats(nt);
    dev_download(gdt, dt, d_dtable, nt);
    // a cell sums up to Tq*Tk/NB terms that cancel: the fp32 summation bound u * sum|terms| sets atol
    double max_sumabs = 0.0;
    for (size_t i = 0; i < nt; i++) max_sumabs = fmax(max_sumabs, sumabs[i]);
    // 16-bit tables: two roundings (one per call) of values up to max_sumabs
    const double u = dt == DT_F32 ? 6e-8 : dt == DT_F16 ? 1e-3 : 8e-3;
    *ok &= check_close("position_bias dtable (= then +=)", dt, gdt, rdt, nt,
                       (Tol){fmax(1e-5, u * max_sumabs), dt == DT_F32 ? 1e-5 : 2 * u});
    CUDA_CHECK(cudaFree(d_dtable));
    d_dtable = dev_alloc_poisoned(nt * 4);
    // finite differences: L = sum bias * dbias is linear in the table; dL/dtable . v = sum over cells
    float *a = host_floats(nt), *b2 = host_floats(nt), *v = host_floats(nt), *tp = host_floats(nt);
    position_bias_backward(d_dtable, DT_F32, false, (const float*)d_dbias, (const int*)d_buckets, s->rel_offset, s->NB, s->H,
                           s->Tq, s->Tk, s->q_offset, 0);
    dev_download(a, DT_F32, d_dtable, nt);
    position_bias_backward(d_dtable, DT_F32, false, (const float*)d_dbias, (const int*)d_buckets, s->rel_offset, s->NB, s->H,
                           s->Tq, s->Tk, s->q_offset, 0);
    dev_download(b2, DT_F32, d_dtable, nt);
    *ok &= check_equal_bits("position_bias dtable twice", a, b2, nt);
    if (dt == DT_F32) {
        for (size_t i = 0; i < nt; i++) v[i] = trng_normal(&rng);
        const double eps = 1e-2;
        double L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            for (size_t i = 0; i < nt; i++) tp[i] = table[i] + (sgn ? -1.0f : 1.0f) * (float)eps * v[i];
            dev_write(d_table, DT_F32, tp, nt);
            position_bias_forward((float*)d_bias, d_table, DT_F32, (const int*)d_buckets, s->rel_offset, s->NB, s->H,
                                  s->Tq, s->Tk, s->q_offset, 0);
            dev_download(got, DT_F32, d_bias, nb);
            L[sgn] = dot_fd(got, dbias, nb);
        }
        *ok &= check_fd("position_bias dL/dtable . v", L[0], L[1], eps, dot_fd(a, v, nt), 1e-3);
    }
    free(buckets);
    free(table);
    free(dbias);
    free(dt0);
    free(got);
    free(ref);
    free(rdt);
    free(sumabs);
    free(gdt);
    free(a);
    free(b2);
    free(v);
    free(tp);
    void* p[] = {d_buckets, d_table, d_bias, d_dbias, d_dtable};
    for (size_t i = 0; i < T5_ARRAY_LEN(p); i++) CUDA_CHECK(cudaFree(p[i]));
}

static void test_position_bias(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const PbShape shapes[] = {
        {32, 3, 9, 11, 0, 8},      // encoder-like, rel_offset = Tq - 1
        {32, 2, 1, 20, 19, 25},    // decoder KV-cache step: Tq = 1, q_offset 19
        {32, 8, 64, 64, 0, 70},    // longer diagonals (several threads per diagonal)
        {4, 2, 300, 300, 0, 299},  // diagonals longer than the block, few buckets
    };
    bool ok = true;
    for (size_t i = 0; i < T5_ARRAY_LEN(shapes); i++)
        for (int di = 0; di < 3; di++) pb_case(&shapes[i], ALL_DTYPES[di], 50 + i * 3 + di, &ok);
    assert_true(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_position_bias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
