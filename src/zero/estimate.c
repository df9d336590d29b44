/*
 * estimate.c: the engine's byte needs as arithmetic (see estimate.h). No CUDA call.
 */
#include "estimate.h"
#include "zenflow_select.h"

#include <stdlib.h>
#include <string.h>

#include "../../cuda/adafactor.cuh"
#include "../../cuda/grad_accum.cuh"
#include "../base/common.h"
#include "ada_split.h"
#include "../nvme/swap.h"
#include "bufcache.h"

bool zero_host_grads_share_weights(const ZeroOptions* o) {
    return o->stage == 3 && o->offload_param && o->offload_optimizer && o->working_dtype != DT_F32 &&
           o->accum_dtype == o->working_dtype && o->grad_accum_steps <= 1 &&
           o->optimizer_pin_memory == o->param_pin_memory;
}

size_t zero_adafactor_tensor_floats(const ZeroTensor* t, size_t owned, bool has_beta1) {
    if (owned == 0) return 0;
    const bool fac = t->rows > 0 && t->cols > 0;
    return (fac ? (size_t)(t->rows + t->cols) : owned) + (has_beta1 ? owned : 0);
}

// Adafactor's state floats of this rank's partition, on the GPU and on the host (CPU-stepped units), the GPU plan's
// scratch bytes over the GPU-stepped tensors' slices with the reduce buffers of ada_split.h (L NULL: stage 0, every
// tensor whole on the GPU), and with several ranks the doubles all-reduced per step; the CPU-stepped tensors cut across
// ranks add their sums' device buffer to *scratch and their host sums and factors to *host_scratch
// (step_adafactor.c zp_ada_cpu_sums).
static void adafactor_sizes(const ZeroOptions* o, const ZeroLayout* L, size_t* gpu_floats, size_t* host_floats,
                            size_t* scratch, size_t* reduced, size_t* host_scratch) {
    *gpu_floats = *host_floats = *scratch = *reduced = *host_scratch = 0;
    const int n = o->num_tensors;
    AdafactorTensor* ft = calloc_check((size_t)T5_MAX(n, 1), sizeof *ft);
    int64_t* off1 = calloc_check((size_t)T5_MAX(n, 1), sizeof *off1);
    int64_t* off2 = calloc_check((size_t)T5_MAX(n, 1), sizeof *off2);
    bool* in_plan = calloc_check((size_t)T5_MAX(n, 1), sizeof *in_plan);
    ZeroAdaSplit sp = {0}, cs = {0};
    if (L) {
        for (int i = 0; i < n; i++) in_plan[i] = !L->group_cpu[L->unit_group[o->tensors[i].unit]];
        zero_ada_split_build(&sp, o->tensors, n, L, in_plan);
        for (int i = 0; i < n; i++) in_plan[i] = !in_plan[i];
        zero_ada_split_build(&cs, o->tensors, n, L, in_plan);
        for (int i = 0; i < n; i++) in_plan[i] = !in_plan[i];
    }
    int nf = 0;
    for (int i = 0; i < n; i++) {
        const ZeroTensor* t = &o->tensors[i];
        const size_t owned = L ? sp.count[i] : t->numel;
        if (owned == 0) continue;
        const size_t f = zero_adafactor_tensor_floats(t, owned, o->adafactor.has_beta1);
        const bool fac = t->rows > 0 && t->cols > 0;
        if (L && !in_plan[i]) {
            *host_floats += f;
            if (cs.shared[i] && fac) *host_scratch += (size_t)(t->rows + t->cols) * sizeof(float);  // its factors
        } else {
            *gpu_floats += f;
            if (L) {
                off1[nf] = sp.off1[i];
                off2[nf] = sp.off2[i];
            }
            ft[nf++] = (AdafactorTensor){.rows = fac ? t->rows : 1, .cols = fac ? t->cols : (int64_t)t->numel,
                                         .factored = fac, .first = L ? (int64_t)sp.first[i] : 0,
                                         .count = (int64_t)owned};
        }
    }
    const AdafactorReduce red = {.len1 = sp.len1, .len2 = sp.len2, .off1 = off1, .off2 = off2};
    if (nf > 0 || sp.shared1 > 0) *scratch = adafactor_plan_scratch_bytes_for(ft, nf, L ? &red : NULL);
    const size_t cred = (size_t)(cs.shared1 + cs.shared2);
    *scratch += cred * sizeof(double);
    *host_scratch += cred * sizeof(double);
    *reduced = (size_t)(sp.shared1 + sp.shared2) + cred;
    if (L) {
        zero_ada_split_free(&sp);
        zero_ada_split_free(&cs);
    }
    free(ft);
    free(off1);
    free(off2);
    free(in_plan);
}

void zero_estimate_layout(const ZeroOptions* o, const ZeroLayout* L, ZeroMemEstimate* e) {
    memset(e, 0, sizeof *e);
    e->stage = o->stage;
    e->world = L->world;
    const size_t xs = dtype_size(o->working_dtype), gs = dtype_size(o->grad_dtype), cs = dtype_size(o->comm_dtype),
                 as = dtype_size(o->accum_dtype);
    const bool x32 = o->working_dtype == DT_F32;
    // evaluation only (ZeroOptions.no_optimizer_state): no optimizer state, no gradient buffers, and no fp32 master
    // unless it is the working copy (fp32); the 16-bit host weights only where gathers read them (offload_param)
    const bool noopt = o->no_optimizer_state;
    const bool keep_master = !noopt || x32;
    // a gathered unit and a unit's gradient are world x part elements (the unit padded to a multiple of the ranks:
    // in-place all-gathers and reduce-scatters); at one rank part = numel
    const size_t W = (size_t)L->world;
    size_t numel_total = 0, max_part = 8, max_numel = 8;
    for (int u = 0; u < L->num_units; u++) {
        numel_total += L->part[u] * W;
        max_numel = T5_MAX(max_numel, L->numel[u]);
        max_part = T5_MAX(max_part, L->part[u]);
        if (L->group_cpu[L->unit_group[u]]) e->cpu_numel += L->part[u];
        else e->gpu_numel += L->part[u];
        e->num_slots += zero_layout_num_buckets(L, u, o->reduce_bucket_size);
    }
    for (int i = 0; i < o->num_tensors; i++)
        if (o->tensors[i].fp32_view) e->view_elems += CEIL_DIV(o->tensors[i].numel, (size_t)8) * 8;
    // a bucket's piece never exceeds a unit's part: the staging buffers need min(bucket, largest part)
    e->bucket_elems = T5_MIN((size_t)T5_MAX(o->reduce_bucket_size, (int64_t)8), max_part);
    // host: master, m, v, gacc of the CPU units; their 16-bit weights (the offloaded partitions with offload_param)
    e->host_master = keep_master ? e->cpu_numel * 4 : 0;
    e->host_m = e->host_v = noopt ? 0 : e->cpu_numel * 4;
    if (o->nvme_path[0] && o->optimizer != ZERO_OPTIM_ADAFACTOR) e->host_m = e->host_v = 0;  // on the disk (below)
    size_t ada_gpu_floats = 0;
    if (o->optimizer == ZERO_OPTIM_ADAFACTOR && !noopt) {  // its state in the m buffers (estimate.h)
        size_t host_floats = 0;
        adafactor_sizes(o, L, &ada_gpu_floats, &host_floats, &e->gpu_ada_scratch, &e->ada_reduce_doubles,
                        &e->host_ada_scratch);
        e->host_m = host_floats * 4;
        e->host_v = 0;
    }
    e->host_gacc = noopt || zero_host_grads_share_weights(o) ? 0 : e->cpu_numel * as;
    e->host_w = x32 || (noopt && !o->offload_param) ? 0 : e->cpu_numel * xs;
    e->host_total = e->host_master + e->host_m + e->host_v + e->host_gacc + e->host_w + e->host_ada_scratch;
    const bool pin_any = o->optimizer_pin_memory || o->param_pin_memory;
    e->host_pinned = (o->optimizer_pin_memory ? e->host_master + e->host_m + e->host_v + e->host_gacc : 0) +
                     ((o->offload_param ? o->param_pin_memory : pin_any) ? e->host_w : 0);
    e->host_pageable = e->host_total - e->host_pinned;
    e->host_register = (o->optimizer_pin_memory ? 0 : e->host_master + e->host_gacc) +
                       ((o->offload_param ? o->param_pin_memory : pin_any) ? 0 : e->host_w);
    // the staging rings, only when something is pageable: a slot is the largest single transfer (a unit's part in
    // fp32: its master's views, an fp32 gather; 16-bit parts and gradient buckets are smaller) up to the cap
    // (host_ada_scratch is pageable but never copied through a ring: it alone asks for none)
    if (e->host_pageable > e->host_ada_scratch) {
        e->staging_count = T5_MAX(o->buffer_count, 1);
        e->staging_slot_bytes = T5_MIN(ZERO_STAGING_SLOT_MAX_BYTES, CEIL_DIV(max_numel * 4, (size_t)4096) * 4096);
        e->host_staging = (size_t)ZERO_STAGING_RINGS * (size_t)e->staging_count * e->staging_slot_bytes;
        e->host_total += e->host_staging;
        e->host_pinned += e->host_staging;
    }
    zero_estimate_nvme(o, L, &e->nvme_file_bytes, &e->host_nvme_pool);
    e->host_total += e->host_nvme_pool;
    // device: master, m, v, gacc of the GPU units; resident weights / partitions; stage 1 gradients; views
    e->gpu_master = keep_master ? e->gpu_numel * 4 : 0;
    e->gpu_m = e->gpu_v = noopt ? 0 : e->gpu_numel * 4;
    if (o->optimizer == ZERO_OPTIM_ADAFACTOR && !noopt) {
        e->gpu_m = ada_gpu_floats * 4;
        e->gpu_v = 0;
    }
    e->gpu_gacc = noopt ? 0 : e->gpu_numel * as;
    if (o->stage == 3) {
        for (int u = 0; u < L->num_units; u++)
            if (!(o->offload_param && L->group_cpu[L->unit_group[u]])) e->gpu_weights += L->part[u] * xs;
    } else {
        e->gpu_weights = numel_total * xs;  // stages 1/2: every unit resident (at W = 1, part_total)
    }
    e->gpu_grads = o->stage == 1 && !noopt ? numel_total * gs : 0;
    e->gpu_views = e->view_elems * 4;
    // several ranks: a reduce-scatter's send buffer (world pieces, comm dtype) and its received piece
    if (W > 1) {
        const size_t piece = T5_MIN(T5_MAX((size_t)8, (size_t)o->reduce_bucket_size / W / 8 * 8), max_part);
        e->send_elems = W * piece;
        e->recv_elems = piece;
    }
    e->gpu_comm = e->bucket_elems * T5_MAX(T5_MAX(as, cs), (size_t)4) +
                  (W > 1 ? (e->send_elems + e->recv_elems) * cs : o->comm_dtype != o->grad_dtype ? e->bucket_elems * cs : 0) +
                  (size_t)e->num_slots * (sizeof(double) + sizeof(int)) + sizeof(double) + grad_sumsq_scratch_bytes();
    if (noopt) {  // no gradient path: no staging, bucket, reduce-scatter pieces or norm slots (part.c alloc_device)
        e->bucket_elems = e->send_elems = e->recv_elems = 0;
        e->num_slots = 0;
        e->gpu_comm = 0;
    }
    e->gpu_resident = e->gpu_master + e->gpu_m + e->gpu_v + e->gpu_ada_scratch + e->gpu_gacc + e->gpu_weights +
                      e->gpu_grads + e->gpu_views + e->gpu_comm;
    e->gpu_zenflow = noopt ? 0 : zero_estimate_zenflow(o);
}

size_t zero_estimate_zenflow(const ZeroOptions* o) {
    if (!o->zenflow) return 0;
    uint64_t b = 0;
    for (int i = 0; i < o->num_tensors; i++) {
        const ZeroTensor* t = &o->tensors[i];
        const ZenflowShape sh = zenflow_tensor_shape(t->rows, t->cols, (int64_t)t->numel, o->zenflow_topk_ratio,
                                                     o->stage);
        b += zenflow_tensor_gpu_bytes(sh, sh.is_1d ? 0 : zenflow_cub_bytes_est(sh.C));
    }
    return (size_t)b;
}

// stage 0: the engine's master, gradients and working copy (zero.c) and stage 0's Adam m, v (+ fp32 sum; step0.c)
static void estimate_stage0(const ZeroOptions* o, int num_units, const size_t* unit_numel, int grad_accum_steps,
                            ZeroMemEstimate* e) {
    memset(e, 0, sizeof *e);
    e->world = o->world;
    size_t n = 0;
    for (int u = 0; u < num_units; u++) n += unit_numel[u];
    e->gpu_numel = n;
    e->gpu_master = e->gpu_m = e->gpu_v = n * 4;
    // evaluation only: engine_create builds no stage-0 optimizer (step0.c: no m, v, Adafactor state or fp32 sum);
    // zero.c still allocates the fp32 master, the gradients and the working copy
    const bool noopt = o->no_optimizer_state;
    if (noopt) e->gpu_m = e->gpu_v = 0;
    if (o->optimizer == ZERO_OPTIM_ADAFACTOR && !noopt) {  // stage 0's fused Adafactor over every tensor (step0.c)
        size_t g = 0, h = 0, red = 0, hs = 0;
        adafactor_sizes(o, NULL, &g, &h, &e->gpu_ada_scratch, &red, &hs);
        e->gpu_m = g * 4;
        e->gpu_v = 0;
    }
    e->gpu_gacc = grad_accum_steps > 1 && !noopt ? n * 4 : 0;
    e->gpu_weights = o->working_dtype == DT_F32 ? 0 : n * dtype_size(o->working_dtype);
    e->gpu_grads = n * dtype_size(o->grad_dtype);
    e->gpu_resident = e->gpu_master + e->gpu_m + e->gpu_v + e->gpu_ada_scratch + e->gpu_gacc + e->gpu_weights +
                      e->gpu_grads;
}

static size_t replay_grad_buffers(const ZeroOptions* o, int num_units, const size_t* part, size_t world, size_t gs);

int zero_estimate(const ZeroOptions* o, int num_units, const size_t* unit_numel, ZeroMemEstimate* e, char* err,
                  size_t errlen) {
    memset(e, 0, sizeof *e);
    if (o->stage < 0 || o->stage > 3) return t5_set_err(err, errlen, "ZeRO stage %d is not 0, 1, 2 or 3", o->stage);
    if (o->offload_param && o->stage != 3)
        return t5_set_err(err, errlen, "offload_param needs ZeRO stage 3 (this plan is stage %d), as in DeepSpeed",
                          o->stage);
    if (o->offload_optimizer && o->stage == 0)
        return t5_set_err(err, errlen, "offload_optimizer needs ZeRO stage 1, 2 or 3");
    if (o->nvme_path[0] && o->offload_optimizer && o->optimizer == ZERO_OPTIM_ADAFACTOR)
        return t5_set_err(err, errlen, "not implemented yet: offload_optimizer nvme with Adafactor (its state stays in "
                          "host memory: use device cpu)");
    if (o->stage == 0) {
        estimate_stage0(o, num_units, unit_numel, o->grad_accum_steps, e);
        return 0;
    }
    ZeroLayout L;
    if (zero_layout_build(&L, o->world, o->rank, num_units, unit_numel, o->sub_group_size,
                          o->offload_optimizer ? o->ratio : 0.0, err, errlen))
        return -1;
    zero_estimate_layout(o, &L, e);
    const size_t xs = dtype_size(o->working_dtype), gs = dtype_size(o->grad_dtype);
    // gradients in flight (stages 2/3): the engine's gradient buffers (unitbuf.c) over the model's gradient order,
    // replayed by the same rule (bufcache.h; two steps: the second reuses the first's buffers); without that order,
    // unit 0 (the shared embedding, held through the backward when tied) plus two of the largest other unit
    if (o->no_optimizer_state) {
        e->gpu_grad_peak = 0;  // evaluation only: no backward, no gradient buffers
    } else if (o->stage >= 2 && o->grad_trace && o->grad_trace_len > 0) {
        e->gpu_grad_peak = replay_grad_buffers(o, num_units, L.part, (size_t)L.world, gs);
    } else if (o->stage >= 2) {
        size_t max_other = 0;
        for (int u = 1; u < num_units; u++) max_other = T5_MAX(max_other, L.part[u] * (size_t)L.world);
        e->gpu_grad_peak = (L.part[0] * (size_t)L.world + 2 * max_other) * gs;
    }
    if (o->stage == 3) {
        if (!o->trace || o->trace_len <= 0) {
            zero_layout_free(&L);
            return t5_set_err(err, errlen, "ZeRO estimate: stage 3 needs the model's fetch trace");
        }
        ZeroSched S;
        zero_sched_init(&S, num_units, L.numel, o->trace, o->trace_len, o->prefetch_bucket_size,
                        o->max_live_parameters, o->max_reuse_distance, o->persistence_threshold);
        // the engine's gathered-unit buffers (unitbuf.c): its calls replayed over three passes (forward + backward
        // each, the schedule rewound between them as zp_begin_pass does), by the same rule (bufcache.h)
        ZeroSchedAction* acts = malloc_check(((size_t)num_units + 2) * sizeof *acts);
        size_t* ub = malloc_check((size_t)num_units * sizeof *ub);
        for (int u = 0; u < num_units; u++) ub[u] = L.part[u] * (size_t)L.world * xs;
        BufUnits B;
        bufunits_init(&B, num_units, ub, BUFCACHE_QUARANTINE);
        free(ub);
        bool fresh;
        for (int pass = 0; pass < 3; pass++) {
            int n = zero_sched_reset(&S, acts, num_units + 2);
            for (int k = 0; k < n; k++) bufunits_give(&B, acts[k].unit);
            for (int i = 0; i < o->trace_len; i++) {
                n = zero_sched_fetch(&S, o->trace[i], acts, num_units + 2);
                for (int k = 0; k < n; k++)
                    if (acts[k].kind == ZS_GATHER && B.id_of[acts[k].unit] < 0) bufunits_take(&B, acts[k].unit, &fresh);
                n = zero_sched_release(&S, o->trace[i], acts, num_units + 2);
                for (int k = 0; k < n; k++) bufunits_give(&B, acts[k].unit);
            }
        }
        e->peak_live_elems = S.peak_live;
        e->gpu_gathered_peak = bufcache_bytes(&B.C);
        bufunits_free(&B);
        free(acts);
        zero_sched_free(&S);
    }
    zero_layout_free(&L);
    return 0;
}

// The gradient buffers the engine makes over two steps of the model's gradient order (unitbuf.c, bufcache.h).
static size_t replay_grad_buffers(const ZeroOptions* o, int num_units, const size_t* part, size_t world, size_t gs) {
    size_t* ub = malloc_check((size_t)num_units * sizeof *ub);
    for (int u = 0; u < num_units; u++) ub[u] = part[u] * world * gs;
    BufUnits B;
    bufunits_init(&B, num_units, ub, BUFCACHE_QUARANTINE);
    free(ub);
    bool fresh;
    for (int step = 0; step < 2; step++)
        for (int i = 0; i < o->grad_trace_len; i++) {
            const int g = o->grad_trace[i], u = (g > 0 ? g : -g) - 1;
            if (u < 0 || u >= num_units) continue;
            if (g > 0 && B.id_of[u] < 0) bufunits_take(&B, u, &fresh);
            else if (g < 0) bufunits_give(&B, u);
        }
    const size_t b = bufcache_bytes(&B.C);
    bufunits_free(&B);
    return b;
}

size_t zero_estimate_gpu_peak(const ZeroMemEstimate* e) {
    return e->gpu_resident + e->gpu_gathered_peak + e->gpu_grad_peak + e->gpu_zenflow;
}

void zero_estimate_nvme(const ZeroOptions* o, const ZeroLayout* L, uint64_t* file_bytes, size_t* pool_bytes) {
    *file_bytes = 0;
    *pool_bytes = 0;
    if (!o->nvme_path[0] || !o->offload_optimizer || o->optimizer == ZERO_OPTIM_ADAFACTOR || o->no_optimizer_state)
        return;
    int n = 0;
    size_t* rb = malloc_check((size_t)T5_MAX(L->num_units, 1) * sizeof *rb);
    for (int u = 0; u < L->num_units; u++)
        if (L->group_cpu[L->unit_group[u]]) rb[n++] = L->part[u] * 8;  // m then v (part_nvme.c)
    if (n > 0) nvme_swap_sizes(n, rb, T5_MAX(o->buffer_count, 1), file_bytes, pool_bytes);
    free(rb);
}
