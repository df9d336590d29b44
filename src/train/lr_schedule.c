/*
 * lr_schedule.c: HF get_scheduler lambdas and DeepSpeed WarmupLR/WarmupDecayLR (see lr_schedule.h).
 * Every expression keeps the operation order of the Python source so results agree to the last bit
 * or two (test/test_lr_schedule.c, fixtures from scripts/make_lr_fixtures.py).
 */
#include "lr_schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char* name;
    LRScheduleType type;
} lr_names[] = {
    {"linear", LR_SCHED_LINEAR},
    {"cosine", LR_SCHED_COSINE},
    {"cosine_with_restarts", LR_SCHED_COSINE_WITH_RESTARTS},
    {"polynomial", LR_SCHED_POLYNOMIAL},
    {"constant", LR_SCHED_CONSTANT},
    {"constant_with_warmup", LR_SCHED_CONSTANT_WITH_WARMUP},
    {"WarmupLR", LR_SCHED_DS_WARMUP_LR},
    {"WarmupDecayLR", LR_SCHED_DS_WARMUP_DECAY_LR},
};

int lr_schedule_type_from_name(const char* name, LRScheduleType* type) {
    for (size_t i = 0; i < sizeof lr_names / sizeof lr_names[0]; i++)
        if (!strcmp(name, lr_names[i].name)) {
            *type = lr_names[i].type;
            return 0;
        }
    return -1;
}

const char* lr_schedule_type_name(LRScheduleType type) {
    for (size_t i = 0; i < sizeof lr_names / sizeof lr_names[0]; i++)
        if (lr_names[i].type == type) return lr_names[i].name;
    return "?";
}

void lr_schedule_params_default(LRScheduleParams* p, LRScheduleType type) {
    memset(p, 0, sizeof *p);
    p->lr = 5e-5;  // TrainingArguments.learning_rate
    p->num_training_steps = 0;
    p->num_warmup_steps = 0;
    p->num_cycles = type == LR_SCHED_COSINE_WITH_RESTARTS ? 1.0 : 0.5;
    p->lr_end = 1e-7;
    p->power = 1.0;
    p->warmup_min_lr = 0.0;
    p->warmup_max_lr = 0.001;
    p->warmup_num_steps = 1000;
    p->warmup_type = LR_WARMUP_LOG;
}

int64_t hf_get_warmup_steps(double warmup_steps, double warmup_ratio, int64_t num_training_steps) {
    if (warmup_steps >= 1.0) return (int64_t)warmup_steps;
    if (warmup_steps > 0.0) return (int64_t)ceil((double)num_training_steps * warmup_steps);
    return (int64_t)ceil((double)num_training_steps * warmup_ratio);
}

int lr_schedule_init(LRSchedule* s, LRScheduleType type, const LRScheduleParams* p, char* err, size_t errcap) {
    memset(s, 0, sizeof *s);
    if (err && errcap) err[0] = '\0';
    s->type = type;
    s->p = *p;
    bool ds = type == LR_SCHED_DS_WARMUP_LR || type == LR_SCHED_DS_WARMUP_DECAY_LR;
    if (!ds) {
        if (p->num_warmup_steps < 0 || p->num_training_steps < 0) {
            if (err) snprintf(err, errcap, "lr schedule %s: negative warmup (%lld) or training steps (%lld)",
                              lr_schedule_type_name(type), (long long)p->num_warmup_steps, (long long)p->num_training_steps);
            return -1;
        }
        if (type == LR_SCHED_POLYNOMIAL && !(p->lr > p->lr_end)) {  // get_polynomial_decay_schedule_with_warmup
            if (err) snprintf(err, errcap, "lr_end (%g) must be smaller than initial lr (%g)", p->lr_end, p->lr);
            return -1;
        }
        return 0;
    }
    if (p->warmup_num_steps < 0 || (type == LR_SCHED_DS_WARMUP_DECAY_LR && p->num_training_steps < 0)) {
        if (err) snprintf(err, errcap, "scheduler %s: warmup_num_steps (%lld) and total_num_steps (%lld) must be >= 0",
                          lr_schedule_type_name(type), (long long)p->warmup_num_steps, (long long)p->num_training_steps);
        return -1;
    }
    s->ds_warmup_num_steps = p->warmup_num_steps > 2 ? p->warmup_num_steps : 2;  // max(2, warmup_num_steps)
    s->inverse_log_warm_up = 1.0 / log((double)s->ds_warmup_num_steps);
    return 0;
}

// HF lambdas (transformers/optimization.py), current_step = t
static double hf_lambda(const LRSchedule* s, int64_t t) {
    const LRScheduleParams* p = &s->p;
    int64_t W = p->num_warmup_steps, N = p->num_training_steps;
    double max1W = (double)(W > 1 ? W : 1);
    switch (s->type) {
        case LR_SCHED_CONSTANT: return 1.0;
        case LR_SCHED_CONSTANT_WITH_WARMUP:
            if (t < W) return (double)t / (W > 1 ? (double)W : 1.0);  // max(1.0, num_warmup_steps)
            return 1.0;
        case LR_SCHED_LINEAR: {
            if (t < W) return (double)t / max1W;
            double v = (double)(N - t) / (double)(N - W > 1 ? N - W : 1);
            return v > 0.0 ? v : 0.0;
        }
        case LR_SCHED_COSINE: {
            if (t < W) return (double)t / max1W;
            double progress = (double)(t - W) / (double)(N - W > 1 ? N - W : 1);
            double v = 0.5 * (1.0 + cos(M_PI * p->num_cycles * 2.0 * progress));
            return v > 0.0 ? v : 0.0;
        }
        case LR_SCHED_COSINE_WITH_RESTARTS: {
            if (t < W) return (double)t / max1W;
            double progress = (double)(t - W) / (double)(N - W > 1 ? N - W : 1);
            if (progress >= 1.0) return 0.0;
            double v = 0.5 * (1.0 + cos(M_PI * fmod(p->num_cycles * progress, 1.0)));
            return v > 0.0 ? v : 0.0;
        }
        case LR_SCHED_POLYNOMIAL: {
            if (t < W) return (double)t / max1W;
            if (t > N) return p->lr_end / p->lr;
            double lr_range = p->lr - p->lr_end;
            double decay_steps = (double)(N - W);
            double pct_remaining = 1.0 - (double)(t - W) / decay_steps;
            double decay = lr_range * pow(pct_remaining, p->power) + p->lr_end;
            return decay / p->lr;
        }
        default: return 0.0;
    }
}

// DeepSpeed _get_gamma() at last_batch_iteration = i >= 0
static double ds_gamma(const LRSchedule* s, int64_t i) {
    int64_t W = s->ds_warmup_num_steps;
    if (i < W) {
        if (s->p.warmup_type == LR_WARMUP_LINEAR) return (double)i / (double)W;
        return s->inverse_log_warm_up * log((double)(i + 1));
    }
    if (s->type == LR_SCHED_DS_WARMUP_LR) return 1.0;
    int64_t total = s->p.num_training_steps;
    double denom = (double)(total - W);
    if (denom < 1.0) denom = 1.0;
    double v = (double)(total - i) / denom;
    return v > 0.0 ? v : 0.0;
}

double lr_schedule_get(const LRSchedule* s, int64_t step) {
    if (step < 0) step = 0;
    if (s->type == LR_SCHED_DS_WARMUP_LR || s->type == LR_SCHED_DS_WARMUP_DECAY_LR) {
        double delta = s->p.warmup_max_lr - s->p.warmup_min_lr;
        if (step == 0) return s->p.warmup_min_lr;  // constructor: get_lr() at iteration -1 = min_lrs
        return s->p.warmup_min_lr + delta * ds_gamma(s, step - 1);
    }
    return s->p.lr * hf_lambda(s, step);  // LambdaLR: base_lr * lmbda(last_epoch)
}
