/*
 * recut.c: optimizer state re-cut between numbers of ranks (recut.h).
 */
#include "recut.h"

#include "../base/common.h"

// the unit whose part holds flat position p of the old partition (part_offset ascending)
static int unit_at(const ZeroLayout* L, size_t p) {
    int lo = 0, hi = L->num_units - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L->part_offset[mid] <= p) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

size_t recut_chunk(const ZeroLayout* Lold, const ZeroLayout* Lnew, size_t e0, const float* data, size_t n, RecutPut put,
                   void* ctx) {
    const size_t pt = Lold->part_total;
    size_t e = e0, done = 0;
    while (e < e0 + n) {
        const int which = e < pt ? 0 : 1;
        const size_t p = e - (size_t)which * pt;
        const int u = unit_at(Lold, p);
        // this chunk's floats of unit u's old part: [p, stop) of the partition
        const size_t part_end = Lold->part_offset[u] + Lold->part[u];
        const size_t stop = T5_MIN(part_end, p + (e0 + n - e));
        // global elements of the unit they hold, clipped to the unit's real elements and the new owned range
        const size_t g0 = (size_t)Lold->rank * Lold->part[u] + (p - Lold->part_offset[u]);
        const size_t g1 = g0 + (stop - p);
        const size_t a = T5_MAX(g0, Lnew->lo[u]), b = T5_MIN(T5_MIN(g1, Lnew->hi[u]), Lold->numel[u]);
        if (b > a) {
            put(ctx, which, Lnew->part_offset[u] + (a - Lnew->lo[u]), data + (e - e0) + (a - g0), b - a);
            done += b - a;
        }
        e += stop - p;
    }
    return done;
}

bool recut_rank_needed(const ZeroLayout* Lold, int old_rank, const ZeroLayout* Lnew) {
    for (int u = 0; u < Lold->num_units; u++) {
        const size_t lo = T5_MIN((size_t)old_rank * Lold->part[u], Lold->numel[u]);
        const size_t hi = T5_MIN(lo + Lold->part[u], Lold->numel[u]);
        if (T5_MAX(lo, Lnew->lo[u]) < T5_MIN(hi, Lnew->hi[u])) return true;
    }
    return false;
}
