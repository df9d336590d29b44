/*
 * evaluate_generate.c: generation over a split (evaluate.h), sharded over the ranks as shard.h lays out: each rank
 * generates its batches of one GPU's batching, a piece of steps at a time; each piece's token rows are all-gathered
 * and every rank scores them in input order (gen_len, BLEU, the predictions), so every rank returns one GPU's result.
 *
 * A gathered row: (RS = max_length + 1) int32 = [width, ids[0 .. max_length)], width = the batch's output width
 * (t5_generate's *out_len; ids past it hold pad), -1 in a padding step's rows. A step's slot holds B rows, of which
 * the batch's example count are real.
 *
 * Length-sorted batches (EvalGenConfig.sort_by_length): the loader deals the batches of the sorted order
 * (dataloader_set_order with eval_shard_order_by_length's permutation, the same on every rank), so batch i holds the
 * examples order[i * B ..] (on several ranks with every other group of W batches reversed: eval_shard_deal_snake); a
 * row is scored as its example (order[position]) and its prediction lands at that input
 * index. BLEU's statistics and the gen_len count are integer sums, so the order in which rows are scored changes
 * nothing; what a sorted batch does change is the width its rows are filled to (beam search's fill is `</s>`, which HF's
 * gen_len counts). So each row's own length and own non-pad count are kept, and gen_len is counted at the end over the
 * input-order batches as one GPU returns them (evaluate_hf_nonpad), sorted or not: the same number either way.
 *
 * Lockstep (EvalGenConfig.lockstep: ZeRO-3 gathering on demand, every fetch a collective): every rank runs the
 * encoder and decoder steps at every step, a padding step on the split's last batch (its rows dropped, its vote
 * "finished"), and at each finished-check the ranks all-reduce (max) their votes (gen_agree) so that they stop
 * together: the same fetches in the same order on every rank.
 */
#include "evaluate.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../base/common.h"
#include "../launch/comm.h"
#include "score.h"
#include "shard.h"

#define GATHER_BYTES ((size_t)64 << 20)  // one piece's all-gathered rows, at most (one step at least)

typedef struct {
    const EvalGenConfig* cfg;
    const Tokenizer* tok;
    const Dataset* ds;
    EvalShard sh;
    int rank;
    int B, ML, RS, pad;
    T5Generator* G;
    DataLoader* dl;
    Batch batch;
    int32_t* gen;        // (B, ML) t5_generate's output
    int64_t piece;       // steps per all-gather
    int32_t* mine;       // (piece, B, RS) this rank's rows of the piece
    int32_t* all;        // (world, piece, B, RS) every rank's (world 1: mine)
    bool lockstep;       // EvalGenConfig.lockstep on several ranks
    bool padding;        // lockstep: the batch being generated is a padding step's (votes "finished")
    cudaStream_t stream;
    int64_t real_batches, pad_batches;
    BleuStats st;
    int64_t n_done;
    char** preds;        // (n) in input order, with keep_predictions
    int64_t* order;      // (n) sorted: the example at each position of the generation order; NULL: input order
    int32_t* own_len;    // (n) per example (input index): evaluate_row_length of its row
    int32_t* own_nonpad; // (n) per example: its non-pad tokens within own_len
    int eos, fill;       // eos; what t5_generate writes past a row's own length (greedy pad, beam HF's fill value)
} GenRun;

// the example at position p of the generation order
static int64_t gen_example(const GenRun* g, int64_t p) { return g->order ? g->order[p] : p; }

// a count for the all-gather of the ranks' counts (int32; a larger one is shown as INT32_MAX)
static int32_t count_i32(int64_t v) { return v > INT32_MAX ? INT32_MAX : (int32_t)v; }

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The longest padded source a batch of ds can have (the generator's max_Ts).
static int max_source_width(const Dataset* ds, const DataOptions* dopt) {
    const int64_t N = dataset_size(ds);
    int max_Ts = 1;
    for (int64_t i = 0; i < N; i++) max_Ts = T5_MAX(max_Ts, dataset_source_length(ds, i));
    if (dopt->pad_to_max_length && dopt->max_source_length > max_Ts) max_Ts = dopt->max_source_length;
    if (dopt->pad_to_multiple_of > 1)
        max_Ts = (int)CEIL_DIV((size_t)max_Ts, (size_t)dopt->pad_to_multiple_of) * dopt->pad_to_multiple_of;
    return max_Ts;
}

// lockstep (t5_generator_set_lockstep): the ranks' maximum vote (a padding step's batch votes "finished":
// t5_generator_set_lockstep_idle)
static int gen_agree(void* ctx, int vote) {
    GenRun* g = ctx;
    return comm_host_i32(g->cfg->comm, vote, ncclMax, g->stream);
}

// Generates this rank's steps [k0, k0 + nk) into g->mine. 0, or -1 with err.
static int gen_steps(GenRun* g, int64_t k0, int64_t nk, cudaStream_t s, char* err, size_t errlen) {
    for (int64_t kk = 0; kk < nk; kk++) {
        int32_t* slot = g->mine + (size_t)kk * g->B * g->RS;
        const int64_t k = k0 + kk;
        int64_t i = eval_shard_batch(&g->sh, g->rank, k);
        g->padding = i < 0;
        if (i < 0) {
            for (size_t x = 0; x < (size_t)g->B * g->RS; x++) slot[x] = x % (size_t)g->RS == 0 ? -1 : g->pad;
            // sharded: nothing to generate (no fetch issues a collective: EvalGenConfig.shard); lockstep: the
            // split's last batch, for the fetches, its rows dropped (as the loss pass's padding step)
            if (!g->lockstep) continue;
            i = g->sh.n_batches - 1;
        }
        int64_t first, count;
        eval_shard_examples(&g->sh, i, &first, &count);
        if (dataloader_seek(g->dl, i) || !dataloader_next_batch(g->dl, &g->batch) || g->batch.B != count ||
            g->batch.example_index[0] != gen_example(g, first)) {
            snprintf(err, errlen, "internal: the data loader did not give batch %lld (positions %lld + %lld)",
                     (long long)i, (long long)first, (long long)count);
            return -1;
        }
        int width = 0;
        if (g->lockstep) t5_generator_set_lockstep_idle(g->G, g->padding);
        if (t5_generate(g->G, g->batch.input_ids, g->batch.attention_mask, g->batch.B, g->batch.Ts, g->gen, &width,
                        s, err, errlen))
            return -1;
        if (g->padding) {
            g->pad_batches++;
            continue;
        }
        g->real_batches++;
        for (int r = 0; r < g->B; r++) {
            int32_t* row = slot + (size_t)r * g->RS;
            row[0] = r < g->batch.B ? width : -1;
            for (int j = 0; j < g->ML; j++) row[1 + j] = r < g->batch.B && j < width ? g->gen[(size_t)r * g->ML + j] : g->pad;
        }
        if (g->cfg->progress && g->sh.steps >= 10 && (k + 1) % (g->sh.steps / 10) == 0)
            fprintf(stderr, "generation: %lld/%lld batches\n", (long long)(k + 1), (long long)g->sh.steps);
    }
    return 0;
}

// Scores the batches of the gathered steps [k0, k0 + nk), each row as its example (input index), in batch order
// (score.h: on several threads, the one thread's result). *threads: raised to the threads used. 0, or -1 with err.
static int gen_score(GenRun* g, int64_t k0, int64_t nk, int* threads, char* err, size_t errlen) {
    const int64_t W = g->sh.world, i0 = k0 * W, i1 = T5_MIN((k0 + nk) * W, g->sh.n_batches);
    if (i1 <= i0) return 0;
    // position p of the rows in batch order -> (batch i0 + p / B, row p % B): batches are full but the split's last
    int64_t first0, count0, firstL, countL;
    eval_shard_examples(&g->sh, i0, &first0, &count0);
    eval_shard_examples(&g->sh, i1 - 1, &firstL, &countL);
    const int64_t n = firstL + countL - first0;
    EvalScoreItem* items = malloc_check((size_t)n * sizeof *items);
    for (int64_t p = 0; p < n; p++) {
        const int64_t i = i0 + p / g->B, j = p % g->B;
        const int32_t* rows = g->all + (size_t)eval_shard_slot(&g->sh, i, k0, nk) * g->B * g->RS;
        items[p] = (EvalScoreItem){.row = rows + (size_t)j * g->RS, .example = gen_example(g, first0 + p), .batch = i};
    }
    const EvalScorer sc = {.tok = g->tok, .ds = g->ds, .max_length = g->ML, .eos = g->eos, .pad = g->pad,
                           .fill = g->fill, .own_len = g->own_len, .own_nonpad = g->own_nonpad, .preds = g->preds};
    const int rc = eval_score_rows(&sc, &g->st, items, n, threads, err, errlen);
    free(items);
    if (rc == 0) g->n_done += n;
    return rc;
}

// The option and split checks of evaluate_generate. 0, or -1 with err.
static int gen_check(const Dataset* ds, const DataOptions* dopt, const EvalGenConfig* cfg, const char* prefix,
                     char* err, size_t errlen) {
    if (generate_options_check(&cfg->gen, err, errlen)) return -1;
    if (dataset_size(ds) <= 0) {
        snprintf(err, errlen, "the %s data set is empty (%s, after max_%s_samples): nothing to generate for",
                 strcmp(prefix, "predict") == 0 ? "prediction" : "evaluation",
                 dataset_source_path(ds) ? dataset_source_path(ds) : "no file", prefix);
        return -1;
    }
    if (dopt->eval_batch_size < 1) {
        snprintf(err, errlen, "per_device_eval_batch_size = %d must be >= 1", dopt->eval_batch_size);
        return -1;
    }
    return 0;
}

static void gen_free(GenRun* g) {
    if (g->preds) {
        for (int64_t i = 0; i < g->sh.n; i++) free(g->preds[i]);
        free(g->preds);
    }
    free(g->order);
    free(g->own_len);
    free(g->own_nonpad);
    bleu_stats_free(&g->st);
    batch_free(&g->batch);
    if (g->all != g->mine) free(g->all);
    free(g->mine);
    free(g->gen);
    dataloader_close(g->dl);
    t5_generator_destroy(g->G);
}

int evaluate_generate(ZeroEngine* Z, const ParamTable* t, const Tokenizer* tok, const Dataset* ds,
                      const DataOptions* dopt, const EvalGenConfig* cfg, cudaStream_t stream, EvalGenResult* out,
                      char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    snprintf(out->prefix, sizeof out->prefix, "%s", cfg->prefix ? cfg->prefix : "eval");
    if (gen_check(ds, dopt, cfg, out->prefix, err, errlen)) return -1;
    GenRun g = {.cfg = cfg, .tok = tok, .ds = ds, .B = dopt->eval_batch_size, .ML = cfg->gen.max_length,
                .pad = t->cfg.pad_token_id, .eos = t->cfg.eos_token_id};
    // t5_generate's fill past a row's end (model/generate.h): greedy pad; beam HF's `pad_token_id or eos_token_id`
    g.fill = cfg->gen.num_beams > 1 && g.pad == 0 ? g.eos : g.pad;
    g.RS = g.ML + 1;
    const int world = cfg->comm ? comm_world_size(cfg->comm) : 1;
    const bool shard = (cfg->shard || cfg->lockstep) && world > 1;
    g.lockstep = cfg->lockstep && world > 1;
    g.stream = stream;
    g.rank = shard ? comm_rank(cfg->comm) : 0;
    eval_shard_plan(&g.sh, dataset_size(ds), g.B, shard ? world : 1);
    g.G = t5_generator_create(t, Z, g.B, max_source_width(ds, dopt), &cfg->gen, err, errlen);
    if (!g.G) return -1;
    // lockstep: the fetches issue collectives, which a captured step cannot hold
    if (cfg->no_cuda_graphs || g.lockstep) t5_generator_set_cuda_graphs(g.G, false);
    // several ranks generating the whole split alike: their decoder steps (and so the engine's gathers) must not
    // depend on timing; in lockstep they also agree when to stop
    if (!shard && world > 1) t5_generator_set_fixed_checks(g.G, true);
    if (g.lockstep) t5_generator_set_lockstep(g.G, gen_agree, &g);
    ZeroStats zs0;
    zero_stats(Z, &zs0);
    DataOptions one = *dopt;  // one GPU's batches, in order (the shard plan picks this rank's)
    one.rank = 0;
    one.world_size = 1;
    g.dl = dataloader_open(ds, &one, false, err, errlen);
    if (!g.dl) {
        t5_generator_destroy(g.G);
        return -1;
    }
    // the batches' order: sorted by source length (the same permutation on every rank: it depends on the split only),
    // or the input order; the padded source positions of both, for the line the trainer prints
    {
        const int64_t n = g.sh.n;
        int32_t* lens = malloc_check((size_t)n * sizeof(int32_t));
        for (int64_t e = 0; e < n; e++) lens[e] = dataset_source_length(ds, e);
        const int min_w = dopt->pad_to_max_length ? dopt->max_source_length : 0;
        out->src_positions_input = eval_shard_padded_positions(lens, NULL, n, g.B, min_w, dopt->pad_to_multiple_of);
        out->src_positions = out->src_positions_input;
        if (cfg->sort_by_length) {
            g.order = malloc_check((size_t)n * sizeof(int64_t));
            int bad = eval_shard_order_by_length(lens, n, g.order);
            if (bad) snprintf(err, errlen, "sorting %lld examples by length: out of memory", (long long)n);
            else {
                eval_shard_deal_snake(g.order, n, g.B, (int)g.sh.world);  // rank 0 not always the longest batch
                bad = dataloader_set_order(g.dl, g.order, err, errlen);
            }
            if (bad) {
                free(lens);
                free(g.order);
                dataloader_close(g.dl);
                t5_generator_destroy(g.G);
                return -1;
            }
            out->sorted = true;
            out->src_positions = eval_shard_padded_positions(lens, g.order, n, g.B, min_w, dopt->pad_to_multiple_of);
        }
        free(lens);
    }
    const double t0 = wall_s();
    const size_t step_rows = (size_t)g.B * g.RS;
    g.piece = T5_MAX((int64_t)(GATHER_BYTES / (step_rows * sizeof(int32_t) * g.sh.world)), (int64_t)1);
    g.piece = T5_MIN(g.piece, T5_MAX(g.sh.steps, (int64_t)1));
    g.gen = malloc_check((size_t)g.B * g.ML * sizeof(int32_t));
    g.mine = malloc_check((size_t)g.piece * step_rows * sizeof(int32_t));
    g.all = shard ? malloc_check((size_t)g.sh.world * g.piece * step_rows * sizeof(int32_t)) : g.mine;
    g.preds = cfg->keep_predictions ? calloc_check((size_t)g.sh.n, sizeof(char*)) : NULL;
    g.own_len = calloc_check((size_t)g.sh.n, sizeof(int32_t));  // 0: not scored (a scored row's is >= 1)
    g.own_nonpad = calloc_check((size_t)g.sh.n, sizeof(int32_t));
    bleu_stats_init(&g.st, false);
    int rc = 0;
    for (int64_t k0 = 0; k0 < g.sh.steps && rc == 0; k0 += g.piece) {
        const int64_t nk = T5_MIN(g.piece, g.sh.steps - k0);
        double ta = wall_s();
        rc = gen_steps(&g, k0, nk, stream, err, errlen);
        double tb = wall_s();
        out->gen_s += tb - ta;
        if (rc == 0 && shard) comm_all_gather_host_i32(cfg->comm, g.mine, (size_t)nk * step_rows, g.all, stream);
        ta = wall_s();
        out->gather_s += ta - tb;
        if (rc == 0) rc = gen_score(&g, k0, nk, &out->score_threads, err, errlen);
        out->score_s += wall_s() - ta;
    }
    // every rank's counts (how the split was shared: the sharded-generation line, test_gpu_multi_eval reads it)
    out->world = world;
    out->mode = world == 1 ? EVAL_GEN_ONE_RANK : g.lockstep ? EVAL_GEN_LOCKSTEP : shard ? EVAL_GEN_SHARDED
                                                                                      : EVAL_GEN_WHOLE_SPLIT;
    if (rc == 0) {
        ZeroStats zs1;
        zero_stats(Z, &zs1);
        const GenerateStats* gs = t5_generator_stats(g.G);
        const int32_t mine[5] = {count_i32(g.real_batches), count_i32(g.pad_batches), count_i32(gs->steps),
                                 count_i32(gs->agreements), count_i32(zs1.gathers - zs0.gathers)};
        int32_t* all = malloc_check((size_t)world * 5 * sizeof(int32_t));
        comm_all_gather_host_i32(world > 1 ? cfg->comm : NULL, mine, 5, all, stream);
        out->ranks = calloc_check((size_t)world, sizeof *out->ranks);
        for (int w = 0; w < world; w++) {
            const int32_t* a = all + (size_t)w * 5;
            out->ranks[w] = (EvalGenRankCounts){a[0], a[1], a[2], a[3], a[4]};
        }
        free(all);
    }
    if (rc == 0 && g.n_done != g.sh.n) {
        snprintf(err, errlen, "internal: %lld of %lld examples scored", (long long)g.n_done, (long long)g.sh.n);
        rc = -1;
    }
    for (int64_t e = 0; rc == 0 && e < g.sh.n; e++)
        if (g.own_len[e] < 1) {
            snprintf(err, errlen, "internal: example %lld was not scored", (long long)e);
            rc = -1;
        }
    if (rc == 0) {
        bleu_stats_compute(&g.st, &out->bleu_detail);
        out->bleu = evaluate_round4(out->bleu_detail.score);
        // HF's count over the input-order batches (every example scored once: own_len / own_nonpad all set)
        const int64_t nonpad = evaluate_hf_nonpad(g.own_len, g.own_nonpad, g.sh.n, g.B, g.fill != g.pad);
        out->gen_len = evaluate_round4(g.n_done ? (double)nonpad / (double)g.n_done : 0.0);
        out->num_samples = g.n_done;
        out->num_steps = g.sh.steps;
        out->runtime = wall_s() - t0;
        out->gen = *t5_generator_stats(g.G);
        out->predictions = g.preds;  // input order: every example scored once
        g.preds = NULL;
    } else {
        free(out->ranks);
        out->ranks = NULL;
    }
    gen_free(&g);
    return rc;
}
