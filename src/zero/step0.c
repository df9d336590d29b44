/*
 * step0.c: stage 0's optimizer (step0.h).
 */
#include "step0.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cuda/adafactor.cuh"
#include "../../cuda/adamw.cuh"
#include "../../cuda/elementwise.cuh"
#include "../../cuda/global_norm.cuh"
#include "../base/check.h"
#include "../base/common.h"
#include "cpu_adafactor.h"

struct Step0 {
    bool ada;                    // Adafactor (else AdamW)
    size_t n;                    // flat numel
    float* d_m;                  // (n) fp32 Adam first moment
    float* d_v;                  // (n) fp32 Adam second moment
    float* d_acc;                // (n) fp32 accumulation buffer (gas > 1), else NULL
    void* opt_grad;              // (n) opt_grad_dtype: what the norm and the step read (d_acc, or the engine's grads)
    DType opt_grad_dtype;
    AdamWPlan* adam_plan;
    float* d_ada;                // (ada_floats) fp32 Adafactor's state (step0.h layout)
    size_t ada_floats;
    AdafactorPlan* ada_plan;
    AdafactorScalars* h_ada0;    // pinned (1): what tensor 0 used (the lr logged with relative_step + scale_parameter)
    GlobalNormPlan* norm_plan;
};

// m and v (AdamW) or Adafactor's state, and the accumulation buffer: zeroed; the run ends when they do not fit
static void alloc_state(Step0* S, int64_t gas) {
    const size_t state_floats = S->ada ? S->ada_floats : 2 * S->n;
    if ((S->ada ? cudaMalloc((void**)&S->d_ada, T5_MAX(S->ada_floats, (size_t)1) * sizeof(float)) != cudaSuccess
                : (cudaMalloc((void**)&S->d_m, S->n * sizeof(float)) != cudaSuccess ||
                   cudaMalloc((void**)&S->d_v, S->n * sizeof(float)) != cudaSuccess)) ||
        (gas > 1 && cudaMalloc((void**)&S->d_acc, S->n * sizeof(float)) != cudaSuccess)) {
        (void)cudaGetLastError();
        t5_die_hint(T5_EXIT_FAILURE, "use ZeRO stage 1-3 with offload_optimizer (deepspeed.zero_optimization), or a smaller model",
                    "out of GPU memory allocating the %s state: %.2f GiB for %zu parameters", S->ada ? "Adafactor" : "Adam",
                    (double)(state_floats + (gas > 1 ? S->n : 0)) * 4 / (1 << 30), S->n);
    }
    if (S->ada) CUDA_CHECK(cudaMemset(S->d_ada, 0, T5_MAX(S->ada_floats, (size_t)1) * sizeof(float)));
    else CUDA_CHECK(cudaMemset(S->d_m, 0, S->n * sizeof(float)));
    if (!S->ada) CUDA_CHECK(cudaMemset(S->d_v, 0, S->n * sizeof(float)));
}

// one plan over every tensor (AdamW's or Adafactor's), reading opt_grad and writing the master and the working copy
static void make_plans(Step0* S, ZeroEngine* Z, const ZeroOptions* o) {
    const int nt = o->num_tensors;
    const DType X = o->working_dtype;
    AdamWTensor* at = calloc_check((size_t)nt, sizeof(AdamWTensor));
    AdafactorTensor* ft = calloc_check((size_t)nt, sizeof(AdafactorTensor));
    size_t ada_off = 0;
    float* master = zero_flat_master(Z);
    const size_t gsz = dtype_size(S->opt_grad_dtype);
    const bool beta1 = o->adafactor.has_beta1;
    for (int i = 0; i < nt; i++) {
        const ZeroTensor* p = &o->tensors[i];
        size_t off = zero_unit_offset(Z, p->unit) + p->offset;
        at[i].master = master + off;
        at[i].m = S->ada ? NULL : S->d_m + off;
        at[i].v = S->ada ? NULL : S->d_v + off;
        at[i].grad = (const char*)S->opt_grad + off * gsz;
        at[i].n = (int64_t)p->numel;
        at[i].grad_dtype = S->opt_grad_dtype;
        at[i].work_dtype = X == DT_F32 ? DT_F16 : X;
        at[i].weight_decay = p->decay ? o->weight_decay : 0.0f;
        if (X != DT_F32) {
            // stage 0: every unit is resident, so its working pointer is stable for the whole run
            char* w = zero_fetch(Z, p->unit, NULL);  // (stage 0 orders nothing on the stream)
            zero_release(Z, p->unit, NULL);
            at[i].work = w + p->offset * dtype_size(X);
        }
        if (S->ada) {
            // HF Adafactor factors every parameter with ndim >= 2 (T5: all but the layer norms)
            const bool fac = p->rows > 0 && p->cols > 0;
            const size_t rows = fac ? (size_t)p->rows : 1, cols = fac ? (size_t)p->cols : p->numel;
            ft[i] = (AdafactorTensor){.master = at[i].master, .grad = at[i].grad, .work = at[i].work,
                                      .rows = (int64_t)rows, .cols = (int64_t)cols, .factored = fac,
                                      .grad_dtype = at[i].grad_dtype, .work_dtype = at[i].work_dtype,
                                      .weight_decay = p->decay ? o->adafactor.weight_decay : 0.0};
            const CpuAdafactorState cs = cpu_adafactor_state_at(S->d_ada + ada_off, rows, cols, fac, beta1);
            ft[i].exp_avg_sq_row = cs.exp_avg_sq_row;
            ft[i].exp_avg_sq_col = cs.exp_avg_sq_col;
            ft[i].exp_avg_sq = cs.exp_avg_sq;
            ft[i].exp_avg = cs.exp_avg;
            ada_off += cpu_adafactor_state_floats(rows, cols, fac, beta1);
        }
    }
    if (S->ada) {
        S->ada_plan = adafactor_plan_create(ft, nt);
        CUDA_CHECK(cudaMallocHost((void**)&S->h_ada0, sizeof(AdafactorScalars)));
        printf("Adafactor (%s): optimizer state %.2f MiB on the GPU (%.3f bytes per parameter; AdamW: 8) + %.2f MiB "
               "scratch\n", beta1 ? "with beta1" : "beta1 None", (double)S->ada_floats * 4 / (1 << 20),
               (double)S->ada_floats * 4 / (double)S->n, (double)adafactor_plan_scratch_bytes(S->ada_plan) / (1 << 20));
    } else {
        S->adam_plan = adamw_plan_create(at, nt);
    }
    free(at);
    free(ft);
}

Step0* step0_create(ZeroEngine* Z, const ZeroOptions* o, size_t ada_floats) {
    Step0* S = calloc_check(1, sizeof *S);
    S->ada = o->optimizer == ZERO_OPTIM_ADAFACTOR;
    S->n = zero_flat_numel(Z);
    S->ada_floats = ada_floats;
    const int64_t gas = T5_MAX(o->grad_accum_steps, 1);
    alloc_state(S, gas);
    // what the optimizer reads: the engine's gradients, or with accumulation their fp32 sum
    S->opt_grad = gas > 1 ? (void*)S->d_acc : zero_flat_grad(Z);
    S->opt_grad_dtype = gas > 1 ? DT_F32 : zero_grad_dtype(Z);
    make_plans(S, Z, o);
    GradBuffer gb = {.ptr = S->opt_grad, .n = (int64_t)S->n, .dtype = S->opt_grad_dtype};
    S->norm_plan = global_norm_plan_create(&gb, 1);
    return S;
}

void step0_destroy(Step0* S) {
    if (!S) return;
    if (S->adam_plan) adamw_plan_free(S->adam_plan);
    if (S->ada_plan) adafactor_plan_free(S->ada_plan);
    if (S->norm_plan) global_norm_plan_free(S->norm_plan);
    if (S->h_ada0) cudaFreeHost(S->h_ada0);
    cudaFree(S->d_m);
    cudaFree(S->d_v);
    cudaFree(S->d_acc);
    cudaFree(S->d_ada);
    free(S);
}

void step0_accumulate(Step0* S, ZeroEngine* Z, int micro, cudaStream_t s) {
    if (!S->d_acc) return;
    // torch semantics in fp32: grad = g_0, then grad += g_i (each g_i complete for its micro-batch)
    if (micro == 0) cast(S->d_acc, DT_F32, zero_flat_grad(Z), zero_grad_dtype(Z), S->n, s);
    else add_inplace(S->d_acc, zero_flat_grad(Z), zero_grad_dtype(Z), S->n, s);
}

void step0_grad_norm(Step0* S, ZeroEngine* Z, int n_micro, bool inject_inf, float* d_norm2, int* d_overflow,
                     cudaStream_t s) {
    if (n_micro > 1 && !S->d_acc)
        t5_die(T5_EXIT_FAILURE, "internal: %lld micro-batches without an accumulation buffer", (long long)n_micro);
    // several ranks: the data-parallel gradient, the mean over the ranks (every rank then steps alike)
    zero_dp_allreduce_mean(Z, S->opt_grad, S->opt_grad_dtype, S->n, s);
    if (inject_inf) fill(S->opt_grad, S->opt_grad_dtype, 1, INFINITY, s);
    global_norm_compute(S->norm_plan, d_norm2, d_overflow, s);
}

void step0_step(Step0* S, const ZeroOptions* o, const ZeroStepArgs* a, cudaStream_t s) {
    if (S->ada) {
        // transformers' Adafactor with HF's state["step"] = the applied updates (a skipped one does not count)
        const ZeroAdafactor* z = &o->adafactor;
        AdafactorStepArgs fa = {.step = a->step, .lr = a->lr64, .eps1 = z->eps1, .eps2 = z->eps2,
                                .clip_threshold = z->clip_threshold, .decay_rate = z->decay_rate,
                                .has_beta1 = z->has_beta1, .beta1 = z->beta1, .scale_parameter = z->scale_parameter,
                                .relative_step = z->relative_step, .warmup_init = z->warmup_init};
        adafactor_step(S->ada_plan, &fa, a->d_inv_scale, NULL, s);
        return;
    }
    AdamWStepArgs sa = {.lr = a->lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                        .bias_correction1 = a->bias_correction1, .bias_correction2 = a->bias_correction2,
                        .adamw_mode = o->adamw_mode};
    adamw_step(S->adam_plan, &sa, a->d_inv_scale, NULL, s);
}

void step0_adam_io(Step0* S, int which, size_t off, size_t n, float* host, bool to_host) {
    float* d = (which == 0 ? S->d_m : S->d_v) + off;
    if (to_host) CUDA_CHECK(cudaMemcpy(host, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    else CUDA_CHECK(cudaMemcpy(d, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

void step0_adafactor_io(Step0* S, size_t off, size_t n, float* host, bool to_host) {
    if (to_host) CUDA_CHECK(cudaMemcpy(host, S->d_ada + off, n * sizeof(float), cudaMemcpyDeviceToHost));
    else CUDA_CHECK(cudaMemcpy(S->d_ada + off, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

double step0_adafactor_lr(Step0* S, cudaStream_t s) {
    CUDA_CHECK(cudaMemcpyAsync(S->h_ada0, adafactor_plan_scalars(S->ada_plan), sizeof(AdafactorScalars),
                               cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return S->h_ada0->lr;
}
