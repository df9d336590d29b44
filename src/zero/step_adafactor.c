/*
 * step_adafactor.c: transformers' Adafactor in the partitioned engine (see step_adafactor.h).
 *
 * The arithmetic is stage 0's Adafactor's (step0.c), tensor by tensor: the GPU units take the same fused plan
 * (cuda/adafactor.cu: every tensor is stepped independently, so a plan over a subset of the tensors does to each of
 * them what the stage 0 plan over all of them does), the CPU units cpu_adafactor_step (the reference the GPU kernels
 * were verified against: the same fp32 operations; the fp64 sums are added in another order, which can change an fp32
 * sum by one rounding, in practice never). The gradient is the accumulated partition (grad_accum dtype) times
 * inv_scale (the loss scaler's and clipping's combined factor), as the AdamW path reads it.
 *
 * The 14-byte layout (both offloads, accumulation 1: a CPU unit's gradient lands in the host buffer of its own
 * 16-bit weights, zero_host_grads_share_weights) is kept for Adafactor: cpu_adafactor_step reads every gradient
 * element of a tensor in its statistics passes (row/column sums, the RMS of the update) before its apply pass, and
 * the apply pass reads gradient element i before it writes weight i (same index, same dtype, same address): no
 * weight is written before all the gradient reads that need its old bytes (test_cpu_adafactor: "aliased").
 */
#include "step_adafactor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cuda/adafactor.cuh"
#include "../base/check.h"
#include "../base/common.h"
#include "cpu_adafactor.h"
#include "estimate.h"

typedef struct {
    int unit;
    size_t off;            // inside the unit's partition (W = 1: inside the unit)
    size_t numel;
    int64_t rows, cols;    // factored: rows x cols; else 1 x numel
    bool factored;
    bool decay;
    float* state;          // its floats (host for a CPU unit, device for a GPU unit)
    size_t floats;
    size_t blob_off;       // first float in the checkpoint layout
    int plan_index;        // GPU: its index in the plan; -1: CPU-stepped
    CpuAdafactorStepInfo info;  // CPU: what its last step used
} ZpAdaTensor;

typedef struct ZpAda {
    int n;
    ZpAdaTensor* t;        // (n) in ZeroOptions.tensors order
    int* unit_first;       // (num_units + 1) the unit's tensors: order[unit_first[u] .. unit_first[u + 1])
    int* order;            // (n)
    size_t total_floats;
    AdafactorPlan* plan;   // the GPU-stepped tensors, NULL when none
    int64_t last_step;     // the step the plan last ran
    cudaStream_t last_stream;
    CpuAdafactorScratch scratch;  // the CPU optimizer thread's (zp_ada_cpu_step), kept between tensors and steps
} ZpAda;

static CpuAdafactorOpts cpu_opts(const ZeroPart* P, const ZeroStepArgs* a, bool decay) {
    const ZeroAdafactor* z = &P->o.adafactor;
    CpuAdafactorOpts o;
    cpu_adafactor_default_opts(&o);
    o.has_lr = !z->relative_step;
    o.lr = z->relative_step ? 0.0 : a->lr64;
    o.eps1 = z->eps1;
    o.eps2 = z->eps2;
    o.clip_threshold = z->clip_threshold;
    o.decay_rate = z->decay_rate;
    o.has_beta1 = z->has_beta1;
    o.beta1 = z->beta1;
    o.weight_decay = decay ? z->weight_decay : 0.0;
    o.scale_parameter = z->scale_parameter;
    o.relative_step = z->relative_step;
    o.warmup_init = z->warmup_init;
    return o;
}

int zp_ada_create(ZeroPart* P, const ZeroOptions* o, char* err, size_t errlen) {
    ZpAda* A = calloc_check(1, sizeof *A);
    P->ada = A;
    A->n = o->num_tensors;
    A->t = calloc_check((size_t)T5_MAX(A->n, 1), sizeof *A->t);
    A->unit_first = calloc_check((size_t)P->num_units + 1, sizeof(int));
    A->order = calloc_check((size_t)T5_MAX(A->n, 1), sizeof(int));
    const bool beta1 = o->adafactor.has_beta1;
    size_t gpu_off = 0, host_off = 0;
    int gpu_count = 0;
    // the state in the m buffers (estimate.c sized them): per unit kind in tensor order
    for (int i = 0; i < A->n; i++) {
        const ZeroTensor* zt = &o->tensors[i];
        ZpAdaTensor* t = &A->t[i];
        const int u = zt->unit;
        const size_t lo = P->L.lo[u], hi = P->L.hi[u];
        if (zt->offset < lo || zt->offset + zt->numel > hi)
            return t5_set_err(err, errlen,
                              "not implemented yet: Adafactor over a tensor split across ZeRO ranks (tensor %d of %s); "
                              "docs/zero.md says how its row/column statistics would be reduced",
                              i, P->name[u]);
        t->factored = zt->rows > 0 && zt->cols > 0;
        if (t->factored && (size_t)(zt->rows * zt->cols) != zt->numel)
            return t5_set_err(err, errlen, "ZeRO Adafactor: tensor %d is %lld x %lld but has %zu elements", i,
                              (long long)zt->rows, (long long)zt->cols, zt->numel);
        t->unit = u;
        t->off = zt->offset - lo;
        t->numel = zt->numel;
        t->rows = t->factored ? zt->rows : 1;
        t->cols = t->factored ? zt->cols : (int64_t)zt->numel;
        t->decay = zt->decay;
        t->floats = zero_adafactor_tensor_floats(zt, zt->numel, beta1);
        t->blob_off = A->total_floats;
        A->total_floats += t->floats;
        if (P->u[u].opt_cpu) {
            t->state = (float*)P->h_m.ptr + host_off;
            host_off += t->floats;
            t->plan_index = -1;
        } else {
            t->state = P->d_m + gpu_off;
            gpu_off += t->floats;
            t->plan_index = gpu_count++;
        }
        A->unit_first[u + 1]++;
    }
    ZeroMemEstimate E;
    zero_estimate_layout(o, &P->L, &E);
    if (host_off * 4 != E.host_m || host_off * 4 != P->h_m.bytes || gpu_off * 4 != E.gpu_m)
        t5_die(T5_EXIT_FAILURE, "internal: ZeRO Adafactor state (%zu host, %zu GPU floats) is not estimate.c's (%zu, %zu "
               "bytes)", host_off, gpu_off, E.host_m, E.gpu_m);
    for (int u = 0; u < P->num_units; u++) A->unit_first[u + 1] += A->unit_first[u];
    int* fill = calloc_check((size_t)P->num_units, sizeof(int));
    for (int i = 0; i < A->n; i++) A->order[A->unit_first[A->t[i].unit] + fill[A->t[i].unit]++] = i;
    free(fill);
    // Adam's m, v are not there (their buffers hold this state)
    for (int u = 0; u < P->num_units; u++) P->u[u].m = P->u[u].v = NULL;
    if (gpu_count > 0) {
        AdafactorTensor* ft = calloc_check((size_t)gpu_count, sizeof *ft);
        for (int i = 0; i < A->n; i++) {
            const ZpAdaTensor* t = &A->t[i];
            if (t->plan_index < 0) continue;
            ZpUnit* U = &P->u[t->unit];
            char* xdst = zp_unit_x_dst(P, t->unit);
            AdafactorTensor* f = &ft[t->plan_index];
            *f = (AdafactorTensor){.master = U->master + t->off,
                                   .grad = (const char*)U->gacc + t->off * P->as,
                                   .work = P->X == DT_F32 ? NULL : xdst + t->off * P->xs,
                                   .rows = t->rows, .cols = t->cols, .factored = t->factored,
                                   .grad_dtype = P->A, .work_dtype = P->X == DT_F32 ? DT_F16 : P->X,
                                   .weight_decay = t->decay ? o->adafactor.weight_decay : 0.0};
            const CpuAdafactorState cs =
                cpu_adafactor_state_at(t->state, (size_t)t->rows, (size_t)t->cols, t->factored, beta1);
            f->exp_avg_sq_row = cs.exp_avg_sq_row;
            f->exp_avg_sq_col = cs.exp_avg_sq_col;
            f->exp_avg_sq = cs.exp_avg_sq;
            f->exp_avg = cs.exp_avg;
        }
        A->plan = adafactor_plan_create(ft, gpu_count);
        P->gpu_bytes += adafactor_plan_scratch_bytes(A->plan);
        if (adafactor_plan_scratch_bytes(A->plan) != E.gpu_ada_scratch)
            t5_die(T5_EXIT_FAILURE, "internal: ZeRO Adafactor plan scratch %zu bytes, estimate.c says %zu",
                   adafactor_plan_scratch_bytes(A->plan), E.gpu_ada_scratch);
        free(ft);
    }
    return 0;
}

void zp_ada_destroy(ZeroPart* P) {
    ZpAda* A = P->ada;
    if (!A) return;
    if (A->plan) adafactor_plan_free(A->plan);
    cpu_adafactor_scratch_free(&A->scratch);
    free(A->t);
    free(A->unit_first);
    free(A->order);
    free(A);
    P->ada = NULL;
}

bool zp_ada_gpu_step(ZeroPart* P, const ZeroStepArgs* a, cudaStream_t s) {
    ZpAda* A = P->ada;
    if (!A->plan) return false;
    const ZeroAdafactor* z = &P->o.adafactor;
    AdafactorStepArgs fa = {.step = a->step, .lr = a->lr64, .eps1 = z->eps1, .eps2 = z->eps2,
                            .clip_threshold = z->clip_threshold, .decay_rate = z->decay_rate,
                            .has_beta1 = z->has_beta1, .beta1 = z->beta1, .scale_parameter = z->scale_parameter,
                            .relative_step = z->relative_step, .warmup_init = z->warmup_init};
    adafactor_step(A->plan, &fa, a->d_inv_scale, NULL, s);
    A->last_step = a->step;
    A->last_stream = s;
    return true;
}

void zp_ada_cpu_unit(ZeroPart* P, int u, const ZeroStepArgs* a) {
    ZpAda* A = P->ada;
    ZpUnit* U = &P->u[u];
    const bool beta1 = P->o.adafactor.has_beta1;
    for (int k = A->unit_first[u]; k < A->unit_first[u + 1]; k++) {
        ZpAdaTensor* t = &A->t[A->order[k]];
        CpuAdafactorOpts co = cpu_opts(P, a, t->decay);
        CpuAdafactorState st = cpu_adafactor_state_at(t->state, (size_t)t->rows, (size_t)t->cols, t->factored, beta1);
        void* work = U->whost ? (char*)U->whost + t->off * P->xs : NULL;
        cpu_adafactor_step(&co, a->step, &st, U->master + t->off, (const char*)U->gacc + t->off * P->as, P->A,
                           a->inv_scale, work, P->X == DT_F32 ? DT_F32 : P->X, &t->info, &A->scratch);
    }
}

size_t zp_ada_state_floats(const ZeroPart* P) { return P->ada ? P->ada->total_floats : 0; }

void zp_ada_state_io(ZeroPart* P, size_t offset, size_t n, float* host, bool to_host) {
    ZpAda* A = P->ada;
    if (!A) t5_die(T5_EXIT_FAILURE, "internal: Adafactor state asked of a ZeRO engine running AdamW");
    if (A->plan) CUDA_CHECK(cudaDeviceSynchronize());  // the GPU units' state: the plan's kernels are done
    const size_t end = offset + n;
    if (end > A->total_floats) t5_die(T5_EXIT_FAILURE, "internal: Adafactor state range beyond its %zu floats",
                                      A->total_floats);
    for (int i = 0; i < A->n; i++) {
        const ZpAdaTensor* t = &A->t[i];
        const size_t a = T5_MAX(t->blob_off, offset), b = T5_MIN(t->blob_off + t->floats, end);
        if (b <= a) continue;
        float* st = t->state + (a - t->blob_off);
        float* h = host + (a - offset);
        const size_t bytes = (b - a) * sizeof(float);
        if (t->plan_index < 0) memcpy(to_host ? (void*)h : (void*)st, to_host ? (const void*)st : (const void*)h, bytes);
        else CUDA_CHECK(cudaMemcpy(to_host ? (void*)h : (void*)st, to_host ? (const void*)st : (const void*)h, bytes,
                                   to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice));
    }
}

int zp_ada_tensor_unit(const ZeroPart* P, int tensor) {
    const ZpAda* A = P->ada;
    if (!A || tensor < 0 || tensor >= A->n) t5_die(T5_EXIT_FAILURE, "internal: Adafactor lr of tensor %d", tensor);
    return A->t[tensor].unit;
}

float zp_ada_last_lr(ZeroPart* P, int tensor) {
    ZpAda* A = P->ada;
    (void)zp_ada_tensor_unit(P, tensor);  // the index check
    const ZpAdaTensor* t = &A->t[tensor];
    if (t->plan_index >= 0) {
        if (!A->last_step) return 0.0f;
        CUDA_CHECK(cudaStreamSynchronize(A->last_stream));
        AdafactorScalars sc;
        CUDA_CHECK(cudaMemcpy(&sc, adafactor_plan_scalars(A->plan) + t->plan_index, sizeof sc, cudaMemcpyDeviceToHost));
        return sc.lr;
    }
    return t->info.lr;  // a CPU unit: the caller waited for its step (zp_optimizer_ada_lr)
}
