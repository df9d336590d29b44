/*
 * part.c: the partitioned engine's buffers (see part.h): layout, allocation with the memory checks made
 * before anything is allocated, fp32 views, weights and optimizer state in and out.
 */
#include "part.h"
#include "../launch/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "../../cuda/elementwise.cuh"
#include "../../cuda/grad_accum.cuh"
#include "../base/check.h"
#include "../base/common.h"
#include "estimate.h"
#include "step_adafactor.h"

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }
static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

// ---------------------------------------------------------------------------------------------
// fp16/bf16 <-> fp32 on the host (publishing the master of CPU units after a load)

static void host_round_to_x(void* dst, DType X, const float* src, size_t n) {
    if (X == DT_F16) {
        uint16_t* d = dst;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) d[i] = cpu_adam_f32_to_f16(src[i]);
    } else if (X == DT_BF16) {
        uint16_t* d = dst;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) d[i] = cpu_adam_f32_to_bf16(src[i]);
    }
}

static int dev_alloc(ZeroPart* P, void** p, size_t bytes, const char* what, char* err, size_t errlen) {
    *p = NULL;
    if (bytes == 0) return 0;
    if (cudaMalloc(p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return t5_set_err(err, errlen,
                          "out of GPU memory for the %s: %.2f GiB asked, %.2f GiB free; offload more to the CPU "
                          "(offload_optimizer ratio closer to 1, offload_param cpu) or a higher ZeRO stage",
                          what, gib((double)bytes), gib((double)fr));
    }
    CUDA_CHECK(cudaMemset(*p, 0, bytes));
    P->gpu_bytes += bytes;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// staging rings (part.h, staging.h): the CUDA side of ZeroRingOps

static void ring_copy(void* ctx, int slot, void* dst, const void* src, size_t n, bool to_host, void* stream) {
    ZpRing* R = ctx;
    cudaStream_t s = (cudaStream_t)stream;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaEventRecord(R->ev[slot], s));
}

static void ring_wait(void* ctx, int slot) {
    ZpRing* R = ctx;
    CUDA_CHECK(cudaEventSynchronize(R->ev[slot]));
}

static ZpRing* ring_create(int count, size_t slot_bytes, const char* what, char* err, size_t errlen) {
    ZpRing* R = calloc_check(1, sizeof *R);
    if (host_buf_alloc(&R->mem, (size_t)count * slot_bytes, true, what, err, errlen)) {
        free(R);
        return NULL;
    }
    R->ev = calloc_check((size_t)count, sizeof *R->ev);
    for (int k = 0; k < count; k++) CUDA_CHECK(cudaEventCreateWithFlags(&R->ev[k], cudaEventDisableTiming));
    zero_ring_init(&R->r, count, slot_bytes, R->mem.ptr, (ZeroRingOps){ring_copy, ring_wait, R});
    return R;
}

static void ring_destroy(ZpRing* R) {
    if (!R) return;
    const int count = R->r.count;
    zero_ring_free(&R->r);  // retires what is pending first
    for (int k = 0; k < count; k++) cudaEventDestroy(R->ev[k]);
    free(R->ev);
    host_buf_free(&R->mem);
    free(R);
}

void zp_ring_drain(ZpRing* ring) {
    if (ring) zero_ring_drain(&ring->r);
}

bool zp_host_pageable(const ZeroPart* P, const void* p) {
    const HostBuf* b[] = {&P->h_master, &P->h_m, &P->h_v, &P->h_gacc, &P->h_w};
    const char* c = p;
    for (size_t i = 0; i < T5_ARRAY_LEN(b); i++)
        if (b[i]->ptr && c >= (const char*)b[i]->ptr && c < (const char*)b[i]->ptr + b[i]->bytes) return !b[i]->pinned;
    return false;
}

// the direct copy of a range registered in the background (host_register.h ZeroDirectOps): the pinned path's own
static void direct_copy(void* ctx, void* dst, const void* src, size_t n, bool to_host, void* stream) {
    (void)to_host;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, *(const enum cudaMemcpyKind*)ctx, (cudaStream_t)stream));
}

// a pageable host side: through the ring, or, piece by piece once a piece's chunk is registered (part_hostreg.c), the
// direct copy after the ring's pending D2H into that piece landed (zero_hostreg_copy); the direct bytes are counted
// (ZeroStats.direct_bytes)
void zp_copy_to_dev(ZeroPart* P, ZpRing* ring, void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind,
                    cudaStream_t s) {
    if (!zp_host_pageable(P, src)) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
        return;
    }
    if (!ring) t5_die(T5_EXIT_FAILURE, "internal: ZeRO copy from a pageable host buffer without a staging ring");
    const size_t direct = zero_hostreg_copy(P->hostreg, &ring->r, dst, src, bytes, false, s,
                                            (ZeroDirectOps){direct_copy, &kind});
    if (direct) __atomic_add_fetch(&P->direct_bytes, (int64_t)direct, __ATOMIC_RELAXED);
}

void zp_copy_to_host(ZeroPart* P, ZpRing* ring, void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind,
                     cudaStream_t s) {
    if (!zp_host_pageable(P, dst)) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
        return;
    }
    if (!ring) t5_die(T5_EXIT_FAILURE, "internal: ZeRO copy to a pageable host buffer without a staging ring");
    const size_t direct = zero_hostreg_copy(P->hostreg, &ring->r, dst, src, bytes, true, s,
                                            (ZeroDirectOps){direct_copy, &kind});
    if (direct) __atomic_add_fetch(&P->direct_bytes, (int64_t)direct, __ATOMIC_RELAXED);
}

void zero_options_default(ZeroOptions* o) {
    memset(o, 0, sizeof *o);
    o->stage = 0;
    o->world = 1;
    o->rank = 0;
    o->working_dtype = o->grad_dtype = o->comm_dtype = o->accum_dtype = DT_F32;
    o->ratio = 1.0;
    o->buffer_count = 4;
    o->aio_block_size = 1048576;  // DeepSpeed 0.19.8's aio section
    o->aio_queue_depth = 8;
    o->aio_threads = 1;
    o->aio_overlap_events = true;
    o->sub_group_size = 1000000000;
    o->reduce_bucket_size = 500000000;
    o->allgather_bucket_size = 500000000;
    o->prefetch_bucket_size = 50000000;
    o->max_live_parameters = 1000000000;
    o->max_reuse_distance = 1000000000;
    o->persistence_threshold = 100000;
    o->overlap_comm = true;
    o->grad_accum_steps = 1;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->adamw_mode = true;
}

static void views_pieces(ZeroPart* P, int u);

// ---------------------------------------------------------------------------------------------
// zp_create, step by step: the options checked, the unit tables, the tensors' segments and views, the memory
// checks against src/zero/estimate.c's sizes (E), the host and device buffers, the per-unit pointers carved from
// them, the streams and run-time buffers. Each step that can fail returns -1 with err set; zp_create then hands
// the partly built P to zp_destroy, which frees what each step made.

// The combinations the engine refuses before it allocates anything.
static int check_options(const ZeroOptions* o, char* err, size_t errlen) {
    if (o->stage < 1 || o->stage > 3) return t5_set_err(err, errlen, "ZeRO stage %d is not 1, 2 or 3", o->stage);
    if (o->world > 1 && (!o->comm || comm_world_size(o->comm) != o->world || comm_rank(o->comm) != o->rank))
        return t5_set_err(err, errlen, "internal: ZeRO over %d ranks without the run's communicator", o->world);
    if (o->offload_param && o->stage != 3)
        return t5_set_err(err, errlen, "offload_param needs ZeRO stage 3 (this run is stage %d), as in DeepSpeed",
                          o->stage);
    if (o->nvme_path[0] && (!o->offload_optimizer || o->optimizer == ZERO_OPTIM_ADAFACTOR))
        return t5_set_err(err, errlen, "%s", o->offload_optimizer ? "not implemented yet: offload_optimizer nvme with "
                          "Adafactor (its state stays in host memory: use device cpu)" : "internal: nvme_path without "
                          "offload_optimizer");
    if (o->grad_dtype != o->working_dtype && o->grad_dtype != DT_F32)
        return t5_set_err(err, errlen, "gradients in %s with %s weights are not supported", dtype_name(o->grad_dtype),
                          dtype_name(o->working_dtype));
    return 0;
}

// P with its options (the caller's arrays not kept; stages 2/3: a copy of the gradient trace), dtypes, layout L,
// collectives, and per unit: pnumel, name, opt_cpu. NULL with err set when the layout cannot be built.
static ZeroPart* part_new(const ZeroOptions* o, int num_units, const size_t* unit_numel, const char* const* unit_name,
                          char* err, size_t errlen) {
    ZeroPart* P = calloc_check(1, sizeof *P);
    P->o = *o;
    P->o.tensors = NULL;
    P->o.trace = NULL;
    P->o.grad_trace = NULL;  // the caller's arrays are not kept
    if (o->stage >= 2 && o->grad_trace && o->grad_trace_len > 0) {
        P->gtrace = malloc_check((size_t)o->grad_trace_len * sizeof *P->gtrace);
        memcpy(P->gtrace, o->grad_trace, (size_t)o->grad_trace_len * sizeof *P->gtrace);
        P->gtrace_len = o->grad_trace_len;
    }
    P->num_units = num_units;
    P->X = o->working_dtype;
    P->G = o->grad_dtype;
    P->C = o->comm_dtype;
    P->A = o->accum_dtype;
    P->xs = dtype_size(P->X);
    P->gs = dtype_size(P->G);
    P->cs = dtype_size(P->C);
    P->as = dtype_size(P->A);
    CUDA_CHECK(cudaGetDevice(&P->device));
    if (zero_layout_build(&P->L, o->world, o->rank, num_units, unit_numel, o->sub_group_size,
                          o->offload_optimizer ? o->ratio : 0.0, err, errlen)) {
        free(P->gtrace);
        free(P);
        return NULL;
    }
    const ZeroLayout* L = &P->L;
    zcoll_init(&P->coll, o->world > 1 ? o->comm : NULL);
    P->pnumel = malloc_check((size_t)num_units * sizeof *P->pnumel);
    for (int u = 0; u < num_units; u++) P->pnumel[u] = L->part[u] * (size_t)L->world;
    P->name = calloc_check((size_t)num_units, sizeof(char*));
    P->u = calloc_check((size_t)num_units, sizeof(ZpUnit));
    for (int u = 0; u < num_units; u++) {
        char buf[32];
        snprintf(buf, sizeof buf, "unit %d", u);
        P->name[u] = strdup_check(unit_name && unit_name[u] ? unit_name[u] : buf);
        P->u[u].opt_cpu = L->group_cpu[L->unit_group[u]];
    }
    return P;
}

// Per unit: its segments (the owned part of each tensor, for weight decay), its fp32 views (offsets and sizes; the
// pointers come with the device buffers), whether some element lies in no tensor (has_gaps).
static int part_tensors(ZeroPart* P, const ZeroOptions* o, const size_t* unit_numel, char* err, size_t errlen) {
    const ZeroLayout* L = &P->L;
    for (int i = 0; i < o->num_tensors; i++) {
        const ZeroTensor* t = &o->tensors[i];
        if (t->unit < 0 || t->unit >= P->num_units || t->offset + t->numel > unit_numel[t->unit])
            return t5_set_err(err, errlen, "ZeRO: tensor %d lies outside its unit", i);
        ZpUnit* U = &P->u[t->unit];
        size_t a = T5_MAX(t->offset, L->lo[t->unit]), b = T5_MIN(t->offset + t->numel, L->hi[t->unit]);
        if (b > a) {
            U->segs = realloc_check(U->segs, (size_t)(U->nsegs + 1) * sizeof(ZpSeg));
            U->segs[U->nsegs++] = (ZpSeg){a - L->lo[t->unit], b - a, t->decay};
        }
        if (t->fp32_view) {
            U->view_off = realloc_check(U->view_off, (size_t)(U->nviews + 1) * sizeof(size_t));
            U->view_numel = realloc_check(U->view_numel, (size_t)(U->nviews + 1) * sizeof(size_t));
            U->view_ptr = realloc_check(U->view_ptr, (size_t)(U->nviews + 1) * sizeof(float*));
            U->view_off[U->nviews] = t->offset;
            U->view_numel[U->nviews] = t->numel;
            U->nviews++;
        }
    }
    for (int u = 0; u < P->num_units; u++) {
        size_t covered = 0;
        for (int i = 0; i < o->num_tensors; i++)
            if (o->tensors[i].unit == u) covered += o->tensors[i].numel;
        P->u[u].has_gaps = covered != unit_numel[u];
    }
    return 0;
}

// The plan's host and resident GPU bytes (E) against what this host and this GPU have, before any allocation.
static int check_memory(const ZeroOptions* o, const ZeroMemEstimate* E, char* err, size_t errlen) {
    size_t avail = host_mem_available();
    // several ranks on this host: each plans with its share (they allocate at the same time)
    if (o->world > 1 && o->comm) avail /= (size_t)T5_MAX(comm_local_world_size(o->comm), 1);
    const size_t margin = (size_t)2 << 30;  // the process itself, the data, the CUDA runtime
    if (E->host_total + margin > avail)
        return t5_set_err(
            err, errlen,
            "not enough host memory for this ZeRO plan: %.2f GiB asked (fp32 master + optimizer state %.2f GiB, "
            "gradients %.2f GiB, 16-bit weights %.2f GiB for %.3g offloaded parameters, pinned staging %.2f "
            "GiB), %.2f GiB available; lower offload_optimizer.ratio (keeps part of the optimizer on the GPU) "
            "or use fewer parameters",
            gib((double)E->host_total), gib((double)(E->host_master + E->host_m + E->host_v)),
            gib((double)E->host_gacc), gib((double)E->host_w), (double)E->cpu_numel, gib((double)E->host_staging),
            gib((double)avail));
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    if (E->gpu_resident > fr)
        return t5_set_err(err, errlen,
                          "out of GPU memory for this ZeRO plan: %.2f GiB of resident state asked (%.3g parameters' "
                          "optimizer state on the GPU), %.2f GiB free; offload more (offload_optimizer ratio closer to "
                          "1, offload_param cpu) or a higher ZeRO stage",
                          gib((double)E->gpu_resident), (double)E->gpu_numel, gib((double)fr));
    return 0;
}

// Host: master, m, v, gacc of the CPU units, their 16-bit weights (whost == wpart with offload_param), and the
// pinned staging rings when some host buffer is pageable. Exactly E's bytes.
static int alloc_host(ZeroPart* P, const ZeroOptions* o, const ZeroMemEstimate* E, char* err, size_t errlen) {
    const bool ada = o->optimizer == ZERO_OPTIM_ADAFACTOR;  // its state in the m buffers (estimate.h)
    const bool pin_any = o->optimizer_pin_memory || o->param_pin_memory;
    if (host_buf_alloc(&P->h_master, E->host_master, o->optimizer_pin_memory, "offloaded fp32 master weights", err,
                       errlen) ||
        host_buf_alloc(&P->h_m, E->host_m, o->optimizer_pin_memory,
                       ada ? "offloaded Adafactor state" : "offloaded Adam first moments", err, errlen) ||
        host_buf_alloc(&P->h_v, E->host_v, o->optimizer_pin_memory, "offloaded Adam second moments", err, errlen) ||
        host_buf_alloc(&P->h_gacc, E->host_gacc, o->optimizer_pin_memory, "offloaded gradients", err, errlen) ||
        host_buf_alloc(&P->h_w, E->host_w, o->offload_param ? o->param_pin_memory : pin_any,
                       o->offload_param ? "offloaded 16-bit parameters" : "16-bit weights of the CPU optimizer", err,
                       errlen))
        return -1;
    if (E->host_staging > 0) {
        P->ring_main = ring_create(E->staging_count, E->staging_slot_bytes, "pinned staging ring (main thread)", err,
                                   errlen);
        if (!P->ring_main) return -1;
        P->ring_opt = ring_create(E->staging_count, E->staging_slot_bytes, "pinned staging ring (CPU optimizer)", err,
                                  errlen);
        if (!P->ring_opt) return -1;
    }
    const size_t host_got = P->h_master.bytes + P->h_m.bytes + P->h_v.bytes + P->h_gacc.bytes + P->h_w.bytes +
                            (P->ring_main ? P->ring_main->mem.bytes + P->ring_opt->mem.bytes : 0) +
                            E->host_ada_scratch;  // Adafactor's cut CPU tensors' sums and factors: zp_ada_create's
    if (host_got + E->host_nvme_pool != E->host_total)  // the swap pool: zp_nvme_create
        t5_die(T5_EXIT_FAILURE, "internal: ZeRO allocated %zu host bytes, src/zero/estimate.c says %zu", host_got,
               E->host_total);
    return 0;
}

// Device: master, m, v, gacc of the GPU units; the stage 3 partitions or the resident weights (stages 1/2); stage 1's
// resident gradients; the fp32 views; the gradient staging, bucket and reduce-scatter piece; the norm slots.
static int alloc_device(ZeroPart* P, const ZeroOptions* o, const ZeroMemEstimate* E, char* err, size_t errlen) {
    const bool ada = o->optimizer == ZERO_OPTIM_ADAFACTOR;
    const size_t bucket = E->bucket_elems;
    const size_t d_w = o->stage == 3 ? 0 : E->gpu_weights;  // stages 1/2: every unit resident (W = 1)
    const size_t d_wpart = o->stage == 3 ? E->gpu_weights : 0;
    if (dev_alloc(P, (void**)&P->d_master, E->gpu_master, "fp32 master weights", err, errlen) ||
        dev_alloc(P, (void**)&P->d_m, E->gpu_m, ada ? "Adafactor state" : "Adam first moments", err, errlen) ||
        dev_alloc(P, (void**)&P->d_v, E->gpu_v, "Adam second moments", err, errlen) ||
        dev_alloc(P, &P->d_gacc, E->gpu_gacc, "accumulated gradients", err, errlen) ||
        dev_alloc(P, &P->d_wfull, d_w, "16-bit weights", err, errlen) ||
        dev_alloc(P, &P->d_wpart, d_wpart, "16-bit parameter partitions", err, errlen) ||
        dev_alloc(P, &P->d_grad, E->gpu_grads, "gradients", err, errlen) ||
        dev_alloc(P, (void**)&P->d_views, E->view_elems * 4, "fp32 views (norm weights, bias tables, embedding)", err,
                  errlen))
        return -1;
    if (o->no_optimizer_state) return 0;  // evaluation only: no gradient path (estimate.c gpu_comm 0)
    if (dev_alloc(P, &P->d_stage, bucket * T5_MAX(T5_MAX(P->as, P->cs), (size_t)4), "gradient staging", err,
                  errlen) ||
        dev_alloc(P, &P->d_bucket, P->L.world > 1 ? E->send_elems * P->cs : P->C != P->G ? bucket * P->cs : 0,
                  "gradient bucket", err, errlen) ||
        dev_alloc(P, &P->d_recv, E->recv_elems * P->cs, "reduce-scatter piece", err, errlen) ||
        dev_alloc(P, (void**)&P->d_slots, (size_t)(P->num_slots + 1) * sizeof(double), "norm slots", err, errlen) ||
        dev_alloc(P, (void**)&P->d_flags, (size_t)P->num_slots * sizeof(int), "norm flags", err, errlen) ||
        dev_alloc(P, &P->d_sq_scratch, grad_sumsq_scratch_bytes(), "norm scratch", err, errlen))
        return -1;
    return 0;
}

// Every unit's pointers into the host and device buffers (its partition p = L.part[u], in unit order within each
// buffer), its fp32 views, its broadcast pieces (several ranks) and events.
static void carve_units(ZeroPart* P, const ZeroOptions* o) {
    const ZeroLayout* L = &P->L;
    const bool x32 = P->X == DT_F32;
    size_t gp = 0, cp = 0, wp = 0, vw = 0, fo = 0;  // fo: a unit's offset in the resident weights / gradients
    for (int u = 0; u < P->num_units; u++) {
        ZpUnit* U = &P->u[u];
        const size_t p = L->part[u];
        // a buffer the plan does not have (evaluation only, model/zero.h no_optimizer_state) leaves its pointer NULL
        if (U->opt_cpu) {
            U->master = P->h_master.ptr ? (float*)P->h_master.ptr + cp : NULL;
            U->m = P->h_m.ptr ? (float*)P->h_m.ptr + cp : NULL;
            U->v = P->h_v.ptr ? (float*)P->h_v.ptr + cp : NULL;
            U->whost = x32 || !P->h_w.ptr ? NULL : (char*)P->h_w.ptr + cp * P->xs;
            U->gacc = P->share_gw ? U->whost : P->h_gacc.ptr ? (char*)P->h_gacc.ptr + cp * P->as : NULL;
            cp += p;
        } else {
            U->master = P->d_master ? P->d_master + gp : NULL;
            U->m = P->d_m ? P->d_m + gp : NULL;
            U->v = P->d_v ? P->d_v + gp : NULL;
            U->gacc = P->d_gacc ? (char*)P->d_gacc + gp * P->as : NULL;
            gp += p;
        }
        if (o->stage == 3) {
            if (o->offload_param && U->opt_cpu) {
                U->wpart = x32 ? (void*)U->master : U->whost;  // gathers read the host copy directly
                U->wpart_host = true;
            } else {
                U->wpart = (char*)P->d_wpart + wp * P->xs;
                wp += p;
            }
        } else {
            U->wfull = (char*)P->d_wfull + fo * P->xs;  // world x part: the padded unit (in-place all-gather)
            if (o->stage == 1) {
                U->grad = (char*)P->d_grad + fo * P->gs;
                U->grad_alloc = true;
            }
            fo += P->pnumel[u];
        }
        for (int k = 0; k < U->nviews; k++) {
            U->view_ptr[k] = P->d_views + vw;
            vw += CEIL_DIV(U->view_numel[k], (size_t)8) * 8;
        }
        views_pieces(P, u);
        CUDA_CHECK(cudaEventCreateWithFlags(&U->ev_gathered, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&U->ev_updated, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&U->ev_grad, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&U->ev_grad_read, cudaEventDisableTiming));
    }
}

// The engine's streams and events, the stream-ordered pool, the run-time unit buffers (stages 2/3) and the stage 3
// schedule.
static void make_streams(ZeroPart* P, const ZeroOptions* o) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&P->s_gather, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&P->s_grad, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&P->s_copy, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&P->ev_grads_done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&P->ev_gpu_step, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&P->ev_hold, cudaEventDisableTiming));
    // the stream-ordered pool serves only the hold mode's extra units (gather.c); its default release threshold (0)
    // gives their memory back to the device at the next synchronisation after the evaluation frees them
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&P->pool, P->device));
    const int num_units = P->num_units;
    if (o->stage >= 2) {  // run-time unit buffers by bufcache's rule (unitbuf.c; the estimate replays it)
        size_t* ub = malloc_check((size_t)num_units * sizeof *ub);
        if (o->stage == 3) {
            for (int u = 0; u < num_units; u++) ub[u] = P->pnumel[u] * P->xs;
            zp_bufs_init(&P->wbufs, num_units, ub, BUFCACHE_QUARANTINE);
        }
        for (int u = 0; u < num_units; u++) ub[u] = P->pnumel[u] * P->gs;
        zp_bufs_init(&P->gbufs, num_units, ub, BUFCACHE_QUARANTINE);
        free(ub);
    }
    if (o->stage == 3)
        zero_sched_init(&P->S, num_units, P->L.numel, o->trace, o->trace_len, o->prefetch_bucket_size,
                        o->max_live_parameters, o->max_reuse_distance, o->persistence_threshold);
}

ZeroPart* zp_create(const ZeroOptions* o, int num_units, const size_t* unit_numel, const char* const* unit_name,
                    char* err, size_t errlen) {
    const double t0 = now_s();
    if (check_options(o, err, errlen)) return NULL;
    ZeroPart* P = part_new(o, num_units, unit_numel, unit_name, err, errlen);
    if (!P) return NULL;
    if (part_tensors(P, o, unit_numel, err, errlen)) goto fail;
    // sizes: src/zero/estimate.c, the one source of truth (t5train estimate reads the same numbers)
    ZeroMemEstimate E;
    zero_estimate_layout(o, &P->L, &E);
    // T5TRAIN_PAGEABLE_REGISTER checked (exit 2) before the host buffers are allocated, and only when some buffer the
    // GPU copies touch will be pageable (a fully pinned run ignores the variable)
    if (E.host_register > 0) (void)zp_hostreg_mode();
    P->bucket_elems = E.bucket_elems;
    for (int u = 0; u < num_units; u++) {
        P->u[u].bucket_first = P->num_slots;
        P->u[u].num_buckets = zero_layout_num_buckets(&P->L, u, o->reduce_bucket_size);
        P->num_slots += P->u[u].num_buckets;
    }
    P->share_gw = zero_host_grads_share_weights(o);
    if (check_memory(o, &E, err, errlen) || alloc_host(P, o, &E, err, errlen) || alloc_device(P, o, &E, err, errlen))
        goto fail;
    carve_units(P, o);
    if (!o->no_optimizer_state && zp_nvme_create(P, E.nvme_file_bytes, E.host_nvme_pool, err, errlen)) goto fail;  // offload_optimizer nvme: m, v in the swap file (part_nvme.c)
    make_streams(P, o);
    // Adafactor: its tables and GPU plan (the plan's scratch joins gpu_bytes)
    if (o->optimizer == ZERO_OPTIM_ADAFACTOR && !o->no_optimizer_state && zp_ada_create(P, o, err, errlen)) goto fail;
    P->n_micro = 1;
    P->st.host_bytes = E.host_total;
    P->st.host_pinned_bytes = E.host_pinned;
    P->st.host_grads_share_weights = P->share_gw;
    P->st.gpu_bytes = P->gpu_bytes;
    if (P->gpu_bytes != E.gpu_resident)
        t5_die(T5_EXIT_FAILURE, "internal: ZeRO allocated %zu GPU bytes, src/zero/estimate.c says %zu", P->gpu_bytes,
               E.gpu_resident);
    CUDA_CHECK(cudaDeviceSynchronize());
    P->st.init_s = now_s() - t0;
    // pageable buffers: registered with CUDA by a worker thread from now on, while the run goes on (part_hostreg.c)
    zp_hostreg_start(P);
    return P;
fail:
    zp_destroy(P);
    return NULL;
}

void zp_destroy(ZeroPart* P) {
    if (!P) return;
    zp_hostreg_stop(P);  // the registration worker stops (after the chunk it is registering) and is joined first
    zp_ada_destroy(P);
    zp_nvme_destroy(P);
    if (P->s_gather) {
        CUDA_CHECK(cudaDeviceSynchronize());
        cudaStreamDestroy(P->s_gather);
        cudaStreamDestroy(P->s_grad);
        cudaStreamDestroy(P->s_copy);
        cudaEventDestroy(P->ev_grads_done);
        cudaEventDestroy(P->ev_gpu_step);
        cudaEventDestroy(P->ev_hold);
    }
    zp_bufs_destroy(&P->wbufs);
    zp_bufs_destroy(&P->gbufs);
    free(P->gtrace);
    for (int u = 0; P->u && u < P->num_units; u++) {
        ZpUnit* U = &P->u[u];
        if (U->ev_gathered) cudaEventDestroy(U->ev_gathered);
        if (U->ev_updated) cudaEventDestroy(U->ev_updated);
        if (U->ev_grad) cudaEventDestroy(U->ev_grad);
        if (U->ev_grad_read) cudaEventDestroy(U->ev_grad_read);
        if (P->o.stage == 3 && U->wfull && U->wfull_pool) cudaFree(U->wfull);  // else wbufs' (below)
        free(U->segs);
        free(U->view_off);
        free(U->view_numel);
        free(U->view_ptr);
        free(U->bcast_ptr);
        free(U->bcast_count);
        free(U->bcast_root);
        free(P->name[u]);
    }
    void* dev[] = {P->d_master, P->d_m, P->d_v, P->d_gacc, P->d_wfull, P->d_wpart, P->d_grad, P->d_views, P->d_stage,
                   P->d_bucket, P->d_recv, P->d_slots, P->d_flags, P->d_sq_scratch};
    for (size_t i = 0; i < T5_ARRAY_LEN(dev); i++)
        if (dev[i]) cudaFree(dev[i]);
    // every pending D2H of a ring lands (or is dropped with the buffers right after): retire before freeing
    ring_destroy(P->ring_main);
    ring_destroy(P->ring_opt);
    // what the worker registered is unregistered before the buffers are unmapped (no copy in flight: the device
    // was synchronised above and the rings drained)
    zp_hostreg_release(P);
    host_buf_free(&P->h_master);
    host_buf_free(&P->h_m);
    host_buf_free(&P->h_v);
    host_buf_free(&P->h_gacc);
    host_buf_free(&P->h_w);
    if (P->o.stage == 3 && P->S.trace) zero_sched_free(&P->S);
    zero_layout_free(&P->L);
    free(P->pnumel);
    free(P->name);
    free(P->u);
    free(P);
}

void zp_contract_failed(ZeroPart* P, int unit, const char* fn, const char* rule) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s %s", P->name[unit], rule);
    t5_check_failed("ZERO", fn, msg, __FILE__, __LINE__, fn);
}

const float* zp_fp32_tensor(ZeroPart* P, int unit, size_t offset) {
    ZpUnit* U = &P->u[unit];
    for (int k = 0; k < U->nviews; k++)
        if (U->view_off[k] == offset) return U->view_ptr[k];
    char msg[200];
    snprintf(msg, sizeof msg, "fp32 view of the tensor at offset %zu of %s was not registered (ZeroTensor.fp32_view)",
             offset, P->name[unit]);
    t5_check_failed("ZERO", "zero_fp32_tensor", msg, __FILE__, __LINE__, __func__);
    return NULL;
}

// views of unit u from its master (owned range; one rank: the whole unit), on stream s; a pageable host master
// goes through `ring` (the calling thread's)
void zp_publish_views(ZeroPart* P, int u, cudaStream_t s, ZpRing* ring) {
    ZpUnit* U = &P->u[u];
    const size_t lo = P->L.lo[u], hi = P->L.hi[u];
    // the owned piece of each view (several ranks: the others' pieces arrive by zp_views_sync before the unit is used)
    for (int k = 0; k < U->nviews; k++) {
        const size_t a = T5_MAX(U->view_off[k], lo), b = T5_MIN(U->view_off[k] + U->view_numel[k], hi);
        if (b > a)
            zp_copy_to_dev(P, ring, U->view_ptr[k] + (a - U->view_off[k]), U->master + (a - lo), (b - a) * 4,
                           cudaMemcpyDefault, s);
    }
}

// several ranks: each view's pieces by owner (rank r owns the unit's [r x part, (r+1) x part) clipped to numel)
static void views_pieces(ZeroPart* P, int u) {
    ZpUnit* U = &P->u[u];
    const int W = P->L.world, cap = U->nviews * W;
    if (W == 1 || cap == 0) return;
    const size_t part = P->L.part[u], numel = P->L.numel[u];
    U->bcast_ptr = malloc_check((size_t)cap * sizeof *U->bcast_ptr);
    U->bcast_count = malloc_check((size_t)cap * sizeof *U->bcast_count);
    U->bcast_root = malloc_check((size_t)cap * sizeof *U->bcast_root);
    for (int k = 0; k < U->nviews; k++)
        for (int r = 0; r < W; r++) {
            const size_t off = U->view_off[k], end = off + U->view_numel[k];
            const size_t a = T5_MAX(off, (size_t)r * part), b = T5_MIN(end, T5_MIN((size_t)(r + 1) * part, numel));
            if (b <= a) continue;
            U->bcast_ptr[U->nbcast] = U->view_ptr[k] + (a - off);
            U->bcast_count[U->nbcast] = b - a;
            U->bcast_root[U->nbcast++] = r;
        }
}

void zp_views_sync(ZeroPart* P, int u, cudaStream_t s) {
    ZpUnit* U = &P->u[u];
    if (P->L.world == 1 || U->views_ver >= P->wver) return;
    U->views_ver = P->wver;
    zcoll_broadcast_group(&P->coll, P->coll.params, U->nbcast, U->bcast_ptr, U->bcast_count, U->bcast_root, s,
                          "the fp32 views' broadcast");
}

// called by the CPU optimizer thread (ring_opt) after its AdamW wrote the unit, and by zp_sync_working on the main
// thread (ring_main) while the optimizer thread is idle. Pageable host side, two paths (zp_copy_to_dev): through the
// ring the host bytes are copied into the slots before this returns; a piece in a chunk registered in the background
// takes the direct copy, read when the stream gets there, as with pinned buffers, whose ordering (the next CPU step
// waits for ev_updated / ev_grads_done) keeps whost / master unwritten until then.
void zp_publish_unit_host(ZeroPart* P, int u, ZpRing* ring) {
    ZpUnit* U = &P->u[u];
    if (!U->master) zp_contract_failed(P, u, __func__, "has no fp32 master to publish (evaluation-only engine)");
    void* dst = zp_unit_x_dst(P, u);
    const size_t n = P->L.hi[u] - P->L.lo[u];
    if (dst) {
        const void* src = P->X == DT_F32 ? (const void*)U->master : U->whost;
        zp_copy_to_dev(P, ring, dst, src, n * P->xs, cudaMemcpyDefault, P->s_copy);
        __atomic_add_fetch(&P->thread_h2d, (int64_t)(n * P->xs), __ATOMIC_RELAXED);
    }
    zp_publish_views(P, u, P->s_copy, ring);
    CUDA_CHECK(cudaEventRecord(U->ev_updated, P->s_copy));
}

void zp_sync_working(ZeroPart* P, cudaStream_t s) {
    P->wver++;
    if (zp_no_master(P)) {  // evaluation only, 16-bit: the load wrote the working weights and views (part_noopt.c)
        for (int u = 0; u < P->num_units; u++) P->u[u].stale = true;
        CUDA_CHECK(cudaStreamSynchronize(s));
        return;
    }
    // a gradient D2H still pending in the ring would land in whost (shared buffers) after the rounding below
    zp_ring_drain(P->ring_main);
    for (int u = 0; u < P->num_units; u++) {
        ZpUnit* U = &P->u[u];
        const size_t n = P->L.hi[u] - P->L.lo[u];
        if (U->opt_cpu) {
            if (P->X != DT_F32) host_round_to_x(U->whost, P->X, U->master, n);
            zp_publish_unit_host(P, u, P->ring_main);
            CUDA_CHECK(cudaStreamWaitEvent(s, U->ev_updated, 0));
        } else {
            void* dst = zp_unit_x_dst(P, u);
            if (P->X == DT_F32) CUDA_CHECK(cudaMemcpyAsync(dst, U->master, n * 4, cudaMemcpyDeviceToDevice, s));
            else cast(dst, P->X, U->master, DT_F32, n, s);
            zp_publish_views(P, u, s, NULL);  // a GPU unit's master is on the device
        }
        U->stale = true;
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaStreamSynchronize(P->s_copy));
}

void zp_round_host_weights(ZeroPart* P) {
    if (zp_no_master(P)) t5_die(T5_EXIT_FAILURE, "internal: rounding the host weights of an evaluation-only ZeRO engine");
    for (int u = 0; u < P->num_units; u++) {
        ZpUnit* U = &P->u[u];
        if (U->opt_cpu) host_round_to_x(U->whost, P->X, U->master, P->L.hi[u] - P->L.lo[u]);
    }
}

// elements [offset, offset + n) of the flat partition, unit by unit (host or device), in either direction
static void state_copy(ZeroPart* P, int which, size_t offset, size_t n, float* host, bool to_host) {
    CUDA_CHECK(cudaDeviceSynchronize());
    const size_t end = offset + n;
    if (end > P->L.part_total) t5_die(T5_EXIT_FAILURE, "internal: optimizer state range beyond the partition");
    for (int u = 0; u < P->num_units; u++) {
        const size_t a = P->L.part_offset[u], b = a + P->L.part[u];
        const size_t lo = T5_MAX(a, offset), hi = T5_MIN(b, end);
        if (hi <= lo) continue;
        float* h = host + (lo - offset);
        if (P->nvme && P->u[u].opt_cpu) {  // m, v in the swap file (part_nvme.c)
            zp_nvme_state_copy(P, u, which, lo - a, hi - lo, h, to_host);
            continue;
        }
        float* st = (which == 0 ? P->u[u].m : P->u[u].v) + (lo - a);
        const size_t bytes = (hi - lo) * sizeof(float);
        if (P->u[u].opt_cpu) memcpy(to_host ? (void*)h : (void*)st, to_host ? (const void*)st : (const void*)h, bytes);
        else CUDA_CHECK(cudaMemcpy(to_host ? (void*)h : (void*)st, to_host ? (const void*)st : (const void*)h, bytes,
                                   to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice));
    }
}

void zp_state_read(ZeroPart* P, int which, size_t offset, size_t n, float* out) {
    state_copy(P, which, offset, n, out, true);
}

void zp_state_write(ZeroPart* P, int which, size_t offset, size_t n, const float* in) {
    state_copy(P, which, offset, n, (float*)in, false);
}
