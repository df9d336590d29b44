/*
 * generate.c: greedy and beam-search generation with a KV cache (see generate.h for the contract and
 * docs/generate.md for the HF semantics matched, rule by rule).
 *
 * Dimension names as model/t5.c: B batch items, Ts source length, D, H, Dk, HD = H*Dk, F, V, L / Ld blocks.
 * nb = num_beams; I = batch slots in the current decoder batch (items, after compaction); R = I * nb rows;
 * Tmax = cached positions (max_length - 1 rounded up to 16); t = position of the decoder input token of the
 * current step (cur_len - 1 in HF's terms); Tk = keys attended this step, t + 1 rounded up to 16 (keys
 * above t are masked by the causal rule with q_offset = t, so few GEMM shapes occur).
 *
 * Numerics: the same kernels and roundings as t5.c's eval forward: fp32 residual stream; RMSNorm weights,
 * the relative-bias table and the embedding lookup read the fp32 view of the parameters; Q K^T is rounded
 * to X and the bias and masks are added in fp32 inside the softmax; P is rounded to X for P V; the final
 * norm (and the D^-0.5 scale of scale_decoder_outputs) in fp32, rounded once to X for lm_head. Dropout is off.
 *
 * Data flow of one decoder step (rows r = slot * nb + beam):
 *   x (R, D) fp32 = embed(tok)
 *   per block: self-attention with the cache: q, k, v = rmsnorm(x) W^T; k, v -> cache[r, h, t, :];
 *              S (R*H, 1, Tk) = q K^T; P = softmax(S + bias[h, t, :] + causal(q_offset t)); ctx = P V; x += ctx Wo^T
 *              cross-attention: q (I, nb, H, Dk) -> (I, H, nb, Dk): one GEMM per (item, head) against the
 *              item's encoder K/V (I, H, Ts, Dk), computed once per batch; x += ...
 *              feed-forward; x += ...
 *   logits (R, V) X = lm_head(final_norm(x)) -> per row top-K (decode_topk) -> host search bookkeeping.
 * Beam reordering and compaction gather the caches' rows (decode_gather_rows) into the second of two
 * buffers and swap.
 *
 * Speed (docs/generate.md "CUDA graphs"): the step's position t is read from device memory (d_pos), so the whole
 * device part of a step (decoder, lm_head, top-k and, for greedy, the search update) is one CUDA graph per key
 * (rows, Ts, Tk bucket, cache buffers, </s> ban), captured at the key's second sight and replayed after. The fused
 * step (decoder_step_fused) has 11 kernels per block and no Tk bucket (one graph serves every t). Greedy search runs
 * on the device (decode_greedy_update) and the host reads the finished flags back asynchronously; beam search (up to
 * GEN_DEV_BEAM_MAX beams) picks the running beams on the device (decode_beam_select: tokens, scores and per-row cache
 * histories d_hist instead of reordering the caches) and the host replays the same choice on the copied top-k to keep
 * HF's finished hypotheses, up to GEN_BEAM_LAG steps behind; otherwise one host synchronisation per step.
 */
#include "generate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../cuda/activation.cuh"
#include "../cuda/attention_softmax.cuh"
#include "../src/base/check.h"
#include "../cuda/decode.cuh"
#include "../cuda/decode_fused.cuh"
#include "../cuda/decode_gemv.cuh"
#include "../cuda/dropout.cuh"
#include "../cuda/elementwise.cuh"
#include "../cuda/embedding.cuh"
#include "../cuda/matmul.cuh"
#include "../cuda/position_bias.cuh"
#include "../cuda/rmsnorm.cuh"
#include "../src/base/common.h"
#include "gen_lockstep.h"
#include "relpos.h"

#define GEN_TK_ROUND 16   // key-length bucket of the self-attention GEMMs
#define GEN_ROW_ROUND 8   // compaction keeps a multiple of this many rows
#define GEN_NEG_INF_SCORE (-1.0e9f)  // HF's "very large negative" beam score
#define GEN_MAX_GRAPHS 64  // captured decoder steps kept per generator (LRU)
#define GEN_CHECK_LAG 4    // greedy: the host reads the finished flags at most this many steps late
#define GEN_BEAM_LAG 4     // device beam search: steps launched ahead of the host's finished-hypotheses bookkeeping
#define GEN_BEAM_RING (GEN_BEAM_LAG + 1)  // pinned top-k copies in flight
#define GEN_DEV_BEAM_MAX 8  // device beam selection up to this many beams (decode_beam_select)

void generate_options_default(GenerateOptions* o) {
    memset(o, 0, sizeof *o);
    o->max_length = 128;
    o->min_length = 0;
    o->num_beams = 1;
    o->length_penalty = 1.0f;
    o->early_stopping = GEN_EARLY_STOP_FALSE;
    o->no_repeat_ngram_size = 0;
}

int generate_options_check(const GenerateOptions* o, char* err, size_t errlen) {
    if (o->num_beams < 1) {
        snprintf(err, errlen, "num_beams = %d: it must be >= 1 (1 = greedy)", o->num_beams);
        return -1;
    }
    if (o->num_beams > 64) {
        snprintf(err, errlen, "num_beams = %d: at most 64 beams are supported", o->num_beams);
        return -1;
    }
    if (o->max_length < 2) {
        snprintf(err, errlen,
                 "generation max_length = %d: it counts the decoder start token, so it must be >= 2 to generate "
                 "anything (set generation_max_length or val_max_target_length)",
                 o->max_length);
        return -1;
    }
    if (o->min_length < 0) {
        snprintf(err, errlen, "min_length = %d must be >= 0", o->min_length);
        return -1;
    }
    if (o->no_repeat_ngram_size != 0) {
        snprintf(err, errlen, "not implemented yet: no_repeat_ngram_size = %d (only 0 is supported)",
                 o->no_repeat_ngram_size);
        return -1;
    }
    if (!isfinite(o->length_penalty)) {
        snprintf(err, errlen, "length_penalty must be finite");
        return -1;
    }
    if (o->early_stopping != GEN_EARLY_STOP_FALSE && o->early_stopping != GEN_EARLY_STOP_TRUE &&
        o->early_stopping != GEN_EARLY_STOP_NEVER) {
        snprintf(err, errlen, "early_stopping = %d: expected false, true or \"never\"", (int)o->early_stopping);
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// structures

// One captured decoder step (decoder + top-k [+ greedy update]) for one shape key; the position t is read from
// device memory (d_pos), so one graph serves every step of its key-length bucket Tk.
typedef struct {
    bool used, seen, captured;
    int I, Ts, Tk, sgen, cgen, ban;
    uint64_t sig;       // the weight pointers the step fetched (checked before each replay)
    uint64_t last_use;
    cudaGraphExec_t exec;
} GenGraph;

struct T5Generator {
    const ParamTable* t;
    ZeroEngine* Z;
    GenerateOptions opt;
    DType X;
    size_t xs;
    int D, H, Dk, HD, F, V, L, Ld, NB, max_dist;
    float eps;
    bool gated, tied;  // tied: shared.weight projects (no lm_head parameter)
    bool scale_out;    // the decoder output is scaled by D^-0.5 before the projection (v1.0)
    int pad_id, eos_id, start_id, fill_id;
    int max_B, max_Ts, nb, max_R, Tmax, K;

    BlockParamIdx* enc_idx;  // (L)
    BlockParamIdx* dec_idx;  // (Ld)
    int p_embed, p_lm_head, p_enc_final, p_dec_final;
    int u_shared, u_final, u_lm;
    int cur_unit;   // the unit fetched last
    uint64_t fetch_sig;  // hash of the pointers unit_fetch returned since the last reset
    bool use_graphs;
    bool fixed_checks;    // greedy: the finished flags read exactly GEN_CHECK_LAG steps after their copy (never earlier)
    T5GenAgreeFn agree;   // lockstep with other ranks (t5_generator_set_lockstep); NULL: off
    void* agree_ctx;
    bool idle;            // lockstep: this batch only steps with the other ranks (t5_generator_set_lockstep_idle)
    bool qkv_fused;  // every decoder block's q, k, v weights are adjacent: one (3 HD, D) projection
    bool fused;      // fused decoder step (decode_fused.cuh): add+norm and one attention kernel per sublayer
    bool dev_beam;   // beam search: running beams chosen on the device (decode_beam_select), histories in d_hist
    int gemv_rows;   // fused step: projections at <= gemv_rows rows by decode_gemv (bf16/fp16; 0 = off, see below)
    GenGraph graphs[GEN_MAX_GRAPHS];
    uint64_t graph_clock;

    // ---- device (one arena)
    int* e_ids;           // (B, Ts) int32
    int* e_mask[2];       // (B, Ts) int32 key mask; two buffers for compaction
    int* buckets_enc;     // (2*max_Ts-1) int32
    int* buckets_dec;     // (2*Tmax-1) int32
    int relo_enc, relo_dec;
    float* bias_enc;      // (H, Ts, Ts) fp32
    float* e_x;           // (B*Ts, D) fp32 residual
    void* e_ln;           // (B*Ts, D) X
    float* e_rstd;        // (B*Ts) fp32
    void *e_q, *e_k, *e_v;  // (B, H, Ts, Dk) X
    float* e_scores;      // (B, H, Ts, Ts) fp32
    void* e_sx;           // (B, H, Ts, Ts) X: Q K^T rounded, then the probabilities
    void* e_lin;          // (B*Ts, max(HD, D)) X
    void* e_ctx;          // (B*Ts, HD) X
    void *e_ffa, *e_ffb;  // (B*Ts, F) X
    float* e_out32;       // (B*Ts, D) fp32 final norm output
    void* e_out;          // (B*Ts, D) X
    void** ck[2];         // [gen][Ld] -> (B, H, Ts, Dk) X cross-attention keys
    void** cv[2];         // [gen][Ld] -> (B, H, Ts, Dk) X
    void** sk[2];         // [gen][Ld] -> (R, H, Tmax, Dk) X self-attention key cache
    void** sv[2];         // [gen][Ld] -> (R, H, Tmax, Dk) X
    int* d_tok;           // (R) int32 decoder input tokens
    int* d_tok2;          // (R) int32 scratch for compaction
    int* d_pos;           // (1) int32 position t of the current step
    int* d_seq;           // (B, ML) int32 greedy output sequences (by batch item)
    int* d_fin;           // (B) int32 greedy finished flags (by batch item)
    int* d_slot;          // (R) int32 greedy: batch item of each row, -1 padding
    int* d_gidx;          // (R) int32 row gather indices
    int* d_iidx;          // (B) int32 slot gather indices
    int* d_hist;          // (R, Tmax) int32 device beam search: cache row holding position j of row r
    float* d_score;       // (R) fp32 running beam scores
    float* bias_dec;      // (H, 1, Tmax) fp32
    float* d_x;           // (R, D) fp32
    void* d_ln;           // (R, D) X
    float* d_rstd;        // (R) fp32
    void *d_q, *d_qs, *d_k, *d_v;  // (R, HD) X
    void* d_qkv;          // (R, 3, HD) X fused self-attention projection
    float* d_scores;      // (R*H*max(Tmax, Ts)) fp32
    void* d_sx;           // same, X
    void* d_probs;        // same, X
    void *d_ctx, *d_ctxh; // (R, HD) X
    void* d_lin;          // (R, max(D, HD)) X
    void *d_ffa, *d_ffb;  // (R, F) X
    float* d_lm32;        // (R, D) fp32
    void* d_lmx;          // (R, D) X
    void* d_logits;       // (R, V) X
    float* d_topv;        // (R, K) fp32
    int* d_topi;          // (R, K) int32
    void* arena;
    size_t arena_bytes, kv_bytes;

    // ---- host (pinned where copied each step)
    float* h_topv;  // (R, K)
    int* h_topi;    // (R, K)
    int* h_tok;     // (R)
    int* h_gidx;    // (R)
    int* h_iidx;    // (B)
    float* h_score; // (R)
    int* h_posarr;  // (ML) 0, 1, ..., ML - 1: the d_pos upload source (constant, so async copies never race)
    int* h_seq;     // (B, ML)
    int* h_fin;     // (B)
    int* h_slot;    // (R)
    int* h_hist_id; // (R, Tmax) row r = r, r, ... (d_hist reset); device beam search only
    float* h_ringv; // (GEN_BEAM_RING, R, K) top-k values of the steps in flight (device beam search)
    int* h_ringi;   // (GEN_BEAM_RING, R, K)
    cudaEvent_t ev_ring[GEN_BEAM_RING];
    cudaEvent_t ev[4];
    cudaEvent_t ev_chk;  // greedy: the finished flags' read-back
    GenerateStats stats;
};

// ---------------------------------------------------------------------------------------------
// memory layout: one arena; a first pass with base == NULL measures it

typedef struct {
    char* base;
    size_t used;
} GenArena;

static void* take(GenArena* a, size_t bytes) {
    size_t off = a->used;
    a->used += CEIL_DIV(bytes ? bytes : 1, (size_t)256) * 256;
    return a->base ? a->base + off : NULL;
}

typedef struct {
    int D, H, Dk, HD, F, V, Ld, B, Ts, R, Tmax, K, ML;
    size_t xs;
    bool gated;
} GenDims;

static void gen_layout(T5Generator* G, const GenDims* d, GenArena* a, size_t* kv_bytes) {
    const size_t xs = d->xs, Ns = (size_t)d->B * d->Ts, R = (size_t)d->R;
    const int HD = d->HD, D = d->D, H = d->H;
    T5Generator dummy;
    if (!G) {
        memset(&dummy, 0, sizeof dummy);
        G = &dummy;
    }
    G->e_ids = take(a, Ns * 4);
    G->e_mask[0] = take(a, Ns * 4);
    G->e_mask[1] = take(a, Ns * 4);
    G->buckets_enc = take(a, (size_t)relpos_table_len(d->Ts) * 4);
    G->buckets_dec = take(a, (size_t)relpos_table_len(d->Tmax) * 4);
    G->bias_enc = take(a, (size_t)H * d->Ts * d->Ts * 4);
    G->e_x = take(a, Ns * D * 4);
    G->e_ln = take(a, Ns * D * xs);
    G->e_rstd = take(a, Ns * 4);
    G->e_q = take(a, Ns * HD * xs);
    G->e_k = take(a, Ns * HD * xs);
    G->e_v = take(a, Ns * HD * xs);
    G->e_scores = take(a, (size_t)d->B * H * d->Ts * d->Ts * 4);
    G->e_sx = take(a, (size_t)d->B * H * d->Ts * d->Ts * xs);
    G->e_lin = take(a, Ns * T5_MAX(HD, D) * xs);
    G->e_ctx = take(a, Ns * HD * xs);
    G->e_ffa = take(a, Ns * d->F * xs);
    G->e_ffb = d->gated ? take(a, Ns * d->F * xs) : NULL;
    G->e_out32 = take(a, Ns * D * 4);
    G->e_out = take(a, Ns * D * xs);
    size_t kv0 = a->used;
    for (int g = 0; g < 2; g++)
        for (int l = 0; l < d->Ld; l++) {
            void* p1 = take(a, Ns * HD * xs);
            void* p2 = take(a, Ns * HD * xs);
            void* p3 = take(a, R * HD * d->Tmax * xs);
            void* p4 = take(a, R * HD * d->Tmax * xs);
            if (G != &dummy) {
                G->ck[g][l] = p1;
                G->cv[g][l] = p2;
                G->sk[g][l] = p3;
                G->sv[g][l] = p4;
            }
        }
    if (kv_bytes) *kv_bytes = a->used - kv0;
    G->d_tok = take(a, R * 4);
    G->d_tok2 = take(a, R * 4);
    G->d_pos = take(a, 4);
    G->d_seq = take(a, (size_t)d->B * d->ML * 4);
    G->d_fin = take(a, (size_t)d->B * 4);
    G->d_slot = take(a, R * 4);
    G->d_gidx = take(a, R * 4);
    G->d_iidx = take(a, (size_t)d->B * 4);
    G->d_hist = take(a, R * d->Tmax * 4);
    G->d_score = take(a, R * 4);
    G->bias_dec = take(a, (size_t)H * d->Tmax * 4);
    G->d_x = take(a, R * D * 4);
    G->d_ln = take(a, R * D * xs);
    G->d_rstd = take(a, R * 4);
    G->d_q = take(a, R * HD * xs);
    G->d_qs = take(a, R * HD * xs);
    G->d_k = take(a, R * HD * xs);
    G->d_v = take(a, R * HD * xs);
    G->d_qkv = take(a, R * 3 * HD * xs);
    size_t sc = R * H * (size_t)T5_MAX(d->Tmax, d->Ts);
    G->d_scores = take(a, sc * 4);
    G->d_sx = take(a, sc * xs);
    G->d_probs = take(a, sc * xs);
    G->d_ctx = take(a, R * HD * xs);
    G->d_ctxh = take(a, R * HD * xs);
    G->d_lin = take(a, R * T5_MAX(D, HD) * xs);
    G->d_ffa = take(a, R * d->F * xs);
    G->d_ffb = d->gated ? take(a, R * d->F * xs) : NULL;
    G->d_lm32 = take(a, R * D * 4);
    G->d_lmx = take(a, R * D * xs);
    G->d_logits = take(a, R * d->V * xs);
    G->d_topv = take(a, R * d->K * 4);
    G->d_topi = take(a, R * d->K * 4);
}

static GenDims gen_dims(const T5Config* c, DType dtype, int max_B, int max_Ts, const GenerateOptions* opt) {
    GenDims d;
    d.D = c->d_model;
    d.H = c->num_heads;
    d.Dk = c->d_kv;
    d.HD = c->num_heads * c->d_kv;
    d.F = c->d_ff;
    d.V = c->vocab_size;
    d.Ld = c->num_decoder_layers;
    d.B = max_B;
    d.Ts = max_Ts;
    d.R = max_B * opt->num_beams;
    d.Tmax = (int)CEIL_DIV((size_t)(opt->max_length - 1), (size_t)GEN_TK_ROUND) * GEN_TK_ROUND;
    d.K = opt->num_beams > 1 ? 2 * opt->num_beams : 1;
    d.ML = opt->max_length;
    d.xs = dtype_size(dtype);
    d.gated = c->feed_forward == T5_FF_GATED_GELU;
    return d;
}

size_t t5_generator_bytes(const T5Config* cfg, DType dtype, int max_B, int max_Ts, const GenerateOptions* opt,
                          size_t* kv_bytes) {
    GenDims d = gen_dims(cfg, dtype, max_B, max_Ts, opt);
    GenArena a = {0};
    gen_layout(NULL, &d, &a, kv_bytes);
    return a.used;
}

static double gib(size_t b) { return (double)b / (double)(1ull << 30); }

T5Generator* t5_generator_create(const ParamTable* t, ZeroEngine* Z, int max_B, int max_Ts,
                                 const GenerateOptions* opt, char* err, size_t errlen) {
    if (generate_options_check(opt, err, errlen)) return NULL;
    if (max_B < 1 || max_Ts < 1) {
        snprintf(err, errlen, "generation batch shape (B %d, Ts %d) must be positive", max_B, max_Ts);
        return NULL;
    }
    const T5Config* c = &t->cfg;
    const DType X = zero_working_dtype(Z);
    if ((int64_t)max_B * opt->num_beams > (1 << 24)) {
        snprintf(err, errlen, "generation batch %d x %d beams is too large", max_B, opt->num_beams);
        return NULL;
    }
    GenDims d = gen_dims(c, X, max_B, max_Ts, opt);
    size_t kv = 0;
    GenArena a = {0};
    gen_layout(NULL, &d, &a, &kv);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // T5's relative positions put no limit on the length: memory does. Keep 256 MiB for cuBLASLt and friends.
    const size_t reserve = (size_t)256 << 20;
    if (a.used + reserve > free_b) {
        snprintf(err, errlen,
                 "generation with max_length %d, %d beam(s), eval batch %d and sources up to %d tokens needs %.2f GiB "
                 "of GPU memory (KV caches %.2f GiB: %d decoder blocks x 2 x (%d x %d cached positions + %d x %d "
                 "source positions) x %d x %zu bytes), but only %.2f GiB are free: lower generation_max_length, "
                 "num_beams or per_device_eval_batch_size",
                 opt->max_length, opt->num_beams, max_B, max_Ts, gib(a.used), gib(kv), d.Ld, d.R, d.Tmax, max_B,
                 max_Ts, d.HD, d.xs, gib(free_b > reserve ? free_b - reserve : 0));
        return NULL;
    }
    T5Generator* G = calloc_check(1, sizeof *G);
    G->t = t;
    G->Z = Z;
    G->opt = *opt;
    G->X = X;
    G->xs = dtype_size(X);
    G->D = c->d_model;
    G->H = c->num_heads;
    G->Dk = c->d_kv;
    G->HD = c->num_heads * c->d_kv;
    G->F = c->d_ff;
    G->V = c->vocab_size;
    G->L = c->num_layers;
    G->Ld = c->num_decoder_layers;
    G->NB = c->relative_attention_num_buckets;
    G->max_dist = c->relative_attention_max_distance;
    G->eps = c->layer_norm_epsilon;
    G->gated = c->feed_forward == T5_FF_GATED_GELU;
    G->tied = c->tie_word_embeddings;
    G->scale_out = c->scale_decoder_outputs;
    G->pad_id = c->pad_token_id;
    G->eos_id = c->eos_token_id;
    G->start_id = c->decoder_start_token_id;
    // HF _beam_search: output_fill_value = pad_token_id or eos_token_id[0] (a pad id of 0 is falsy in Python)
    G->fill_id = c->pad_token_id ? c->pad_token_id : c->eos_token_id;
    G->max_B = max_B;
    G->max_Ts = max_Ts;
    G->nb = opt->num_beams;
    G->max_R = d.R;
    G->Tmax = d.Tmax;
    G->K = d.K;
    G->enc_idx = calloc_check((size_t)G->L, sizeof(BlockParamIdx));
    G->dec_idx = calloc_check((size_t)G->Ld, sizeof(BlockParamIdx));
    for (int l = 0; l < G->L; l++) params_block_index(t, STACK_ENCODER, l, &G->enc_idx[l]);
    for (int l = 0; l < G->Ld; l++) params_block_index(t, STACK_DECODER, l, &G->dec_idx[l]);
    G->p_embed = params_find(t, ROLE_EMBED, STACK_NONE, -1);
    G->p_lm_head = G->tied ? G->p_embed : params_find(t, ROLE_LM_HEAD, STACK_NONE, -1);
    G->p_enc_final = params_find(t, ROLE_FINAL_LN, STACK_ENCODER, -1);
    G->p_dec_final = params_find(t, ROLE_FINAL_LN, STACK_DECODER, -1);
    G->qkv_fused = true;
    for (int l = 0; l < G->Ld; l++) {
        const ParamDesc* P = t->params;
        const BlockParamIdx* b = &G->dec_idx[l];
        const size_t n = (size_t)G->HD * G->D;
        G->qkv_fused = G->qkv_fused && P[b->k].unit == P[b->q].unit && P[b->v].unit == P[b->q].unit &&
                       P[b->k].offset == P[b->q].offset + n && P[b->v].offset == P[b->k].offset + n;
    }
    G->u_shared = params_unit_shared(t);
    G->u_final = params_unit_final_norms(t);
    G->u_lm = G->tied ? G->u_shared : params_unit_lm_head(t);
    for (int g = 0; g < 2; g++) {
        G->ck[g] = calloc_check((size_t)G->Ld, sizeof(void*));
        G->cv[g] = calloc_check((size_t)G->Ld, sizeof(void*));
        G->sk[g] = calloc_check((size_t)G->Ld, sizeof(void*));
        G->sv[g] = calloc_check((size_t)G->Ld, sizeof(void*));
    }
    if (cudaMalloc(&G->arena, a.used) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen,
                 "out of GPU memory for generation: %.2f GiB needed (KV caches %.2f GiB) for max_length %d, %d "
                 "beam(s), batch %d, sources up to %d tokens; %.2f GiB free",
                 gib(a.used), gib(kv), opt->max_length, opt->num_beams, max_B, max_Ts, gib(free_b));
        t5_generator_destroy(G);
        return NULL;
    }
    G->arena_bytes = a.used;
    G->kv_bytes = kv;
    // stale cache positions are masked (probability 0) but must be finite: 0 * NaN would poison P V
    CUDA_CHECK(cudaMemset(G->arena, 0, a.used));
    a = (GenArena){.base = G->arena};
    gen_layout(G, &d, &a, NULL);

    int nbe = relpos_table_len(max_Ts), nbd = relpos_table_len(G->Tmax);
    int* h = malloc_check((size_t)T5_MAX(nbe, nbd) * sizeof(int));
    G->relo_enc = relpos_bucket_table(h, max_Ts, true, G->NB, G->max_dist);
    CUDA_CHECK(cudaMemcpy(G->buckets_enc, h, (size_t)nbe * sizeof(int), cudaMemcpyHostToDevice));
    G->relo_dec = relpos_bucket_table(h, G->Tmax, false, G->NB, G->max_dist);
    CUDA_CHECK(cudaMemcpy(G->buckets_dec, h, (size_t)nbd * sizeof(int), cudaMemcpyHostToDevice));
    free(h);
    CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream uploads landed before any (non-blocking) stream uses them

    const size_t R = (size_t)G->max_R, K = (size_t)G->K;
    CUDA_CHECK(cudaMallocHost((void**)&G->h_topv, R * K * sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_topi, R * K * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_tok, R * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_gidx, R * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_iidx, (size_t)max_B * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_score, R * sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_posarr, (size_t)opt->max_length * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_seq, (size_t)max_B * opt->max_length * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_fin, (size_t)max_B * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&G->h_slot, R * sizeof(int)));
    for (int i = 0; i < opt->max_length; i++) G->h_posarr[i] = i;
    const char* ge = getenv("T5TRAIN_GEN_GRAPHS");
    G->use_graphs = !(ge && strcmp(ge, "0") == 0);
    // fused decoder step unless T5TRAIN_GEN_FUSED=0 or the attention rows do not fit the fused kernel's shared memory
    const char* fe = getenv("T5TRAIN_GEN_FUSED");
    G->fused = !(fe && strcmp(fe, "0") == 0) && decode_attention_fits(1, G->Dk, G->Tmax) &&
               decode_attention_fits(G->nb, G->Dk, max_Ts);
    // decode_gemv for steps of <= 32 rows (t5-3b, H200, docs/generate.md run 9: batch-4 beam-4 step 2.03 ms against
    // 2.32 with cuBLASLt, batch-32 greedy 2.40 against 2.53); T5TRAIN_GEN_GEMV=0 turns it off (cuBLASLt), =1 takes
    // it up to 8 rows, =3 up to 16
    const char* gv = getenv("T5TRAIN_GEN_GEMV");
    G->gemv_rows = !gv ? 32 : strcmp(gv, "0") == 0 ? 0 : strcmp(gv, "1") == 0 ? 8 : strcmp(gv, "3") == 0 ? 16 : 32;
    // beam search without a host synchronisation per step unless T5TRAIN_GEN_DEVICE_BEAM=0
    const char* be = getenv("T5TRAIN_GEN_DEVICE_BEAM");
    G->dev_beam = !(be && strcmp(be, "0") == 0) && G->fused && G->nb > 1 && G->nb <= GEN_DEV_BEAM_MAX &&
                  decode_beam_select_fits(G->nb, G->Tmax);
    if (G->dev_beam) {
        CUDA_CHECK(cudaMallocHost((void**)&G->h_hist_id, R * G->Tmax * sizeof(int)));
        for (size_t r = 0; r < R; r++)
            for (int j = 0; j < G->Tmax; j++) G->h_hist_id[r * G->Tmax + j] = (int)r;
        CUDA_CHECK(cudaMallocHost((void**)&G->h_ringv, GEN_BEAM_RING * R * K * sizeof(float)));
        CUDA_CHECK(cudaMallocHost((void**)&G->h_ringi, GEN_BEAM_RING * R * K * sizeof(int)));
        for (int i = 0; i < GEN_BEAM_RING; i++)
            CUDA_CHECK(cudaEventCreateWithFlags(&G->ev_ring[i], cudaEventDisableTiming));
    }
    for (int i = 0; i < 4; i++) CUDA_CHECK(cudaEventCreate(&G->ev[i]));
    CUDA_CHECK(cudaEventCreateWithFlags(&G->ev_chk, cudaEventDisableTiming));
    matmul_init();
    return G;
}

void t5_generator_destroy(T5Generator* G) {
    if (!G) return;
    if (G->arena) cudaFree(G->arena);
    if (G->h_topv) cudaFreeHost(G->h_topv);
    if (G->h_topi) cudaFreeHost(G->h_topi);
    if (G->h_tok) cudaFreeHost(G->h_tok);
    if (G->h_gidx) cudaFreeHost(G->h_gidx);
    if (G->h_iidx) cudaFreeHost(G->h_iidx);
    if (G->h_score) cudaFreeHost(G->h_score);
    if (G->h_posarr) cudaFreeHost(G->h_posarr);
    if (G->h_seq) cudaFreeHost(G->h_seq);
    if (G->h_fin) cudaFreeHost(G->h_fin);
    if (G->h_slot) cudaFreeHost(G->h_slot);
    if (G->h_hist_id) cudaFreeHost(G->h_hist_id);
    if (G->h_ringv) cudaFreeHost(G->h_ringv);
    if (G->h_ringi) cudaFreeHost(G->h_ringi);
    for (int i = 0; i < GEN_BEAM_RING; i++)
        if (G->ev_ring[i]) cudaEventDestroy(G->ev_ring[i]);
    for (int i = 0; i < GEN_MAX_GRAPHS; i++)
        if (G->graphs[i].captured) cudaGraphExecDestroy(G->graphs[i].exec);
    for (int i = 0; i < 4; i++)
        if (G->ev[i]) cudaEventDestroy(G->ev[i]);
    if (G->ev_chk) cudaEventDestroy(G->ev_chk);
    for (int g = 0; g < 2; g++) {
        free(G->ck[g]);
        free(G->cv[g]);
        free(G->sk[g]);
        free(G->sv[g]);
    }
    free(G->enc_idx);
    free(G->dec_idx);
    free(G);
}

const GenerateStats* t5_generator_stats(const T5Generator* G) { return &G->stats; }
void t5_generator_reset_stats(T5Generator* G) { memset(&G->stats, 0, sizeof G->stats); }
void t5_generator_set_cuda_graphs(T5Generator* G, bool on) { G->use_graphs = on; }
void t5_generator_set_fixed_checks(T5Generator* G, bool on) { G->fixed_checks = on; }
void t5_generator_set_lockstep(T5Generator* G, T5GenAgreeFn agree, void* ctx) {
    G->agree = agree;
    G->agree_ctx = ctx;
}

void t5_generator_set_lockstep_idle(T5Generator* G, bool idle) { G->idle = idle; }

// lockstep: the ranks' maximum vote (t5_generator_set_lockstep)
static int gen_agree(T5Generator* G, int vote) {
    G->stats.agreements++;
    return G->agree(G->agree_ctx, vote);
}

// ---------------------------------------------------------------------------------------------
// helpers

static inline void* wp(const T5Generator* G, void* wb, int pidx) {
    return (char*)wb + G->t->params[pidx].offset * G->xs;
}
// fp32 weights of a non-GEMM op (norm weight, bias table, embedding lookup): HF autocast uses fp32 params there
static inline const float* nwp(const T5Generator* G, int pidx) {
    return zero_fp32_tensor(G->Z, G->cur_unit, G->t->params[pidx].offset);
}

static void* unit_fetch(T5Generator* G, int unit, cudaStream_t s) {
    void* wb = zero_fetch(G->Z, unit, s);
    G->cur_unit = unit;
    // (the fp32 views never move: the working-weight pointer alone tells whether a captured graph is still valid)
    G->fetch_sig = (G->fetch_sig ^ (uint64_t)(uintptr_t)wb) * 0x100000001b3ull;
    return wb;
}

static void bmm(void* d, DType dt_d, const void* a, bool ta, const void* b, bool tb, DType dt_ab, int batch, int m,
                int n, int k, int64_t sa, int64_t sb, int64_t sd, cudaStream_t s) {
    GemmDesc g = {.M = m, .N = n, .K = k, .trans_a = ta, .trans_b = tb, .dt_ab = dt_ab, .dt_d = dt_d,
                  .batch = batch, .stride_a = sa, .stride_b = sb, .stride_d = sd, .alpha = 1.0f, .beta = 0.0f,
                  .epilogue = GEMM_EPI_NONE};
    matmul(&g, d, a, b, s);
}

// S (batch, m, n) fp32 = A B^T with t5.c's rounding: X output then fp32 (HF autocast), fp32 directly in fp32 runs
static void scores_gemm(T5Generator* G, float* S, void* Sx, const void* A, const void* Bm, int batch, int m, int n,
                        int k, int64_t sa, int64_t sb, cudaStream_t s) {
    if (G->X == DT_F32) {
        bmm(S, DT_F32, A, false, Bm, true, DT_F32, batch, m, n, k, sa, sb, (int64_t)m * n, s);
    } else {
        // NOTE(numerics): as t5.c (and HF autocast), Q K^T is rounded to X; bias and masks are added in fp32
        bmm(Sx, G->X, A, false, Bm, true, G->X, batch, m, n, k, sa, sb, (int64_t)m * n, s);
        cast(S, DT_F32, Sx, G->X, (size_t)batch * m * n, s);
    }
}

// decoder attention probabilities d_probs (batch, m, n) X = softmax(A B^T + bias + masks): the scores are rounded to
// X as in scores_gemm, and the softmax reads them in X directly (the fp32 copy scores_gemm makes holds the same
// values). bias (H, m, n) fp32 or NULL, mask (Bq, n) int32 or NULL; batch = Bq * H.
static void step_scores_softmax(T5Generator* G, const void* A, const void* Bm, int batch, int m, int n, int k,
                                int64_t sa, int64_t sb, const float* bias, const int* mask, int Bq, int H,
                                cudaStream_t s) {
    const DType X = G->X;
    if (X == DT_F32) {
        bmm(G->d_scores, DT_F32, A, false, Bm, true, DT_F32, batch, m, n, k, sa, sb, (int64_t)m * n, s);
        attention_softmax_forward_ex(G->d_probs, X, G->d_probs, X, G->d_scores, DT_F32, bias, mask, false, 0, Bq, H,
                                     m, n, 0.0f, 0, 0, s);
    } else {
        // NOTE(numerics): as t5.c (and HF autocast), Q K^T is rounded to X; bias and masks are added in fp32
        bmm(G->d_sx, X, A, false, Bm, true, X, batch, m, n, k, sa, sb, (int64_t)m * n, s);
        attention_softmax_forward_ex(G->d_probs, X, G->d_probs, X, G->d_sx, X, bias, mask, false, 0, Bq, H, m, n,
                                     0.0f, 0, 0, s);
    }
}

// feed-forward sublayer on N rows: x (N, D) fp32 += wo(act(rmsnorm(x) Wi^T))
static void ff_forward(T5Generator* G, void* wb, const BlockParamIdx* pi, float* x, void* ln, float* rstd, void* fa,
                       void* fb, void* lin, int N, cudaStream_t s) {
    const DType X = G->X;
    const int D = G->D, F = G->F;
    rmsnorm_forward(ln, X, rstd, x, nwp(G, pi->ffln), DT_F32, N, D, G->eps, s);
    if (G->gated) {
        linear_forward(fa, X, ln, wp(G, wb, pi->wi0), X, N, F, D, s);
        linear_forward(fb, X, ln, wp(G, wb, pi->wi1), X, N, F, D, s);
        gated_gelu_forward(fa, fa, fb, X, (size_t)N * F, s);
    } else {
        // ReLU in the GEMM epilogue, as model/t5.c (on the fp32 accumulator, then one rounding: the same values)
        GemmDesc g = {.M = N, .N = F, .K = D, .trans_a = false, .trans_b = true, .dt_ab = X, .dt_d = X, .batch = 1,
                      .alpha = 1.0f, .beta = 0.0f, .epilogue = GEMM_EPI_RELU};
        matmul(&g, fa, ln, wp(G, wb, pi->wi), s);
    }
    linear_forward(lin, X, fa, wp(G, wb, pi->wo), X, N, D, F, s);
    residual_dropout_add(x, lin, X, (size_t)N * D, 0.0f, 0, 0, s);
}

// ---------------------------------------------------------------------------------------------
// encoder (once per batch) and the cross-attention K/V of every decoder block

static void encoder_forward(T5Generator* G, int B, int Ts, const int* mask, int gen, cudaStream_t s) {
    const DType X = G->X;
    const int D = G->D, H = G->H, Dk = G->Dk, HD = G->HD, N = B * Ts;
    const int64_t sQ = (int64_t)Ts * Dk, sS = (int64_t)Ts * Ts;
    ZeroEngine* Z = G->Z;
    unit_fetch(G, G->u_shared, s);
    embedding_forward(G->e_x, G->e_ids, nwp(G, G->p_embed), DT_F32, N, D, s);
    zero_release(Z, G->u_shared, s);
    for (int l = 0; l < G->L; l++) {
        const BlockParamIdx* pi = &G->enc_idx[l];
        int u = params_unit_enc_block(G->t, l);
        void* wb = unit_fetch(G, u, s);
        if (l == 0)
            position_bias_forward(G->bias_enc, nwp(G, pi->relbias), DT_F32, G->buckets_enc, G->relo_enc, G->NB, H, Ts,
                                  Ts, 0, s);
        rmsnorm_forward(G->e_ln, X, G->e_rstd, G->e_x, nwp(G, pi->ln), DT_F32, N, D, G->eps, s);
        linear_forward(G->e_lin, X, G->e_ln, wp(G, wb, pi->q), X, N, HD, D, s);
        split_heads(G->e_q, G->e_lin, X, B, Ts, H, Dk, s);
        linear_forward(G->e_lin, X, G->e_ln, wp(G, wb, pi->k), X, N, HD, D, s);
        split_heads(G->e_k, G->e_lin, X, B, Ts, H, Dk, s);
        linear_forward(G->e_lin, X, G->e_ln, wp(G, wb, pi->v), X, N, HD, D, s);
        split_heads(G->e_v, G->e_lin, X, B, Ts, H, Dk, s);
        scores_gemm(G, G->e_scores, G->e_sx, G->e_q, G->e_k, B * H, Ts, Ts, Dk, sQ, sQ, s);
        attention_softmax_forward(G->e_sx, G->e_sx, X, G->e_scores, G->bias_enc, mask, false, 0, B, H, Ts, Ts, 0.0f,
                                  0, 0, s);
        bmm(G->e_lin, X, G->e_sx, false, G->e_v, false, X, B * H, Ts, Dk, Ts, sS, sQ, sQ, s);
        merge_heads(G->e_ctx, G->e_lin, X, B, Ts, H, Dk, s);
        linear_forward(G->e_lin, X, G->e_ctx, wp(G, wb, pi->o), X, N, D, HD, s);
        residual_dropout_add(G->e_x, G->e_lin, X, (size_t)N * D, 0.0f, 0, 0, s);
        ff_forward(G, wb, pi, G->e_x, G->e_ln, G->e_rstd, G->e_ffa, G->e_ffb, G->e_lin, N, s);
        zero_release(Z, u, s);
    }
    unit_fetch(G, G->u_final, s);
    rmsnorm_forward(G->e_out32, DT_F32, G->e_rstd, G->e_x, nwp(G, G->p_enc_final), DT_F32, N, D, G->eps, s);
    zero_release(Z, G->u_final, s);
    cast(G->e_out, X, G->e_out32, DT_F32, (size_t)N * D, s);
    // cross-attention keys and values of every decoder block, (B, H, Ts, Dk), once per batch
    for (int l = 0; l < G->Ld; l++) {
        const BlockParamIdx* pi = &G->dec_idx[l];
        int u = params_unit_dec_block(G->t, l);
        void* wb = unit_fetch(G, u, s);
        linear_forward(G->e_lin, X, G->e_out, wp(G, wb, pi->ck), X, N, HD, D, s);
        split_heads(G->ck[gen][l], G->e_lin, X, B, Ts, H, Dk, s);
        linear_forward(G->e_lin, X, G->e_out, wp(G, wb, pi->cv), X, N, HD, D, s);
        split_heads(G->cv[gen][l], G->e_lin, X, B, Ts, H, Dk, s);
        zero_release(Z, u, s);
    }
}

// ---------------------------------------------------------------------------------------------
// one decoder step over R = I * nb rows at position t = *d_pos (t < Tk) -> logits (R, V) X. Nothing here depends
// on t on the host, so the step can be captured once per (I, Ts, Tk, buffers) and replayed.

// The fused step (G->fused): per block 11 kernels instead of ~20: the residual add of a sublayer and the next
// sublayer's RMSNorm are one kernel (decode_add_rmsnorm; the feed-forward's add is done by the next block's first
// norm, the last one by the final norm with the tied-embedding scale and the cast to X), and each attention is one
// kernel (decode_attention: scores, bias / mask, softmax, P V; the self-attention one also appends the new key and
// value to the cache). The keys attended are [0, t] read from d_pos, so the step does not depend on Tk at all.
// out (M, N) X = [relu](in (M, K) X . w (N, K) X ^T): decode_gemv at <= 8 rows (memory-bound), else cuBLASLt
static void step_proj(T5Generator* G, void* out, const void* in, const void* w, int M, int N, int K, bool relu,
                      cudaStream_t s) {
    if (M <= G->gemv_rows && decode_gemv_supported(G->X, M, N, K, out, in, w)) {
        decode_gemv(out, in, w, G->X, M, N, K, relu, s);
        return;
    }
    GemmDesc g = {.M = M, .N = N, .K = K, .trans_a = false, .trans_b = true, .dt_ab = G->X, .dt_d = G->X, .batch = 1,
                  .alpha = 1.0f, .beta = 0.0f, .epilogue = relu ? GEMM_EPI_RELU : GEMM_EPI_NONE};
    matmul(&g, out, in, w, s);
}

// the attention variant of the self / cross sublayer: DA_IMPL_AUTO (cuda/decode_fused.cu picks by shape), or forced
// by T5TRAIN_GEN_ATTN_SELF / T5TRAIN_GEN_ATTN_CROSS = split|split1|wide|block|warp|bulk (for A/B measurements; read
// once; bulk is cross-attention only: forced on the self sublayer it falls back to the automatic choice)
static DecodeAttnImpl gen_attn_impl(int cross) {
    static int cached[2] = {-1, -1};
    if (cached[cross] < 0)
        cached[cross] = decode_attention_impl_by_name(getenv(cross ? "T5TRAIN_GEN_ATTN_CROSS" : "T5TRAIN_GEN_ATTN_SELF"));
    return (DecodeAttnImpl)cached[cross];
}

static void decoder_step_fused(T5Generator* G, int I, int Ts, int sgen, int cgen, const int* mask, cudaStream_t s) {
    const DType X = G->X;
    const int nb = G->nb, R = I * nb, D = G->D, H = G->H, Dk = G->Dk, HD = G->HD, Tmax = G->Tmax;
    ZeroEngine* Z = G->Z;
    unit_fetch(G, G->u_shared, s);
    embedding_forward(G->d_x, G->d_tok, nwp(G, G->p_embed), DT_F32, R, D, s);
    zero_release(Z, G->u_shared, s);
    for (int l = 0; l < G->Ld; l++) {
        const BlockParamIdx* pi = &G->dec_idx[l];
        int u = params_unit_dec_block(G->t, l);
        void* wb = unit_fetch(G, u, s);
        // the new query row's position bias (H, Tmax) from block 0's table, shared by every block
        if (l == 0)
            decode_step_bias(G->bias_dec, nwp(G, pi->relbias), G->buckets_dec, G->relo_dec, H, Tmax, G->d_pos, s);
        // ---- self-attention with the cache (the previous block's feed-forward output is added here)
        decode_add_rmsnorm(G->d_ln, X, G->d_x, l > 0 ? G->d_lin : NULL, X, nwp(G, pi->ln), R, D, G->eps, 1.0f, s);
        const void *q, *kn, *vn;
        int qst;
        if (G->qkv_fused) {
            step_proj(G, G->d_qkv, G->d_ln, wp(G, wb, pi->q), R, 3 * HD, D, false, s);
            q = G->d_qkv;
            kn = (const char*)G->d_qkv + (size_t)HD * G->xs;
            vn = (const char*)G->d_qkv + (size_t)2 * HD * G->xs;
            qst = 3 * HD;
        } else {
            step_proj(G, G->d_q, G->d_ln, wp(G, wb, pi->q), R, HD, D, false, s);
            step_proj(G, G->d_k, G->d_ln, wp(G, wb, pi->k), R, HD, D, false, s);
            step_proj(G, G->d_v, G->d_ln, wp(G, wb, pi->v), R, HD, D, false, s);
            q = G->d_q;
            kn = G->d_k;
            vn = G->d_v;
            qst = HD;
        }
        decode_attention(G->d_ctx, q, qst, G->sk[sgen][l], G->sv[sgen][l], Tmax, G->d_pos, Tmax, Tmax, G->bias_dec,
                         Tmax, NULL, kn, vn, qst, G->dev_beam ? G->d_hist : NULL, Tmax, R, 1, H, Dk, X, gen_attn_impl(0),
                         s);
        step_proj(G, G->d_lin, G->d_ctx, wp(G, wb, pi->o), R, D, HD, false, s);
        // ---- cross-attention: the nb beams of an item share its encoder K/V
        decode_add_rmsnorm(G->d_ln, X, G->d_x, G->d_lin, X, nwp(G, pi->cln), R, D, G->eps, 1.0f, s);
        step_proj(G, G->d_q, G->d_ln, wp(G, wb, pi->cq), R, HD, D, false, s);
        decode_attention(G->d_ctx, G->d_q, HD, G->ck[cgen][l], G->cv[cgen][l], Ts, NULL, Ts, Ts, NULL, 0, mask, NULL,
                         NULL, 0, NULL, 0, I, nb, H, Dk, X, gen_attn_impl(1), s);
        step_proj(G, G->d_lin, G->d_ctx, wp(G, wb, pi->co), R, D, HD, false, s);
        // ---- feed-forward (its residual add is the next norm's)
        decode_add_rmsnorm(G->d_ln, X, G->d_x, G->d_lin, X, nwp(G, pi->ffln), R, D, G->eps, 1.0f, s);
        if (G->gated) {
            step_proj(G, G->d_ffa, G->d_ln, wp(G, wb, pi->wi0), R, G->F, D, false, s);
            step_proj(G, G->d_ffb, G->d_ln, wp(G, wb, pi->wi1), R, G->F, D, false, s);
            gated_gelu_forward(G->d_ffa, G->d_ffa, G->d_ffb, X, (size_t)R * G->F, s);
        } else {
            step_proj(G, G->d_ffa, G->d_ln, wp(G, wb, pi->wi), R, G->F, D, true, s);  // ReLU epilogue, as t5.c
        }
        step_proj(G, G->d_lin, G->d_ffa, wp(G, wb, pi->wo), R, D, G->F, false, s);
        zero_release(Z, u, s);
    }
    // last residual add + final norm (fp32) [* D^-0.5 when scale_out] rounded once to X: one kernel
    unit_fetch(G, G->u_final, s);
    decode_add_rmsnorm(G->d_lmx, X, G->d_x, G->d_lin, X, nwp(G, G->p_dec_final), R, D, G->eps,
                       G->scale_out ? 1.0f / sqrtf((float)D) : 1.0f, s);
    zero_release(Z, G->u_final, s);
    void* wb = unit_fetch(G, G->u_lm, s);
    step_proj(G, G->d_logits, G->d_lmx, wp(G, wb, G->p_lm_head), R, G->V, D, false, s);
    zero_release(Z, G->u_lm, s);
}

static void decoder_step(T5Generator* G, int I, int Ts, int Tk, int sgen, int cgen, const int* mask, cudaStream_t s) {
    const DType X = G->X;
    const int nb = G->nb, R = I * nb, D = G->D, H = G->H, Dk = G->Dk, HD = G->HD, Tmax = G->Tmax;
    const size_t xs = G->xs;
    ZeroEngine* Z = G->Z;
    unit_fetch(G, G->u_shared, s);
    embedding_forward(G->d_x, G->d_tok, nwp(G, G->p_embed), DT_F32, R, D, s);
    zero_release(Z, G->u_shared, s);
    for (int l = 0; l < G->Ld; l++) {
        const BlockParamIdx* pi = &G->dec_idx[l];
        int u = params_unit_dec_block(G->t, l);
        void* wb = unit_fetch(G, u, s);
        // the new query row's position bias (q_offset = t), from block 0's table, shared by every block; keys
        // above t get -inf (the causal rule)
        if (l == 0) decode_step_bias(G->bias_dec, nwp(G, pi->relbias), G->buckets_dec, G->relo_dec, H, Tk, G->d_pos, s);
        // ---- self-attention with the cache
        rmsnorm_forward(G->d_ln, X, G->d_rstd, G->d_x, nwp(G, pi->ln), DT_F32, R, D, G->eps, s);
        if (G->qkv_fused) {
            // one GEMM against the adjacent q, k, v weights (3 HD, D), then q out and k, v -> cache[r, h, t, :]
            linear_forward(G->d_qkv, X, G->d_ln, wp(G, wb, pi->q), X, R, 3 * HD, D, s);
            decode_qkv_append(G->d_q, G->sk[sgen][l], G->sv[sgen][l], G->d_qkv, R, H, Tmax, (size_t)Dk * xs,
                              G->d_pos, s);
        } else {
            linear_forward(G->d_q, X, G->d_ln, wp(G, wb, pi->q), X, R, HD, D, s);
            linear_forward(G->d_k, X, G->d_ln, wp(G, wb, pi->k), X, R, HD, D, s);
            linear_forward(G->d_v, X, G->d_ln, wp(G, wb, pi->v), X, R, HD, D, s);
            decode_cache_append(G->sk[sgen][l], G->sv[sgen][l], G->d_k, G->d_v, R * H, Tmax, (size_t)Dk * xs,
                                G->d_pos, s);
        }
        step_scores_softmax(G, G->d_q, G->sk[sgen][l], R * H, 1, Tk, Dk, Dk, (int64_t)Tmax * Dk, G->bias_dec, NULL,
                            R, H, s);
        // ctx (R*H, 1, Dk) = P V: already the merged (R, HD) layout
        bmm(G->d_ctx, X, G->d_probs, false, G->sv[sgen][l], false, X, R * H, 1, Dk, Tk, Tk, (int64_t)Tmax * Dk, Dk,
            s);
        linear_forward(G->d_lin, X, G->d_ctx, wp(G, wb, pi->o), X, R, D, HD, s);
        residual_dropout_add(G->d_x, G->d_lin, X, (size_t)R * D, 0.0f, 0, 0, s);
        // ---- cross-attention: the nb beams of an item share its encoder K/V
        rmsnorm_forward(G->d_ln, X, G->d_rstd, G->d_x, nwp(G, pi->cln), DT_F32, R, D, G->eps, s);
        linear_forward(G->d_q, X, G->d_ln, wp(G, wb, pi->cq), X, R, HD, D, s);
        // (I, nb, H, Dk) -> (I, H, nb, Dk); with one beam both layouts are the same
        if (nb > 1) split_heads(G->d_qs, G->d_q, X, I, nb, H, Dk, s);
        step_scores_softmax(G, nb > 1 ? G->d_qs : G->d_q, G->ck[cgen][l], I * H, nb, Ts, Dk, (int64_t)nb * Dk,
                            (int64_t)Ts * Dk, NULL, mask, I, H, s);
        bmm(nb > 1 ? G->d_ctxh : G->d_ctx, X, G->d_probs, false, G->cv[cgen][l], false, X, I * H, nb, Dk, Ts,
            (int64_t)nb * Ts, (int64_t)Ts * Dk, (int64_t)nb * Dk, s);
        if (nb > 1) merge_heads(G->d_ctx, G->d_ctxh, X, I, nb, H, Dk, s);
        linear_forward(G->d_lin, X, G->d_ctx, wp(G, wb, pi->co), X, R, D, HD, s);
        residual_dropout_add(G->d_x, G->d_lin, X, (size_t)R * D, 0.0f, 0, 0, s);
        // ---- feed-forward
        ff_forward(G, wb, pi, G->d_x, G->d_ln, G->d_rstd, G->d_ffa, G->d_ffb, G->d_lin, R, s);
        zero_release(Z, u, s);
    }
    unit_fetch(G, G->u_final, s);
    rmsnorm_forward(G->d_lm32, DT_F32, G->d_rstd, G->d_x, nwp(G, G->p_dec_final), DT_F32, R, D, G->eps, s);
    zero_release(Z, G->u_final, s);
    if (G->scale_out) scale_inplace(G->d_lm32, DT_F32, (size_t)R * D, 1.0f / sqrtf((float)D), s);
    cast(G->d_lmx, X, G->d_lm32, DT_F32, (size_t)R * D, s);
    void* wb = unit_fetch(G, G->u_lm, s);
    linear_forward(G->d_logits, X, G->d_lmx, wp(G, wb, G->p_lm_head), X, R, G->V, D, s);
    zero_release(Z, G->u_lm, s);
}

// ---------------------------------------------------------------------------------------------
// the whole device part of one step (decoder, top-k, greedy update), eager or as a CUDA graph
//
// First sight of a key (I, Ts, Tk, buffers, ban) runs eagerly (lazy one-time work: cuBLASLt plans); the second
// captures it (ThreadLocal mode: a call that cannot be captured fails the capture instead of running silently)
// and launches the graph; later ones replay it. The engine's fetch/release bookkeeping runs on the host around
// each replay and the pointers it returns must equal those captured (stage 0: fixed); otherwise the key is
// captured again.

static void step_body(T5Generator* G, int I, int Ts, int Tk, int sgen, int cgen, int ban, cudaStream_t s) {
    const int R = I * G->nb;
    const bool beam = G->nb > 1;
    if (G->fused) decoder_step_fused(G, I, Ts, sgen, cgen, G->e_mask[cgen], s);
    else decoder_step(G, I, Ts, Tk, sgen, cgen, G->e_mask[cgen], s);
    decode_topk(G->d_topv, G->d_topi, G->d_logits, G->X, R, G->V, G->K, beam, beam ? G->d_score : NULL, ban, s);
    if (!beam)
        decode_greedy_update(G->d_tok, G->d_seq, G->d_fin, G->d_slot, G->d_topi, R, G->opt.max_length, G->eos_id,
                             G->pad_id, G->d_pos, s);
    else if (G->dev_beam)
        decode_beam_select(G->d_tok, G->d_score, G->d_hist, G->Tmax, G->d_topv, G->d_topi, I, G->nb, G->K, G->V,
                           G->opt.max_length, G->eos_id, G->d_pos, s);
}

// the fetch/release sequence of decoder_step, for the pointer check before a replay
static uint64_t step_fetch_sig(T5Generator* G, cudaStream_t s) {
    G->fetch_sig = 0;
    unit_fetch(G, G->u_shared, s);
    zero_release(G->Z, G->u_shared, s);
    for (int l = 0; l < G->Ld; l++) {
        int u = params_unit_dec_block(G->t, l);
        unit_fetch(G, u, s);
        zero_release(G->Z, u, s);
    }
    unit_fetch(G, G->u_final, s);
    zero_release(G->Z, G->u_final, s);
    unit_fetch(G, G->u_lm, s);
    zero_release(G->Z, G->u_lm, s);
    return G->fetch_sig;
}

static void gen_step(T5Generator* G, int I, int Ts, int Tk, int sgen, int cgen, int ban, cudaStream_t s) {
    if (!G->use_graphs) {
        step_body(G, I, Ts, Tk, sgen, cgen, ban, s);
        return;
    }
    GenGraph* g = NULL;
    GenGraph* victim = &G->graphs[0];
    for (int i = 0; i < GEN_MAX_GRAPHS && !g; i++) {
        GenGraph* c = &G->graphs[i];
        if (c->used && c->I == I && c->Ts == Ts && c->Tk == Tk && c->sgen == sgen && c->cgen == cgen && c->ban == ban)
            g = c;
        else if (!c->used || (victim->used && c->last_use < victim->last_use))
            victim = c;
    }
    if (!g) {
        if (victim->captured) CUDA_CHECK(cudaGraphExecDestroy(victim->exec));
        *victim = (GenGraph){.used = true, .I = I, .Ts = Ts, .Tk = Tk, .sgen = sgen, .cgen = cgen, .ban = ban};
        g = victim;
    }
    g->last_use = ++G->graph_clock;
    if (!g->seen) {
        g->seen = true;
        step_body(G, I, Ts, Tk, sgen, cgen, ban, s);
        return;
    }
    if (g->captured && step_fetch_sig(G, s) != g->sig) {
        CUDA_CHECK(cudaGraphExecDestroy(g->exec));
        g->captured = false;
    }
    if (!g->captured) {
        cudaGraph_t graph;
        G->fetch_sig = 0;
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        step_body(G, I, Ts, Tk, sgen, cgen, ban, s);
        CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&g->exec, graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
        g->sig = G->fetch_sig;
        g->captured = true;
        G->stats.graphs_captured++;
    }
    CUDA_CHECK(cudaGraphLaunch(g->exec, s));
    G->stats.graph_steps++;
}

// the key bucket of step t (0 for the fused step, which reads the key count from d_pos: one graph for every t)
static int step_tk(const T5Generator* G, int t) {
    if (G->fused) return 0;
    return T5_MIN((int)CEIL_DIV((size_t)(t + 1), (size_t)GEN_TK_ROUND) * GEN_TK_ROUND, G->Tmax);
}

// ---------------------------------------------------------------------------------------------
// search bookkeeping (host)

typedef struct {
    float v;
    int key;  // flat index beam * V + token (or a position), the tie-break: lower first
} Cand;

static int cand_cmp(const void* a, const void* b) {
    const Cand *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->key > y->key) - (x->key < y->key);
}

// Python's `float(a) ** float(b)` rounded to fp32 and inverted in fp32: torch's CUDA division of a fp32 tensor by a
// Python scalar multiplies by the fp32 reciprocal (BinaryDivTrueKernel.cu, CPU-scalar branch).
static float inv_len_pen(int len, float lp) {
    float p = (float)pow((double)len, (double)lp);
    volatile float inv = 1.0f / p;
    return inv;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// self-attention caches of every block: gen 1 - sgen rows r <- gen sgen rows d_gidx[r], positions of copy_b bytes;
// one launch when the blocks' caches lie at a constant stride (they do: gen_layout carves equal sizes per block)
static void gather_self_cache(T5Generator* G, int sgen, int R, size_t row_b, size_t seg_b, size_t copy_b,
                              cudaStream_t s) {
    const int d = 1 - sgen;
    const ptrdiff_t kv = (char*)G->sv[sgen][0] - (char*)G->sk[sgen][0];
    const ptrdiff_t ls = G->Ld > 1 ? (char*)G->sk[sgen][1] - (char*)G->sk[sgen][0] : 0;
    bool regular = (char*)G->sv[d][0] - (char*)G->sk[d][0] == kv;
    for (int l = 0; l < G->Ld && regular; l++)
        for (int g = 0; g < 2; g++)
            regular = regular && (char*)G->sk[g][l] - (char*)G->sk[g][0] == (ptrdiff_t)l * ls &&
                      (char*)G->sv[g][l] - (char*)G->sk[g][l] == kv;
    if (regular) {
        decode_gather_rows_planes(G->sk[d][0], G->sk[sgen][0], G->d_gidx, R, G->H, row_b, seg_b, copy_b, G->Ld, ls, 2,
                                  kv, s);
        return;
    }
    for (int l = 0; l < G->Ld; l++) {
        decode_gather_rows(G->sk[d][l], G->sk[sgen][l], G->d_gidx, R, G->H, row_b, seg_b, copy_b, s);
        decode_gather_rows(G->sv[d][l], G->sv[sgen][l], G->d_gidx, R, G->H, row_b, seg_b, copy_b, s);
    }
}

// device beam search: self-attention caches of every block, gen 1 - sgen rows r <- gen sgen, position j < n_pos from
// row d_hist[d_gidx[r], j]
static void gather_self_cache_hist(T5Generator* G, int sgen, int R, int n_pos, cudaStream_t s) {
    const int d = 1 - sgen;
    const size_t pos_b = (size_t)G->Dk * G->xs;
    const ptrdiff_t kv = (char*)G->sv[sgen][0] - (char*)G->sk[sgen][0];
    const ptrdiff_t ls = G->Ld > 1 ? (char*)G->sk[sgen][1] - (char*)G->sk[sgen][0] : 0;
    bool regular = (char*)G->sv[d][0] - (char*)G->sk[d][0] == kv;
    for (int l = 0; l < G->Ld && regular; l++)
        for (int g = 0; g < 2; g++)
            regular = regular && (char*)G->sk[g][l] - (char*)G->sk[g][0] == (ptrdiff_t)l * ls &&
                      (char*)G->sv[g][l] - (char*)G->sk[g][l] == kv;
    if (regular) {
        decode_gather_hist(G->sk[d][0], G->sk[sgen][0], G->d_gidx, G->d_hist, G->Tmax, R, G->H, G->Tmax, pos_b, n_pos,
                           G->Ld, ls, 2, kv, s);
        return;
    }
    for (int l = 0; l < G->Ld; l++) {
        decode_gather_hist(G->sk[d][l], G->sk[sgen][l], G->d_gidx, G->d_hist, G->Tmax, R, G->H, G->Tmax, pos_b, n_pos,
                           1, 0, 1, 0, s);
        decode_gather_hist(G->sv[d][l], G->sv[sgen][l], G->d_gidx, G->d_hist, G->Tmax, R, G->H, G->Tmax, pos_b, n_pos,
                           1, 0, 1, 0, s);
    }
}

// Greedy search (HF _sample without sampling) kept on the device: decode_greedy_update writes each step's argmax
// into the next step's input, the output sequences and the finished flags, so the host only launches steps. It
// reads the flags back asynchronously (at most GEN_CHECK_LAG steps late) to stop once every row is finished and
// to compact the batch to the live rows; steps launched after the last row finished change nothing (finished
// rows write nothing), so the outputs are those of the synchronous loop.
static void generate_greedy(T5Generator* G, int B, int Ts, int32_t* out, int* out_len, cudaStream_t s) {
    const int ML = G->opt.max_length, H = G->H, Dk = G->Dk;
    const size_t xs = G->xs;
    for (int b = 0; b < B; b++) {
        for (int c = 0; c < ML; c++) G->h_seq[(size_t)b * ML + c] = c == 0 ? G->start_id : G->pad_id;
        G->h_slot[b] = b;
        G->h_tok[b] = G->start_id;
    }
    CUDA_CHECK(cudaMemcpyAsync(G->d_seq, G->h_seq, (size_t)B * ML * sizeof(int), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(G->d_slot, G->h_slot, (size_t)B * sizeof(int), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(G->d_tok, G->h_tok, (size_t)B * sizeof(int), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemsetAsync(G->d_fin, 0, (size_t)B * sizeof(int), s));
    int* slot_item = malloc_check((size_t)B * sizeof(int));  // batch item of each slot, -1 padding
    bool* done = calloc_check((size_t)B, sizeof(bool));       // as of the last flags read back
    int* new_slot_src = malloc_check((size_t)B * sizeof(int));
    for (int b = 0; b < B; b++) slot_item[b] = b;
    int I = B, cur_len = 1, sgen = 0;
    int64_t steps = 0, rows = 0, check_step = 0;
    bool pending = false;
    CUDA_CHECK(cudaEventRecord(G->ev[2], s));
    while (cur_len < ML) {
        const int t = cur_len - 1;
        CUDA_CHECK(cudaMemcpyAsync(G->d_pos, G->h_posarr + t, sizeof(int), cudaMemcpyHostToDevice, s));
        const int ban = cur_len < G->opt.min_length ? G->eos_id : -1;
        gen_step(G, I, Ts, step_tk(G, t), sgen, 0, ban, s);
        steps++;
        rows += I;
        cur_len++;
        if (cur_len >= ML) break;
        // ---- finished flags: read back asynchronously
        bool ready = false;
        if (pending) {
            // (fixed_checks: not when the copy happens to be done, so the step count depends on the batch alone)
            if (!G->fixed_checks && !G->agree) {
                const cudaError_t q = cudaEventQuery(G->ev_chk);
                if (q == cudaErrorNotReady) (void)cudaGetLastError();  // not an error: every launch is checked at once
                else CUDA_CHECK(q);
                ready = q == cudaSuccess;
            }
            ready = ready || steps - check_step >= GEN_CHECK_LAG;
        }
        if (ready) {
            CUDA_CHECK(cudaEventSynchronize(G->ev_chk));
            pending = false;
            int live = 0;
            for (int b = 0; b < B; b++) done[b] = G->h_fin[b] != 0;
            for (int sl = 0; sl < I; sl++) live += slot_item[sl] >= 0 && !done[slot_item[sl]];
            if (G->agree && G->idle) live = 0;  // a padding step's batch: only stepping with the others
            // lockstep: stop when no rank has a row left; a rank without one steps on at a few padding rows
            if (G->agree ? gen_agree(G, gen_lockstep_vote(live, false)) == 0 : live == 0) break;
            int newI = live ? (int)CEIL_DIV((size_t)live, (size_t)GEN_ROW_ROUND) * GEN_ROW_ROUND
                            : T5_MIN(I, GEN_ROW_ROUND);
            if (newI < I) {
                // compact to the live slots (then finished ones as padding up to newI). The pinned sources of the
                // copies below were last read by copies ordered before the event just waited for.
                int n = 0;
                for (int sl = 0; sl < I; sl++)
                    if (slot_item[sl] >= 0 && !done[slot_item[sl]]) new_slot_src[n++] = sl;
                for (int sl = 0; sl < I && n < newI; sl++)
                    if (!(slot_item[sl] >= 0 && !done[slot_item[sl]])) new_slot_src[n++] = sl;
                for (int ns = 0; ns < newI; ns++) {
                    const int os = new_slot_src[ns], b = slot_item[os];
                    G->h_iidx[ns] = os;
                    G->h_slot[ns] = (b >= 0 && !done[b]) ? b : -1;
                }
                for (int ns = 0; ns < newI; ns++) slot_item[ns] = G->h_slot[ns];
                CUDA_CHECK(cudaMemcpyAsync(G->d_iidx, G->h_iidx, (size_t)newI * sizeof(int), cudaMemcpyHostToDevice, s));
                CUDA_CHECK(cudaMemcpyAsync(G->d_slot, G->h_slot, (size_t)newI * sizeof(int), cudaMemcpyHostToDevice, s));
                const size_t row_b = (size_t)H * G->Tmax * Dk * xs, seg_b = (size_t)G->Tmax * Dk * xs;
                const size_t copy_b = (size_t)(cur_len - 1) * Dk * xs;  // cached positions [0, cur_len - 2]
                const size_t crow = (size_t)H * Ts * Dk * xs;
                CUDA_CHECK(cudaMemcpyAsync(G->d_gidx, G->h_iidx, (size_t)newI * sizeof(int), cudaMemcpyHostToDevice, s));
                gather_self_cache(G, sgen, newI, row_b, seg_b, copy_b, s);
                for (int l = 0; l < G->Ld; l++) {
                    decode_gather_rows(G->ck[1][l], G->ck[0][l], G->d_iidx, newI, 1, crow, crow, crow, s);
                    decode_gather_rows(G->cv[1][l], G->cv[0][l], G->d_iidx, newI, 1, crow, crow, crow, s);
                }
                sgen = 1 - sgen;
                // cross K/V and the mask go back to buffer 0 so that the graphs only see one cross generation
                for (int l = 0; l < G->Ld; l++) {
                    CUDA_CHECK(cudaMemcpyAsync(G->ck[0][l], G->ck[1][l], (size_t)newI * crow, cudaMemcpyDeviceToDevice, s));
                    CUDA_CHECK(cudaMemcpyAsync(G->cv[0][l], G->cv[1][l], (size_t)newI * crow, cudaMemcpyDeviceToDevice, s));
                }
                decode_gather_rows(G->e_mask[1], G->e_mask[0], G->d_iidx, newI, 1, (size_t)Ts * 4, (size_t)Ts * 4,
                                   (size_t)Ts * 4, s);
                CUDA_CHECK(cudaMemcpyAsync(G->e_mask[0], G->e_mask[1], (size_t)newI * Ts * 4, cudaMemcpyDeviceToDevice, s));
                decode_gather_rows(G->d_tok2, G->d_tok, G->d_iidx, newI, 1, 4, 4, 4, s);
                CUDA_CHECK(cudaMemcpyAsync(G->d_tok, G->d_tok2, (size_t)newI * 4, cudaMemcpyDeviceToDevice, s));
                I = newI;
            }
        }
        if (!pending) {
            CUDA_CHECK(cudaMemcpyAsync(G->h_fin, G->d_fin, (size_t)B * sizeof(int), cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaEventRecord(G->ev_chk, s));
            pending = true;
            check_step = steps;
        }
    }
    CUDA_CHECK(cudaEventRecord(G->ev[3], s));
    CUDA_CHECK(cudaMemcpyAsync(G->h_seq, G->d_seq, (size_t)B * ML * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    int width = 1;
    for (int b = 0; b < B; b++) {
        const int* q = G->h_seq + (size_t)b * ML;
        int c = 1;
        while (c < ML - 1 && q[c] != G->eos_id) c++;  // the last generated column of row b
        width = T5_MAX(width, c + 1);
        G->stats.tokens += c;
        memcpy(out + (size_t)b * ML, q, (size_t)ML * sizeof(int));
    }
    *out_len = width;
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, G->ev[2], G->ev[3]));
    G->stats.decoder_ms += ms;
    G->stats.steps += steps;
    G->stats.decoder_rows += rows;
    free(slot_item);
    free(done);
    free(new_slot_src);
}

int t5_generate(T5Generator* G, const int32_t* input_ids, const int32_t* attention_mask, int B, int Ts, int32_t* out,
                int* out_len, cudaStream_t s, char* err, size_t errlen) {
    const double t_start = now_ms();
    if (B < 1 || Ts < 1 || B > G->max_B || Ts > G->max_Ts) {
        snprintf(err, errlen, "generation batch (B %d, Ts %d) is empty or exceeds the generator's maxima (%d, %d)", B,
                 Ts, G->max_B, G->max_Ts);
        return -1;
    }
    const int V = G->V, ML = G->opt.max_length, nb = G->nb, K = G->K, H = G->H, Dk = G->Dk;
    const bool beam = nb > 1;
    const size_t xs = G->xs;
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int i = 0; i < Ts; i++) {
            int v = input_ids[(size_t)b * Ts + i];
            if (v < 0 || v >= V) {
                snprintf(err, errlen, "input_ids[%d][%d] = %d is outside [0, %d)", b, i, v, V);
                return -1;
            }
            int m = attention_mask ? attention_mask[(size_t)b * Ts + i] : 1;
            if (m != 0 && m != 1) {
                snprintf(err, errlen, "attention_mask[%d][%d] = %d is not 0 or 1", b, i, m);
                return -1;
            }
            n += m;
        }
        if (n == 0) {
            snprintf(err, errlen, "source row %d of the batch has no token (attention_mask all 0)", b);
            return -1;
        }
    }
    // ---- upload, encoder
    const size_t Ns = (size_t)B * Ts;
    CUDA_CHECK(cudaStreamSynchronize(s));
    // in the stream's order and waited for (a legacy-stream cudaMemcpy from pageable memory may return before its
    // DMA lands, unordered with a non-blocking stream)
    CUDA_CHECK(cudaMemcpyAsync(G->e_ids, input_ids, Ns * sizeof(int), cudaMemcpyHostToDevice, s));
    int* ones = NULL;
    if (attention_mask) {
        CUDA_CHECK(cudaMemcpyAsync(G->e_mask[0], attention_mask, Ns * sizeof(int), cudaMemcpyHostToDevice, s));
    } else {
        ones = malloc_check(Ns * sizeof(int));
        for (size_t i = 0; i < Ns; i++) ones[i] = 1;
        CUDA_CHECK(cudaMemcpyAsync(G->e_mask[0], ones, Ns * sizeof(int), cudaMemcpyHostToDevice, s));
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    free(ones);
    CUDA_CHECK(cudaEventRecord(G->ev[0], s));
    encoder_forward(G, B, Ts, G->e_mask[0], 0, s);
    CUDA_CHECK(cudaEventRecord(G->ev[1], s));
    if (!beam) {
        generate_greedy(G, B, Ts, out, out_len, s);
        float enc_ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&enc_ms, G->ev[0], G->ev[1]));
        G->stats.batches++;
        G->stats.sequences += B;
        G->stats.encoder_ms += enc_ms;
        G->stats.total_ms += now_ms() - t_start;
        return 0;
    }
    int cgen = 0, sgen = 0;

    // ---- host state
    const int W = ML;  // sequence buffer width
    int* slot_item = malloc_check((size_t)B * sizeof(int));       // batch row of each slot, -1 padding
    int* run_seq = malloc_check((size_t)B * nb * W * sizeof(int));  // (slot, beam) running sequences
    int* run_seq2 = malloc_check((size_t)B * nb * W * sizeof(int));
    float* run_score = malloc_check((size_t)B * nb * sizeof(float));
    float* run_score2 = malloc_check((size_t)B * nb * sizeof(float));
    int* src_beam = malloc_check((size_t)B * nb * sizeof(int));   // per slot: beam each new running beam comes from
    bool* done = calloc_check((size_t)B, sizeof(bool));
    bool* unsat = malloc_check((size_t)B * sizeof(bool));
    int* fin_seq = NULL;
    float* fin_score = NULL;
    bool* fin_flag = NULL;
    int* fin_len = NULL;
    int* m_seq = NULL;
    Cand* cands = malloc_check((size_t)nb * K * sizeof(Cand));
    Cand* merged = malloc_check((size_t)3 * nb * sizeof(Cand));
    int* ctok = malloc_check((size_t)2 * nb * sizeof(int));
    int* cbeam = malloc_check((size_t)2 * nb * sizeof(int));
    float* cval = malloc_check((size_t)2 * nb * sizeof(float));
    bool* chit = malloc_check((size_t)2 * nb * sizeof(bool));
    int* new_slot_src = malloc_check((size_t)B * sizeof(int));
    bool* processed = calloc_check((size_t)B, sizeof(bool));
    if (!beam)
        for (int b = 0; b < B; b++) {
            out[(size_t)b * ML] = G->start_id;
            for (int c = 1; c < ML; c++) out[(size_t)b * ML + c] = G->pad_id;
        }
    if (beam) {
        fin_seq = malloc_check((size_t)B * nb * W * sizeof(int));
        fin_score = malloc_check((size_t)B * nb * sizeof(float));
        fin_flag = calloc_check((size_t)B * nb, sizeof(bool));
        fin_len = calloc_check((size_t)B * nb, sizeof(int));
        m_seq = malloc_check((size_t)3 * nb * W * sizeof(int));
        for (size_t i = 0; i < (size_t)B * nb; i++) {
            fin_score[i] = GEN_NEG_INF_SCORE;
            int* q = fin_seq + i * W;
            q[0] = G->start_id;
            for (int j = 1; j < W; j++) q[j] = G->fill_id;
        }
    }
    for (int b = 0; b < B; b++) {
        slot_item[b] = b;
        unsat[b] = true;
        for (int j = 0; j < nb; j++) {
            int* q = run_seq + ((size_t)b * nb + j) * W;
            q[0] = G->start_id;
            for (int c = 1; c < W; c++) q[c] = beam ? G->fill_id : G->pad_id;
            run_score[b * nb + j] = j == 0 ? 0.0f : GEN_NEG_INF_SCORE;
        }
    }
    int I = B, cur_len = 1;
    int64_t steps = 0, rows = 0;
    float dec_ms = 0.0f;
    // compaction granularity in slots: rows (slots * nb) stay a multiple of GEN_ROW_ROUND
    int g = GEN_ROW_ROUND, q = nb;
    while (q) {
        int r = g % q;
        g = q;
        q = r;
    }
    const int m_items = GEN_ROW_ROUND / g;
    // device beam search (G->dev_beam): the device picks the next running beams itself (decode_beam_select: tokens,
    // scores, cache-row histories instead of reordering the caches), so up to GEN_BEAM_LAG steps are launched ahead;
    // the host replays the same selection on the top-k it copies back (run_seq) and keeps the finished hypotheses and
    // the done flags a few steps behind. Steps launched after an item is done change nothing the host reads; before a
    // compaction the host first processes every launched step (drain), so both sides agree on the layout.
    const bool dev = G->dev_beam;
    int launch_len = 1;     // dev: cur_len of the next step to launch
    bool draining = false;  // dev: a compaction waits until every launched step is processed
    if (dev) {
        const int R = I * nb;
        for (int r = 0; r < R; r++) {
            G->h_tok[r] = G->start_id;
            G->h_score[r] = run_score[r];
        }
        CUDA_CHECK(cudaMemcpyAsync(G->d_tok, G->h_tok, (size_t)R * sizeof(int), cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(G->d_score, G->h_score, (size_t)R * sizeof(float), cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(G->d_hist, G->h_hist_id, (size_t)R * G->Tmax * sizeof(int), cudaMemcpyHostToDevice,
                                   s));
        CUDA_CHECK(cudaEventRecord(G->ev[2], s));
    }
    while (true) {
        const int R = I * nb, t = cur_len - 1;
        const float* topv = G->h_topv;
        const int* topi = G->h_topi;
        if (dev) {
            while (!draining && launch_len < ML && launch_len - cur_len < GEN_BEAM_LAG) {
                const int tl = launch_len - 1, slot = tl % GEN_BEAM_RING;
                CUDA_CHECK(cudaMemcpyAsync(G->d_pos, G->h_posarr + tl, sizeof(int), cudaMemcpyHostToDevice, s));
                const int ban = launch_len < G->opt.min_length ? G->eos_id : -1;
                gen_step(G, I, Ts, step_tk(G, tl), sgen, cgen, ban, s);
                const size_t off = (size_t)slot * G->max_R * K;
                CUDA_CHECK(cudaMemcpyAsync(G->h_ringv + off, G->d_topv, (size_t)R * K * sizeof(float),
                                           cudaMemcpyDeviceToHost, s));
                CUDA_CHECK(cudaMemcpyAsync(G->h_ringi + off, G->d_topi, (size_t)R * K * sizeof(int),
                                           cudaMemcpyDeviceToHost, s));
                CUDA_CHECK(cudaEventRecord(G->ev_ring[slot], s));
                steps++;
                rows += R;
                launch_len++;
            }
            const int slot = t % GEN_BEAM_RING;
            CUDA_CHECK(cudaEventSynchronize(G->ev_ring[slot]));
            topv = G->h_ringv + (size_t)slot * G->max_R * K;
            topi = G->h_ringi + (size_t)slot * G->max_R * K;
        }
        if (!dev) {
            for (int r = 0; r < R; r++) {
                G->h_tok[r] = run_seq[(size_t)r * W + t];
                G->h_score[r] = run_score[r];
            }
            CUDA_CHECK(cudaMemcpyAsync(G->d_tok, G->h_tok, (size_t)R * sizeof(int), cudaMemcpyHostToDevice, s));
            if (beam)
                CUDA_CHECK(
                    cudaMemcpyAsync(G->d_score, G->h_score, (size_t)R * sizeof(float), cudaMemcpyHostToDevice, s));
            CUDA_CHECK(cudaMemcpyAsync(G->d_pos, G->h_posarr + t, sizeof(int), cudaMemcpyHostToDevice, s));
            CUDA_CHECK(cudaEventRecord(G->ev[2], s));
            const int ban = cur_len < G->opt.min_length ? G->eos_id : -1;
            gen_step(G, I, Ts, step_tk(G, t), sgen, cgen, ban, s);
            CUDA_CHECK(cudaEventRecord(G->ev[3], s));
            CUDA_CHECK(cudaMemcpyAsync(G->h_topv, G->d_topv, (size_t)R * K * sizeof(float), cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaMemcpyAsync(G->h_topi, G->d_topi, (size_t)R * K * sizeof(int), cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaStreamSynchronize(s));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, G->ev[2], G->ev[3]));
            dec_ms += ms;
            steps++;
            rows += R;
        }

        const bool at_max = cur_len + 1 >= ML;  // every continuation hits MaxLengthCriteria
        for (int sl = 0; sl < I; sl++) {
            const int b = slot_item[sl];
            for (int j = 0; j < nb; j++) src_beam[sl * nb + j] = j;
            processed[sl] = false;
            if (b < 0 || done[b]) continue;
            processed[sl] = true;
            if (!beam) {
                // greedy (HF _sample): argmax of the processed logits; finished rows get pad (out is pre-filled)
                const int tok = topi[sl];
                run_seq[(size_t)sl * W + cur_len] = tok;
                out[(size_t)b * ML + cur_len] = tok;
                G->stats.tokens++;
                if (tok == G->eos_id || at_max) done[b] = true;
                continue;
            }
            // ---- beam (HF _beam_search), one batch item
            const int K2 = 2 * nb;
            int nc = 0;
            for (int j = 0; j < nb; j++)
                for (int k = 0; k < K; k++) {
                    const size_t r = (size_t)sl * nb + j;
                    cands[nc].v = topv[r * K + k];
                    cands[nc].key = j * V + topi[r * K + k];
                    nc++;
                }
            qsort(cands, (size_t)nc, sizeof(Cand), cand_cmp);
            for (int k = 0; k < K2; k++) {
                cval[k] = cands[k].v;
                cbeam[k] = cands[k].key / V;
                ctok[k] = cands[k].key % V;
                chit[k] = ctok[k] == G->eos_id || at_max;
            }
            // running beams of the next step: the best nb candidates that did not finish
            Cand rc[2 * 64];
            for (int k = 0; k < K2; k++) {
                volatile float v = cval[k] + (chit[k] ? GEN_NEG_INF_SCORE : 0.0f);
                rc[k].v = v;
                rc[k].key = k;
            }
            qsort(rc, (size_t)K2, sizeof(Cand), cand_cmp);
            // finished hypotheses: merge the previous nb with the candidates that just finished among the top nb
            const float inv = inv_len_pen(cur_len, G->opt.length_penalty);
            bool all_fin = true;
            for (int j = 0; j < nb; j++) all_fin = all_fin && fin_flag[b * nb + j];
            const bool full = all_fin && G->opt.early_stopping == GEN_EARLY_STOP_TRUE;
            int nm = 0;
            for (int j = 0; j < nb; j++) {
                merged[nm].v = fin_score[b * nb + j];
                merged[nm].key = nm;
                memcpy(m_seq + (size_t)nm * W, fin_seq + ((size_t)b * nb + j) * W, (size_t)W * sizeof(int));
                nm++;
            }
            int m_len[3 * 64];
            bool m_flag[3 * 64];
            for (int j = 0; j < nb; j++) {
                m_len[j] = fin_len[b * nb + j];
                m_flag[j] = fin_flag[b * nb + j];
            }
            for (int k = 0; k < K2; k++) {
                const bool just = chit[k] && k < nb;
                volatile float v = cval[k] * inv;
                if (full) v = v + GEN_NEG_INF_SCORE;
                if (!unsat[b]) v = v + GEN_NEG_INF_SCORE;
                if (!just) v = v + GEN_NEG_INF_SCORE;
                merged[nm].v = v;
                merged[nm].key = nm;
                int* q = m_seq + (size_t)nm * W;
                memcpy(q, run_seq + ((size_t)sl * nb + cbeam[k]) * W, (size_t)W * sizeof(int));
                q[cur_len] = ctok[k];
                m_len[nm] = cur_len;  // generated tokens, </s> included (HF: beam_indices entries set)
                m_flag[nm] = just;
                nm++;
            }
            qsort(merged, (size_t)nm, sizeof(Cand), cand_cmp);
            for (int j = 0; j < nb; j++) {
                const int m = merged[j].key;
                fin_score[b * nb + j] = merged[j].v;
                fin_flag[b * nb + j] = m_flag[m];
                fin_len[b * nb + j] = m_len[m];
                memcpy(fin_seq + ((size_t)b * nb + j) * W, m_seq + (size_t)m * W, (size_t)W * sizeof(int));
            }
            // new running beams (written to run_seq2 / run_score2 at the same slot)
            for (int j = 0; j < nb; j++) {
                const int k = rc[j].key;
                int* q = run_seq2 + ((size_t)sl * nb + j) * W;
                memcpy(q, run_seq + ((size_t)sl * nb + cbeam[k]) * W, (size_t)W * sizeof(int));
                q[cur_len] = ctok[k];
                run_score2[sl * nb + j] = rc[j].v;
                src_beam[sl * nb + j] = cbeam[k];
            }
            // early-stop heuristic with the new length (HF _check_early_stop_heuristic)
            const int new_len = cur_len + 1;
            const int best_len = (G->opt.early_stopping == GEN_EARLY_STOP_NEVER && G->opt.length_penalty > 0.0f)
                                     ? ML - 1
                                     : new_len - 1;
            volatile float best = run_score2[sl * nb] * inv_len_pen(best_len, G->opt.length_penalty);
            float mn = fin_score[b * nb];
            bool allf = true;
            for (int j = 0; j < nb; j++) {
                mn = fminf(mn, fin_score[b * nb + j]);
                allf = allf && fin_flag[b * nb + j];
            }
            bool any = false;
            for (int j = 0; j < nb; j++) {
                const float worst = fin_flag[b * nb + j] ? mn : GEN_NEG_INF_SCORE;
                any = any || best > worst;
            }
            unsat[b] = unsat[b] && any;
            if (!unsat[b] || (allf && G->opt.early_stopping == GEN_EARLY_STOP_TRUE) || at_max) done[b] = true;
        }
        if (beam)
            for (int sl = 0; sl < I; sl++) {
                if (!processed[sl]) continue;
                memcpy(run_seq + (size_t)sl * nb * W, run_seq2 + (size_t)sl * nb * W, (size_t)nb * W * sizeof(int));
                memcpy(run_score + (size_t)sl * nb, run_score2 + (size_t)sl * nb, (size_t)nb * sizeof(float));
            }
        cur_len++;
        int live = 0;
        for (int sl = 0; sl < I; sl++) {
            const int b = slot_item[sl];
            if (b >= 0 && !done[b]) live++;
        }
        if (G->agree && G->idle) live = 0;  // a padding step's batch: only stepping with the others

        // ---- next batch layout: compact to the live slots (rounded up), reorder beams
        int newI = live ? (int)CEIL_DIV((size_t)live, (size_t)m_items) * m_items : I;
        if (newI > I) newI = I;
        const bool compact = newI < I;
        const bool want_drain = dev && compact && cur_len < launch_len;  // process the launched steps first
        if (G->agree) {
            // lockstep (gen_lockstep.h): every rank stops together, and stops launching while any rank drains, so
            // that every rank launches the same steps (launch_len and cur_len are the same on every rank, so is
            // want_drain's cur_len < launch_len). A rank without a live row (or without a layout change while
            // another rank drains) steps on in its layout: what it computes is not read.
            const GenLockstepMove mv = gen_lockstep_beam_move(gen_agree(G, gen_lockstep_vote(live, want_drain)), live,
                                                              compact, want_drain, &draining);
            if (mv == GEN_LOCKSTEP_STOP) break;
            if (mv == GEN_LOCKSTEP_BROKEN)
                t5_die(T5_EXIT_FAILURE, "internal: lockstep beam search: a rank drains at a step not launched here");
            if (mv == GEN_LOCKSTEP_STEP_ON) continue;
        } else if (live == 0) {
            break;
        }
        if (want_drain) {
            draining = true;
            continue;
        }
        draining = false;
        if (dev && !compact) {
            if (cur_len >= ML) break;
            continue;  // the device reordered the beams itself
        }
        if (compact) {
            int n = 0;
            for (int sl = 0; sl < I; sl++) {
                const int b = slot_item[sl];
                if (b >= 0 && !done[b]) new_slot_src[n++] = sl;
            }
            for (int sl = 0; sl < I && n < newI; sl++) {
                const int b = slot_item[sl];
                if (!(b >= 0 && !done[b])) new_slot_src[n++] = sl;
            }
        } else {
            for (int sl = 0; sl < I; sl++) new_slot_src[sl] = sl;
        }
        bool identity = !compact;
        for (int ns = 0; ns < newI; ns++) {
            const int os = new_slot_src[ns];
            for (int j = 0; j < nb; j++) {
                const int src = os * nb + (dev ? j : src_beam[os * nb + j]);
                G->h_gidx[ns * nb + j] = src;
                identity = identity && src == ns * nb + j;
            }
            G->h_iidx[ns] = os;
        }
        if (dev) {
            // rows of the live slots; cache positions [0, cur_len - 2] through the histories, which restart as
            // identities; running tokens and scores follow their rows
            CUDA_CHECK(cudaMemcpyAsync(G->d_gidx, G->h_gidx, (size_t)newI * nb * sizeof(int), cudaMemcpyHostToDevice,
                                       s));
            gather_self_cache_hist(G, sgen, newI * nb, cur_len - 1, s);
            sgen = 1 - sgen;
            CUDA_CHECK(cudaMemcpyAsync(G->d_hist, G->h_hist_id, (size_t)newI * nb * G->Tmax * sizeof(int),
                                       cudaMemcpyHostToDevice, s));
            decode_gather_rows(G->d_tok2, G->d_tok, G->d_gidx, newI * nb, 1, 4, 4, 4, s);
            CUDA_CHECK(cudaMemcpyAsync(G->d_tok, G->d_tok2, (size_t)newI * nb * 4, cudaMemcpyDeviceToDevice, s));
            decode_gather_rows(G->d_topv, G->d_score, G->d_gidx, newI * nb, 1, 4, 4, 4, s);
            CUDA_CHECK(cudaMemcpyAsync(G->d_score, G->d_topv, (size_t)newI * nb * 4, cudaMemcpyDeviceToDevice, s));
        } else if (!identity) {
            CUDA_CHECK(cudaMemcpyAsync(G->d_gidx, G->h_gidx, (size_t)newI * nb * sizeof(int), cudaMemcpyHostToDevice,
                                       s));
            const size_t row_b = (size_t)H * G->Tmax * Dk * xs, seg_b = (size_t)G->Tmax * Dk * xs;
            const size_t copy_b = (size_t)(t + 1) * Dk * xs;
            gather_self_cache(G, sgen, newI * nb, row_b, seg_b, copy_b, s);
            sgen = 1 - sgen;
        }
        if (compact) {
            CUDA_CHECK(cudaMemcpyAsync(G->d_iidx, G->h_iidx, (size_t)newI * sizeof(int), cudaMemcpyHostToDevice, s));
            const size_t crow = (size_t)H * Ts * Dk * xs;
            for (int l = 0; l < G->Ld; l++) {
                decode_gather_rows(G->ck[1 - cgen][l], G->ck[cgen][l], G->d_iidx, newI, 1, crow, crow, crow, s);
                decode_gather_rows(G->cv[1 - cgen][l], G->cv[cgen][l], G->d_iidx, newI, 1, crow, crow, crow, s);
            }
            decode_gather_rows(G->e_mask[1 - cgen], G->e_mask[cgen], G->d_iidx, newI, 1, (size_t)Ts * 4,
                               (size_t)Ts * 4, (size_t)Ts * 4, s);
            cgen = 1 - cgen;
            // host state follows the slots (new slot ns <- old slot new_slot_src[ns], ns <= old index: in place)
            int* new_items = malloc_check((size_t)newI * sizeof(int));
            for (int ns = 0; ns < newI; ns++) {
                const int os = new_slot_src[ns];
                new_items[ns] = slot_item[os];
                if (!(new_items[ns] >= 0 && !done[new_items[ns]])) new_items[ns] = -1;  // padding slot
                if (os != ns) {
                    memmove(run_seq + (size_t)ns * nb * W, run_seq + (size_t)os * nb * W, (size_t)nb * W * sizeof(int));
                    memmove(run_score + (size_t)ns * nb, run_score + (size_t)os * nb, (size_t)nb * sizeof(float));
                }
            }
            memcpy(slot_item, new_items, (size_t)newI * sizeof(int));
            free(new_items);
            I = newI;
        }
    }

    if (dev) {
        CUDA_CHECK(cudaEventRecord(G->ev[3], s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaEventElapsedTime(&dec_ms, G->ev[2], G->ev[3]));
    }
    // ---- outputs
    int width;
    if (beam) {
        int mx = 0;
        for (int b = 0; b < B; b++) {
            mx = T5_MAX(mx, fin_len[b * nb]);
            G->stats.tokens += fin_len[b * nb];
        }
        width = 1 + mx;
        for (int b = 0; b < B; b++) memcpy(out + (size_t)b * ML, fin_seq + (size_t)b * nb * W, (size_t)width * 4);
    } else {
        width = cur_len;
    }
    *out_len = width;

    free(slot_item);
    free(run_seq);
    free(run_seq2);
    free(run_score);
    free(run_score2);
    free(src_beam);
    free(done);
    free(unsat);
    free(fin_seq);
    free(fin_score);
    free(fin_flag);
    free(fin_len);
    free(m_seq);
    free(cands);
    free(merged);
    free(ctok);
    free(cbeam);
    free(cval);
    free(chit);
    free(new_slot_src);
    free(processed);

    float enc_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&enc_ms, G->ev[0], G->ev[1]));
    G->stats.batches++;
    G->stats.sequences += B;
    G->stats.steps += steps;
    G->stats.decoder_rows += rows;
    G->stats.encoder_ms += enc_ms;
    G->stats.decoder_ms += dec_ms;
    G->stats.total_ms += now_ms() - t_start;
    return 0;
}
