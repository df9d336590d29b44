/*
 * part_step.c: the partitioned engine's optimizer step (REFERENCE 4.4, 4.5): hands the GPU sub-groups to one fused
 * launch on the compute stream and the CPU sub-groups to the engine's optimizer thread, and publishes each unit's new
 * weights. The arithmetic sits below, in the optimizer files: step.c (AdamW: the fused GPU plan, DeepSpeed's CPU
 * AdamW) and step_adafactor.c (transformers' Adafactor); they never call back into the partition.
 *
 * GPU sub-groups: their 16-bit weights are written straight into the unit's partition (stage 3) or resident copy
 * (stages 1/2); fp32 runs copy the master there; the fp32 views follow. CPU sub-groups: the thread steps them group
 * by group, in unit order, the 16-bit output written into host memory in the same pass; after each unit it sends
 * the unit's weights (and fp32 views) to the GPU on s_copy and marks it updated, so the next forward starts on the
 * first units while the CPU still works on the last ones. The overflow check and the global norm were taken on the
 * GPU before the gradients left (reduce.c), so the CPU does no extra pass over them.
 */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "../base/check.h"
#include "../base/common.h"
#include "part.h"
#include "step.h"
#include "step_adafactor.h"

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static void* opt_thread(void* arg) {
    ZeroPart* P = arg;
    CUDA_CHECK(cudaSetDevice(P->device));
    for (;;) {
        pthread_mutex_lock(&P->mu);
        while (P->opt_done == P->opt_step && !P->quit) pthread_cond_wait(&P->cv, &P->mu);
        if (P->quit) {
            pthread_mutex_unlock(&P->mu);
            break;
        }
        const int64_t step = P->opt_done + 1;
        ZeroStepArgs a = P->pending;
        pthread_mutex_unlock(&P->mu);
        CpuAdam ca = P->cpu_adam;
        ca.step = a.step;
        ca.bias_correction1 = a.bias_correction1;
        ca.bias_correction2 = a.bias_correction2;
        // the gradients of the CPU units are on the host once s_grad has passed ev_grads_done (pinned: the DMA
        // wrote them; pageable: the main thread drained its staging ring in zp_grad_norm / zp_optimizer_step
        // before opt_step++, so the ring's host copies happened before this thread took the step)
        CUDA_CHECK(cudaEventSynchronize(P->ev_grads_done));
        const double t0 = now_s();
        zp_nvme_step_begin(P);  // offload_optimizer nvme: m, v swapped in and out around each unit (part_nvme.c)
        // sub-group by sub-group (DeepSpeed's step granularity), and inside a group unit by unit: each unit's new
        // weights leave for the GPU as soon as its step is done, so the next forward's first units arrive first
        for (int g = 0; g < P->L.num_groups; g++) {
            if (!P->L.group_cpu[g]) continue;
            for (int u = P->L.group_first[g]; u < P->L.group_first[g] + P->L.group_count[g]; u++) {
                zp_nvme_unit_in(P, u);
                if (P->ada) zp_ada_cpu_unit(P, u, &a);  // Adafactor (step_adafactor.c)
                else zstep_adamw_cpu_unit(P, u, &a, &ca);
                zp_nvme_unit_out(P, u);
                zp_publish_unit_host(P, u, P->ring_opt);  // this thread's own staging ring (pageable buffers)
                pthread_mutex_lock(&P->mu);
                P->u[u].updated_step = step;
                pthread_cond_broadcast(&P->cv);
                pthread_mutex_unlock(&P->mu);
            }
        }
        zp_nvme_step_end(P);
        const double t1 = now_s();
        pthread_mutex_lock(&P->mu);
        P->st.cpu_adam_s = t1 - t0;
        P->opt_done = step;
        pthread_cond_broadcast(&P->cv);
        pthread_mutex_unlock(&P->mu);
    }
    return NULL;
}

void zp_step_init(ZeroPart* P) {
    pthread_mutex_init(&P->mu, NULL);
    pthread_cond_init(&P->cv, NULL);
    cpu_adam_init(&P->cpu_adam, P->o.beta1, P->o.beta2, P->o.eps, P->o.adamw_mode);
    // evaluation only (no_optimizer_state): no plan over m, v and no CPU optimizer thread; zp_optimizer_wait and
    // zp_wait_unit_updated find nothing to wait for (no step is ever handed on)
    if (P->o.no_optimizer_state) return;
    if (!P->ada) P->gpu_plan = zstep_adamw_plan(P, &P->gpu_plan_tensors);  // Adafactor: step_adafactor.c's plan
    else zp_ada_device_init(P);
    if (P->L.cpu_numel > 0) {
        if (pthread_create(&P->thread, NULL, opt_thread, P) != 0)
            t5_die(T5_EXIT_FAILURE, "cannot start the CPU optimizer thread");
        P->thread_started = true;
    }
}

void zp_step_free(ZeroPart* P) {
    if (P->thread_started) {
        pthread_mutex_lock(&P->mu);
        P->quit = true;
        pthread_cond_broadcast(&P->cv);
        pthread_mutex_unlock(&P->mu);
        pthread_join(P->thread, NULL);
        P->thread_started = false;
    }
    if (P->gpu_plan) adamw_plan_free(P->gpu_plan);
    P->gpu_plan = NULL;
}

void zp_optimizer_step(ZeroPart* P, const ZeroStepArgs* a, cudaStream_t s) {
    zp_optimizer_wait(P);  // one step in flight at a time
    bool gpu_stepped = P->ada && zp_ada_gpu_step(P, a, s);  // Adafactor's GPU units (no AdamW plan then)
    if (P->gpu_plan) {
        zstep_adamw_gpu(P, P->gpu_plan, a, s);
        gpu_stepped = true;
    }
    if (gpu_stepped) {  // the GPU units' new masters: the fp32 working copy of fp32 runs, the fp32 views
        for (int u = 0; u < P->num_units; u++) {
            ZpUnit* U = &P->u[u];
            if (U->opt_cpu) continue;
            if (P->X == DT_F32)
                CUDA_CHECK(cudaMemcpyAsync(zp_unit_x_dst(P, u), U->master, (P->L.hi[u] - P->L.lo[u]) * 4,
                                           cudaMemcpyDeviceToDevice, s));
            zp_publish_views(P, u, s, NULL);  // a GPU unit's master is on the device
        }
    }
    P->wver++;  // several ranks: every unit's gathered copy and views are stale until gathered again
    CUDA_CHECK(cudaEventRecord(P->ev_gpu_step, s));
    CUDA_CHECK(cudaStreamWaitEvent(P->s_gather, P->ev_gpu_step, 0));
    CUDA_CHECK(cudaStreamWaitEvent(P->s_copy, P->ev_gpu_step, 0));
    for (int u = 0; u < P->num_units; u++)
        if (P->u[u].wfull && P->o.stage == 3) P->u[u].stale = true;
    // several ranks with offload_optimizer: the CPU-stepped Adafactor slices' sums reduced before the thread applies
    if (P->ada) zp_ada_cpu_sums(P, a, s);
    if (P->thread_started) {
        // pageable host gradients: every D2H of ring_main has landed before the thread may read them (zp_grad_norm
        // drained it; this keeps the rule local). The mutex below orders these host writes before its reads.
        zp_ring_drain(P->ring_main);
        pthread_mutex_lock(&P->mu);
        P->pending = *a;
        P->opt_step++;
        pthread_cond_broadcast(&P->cv);
        pthread_mutex_unlock(&P->mu);
    }
}

void zp_optimizer_wait(ZeroPart* P) {
    if (!P->thread_started) return;
    pthread_mutex_lock(&P->mu);
    while (P->opt_done < P->opt_step) pthread_cond_wait(&P->cv, &P->mu);
    pthread_mutex_unlock(&P->mu);
    CUDA_CHECK(cudaStreamSynchronize(P->s_copy));
}

void zp_optimizer_skip(ZeroPart* P) {
    if (!P->share_gw) return;
    zp_optimizer_wait(P);
    CUDA_CHECK(cudaEventSynchronize(P->ev_grads_done));  // every gradient copy into the shared buffers landed
    zp_ring_drain(P->ring_main);  // ... including those through the staging ring (zp_grad_norm drained it already)
    zp_round_host_weights(P);
}

float zp_optimizer_ada_lr(ZeroPart* P, int tensor) {
    const int u = zp_ada_tensor_unit(P, tensor);
    if (P->u[u].opt_cpu) {
        // a CPU unit: its step of the last handed-on step is done once the thread marked the unit updated
        pthread_mutex_lock(&P->mu);
        while (P->u[u].updated_step < P->opt_step) pthread_cond_wait(&P->cv, &P->mu);
        pthread_mutex_unlock(&P->mu);
    }
    return zp_ada_last_lr(P, tensor);
}
