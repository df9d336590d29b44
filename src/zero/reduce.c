/*
 * reduce.c: gradients of the partitioned engine (see part.h and REFERENCE 4.3).
 *
 * zero_grad(u)        stage 1: the unit's resident gradient; stages 2/3: a buffer from the stream-ordered pool,
 *                     taken on the compute stream when the backward first asks for it.
 * zero_grad_ready(u)  the compute stream records the unit's ev_grad; on s_grad (overlap_comm; else on the
 *                     compute stream itself) each reduce bucket of the unit is
 *                       converted to communication_data_type (if it differs) and pre-divided by the world size,
 *                       reduce-scattered (one rank: the piece is already this rank's),
 *                       accumulated into the partition's slot in grad_accum_dtype (= on micro-batch 0, += after;
 *                       a host slot goes through the staging buffer: up, add, down; a pageable host slot also
 *                       through the pinned staging ring, part.h),
 *                       on the last micro-batch, its squared norm and non-finite flag go to the bucket's slot;
 *                     then the unit's full gradient buffer is freed (stages 2/3).
 * zero_grad_norm      waits for s_grad and sums the slots in bucket order (deterministic); drains the staging ring
 *                     (pageable host gradients complete on the host before it returns).
 */
#include <stdio.h>

#include "../../cuda/grad_accum.cuh"
#include "../base/check.h"
#include "../base/common.h"
#include "../base/oom.h"
#include "part.h"
#include "zenflow.h"

// The backward's gradient events against the order the estimate replays (part.h gtrace): u + 1 when a unit's
// gradient is first asked for, -(u + 1) at its grad_ready.
static void grad_order_check(ZeroPart* P, int event) {
    if (!P->gtrace || !P->gvalid) return;
    if (P->gpos < P->gtrace_len && P->gtrace[P->gpos] == event) {
        P->gpos++;
        return;
    }
    P->gvalid = false;  // the rest of this pass is not compared
    P->st.grad_order_mismatches++;
}

void* zp_grad(ZeroPart* P, int u, cudaStream_t s) {
    ZpUnit* U = &P->u[u];
    if (U->grad_ready) zp_contract_failed(P, u, "zero_grad", "gradient asked for after grad_ready in the same step");
    if (U->grad_read_wait) {
        // stage 1: the resident gradient is written again only after the reduction stream read the last one
        // (with overlap_comm it may still be packing it, behind the other ranks' collectives)
        CUDA_CHECK(cudaStreamWaitEvent(s, U->ev_grad_read, 0));
        U->grad_read_wait = false;
    }
    if (!U->grad_alloc) {
        if (P->o.stage >= 2) grad_order_check(P, u + 1);
        const size_t bytes = P->L.numel[u] * P->gs;
        U->grad = zp_bufs_take(&P->gbufs, u, s, "the gradient of", P->name[u]);
        if (U->has_gaps) CUDA_CHECK(cudaMemsetAsync(U->grad, 0, bytes, s));
        // several ranks: the padding up to world x part is summed by the reduce-scatter, so it must be zeros
        if (P->pnumel[u] > P->L.numel[u])
            CUDA_CHECK(cudaMemsetAsync((char*)U->grad + bytes, 0, (P->pnumel[u] - P->L.numel[u]) * P->gs, s));
        U->grad_alloc = true;
    }
    return U->grad;
}

void zp_grad_ready(ZeroPart* P, int u, cudaStream_t s) {
    ZpUnit* U = &P->u[u];
    if (U->grad_ready) zp_contract_failed(P, u, "zero_grad_ready", "grad_ready called twice in one step");
    if (!U->grad_alloc) zp_contract_failed(P, u, "zero_grad_ready", "grad_ready but its gradient was never asked for");
    U->grad_ready = true;
    if (P->o.stage >= 2) grad_order_check(P, -(u + 1));
    // the CPU optimizer may still read this unit's host slot from the previous step (it never does once the
    // forward has fetched the unit, which waited for it; this keeps the rule local)
    if (U->opt_cpu) zp_wait_unit_updated(P, u, s);
    cudaStream_t gs = s;
    if (P->o.overlap_comm) {
        CUDA_CHECK(cudaEventRecord(U->ev_grad, s));
        CUDA_CHECK(cudaStreamWaitEvent(P->s_grad, U->ev_grad, 0));
        gs = P->s_grad;
    }
    if (P->zf) zp_zenflow_grad(P, u, gs);  // ZenFlow: selection and g[:, sel], before the buffer goes (zenflow.c)
    const bool add = P->micro > 0, last = P->micro == P->n_micro - 1;
    // DeepSpeed's order pre-divides by the world size here; with world_in_backward the backward already did
    const float predivide = P->o.world_in_backward ? 1.0f : 1.0f / (float)P->L.world;
    const int nb = U->num_buckets;
    for (int k = 0; k < nb; k++) {
        size_t off, len;
        zero_layout_bucket(&P->L, u, P->o.reduce_bucket_size, k, &off, &len);
        if (len == 0) continue;
        // one rank: this rank's slot of the unit starts at element 0, and the reduce-scatter is the identity
        const void* src = (const char*)U->grad + off * P->gs;
        DType sdt = P->G;
        if (P->L.world > 1) {
            // the bucket's piece of every rank's slot, rank after rank, in the comm dtype and pre-divided by the
            // world size (DeepSpeed's order), then one reduce-scatter hands this rank the sum of its piece
            const size_t W = (size_t)P->L.world, part = P->L.part[u];
            for (size_t r = 0; r < W; r++)
                grad_accumulate((char*)P->d_bucket + r * len * P->cs, P->C,
                                (const char*)U->grad + (r * part + off) * P->gs, P->G, len, false, predivide, gs);
            zcoll_reduce_scatter(&P->coll, P->d_bucket, P->d_recv, len, P->C, gs, "the gradient reduce-scatter");
            src = P->d_recv;
            sdt = P->C;
        } else if (P->C != P->G || predivide != 1.0f) {
            grad_accumulate(P->d_bucket ? P->d_bucket : P->d_stage, P->C, src, P->G, len, false, predivide, gs);
            src = P->d_bucket ? P->d_bucket : P->d_stage;
            sdt = P->C;
        }
        void* dst = (char*)U->gacc + off * P->as;
        double* slot = P->d_slots + U->bucket_first + k;
        int* flag = P->d_flags + U->bucket_first + k;
        if (!U->opt_cpu) {
            grad_accumulate(dst, P->A, src, sdt, len, add, 1.0f, gs);
            if (last) grad_sumsq(dst, P->A, len, slot, flag, P->d_sq_scratch, gs);
        } else {
            void* st = P->d_stage;
            if (src == st) {  // the comm conversion used the staging buffer: accumulate in place
                if (add) t5_die(T5_EXIT_FAILURE, "internal: ZeRO staging buffer aliasing with accumulation");
            }
            // pinned gacc: plain async copies. Pageable gacc: through ring_main (part.h): the H2D reads the host
            // slot now, after the ring retired the previous micro-batch's D2H into it; the D2H lands when the ring
            // retires it (at the latest in zp_grad_norm's drain, before any host reader). Once the slot's chunk is
            // registered in the background, the plain async copies of the pinned case, after the ring retired its
            // pending D2H into the range (zero_hostreg_copy).
            if (add) {
                zp_copy_to_dev(P, P->ring_main, st, dst, len * P->as, cudaMemcpyHostToDevice, gs);
                P->st.h2d_bytes += (double)(len * P->as);
            }
            if (src != st || sdt != P->A) grad_accumulate(st, P->A, src, sdt, len, add, 1.0f, gs);
            if (last) grad_sumsq(st, P->A, len, slot, flag, P->d_sq_scratch, gs);
            zp_copy_to_host(P, P->ring_main, dst, st, len * P->as, cudaMemcpyDeviceToHost, gs);
            P->st.d2h_bytes += (double)(len * P->as);
        }
    }
    if (P->o.stage == 1 && gs != s) {
        CUDA_CHECK(cudaEventRecord(U->ev_grad_read, gs));
        U->grad_read_wait = true;
    }
    if (P->o.stage >= 2) {
        zp_bufs_give(&P->gbufs, u, gs);
        U->grad = NULL;
        U->grad_alloc = false;
    }
}

void zp_grad_norm(ZeroPart* P, float* d_norm2, int* d_overflow, cudaStream_t s) {
    for (int u = 0; u < P->num_units; u++)
        if (!P->u[u].grad_ready) zp_contract_failed(P, u, "zero_grad_norm", "not grad_ready before zero_grad_norm");
    if (P->micro != P->n_micro - 1)
        t5_die(T5_EXIT_FAILURE, "internal: zero_grad_norm on micro-batch %d of %d", P->micro, P->n_micro);
    CUDA_CHECK(cudaEventRecord(P->ev_grads_done, P->s_grad));
    CUDA_CHECK(cudaStreamWaitEvent(s, P->ev_grads_done, 0));
    double* total = P->d_slots + P->num_slots;  // the slots' last element: this rank's sum, then every rank's
    grad_sumsq_combine(P->d_slots, P->d_flags, P->num_slots, total, d_overflow, s);
    if (P->L.world > 1) {  // every rank's partition: the sum of the squares (fp64, rounded once below), any overflow
        zcoll_all_reduce_f64(&P->coll, total, 1, s, "the gradient norm all-reduce");
        zcoll_all_reduce_i32(&P->coll, d_overflow, 1, ncclMax, s, "the overflow all-reduce");
    }
    grad_sumsq_round(total, d_norm2, s);
    // pageable host gradients: the D2H copies went into ring_main's slots; retire them all now (the host waits for
    // s_grad's copies, which the trainer waits for right after anyway, and moves the last slots out), so that the
    // host gacc / shared whost is complete before the CPU optimizer thread, which reads it once ev_grads_done has
    // passed, is handed the step (zp_optimizer_step drains again, a no-op then). No ring: nothing to do.
    zp_ring_drain(P->ring_main);
}
