/*
 * test_recut.c: optimizer state saved by W ranks read into the partitions of W' ranks (src/train/recut.c), for
 * W, W' in {1, 2, 3, 4}: every element of every new rank's m and v comes from the old rank that held it, whatever
 * the chunking of the old blobs; padding is never written; an old rank owning nothing of the new range is not read.
 * test_recut_adafactor: the same for Adafactor's blobs (recut.h: per tensor a matrix's whole row + column statistics,
 * replicated on every rank holding a slice, or a vector's exp_avg_sq over its slice, then exp_avg with beta1), W, W'
 * in {1, ..., 4}, beta1 None and a value: every float of every new rank's blob written once with the right value, the
 * statistics taken from one old rank, the blob sizes those of recut_ada_blob_floats, unneeded old ranks not read.
 */
#include "t5test.h"

#include <math.h>

#include "../src/base/common.h"
#include "../src/zero/estimate.h"
#include "../src/zero/recut.h"

static const size_t NUMEL[] = {16, 40, 8, 1000, 24};
#define NU ((int)T5_ARRAY_LEN(NUMEL))

typedef struct {
    float* m;
    float* v;
    size_t n;
    size_t written;
} Dst;

static void put(void* ctx, int which, size_t off, const float* src, size_t n) {
    Dst* d = ctx;
    assert_true(off + n <= d->n);
    float* dst = which ? d->v : d->m;
    for (size_t i = 0; i < n; i++) {
        assert_true(isnan(dst[off + i]));  // each element once
        dst[off + i] = src[i];
    }
    d->written += n;
}

static void build(ZeroLayout* L, int world, int rank) {
    char err[256];
    assert_int_equal(zero_layout_build(L, world, rank, NU, NUMEL, 1000000000, 0.0, err, sizeof err), 0);
}

static void test_recut_all_worlds(void** state) {
    (void)state;
    for (int wo = 1; wo <= 4; wo++)
        for (int wn = 1; wn <= 4; wn++)
            for (int rn = 0; rn < wn; rn++) {
                ZeroLayout Ln;
                build(&Ln, wn, rn);
                Dst d = {.n = Ln.part_total};
                d.m = malloc(d.n * sizeof(float));
                d.v = malloc(d.n * sizeof(float));
                for (size_t i = 0; i < d.n; i++) d.m[i] = d.v[i] = NAN;
                size_t owned = 0;
                for (int u = 0; u < NU; u++) owned += Ln.hi[u] - Ln.lo[u];
                for (int ro = 0; ro < wo; ro++) {
                    ZeroLayout Lo;
                    build(&Lo, wo, ro);
                    // the old blob: m = unit * 10000 + global element, v = its negative; padding: -1
                    const size_t pt = Lo.part_total;
                    float* blob = malloc(2 * pt * sizeof(float));
                    for (int u = 0; u < NU; u++)
                        for (size_t k = 0; k < Lo.part[u]; k++) {
                            const size_t g = (size_t)ro * Lo.part[u] + k;
                            const float x = g < NUMEL[u] ? (float)(u * 10000 + (int)g) : -1.0f;
                            blob[Lo.part_offset[u] + k] = x;
                            blob[pt + Lo.part_offset[u] + k] = g < NUMEL[u] ? -x : -1.0f;
                        }
                    const size_t before = d.written;
                    // chunks of a size coprime with everything: runs split anywhere, also across the m / v border
                    for (size_t e = 0; e < 2 * pt; e += 37)
                        recut_chunk(&Lo, &Ln, e, blob + e, T5_MIN((size_t)37, 2 * pt - e), put, &d);
                    if (!recut_rank_needed(&Lo, ro, &Ln)) assert_int_equal(d.written, before);
                    free(blob);
                    zero_layout_free(&Lo);
                }
                assert_int_equal(d.written, 2 * owned);
                for (int u = 0; u < NU; u++)
                    for (size_t g = Ln.lo[u]; g < Ln.hi[u]; g++) {
                        const size_t i = Ln.part_offset[u] + (g - Ln.lo[u]);
                        if (d.m[i] != (float)(u * 10000 + (int)g) || d.v[i] != -d.m[i])
                            fail_msg("W %d -> %d rank %d: unit %d element %zu: m %g v %g", wo, wn, rn, u, g, d.m[i], d.v[i]);
                    }
                free(d.m);
                free(d.v);
                zero_layout_free(&Ln);
            }
}


// ---- Adafactor

enum { ANT = 7 };
static const int64_t ASHAPE[ANT][2] = {{3, 8}, {0, 0}, {5, 7}, {0, 0}, {40, 25}, {1, 16}, {0, 0}};
static const size_t AVLEN[ANT] = {0, 10, 0, 21, 0, 0, 3};
static const int AUNIT[ANT] = {0, 0, 0, 1, 2, 3, 3};

static void ada_tensors(ZeroTensor* zt, size_t* numel) {
    memset(zt, 0, ANT * sizeof *zt);
    for (int u = 0; u < 4; u++) numel[u] = 0;
    for (int i = 0; i < ANT; i++) {
        zt[i].unit = AUNIT[i];
        zt[i].rows = ASHAPE[i][0];
        zt[i].cols = ASHAPE[i][1];
        zt[i].numel = ASHAPE[i][0] ? (size_t)(ASHAPE[i][0] * ASHAPE[i][1]) : AVLEN[i];
        zt[i].offset = numel[AUNIT[i]];
        numel[AUNIT[i]] += zt[i].numel;
    }
    for (int u = 0; u < 4; u++) numel[u] = CEIL_DIV(numel[u], (size_t)8) * 8;
}

// the blob of layout L's rank: statistics row r = i*100000 + r, column j = i*100000 + 50000 + j; exp_avg_sq of
// element g = i*100000 + 20000 + g; exp_avg = its negative
static float* ada_blob(const ZeroTensor* zt, const ZeroLayout* L, bool b1, size_t* n) {
    *n = recut_ada_blob_floats(zt, ANT, L, b1);
    float* b = malloc((*n ? *n : 1) * sizeof(float));
    size_t k = 0;
    for (int i = 0; i < ANT; i++) {
        const size_t lo = T5_MAX(zt[i].offset, L->lo[zt[i].unit]), hi = T5_MIN(zt[i].offset + zt[i].numel, L->hi[zt[i].unit]);
        if (hi <= lo) continue;
        const size_t a = lo - zt[i].offset, c = hi - lo;
        if (zt[i].rows > 0) {
            for (int64_t r = 0; r < zt[i].rows; r++) b[k++] = (float)(i * 100000 + r);
            for (int64_t j = 0; j < zt[i].cols; j++) b[k++] = (float)(i * 100000 + 50000 + j);
        } else {
            for (size_t e = a; e < a + c; e++) b[k++] = (float)(i * 100000 + 20000 + (int)e);
        }
        if (b1)
            for (size_t e = a; e < a + c; e++) b[k++] = -(float)(i * 100000 + 20000 + (int)e);
    }
    assert_int_equal(k, *n);
    return b;
}

static void ada_put(void* ctx, int which, size_t off, const float* src, size_t n) {
    Dst* d = ctx;
    assert_int_equal(which, 0);
    assert_true(off + n <= d->n);
    for (size_t i = 0; i < n; i++) {
        assert_true(isnan(d->m[off + i]));  // each float once
        d->m[off + i] = src[i];
    }
    d->written += n;
}

static void test_recut_adafactor(void** state) {
    (void)state;
    ZeroTensor zt[ANT];
    size_t numel[4];
    ada_tensors(zt, numel);
    char err[256];
    int skipped_reads = 0;
    for (int b1 = 0; b1 < 2; b1++)
        for (int wo = 1; wo <= 4; wo++)
            for (int wn = 1; wn <= 4; wn++)
                for (int rn = 0; rn < wn; rn++) {
                    ZeroLayout Ln;
                    assert_int_equal(zero_layout_build(&Ln, wn, rn, 4, numel, 1000000000, 0.0, err, sizeof err), 0);
                    size_t nn;
                    float* want = ada_blob(zt, &Ln, b1, &nn);
                    Dst d = {.n = nn};
                    d.m = malloc((nn ? nn : 1) * sizeof(float));
                    for (size_t i = 0; i < nn; i++) d.m[i] = NAN;
                    for (int ro = 0; ro < wo; ro++) {
                        ZeroLayout Lo;
                        assert_int_equal(zero_layout_build(&Lo, wo, ro, 4, numel, 1000000000, 0.0, err, sizeof err), 0);
                        size_t no;
                        float* blob = ada_blob(zt, &Lo, b1, &no);
                        const size_t before = d.written;
                        for (size_t e = 0; e < no; e += 13)
                            recut_ada_chunk(zt, ANT, b1, &Lo, &Ln, e, blob + e, T5_MIN((size_t)13, no - e), ada_put, &d);
                        if (!recut_ada_rank_needed(zt, ANT, b1, &Lo, ro, &Ln)) {
                            assert_int_equal(d.written, before);
                            skipped_reads++;
                        } else {
                            assert_true(d.written > before);
                        }
                        free(blob);
                        zero_layout_free(&Lo);
                    }
                    assert_int_equal(d.written, nn);
                    for (size_t i = 0; i < nn; i++)
                        if (d.m[i] != want[i])
                            fail_msg("beta1 %d, W %d -> %d rank %d: float %zu is %g, expected %g", b1, wo, wn, rn, i,
                                     d.m[i], want[i]);
                    free(want);
                    free(d.m);
                    zero_layout_free(&Ln);
                }
    print_message("Adafactor re-cut: W, W' in 1..4, beta1 None and 0.9: every new blob complete; %d old blobs not "
                  "needed and not read\n", skipped_reads);
    assert_true(skipped_reads > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_recut_all_worlds), cmocka_unit_test(test_recut_adafactor)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
