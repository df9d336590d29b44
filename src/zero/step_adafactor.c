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
#include "ada_split.h"
#include "estimate.h"

typedef struct {
    int unit;
    size_t off;            // of its slice inside the unit's partition (W = 1: of the tensor inside the unit)
    size_t first;          // this rank's slice: elements [first, first + numel) of the tensor (W = 1: 0, all)
    size_t numel;          // 0: another rank's tensor (no state here)
    int64_t rows, cols;    // factored: rows x cols; else 1 x numel
    bool factored;
    bool decay;
    float* state;          // its floats (host for a CPU unit, device for a GPU unit)
    size_t floats;
    size_t blob_off;       // first float in the checkpoint layout
    int plan_index;        // GPU: its index in the plan; -1: CPU-stepped
    CpuAdafactorStepInfo info;  // CPU: what its last step used
    // CPU-stepped and cut across ranks (several ranks with offload_optimizer): stepped as a slice, its sums reduced by
    // zp_ada_cpu_sums on the main thread before the optimizer thread applies it
    bool cpu_split;
    float* factors;        // (rows + cols) a matrix's row and column factors between the two (host)
    double psum, usum;     // the whole tensor's sum p^2 and sum u^2 of this step
} ZpAdaTensor;

typedef struct ZpAda {
    int n;
    ZpAdaTensor* t;        // (n) in ZeroOptions.tensors order
    int* unit_first;       // (num_units + 1) the unit's tensors: order[unit_first[u] .. unit_first[u + 1])
    int* order;            // (n)
    size_t total_floats;
    ZeroAdaSplit split;    // slices and reduce slots (ada_split.h) of the GPU-stepped tensors
    ZeroAdaSplit csplit;   // ... of the CPU-stepped ones (offload_optimizer; only its shared section is used)
    double* h_cred;        // (csplit.shared1 + shared2) the CPU slices' partial sums (host)
    double* d_cred;        // the same on the GPU, for the all-reduce
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

// tensor t's entry in the GPU plan: its slice of the unit's master, accumulated gradient and 16-bit weights
static AdafactorTensor plan_tensor(ZeroPart* P, const ZeroOptions* o, const ZpAdaTensor* t, bool beta1) {
    ZpUnit* U = &P->u[t->unit];
    char* xdst = zp_unit_x_dst(P, t->unit);
    AdafactorTensor f = {.master = U->master + t->off,
                         .grad = (const char*)U->gacc + t->off * P->as,
                         .work = P->X == DT_F32 ? NULL : xdst + t->off * P->xs,
                         .rows = t->rows, .cols = t->cols, .factored = t->factored,
                         .grad_dtype = P->A, .work_dtype = P->X == DT_F32 ? DT_F16 : P->X,
                         .weight_decay = t->decay ? o->adafactor.weight_decay : 0.0,
                         .first = (int64_t)t->first, .count = (int64_t)t->numel};
    // the state of a slice: the whole row / column statistics (replicated), the slice's v and exp_avg
    const CpuAdafactorState cs = cpu_adafactor_state_at(t->state, t->factored ? (size_t)t->rows : 1,
                                                        t->factored ? (size_t)t->cols : t->numel, t->factored, beta1);
    f.exp_avg_sq_row = cs.exp_avg_sq_row;
    f.exp_avg_sq_col = cs.exp_avg_sq_col;
    f.exp_avg_sq = cs.exp_avg_sq;
    f.exp_avg = cs.exp_avg;
    return f;
}

int zp_ada_create(ZeroPart* P, const ZeroOptions* o, char* err, size_t errlen) {
    ZpAda* A = calloc_check(1, sizeof *A);
    P->ada = A;
    A->n = o->num_tensors;
    A->t = calloc_check((size_t)T5_MAX(A->n, 1), sizeof *A->t);
    A->unit_first = calloc_check((size_t)P->num_units + 1, sizeof(int));
    A->order = calloc_check((size_t)T5_MAX(A->n, 1), sizeof(int));
    const bool beta1 = o->adafactor.has_beta1;
    // this rank's slice of every tensor and the reduce buffers' slots (ada_split.h; one rank: whole, nothing shared)
    bool* in_plan = calloc_check((size_t)T5_MAX(A->n, 1), sizeof(bool));
    for (int i = 0; i < A->n; i++) in_plan[i] = !P->u[o->tensors[i].unit].opt_cpu;
    zero_ada_split_build(&A->split, o->tensors, A->n, &P->L, in_plan);
    for (int i = 0; i < A->n; i++) in_plan[i] = !in_plan[i];
    zero_ada_split_build(&A->csplit, o->tensors, A->n, &P->L, in_plan);  // the CPU-stepped tensors
    free(in_plan);
    size_t gpu_off = 0, host_off = 0;
    int gpu_count = 0;
    // the state in the m buffers (estimate.c sized them): per unit kind in tensor order, the tensors this rank holds
    for (int i = 0; i < A->n; i++) {
        const ZeroTensor* zt = &o->tensors[i];
        ZpAdaTensor* t = &A->t[i];
        const int u = zt->unit;
        t->unit = u;
        t->plan_index = -1;
        t->blob_off = A->total_floats;
        t->factored = zt->rows > 0 && zt->cols > 0;
        if (t->factored && (size_t)(zt->rows * zt->cols) != zt->numel)
            return t5_set_err(err, errlen, "ZeRO Adafactor: tensor %d is %lld x %lld but has %zu elements", i,
                              (long long)zt->rows, (long long)zt->cols, zt->numel);
        t->first = A->split.first[i];
        t->numel = A->split.count[i];
        if (t->numel == 0) continue;  // another rank's
        t->off = zt->offset + t->first - P->L.lo[u];
        t->rows = t->factored ? zt->rows : 1;
        t->cols = t->factored ? zt->cols : (int64_t)zt->numel;
        t->decay = zt->decay;
        t->floats = zero_adafactor_tensor_floats(zt, t->numel, beta1);
        A->total_floats += t->floats;
        if (P->u[u].opt_cpu) {
            t->state = (float*)P->h_m.ptr + host_off;
            host_off += t->floats;
            t->cpu_split = A->csplit.shared[i];
            if (t->cpu_split && t->factored) t->factors = malloc_check((size_t)(t->rows + t->cols) * sizeof(float));
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
    for (int i = 0; i < A->n; i++)
        if (A->t[i].numel > 0) A->order[A->unit_first[A->t[i].unit] + fill[A->t[i].unit]++] = i;
    free(fill);
    // Adam's m, v are not there (their buffers hold this state)
    for (int u = 0; u < P->num_units; u++) P->u[u].m = P->u[u].v = NULL;
    // the GPU plan: this rank's GPU tensors, and (several ranks) the reduce buffers every rank all-reduces
    if (gpu_count > 0 || A->split.shared1 > 0) {
        AdafactorTensor* ft = calloc_check((size_t)T5_MAX(gpu_count, 1), sizeof *ft);
        int64_t* off1 = calloc_check((size_t)T5_MAX(gpu_count, 1), sizeof *off1);
        int64_t* off2 = calloc_check((size_t)T5_MAX(gpu_count, 1), sizeof *off2);
        for (int i = 0; i < A->n; i++) {
            const ZpAdaTensor* t = &A->t[i];
            if (t->plan_index < 0) continue;
            ft[t->plan_index] = plan_tensor(P, o, t, beta1);
            off1[t->plan_index] = A->split.off1[i];
            off2[t->plan_index] = A->split.off2[i];
        }
        const AdafactorReduce red = {.len1 = A->split.len1, .len2 = A->split.len2, .off1 = off1, .off2 = off2};
        A->plan = adafactor_plan_create_reduce(ft, gpu_count, &red);
        P->gpu_bytes += adafactor_plan_scratch_bytes(A->plan);
        free(ft);
        free(off1);
        free(off2);
    }
    // the CPU slices' sums: reduced through the GPU (zp_ada_cpu_sums)
    const size_t cred = (size_t)(A->csplit.shared1 + A->csplit.shared2);
    if (cred > 0) {
        A->h_cred = malloc_check(cred * sizeof(double));
        P->gpu_bytes += cred * sizeof(double);  // d_cred: zp_ada_device_init
    }
    if (adafactor_plan_scratch_bytes(A->plan) + cred * sizeof(double) != E.gpu_ada_scratch)
        t5_die(T5_EXIT_FAILURE, "internal: ZeRO Adafactor plan scratch %zu bytes + %zu, estimate.c says %zu",
               adafactor_plan_scratch_bytes(A->plan), cred * sizeof(double), E.gpu_ada_scratch);
    if ((A->split.shared1 > 0 || A->csplit.shared1 > 0) && P->L.rank == 0) {
        int cut = 0;
        for (int i = 0; i < A->n; i++) cut += A->split.shared[i] || A->csplit.shared[i];
        char gpu[96] = "", cpu[96] = "";
        if (A->split.shared1 > 0)
            snprintf(gpu, sizeof gpu, "; GPU-stepped: 2 fp64 all-reduces of %lld + %lld doubles",
                     (long long)A->split.shared1, (long long)A->split.shared2);
        if (A->csplit.shared1 > 0)
            snprintf(cpu, sizeof cpu, "; CPU-stepped: 2 fp64 all-reduces of %lld + %lld doubles",
                     (long long)A->csplit.shared1, (long long)A->csplit.shared2);
        printf("Adafactor on %d ranks: %d of %d tensors cut across ranks, their row/column sums, sum p^2 and sum u^2 "
               "all-reduced every step%s%s\n", P->L.world, cut, A->n, gpu, cpu);
        fflush(stdout);
    }
    return 0;
}

void zp_ada_device_init(ZeroPart* P) {
    ZpAda* A = P->ada;
    const size_t cred = A ? (size_t)(A->csplit.shared1 + A->csplit.shared2) : 0;
    if (cred > 0 && !A->d_cred) CUDA_CHECK(cudaMalloc((void**)&A->d_cred, cred * sizeof(double)));
}

void zp_ada_destroy(ZeroPart* P) {
    ZpAda* A = P->ada;
    if (!A) return;
    if (A->plan) adafactor_plan_free(A->plan);
    for (int i = 0; i < A->n; i++) free(A->t[i].factors);
    free(A->h_cred);
    if (A->d_cred) CUDA_CHECK(cudaFree(A->d_cred));
    zero_ada_split_free(&A->split);
    zero_ada_split_free(&A->csplit);
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
    if (A->split.shared1 == 0) {
        adafactor_step(A->plan, &fa, a->d_inv_scale, NULL, s);
    } else {
        // several ranks share tensors: their partial sums all-reduced between the phases (ada_split.h), one pair
        // of collectives for every GPU sub-group of the step, on the compute stream (main communicator: every
        // rank's step follows its norm's all-reduces there, in the same order)
        adafactor_step_begin(A->plan, &fa, a->d_inv_scale, NULL, s);
        zcoll_all_reduce_f64(&P->coll, adafactor_plan_reduce_buffer(A->plan, 1), (size_t)A->split.shared1, s,
                             "Adafactor row/column sums");
        adafactor_step_middle(A->plan, &fa, a->d_inv_scale, NULL, s);
        zcoll_all_reduce_f64(&P->coll, adafactor_plan_reduce_buffer(A->plan, 2), (size_t)A->split.shared2, s,
                             "Adafactor update rms");
        adafactor_step_end(A->plan, &fa, a->d_inv_scale, NULL, s);
    }
    A->last_step = a->step;
    A->last_stream = s;
    return true;
}

// a CPU-stepped tensor's slice: the unit's host master, accumulated gradient and 16-bit weights at its offset
static CpuAdafactorSlice cpu_slice(ZeroPart* P, const ZpAdaTensor* t, const ZeroStepArgs* a, bool beta1) {
    ZpUnit* U = &P->u[t->unit];
    CpuAdafactorSlice sl = {.rows = (size_t)t->rows, .cols = (size_t)t->cols, .factored = t->factored,
                            .first = t->first, .count = t->numel, .master = U->master + t->off,
                            .grad = (const char*)U->gacc + t->off * P->as, .grad_dtype = P->A,
                            .grad_scale = a->inv_scale,
                            .work = U->whost ? (char*)U->whost + t->off * P->xs : NULL,
                            .work_dtype = P->X == DT_F32 ? DT_F32 : P->X};
    sl.state = cpu_adafactor_state_at(t->state, t->factored ? (size_t)t->rows : 1,
                                      t->factored ? (size_t)t->cols : t->numel, t->factored, beta1);
    return sl;
}

// n doubles of host partial sums all-reduced through the GPU on s (main communicator), back on the host
static void cpu_sums_all_reduce(ZeroPart* P, double* h, double* d, size_t n, cudaStream_t s, const char* name) {
    if (n == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(double), cudaMemcpyHostToDevice, s));
    zcoll_all_reduce_f64(&P->coll, d, n, s, name);
    CUDA_CHECK(cudaMemcpyAsync(h, d, n * sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

double* zp_ada_cpu_sums_buffer(ZeroPart* P, int which, size_t* n) {
    ZpAda* A = P->ada;
    *n = (size_t)(which == 1 ? A->csplit.shared1 : A->csplit.shared2);
    return which == 1 ? A->h_cred : A->h_cred + A->csplit.shared1;
}

void zp_ada_cpu_phase(ZeroPart* P, const ZeroStepArgs* a, int phase) {
    ZpAda* A = P->ada;
    const bool beta1 = P->o.adafactor.has_beta1;
    double* r1 = A->h_cred;
    double* r2 = A->h_cred + A->csplit.shared1;
    // a slot of a tensor this rank holds nothing of stays 0
    if (phase == 1) memset(A->h_cred, 0, (size_t)(A->csplit.shared1 + A->csplit.shared2) * sizeof(double));
    for (int i = 0; i < A->n; i++) {
        ZpAdaTensor* t = &A->t[i];
        if (!t->cpu_split || t->numel == 0) continue;
        const CpuAdafactorOpts co = cpu_opts(P, a, t->decay);
        const CpuAdafactorSlice sl = cpu_slice(P, t, a, beta1);
        double* s1 = r1 + A->csplit.off1[i];
        double* s2 = r2 + A->csplit.off2[i];
        if (phase == 1) {
            cpu_adafactor_slice_sums(&co, a->step, &sl, s1, s2, &A->scratch);
        } else if (phase == 2) {
            cpu_adafactor_slice_factors(&co, a->step, &sl, s1, t->factors, s2);
        } else {
            t->psum = s1[t->factored ? t->rows + t->cols : 0];
            t->usum = *s2;
        }
    }
}

void zp_ada_cpu_sums(ZeroPart* P, const ZeroStepArgs* a, cudaStream_t s) {
    ZpAda* A = P->ada;
    if (!A || A->csplit.shared1 == 0) return;
    // the CPU units' gradients are on the host once s_grad passed ev_grads_done (and the staging ring is drained)
    CUDA_CHECK(cudaEventSynchronize(P->ev_grads_done));
    zp_ring_drain(P->ring_main);
    const size_t n1 = (size_t)A->csplit.shared1;
    zp_ada_cpu_phase(P, a, 1);
    cpu_sums_all_reduce(P, A->h_cred, A->d_cred, n1, s, "Adafactor row/column sums (CPU)");
    zp_ada_cpu_phase(P, a, 2);
    cpu_sums_all_reduce(P, A->h_cred + n1, A->d_cred + n1, (size_t)A->csplit.shared2, s, "Adafactor update rms (CPU)");
    zp_ada_cpu_phase(P, a, 3);
}

void zp_ada_cpu_unit(ZeroPart* P, int u, const ZeroStepArgs* a) {
    ZpAda* A = P->ada;
    ZpUnit* U = &P->u[u];
    const bool beta1 = P->o.adafactor.has_beta1;
    for (int k = A->unit_first[u]; k < A->unit_first[u + 1]; k++) {
        ZpAdaTensor* t = &A->t[A->order[k]];
        CpuAdafactorOpts co = cpu_opts(P, a, t->decay);
        if (t->cpu_split) {  // its whole sums came from zp_ada_cpu_sums
            const CpuAdafactorSlice sl = cpu_slice(P, t, a, beta1);
            cpu_adafactor_slice_apply(&co, a->step, &sl, t->psum, t->usum, t->factors, &t->info);
            continue;
        }
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
    if (t->numel == 0) return 0.0f;  // another rank's tensor (tensor 0, the logged one, starts on rank 0)
    if (t->plan_index >= 0) {
        if (!A->last_step) return 0.0f;
        CUDA_CHECK(cudaStreamSynchronize(A->last_stream));
        AdafactorScalars sc;
        CUDA_CHECK(cudaMemcpy(&sc, adafactor_plan_scalars(A->plan) + t->plan_index, sizeof sc, cudaMemcpyDeviceToHost));
        return sc.lr;
    }
    return t->info.lr;  // a CPU unit: the caller waited for its step (zp_optimizer_ada_lr)
}
