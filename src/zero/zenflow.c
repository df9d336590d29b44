/*
 * zenflow.c: ZenFlow's state and steps in the partitioned engine (see zenflow.h; docs/zero.md "ZenFlow in the
 * engine"). World size 1: the partition of a unit is the whole unit (L.lo = 0), so a tensor's flat range in the
 * unit's gradient, working weights and host master is [offset, offset + numel), row-major (R, C).
 */
#include "zenflow.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cuda/zenflow.cuh"
#include "../base/check.h"
#include "../base/common.h"
#include "cpu_adam.h"
#include "part.h"
#include "zenflow_select.h"

// one parameter tensor
typedef struct {
    int unit;
    size_t offset;          // inside the unit (elements)
    ZenflowShape shape;     // (R, C), k
    float* view;            // its fp32 view on the GPU (the model reads it in fp32), or NULL
    ZenflowGpuTensor g;     // sel (k), sel_m / sel_v (R, k) fp32, the scratch (cuda/zenflow.cuh)
} ZfTensor;

struct ZpZenflow {
    ZenflowOpts o;
    ZenflowSched sched;
    ZenflowStepPlan plan;     // the micro-step under way
    CpuAdam selc;             // the selective AdamW: constants, its step count's bias corrections
    int64_t selective_steps;  // its step count (one torch optimizer: every tensor steps together)
    int64_t since_update;     // micro-steps accumulated into gacc since the last update boundary (or overflow)
    int nt;
    ZfTensor* t;              // (nt) in the table's order
    int* unit_first;          // (num_units + 1) the tensors of unit u: order[unit_first[u] .. unit_first[u+1])
    int* order;               // (nt)
    float* d_sel_scale;       // (1) device: 1 / loss scale for the selective step (fp16)
    float* h_sel_scale;       // (1) pinned
    void* h_tmp;              // the largest unit's 16-bit working weights on the host (the master sync)
};

static ZeroPart* part_of(ZeroEngine* Z) { return zero_part(Z); }

static int check_engine(const ZeroPart* P, const ZeroOptions* zo, char* err, size_t n) {
    if (!P) return t5_errf(err, n, T5_EXIT_USAGE, "zenflow: needs ZeRO stage 1, 2 or 3");
    if (P->L.world != 1) return t5_errf(err, n, T5_EXIT_USAGE, "not implemented yet: zenflow with several ranks");
    if (zo->offload_param) return t5_errf(err, n, T5_EXIT_USAGE, "not implemented yet: zenflow with offload_param");
    if (zo->optimizer != ZERO_OPTIM_ADAMW)
        return t5_errf(err, n, T5_EXIT_USAGE, "not implemented yet: zenflow with an optimizer other than AdamW");
    if (P->nvme) return t5_errf(err, n, T5_EXIT_USAGE, "not implemented yet: zenflow with offload_optimizer nvme");
    for (int u = 0; u < P->num_units; u++)
        if (!P->u[u].opt_cpu)
            return t5_errf(err, n, T5_EXIT_USAGE,
                           "zenflow: every unit's optimizer state must be on the CPU (offload_optimizer cpu, ratio 1)");
    if (P->A != DT_F32)
        return t5_errf(err, n, T5_EXIT_USAGE, "internal: zenflow accumulates its gradient in fp32 (accum dtype %s)",
                       dtype_name(P->A));
    return 0;
}

// the table: every tensor's shape and k, grouped by unit
static void build_table(struct ZpZenflow* zf, ZeroPart* P, const ZeroOptions* zo) {
    zf->nt = zo->num_tensors;
    zf->t = calloc_check((size_t)zf->nt, sizeof *zf->t);
    zf->order = calloc_check((size_t)zf->nt, sizeof(int));
    zf->unit_first = calloc_check((size_t)P->num_units + 1, sizeof(int));
    size_t max_unit = 0;
    for (int i = 0; i < zf->nt; i++) {
        const ZeroTensor* T = &zo->tensors[i];
        ZfTensor* t = &zf->t[i];
        t->unit = T->unit;
        t->offset = T->offset;
        t->shape = zenflow_tensor_shape(T->rows, T->cols, (int64_t)T->numel, zf->o.topk_ratio, P->o.stage);
        t->view = T->fp32_view ? (float*)zp_fp32_tensor(P, T->unit, T->offset) : NULL;
        zenflow_gpu_init(&t->g, t->shape.R, t->shape.C, t->shape.is_1d, t->shape.k, P->X,
                         T->decay ? zo->weight_decay : 0.0f);
        zf->unit_first[T->unit + 1]++;
    }
    for (int u = 0; u < P->num_units; u++) {
        zf->unit_first[u + 1] += zf->unit_first[u];
        if (P->L.numel[u] > max_unit) max_unit = P->L.numel[u];
    }
    int* fill = calloc_check((size_t)P->num_units, sizeof(int));
    for (int i = 0; i < zf->nt; i++) {
        const int u = zf->t[i].unit;
        zf->order[zf->unit_first[u] + fill[u]++] = i;
    }
    free(fill);
    if (P->X != DT_F32) zf->h_tmp = malloc_check(max_unit * P->xs + 16);
}

int zenflow_engine_create(ZeroEngine* Z, const ZeroOptions* zo, const ZenflowOpts* o, int64_t steps_per_epoch,
                          char* err, size_t errlen) {
    ZeroPart* P = part_of(Z);
    int rc = check_engine(P, zo, err, errlen);
    if (rc) return rc;
    if (o->update_interval == ZENFLOW_AUTO)
        return t5_errf(err, errlen, T5_EXIT_USAGE, "not implemented yet: zenflow update_interval \"auto\"");
    struct ZpZenflow* zf = calloc_check(1, sizeof *zf);
    zf->o = *o;
    // prologue_first false: the order ZenFlow was written in (it only matters for update_interval "auto")
    rc = zenflow_sched_init(&zf->sched, o, steps_per_epoch, 0, false, err, errlen);
    if (rc) {
        free(zf);
        return rc;
    }
    cpu_adam_init(&zf->selc, zo->beta1, zo->beta2, zo->eps, zo->adamw_mode);
    build_table(zf, P, zo);
    CUDA_CHECK(cudaMalloc((void**)&zf->d_sel_scale, sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&zf->h_sel_scale, sizeof(float)));
    CUDA_CHECK(cudaDeviceSynchronize());
    P->zf = zf;
    return 0;
}

void zenflow_engine_destroy(ZeroEngine* Z) {
    ZeroPart* P = Z ? part_of(Z) : NULL;
    if (!P || !P->zf) return;
    struct ZpZenflow* zf = P->zf;
    zp_optimizer_wait(P);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < zf->nt; i++) zenflow_gpu_free(&zf->t[i].g);
    free(zf->t);
    free(zf->order);
    free(zf->unit_first);
    free(zf->h_tmp);
    cudaFree(zf->d_sel_scale);
    cudaFreeHost(zf->h_sel_scale);
    zenflow_sched_free(&zf->sched);
    free(zf);
    P->zf = NULL;
}

void zenflow_engine_describe(ZeroEngine* Z, char* line, size_t n) {
    const struct ZpZenflow* zf = part_of(Z)->zf;
    int ranked = 0, none = 0;
    uint64_t sel = 0, all = 0, bytes = 0;
    for (int i = 0; i < zf->nt; i++) {
        const ZfTensor* t = &zf->t[i];
        ranked += !t->shape.is_1d;
        none += t->shape.k == 0;
        sel += (uint64_t)(t->shape.R * t->shape.k);
        all += (uint64_t)(t->shape.R * t->shape.C);
        bytes += zenflow_tensor_gpu_bytes(t->shape, t->g.cub_temp_bytes);
    }
    snprintf(line, n,
             "ZenFlow: %d tensors (%d ranked by column, %d with no column selected), %.2f%% of the parameters stepped "
             "on the GPU every micro-step, %.1f MiB of GPU state; the CPU update every %lld micro-steps, selection every "
             "%lld (0: once), %lld warm-up micro-steps",
             zf->nt, ranked, none, all ? 100.0 * (double)sel / (double)all : 0.0, (double)bytes / 1048576.0,
             (long long)zf->sched.k, (long long)zf->sched.S, (long long)zf->sched.W);
}

bool zenflow_engine_on(ZeroEngine* Z) {
    ZeroPart* P = part_of(Z);
    return P && P->zf;
}

ZenflowStepPlan zenflow_engine_plan(ZeroEngine* Z) { return part_of(Z)->zf->plan; }

// sync_fp32_param_from_gpu: every unit's fp32 master = its working weights (W on the GPU, widened), and the fp32
// views from that master. The CPU optimizer is idle (zenflow_engine_finish waited for it); synchronous.
static void sync_master(ZeroPart* P, cudaStream_t s) {
    struct ZpZenflow* zf = P->zf;
    zp_optimizer_wait(P);
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int u = 0; u < P->num_units; u++) {
        ZpUnit* U = &P->u[u];
        const size_t n = P->L.numel[u];
        const void* W = zp_unit_x_dst(P, u);
        if (P->X == DT_F32) {
            CUDA_CHECK(cudaMemcpy(U->master, W, n * 4, cudaMemcpyDeviceToHost));
        } else {
            CUDA_CHECK(cudaMemcpy(zf->h_tmp, W, n * 2, cudaMemcpyDeviceToHost));
            const uint16_t* h = zf->h_tmp;
            if (P->X == DT_BF16)
                for (size_t i = 0; i < n; i++) U->master[i] = cpu_adam_bf16_to_f32(h[i]);
            else
                for (size_t i = 0; i < n; i++) U->master[i] = cpu_adam_f16_to_f32(h[i]);
        }
        zp_publish_views(P, u, s, P->ring_main);
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
}

void zenflow_engine_sync_master(ZeroEngine* Z, cudaStream_t s) { sync_master(part_of(Z), s); }

float zenflow_engine_begin(ZeroEngine* Z, cudaStream_t s) {
    ZeroPart* P = part_of(Z);
    struct ZpZenflow* zf = P->zf;
    zf->plan = zenflow_sched_begin(&zf->sched);
    if (zf->plan.sync_master) sync_master(P, s);
    // the reduction's "add": not the first micro-step since the last update; every micro-step is its step's last
    const bool add = zf->since_update > 0;
    zero_set_micro_step(Z, add ? 1 : 0, add ? 2 : 1);
    return (float)zf->sched.k;
}

void zp_zenflow_grad(ZeroPart* P, int u, cudaStream_t gs) {
    struct ZpZenflow* zf = P->zf;
    if (!zf->plan.select && !zf->plan.selective) return;
    for (int j = zf->unit_first[u]; j < zf->unit_first[u + 1]; j++) {
        ZfTensor* t = &zf->t[zf->order[j]];
        if (t->shape.k == 0) continue;
        const void* g = (const char*)P->u[u].grad + t->offset * P->gs;  // (R, C) G
        if (zf->plan.select) zenflow_gpu_select(&t->g, g, P->G, gs);
        if (zf->plan.selective) zenflow_gpu_gather_grad(&t->g, g, P->G, gs);
    }
}

// W of tensor t: its range of the unit's working weights on the GPU (stages 1/2: the resident copy; stage 3: the
// partition, which at one rank is the whole unit)
static void* tensor_work(ZeroPart* P, const ZfTensor* t) {
    return (char*)zp_unit_x_dst(P, t->unit) + t->offset * P->xs;
}

void zenflow_engine_keep(ZeroEngine* Z, cudaStream_t s) {
    ZeroPart* P = part_of(Z);
    struct ZpZenflow* zf = P->zf;
    if (!zf->plan.selective) return;
    for (int i = 0; i < zf->nt; i++)
        if (zf->t[i].shape.k > 0) zenflow_gpu_keep(&zf->t[i].g, tensor_work(P, &zf->t[i]), s);
}

// view[:, sel] = fp32(W[:, sel]): the model's fp32 copy follows the selective update (the other columns keep the
// CPU master's values, as without ZenFlow). Uses kept as scratch (the restore before it is done).
static void refresh_view(ZeroPart* P, ZfTensor* t, cudaStream_t s) {
    if (!t->view) return;
    zenflow_gpu_keep(&t->g, tensor_work(P, t), s);
    ZenflowGpuTensor as_f32 = t->g;
    as_f32.work_dtype = DT_F32;
    zenflow_gpu_restore(&as_f32, t->view, s);
}

// the selective AdamW on every tensor's W[:, sel] (zenflow_ref_step's selective step)
static void selective_step(ZeroPart* P, float lr, float loss_scale, cudaStream_t s) {
    struct ZpZenflow* zf = P->zf;
    zf->selective_steps++;
    cpu_adam_begin_step(&zf->selc, zf->selective_steps, P->o.beta1, P->o.beta2);
    const AdamWStepArgs a = {lr, zf->selc.beta1, zf->selc.beta2, zf->selc.eps, zf->selc.bias_correction1,
                             zf->selc.bias_correction2, zf->selc.adamw_mode};
    // NOTE(numerics): the selective step's gradient is g[:, sel] of this micro-step as the backward wrote it
    // (divided by update_interval, as DeepSpeed's engine divides every micro-step's loss by it), then multiplied by
    // 1 / loss scale in fp16 runs. DeepSpeed hands its selective AdamW the gradient before the loss-scale unscale;
    // t5train unscales it so that the selective step does not depend on the scaler's history (AdamW is invariant
    // to the scale except through eps). No clipping, as DeepSpeed (clipping applies to the CPU update only).
    const float* d_scale = NULL;
    if (loss_scale != 1.0f) {
        *zf->h_sel_scale = 1.0f / loss_scale;  // the previous step's copy has completed (engine_step synchronised s)
        CUDA_CHECK(cudaMemcpyAsync(zf->d_sel_scale, zf->h_sel_scale, sizeof(float), cudaMemcpyHostToDevice, s));
        d_scale = zf->d_sel_scale;
    }
    for (int i = 0; i < zf->nt; i++) {
        ZfTensor* t = &zf->t[i];
        if (t->shape.k == 0) continue;
        zenflow_gpu_selective_step(&t->g, tensor_work(P, t), &a, d_scale, NULL, s);
        refresh_view(P, t, s);
    }
    // stage 3: gathered copies are stale; the next gathers and H2D copies wait for these writes
    for (int u = 0; u < P->num_units; u++)
        if (P->u[u].wfull && P->o.stage == 3) P->u[u].stale = true;
    CUDA_CHECK(cudaEventRecord(P->ev_gpu_step, s));
    CUDA_CHECK(cudaStreamWaitEvent(P->s_gather, P->ev_gpu_step, 0));
    CUDA_CHECK(cudaStreamWaitEvent(P->s_copy, P->ev_gpu_step, 0));
}

void zenflow_engine_finish(ZeroEngine* Z, float lr, float loss_scale, cudaStream_t s) {
    ZeroPart* P = part_of(Z);
    struct ZpZenflow* zf = P->zf;
    const ZenflowStepPlan* p = &zf->plan;
    if (p->update) {
        // the CPU AdamW's weights reach W on s_copy (zp_publish_unit_host); the selected columns go back over them.
        // Synchronous: the CPU step is not overlapped with the next forward here (docs/zero.md).
        zp_optimizer_wait(P);
        if (p->selective) {
            for (int i = 0; i < zf->nt; i++)
                if (zf->t[i].shape.k > 0) zenflow_gpu_restore(&zf->t[i].g, tensor_work(P, &zf->t[i]), s);
        }
    }
    if (p->selective) selective_step(P, lr, loss_scale, s);
    zf->since_update = p->update ? 0 : zf->since_update + 1;
}

void zenflow_engine_skip(ZeroEngine* Z) { part_of(Z)->zf->since_update = 0; }
