/*
 * shard.c: how W ranks share one evaluation split (contract in shard.h).
 */
#include "shard.h"

#include <math.h>
#include <stdlib.h>

void eval_shard_plan(EvalShard* s, int64_t n, int64_t batch, int world) {
    s->n = n;
    s->batch = batch;
    s->world = world;
    s->n_batches = (n + batch - 1) / batch;
    s->steps = (s->n_batches + world - 1) / world;
}

int64_t eval_shard_batch(const EvalShard* s, int rank, int64_t k) {
    const int64_t i = k * s->world + rank;
    return i < s->n_batches ? i : -1;
}

int64_t eval_shard_rank_batches(const EvalShard* s, int rank) {
    // batches rank, rank + W, ... below n_batches
    return rank < s->n_batches ? (s->n_batches - 1 - rank) / s->world + 1 : 0;
}

void eval_shard_examples(const EvalShard* s, int64_t i, int64_t* first, int64_t* count) {
    *first = i * s->batch;
    const int64_t end = *first + s->batch < s->n ? *first + s->batch : s->n;
    *count = end - *first;
}

int eval_shard_real_at(const EvalShard* s, int64_t k) {
    const int64_t left = s->n_batches - k * s->world;
    return left <= 0 ? 0 : left >= s->world ? s->world : (int)left;
}

int64_t eval_shard_slot(const EvalShard* s, int64_t i, int64_t k0, int64_t nk) {
    return (i % s->world) * nk + i / s->world - k0;
}

typedef struct {
    int32_t len;
    int64_t idx;
} LenIdx;

// longest first; equal lengths in input order (so the order is one, whatever qsort does with ties)
static int by_length(const void* a, const void* b) {
    const LenIdx *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

int eval_shard_order_by_length(const int32_t* lengths, int64_t n, int64_t* perm) {
    if (n <= 0) return 0;
    LenIdx* v = malloc((size_t)n * sizeof *v);
    if (!v) return -1;
    for (int64_t i = 0; i < n; i++) v[i] = (LenIdx){lengths[i], i};
    qsort(v, (size_t)n, sizeof *v, by_length);
    for (int64_t j = 0; j < n; j++) perm[j] = v[j].idx;
    free(v);
    return 0;
}

void eval_shard_deal_snake(int64_t* order, int64_t n, int64_t batch, int world) {
    if (world <= 1 || batch < 1) return;
    const int64_t W = world, group = W * batch;  // positions of a whole group
    for (int64_t g = 1; (g + 1) * group <= n; g += 2) {
        int64_t* p = order + g * group;
        for (int64_t a = 0, b = W - 1; a < b; a++, b--)  // swap blocks a and b
            for (int64_t j = 0; j < batch; j++) {
                const int64_t t = p[a * batch + j];
                p[a * batch + j] = p[b * batch + j];
                p[b * batch + j] = t;
            }
    }
}

int64_t eval_shard_padded_positions(const int32_t* lengths, const int64_t* order, int64_t n, int64_t batch,
                                    int min_width, int multiple) {
    int64_t total = 0;
    for (int64_t first = 0; first < n; first += batch) {
        const int64_t rows = n - first < batch ? n - first : batch;
        int64_t w = min_width;
        for (int64_t p = first; p < first + rows; p++) {
            const int64_t len = lengths[order ? order[p] : p];
            if (len > w) w = len;
        }
        if (multiple > 1) w = (w + multiple - 1) / multiple * multiple;
        total += rows * w;
    }
    return total;
}

typedef struct {
    int64_t cost, idx;
} CostIdx;

// largest cost first; equal costs by batch index (one order, whatever qsort does with ties)
static int by_cost(const void* a, const void* b) {
    const CostIdx *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

int eval_shard_deal_by_cost(const EvalShard* s, const int64_t* cost, int64_t* at) {
    const int64_t W = s->world, nb = s->n_batches;
    for (int64_t j = 0; j < s->steps * W; j++) at[j] = -1;
    if (nb <= 0) return 0;
    if (W == 1) {  // one rank: input order, as before
        for (int64_t i = 0; i < nb; i++) at[i] = i;
        return 0;
    }
    CostIdx* v = malloc((size_t)nb * sizeof *v);
    if (!v) return -1;
    for (int64_t i = 0; i < nb; i++) v[i] = (CostIdx){cost[i], i};
    qsort(v, (size_t)nb, sizeof *v, by_cost);
    for (int64_t j = 0; j < nb; j++) {
        const int64_t k = j / W, q = j % W, r = k % 2 == 0 ? q : W - 1 - q;
        at[r * s->steps + k] = v[j].idx;
    }
    free(v);
    return 0;
}

double eval_shard_loss_at(const EvalShard* s, const int64_t* at, const float* gathered) {
    double sum = 0;
    int64_t rows = 0;
    int64_t* slot = malloc((size_t)(s->n_batches > 0 ? s->n_batches : 1) * sizeof(int64_t));
    if (!slot) return NAN;
    for (int64_t j = 0; j < s->steps * s->world; j++)
        if (at[j] >= 0) slot[at[j]] = j;  // rank r's step k sits at r x steps + k in the all-gather
    for (int64_t i = 0; i < s->n_batches; i++) {  // input order, as one GPU sums
        int64_t first, count;
        eval_shard_examples(s, i, &first, &count);
        sum += (double)gathered[slot[i]] * (double)count;
        rows += count;
    }
    free(slot);
    return rows ? sum / (double)rows : NAN;
}
