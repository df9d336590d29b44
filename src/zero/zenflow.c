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
#include "zenflow_state.h"

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
    bool w_ahead;             // a selective step ran since the master last took W: W[:, sel] (and the fp32 views'
                              // selected columns) hold values the master lacks (zenflow_state.h)
    bool overlaid;            // between zenflow_engine_save_begin and _end: master[:, sel] holds fp32(W[:, sel])
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
    zf->w_ahead = false;
}


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
        zf->w_ahead = true;
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

// ---------------------------------------------------------------------------------------------
// saving the weights and the checkpoint (zenflow_state.h, docs/zero.md "ZenFlow's checkpoint")

static int64_t max_rk(const struct ZpZenflow* zf, int64_t* max_k) {
    int64_t m = 1, mk = 1;
    for (int i = 0; i < zf->nt; i++) {
        m = T5_MAX(m, zf->t[i].shape.R * zf->t[i].shape.k);
        mk = T5_MAX(mk, zf->t[i].shape.k);
    }
    *max_k = mk;
    return m;
}

// the master's element (r, sel[j]) of tensor t: its (R, C) range of the unit's host master (one rank: lo = 0)
static float* tensor_master(ZeroPart* P, const ZfTensor* t) { return P->u[t->unit].master + t->offset; }

static void overlay(ZeroPart* P, bool begin, cudaStream_t s) {
    struct ZpZenflow* zf = P->zf;
    if (begin ? !zf->w_ahead : !zf->overlaid) return;
    zp_optimizer_wait(P);
    CUDA_CHECK(cudaStreamSynchronize(s));
    int64_t mk;
    const int64_t mrk = max_rk(zf, &mk);
    float* buf = malloc_check((size_t)mrk * sizeof(float));
    int32_t* hsel = malloc_check((size_t)mk * sizeof(int32_t));
    for (int i = 0; i < zf->nt; i++) {
        ZfTensor* t = &zf->t[i];
        const int64_t R = t->shape.R, C = t->shape.C, k = t->shape.k;
        if (k == 0) continue;
        CUDA_CHECK(cudaMemcpy(hsel, t->g.sel, (size_t)k * sizeof(int32_t), cudaMemcpyDeviceToHost));
        float* M = tensor_master(P, t);
        if (begin) {
            // buf = fp32(W[:, sel]) (kept: scratch between micro-steps); swapped with the master's; the master's
            // values wait in sel_p (scratch too: the next selective step writes it before reading)
            zenflow_gpu_keep(&t->g, tensor_work(P, t), s);
            CUDA_CHECK(cudaStreamSynchronize(s));
            CUDA_CHECK(cudaMemcpy(buf, t->g.kept, (size_t)(R * k) * sizeof(float), cudaMemcpyDeviceToHost));
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < k; j++) {
                    float* m = &M[r * C + hsel[j]];
                    const float w = buf[r * k + j];
                    buf[r * k + j] = *m;
                    *m = w;
                }
            CUDA_CHECK(cudaMemcpy(t->g.sel_p, buf, (size_t)(R * k) * sizeof(float), cudaMemcpyHostToDevice));
        } else {
            CUDA_CHECK(cudaMemcpy(buf, t->g.sel_p, (size_t)(R * k) * sizeof(float), cudaMemcpyDeviceToHost));
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < k; j++) M[r * C + hsel[j]] = buf[r * k + j];
        }
    }
    free(buf);
    free(hsel);
    zf->overlaid = begin;
}

void zenflow_engine_save_begin(ZeroEngine* Z, cudaStream_t s) { overlay(part_of(Z), true, s); }
void zenflow_engine_save_end(ZeroEngine* Z, cudaStream_t s) { overlay(part_of(Z), false, s); }
void zenflow_engine_weights_loaded(ZeroEngine* Z) {
    ZeroPart* P = part_of(Z);
    if (P && P->zf) P->zf->w_ahead = P->zf->overlaid = false;
}

static int64_t gacc_floats(const ZeroPart* P) {
    size_t f = 0;
    for (int u = 0; u < P->num_units; u++) f += P->L.part[u];
    return (int64_t)f;
}

int zenflow_engine_state_save(ZeroEngine* Z, const EngineStateSink* k, char* err, size_t errlen) {
    ZeroPart* P = part_of(Z);
    struct ZpZenflow* zf = P->zf;
    zp_optimizer_wait(P);
    zp_ring_drain(P->ring_main);  // (zp_grad_norm drained it: every gradient D2H into gacc has landed)
    CUDA_CHECK(cudaDeviceSynchronize());
    const int64_t gf = zf->since_update > 0 ? gacc_floats(P) : 0;
    const ZenflowStateHeader h = zenflow_state_header(&zf->o, &zf->sched, &zf->selc, zf->selective_steps,
                                                      zf->since_update, zf->w_ahead, zf->nt, gf);
    bool ok = k->begin(k->ctx, ZENFLOW_BLOB_META, err, errlen) == 0 && k->write(k->ctx, &h, sizeof h, err, errlen) == 0;
    for (int i = 0; i < zf->nt && ok; i++) {
        const ZenflowStateTensor rec = {zf->t[i].shape.R, zf->t[i].shape.C, zf->t[i].shape.k};
        ok = k->write(k->ctx, &rec, sizeof rec, err, errlen) == 0;
    }
    const size_t n2 = (size_t)zf->sched.num_2d * sizeof(double);
    if (ok && n2) ok = k->write(k->ctx, zf->sched.avg, n2, err, errlen) == 0 &&
                       k->write(k->ctx, zf->sched.non, n2, err, errlen) == 0;
    ok = ok && k->end(k->ctx, err, errlen) == 0 && k->begin(k->ctx, ZENFLOW_BLOB_TENSORS, err, errlen) == 0;
    int64_t mk;
    const int64_t mrk = max_rk(zf, &mk);
    float* buf = malloc_check((size_t)mrk * sizeof(float));
    int32_t* hsel = malloc_check((size_t)mk * sizeof(int32_t));
    for (int i = 0; i < zf->nt && ok; i++) {
        const ZfTensor* t = &zf->t[i];
        const int64_t R = t->shape.R, C = t->shape.C, kk = t->shape.k;
        if (kk == 0) continue;
        const size_t rk = (size_t)(R * kk) * sizeof(float);
        CUDA_CHECK(cudaMemcpy(hsel, t->g.sel, (size_t)kk * sizeof(int32_t), cudaMemcpyDeviceToHost));
        ok = k->write(k->ctx, hsel, (size_t)kk * sizeof(int32_t), err, errlen) == 0;
        CUDA_CHECK(cudaMemcpy(buf, t->g.sel_m, rk, cudaMemcpyDeviceToHost));
        ok = ok && k->write(k->ctx, buf, rk, err, errlen) == 0;
        CUDA_CHECK(cudaMemcpy(buf, t->g.sel_v, rk, cudaMemcpyDeviceToHost));
        ok = ok && k->write(k->ctx, buf, rk, err, errlen) == 0;
        if (zf->w_ahead) {  // the master's own values of the selected columns (model.safetensors holds W's there)
            const float* M = tensor_master(P, t);
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < kk; j++) buf[r * kk + j] = M[r * C + hsel[j]];
            ok = ok && k->write(k->ctx, buf, rk, err, errlen) == 0;
        }
    }
    free(buf);
    free(hsel);
    ok = ok && k->end(k->ctx, err, errlen) == 0;
    if (ok && gf > 0) {  // between update boundaries: the gradient accumulated since the last one (fp32, host)
        ok = k->begin(k->ctx, ZENFLOW_BLOB_GACC, err, errlen) == 0;
        for (int u = 0; u < P->num_units && ok; u++)
            ok = k->write(k->ctx, P->u[u].gacc, P->L.part[u] * sizeof(float), err, errlen) == 0;
        ok = ok && k->end(k->ctx, err, errlen) == 0;
    }
    return ok ? 0 : -1;
}

// loading: a streamed blob's pieces routed to their regions (zenflow_state_route)
typedef struct {
    ZeroPart* P;
    int nr;
    ZenflowRegion* reg;
    int* tensor;        // (nr) the tensor (zenflow_tensors) or unit (zenflow_gacc) of each region
    int* kind;          // (nr) 0 sel, 1 sel_m, 2 sel_v, 3 master's columns, 4 a unit's gacc
    int32_t* hsel;      // the current tensor's sel on the host (the master's columns are scattered by it)
    float* hmaster;     // the current tensor's master columns
} LoadCtx;

static void load_put(void* ctx, int region, size_t off, const void* src, size_t bytes) {
    LoadCtx* c = ctx;
    ZeroPart* P = c->P;
    const int kind = c->kind[region];
    const bool last = off + bytes == c->reg[region].bytes;
    if (kind == 4) {
        memcpy((char*)P->u[c->tensor[region]].gacc + off, src, bytes);
        return;
    }
    ZfTensor* t = &P->zf->t[c->tensor[region]];
    const int64_t R = t->shape.R, C = t->shape.C, k = t->shape.k;
    if (kind == 0) {
        memcpy((char*)c->hsel + off, src, bytes);
        if (last) {
            for (int64_t j = 0; j < k; j++)
                // (before the first selection a 2-D tensor's sel is all 0: only the range is checked)
                if (c->hsel[j] < 0 || c->hsel[j] >= C)
                    t5_die(T5_EXIT_FAILURE, "resume: ZenFlow tensor %d: selected column %lld is %d, outside [0, %lld): "
                           "a damaged checkpoint", c->tensor[region], (long long)j, (int)c->hsel[j], (long long)C);
            CUDA_CHECK(cudaMemcpy(t->g.sel, c->hsel, (size_t)k * sizeof(int32_t), cudaMemcpyHostToDevice));
        }
    } else if (kind == 1 || kind == 2) {
        CUDA_CHECK(cudaMemcpy((char*)(kind == 1 ? t->g.sel_m : t->g.sel_v) + off, src, bytes, cudaMemcpyHostToDevice));
    } else {
        memcpy((char*)c->hmaster + off, src, bytes);
        if (last) {
            float* M = tensor_master(P, t);
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < k; j++) M[r * C + c->hsel[j]] = c->hmaster[r * k + j];
        }
    }
}

static int load_consume(void* ctx, const void* data, size_t off, size_t n) {
    LoadCtx* c = ctx;
    return zenflow_state_route(c->reg, c->nr, off, data, n, load_put, c);
}

static int meta_consume(void* ctx, const void* data, size_t off, size_t n) {
    memcpy((char*)ctx + off, data, n);
    return 0;
}

#define ZF_ERR_LEN 8192

// blob name of src (its size must be nbytes) through load_consume; the run ends on an error
static void load_blob(const EngineStateSource* src, const char* name, size_t nbytes, LoadCtx* c) {
    static char err[ZF_ERR_LEN];
    const int64_t have = src->size(src->ctx, name);
    if (have < 0 || (size_t)have != nbytes)
        t5_die(T5_EXIT_FAILURE, "resume: %s: ZenFlow blob %s has %lld bytes, its header says %zu (a damaged checkpoint)",
               src->path, name, (long long)have, nbytes);
    if (nbytes && src->read(src->ctx, src->rank, name, nbytes, load_consume, c, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s", err);
}

void zenflow_engine_state_load(ZeroEngine* Z, const EngineStateSource* src) {
    static char err[ZF_ERR_LEN];
    ZeroPart* P = part_of(Z);
    struct ZpZenflow* zf = P->zf;
    const int64_t mbytes = src->size(src->ctx, ZENFLOW_BLOB_META);
    if (mbytes < 0)
        t5_die(T5_EXIT_USAGE,
               "resume: %s was saved by a run without zero_optimization.zenflow, this run has it (ZenFlow's selective "
               "state cannot be made up: resume without zenflow, or start a new run from the checkpoint's weights with "
               "--model_name_or_path %s)", src->path, src->dir);
    if ((size_t)mbytes < sizeof(ZenflowStateHeader))
        t5_die(T5_EXIT_FAILURE, "resume: %s: ZenFlow blob %s has %lld bytes, less than its header", src->path,
               ZENFLOW_BLOB_META, (long long)mbytes);
    char* meta = malloc_check((size_t)mbytes);
    if (src->read(src->ctx, src->rank, ZENFLOW_BLOB_META, (size_t)mbytes, meta_consume, meta, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    ZenflowStateHeader h;
    memcpy(&h, meta, sizeof h);
    int rc = zenflow_state_header_check(&h, &zf->o, &zf->sched, zf->nt, src->path, err, sizeof err);
    if (!rc && (size_t)mbytes != zenflow_state_meta_bytes(h.num_tensors, h.num_2d))
        rc = t5_errf(err, sizeof err, T5_EXIT_FAILURE, "resume: %s: ZenFlow blob %s has %lld bytes, %zu expected",
                     src->path, ZENFLOW_BLOB_META, (long long)mbytes, zenflow_state_meta_bytes(h.num_tensors, h.num_2d));
    const ZenflowStateTensor* rec = (const ZenflowStateTensor*)(meta + sizeof h);
    for (int i = 0; i < zf->nt && !rc; i++) {
        ZenflowStateTensor r;
        memcpy(&r, rec + i, sizeof r);
        rc = zenflow_state_tensor_check(&r, i, zf->t[i].shape.R, zf->t[i].shape.C, zf->t[i].shape.k, src->path, err,
                                        sizeof err);
    }
    if (!rc && h.gacc_floats > 0 && h.gacc_floats != gacc_floats(P))
        rc = t5_errf(err, sizeof err, T5_EXIT_FAILURE,
                     "resume: %s holds an accumulated gradient of %lld floats, this run's partition has %lld", src->path,
                     (long long)h.gacc_floats, (long long)gacc_floats(P));
    if (rc) t5_die(rc, "%s", err);
    const double* arrays = (const double*)(meta + sizeof h + (size_t)zf->nt * sizeof(ZenflowStateTensor));
    double* avg = NULL;
    if (h.num_2d > 0) {  // (update_interval "auto" only; copied out: the blob's doubles need not be aligned)
        avg = malloc_check(2 * (size_t)h.num_2d * sizeof(double));
        memcpy(avg, arrays, 2 * (size_t)h.num_2d * sizeof(double));
    }
    zenflow_state_restore(&h, avg, avg ? avg + h.num_2d : NULL, &zf->sched, &zf->selc);
    free(avg);
    free(meta);
    zf->selective_steps = h.selective_steps;
    zf->since_update = h.since_update;
    // the selective state; the master's selected columns (the weights file held W's there)
    zp_optimizer_wait(P);
    CUDA_CHECK(cudaDeviceSynchronize());
    int64_t mk;
    const int64_t mrk = max_rk(zf, &mk);
    const bool ahead = h.w_ahead != 0;
    LoadCtx c = {.P = P};
    c.reg = malloc_check((size_t)(4 * zf->nt + P->num_units + 1) * sizeof *c.reg);
    c.tensor = malloc_check((size_t)(4 * zf->nt + P->num_units + 1) * sizeof(int));
    c.kind = malloc_check((size_t)(4 * zf->nt + P->num_units + 1) * sizeof(int));
    c.hsel = malloc_check((size_t)mk * sizeof(int32_t));
    c.hmaster = malloc_check((size_t)mrk * sizeof(float));
    size_t total = 0;
    for (int i = 0; i < zf->nt; i++) {
        const ZenflowShape* sh = &zf->t[i].shape;
        if (sh->k == 0) continue;
        // zenflow_state_tensor_bytes(R, k, ahead) in its four regions
        const size_t rk = (size_t)(sh->R * sh->k) * sizeof(float);
        const size_t b[4] = {(size_t)sh->k * sizeof(int32_t), rk, rk, rk};
        for (int q = 0; q < (ahead ? 4 : 3); q++) {
            c.reg[c.nr].bytes = b[q];
            c.tensor[c.nr] = i;
            c.kind[c.nr++] = q;
            total += b[q];
        }
    }
    load_blob(src, ZENFLOW_BLOB_TENSORS, total, &c);
    if (h.gacc_floats > 0) {
        c.nr = 0;
        for (int u = 0; u < P->num_units; u++) {
            c.reg[c.nr].bytes = P->L.part[u] * sizeof(float);
            c.tensor[c.nr] = u;
            c.kind[c.nr++] = 4;
        }
        load_blob(src, ZENFLOW_BLOB_GACC, (size_t)h.gacc_floats * sizeof(float), &c);
    }
    free(c.reg);
    free(c.tensor);
    free(c.kind);
    free(c.hsel);
    free(c.hmaster);
    zf->w_ahead = ahead;
    zf->overlaid = false;
    CUDA_CHECK(cudaDeviceSynchronize());
}
