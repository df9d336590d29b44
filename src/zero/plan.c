/*
 * plan.c: partition arithmetic, sub-groups, buckets and the stage 3 schedule (see plan.h).
 */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"

static size_t round_up8(size_t x) { return (x + 7) / 8 * 8; }

int zero_layout_build(ZeroLayout* L, int world, int rank, int num_units, const size_t* unit_numel,
                      int64_t sub_group_size, double cpu_ratio, char* err, size_t errlen) {
    memset(L, 0, sizeof *L);
    if (world < 1 || rank < 0 || rank >= world)
        return t5_set_err(err, errlen, "ZeRO layout: rank %d of world size %d", rank, world);
    if (num_units < 1) return t5_set_err(err, errlen, "ZeRO layout: no units");
    if (!(cpu_ratio >= 0.0 && cpu_ratio <= 1.0))
        return t5_set_err(err, errlen, "offload_optimizer.ratio %g is not in [0, 1]", cpu_ratio);
    if (sub_group_size < 1) return t5_set_err(err, errlen, "sub_group_size %lld must be >= 1", (long long)sub_group_size);
    L->world = world;
    L->rank = rank;
    L->num_units = num_units;
    const size_t n = (size_t)num_units;
    L->numel = calloc_check(n, sizeof(size_t));
    L->part = calloc_check(n, sizeof(size_t));
    L->lo = calloc_check(n, sizeof(size_t));
    L->hi = calloc_check(n, sizeof(size_t));
    L->part_offset = calloc_check(n, sizeof(size_t));
    L->unit_group = calloc_check(n, sizeof(int));
    for (int u = 0; u < num_units; u++) {
        if (unit_numel[u] % 8 != 0) {
            zero_layout_free(L);
            return t5_set_err(err, errlen, "ZeRO layout: unit %d has %zu elements (not a multiple of 8)", u,
                              unit_numel[u]);
        }
        L->numel[u] = unit_numel[u];
        L->part[u] = round_up8((unit_numel[u] + (size_t)world - 1) / (size_t)world);
        size_t lo = (size_t)rank * L->part[u], hi = lo + L->part[u];
        if (lo > unit_numel[u]) lo = unit_numel[u];
        if (hi > unit_numel[u]) hi = unit_numel[u];
        L->lo[u] = lo;
        L->hi[u] = hi;
        L->part_offset[u] = L->part_total;
        L->part_total += L->part[u];
    }
    // sub-groups: greedy over units in order
    L->group_first = calloc_check(n, sizeof(int));
    L->group_count = calloc_check(n, sizeof(int));
    L->group_numel = calloc_check(n, sizeof(size_t));
    L->group_cpu = calloc_check(n, sizeof(bool));
    int g = -1;
    for (int u = 0; u < num_units; u++) {
        if (g < 0 || L->group_numel[g] + L->part[u] > (size_t)sub_group_size) {
            g++;
            L->group_first[g] = u;
        }
        L->group_count[g]++;
        L->group_numel[g] += L->part[u];
        L->unit_group[u] = g;
    }
    L->num_groups = g + 1;
    // CPU groups: the trailing ones whose cumulative size stays within ratio * total (ratio 1: every group)
    const double want = cpu_ratio * (double)L->part_total;
    size_t acc = 0;
    for (int k = L->num_groups - 1; k >= 0; k--) {
        if (cpu_ratio >= 1.0 || (double)(acc + L->group_numel[k]) <= want + 0.5) {
            if (cpu_ratio <= 0.0) break;
            L->group_cpu[k] = true;
            acc += L->group_numel[k];
        } else {
            break;
        }
    }
    L->cpu_numel = acc;
    return 0;
}

void zero_layout_free(ZeroLayout* L) {
    free(L->numel);
    free(L->part);
    free(L->lo);
    free(L->hi);
    free(L->part_offset);
    free(L->group_first);
    free(L->group_count);
    free(L->group_numel);
    free(L->group_cpu);
    free(L->unit_group);
    memset(L, 0, sizeof *L);
}

static size_t bucket_piece(const ZeroLayout* L, int64_t bucket_elems) {
    int64_t p = bucket_elems / L->world / 8 * 8;
    return p < 8 ? 8 : (size_t)p;
}

int zero_layout_num_buckets(const ZeroLayout* L, int unit, int64_t bucket_elems) {
    size_t piece = bucket_piece(L, bucket_elems);
    return (int)((L->part[unit] + piece - 1) / piece);
}

void zero_layout_bucket(const ZeroLayout* L, int unit, int64_t bucket_elems, int k, size_t* off, size_t* len) {
    size_t piece = bucket_piece(L, bucket_elems);
    size_t o = (size_t)k * piece;
    *off = o;
    *len = o >= L->part[unit] ? 0 : T5_MIN(piece, L->part[unit] - o);
}

// ---------------------------------------------------------------------------------------------
// stage 3 schedule

void zero_sched_init(ZeroSched* S, int num_units, const size_t* numel, const int* trace, int trace_len,
                     int64_t prefetch_bucket, int64_t max_live, int64_t max_reuse, int64_t persistence_threshold) {
    memset(S, 0, sizeof *S);
    S->num_units = num_units;
    S->numel = numel;
    S->persistent = calloc_check((size_t)num_units, sizeof(bool));
    S->status = calloc_check((size_t)num_units, sizeof(ZeroSchedStatus));
    S->fetched = calloc_check((size_t)num_units, sizeof(int));
    for (int u = 0; u < num_units; u++) S->persistent[u] = (int64_t)numel[u] <= persistence_threshold;
    S->trace = malloc_check((size_t)T5_MAX(trace_len, 1) * sizeof(int));
    memcpy(S->trace, trace, (size_t)trace_len * sizeof(int));
    S->trace_len = trace_len;
    S->prefetch_bucket = prefetch_bucket;
    S->max_live = max_live;
    S->max_reuse = max_reuse;
    S->valid = true;
}

void zero_sched_free(ZeroSched* S) {
    free(S->persistent);
    free(S->status);
    free(S->fetched);
    free(S->trace);
    memset(S, 0, sizeof *S);
}

static void sched_mark_available(ZeroSched* S, int u) {
    S->status[u] = ZS_AVAILABLE;
    if (!S->persistent[u]) {
        S->live += (int64_t)S->numel[u];
        if (S->live > S->peak_live) S->peak_live = S->live;
    }
}

// next use of `unit` after trace position `from`: its position (or -1) and the elements walked before it
static int sched_next_use(const ZeroSched* S, int from, int unit, int64_t* walked_out) {
    int64_t walked = 0;
    for (int j = from + 1; j < S->trace_len; j++) {
        if (S->trace[j] == unit) {
            *walked_out = walked;
            return j;
        }
        walked += (int64_t)S->numel[S->trace[j]];
    }
    *walked_out = -1;
    return -1;
}

int64_t zero_sched_reuse_distance(const ZeroSched* S, int from, int unit) {
    int64_t d;
    sched_next_use(S, from, unit, &d);
    return d;
}

int zero_sched_fetch(ZeroSched* S, int unit, ZeroSchedAction* out, int cap) {
    int n = 0;
    if (S->valid && (S->pos >= S->trace_len || S->trace[S->pos] != unit)) {
        S->valid = false;  // off the trace: on demand for the rest of this pass
        S->mismatches++;
    }
    if (S->status[unit] != ZS_AVAILABLE) {
        if (n < cap) out[n++] = (ZeroSchedAction){ZS_GATHER, unit, false};
        sched_mark_available(S, unit);
    }
    S->fetched[unit]++;
    if (!S->valid) return n;
    S->pos++;
    if (S->prefetch_pos < S->pos) S->prefetch_pos = S->pos;
    // DeepSpeed's loop: keep taking the next trace entries while the elements being prefetched stay below
    // min(max_live - live, prefetch_bucket) (the last one taken may overshoot)
    int64_t limit = S->max_live - S->live;
    if (S->prefetch_bucket < limit) limit = S->prefetch_bucket;
    int64_t prefetching = 0;
    while (S->prefetch_pos < S->trace_len && prefetching < limit) {
        int u = S->trace[S->prefetch_pos];
        S->prefetch_pos++;
        if (S->status[u] == ZS_AVAILABLE) continue;
        if (n < cap) out[n++] = (ZeroSchedAction){ZS_GATHER, u, true};
        sched_mark_available(S, u);
        prefetching += (int64_t)S->numel[u];
    }
    return n;
}

int zero_sched_release(ZeroSched* S, int unit, ZeroSchedAction* out, int cap) {
    if (S->fetched[unit] <= 0) return 0;
    if (--S->fetched[unit] > 0) return 0;
    if (S->persistent[unit] || S->status[unit] != ZS_AVAILABLE) return 0;
    if (S->valid) {
        // the unit just used sits at trace position pos - 1. Kept when its next use is within the reuse
        // distance, or when the prefetcher already walked past that use counting on it (DeepSpeed drops such
        // parameters from the release candidates).
        int64_t d;
        int next = sched_next_use(S, S->pos - 1, unit, &d);
        if (next >= 0 && (d <= S->max_reuse || next < S->prefetch_pos)) return 0;
    }
    S->status[unit] = ZS_NOT_AVAILABLE;
    S->live -= (int64_t)S->numel[unit];
    if (cap > 0) out[0] = (ZeroSchedAction){ZS_RELEASE, unit, false};
    return 1;
}

int zero_sched_reset(ZeroSched* S, ZeroSchedAction* out, int cap) {
    int n = 0;
    for (int u = 0; u < S->num_units; u++) {
        if (S->status[u] == ZS_AVAILABLE && !S->persistent[u] && S->fetched[u] == 0) {
            S->status[u] = ZS_NOT_AVAILABLE;
            S->live -= (int64_t)S->numel[u];
            if (n < cap) out[n++] = (ZeroSchedAction){ZS_RELEASE, u, false};
        }
    }
    S->pos = 0;
    S->prefetch_pos = 0;
    S->valid = true;
    return n;
}

void zero_sched_set_available(ZeroSched* S, int unit, bool available) {
    if (available && S->status[unit] != ZS_AVAILABLE) sched_mark_available(S, unit);
    if (!available && S->status[unit] == ZS_AVAILABLE) {
        S->status[unit] = ZS_NOT_AVAILABLE;
        if (!S->persistent[unit]) S->live -= (int64_t)S->numel[unit];
    }
}
