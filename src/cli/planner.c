/*
 * planner.c: the memory planner (see planner.h).
 *
 * Memory: src/zero/estimate.c (the engine's own sizes, one source of truth with zp_create) + the activation
 * arena (model/t5.c t5_model_activation_bytes_for, on the attention path an H100 takes) + the fixed workspace.
 *
 * Step time, from rates measured on one H100 80GB with 16 cores (docs/zero.md, 2026-11-25):
 *   compute   the stage 0 step of t5-3b fp16 at 128+128 tokens: 0.059 s at batch 1, 0.081 s at batch 8. A line
 *             through the two points in training FLOPs (6 x B x (Ts x encoder parameters + Tt x (decoder
 *             parameters + V x D))) gives a rate and a per-block launch overhead; other shapes scale by FLOPs and
 *             blocks; gradient checkpointing adds a forward (x 4/3).
 *   CPU AdamW 0.235 s per 1e9 parameters on the 16 cores (memory-bound: 28 bytes per parameter).
 *   PCIe      55 GB/s each way; per step: offloaded 16-bit weights in (twice with offload_param: the forward's
 *             and the backward's gathers; once otherwise: the CPU AdamW's result), gradients out (per
 *             micro-batch; from the second micro-batch the accumulated slot also comes in).
 *   step      = max(CPU AdamW, PCIe) + micro-batches x compute, x 1.25 when the CPU steps (the measured
 *             step / floor ratio of the homework configuration at batch 1 and 8).
 * Several ranks of one node: NCCL bus bandwidth measured between the two H100s of one host (NVLink, `t5train
 * --num_gpus 2 launch-check --bandwidth_mib 1024`, docs/multi_gpu.md, 2026-11-25): all-reduce 331.9 GB/s, all-gather
 * 273.3 GB/s, reduce-scatter 278.8 GB/s. The collectives' time per update at those rates (nccl-tests' busbw:
 * x 2(N-1)/N of the bytes for an all-reduce, x (N-1)/N for the others): stage 0 all-reduces the 16-bit gradient,
 * stages 1/2 reduce-scatter it and all-gather the weights, stage 3 gathers the weights twice (forward, backward) and
 * reduce-scatters the gradient. The step is the one-rank formula with its compute replaced by max(compute, the
 * collectives) (they overlap the backward), and the CPU AdamW over this rank's partition. Several nodes: no rate
 * between hosts has been measured, so no step time (step_s < 0).
 */
#include "planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../model/params.h"
#include "../../model/t5.h"
#include "../base/common.h"
#include "../zero/estimate.h"

#define MEASURED_ADAM_S_PER_1E9 0.235
#define MEASURED_PCIE_BYTES_PER_S 55e9
#define MEASURED_STEP_OVER_FLOOR 1.25
#define MEASURED_S0_B1 0.059
#define MEASURED_S0_B8 0.081
#define CUBLASLT_WORKSPACE ((size_t)32 << 20)
#define MEASURED_NVLINK_ALLREDUCE_BUSBW 331.9e9
#define PLANNER_NCCL_BYTES ((size_t)(1.55 * 1024 * 1024 * 1024))
// stages 1-3 also all-gather on the second communicator and reduce-scatter on the first: NCCL connects those on first
// use. Measured on two H100s, bf16, the stage 1 / 2 / 3 peaks over the prediction without it: t5-base 0.32 / 0.33 /
// 0.37 GiB (test_gpu_estimate), t5-3b 0.32 / 0.33 / 0.37 GiB (docs/estimate.md), the same for both sizes: the largest
#define PLANNER_NCCL_GATHER_BYTES ((size_t)(0.37 * 1024 * 1024 * 1024))
#define MEASURED_NVLINK_ALLGATHER_BUSBW 273.3e9
#define MEASURED_NVLINK_REDUCESCATTER_BUSBW 278.8e9

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

static void block_params(const T5Config* c, double* enc, double* dec, double* head) {
    ParamTable T;
    char err[256];
    *enc = *dec = *head = 0;
    if (params_build(&T, c, err, sizeof err)) return;
    for (int u = 0; u < T.num_units; u++) {
        if (T.units[u].kind == UNIT_ENC_BLOCK) *enc += (double)T.units[u].numel;
        if (T.units[u].kind == UNIT_DEC_BLOCK) *dec += (double)T.units[u].numel;
    }
    *head = (double)c->vocab_size * c->d_model;
    params_free(&T);
}

static double train_flops(const T5Config* c, double B, double Ts, double Tt, bool ckpt) {
    double enc, dec, head;
    block_params(c, &enc, &dec, &head);
    double f = 6.0 * B * (Ts * enc + Tt * (dec + head));
    return ckpt ? f * 4.0 / 3.0 : f;
}

double planner_compute_s(const PlanInput* in) {
    T5Config ref;
    if (!t5_config_preset("t5-3b", &ref)) return -1;
    const double f1 = train_flops(&ref, 1, 128, 128, false), f8 = train_flops(&ref, 8, 128, 128, false);
    const double rate = (f8 - f1) / (MEASURED_S0_B8 - MEASURED_S0_B1);
    const double per_block = (MEASURED_S0_B1 - f1 / rate) / (double)(ref.num_layers + ref.num_decoder_layers);
    const double f = train_flops(&in->model, in->batch, in->src_len, in->tgt_len, in->gradient_checkpointing);
    return per_block * (double)(in->model.num_layers + in->model.num_decoder_layers) + f / rate;
}

int planner_row(const PlanInput* in, int stage, bool off_opt, bool off_param, double ratio, PlanRow* r, char* err,
                size_t errlen) {
    memset(r, 0, sizeof *r);
    r->stage = stage;
    r->off_opt = off_opt;
    r->off_param = off_param;
    r->ratio = off_opt ? ratio : 1.0;
    r->step_s = -1;
    if (in->batch < 1 || in->src_len < 1 || in->tgt_len < 1)
        return t5_set_err(err, errlen, "batch %d and lengths %d + %d must be >= 1", in->batch, in->src_len,
                          in->tgt_len);
    if (in->gpus_per_node < 1 || in->num_nodes < 1)
        return t5_set_err(err, errlen, "num_gpus %d and num_nodes %d must be >= 1", in->gpus_per_node, in->num_nodes);
    ParamTable T;
    if (params_build(&T, &in->model, err, errlen)) return -1;
    const int nu = T.num_units;
    size_t* numel = malloc_check((size_t)nu * sizeof(size_t));
    for (int u = 0; u < nu; u++) numel[u] = T.units[u].numel;
    ZeroOptions o = in->knobs;
    o.stage = stage;
    o.world = in->gpus_per_node * in->num_nodes;
    o.rank = 0;
    o.working_dtype = in->dtype;
    o.grad_dtype = o.accum_dtype = in->grad_dtype;
    if (o.zenflow) o.accum_dtype = DT_F32;  // ZenFlow sums the update interval's gradients in fp32 (engine.c)
    if (o.comm_dtype != DT_F32 && o.comm_dtype != DT_F16 && o.comm_dtype != DT_BF16) o.comm_dtype = in->dtype;
    o.offload_optimizer = off_opt;
    o.ratio = off_opt ? ratio : 1.0;
    o.offload_param = off_param;
    // evaluation only: the engine keeps no optimizer state, gradients or (16-bit) fp32 master at stages 1-3, as
    // engine_create builds it from !train (model/zero.h no_optimizer_state); stage 0 builds no optimizer (no m, v)
    // but keeps its master, gradients and working copy resident (estimate_stage0)
    o.no_optimizer_state = in->forward_only;
    t5_model_zero_describe(&T, &o);
    ZeroMemEstimate e;
    o.grad_accum_steps = in->grad_accum_steps;
    int rc = zero_estimate(&o, nu, numel, &e, err, errlen);
    if (rc == 0) {
        T5ModelOptions mo = {.max_B = T5_MAX(in->batch, in->arena_batch), .max_Ts = in->src_len, .max_Tt = in->tgt_len, .dtype = in->dtype,
                             .gradient_checkpointing = in->gradient_checkpointing,
                             .forward_only = in->forward_only, .dropout_rate = in->model.dropout_rate};
        size_t ptr = 0;
        r->g_act = t5_model_activation_bytes_for(&T, &mo, true, t5_model_qkv_contiguous(&T), &ptr);
        // several ranks: NCCL's own buffers; measured: t5-3b stage 0 bf16 8 x (128+128) peaked 1.55 GiB higher on each
        // of two H100s than on one (docs/multi_gpu.md, 2026-11-25; stage 0 only all-reduces), stages 1-3 more
        const size_t nccl = o.world == 1 ? 0 : PLANNER_NCCL_BYTES + (stage > 0 ? PLANNER_NCCL_GATHER_BYTES : 0);
        r->g_work = CUBLASLT_WORKSPACE + ptr + PLANNER_CONTEXT_BYTES + nccl;
        r->g_params = e.gpu_weights + e.gpu_views + e.gpu_gathered_peak;
        r->g_grads = e.gpu_grads + e.gpu_gacc + e.gpu_grad_peak;
        // Adafactor: its state in gpu_m; ZenFlow: its selective optimizer on the GPU
        r->g_optim = e.gpu_master + e.gpu_m + e.gpu_v + e.gpu_ada_scratch + e.gpu_zenflow;
        r->g_comm = e.gpu_comm;
        r->g_total = r->g_params + r->g_grads + r->g_optim + r->g_comm + r->g_act + r->g_work;
        const size_t per_node = (size_t)in->gpus_per_node;
        r->h_pinned = e.host_pinned * per_node;
        r->h_pageable = e.host_pageable * per_node;
        r->h_register = e.host_register * per_node;
        r->h_total = e.host_total * per_node;
        r->nvme_file_bytes = e.nvme_file_bytes;
        if (o.world > 1 && stage > 0 && !in->forward_only) {
            // saving (training runs only): the writer gathers the whole fp32 model into host memory (zero_gather_masters)
            size_t P = 0;
            for (int u = 0; u < nu; u++) P += numel[u];
            r->h_pageable += P * 4;
            r->h_total += P * 4;
        }
        r->cpu_numel = e.cpu_numel;
        r->ada_reduce_bytes = (double)e.ada_reduce_doubles * 8.0;
        // PCIe traffic per optimizer step
        const double xs = (double)dtype_size(in->dtype), as = (double)dtype_size(in->grad_dtype);
        const double gas = (double)(in->grad_accum_steps > 1 ? in->grad_accum_steps : 1);
        const double cpu = (double)e.cpu_numel;
        r->h2d_bytes = (off_param ? 2.0 * gas * cpu * xs : cpu * xs) + (gas - 1.0) * cpu * as;
        r->d2h_bytes = gas * cpu * as;
        // offloaded gradients do not pile up behind PCIe: the engine's gradient buffers are a fixed set
        // (src/zero/bufcache.h) the backward waits for, counted in gpu_grad_peak
        // (an evaluation-only job: no step time; the rates below are a training step's)
        if (in->num_nodes == 1 && !in->forward_only) {
            double compute = planner_compute_s(in) * gas;
            if (o.world > 1) {  // the collectives of one update at the measured NVLink rates (top of the file)
                double P = 0;
                for (int u = 0; u < nu; u++) P += (double)numel[u];
                const double f = (double)(o.world - 1) / (double)o.world, b = P * xs;
                const double comm = stage == 0   ? 2.0 * f * b / MEASURED_NVLINK_ALLREDUCE_BUSBW
                                    : stage < 3 ? f * b / MEASURED_NVLINK_REDUCESCATTER_BUSBW +
                                                      f * b / MEASURED_NVLINK_ALLGATHER_BUSBW
                                                : f * b / MEASURED_NVLINK_REDUCESCATTER_BUSBW +
                                                      2.0 * f * b / MEASURED_NVLINK_ALLGATHER_BUSBW;
                compute = fmax(compute, comm);
                // Adafactor's two all-reduces sit between its kernels on the compute stream: not overlapped
                compute += 2.0 * f * r->ada_reduce_bytes / MEASURED_NVLINK_ALLREDUCE_BUSBW;
            }
            const double adam = MEASURED_ADAM_S_PER_1E9 * cpu / 1e9;
            const double pcie = fmax(r->h2d_bytes, r->d2h_bytes) / MEASURED_PCIE_BYTES_PER_S;
            r->step_s = cpu > 0 ? MEASURED_STEP_OVER_FLOOR * (fmax(adam, pcie) + compute) : compute;
        }
    }
    t5_model_zero_free(&o);
    free(numel);
    params_free(&T);
    return rc;
}

int planner_table(const PlanInput* in, double ratio_step, PlanRow* rows, int cap, char* err, size_t errlen) {
    int n = 0;
    if (!(ratio_step > 0 && ratio_step <= 1)) return t5_set_err(err, errlen, "ratio step %g is not in (0, 1]", ratio_step);
#define ADD(st, oo, op, ra)                                                               \
    do {                                                                                  \
        if (n >= cap) return t5_set_err(err, errlen, "planner: more than %d plans", cap); \
        if (planner_row(in, st, oo, op, ra, &rows[n], err, errlen)) return -1;            \
        n++;                                                                              \
    } while (0)
    ADD(0, false, false, 1.0);
    const int steps = (int)lround(1.0 / ratio_step);
    for (int st = 1; st <= 3; st++) {
        ADD(st, false, false, 1.0);
        for (int k = 1; k <= steps; k++) ADD(st, true, false, fmin(1.0, k * ratio_step));
        if (st == 3)
            for (int k = 1; k <= steps; k++) ADD(st, true, true, fmin(1.0, k * ratio_step));
    }
#undef ADD
    return n;
}

void planner_row_name(const PlanRow* r, char* buf, size_t len) {
    if (!r->off_opt)
        snprintf(buf, len, "stage %d", r->stage);
    else
        snprintf(buf, len, "stage %d, offload_optimizer %s (ratio %.2f)%s", r->stage, r->nvme_file_bytes ? "nvme" : "cpu",
                 r->ratio, r->off_param ? ", offload_param cpu" : "");
}

void planner_fit(PlanRow* rows, int n, bool have_gpu, size_t gpu_free, size_t host_avail, double margin) {
    for (int i = 0; i < n; i++) {
        PlanRow* r = &rows[i];
        r->why[0] = 0;
        const double need = (double)r->g_total * (1.0 + margin);
        const bool gpu_ok = have_gpu && need <= (double)gpu_free;
        const bool host_ok = r->h_total + PLANNER_HOST_MARGIN_BYTES <= host_avail;
        r->fits = gpu_ok && host_ok;
        if (!have_gpu)
            snprintf(r->why, sizeof r->why, "no GPU to check against");
        else if (!gpu_ok)
            snprintf(r->why, sizeof r->why, "GPU: %.1f GiB needed (with the %.0f%% margin), %.1f GiB free", gib(need),
                     100 * margin, gib((double)gpu_free));
        if (!host_ok) {
            size_t l = strlen(r->why);
            snprintf(r->why + l, sizeof r->why - l, "%shost: %.1f GiB needed (+%.0f GiB for the process), %.1f GiB "
                     "available", l ? "; " : "", gib((double)r->h_total), gib((double)PLANNER_HOST_MARGIN_BYTES),
                     gib((double)host_avail));
        }
    }
}

int planner_choose(const PlanRow* rows, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!rows[i].fits) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const double a = rows[i].step_s, b = rows[best].step_s;
        const bool faster = a >= 0 && (b < 0 || a < b - 1e-9);
        const bool tie = a >= 0 && b >= 0 && fabs(a - b) <= 1e-9;
        if (faster || (tie && rows[i].g_total < rows[best].g_total)) best = i;
    }
    return best;
}

// ---- DeepSpeed's estimator

size_t planner_ds_total_params(const T5Config* c) { return t5_config_num_params(c); }

size_t planner_ds_largest_layer(const T5Config* c) {
    // the largest module's own parameters: the embedding (V x D; lm_head too when untied), a feed-forward
    // matrix (F x D), an attention projection (H*Dk x D)
    size_t v = (size_t)c->vocab_size * c->d_model;
    size_t f = (size_t)c->d_ff * c->d_model;
    size_t a = (size_t)c->num_heads * c->d_kv * c->d_model;
    return T5_MAX(v, T5_MAX(f, a));
}

int planner_ds_zero3(const T5Config* c, int gpn, int nodes, DsEstimateRow* out) {
    const double P = (double)planner_ds_total_params(c), LL = (double)planner_ds_largest_layer(c);
    const double total_gpus = (double)gpn * nodes, gpus_factor = 1.0 / nodes, abf = 1.5, llm = 4 * LL;
    int n = 0;
    // offload_optimizer cpu + offload_param cpu
    out[n++] = (DsEstimateRow){"offload_param=cpu , offload_optimizer=cpu , zero_init=1",
                               floor(P * 18 * gpus_factor * abf), llm};
    out[n++] = (DsEstimateRow){"offload_param=cpu , offload_optimizer=cpu , zero_init=0",
                               floor(P * fmax(4.0 * gpn, 18 * gpus_factor) * abf), llm};
    // offload_optimizer cpu only
    const double g2 = llm + floor(2 * P / total_gpus);
    out[n++] = (DsEstimateRow){"offload_param=none, offload_optimizer=cpu , zero_init=1",
                               floor(P * 16 * gpus_factor * abf), g2};
    out[n++] = (DsEstimateRow){"offload_param=none, offload_optimizer=cpu , zero_init=0",
                               floor(P * fmax(4.0 * gpn, 16 * gpus_factor) * abf), g2};
    // no offload
    const double g3 = llm + floor(18 * P / total_gpus);
    out[n++] = (DsEstimateRow){"offload_param=none, offload_optimizer=none, zero_init=1", floor(LL * 4 * gpn * abf), g3};
    out[n++] = (DsEstimateRow){"offload_param=none, offload_optimizer=none, zero_init=0", floor(P * 4 * gpn * abf), g3};
    return n;
}

int planner_ds_zero2(const T5Config* c, int gpn, int nodes, DsEstimateRow* out) {
    const double P = (double)planner_ds_total_params(c), total_gpus = (double)gpn * nodes, abf = 1.5;
    out[0] = (DsEstimateRow){"offload_optimizer=cpu ", floor(P * fmax(4 * total_gpus, 16) * abf), 2 * P};
    out[1] = (DsEstimateRow){"offload_optimizer=none", floor(P * 4 * gpn * abf), 4 * P + floor(16 * P / total_gpus)};
    return 2;
}

// ---- printing

void planner_print(FILE* f, const PlanInput* in, const PlanRow* rows, int n, bool have_gpu, size_t gpu_free,
                   size_t host_avail) {
    const int world = in->gpus_per_node * in->num_nodes;
    fprintf(f, "model %s: %.3g parameters; %s, batch %d x (%d + %d) tokens%s%s; %d GPU%s per node x %d node%s\n",
            in->model.name, (double)t5_config_num_params(&in->model), dtype_name(in->dtype), in->batch, in->src_len,
            in->tgt_len, in->gradient_checkpointing ? ", gradient checkpointing" : "",
            in->grad_accum_steps > 1 ? ", gradient accumulation" : "", in->gpus_per_node,
            in->gpus_per_node > 1 ? "s" : "", in->num_nodes, in->num_nodes > 1 ? "s" : "");
    if (have_gpu)
        fprintf(f, "this machine: %.1f GiB GPU free (CUDA), %.1f GiB host available (MemAvailable / cgroup)\n",
                gib((double)gpu_free), gib((double)host_avail));
    else
        fprintf(f, "this machine: no GPU (fits: none), %.1f GiB host available (MemAvailable / cgroup)\n",
                gib((double)host_avail));
    const bool ada = in->knobs.optimizer == ZERO_OPTIM_ADAFACTOR;
    fprintf(f, "\nGPU GiB per rank: params (16-bit + gathered peak + fp32 views), grads, optim (fp32 master + %s), "
               "comm, act(ivations), work(space: cuBLASLt, pointer arrays, %.1f GiB CUDA context allowance)\n",
            ada ? (in->knobs.adafactor.has_beta1 ? "Adafactor with beta1: factored second moments, m, plan scratch"
                                                 : "Adafactor, beta1 None: factored second moments, plan scratch")
                : "Adam m, v",
            gib((double)PLANNER_CONTEXT_BYTES));
    if (ada)
        fprintf(f, "Adafactor's CPU step has not been timed: s/step uses the CPU AdamW's measured rate for the offloaded "
                   "parameters\n");
    fprintf(f, "host GiB per node: the engine's buffers (pinned / pageable); s/step predicted from measured rates%s\n\n",
            in->forward_only ? " (n/a: an evaluation-only job, no optimizer state; the offload ratio only moves "
                               "16-bit weights with offload_param)" : "");
    fprintf(f, "%-52s %7s %7s %7s %6s %7s %6s %8s | %8s %8s | %7s | %s\n", "plan", "params", "grads", "optim", "comm",
            "act", "work", "GPU", "pinned", "pageable", "s/step", "fits");
    for (int i = 0; i < n; i++) {
        const PlanRow* r = &rows[i];
        char name[96], st[16];
        planner_row_name(r, name, sizeof name);
        if (r->step_s >= 0) snprintf(st, sizeof st, "%.3f", r->step_s);
        else snprintf(st, sizeof st, "n/a");
        fprintf(f, "%-52s %7.2f %7.2f %7.2f %6.2f %7.2f %6.2f %8.2f | %8.2f %8.2f | %7s | %s%s%s\n", name,
                gib((double)r->g_params), gib((double)r->g_grads), gib((double)r->g_optim), gib((double)r->g_comm),
                gib((double)r->g_act), gib((double)r->g_work), gib((double)r->g_total), gib((double)r->h_pinned),
                gib((double)r->h_pageable), st, r->fits ? "yes" : "no", r->fits || !r->why[0] ? "" : ": ",
                r->fits ? "" : r->why);
    }
    if (world > 1 && in->num_nodes == 1)
        fprintf(f, "\nnote: %d ranks: the collectives' time from the NCCL bandwidth measured between two H100s of one "
                   "host (NVLink; docs/multi_gpu.md), overlapping the compute\n", world);
    if (ada && world > 1)
        for (int i = 0; i < n; i++)
            if (rows[i].stage > 0 && !rows[i].off_opt) {
                fprintf(f, "note: Adafactor at stages 1-3 on %d ranks: 2 fp64 all-reduces per step of %.2f MiB together "
                           "(the row/column sums, sum p^2 and sum u^2 of the tensors the partitions cut; the cut is the "
                           "same at every stage), 2 more for the CPU-stepped ones with offload_optimizer (the same "
                           "bytes in all), not overlapped, added to s/step; a rank holding a slice of a matrix keeps its "
                           "whole row + column statistics (in optim)\n",
                        world, rows[i].ada_reduce_bytes / 1048576.0);
                break;
            }
    if (in->num_nodes > 1)
        fprintf(f, "\nnote: %d nodes: no bandwidth between hosts has been measured, so no step time is predicted\n",
                in->num_nodes);
    // pin_memory false: the pageable column is the creation-time split; the engine pins part of it while training
    size_t reg = 0;
    for (int i = 0; i < n; i++) reg = T5_MAX(reg, rows[i].h_register);
    if (reg > 0)
        fprintf(f, "\nnote: pin_memory false: the pageable column is what the engine starts with; while training runs it "
                   "registers (pins) up to %.2f GiB of it with CUDA in the background (the "
                   "master, gradients and 16-bit weights its copies touch; T5TRAIN_PAGEABLE_REGISTER=0 keeps everything "
                   "pageable)\n",
                gib((double)reg));
    DsEstimateRow ds[8];
    const size_t P = planner_ds_total_params(&in->model), LL = planner_ds_largest_layer(&in->model);
    fprintf(f, "\nDeepSpeed's estimator for the same model (estimate_zero3/zero2_model_states_mem_needs_all_cold, "
               "additional_buffer_factor 1.5; model states only, no activations):\n");
    fprintf(f, "SW: Model with %dM total params, %dM largest layer params.\n", (int)(P / 1000000),
            (int)(LL / 1000000));
    fprintf(f, "ZeRO-3:  per CPU  |  per GPU |   Options\n");
    int k = planner_ds_zero3(&in->model, in->gpus_per_node, in->num_nodes, ds);
    for (int i = 0; i < k; i++)
        fprintf(f, "       %7.2fGB | %6.2fGB | %s\n", ds[i].cpu_bytes / 1073741824.0, ds[i].gpu_bytes / 1073741824.0,
                ds[i].options);
    fprintf(f, "ZeRO-2:  per CPU  |  per GPU |   Options\n");
    k = planner_ds_zero2(&in->model, in->gpus_per_node, in->num_nodes, ds);
    for (int i = 0; i < k; i++)
        fprintf(f, "       %7.2fGB | %6.2fGB | %s\n", ds[i].cpu_bytes / 1073741824.0, ds[i].gpu_bytes / 1073741824.0,
                ds[i].options);
}
