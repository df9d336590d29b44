/*
 * recut.c: optimizer state re-cut between numbers of ranks (recut.h).
 */
#include "recut.h"

#include "../base/common.h"
#include "estimate.h"

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

// ---------------------------------------------------------------------------------------------
// Adafactor

// the elements [*a, *a + *cnt) of tensor t that L's rank owns (tensor-relative); *cnt 0 when none
static void ada_owned(const ZeroTensor* t, const ZeroLayout* L, size_t* a, size_t* cnt) {
    const size_t lo = T5_MAX(t->offset, L->lo[t->unit]), hi = T5_MIN(t->offset + t->numel, L->hi[t->unit]);
    *a = hi > lo ? lo - t->offset : 0;
    *cnt = hi > lo ? hi - lo : 0;
}

static bool ada_factored(const ZeroTensor* t) { return t->rows > 0 && t->cols > 0; }

size_t recut_ada_blob_floats(const ZeroTensor* t, int n, const ZeroLayout* L, bool has_beta1) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t a, c;
        ada_owned(&t[i], L, &a, &c);
        total += zero_adafactor_tensor_floats(&t[i], c, has_beta1);
    }
    return total;
}

// the lowest rank owning an element of tensor t (its unit's partition is the same on every rank)
static int ada_first_rank(const ZeroTensor* t, const ZeroLayout* L) { return (int)(t->offset / L->part[t->unit]); }

// one segment of an old blob: floats [src, src + len) of the old blob, landing at dst of the new one
typedef struct {
    size_t e0, n;
    const float* data;
    RecutPut put;
    void* ctx;
    size_t done;
} AdaCut;

static void ada_move(AdaCut* c, size_t src, size_t len, size_t dst) {
    const size_t a = T5_MAX(src, c->e0), b = T5_MIN(src + len, c->e0 + c->n);
    if (b <= a) return;
    c->put(c->ctx, 0, dst + (a - src), c->data + (a - c->e0), b - a);
    c->done += b - a;
}

size_t recut_ada_chunk(const ZeroTensor* t, int nt, bool has_beta1, const ZeroLayout* Lold, const ZeroLayout* Lnew,
                       size_t e0, const float* data, size_t n, RecutPut put, void* ctx) {
    AdaCut c = {.e0 = e0, .n = n, .data = data, .put = put, .ctx = ctx};
    size_t po = 0, pn = 0;  // the tensor's first float in the old and the new blob
    for (int i = 0; i < nt && po < e0 + n; i++) {
        size_t oa, oc, na, nc;
        ada_owned(&t[i], Lold, &oa, &oc);
        ada_owned(&t[i], Lnew, &na, &nc);
        const size_t fo = zero_adafactor_tensor_floats(&t[i], oc, has_beta1);
        const size_t fn = zero_adafactor_tensor_floats(&t[i], nc, has_beta1);
        if (oc > 0 && nc > 0 && po + fo > e0) {
            size_t so = po, sn = pn;  // the element-indexed segments' starts
            if (ada_factored(&t[i])) {
                const size_t rc = (size_t)(t[i].rows + t[i].cols);
                if (ada_first_rank(&t[i], Lold) == Lold->rank) ada_move(&c, po, rc, pn);  // replicated: taken once
                so += rc;
                sn += rc;
            }
            // exp_avg_sq (a vector) and exp_avg: the elements both own, segment by segment
            const int segs = (ada_factored(&t[i]) ? 0 : 1) + (has_beta1 ? 1 : 0);
            const size_t a = T5_MAX(oa, na), b = T5_MIN(oa + oc, na + nc);
            for (int k = 0; k < segs && b > a; k++) ada_move(&c, so + k * oc + (a - oa), b - a, sn + k * nc + (a - na));
        }
        po += fo;
        pn += fn;
    }
    return c.done;
}

bool recut_ada_rank_needed(const ZeroTensor* t, int nt, bool has_beta1, const ZeroLayout* Lold, int old_rank,
                           const ZeroLayout* Lnew) {
    for (int i = 0; i < nt; i++) {
        size_t na, nc;
        ada_owned(&t[i], Lnew, &na, &nc);
        if (nc == 0) continue;
        const size_t part = Lold->part[t[i].unit], numel_u = Lold->numel[t[i].unit];
        const size_t lo = T5_MIN((size_t)old_rank * part, numel_u), hi = T5_MIN(lo + part, numel_u);
        const size_t oa = T5_MAX(t[i].offset, lo), ob = T5_MIN(t[i].offset + t[i].numel, hi);
        if (ob <= oa) continue;  // the old rank holds nothing of this tensor
        if (ada_factored(&t[i]) && ada_first_rank(&t[i], Lold) == old_rank) return true;
        if ((!ada_factored(&t[i]) || has_beta1) && T5_MAX(oa, t[i].offset + na) < T5_MIN(ob, t[i].offset + na + nc))
            return true;
    }
    return false;
}
