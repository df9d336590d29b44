/*
 * zenflow_ref.c: the CPU reference of ZenFlow's optimizer over one fp32 tensor (see zenflow_ref.h).
 */
#include "zenflow_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "zenflow_select.h"

void zenflow_ref_init(ZenflowRefTensor* t, int64_t R, int64_t C, bool is_1d, int64_t k, const float* w0,
                      float beta1, float beta2, float eps) {
    memset(t, 0, sizeof *t);
    t->R = is_1d ? 1 : R;
    t->C = C;
    t->is_1d = is_1d;
    t->k = is_1d ? C : k;
    const size_t n = (size_t)(t->R * C), ns = (size_t)(t->k * t->R);
    t->work = malloc_check(n * sizeof(float));
    t->master = malloc_check(n * sizeof(float));
    memcpy(t->work, w0, n * sizeof(float));
    memcpy(t->master, w0, n * sizeof(float));
    t->m = calloc_check(n, sizeof(float));
    t->v = calloc_check(n, sizeof(float));
    t->acc = calloc_check(n, sizeof(float));
    t->sel = calloc_check((size_t)t->k + 1, sizeof(int64_t));
    t->sel_m = calloc_check(ns + 1, sizeof(float));
    t->sel_v = calloc_check(ns + 1, sizeof(float));
    t->sel_p = calloc_check(ns + 1, sizeof(float));
    t->sel_g = calloc_check(ns + 1, sizeof(float));
    t->kept = calloc_check(ns + 1, sizeof(float));
    t->importance = calloc_check((size_t)C + 1, sizeof(float));
    if (is_1d)
        for (int64_t c = 0; c < C; c++) t->sel[c] = c;
    cpu_adam_init(&t->cpu, beta1, beta2, eps, true);
    cpu_adam_init(&t->selective, beta1, beta2, eps, true);
}

void zenflow_ref_free(ZenflowRefTensor* t) {
    free(t->work);
    free(t->master);
    free(t->m);
    free(t->v);
    free(t->acc);
    free(t->sel);
    free(t->sel_m);
    free(t->sel_v);
    free(t->sel_p);
    free(t->sel_g);
    free(t->kept);
    free(t->importance);
    memset(t, 0, sizeof *t);
}

// dst (k, R) = src[:, sel] of src (R, C)
static void gather_columns(const ZenflowRefTensor* t, const float* src, float* dst) {
    for (int64_t j = 0; j < t->k; j++)
        for (int64_t r = 0; r < t->R; r++) dst[j * t->R + r] = src[r * t->C + t->sel[j]];
}

// dst[:, sel] of dst (R, C) = src (k, R)
static void scatter_columns(const ZenflowRefTensor* t, const float* src, float* dst) {
    for (int64_t j = 0; j < t->k; j++)
        for (int64_t r = 0; r < t->R; r++) dst[r * t->C + t->sel[j]] = src[j * t->R + r];
}

// the selective AdamW on work[:, sel] with sel_g (ZenFlowSelectiveAdamW: one more step of its own count)
static void selective_step(ZenflowRefTensor* t, float lr, float wd) {
    if (t->k == 0) return;
    gather_columns(t, t->work, t->sel_p);
    t->selective_steps++;
    cpu_adam_begin_step(&t->selective, t->selective_steps, t->selective.beta1, t->selective.beta2);
    cpu_adam_update(&t->selective, lr, wd, t->sel_p, t->sel_m, t->sel_v, t->sel_g, DT_F32, 1.0f, NULL, DT_F32,
                    (size_t)(t->k * t->R));
    scatter_columns(t, t->sel_p, t->work);
}

void zenflow_ref_step(ZenflowRefTensor* t, const ZenflowStepPlan* p, const float* grad, float lr, float weight_decay,
                      ZenflowSched* sched, int t2d) {
    const size_t n = (size_t)(t->R * t->C), ns = (size_t)(t->k * t->R);
    if (p->sync_master) memcpy(t->master, t->work, n * sizeof(float));
    if (p->select) {
        memset(t->sel_m, 0, ns * sizeof(float));
        memset(t->sel_v, 0, ns * sizeof(float));
        if (!t->is_1d) {
            zenflow_column_importance(grad, t->R, t->C, t->importance);
            zenflow_select_topk(t->importance, t->C, t->k, t->sel);
        }
    }
    for (size_t i = 0; i < n; i++) t->acc[i] += grad[i];
    if (p->selective) {
        gather_columns(t, grad, t->sel_g);
        if (sched && !t->is_1d) {
            double total = 0, selected = 0;
            for (size_t i = 0; i < n; i++) total += fabs((double)grad[i]);
            for (size_t i = 0; i < ns; i++) selected += fabs((double)t->sel_g[i]);
            zenflow_sched_observe(sched, t2d, total, selected);
        }
        if (p->update) gather_columns(t, t->work, t->kept);
        else selective_step(t, lr, weight_decay);
    }
    if (p->update) {
        cpu_adam_begin_step(&t->cpu, p->cpu_step, t->cpu.beta1, t->cpu.beta2);
        cpu_adam_update(&t->cpu, lr, weight_decay, t->master, t->m, t->v, t->acc, DT_F32, 1.0f, NULL, DT_F32, n);
        memcpy(t->work, t->master, n * sizeof(float));
        memset(t->acc, 0, n * sizeof(float));
        if (p->selective) {
            scatter_columns(t, t->kept, t->work);
            selective_step(t, lr, weight_decay);
        }
    }
}
