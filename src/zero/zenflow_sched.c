/*
 * zenflow_sched.c: ZenFlow's option checks and boundary schedule (see zenflow_sched.h).
 */
#include "zenflow_sched.h"

#include <stdlib.h>
#include <string.h>

#include "../base/common.h"

#define ZF "deepspeed: zero_optimization.zenflow."

ZenflowOpts zenflow_opts_default(void) {
    return (ZenflowOpts){
        .topk_ratio = 0.1,
        .select_strategy = ZENFLOW_SELECT_AUTO,
        .select_interval = ZENFLOW_AUTO,
        .update_interval = ZENFLOW_AUTO,
        .overlap_step = false,
        .offload = false,
        .auto_ratio = 0.99,
        .full_warm_up_rounds = 0,
        .pt_reserved_cores_perc = 0.5,
    };
}

int zenflow_opts_check(const ZenflowOpts* o, char* err, size_t n) {
    if (!(o->topk_ratio >= 0 && o->topk_ratio <= 1))
        return t5_errf(err, n, T5_EXIT_USAGE, ZF "topk_ratio %g is outside [0, 1]", o->topk_ratio);
    if (!(o->auto_ratio >= 0 && o->auto_ratio <= 1))
        return t5_errf(err, n, T5_EXIT_USAGE, ZF "auto_ratio %g is outside [0, 1]", o->auto_ratio);
    if (!(o->pt_reserved_cores_perc >= 0 && o->pt_reserved_cores_perc <= 1))
        return t5_errf(err, n, T5_EXIT_USAGE, ZF "pt_reserved_cores_perc %g is outside [0, 1]",
                       o->pt_reserved_cores_perc);
    if (o->full_warm_up_rounds < 0)
        return t5_errf(err, n, T5_EXIT_USAGE, ZF "full_warm_up_rounds %lld is negative",
                       (long long)o->full_warm_up_rounds);
    if (o->select_strategy == ZENFLOW_SELECT_AUTO && o->select_interval != ZENFLOW_AUTO)
        // DeepSpeed: raise Warning("If use auto select strategy, select_interval will be set to 1 ...")
        return t5_errf(err, n, T5_EXIT_USAGE,
                       ZF "select_interval %lld with select_strategy \"auto\" (which reselects once per epoch): set "
                          "select_strategy \"step\" or \"epoch\", or leave select_interval \"auto\"",
                       (long long)o->select_interval);
    if (o->select_strategy != ZENFLOW_SELECT_AUTO && o->select_interval == ZENFLOW_AUTO)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       ZF "select_interval \"auto\" needs select_strategy \"auto\"; with \"%s\" it must be a number",
                       o->select_strategy == ZENFLOW_SELECT_STEP ? "step" : "epoch");
    if (o->select_interval != ZENFLOW_AUTO && o->select_interval < 0)
        return t5_errf(err, n, T5_EXIT_USAGE, ZF "select_interval %lld is negative (0: select once)",
                       (long long)o->select_interval);
    if (o->update_interval != ZENFLOW_AUTO && o->update_interval < 1)
        return t5_errf(err, n, T5_EXIT_USAGE, ZF "update_interval %lld must be at least 1 (or \"auto\")",
                       (long long)o->update_interval);
    if (o->update_interval != ZENFLOW_AUTO && o->select_strategy == ZENFLOW_SELECT_STEP && o->select_interval != 0 &&
        o->select_interval < o->update_interval)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       ZF "select_interval %lld is below update_interval %lld (DeepSpeed: \"Select interval must be "
                          "greater or equal to update interval\")",
                       (long long)o->select_interval, (long long)o->update_interval);
    if (o->update_interval == ZENFLOW_AUTO && !(o->topk_ratio > 0 && o->topk_ratio < 1))
        return t5_errf(err, n, T5_EXIT_USAGE,
                       ZF "update_interval \"auto\" needs topk_ratio strictly between 0 and 1 (it divides by topk_ratio "
                          "and by 1 - topk_ratio), got %g",
                       o->topk_ratio);
    return 0;
}

int zenflow_sched_init(ZenflowSched* s, const ZenflowOpts* o, int64_t steps_per_epoch, int num_2d,
                       bool prologue_first, char* err, size_t n) {
    memset(s, 0, sizeof *s);
    int rc = zenflow_opts_check(o, err, n);
    if (rc) return rc;
    int64_t S = o->select_strategy == ZENFLOW_SELECT_AUTO ? 1 : o->select_interval;
    if (o->select_strategy != ZENFLOW_SELECT_STEP) S = steps_per_epoch > 0 ? S * steps_per_epoch : 0;
    s->auto_update = o->update_interval == ZENFLOW_AUTO;
    s->k = s->auto_update ? 0 : o->update_interval;
    if (!s->auto_update && S != 0 && S < s->k)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       ZF "select_interval gives a selection every %lld micro-steps, below update_interval %lld "
                          "(DeepSpeed: \"Select interval must be greater or equal to update interval\")",
                       (long long)S, (long long)s->k);
    s->S = S;
    s->W = o->full_warm_up_rounds;
    s->prologue_first = prologue_first;
    s->topk_ratio = o->topk_ratio;
    s->auto_ratio = o->auto_ratio;
    s->num_2d = num_2d;
    s->threshold = (int64_t)(o->auto_ratio * (double)num_2d);
    s->m = -1;
    if (s->auto_update && num_2d > 0) {
        s->avg = calloc_check((size_t)num_2d, sizeof *s->avg);
        s->non = calloc_check((size_t)num_2d, sizeof *s->non);
    }
    return 0;
}

void zenflow_sched_free(ZenflowSched* s) {
    free(s->avg);
    free(s->non);
    s->avg = s->non = NULL;
}

// the optimizer's backward_prologue for update_interval "auto"
static void auto_prologue(ZenflowSched* s) {
    s->need[s->state] = false;
    s->count = 0;
    if (s->need[s->state ^ 1]) {
        s->u = 0;
        for (int t = 0; t < s->num_2d; t++) s->non[t] = 0;
    }
    s->u++;
}

ZenflowStepPlan zenflow_sched_begin(ZenflowSched* s) {
    const int64_t m = ++s->m, n = m + 1;
    const bool periodic = s->S != 0 && n % s->S == 0;
    ZenflowStepPlan p = {.micro_step = m, .cpu_step = n};
    p.warm_up = m < s->W;
    p.selective = !p.warm_up;
    p.select = m >= s->W && (m == s->W || (s->S != 0 && m % s->S == 0));
    p.sync_master = p.select && m != 0;
    if (s->auto_update) {
        // 0.17.5: the engine flips zenflow_state, then the optimizer's prologue runs; >= 0.18.3 the other way round
        if (s->prologue_first) auto_prologue(s);
        s->state ^= 1;
        if (!s->prologue_first) auto_prologue(s);
        p.update = n <= s->W || s->need[s->state ^ 1] || periodic;
    } else {
        p.update = n < s->W || (n - s->W) % s->k == 0 || periodic;
    }
    return p;
}

void zenflow_sched_observe(ZenflowSched* s, int t, double total, double selected) {
    if (!s->auto_update || t < 0 || t >= s->num_2d) return;
    const double u = (double)s->u;
    s->avg[t] = (s->avg[t] * (u - 1) + selected) / u / (s->topk_ratio * 10);
    s->non[t] += (total - selected) / ((1 - s->topk_ratio) * 10);
    if (s->non[t] >= s->avg[t]) s->count++;
    if (s->count >= s->threshold) s->need[s->state] = true;
}
