/*
 * zenflow_state.c: ZenFlow's checkpoint layout, checks and schedule state (see zenflow_state.h).
 */
#include "zenflow_state.h"

#include <stdio.h>
#include <string.h>

#include "../base/common.h"

_Static_assert(sizeof(ZenflowStateHeader) == 14 * 8 + 8 * 4 + 4 * 4, "ZenflowStateHeader has padding");
_Static_assert(sizeof(ZenflowStateTensor) == 24, "ZenflowStateTensor has padding");

ZenflowStateHeader zenflow_state_header(const ZenflowOpts* o, const ZenflowSched* s, const CpuAdam* selc,
                                        int64_t selective_steps, int64_t since_update, bool w_ahead, int num_tensors,
                                        int64_t gacc_floats) {
    ZenflowStateHeader h;
    memset(&h, 0, sizeof h);
    h.version = ZENFLOW_STATE_VERSION;
    h.num_tensors = num_tensors;
    h.topk_ratio = o->topk_ratio;
    h.select_strategy = o->select_strategy;
    h.select_interval = o->select_interval;
    h.update_interval = o->update_interval;
    h.full_warm_up_rounds = o->full_warm_up_rounds;
    h.S = s->S;
    h.k = s->k;
    h.W = s->W;
    h.m = s->m;
    h.u = s->u;
    h.count = s->count;
    h.state = s->state;
    h.need0 = s->need[0];
    h.need1 = s->need[1];
    h.num_2d = s->num_2d;
    h.selective_steps = selective_steps;
    h.adam_step = selc->step;
    h.beta1_t = selc->beta1_t;
    h.beta2_t = selc->beta2_t;
    h.bias_correction1 = selc->bias_correction1;
    h.bias_correction2 = selc->bias_correction2;
    h.since_update = since_update;
    h.gacc_floats = gacc_floats;
    h.w_ahead = w_ahead;
    return h;
}

static const char* strategy_name(int64_t s) {
    return s == ZENFLOW_SELECT_AUTO ? "\"auto\"" : s == ZENFLOW_SELECT_STEP ? "\"step\"" : s == ZENFLOW_SELECT_EPOCH
                                                                                              ? "\"epoch\""
                                                                                              : "unknown";
}

// "auto" or the number
static const char* interval_str(int64_t v, char* buf, size_t n) {
    if (v == ZENFLOW_AUTO) snprintf(buf, n, "\"auto\"");
    else snprintf(buf, n, "%lld", (long long)v);
    return buf;
}

#define ZF_RESUME "resume: %s was saved by a run with zero_optimization.zenflow."
#define ZF_HINT " (ZenFlow's selective state belongs to its config: resume with the checkpoint's, or start a new run " \
                "from its weights with --model_name_or_path)"

int zenflow_state_header_check(const ZenflowStateHeader* h, const ZenflowOpts* o, const ZenflowSched* s,
                               int num_tensors, const char* path, char* err, size_t n) {
    char a[32], b[32];
    if (h->version != ZENFLOW_STATE_VERSION)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "resume: %s holds ZenFlow state of version %d, this t5train reads version %d", path,
                       (int)h->version, ZENFLOW_STATE_VERSION);
    if (h->topk_ratio != o->topk_ratio)
        return t5_errf(err, n, T5_EXIT_USAGE, ZF_RESUME "topk_ratio %g, this run has %g" ZF_HINT, path, h->topk_ratio,
                       o->topk_ratio);
    if (h->update_interval != o->update_interval)
        return t5_errf(err, n, T5_EXIT_USAGE, ZF_RESUME "update_interval %s, this run has %s" ZF_HINT, path,
                       interval_str(h->update_interval, a, sizeof a), interval_str(o->update_interval, b, sizeof b));
    if (h->select_strategy != o->select_strategy)
        return t5_errf(err, n, T5_EXIT_USAGE, ZF_RESUME "select_strategy %s, this run has %s" ZF_HINT, path,
                       strategy_name(h->select_strategy), strategy_name(o->select_strategy));
    if (h->select_interval != o->select_interval)
        return t5_errf(err, n, T5_EXIT_USAGE, ZF_RESUME "select_interval %s, this run has %s" ZF_HINT, path,
                       interval_str(h->select_interval, a, sizeof a), interval_str(o->select_interval, b, sizeof b));
    if (h->full_warm_up_rounds != o->full_warm_up_rounds)
        return t5_errf(err, n, T5_EXIT_USAGE, ZF_RESUME "full_warm_up_rounds %lld, this run has %lld" ZF_HINT, path,
                       (long long)h->full_warm_up_rounds, (long long)o->full_warm_up_rounds);
    if (h->S != s->S)  // select_strategy "epoch" / "auto": another number of micro-steps per epoch
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "resume: %s selected columns every %lld micro-steps, this run every %lld (select_strategy %s "
                       "counts micro-steps per epoch: resume with the same training set and batch size)",
                       path, (long long)h->S, (long long)s->S, strategy_name(o->select_strategy));
    if (h->k != s->k || h->W != s->W || h->num_2d != s->num_2d)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "resume: %s holds a ZenFlow schedule of update interval %lld, warm-up %lld, %d ranked tensors; "
                       "this run's is %lld, %lld, %d",
                       path, (long long)h->k, (long long)h->W, (int)h->num_2d, (long long)s->k, (long long)s->W,
                       (int)s->num_2d);
    if (h->num_tensors != num_tensors)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "resume: %s holds ZenFlow state of %d tensors, this model has %d (a different model?)", path,
                       (int)h->num_tensors, num_tensors);
    if (h->m < -1 || h->since_update < 0 || h->selective_steps < 0 || h->gacc_floats < 0 ||
        (h->since_update > 0) != (h->gacc_floats > 0) || h->state < 0 || h->state > 1)
        return t5_errf(err, n, T5_EXIT_FAILURE,
                       "resume: %s: ZenFlow state header out of range (micro-step %lld, %lld micro-steps accumulated, "
                       "%lld gradient floats)",
                       path, (long long)h->m, (long long)h->since_update, (long long)h->gacc_floats);
    return 0;
}

int zenflow_state_tensor_check(const ZenflowStateTensor* rec, int i, int64_t R, int64_t C, int64_t k,
                               const char* path, char* err, size_t n) {
    if (rec->R == R && rec->C == C && rec->k == k) return 0;
    if (rec->R == R && rec->C == C)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "resume: %s: ZenFlow tensor %d (%lld x %lld) has %lld selected columns, this run %lld (another "
                       "topk_ratio, or ZeRO stage 3's at-least-one column against stage 1/2's)",
                       path, i, (long long)R, (long long)C, (long long)rec->k, (long long)k);
    return t5_errf(err, n, T5_EXIT_USAGE,
                   "resume: %s: ZenFlow tensor %d is %lld x %lld, this model's is %lld x %lld (a different model?)",
                   path, i, (long long)rec->R, (long long)rec->C, (long long)R, (long long)C);
}

void zenflow_state_restore(const ZenflowStateHeader* h, const double* avg, const double* non, ZenflowSched* s,
                           CpuAdam* selc) {
    s->m = h->m;
    s->u = h->u;
    s->count = h->count;
    s->state = h->state;
    s->need[0] = h->need0 != 0;
    s->need[1] = h->need1 != 0;
    if (s->num_2d > 0 && s->avg && avg) memcpy(s->avg, avg, (size_t)s->num_2d * sizeof *s->avg);
    if (s->num_2d > 0 && s->non && non) memcpy(s->non, non, (size_t)s->num_2d * sizeof *s->non);
    selc->step = h->adam_step;
    selc->beta1_t = h->beta1_t;
    selc->beta2_t = h->beta2_t;
    selc->bias_correction1 = h->bias_correction1;
    selc->bias_correction2 = h->bias_correction2;
}

size_t zenflow_state_meta_bytes(int num_tensors, int num_2d) {
    return sizeof(ZenflowStateHeader) + (size_t)num_tensors * sizeof(ZenflowStateTensor) +
           2 * (size_t)num_2d * sizeof(double);
}

size_t zenflow_state_tensor_bytes(int64_t R, int64_t k, bool w_ahead) {
    return (size_t)k * sizeof(int32_t) + (w_ahead ? 3u : 2u) * (size_t)R * (size_t)k * sizeof(float);
}

int zenflow_state_route(const ZenflowRegion* r, int nr, size_t off, const void* data, size_t n,
                        void (*put)(void* ctx, int region, size_t region_off, const void* src, size_t bytes),
                        void* ctx) {
    const char* p = data;
    size_t start = 0;  // the first byte of region i in the blob
    for (int i = 0; i < nr && n > 0; i++) {
        const size_t end = start + r[i].bytes;
        if (off < end) {
            const size_t take = T5_MIN(n, end - off);
            put(ctx, i, off - start, p, take);
            p += take;
            off += take;
            n -= take;
        }
        start = end;
    }
    return n > 0 ? -1 : 0;
}
