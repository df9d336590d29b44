/*
 * zenflow_sched.h: ZenFlow's options and its schedule of selection and update boundaries, one micro-step at a
 * time (DeepSpeed runtime/zenflow/zenflow_config.py, engine.py configure_zenflow / is_zenflow_update_boundary,
 * zenflow_stage_1_and_2.py _configure_zenflow / is_zenflow_select_boundary / backward_prologue, the auto
 * update_interval of _process_selected_fp32_groups_grad; docs/zero.md "ZenFlow").
 *
 * Counting: m = 0, 1, 2, ... is the micro-step (one forward + backward; ZenFlow turns DeepSpeed's gradient
 * accumulation into its update interval, so every micro-step is a step of the selective optimizer), n = m + 1.
 * With S the selection interval in micro-steps (0: never after the first), k the update interval and W
 * full_warm_up_rounds:
 *   warm-up      m < W:  every step is an update boundary, no selective step (plain offloaded AdamW)
 *   selection    m >= W and (m == W or (S != 0 and m % S == 0)): re-rank the columns with this step's gradient
 *   update       fixed k: n < W or (n - W) % k == 0 or (S != 0 and n % S == 0)
 *                auto:    n <= W or "the previous step asked for it" or (S != 0 and n % S == 0)
 *   CPU step id  n (DeepSpeed passes step_id = micro_step + 1 to its CPU Adam, so its bias corrections count
 *                micro-steps, not CPU updates)
 * S: select_strategy "step": select_interval; "epoch": select_interval x micro-steps per epoch; "auto": "epoch"
 * with select_interval 1. Unknown micro-steps per epoch (DeepSpeed without a training_dataloader) give S = 0.
 *
 * update_interval "auto": for every 2-D tensor, each selective step,
 *   avg = (avg * (u - 1) + crit) / u / (topk_ratio * 10)         crit  = sum |g| over the selected columns
 *   non += (total - crit) / ((1 - topk_ratio) * 10)               total = sum |g| over the tensor
 *   the tensor "needs an update" when non >= avg
 * where u counts the steps since the last update (1 on the first); when at least int(auto_ratio x number of
 * 2-D tensors) tensors need one, the next step is an update boundary, and it starts u and every `non` again.
 * (With topk_ratio 0.1 the two divisors are 1 and 9: a running mean of the selected columns' mass per step
 * against the accumulated mass of the others, both per column.)
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZENFLOW_SELECT_AUTO = 0, ZENFLOW_SELECT_STEP, ZENFLOW_SELECT_EPOCH } ZenflowSelectStrategy;  // "auto|step|epoch"
#define ZENFLOW_AUTO (-1)  // select_interval / update_interval "auto"

// zero_optimization.zenflow, with DeepSpeed 0.19's defaults in the comments
typedef struct {
    double topk_ratio;              // 0.1, in [0, 1]
    int select_strategy;            // ZenflowSelectStrategy, "auto"
    int64_t select_interval;        // ZENFLOW_AUTO ("auto") or >= 0 (0: select once, at the end of warm-up)
    int64_t update_interval;        // ZENFLOW_AUTO ("auto") or >= 1
    bool overlap_step;              // false: the CPU update in a worker, landing one interval late
    bool offload;                   // false: the selective optimizer's m, v in host memory
    double auto_ratio;              // 0.99, in [0, 1]
    int64_t full_warm_up_rounds;    // 0
    double pt_reserved_cores_perc;  // 0.5, in [0, 1]: cores kept by the training process with overlap_step
} ZenflowOpts;

ZenflowOpts zenflow_opts_default(void);

// DeepSpeed's checks of the section that need no run facts (zenflow_config.py's validator, configure_zenflow):
// select_interval "auto" if and only if select_strategy "auto"; select_interval >= update_interval with
// select_strategy "step"; update_interval >= 1; and t5train's: full_warm_up_rounds >= 0, select_interval >= 0,
// topk_ratio strictly inside (0, 1) with update_interval "auto" (DeepSpeed divides by topk_ratio and by
// 1 - topk_ratio there). Returns 0, or T5_EXIT_USAGE with one line in err naming the key.
int zenflow_opts_check(const ZenflowOpts* o, char* err, size_t n);

// what one micro-step does
typedef struct {
    bool warm_up;      // m < W: the CPU AdamW updates every element, no selection, no selective step
    bool select;       // a selection boundary (see above)
    bool sync_master;  // select and m != 0: the fp32 master takes the working weights (sync_fp32_param_from_gpu)
    bool selective;    // m >= W: the selective AdamW steps the selected columns (1-D tensors: every element)
    bool update;       // an update boundary: the CPU AdamW applies the gradient accumulated since the last one
    int64_t micro_step;  // m
    int64_t cpu_step;    // n = m + 1, the CPU AdamW's step id when `update`
} ZenflowStepPlan;

typedef struct {
    int64_t S, k, W;    // selection interval (micro-steps, 0: never again), update interval (0: auto), warm-up
    bool auto_update;
    bool prologue_first;  // DeepSpeed >= 0.18.3's order (see zenflow_sched_init)
    double topk_ratio, auto_ratio;
    int num_2d;           // 2-D tensors the auto rule counts
    int64_t threshold;    // int(auto_ratio * num_2d)
    int64_t m;            // the current micro-step, -1 before the first
    // update_interval "auto" (DeepSpeed's zenflow_state, zenflow_need_update, num_need_update, update_interval)
    int state;
    bool need[2];
    int64_t u;            // steps since the last update boundary, counting this one
    int64_t count;        // tensors that need an update, this step
    double* avg;          // (num_2d) avg_critic_sum
    double* non;          // (num_2d) non_critic_sum
} ZenflowSched;

// steps_per_epoch: micro-steps per epoch (<= 0: unknown, S = 0 for the "epoch"/"auto" strategies, as DeepSpeed
// without a training_dataloader). num_2d: the 2-D tensors (update_interval "auto" only). prologue_first: the
// order of DeepSpeed >= 0.18.3 (PR 7665), whose optimizer clears the "needs an update" flag of the previous step
// before the engine reads it, so that an auto update boundary never comes (only warm-up and selection ones);
// false: the order ZenFlow was written for (0.17.5). Returns 0 or T5_EXIT_USAGE (zenflow_opts_check, and
// select_interval x steps_per_epoch >= update_interval for "epoch").
int zenflow_sched_init(ZenflowSched* s, const ZenflowOpts* o, int64_t steps_per_epoch, int num_2d,
                       bool prologue_first, char* err, size_t n);
void zenflow_sched_free(ZenflowSched* s);

// Starts the next micro-step and says what it does.
ZenflowStepPlan zenflow_sched_begin(ZenflowSched* s);

// update_interval "auto": tensor t's gradient sums of this (selective) step, t = 0 .. num_2d-1 in a fixed order.
// total = sum |g| over the tensor, selected = sum |g| over its selected columns. A no-op otherwise.
void zenflow_sched_observe(ZenflowSched* s, int t, double total, double selected);

#ifdef __cplusplus
}
#endif
