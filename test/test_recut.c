/*
 * test_recut.c: optimizer state saved by W ranks read into the partitions of W' ranks (src/train/recut.c), for
 * W, W' in {1, 2, 3, 4}: every element of every new rank's m and v comes from the old rank that held it, whatever
 * the chunking of the old blobs; padding is never written; an old rank owning nothing of the new range is not read.
 */
#include "t5test.h"

#include <math.h>

#include "../src/base/common.h"
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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_recut_all_worlds)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
