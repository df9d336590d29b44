/*
 * lr_schedule.h: learning-rate schedules of the HF Trainer (transformers/optimization.py get_scheduler)
 * and of DeepSpeed (deepspeed/runtime/lr_schedules.py WarmupLR, WarmupDecayLR), as pure functions of
 * the update number.
 *
 * lr_schedule_get(s, step) is the lr used by optimizer update number `step` (0-based), where `step`
 * counts the updates actually applied before this one (overflow-skipped steps do not count: DeepSpeed
 * does not step the scheduler on overflow, engine.py _take_model_step).
 *
 * HF schedules are torch LambdaLR: construction sets lr = lr0 * lambda(0), each scheduler.step() after an
 * update advances last_epoch, so update `step` uses lr0 * lambda(step). With warmup 0 the very first
 * update of "linear" uses the full lr0; with warmup W > 0 it uses lr 0.
 *
 * DeepSpeed WarmupLR/WarmupDecayLR: last_batch_iteration starts at -1 and the constructor writes
 * get_lr() = warmup_min_lr into the optimizer (DeepSpeed >= 0.10; older versions left the optimizer's
 * own lr there). Each scheduler.step() after an update does last_batch_iteration += 1, so
 *     update 0 uses warmup_min_lr, update u >= 1 uses min + (max - min) * gamma(u - 1), where
 *     gamma(i) = log(i + 1) / log(W)   ("log", default)  or  i / W   ("linear")   for i < W,
 *     gamma(i) = 1 (WarmupLR) or max(0, (total - i) / max(1, total - W)) (WarmupDecayLR)   for i >= W,
 * with W = max(2, warmup_num_steps). So under "log" updates 0 and 1 both use warmup_min_lr.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LR_SCHED_LINEAR = 0,              // HF "linear" (Seq2SeqTrainer default)
    LR_SCHED_COSINE,                  // HF "cosine" (num_cycles 0.5)
    LR_SCHED_COSINE_WITH_RESTARTS,    // HF "cosine_with_restarts" (num_cycles 1)
    LR_SCHED_POLYNOMIAL,              // HF "polynomial" (lr_end 1e-7, power 1)
    LR_SCHED_CONSTANT,                // HF "constant"
    LR_SCHED_CONSTANT_WITH_WARMUP,    // HF "constant_with_warmup"
    LR_SCHED_DS_WARMUP_LR,            // DeepSpeed "WarmupLR"
    LR_SCHED_DS_WARMUP_DECAY_LR,      // DeepSpeed "WarmupDecayLR"
} LRScheduleType;

typedef enum { LR_WARMUP_LOG = 0, LR_WARMUP_LINEAR = 1 } LRWarmupType;

typedef struct {
    // HF schedules
    double lr;                   // learning_rate (the optimizer's initial lr)
    int64_t num_training_steps;  // total optimizer updates (HF); total_num_steps (WarmupDecayLR)
    int64_t num_warmup_steps;    // resolved with hf_get_warmup_steps()
    double num_cycles;           // cosine 0.5, cosine_with_restarts 1
    double lr_end;               // polynomial 1e-7
    double power;                // polynomial 1.0
    // DeepSpeed schedules
    double warmup_min_lr;        // 0
    double warmup_max_lr;        // 0.001
    int64_t warmup_num_steps;    // 1000
    LRWarmupType warmup_type;    // log
} LRScheduleParams;

typedef struct {
    LRScheduleType type;
    LRScheduleParams p;
    double inverse_log_warm_up;  // DeepSpeed: 1 / log(max(2, warmup_num_steps))
    int64_t ds_warmup_num_steps; // DeepSpeed: max(2, warmup_num_steps)
} LRSchedule;

// Defaults of transformers get_scheduler / DeepSpeed's constructors for `type`.
void lr_schedule_params_default(LRScheduleParams* p, LRScheduleType type);
// "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
// "WarmupLR", "WarmupDecayLR". Returns 0, or -1 for an unknown name.
int lr_schedule_type_from_name(const char* name, LRScheduleType* type);
const char* lr_schedule_type_name(LRScheduleType type);
// Returns 0, or -1 with a one-line message (negative step counts, polynomial lr_end >= lr, ...).
int lr_schedule_init(LRSchedule* s, LRScheduleType type, const LRScheduleParams* p, char* err, size_t errcap);
// The lr of optimizer update number `step` (0-based; see the top of this file).
double lr_schedule_get(const LRSchedule* s, int64_t step);
// TrainingArguments.get_warmup_steps: warmup_steps >= 1 wins (transformers 4.x/5.x); a fractional
// 0 < warmup_steps < 1 is a ratio (5.x); otherwise ceil(num_training_steps * warmup_ratio) (4.x).
int64_t hf_get_warmup_steps(double warmup_steps, double warmup_ratio, int64_t num_training_steps);

#ifdef __cplusplus
}
#endif
