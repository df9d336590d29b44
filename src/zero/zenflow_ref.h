/*
 * zenflow_ref.h: a CPU reference of ZenFlow's optimizer over one fp32 tensor, one micro-step at a time
 * (DeepSpeed runtime/zenflow/zenflow_stage_1_and_2.py, ops/adam/zenflow_torch_adam.py ZenFlowSelectiveAdamW,
 * ops/adam/zenflow_cpu_adam.py; docs/zero.md "ZenFlow"). It is what a GPU engine is to be tested against; it
 * runs no engine itself.
 *
 * The state DeepSpeed keeps for a tensor of torch shape (R, C) (a 1-D tensor of n elements: R = 1, C = n):
 *   work    (R, C)  the working weights the model runs with (DeepSpeed's 16-bit GPU copy; fp32 here)
 *   master  (R, C)  the CPU AdamW's fp32 master, with its m, v (R, C)
 *   acc     (R, C)  every element's gradient summed since the last update boundary (host memory)
 *   sel     (k)     the selected columns, ascending (1-D tensors: every element)
 *   sel_m, sel_v (k, R)  the selective AdamW's state, column sel[j] at [j*R .. j*R+R)
 * One micro-step with gradient g (R, C) (as the engine hands it over: DeepSpeed divides each micro-step's loss
 * by update_interval when it is a number, so acc is then the interval's mean) and the step's plan:
 *   1. sync_master: master = work (sync_fp32_param_from_gpu)
 *   2. select: sel_m = sel_v = 0 (clear_selected_mv; the selective step count goes on); 2-D: sel = the top k
 *      columns of g (zenflow_select.h)
 *   3. acc += g, every element, the selected columns too
 *   4. selective: (auto update_interval, 2-D) report sum|g| and sum|g[:, sel]| to the schedule; then, if not an
 *      update boundary: AdamW on work[:, sel] with g[:, sel] (step count = selective steps so far);
 *      at an update boundary: keep work[:, sel] aside (temp_copy_param)
 *   5. update: the CPU AdamW on master with acc, step id n = micro-step + 1; work = master; acc = 0; then, if
 *      selective: work[:, sel] = the values kept aside (the CPU's result for the selected columns is dropped; its
 *      m, v and master keep it) and AdamW on work[:, sel] with g[:, sel]
 * Both AdamWs use cpu_adam.h's arithmetic (DeepSpeed's CPU Adam; the selective one on the GPU is torch's AdamW,
 * equal up to rounding) with the same lr and weight decay. Not modelled: gradient clipping and the fp16 loss
 * scale (DeepSpeed applies them to the CPU update only), 16-bit working weights (DeepSpeed's selective AdamW
 * keeps its m, v and step count in the working dtype), overlap_step (the CPU result one interval late).
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "cpu_adam.h"
#include "zenflow_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t R, C;      // torch shape (R, C); 1-D: R = 1, C = n
    bool is_1d;
    int64_t k;         // selected columns (1-D: C)
    float* work;       // (R, C)
    float* master;     // (R, C)
    float* m;          // (R, C) CPU AdamW
    float* v;          // (R, C)
    float* acc;        // (R, C)
    int64_t* sel;      // (k)
    float* sel_m;      // (k, R)
    float* sel_v;      // (k, R)
    float* sel_p;      // (k, R) scratch: work[:, sel]
    float* sel_g;      // (k, R) scratch: g[:, sel]
    float* kept;       // (k, R) temp_selected_param
    float* importance; // (C) scratch
    CpuAdam cpu;       // the CPU AdamW (step id = micro-step + 1)
    CpuAdam selective; // the selective AdamW (step = its own count)
    int64_t selective_steps;
} ZenflowRefTensor;

// A tensor of torch shape (R, C) (is_1d: C elements, R must be 1) starting from w0 (R, C) fp32 as both work and
// master, zero optimizer state. k: zenflow_select_count(C, topk_ratio, stage) for 2-D tensors (ignored for 1-D).
void zenflow_ref_init(ZenflowRefTensor* t, int64_t R, int64_t C, bool is_1d, int64_t k, const float* w0,
                      float beta1, float beta2, float eps);
void zenflow_ref_free(ZenflowRefTensor* t);

// One micro-step of this tensor (see above). grad: (R, C) fp32. sched / t2d: the schedule and this tensor's
// index among the 2-D tensors, for update_interval "auto" (sched may be NULL otherwise; 1-D tensors report
// nothing). lr, weight_decay: this step's, for both optimizers.
void zenflow_ref_step(ZenflowRefTensor* t, const ZenflowStepPlan* p, const float* grad, float lr, float weight_decay,
                      ZenflowSched* sched, int t2d);

#ifdef __cplusplus
}
#endif
