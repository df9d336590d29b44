/*
 * ada_split.c: Adafactor's tensors over ZeRO ranks (ada_split.h).
 */
#include "ada_split.h"

#include <stdlib.h>

#include "../base/common.h"

void zero_ada_tensor_ranks(const ZeroTensor* t, const ZeroLayout* L, int* r0, int* r1) {
    const size_t part = L->part[t->unit];
    *r0 = (int)(t->offset / part);
    *r1 = (int)((t->offset + (t->numel ? t->numel : 1) - 1) / part);
}

int64_t zero_ada_red1_len(const ZeroTensor* t) {
    return t->rows > 0 && t->cols > 0 ? t->rows + t->cols + 1 : 1;
}

void zero_ada_split_build(ZeroAdaSplit* s, const ZeroTensor* t, int n, const ZeroLayout* L, const bool* in_plan) {
    s->n = n;
    const size_t k = (size_t)T5_MAX(n, 1);
    s->first = calloc_check(k, sizeof *s->first);
    s->count = calloc_check(k, sizeof *s->count);
    s->shared = calloc_check(k, sizeof *s->shared);
    s->off1 = malloc_check(k * sizeof *s->off1);
    s->off2 = malloc_check(k * sizeof *s->off2);
    s->len1 = s->len2 = 0;
    for (int i = 0; i < n; i++) {
        const ZeroTensor* z = &t[i];
        const size_t lo = L->lo[z->unit], hi = L->hi[z->unit];
        const size_t a = T5_MAX(z->offset, lo), b = T5_MIN(z->offset + z->numel, hi);
        if (b > a) {
            s->first[i] = a - z->offset;
            s->count[i] = b - a;
        }
        int r0, r1;
        zero_ada_tensor_ranks(z, L, &r0, &r1);
        s->shared[i] = r1 > r0;
        s->off1[i] = s->off2[i] = -1;
    }
    // the shared section: every shared tensor of the plan, in tensor order (the same on every rank)
    for (int i = 0; i < n; i++) {
        if (!s->shared[i] || (in_plan && !in_plan[i])) continue;
        s->off1[i] = s->len1;
        s->off2[i] = s->len2++;
        s->len1 += zero_ada_red1_len(&t[i]);
    }
    s->shared1 = s->len1;
    s->shared2 = s->len2;
    // then this rank's own tensors
    for (int i = 0; i < n; i++) {
        if (s->shared[i] || (in_plan && !in_plan[i]) || s->count[i] == 0) continue;
        s->off1[i] = s->len1;
        s->off2[i] = s->len2++;
        s->len1 += zero_ada_red1_len(&t[i]);
    }
}

void zero_ada_split_free(ZeroAdaSplit* s) {
    free(s->first);
    free(s->count);
    free(s->shared);
    free(s->off1);
    free(s->off2);
    s->first = s->count = NULL;
    s->shared = NULL;
    s->off1 = s->off2 = NULL;
}
