/*
 * gather.c: parameters of the partitioned engine (see part.h): fetch / release along the stage 3 schedule
 * (src/zero/plan.c decides, this file issues), prefetch on the gather stream, the hold mode.
 *
 * Stream order: a gather (all-gather of the unit's partitions; one rank: a copy of the partition, host to
 * device with offload_param) runs on s_gather into a buffer from the stream-ordered pool and records the
 * unit's ev_gathered; the compute stream waits for that event before the unit's kernels. A release frees the
 * buffer on the compute stream, after those kernels. A unit stepped by the CPU optimizer is gathered only
 * after the CPU has written its new weights (host wait on updated_step, then the copy stream's ev_updated):
 * a prefetch whose weights are not ready yet is left pending rather than blocking the compute it precedes.
 */
#include <stdio.h>

#include "../base/check.h"
#include "../base/common.h"
#include "../base/oom.h"
#include "part.h"

static bool unit_is_updated(ZeroPart* P, int u) {
    ZpUnit* U = &P->u[u];
    if (!U->opt_cpu) return true;
    pthread_mutex_lock(&P->mu);
    bool ok = U->updated_step >= P->opt_step;
    pthread_mutex_unlock(&P->mu);
    return ok;
}

void zp_wait_unit_updated(ZeroPart* P, int u, cudaStream_t s) {
    ZpUnit* U = &P->u[u];
    if (!U->opt_cpu) return;
    pthread_mutex_lock(&P->mu);
    while (U->updated_step < P->opt_step) pthread_cond_wait(&P->cv, &P->mu);
    const int64_t step = P->opt_step;
    pthread_mutex_unlock(&P->mu);
    // the compute stream waits once per step and unit: a second wait on the same event is redundant in stream
    // order and would break a CUDA graph capture (generation captures its decode step while units are held)
    if (s == P->s_gather || s == P->s_copy) {
        CUDA_CHECK(cudaStreamWaitEvent(s, U->ev_updated, 0));
    } else if (U->update_waited < step) {
        CUDA_CHECK(cudaStreamWaitEvent(s, U->ev_updated, 0));
        U->update_waited = step;
    }
}

// from_pool: the hold mode's gathers of every unit at once, outside the schedule the unit buffers are made for
static void issue_gather(ZeroPart* P, int u, bool prefetch, bool from_pool) {
    ZpUnit* U = &P->u[u];
    zp_wait_unit_updated(P, u, P->s_gather);
    const size_t n = P->pnumel[u];  // world x part: the all-gather's whole buffer
    if (!U->wfull) {
        U->wfull_pool = from_pool;
        if (U->wfull_pool) {
            char what[160];
            snprintf(what, sizeof what, "the gathered stage 3 unit %s", P->name[u]);
            CUDA_ALLOC_CHECK(cudaMallocAsync(&U->wfull, n * P->xs, P->s_gather), what, n * P->xs);
        } else {
            U->wfull = zp_bufs_take(&P->wbufs, u, P->s_gather, "the gathered stage 3 unit", P->name[u]);
        }
    }
    // this rank's partition into its slot of the unit (one rank: the whole unit), then the all-gather in place
    // a pageable host partition (offload_param pin_memory false) goes through ring_main (its bytes read now, after
    // zp_wait_unit_updated above saw the CPU step's result written), or, once its chunk is registered in the
    // background, by the direct copy as a pinned one (part.h, staging ring and background registration)
    const size_t part = P->L.part[u];
    zp_copy_to_dev(P, P->ring_main, (char*)U->wfull + (size_t)P->L.rank * part * P->xs, U->wpart, part * P->xs,
                   cudaMemcpyDefault, P->s_gather);
    if (U->wpart_host) P->st.h2d_bytes += (double)(part * P->xs);
    if (P->L.world > 1) {
        zcoll_all_gather(&P->coll, P->coll.params, U->wfull, part, P->X, P->s_gather, "the parameter all-gather");
        zp_views_sync(P, u, P->s_gather);
    }
    CUDA_CHECK(cudaEventRecord(U->ev_gathered, P->s_gather));
    U->gather_waited = false;
    U->gather_pending = false;
    U->stale = false;
    P->st.gathers++;
    if (prefetch) P->st.prefetches++;
}

static void do_release(ZeroPart* P, int u, cudaStream_t s) {
    ZpUnit* U = &P->u[u];
    if (U->gather_pending) {
        U->gather_pending = false;  // never issued
    } else if (U->wfull && U->wfull_pool) {
        CUDA_CHECK(cudaFreeAsync(U->wfull, s));
    } else if (U->wfull) {
        zp_bufs_give(&P->wbufs, u, s);
    }
    U->wfull = NULL;
    P->st.releases++;
}

void* zp_fetch(ZeroPart* P, int u, cudaStream_t s) {
    ZpUnit* U = &P->u[u];
    if (U->fetched) zp_contract_failed(P, u, "zero_fetch", "fetched twice without release");
    U->fetched = true;
    if (P->o.stage != 3) {
        if (P->L.world > 1 && (U->wfull_ver < P->wver || U->views_ver < P->wver)) {
            // several ranks: the unit's new weights from every rank (each stepped its own part), once per step
            zp_wait_unit_updated(P, u, P->s_gather);
            if (U->wfull_ver < P->wver)
                zcoll_all_gather(&P->coll, P->coll.params, U->wfull, P->L.part[u], P->X, P->s_gather,
                                 "the parameter all-gather");
            U->wfull_ver = P->wver;
            zp_views_sync(P, u, P->s_gather);
            CUDA_CHECK(cudaEventRecord(U->ev_gathered, P->s_gather));
            CUDA_CHECK(cudaStreamWaitEvent(s, U->ev_gathered, 0));
            P->st.gathers++;
            return U->wfull;
        }
        zp_wait_unit_updated(P, u, s);
        return U->wfull;
    }
    if (!P->held) {
        ZeroSchedAction acts[256];
        const int mism = P->S.mismatches;
        int n = zero_sched_fetch(&P->S, u, acts, (int)T5_ARRAY_LEN(acts));
        P->st.trace_mismatches += P->S.mismatches - mism;
        for (int i = 0; i < n; i++) {
            const int v = acts[i].unit;
            // several ranks: every gather is a collective, so the order must not depend on the CPU optimizer's
            // timing: a prefetch waits for its unit's new weights instead of being left pending
            if (!acts[i].prefetch) issue_gather(P, v, false, false);
            else if (P->L.world > 1 || unit_is_updated(P, v)) issue_gather(P, v, true, false);
            else P->u[v].gather_pending = true;
        }
        // pending prefetches whose weights have arrived meanwhile (one rank only: none are pending with several)
        for (int v = 0; v < P->num_units && P->L.world == 1; v++)
            if (v != u && P->u[v].gather_pending && unit_is_updated(P, v)) issue_gather(P, v, true, false);
    }
    if (U->gather_pending || U->stale || !U->wfull) issue_gather(P, u, false, false);
    if (!U->gather_waited) {
        CUDA_CHECK(cudaStreamWaitEvent(s, U->ev_gathered, 0));
        U->gather_waited = true;
    }
    return U->wfull;
}

void zp_release(ZeroPart* P, int u, cudaStream_t s) {
    ZpUnit* U = &P->u[u];
    if (!U->fetched) zp_contract_failed(P, u, "zero_release", "released but not fetched");
    U->fetched = false;
    if (P->o.stage != 3 || P->held) return;
    ZeroSchedAction a;
    if (zero_sched_release(&P->S, u, &a, 1)) do_release(P, u, s);
}

void zp_begin_pass(ZeroPart* P, cudaStream_t s) {
    P->gpos = 0;  // a new backward: the gradient order starts again (reduce.c grad_order_check)
    P->gvalid = true;
    if (P->o.stage != 3 || P->held) return;
    ZeroSchedAction acts[1024];
    int n = zero_sched_reset(&P->S, acts, (int)T5_ARRAY_LEN(acts));
    for (int i = 0; i < n; i++) do_release(P, acts[i].unit, s);
}

bool zp_hold_begin(ZeroPart* P, cudaStream_t s) {
    if (P->o.stage != 3) return true;
    if (P->held) return true;
    size_t need = 0;
    for (int u = 0; u < P->num_units; u++)
        if (!P->u[u].wfull) need += P->L.numel[u] * P->xs;
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    // several ranks: hold only when every rank can (the gathers are collectives)
    if (!zcoll_agree(&P->coll, need + ((size_t)1 << 30) <= fr, s)) return false;
    for (int u = 0; u < P->num_units; u++) {
        ZpUnit* U = &P->u[u];
        zero_sched_set_available(&P->S, u, true);
        if (!U->wfull || U->gather_pending || U->stale) issue_gather(P, u, false, true);
    }
    // every gather ran in order on s_gather: waiting for the last one covers them all
    CUDA_CHECK(cudaEventRecord(P->ev_hold, P->s_gather));
    CUDA_CHECK(cudaStreamWaitEvent(s, P->ev_hold, 0));
    for (int u = 0; u < P->num_units; u++) P->u[u].gather_waited = true;
    P->held = true;
    return true;
}

void zp_hold_end(ZeroPart* P, cudaStream_t s) {
    if (P->o.stage != 3 || !P->held) return;
    P->held = false;
    for (int u = 0; u < P->num_units; u++) {
        if (P->S.persistent[u] || P->u[u].fetched) continue;
        zero_sched_set_available(&P->S, u, false);
        do_release(P, u, s);
    }
}
