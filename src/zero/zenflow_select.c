/*
 * zenflow_select.c: ZenFlow's column importance and top-k selection (see zenflow_select.h).
 */
#include "zenflow_select.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "../base/common.h"

int64_t zenflow_select_count(int64_t C, double topk_ratio, int stage) {
    if (C <= 0) return 0;
    int64_t k = (int64_t)(topk_ratio * (double)C);  // Python int(): truncation toward zero
    if (stage == 3 && k < 1) k = 1;
    if (k > C) k = C;
    return k;
}

void zenflow_column_importance(const float* grad, int64_t R, int64_t C, float* importance) {
    for (int64_t c = 0; c < C; c++) {
        double s = 0.0;
        for (int64_t r = 0; r < R; r++) s += fabs((double)grad[r * C + c]);
        importance[c] = (float)s;
    }
}

typedef struct {
    float s;
    int64_t c;
} Ranked;

// the order of ranking: NaN first, then larger importance, then the lower column
static int ranked_cmp(const void* a, const void* b) {
    const Ranked* x = a;
    const Ranked* y = b;
    const bool xn = isnan(x->s), yn = isnan(y->s);
    if (xn != yn) return xn ? -1 : 1;
    if (!xn && x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);
}

static int index_cmp(const void* a, const void* b) {
    const int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return (x > y) - (x < y);
}

void zenflow_select_topk(const float* importance, int64_t C, int64_t k, int64_t* selected) {
    if (k <= 0) return;
    Ranked* r = malloc_check((size_t)C * sizeof *r);
    for (int64_t c = 0; c < C; c++) r[c] = (Ranked){importance[c], c};
    qsort(r, (size_t)C, sizeof *r, ranked_cmp);
    for (int64_t i = 0; i < k; i++) selected[i] = r[i].c;
    free(r);
    qsort(selected, (size_t)k, sizeof *selected, index_cmp);
}

ZenflowShape zenflow_tensor_shape(int64_t rows, int64_t cols, int64_t numel, double topk_ratio, int stage) {
    if (rows > 0 && cols > 0)
        return (ZenflowShape){.R = rows, .C = cols, .k = zenflow_select_count(cols, topk_ratio, stage), .is_1d = false};
    return (ZenflowShape){.R = 1, .C = numel, .k = numel, .is_1d = true};
}

uint64_t zenflow_tensor_gpu_bytes(ZenflowShape s, uint64_t cub_bytes) {
    uint64_t b = 4 * (uint64_t)s.k + 5 * 4 * (uint64_t)s.R * (uint64_t)s.k;
    if (!s.is_1d) b += 5 * 4 * (uint64_t)s.C + cub_bytes;
    return b;
}

uint64_t zenflow_cub_bytes_est(int64_t C) { return 8 * (uint64_t)(C > 0 ? C : 0) + ((uint64_t)1 << 20); }
