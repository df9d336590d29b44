/*
 * engine.c: the trainer's door (engine.h): the parameters' engine (zero.c; stages 1-3: the partition), stage 0's
 * optimizer (step0.c), the loss scaler, Adam's step state, and the device scalars of one update's norm. The
 * checkpoint blobs: engine_state.c.
 */
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../cuda/adafactor.cuh"
#include "../../cuda/global_norm.cuh"
#include "../../model/t5.h"
#include "../../model/t5_weights.h"
#include "../base/check.h"
#include "../base/common.h"
#include "../base/safetensors.h"
#include "cpu_adafactor.h"
#include "zenflow.h"

// Adafactor's state floats of the whole model in the checkpoint layout (step0.h), per tensor of o->tensors
static size_t adafactor_floats(const ZeroOptions* o) {
    size_t total = 0;
    for (int i = 0; i < o->num_tensors; i++) {
        const ZeroTensor* p = &o->tensors[i];
        const bool fac = p->rows > 0 && p->cols > 0;
        total += cpu_adafactor_state_floats(fac ? (size_t)p->rows : 1, fac ? (size_t)p->cols : p->numel, fac,
                                            o->adafactor.has_beta1);
    }
    return total;
}

// "ZeRO stage N: ..." once the partitioned engine has its buffers
static void print_plan(const Engine* E) {
    const ZeroOptions* zo = &E->o.zero;
    ZeroStats zs;
    zero_stats(E->Z, &zs);
    char nvme[1200] = "";  // offload_optimizer nvme
    if (zs.nvme_file_bytes)
        snprintf(nvme, sizeof nvme, "; Adam m, v of the CPU units in a %.2f GiB swap file under %s (%.2f GiB of host "
                 "buffers)", (double)zs.nvme_file_bytes / (1 << 30), zo->nvme_path, (double)zs.nvme_pool_bytes / (1 << 30));
    char reg[256] = "";  // pin_memory false: the pageable buffers the GPU copies touch, pinned while the run goes on
    if (zs.host_register_on)
        snprintf(reg, sizeof reg, "; %.2f GiB of the pageable host buffers to be registered with CUDA in the "
                 "background (T5TRAIN_PAGEABLE_REGISTER=0: the staging ring alone)",
                 (double)zs.host_register_total / (1 << 30));
    printf("ZeRO stage %d: optimizer state %s, 16-bit parameters %s; host %.2f GiB (%.2f GiB pinned), GPU %.2f "
           "GiB resident%s%s%s; allocated in %.1f s\n",
           zo->stage,
           zo->no_optimizer_state ? "none (evaluation only)"
           : !zo->offload_optimizer ? "on the GPU" : zo->ratio >= 1.0 ? "on the CPU" : "split CPU/GPU by ratio",
           zo->offload_param ? "offloaded to the CPU" : zo->stage == 3 ? "partitioned on the GPU" : "on the GPU",
           (double)zs.host_bytes / (1 << 30), (double)zs.host_pinned_bytes / (1 << 30), (double)zs.gpu_bytes / (1 << 30),
           zs.host_grads_share_weights ? "; offloaded gradients share the 16-bit weights' host buffer" : "", nvme, reg,
           zs.init_s);
    fflush(stdout);
}

// Training: the norm's device scalars, Adam's step state, and stage 0's optimizer (its state on the GPU; stages 1-3:
// the partition holds it)
static void optimizer_create(Engine* E) {
    CUDA_CHECK(cudaMalloc((void**)&E->d_norm2, sizeof(float)));
    CUDA_CHECK(cudaMalloc((void**)&E->d_overflow, sizeof(int)));
    CUDA_CHECK(cudaMalloc((void**)&E->d_inv_scale, sizeof(float)));
    CUDA_CHECK(cudaMalloc((void**)&E->d_norm, sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&E->h_norm2, sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&E->h_overflow, sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&E->h_inv_scale, sizeof(float)));
    const ZeroOptions* zo = &E->o.zero;
    cpu_adam_init(&E->sch.adam, zo->beta1, zo->beta2, zo->eps, zo->adamw_mode);
    if (E->part && E->ada && zero_adafactor_state_floats(E->Z) != E->ada_floats)
        t5_die(T5_EXIT_FAILURE, "internal: the ZeRO engine's Adafactor state has %zu floats, the checkpoint layout %zu",
               zero_adafactor_state_floats(E->Z), E->ada_floats);
    if (!E->part) E->s0 = step0_create(E->Z, zo, E->ada_floats);
}

int engine_create(Engine** out, const EngineOptions* o, char* err, size_t errlen) {
    *out = NULL;
    Engine* E = calloc_check(1, sizeof *E);
    E->o = *o;
    char serr[512];
    if (o->use_scaler && loss_scaler_init(&E->scaler, &o->scaler, serr, sizeof serr)) {
        snprintf(err, errlen, "deepspeed.fp16: %s", serr);
        free(E);
        return T5_EXIT_USAGE;
    }
    const ParamTable* T = o->T;
    size_t* numel = malloc_check((size_t)T->num_units * sizeof(size_t));
    const char** names = malloc_check((size_t)T->num_units * sizeof(char*));
    for (int u = 0; u < T->num_units; u++) {
        numel[u] = T->units[u].numel;
        names[u] = T->units[u].name;
    }
    t5_model_zero_describe(T, &E->o.zero);  // the tensors and traces, kept for stage 0's optimizer
    // evaluation only (stages 1-3): the working partitions and the views; no optimizer state, gradient buffers or
    // 16-bit run's fp32 master (model/zero.h no_optimizer_state; ZeRO inference, issue 29 item 3). Stage 0 keeps its
    // resident buffers.
    E->o.zero.no_optimizer_state = !o->train && o->zero.stage > 0;
    if (o->train && o->zenflow) {
        // ZenFlow sums every micro-step's gradient on the host in fp32 until its update boundary (DeepSpeed's
        // accumulation over update_interval micro-steps)
        E->o.zero.accum_dtype = DT_F32;
        E->o.zero.zenflow = true;  // the estimate counts the selective state (estimate.c gpu_zenflow)
        E->o.zero.zenflow_topk_ratio = o->zenflow_opts.topk_ratio;
        E->o.zero.grad_accum_steps = (int)T5_MAX(o->zenflow_opts.update_interval, (int64_t)1);
    }
    // fp32 / bf16 on several ranks: 1 / world in the backward's seed gradient, a plain-sum reduction (zero.h)
    E->o.zero.world_in_backward = E->o.zero.world > 1 && !o->use_scaler && !(o->train && o->zenflow);
    E->Z = zero_create_opts(&E->o.zero, T->num_units, numel, names, err, errlen);
    free(numel);
    free(names);
    if (!E->Z) {
        t5_model_zero_free(&E->o.zero);
        free(E);
        return T5_EXIT_FAILURE;
    }
    E->part = zero_owns_optimizer(E->Z);
    E->numel = zero_flat_numel(E->Z);
    E->state_n = E->part ? zero_partition_numel(E->Z) : E->numel;
    E->ada = o->zero.optimizer == ZERO_OPTIM_ADAFACTOR;
    if (E->ada) {
        E->ada_whole_floats = adafactor_floats(&E->o.zero);
        E->ada_floats = engine_ada_rank_floats(E);  // several ranks at stages 1-3: this rank's slices (recut.h)
    }
    if (o->zero.stage > 0) print_plan(E);
    if (o->train) optimizer_create(E);
    if (o->train && o->zenflow) {
        const int rc = zenflow_engine_create(E->Z, &E->o.zero, &o->zenflow_opts, o->zenflow_steps_per_epoch, err,
                                             errlen);
        if (rc) {
            engine_destroy(E);
            return rc;
        }
        E->zf = true;
        char line[512];
        zenflow_engine_describe(E->Z, line, sizeof line);
        printf("%s\n", line);
        fflush(stdout);
    }
    *out = E;
    return 0;
}

ZeroEngine* engine_params(Engine* E) { return E->Z; }

int engine_load_weights(Engine* E, const char* path, uint64_t seed, cudaStream_t s, char* err, size_t errlen) {
    zero_optimizer_wait(E->Z);
    const int rc = path ? t5_weights_load(E->Z, E->o.T, path, s, err, errlen)
                        : t5_weights_init_random(E->Z, E->o.T, seed, s, err, errlen);
    if (rc) return -1;
    zero_sync_working(E->Z, s);
    if (E->zf) zenflow_engine_weights_loaded(E->Z);  // W = round(master) and the views = master again
    return 0;
}

int engine_save_weights(Engine* E, const char* dir, bool write, DType dtype, cudaStream_t s, char* err, size_t errlen) {
    // an evaluation-only engine has no fp32 master to gather (no_optimizer_state); the trainer saves only when it trains
    if (E->o.zero.no_optimizer_state)
        return t5_set_err(err, errlen, "internal: saving weights from an evaluation-only ZeRO stage %d engine (it keeps "
                          "no fp32 master; only a run with --do_train saves)", E->o.zero.stage);
    // ZenFlow: the selected columns' latest values live in the working weights only; the file takes them there, the
    // master stays as it is (a checkpoint must not change the run: docs/zero.md "ZenFlow's checkpoint")
    if (E->zf) zenflow_engine_save_begin(E->Z, s);
    zero_gather_masters(E->Z, write, s);
    const int rc = write ? t5_weights_save(E->Z, E->o.T, dir, dtype, SAFETENSORS_DEFAULT_SHARD_BYTES, s, err, errlen)
                         : 0;
    zero_gather_masters_free(E->Z);
    if (E->zf) zenflow_engine_save_end(E->Z, s);
    return rc;
}

// the scale the next forward's dlogits and this update's clipping use
static float loss_scale(const Engine* E) { return E->o.use_scaler ? (float)E->scaler.cur_scale : 1.0f; }

float engine_micro_begin(Engine* E, int micro, int n_micro, cudaStream_t s) {
    if (E->zf) {  // every micro-step is a ZenFlow step (n_micro is 1); the backward divides by update_interval
        if (micro != 0 || n_micro != 1)
            t5_die(T5_EXIT_FAILURE, "internal: zenflow with micro-batch %d of %d (gradient accumulation is its own)",
                   micro, n_micro);
        const float k = zenflow_engine_begin(E->Z, s);
        zero_begin_grads(E->Z, s);
        E->n_micro = 1;
        return loss_scale(E) / k;
    }
    zero_set_micro_step(E->Z, micro, n_micro);
    zero_begin_grads(E->Z, s);
    E->n_micro = n_micro;
    // world_in_backward: the rank's share of the data-parallel mean, in the seed gradient as accumulation's share
    const int w = E->o.zero.world_in_backward ? E->o.zero.world : 1;
    return loss_scale(E) / (float)(n_micro * w);
}

void engine_micro_end(Engine* E, int micro, cudaStream_t s) {
    if (E->s0) step0_accumulate(E->s0, E->Z, micro, s);  // stages 1-3 accumulated at each grad_ready
}

void engine_grad_norm(Engine* E, bool inject_inf, cudaStream_t s) {
    if (E->s0) {
        step0_grad_norm(E->s0, E->Z, E->n_micro, inject_inf, E->d_norm2, E->d_overflow, s);
        return;
    }
    // stages 1-3: the engine accumulated the partitions and took their squared norm on the GPU
    zero_grad_norm(E->Z, E->d_norm2, E->d_overflow, s);
    if (inject_inf) CUDA_CHECK(cudaMemsetAsync(E->d_overflow, 1, sizeof(int), s));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// the update with Adam's next step state: stage 0's plan, or the engine's GPU launch + CPU thread
static void apply_update(Engine* E, double lr, cudaStream_t s) {
    E->sch.applied_steps++;
    cpu_adam_begin_step(&E->sch.adam, E->sch.applied_steps, E->o.zero.beta1, E->o.zero.beta2);
    const ZeroStepArgs za = {.lr = (float)lr, .step = E->sch.applied_steps,
                             .bias_correction1 = E->sch.adam.bias_correction1,
                             .bias_correction2 = E->sch.adam.bias_correction2, .d_inv_scale = E->d_inv_scale,
                             .inv_scale = *E->h_inv_scale, .lr64 = lr};
    if (E->s0) step0_step(E->s0, &E->o.zero, &za, s);
    else zero_optimizer_step(E->Z, &za, s);
}

// ZenFlow's micro-step (zenflow.h): at an update boundary the CPU AdamW with step id n (the micro-step count, not the
// CPU updates), W[:, sel] kept aside around it; the selective AdamW on W[:, sel] after. The LR schedule and
// applied_steps advance every micro-step (DeepSpeed steps its scheduler every micro-step with ZenFlow).
static void apply_zenflow(Engine* E, double lr, float scale, cudaStream_t s) {
    E->sch.applied_steps++;
    const ZenflowStepPlan p = zenflow_engine_plan(E->Z);
    if (p.update) {
        zenflow_engine_keep(E->Z, s);
        cpu_adam_begin_step(&E->sch.adam, p.cpu_step, E->o.zero.beta1, E->o.zero.beta2);
        const ZeroStepArgs za = {.lr = (float)lr, .step = p.cpu_step, .bias_correction1 = E->sch.adam.bias_correction1,
                                 .bias_correction2 = E->sch.adam.bias_correction2, .d_inv_scale = E->d_inv_scale,
                                 .inv_scale = *E->h_inv_scale, .lr64 = lr};
        zero_optimizer_step(E->Z, &za, s);
    }
    zenflow_engine_finish(E->Z, (float)lr, scale, s);
}

EngineStepResult engine_step(Engine* E, double lr, cudaStream_t s) {
    EngineStepResult r = {0};
    E->last_lr = lr;
    const float scale = loss_scale(E);
    global_norm_clip_scale(E->d_norm2, E->d_overflow, scale, (float)E->o.clip, E->d_inv_scale, E->d_norm, s);
    CUDA_CHECK(cudaMemcpyAsync(E->h_norm2, E->d_norm2, sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(E->h_overflow, E->d_overflow, sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(E->h_inv_scale, E->d_inv_scale, sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    r.synced_s = now_s();
    if (E->o.profile) {
        ZeroStats zs;
        zero_stats(E->Z, &zs);
        r.cpu_optimizer_s = zs.cpu_adam_s;
        r.h2d_bytes = zs.h2d_bytes;
        r.d2h_bytes = zs.d2h_bytes;
    }
    const float norm = sqrtf(*E->h_norm2);
    const bool overflow = *E->h_overflow != 0 || !isfinite(norm);
    // ZenFlow: the scaler counts update boundaries (DeepSpeed updates it in the optimizer's step, at its gradient
    // accumulation boundary), and overflows, which drop the accumulation; so the gradient accumulated between two
    // update boundaries always carries one scale
    const bool zf_hold = E->zf && !overflow && !zenflow_engine_plan(E->Z).update;
    if (E->o.use_scaler && zf_hold) {
        r.loss_scale = E->scaler.cur_scale;
    } else if (E->o.use_scaler) {
        LossScalerUpdate u = loss_scaler_update(&E->scaler, overflow);
        if (u.event == LOSS_SCALER_AT_MIN) t5_die(T5_EXIT_FAILURE, "%s", LOSS_SCALER_MIN_SCALE_MSG);
        loss_scaler_format_overflow(r.overflow_line, sizeof r.overflow_line, &u, 0);
        r.loss_scale = u.new_scale;
    } else if (overflow) {
        r.diverged = true;
        r.norm = NAN;
        return r;
    }
    if (overflow) {
        if (E->zf) zenflow_engine_skip(E->Z);  // no selective step either; the accumulation starts again
        // restores what the gradient path wrote over (the 16-bit host weights the offloaded gradients shared)
        zero_optimizer_skip(E->Z, s);
        r.skipped = true;
        r.norm = NAN;
        return r;
    }
    if (E->zf) apply_zenflow(E, lr, scale, s);
    else apply_update(E, lr, s);
    r.norm = (double)norm / (double)scale;
    return r;
}

bool engine_eval_begin(Engine* E, cudaStream_t s) {
    zero_optimizer_wait(E->Z);
    // test hook: stage 3 evaluates gathering on demand, as when the units do not fit (set alike on every rank)
    const char* no_hold = getenv("T5TRAIN_EVAL_NO_HOLD");
    if (zero_stage(E->Z) == 3 && no_hold && strcmp(no_hold, "1") == 0) return false;
    return zero_hold_begin(E->Z, s);
}

void engine_eval_end(Engine* E, bool held, cudaStream_t s) {
    if (held) zero_hold_end(E->Z, s);
}

// The learning rate the last update used (EngineStats.lr)
static double used_lr(Engine* E, cudaStream_t s) {
    const ZeroAdafactor* o = &E->o.zero.adafactor;
    if (!E->ada || !o->relative_step) return E->last_lr;
    // as HF's AdafactorSchedule: tensor 0's _get_lr at the last applied step (with scale_parameter: what its step
    // used, which waits for that step; without: the relative step itself), 0 before any applied step
    if (E->sch.applied_steps == 0) return 0.0;
    if (!o->scale_parameter) {
        const AdafactorStepArgs fa = {.step = E->sch.applied_steps, .relative_step = true, .warmup_init = o->warmup_init};
        return adafactor_rel_step(&fa);
    }
    if (E->part) return (double)zero_adafactor_last_lr(E->Z, 0);
    return step0_adafactor_lr(E->s0, s);
}

// EngineStats.line (stages 1-3): gathers, trace mismatches, copies, the CPU optimizer's last time, the run-time buffers
static void stats_line(const ZeroStats* zs, char* line, size_t len) {
    char staged[96] = "", reg[320] = "", nvme[96] = "";
    // pageable host buffers (pin_memory false): the bytes copied through the engine's pinned staging ring
    if (zs->staged_bytes > 0)
        snprintf(staged, sizeof staged, " (%.2f GiB through the pinned staging ring)", zs->staged_bytes / (1 << 30));
    // and how much of them the background registration had pinned (their copies then skip the ring), and when
    if (zs->host_register_on) {
        const int ph = zs->host_register_phase;
        char when[80] = "still registering";
        if (zs->host_register_s >= 0)
            snprintf(when, sizeof when, "%s %.1f s after the engine's start",
                     ph == 2 ? "done" : ph == 3 ? "stopped by a failure" : "stopped", zs->host_register_s);
        snprintf(reg, sizeof reg, "; pageable host memory registered in the background: %.3f of %.3f GiB, %s; "
                 "%.3f GiB copied directly", (double)zs->host_registered_bytes / (1 << 30),
                 (double)zs->host_register_total / (1 << 30), when, zs->direct_bytes / (1 << 30));
    }
    if (zs->nvme_file_bytes)  // offload_optimizer nvme
        snprintf(nvme, sizeof nvme, "; NVMe %.3f GiB read, %.3f GiB written", zs->nvme_read_bytes / (1 << 30),
                 zs->nvme_written_bytes / (1 << 30));
    snprintf(line, len,
             "ZeRO engine: %lld gathers (%lld prefetched), %lld releases, trace mismatches %lld, gradient "
             "order mismatches %lld; H2D %.2f GiB, "
             "D2H %.2f GiB%s%s; last CPU AdamW %.3f s; unit buffers %.2f GiB gathered + %.2f GiB gradients; "
             "stream-ordered pool high water %.2f GiB used, %.2f GiB reserved%s",
             (long long)zs->gathers, (long long)zs->prefetches, (long long)zs->releases,
             (long long)zs->trace_mismatches, (long long)zs->grad_order_mismatches, zs->h2d_bytes / (1 << 30),
             zs->d2h_bytes / (1 << 30), staged, reg, zs->cpu_adam_s, (double)zs->unit_buf_gathered / (1 << 30),
             (double)zs->unit_buf_grads / (1 << 30), (double)zs->pool_used_high / (1 << 30),
             (double)zs->pool_reserved_high / (1 << 30), nvme);
}

void engine_stats(Engine* E, bool settle, cudaStream_t s, EngineStats* out) {
    if (settle) zero_optimizer_wait(E->Z);
    memset(out, 0, sizeof *out);
    out->numel = E->numel;
    out->applied_steps = E->sch.applied_steps;
    out->lr = used_lr(E, s);
    // the counters only once the CPU optimizer is idle: its thread writes them (cpu_adam_s under the engine's lock,
    // the NVMe and staging bytes) while an update is under way, and every logged step calls this without settle
    if (settle && E->o.zero.stage > 0) {
        ZeroStats zs;
        zero_stats(E->Z, &zs);
        stats_line(&zs, out->line, sizeof out->line);
    }
}

void engine_destroy(Engine* E) {
    if (!E) return;
    zenflow_engine_destroy(E->Z);  // a no-op without ZenFlow
    step0_destroy(E->s0);
    zero_destroy(E->Z);
    t5_model_zero_free(&E->o.zero);
    cudaFree(E->d_norm2);
    cudaFree(E->d_overflow);
    cudaFree(E->d_inv_scale);
    cudaFree(E->d_norm);
    cudaFreeHost(E->h_norm2);
    cudaFreeHost(E->h_overflow);
    cudaFreeHost(E->h_inv_scale);
    free(E);
}
