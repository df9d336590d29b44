/*
 * dataloader.c: sampling, sharding and collation (see dataloader.h for the exact rules).
 */
#include "dataloader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/base/common.h"

struct DataLoader {
    const Dataset* ds;
    int64_t N;
    int B, W, rank;
    bool train, shuffle, drop_last, group_by_length, pad_to_max_length;
    int pad_to_multiple_of;
    int max_src, max_tgt;
    uint64_t seed;
    int64_t epoch;
    int64_t* order;   // (N,) eval: the epoch's order before sharding (dataloader_set_order); NULL: 0 .. N - 1
    int64_t* idx;     // (n_idx,) this rank's example indices for the epoch (-1: padding row)
    int64_t n_idx;
    int64_t n_batches;
    int64_t pos;      // batches returned in this epoch
    bool ended;       // the end of the epoch was reported
};

// ----------------------------------------------------------------------------
// RNG and permutations

static uint64_t splitmix64(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// uniform in [0, n) (Lemire, with rejection)
static uint64_t rng_below(uint64_t* s, uint64_t n) {
    uint64_t x = splitmix64(s);
    __uint128_t m = (__uint128_t)x * n;
    uint64_t l = (uint64_t)m;
    if (l < n) {
        uint64_t t = (0 - n) % n;
        while (l < t) {
            x = splitmix64(s);
            m = (__uint128_t)x * n;
            l = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

static void permute(int64_t* v, int64_t n, uint64_t seed, int64_t epoch) {
    uint64_t s = seed ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(epoch + 1));
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&s, (uint64_t)i + 1);
        int64_t t = v[i]; v[i] = v[j]; v[j] = t;
    }
}

// HF get_length_grouped_indices on an already permuted order
typedef struct { int64_t idx; int len; int64_t pos; } LenKey;
static int cmp_len_desc(const void* a, const void* b) {
    const LenKey* x = (const LenKey*)a;
    const LenKey* y = (const LenKey*)b;
    if (x->len != y->len) return y->len - x->len;
    return (x->pos > y->pos) - (x->pos < y->pos);  // stable
}

static void group_by_length(const Dataset* ds, int64_t* v, int64_t n, int64_t group) {
    int64_t mult = n / (group * 4);
    if (mult > 50) mult = 50;
    if (mult < 1) mult = 1;
    int64_t mb = mult * group;
    LenKey* k = (LenKey*)malloc_check((size_t)mb * sizeof(LenKey));
    int64_t best_mb = 0;
    int best_len = -1;
    for (int64_t a = 0; a < n; a += mb) {
        int64_t m = T5_MIN(mb, n - a);
        for (int64_t i = 0; i < m; i++) k[i] = (LenKey){v[a + i], dataset_source_length(ds, v[a + i]), i};
        qsort(k, (size_t)m, sizeof(LenKey), cmp_len_desc);
        for (int64_t i = 0; i < m; i++) v[a + i] = k[i].idx;
        if (k[0].len > best_len) { best_len = k[0].len; best_mb = a; }
    }
    // the longest example goes first so an out-of-memory shows at once
    int64_t t = v[0]; v[0] = v[best_mb]; v[best_mb] = t;
    free(k);
}

// ----------------------------------------------------------------------------
// epochs

void dataloader_set_epoch(DataLoader* dl, int64_t epoch) {
    int64_t N = dl->N, W = dl->W;
    int64_t* order = (int64_t*)malloc_check((size_t)(N ? N : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < N; i++) order[i] = dl->order ? dl->order[i] : i;
    if (dl->train && dl->shuffle) {
        permute(order, N, dl->seed, epoch);
        if (dl->group_by_length) group_by_length(dl->ds, order, N, (int64_t)dl->B * W);
    } else if (dl->train && dl->group_by_length) {
        group_by_length(dl->ds, order, N, (int64_t)dl->B * W);
    }
    free(dl->idx);
    if (dl->train && W > 1) {
        // HF Trainer's sharding (accelerate's BatchSamplerShard: whole batches, even_batches): batch i of the epoch
        // is positions [iB, (i+1)B) of the order and rank r takes batches r, r + W, r + 2W, ...; the last round of W
        // batches is filled by wrapping around to the start of the order (position p is order[p mod N]), so every
        // batch is full and every rank runs the same number; drop_last drops the short batch and an incomplete
        // round. Micro-batch m of rank r is then micro-batch mW + r of one rank with the same B: W ranks x
        // accumulation G read the same micro-batches as one rank x accumulation WG.
        const int64_t B = dl->B;
        const int64_t rounds = dl->drop_last ? (N / B) / W : CEIL_DIV(N, B * W);
        const int64_t per = rounds * B;
        dl->idx = (int64_t*)malloc_check((size_t)(per ? per : 1) * sizeof(int64_t));
        for (int64_t k = 0; k < per; k++) dl->idx[k] = order[(((k / B) * W + dl->rank) * B + k % B) % N];
        dl->n_idx = per;
        dl->n_batches = rounds;
    } else {
        // one rank; an evaluation loader of W ranks takes positions r, r + W, ... (torch's DistributedSampler),
        // padding rows marked -1 (sharded evaluation opens its loaders with one rank and deals whole batches to the
        // ranks itself, src/eval/shard.h)
        const int64_t total = dl->drop_last ? (N / W) * W : CEIL_DIV(N, W) * W;
        const int64_t per = total / W;
        dl->idx = (int64_t*)malloc_check((size_t)(per ? per : 1) * sizeof(int64_t));
        for (int64_t k = 0; k < per; k++) {
            const int64_t p = k * W + dl->rank;
            dl->idx[k] = p < N ? order[p] : (dl->train ? order[p % N] : -1);
        }
        dl->n_idx = per;
        dl->n_batches = dl->drop_last ? per / dl->B : CEIL_DIV(per, (int64_t)dl->B);
    }
    dl->epoch = epoch;
    dl->pos = 0;
    dl->ended = false;
    free(order);
}

DataLoader* dataloader_open(const Dataset* ds, const DataOptions* opt, bool train, char* err, size_t errlen) {
    int B = train ? opt->train_batch_size : opt->eval_batch_size;
    if (B < 1) { t5_set_err(err, errlen, "%s batch size must be >= 1, got %d", train ? "train" : "eval", B); return NULL; }
    if (opt->world_size < 1 || opt->rank < 0 || opt->rank >= opt->world_size) {
        t5_set_err(err, errlen, "bad rank %d for world size %d", opt->rank, opt->world_size);
        return NULL;
    }
    if (dataset_size(ds) < 1) { t5_set_err(err, errlen, "the data set is empty"); return NULL; }
    DataLoader* dl = (DataLoader*)calloc_check(1, sizeof(DataLoader));
    dl->ds = ds;
    dl->N = dataset_size(ds);
    dl->B = B;
    dl->W = opt->world_size;
    dl->rank = opt->rank;
    dl->train = train;
    dl->shuffle = train && opt->shuffle;
    dl->drop_last = opt->drop_last;
    dl->group_by_length = train && opt->group_by_length;
    dl->pad_to_max_length = opt->pad_to_max_length;
    dl->pad_to_multiple_of = opt->pad_to_multiple_of;
    dl->max_src = opt->max_source_length;
    dl->max_tgt = opt->max_target_length;
    if (!train && opt->val_max_target_length > 0) dl->max_tgt = opt->val_max_target_length;
    dl->seed = opt->seed;
    if (dl->drop_last && dl->N < dl->W) {
        t5_set_err(err, errlen, "drop_last with %lld examples and %d ranks leaves no data", (long long)dl->N, dl->W);
        free(dl);
        return NULL;
    }
    dataloader_set_epoch(dl, 0);
    if (dl->n_batches == 0) {
        t5_set_err(err, errlen, "%lld examples give no full batch of %d per rank on %d ranks (drop_last)", (long long)dl->N, B, dl->W);
        dataloader_close(dl);
        return NULL;
    }
    return dl;
}

void dataloader_close(DataLoader* dl) {
    if (!dl) return;
    free(dl->order);
    free(dl->idx);
    free(dl);
}

int64_t dataloader_num_batches(const DataLoader* dl) { return dl->n_batches; }
int dataloader_seek(DataLoader* dl, int64_t batch) {
    if (batch < 0 || batch >= dl->n_batches) return -1;
    dl->pos = batch;
    dl->ended = false;
    return 0;
}
int dataloader_set_order(DataLoader* dl, const int64_t* order, char* err, size_t errlen) {
    if (dl->train) {
        t5_set_err(err, errlen, "internal: dataloader_set_order on a training loader");
        return -1;
    }
    int64_t* copy = NULL;
    if (order) {
        bool* seen = (bool*)calloc_check((size_t)dl->N, sizeof(bool));
        for (int64_t i = 0; i < dl->N; i++) {
            if (order[i] < 0 || order[i] >= dl->N || seen[order[i]]) {
                t5_set_err(err, errlen, "internal: order[%lld] = %lld: not a permutation of the %lld examples",
                           (long long)i, (long long)order[i], (long long)dl->N);
                free(seen);
                return -1;
            }
            seen[order[i]] = true;
        }
        free(seen);
        copy = (int64_t*)malloc_check((size_t)dl->N * sizeof(int64_t));
        memcpy(copy, order, (size_t)dl->N * sizeof(int64_t));
    }
    free(dl->order);
    dl->order = copy;
    dataloader_set_epoch(dl, dl->epoch);
    return 0;
}
int64_t dataloader_epoch(const DataLoader* dl) { return dl->epoch; }
const int64_t* dataloader_rank_indices(const DataLoader* dl, int64_t* n) {
    *n = dl->n_idx;
    return dl->idx;
}

// ----------------------------------------------------------------------------
// collation

static int round_up(int x, int m) { return m > 1 ? (int)CEIL_DIV(x, m) * m : x; }

bool dataloader_next_batch(DataLoader* dl, Batch* b) {
    if (dl->pos >= dl->n_batches) {
        if (!dl->ended) {
            dl->ended = true;
            return false;
        }
        dataloader_set_epoch(dl, dl->epoch + 1);
    }
    int64_t a = dl->pos * dl->B;
    int rows = (int)T5_MIN((int64_t)dl->B, dl->n_idx - a);
    const int64_t* idx = dl->idx + a;
    int Ts = 0, Tt = 0;
    for (int r = 0; r < rows; r++) {
        const int32_t *s, *t;
        int ns, nt;
        dataset_get(dl->ds, idx[r] >= 0 ? idx[r] : 0, &s, &ns, &t, &nt);
        Ts = T5_MAX(Ts, ns);
        Tt = T5_MAX(Tt, nt);
    }
    if (dl->pad_to_max_length) {
        Ts = T5_MAX(Ts, dl->max_src);
        Tt = T5_MAX(Tt, dl->max_tgt);
    }
    Ts = round_up(Ts, dl->pad_to_multiple_of);
    Tt = round_up(Tt, dl->pad_to_multiple_of);
    size_t nin = (size_t)rows * Ts, nlab = (size_t)rows * Tt;
    if (nin > b->cap_in) {
        b->input_ids = (int32_t*)realloc_check(b->input_ids, nin * sizeof(int32_t));
        b->attention_mask = (int32_t*)realloc_check(b->attention_mask, nin * sizeof(int32_t));
        b->cap_in = nin;
    }
    if (nlab > b->cap_lab) {
        b->labels = (int32_t*)realloc_check(b->labels, nlab * sizeof(int32_t));
        b->decoder_input_ids = (int32_t*)realloc_check(b->decoder_input_ids, nlab * sizeof(int32_t));
        b->cap_lab = nlab;
    }
    if (rows > b->cap_rows) {
        b->example_index = (int64_t*)realloc_check(b->example_index, (size_t)rows * sizeof(int64_t));
        b->cap_rows = rows;
    }
    b->B = rows;
    b->Ts = Ts;
    b->Tt = Tt;
    b->n_src_tokens = b->n_tgt_tokens = 0;
    for (int r = 0; r < rows; r++) {
        const int32_t *s, *t;
        int ns, nt;
        int64_t ex = idx[r];
        dataset_get(dl->ds, ex >= 0 ? ex : 0, &s, &ns, &t, &nt);
        b->example_index[r] = ex;
        int32_t* in = b->input_ids + (size_t)r * Ts;
        int32_t* am = b->attention_mask + (size_t)r * Ts;
        for (int j = 0; j < Ts; j++) {
            in[j] = j < ns ? s[j] : T5_PAD_ID;
            am[j] = j < ns;
        }
        int32_t* lab = b->labels + (size_t)r * Tt;
        int32_t* dec = b->decoder_input_ids + (size_t)r * Tt;
        for (int j = 0; j < Tt; j++) lab[j] = j < nt ? t[j] : -100;
        // HF _shift_right: decoder_start_token_id (= pad = 0) first, then labels[:-1], -100 -> pad
        if (Tt > 0) dec[0] = T5_PAD_ID;
        for (int j = 1; j < Tt; j++) dec[j] = lab[j - 1] == -100 ? T5_PAD_ID : lab[j - 1];
        if (ex >= 0) {
            b->n_src_tokens += ns;
            b->n_tgt_tokens += nt;
        }
    }
    dl->pos++;
    return true;
}

void batch_free(Batch* b) {
    if (!b) return;
    free(b->input_ids);
    free(b->attention_mask);
    free(b->labels);
    free(b->decoder_input_ids);
    free(b->example_index);
    memset(b, 0, sizeof *b);
}

// ----------------------------------------------------------------------------
// state

static int32_t loader_flags(const DataLoader* dl) {
    return (dl->shuffle ? 1 : 0) | (dl->drop_last ? 2 : 0) | (dl->group_by_length ? 4 : 0) | (dl->train ? 8 : 0);
}

void dataloader_state_save(const DataLoader* dl, DataLoaderState* st) {
    memset(st, 0, sizeof *st);
    st->magic = DATALOADER_STATE_MAGIC;
    st->version = 1;
    st->seed = dl->seed;
    st->epoch = dl->epoch;
    // an epoch whose end was reported resumes at the start of the next one
    st->batch_in_epoch = dl->pos;
    if (dl->ended) { st->epoch = dl->epoch + 1; st->batch_in_epoch = 0; }
    st->n_examples = dl->N;
    st->rank = dl->rank;
    st->world_size = dl->W;
    st->batch_size = dl->B;
    st->flags = loader_flags(dl);
}

int dataloader_state_rescale(DataLoaderState* st, int rank, int world, int batch, char* err, size_t errlen) {
    if (st->world_size < 1 || st->batch_size < 1 || world < 1 || batch < 1 || rank < 0 || rank >= world)
        return t5_set_err(err, errlen, "data loader state: bad rank/world/batch");
    const int64_t g_old = (int64_t)st->world_size * st->batch_size, g_new = (int64_t)world * batch;
    const int64_t rows = st->batch_in_epoch * g_old;  // the epoch's order consumed: positions [0, rows)
    if ((st->flags & 4) && g_old != g_new)
        return t5_set_err(err, errlen, "group_by_length orders each epoch by megabatches of %lld rows (%d ranks x %d); "
                          "this run's are %lld (%d x %d): resume with the same global batch",
                          (long long)g_old, st->world_size, st->batch_size, (long long)g_new, world, batch);
    if (rows % g_new != 0)
        return t5_set_err(err, errlen, "the saved position (%lld rows into epoch %lld, %d ranks x %d) is not a whole "
                          "number of global batches of %d ranks x %d",
                          (long long)rows, (long long)st->epoch, st->world_size, st->batch_size, world, batch);
    st->batch_in_epoch = rows / g_new;
    st->rank = rank;
    st->world_size = world;
    st->batch_size = batch;
    return 0;
}

int dataloader_state_restore(DataLoader* dl, const DataLoaderState* st, char* err, size_t errlen) {
    if (st->magic != DATALOADER_STATE_MAGIC || st->version != 1) {
        t5_set_err(err, errlen, "data loader state: bad magic/version (not a t5train data position)");
        return -1;
    }
    if (st->n_examples != dl->N || st->world_size != dl->W || st->rank != dl->rank || st->batch_size != dl->B ||
        st->seed != dl->seed || st->flags != loader_flags(dl)) {
        t5_set_err(err, errlen,
                "data loader state does not match this run (saved: %lld examples, rank %d/%d, batch %d, seed %llu, flags %d; "
                "now: %lld examples, rank %d/%d, batch %d, seed %llu, flags %d)",
                (long long)st->n_examples, st->rank, st->world_size, st->batch_size, (unsigned long long)st->seed, st->flags,
                (long long)dl->N, dl->rank, dl->W, dl->B, (unsigned long long)dl->seed, loader_flags(dl));
        return -1;
    }
    if (st->epoch < 0 || st->batch_in_epoch < 0) {
        t5_set_err(err, errlen, "data loader state: negative position");
        return -1;
    }
    dataloader_set_epoch(dl, st->epoch);
    if (st->batch_in_epoch > dl->n_batches) {
        t5_set_err(err, errlen, "data loader state: batch %lld beyond the %lld batches of an epoch", (long long)st->batch_in_epoch,
                (long long)dl->n_batches);
        return -1;
    }
    dl->pos = st->batch_in_epoch;
    return 0;
}
