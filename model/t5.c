/*
 * t5.c: T5 forward and backward on the GPU (see t5.h for the contract, docs/model.md for the data
 * flow and docs/numerics.md for every numerics decision; deviations from HF carry NOTE(numerics)).
 *
 * Dimension names: B batch, Ts source length, Tt target length, D d_model, H heads, Dk d_kv,
 * HD = H*Dk (!= D for t5-3b/11b), F d_ff, V vocab, L / Ld encoder / decoder blocks, NB buckets.
 * N = B*T rows of a (B, T, .) tensor. X = the run dtype.
 *
 * Data flow of one block (pre-norm; the residual stream x is fp32):
 *   self-attention:  ln = rmsnorm(x); q,k,v = ln W^T (B*T, H*Dk); S = Q K^T per head (fp32);
 *                    P = softmax(S + bias + mask) (X); ctx = dropout(P) V; x += dropout(ctx Wo^T)
 *                    The per-head GEMMs read and write the heads in place in the (B*T, H*Dk) tensors
 *                    (cuBLASLt pointer-array batches, see "attention head pointers" below); without
 *                    pointer-array support (or T5TRAIN_ATTN_PERMUTE=1) heads are copied to (B, H, T, Dk).
 *   cross-attention (decoder): the same with k,v from the encoder output, no position bias,
 *                    the encoder padding mask
 *   feed-forward:    ln = rmsnorm(x); a = act(ln Wi^T) (or gelu_new(ln Wi0^T) * ln Wi1^T);
 *                    x += dropout(dropout(a) Wo^T)
 * Activations of every block are kept (one BlockActs per block), or with gradient checkpointing only
 * the block inputs resid[l] are kept and a single BlockActs is refilled by recomputing the block in
 * the backward (same kernels, same inputs, same dropout offsets: bit-identical).
 */
#include "t5.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../cuda/activation.cuh"
#include "../cuda/attention_softmax.cuh"
#include "../src/base/check.h"
#include "../cuda/cross_entropy.cuh"
#include "../cuda/dropout.cuh"
#include "../cuda/elementwise.cuh"
#include "../cuda/embedding.cuh"
#include "../cuda/matmul.cuh"
#include "../cuda/position_bias.cuh"
#include "../cuda/rmsnorm.cuh"
#include "../src/base/common.h"
#include "relpos.h"

// ---------------------------------------------------------------------------------------------
// dropout sites: every site gets its own disjoint range of Philox counters,
//   offset = ((stack * 4096 + (layer + 1)) * 16 + site) << 36
// (layer = -1 for the embedding and final-norm sites). 2^36 elements per site is far above any
// (B, H, T, T) tensor; the seed is the per-step seed given to t5_model_forward. The same
// (seed, site, element index) gives the same mask in forward, backward and a recomputation.

typedef enum {
    SITE_EMBED = 0,     // embedding output of the stack (fp32 residual)
    SITE_SA_PROBS = 1,  // self-attention probabilities
    SITE_SA_OUT = 2,    // self-attention sublayer output before the residual add
    SITE_CA_PROBS = 3,  // cross-attention probabilities
    SITE_CA_OUT = 4,    // cross-attention sublayer output
    SITE_FF_ACT = 5,    // inside FF, after the activation (after the product when gated)
    SITE_FF_OUT = 6,    // FF sublayer output
    SITE_FINAL = 7,     // after the stack's final layer norm
} DropoutSite;

static uint64_t site_offset(T5Stack stack, int layer, DropoutSite site) {
    return ((((uint64_t)stack * 4096u + (uint64_t)(layer + 1)) * 16u + (uint64_t)site) << 36);
}

// ---------------------------------------------------------------------------------------------
// structures

// which attention of a block: fixes (Tq, Tk) = (Ts, Ts), (Tt, Tt) or (Tt, Ts)
typedef enum { ATTN_ENC_SELF = 0, ATTN_DEC_SELF = 1, ATTN_CROSS = 2, ATTN_KINDS = 3 } AttnKind;

// slots of device pointer arrays (one pointer per (b, h), see attn_ptrs_build) of one attention's operands
typedef struct {
    int q, k, v, ctx;    // heads of the (B*T, HD) tensors
    int probs, probs_drop;  // (B, H, Tq, Tk) matrices; probs_drop -1 when there is no such buffer
} AttnSlots;

typedef struct {
    void* ln;          // (B*Tq, D) X      normed sublayer input
    float* rstd;       // (B*Tq) fp32      1/rms of the input rows
    void* q;           // (B*Tq, HD) X     (B, H, Tq, Dk) when heads are permuted (!M->noperm)
    void* k;           // (B*Tk, HD) X     (B, H, Tk, Dk) likewise
    void* v;           // (B*Tk, HD) X     (B, H, Tk, Dk) likewise
    void* probs;       // (B, H, Tq, Tk) PX softmax output (before dropout); PX = fp32, or X with probs_in_x
    void* probs_drop;  // (B, H, Tq, Tk) X  round_X(dropout(probs)), the P of P V, written by the softmax kernel;
                       //                   NULL when PX == X and the model has no dropout (P V then reads probs)
    void* ctx;         // (B*Tq, HD) X     P V, heads merged (input of o)
    float* x_out;      // (B*Tq, D) fp32   residual after this sublayer
    AttnKind kind;
    AttnSlots slot;    // pointer arrays of q, k, v, ctx, probs, probs_drop (noperm only)
} AttnActs;

// one device pointer array: pointer i = b*H + h (b < B of the current batch) is
//   base + (b*T*ld + h*Dk)*es      (heads: head h of sequence b in a (B*T, ld) tensor, row stride ld: HD, or
//                                   3*HD / 2*HD for the fused q|k|v and k|v projection outputs)
//   base + i*Tq*Tk*es              (!heads: contiguous (B, H, Tq, Tk))
// with T / Tq / Tk the current Ts or Tt (tq, tk: 0 = Ts, 1 = Tt; heads use tq).
typedef struct {
    const char* base;
    int es;
    bool heads;
    int ld;  // heads: row length of the tensor in elements
    int tq, tk;
} PtrSlot;

// the shared scratch's pointer arrays, one set per AttnKind
typedef struct {
    int scores, dS, dP;    // (B, H, Tq, Tk) fp32 / X / PX
    int dctx, dq, dk, dv;  // heads of the X gradients: dctx, dq (Tq), dk, dv (Tk) (of dqkv when fuse_qkv)
} ScratchSlots;

typedef struct {
    void* ln;     // (B*T, D) X
    float* rstd;  // (B*T) fp32
    void* a;      // (B*T, F) X  relu(ln Wi^T) (ReLU) or ln Wi0^T (gated)
    void* b;      // (B*T, F) X  ln Wi1^T (gated only)
    void* g;      // (B*T, F) X  gelu_new(a) * b (gated only)
    void* drop;   // (B*T, F) X  dropout of the activation (input of wo); NULL without dropout buffers
} FFActs;

typedef struct {
    AttnActs sa;  // self-attention
    AttnActs ca;  // cross-attention (decoder)
    FFActs ff;
} BlockActs;

#define T5_MAX_GRAPHS 8

// one instantiated graph of forward(with_grad) + backward for one (B, Ts, Tt, masks, dropout, grad scale)
typedef struct {
    bool used, captured;      // used: seen once eagerly; captured: exec is valid
    int B, Ts, Tt;
    bool has_dec_mask;
    float p, grad_scale;
    cudaGraphExec_t exec;
    int* ready;               // grad_ready units in backward order, replayed on the host after each launch
    int nready;
    uint64_t last_use;
} StepGraph;

struct T5Model {
    const ParamTable* t;
    ZeroEngine* Z;
    T5ModelOptions opt;
    DType X;
    size_t xs;  // sizeof X
    DType GD;   // parameter-gradient dtype (the engine's: X, or fp32)
    size_t gs;  // sizeof GD
    DType PX;   // dtype of the stored attention probabilities (fp32 unless probs_in_x)
    DType NX;   // dtype of the weights of non-GEMM ops (norms, bias tables, embedding lookup): X or fp32
    int cur_unit;   // the unit fetched last
    bool cur_f32;   // its non-GEMM weights are read in fp32 (zero_fp32_tensor), i.e. NX is fp32
    int D, H, Dk, HD, F, V, L, Ld, NB, max_dist;
    float eps;
    bool gated, tied;  // tied: shared.weight projects (no lm_head parameter)
    bool scale_out;    // the decoder output is scaled by D^-0.5 before the projection (v1.0)
    bool train;

    BlockParamIdx* enc_idx;  // (L)
    BlockParamIdx* dec_idx;  // (Ld)
    int p_embed, p_lm_head, p_enc_final, p_dec_final;
    int u_shared, u_final, u_lm;

    // current batch (device)
    int B, Ts, Tt;
    bool has_labels, has_dec_mask;
    int* input_ids;       // (B, Ts) int32
    int* attn_mask;       // (B, Ts) int32
    int* dec_ids;         // (B, Tt) int32
    int* dec_mask;        // (B, Tt) int32
    int* labels;          // (B, Tt) int32
    int* buckets_enc;     // (2*max_Ts-1) int32 bidirectional buckets
    int* buckets_dec;     // (2*max_Tt-1) int32 causal buckets
    int relo_enc, relo_dec;

    // activations
    float** resid_enc;    // (L+1) x (B*Ts, D) fp32: block inputs; resid_enc[L] = encoder stack output
    float** resid_dec;    // (Ld+1) x (B*Tt, D) fp32
    BlockActs* enc_acts;  // (L, or 1 with checkpointing)
    BlockActs* dec_acts;  // (Ld, or 1)
    float* bias_enc;      // (H, Ts, Ts) fp32 position bias of the encoder (shared by all blocks)
    float* bias_dec;      // (H, Tt, Tt) fp32
    float* rstd_encf;     // (B*Ts) fp32 final norm
    float* rstd_decf;     // (B*Tt) fp32
    float* enc_out32;     // (B*Ts, D) fp32 dropout(final_norm(encoder))
    void* enc_out;        // (B*Ts, D) X  enc_out32 rounded: keys/values source of cross-attention
    float* lm_in32;       // (B*Tt, D) fp32 dropout(final_norm(decoder)) (* D^-0.5 when scale_out)
    void* lm_in;          // (B*Tt, D) X  lm_in32 rounded: the lm_head input
    void* logits;         // (B*Tt, V) X
    void* dlogits;        // (B*Tt, V) X  == logits unless keep_logits
    float* loss;          // (1) fp32
    float* losses;        // (B*Tt) fp32 per token

    // scratch (shared by all blocks)
    void* lin;            // (max N * max(HD, D)) X  linear outputs before split / residual add
    float* scores;        // (B*H*max Tq*Tk) fp32
    void* dbranch;        // (maxN, D) X
    void* dctx;           // (maxN, HD) X
    void* dOh;            // (B, H, Tq, Dk) X   permuted path only (NULL when M->noperm)
    void* dP;             // (B, H, Tq, Tk) X
    void* dS;             // (B, H, Tq, Tk) X
    void *dqh, *dkh, *dvh;  // (B, H, T, Dk) X  permuted path only (NULL when M->noperm)
    void *dqm, *dkm, *dvm;  // (B*T, HD) X  (dkm, dvm NULL when fuse_qkv)
    void* dqkv;           // (maxN, 3*HD) X  fuse_qkv only: d(q|k|v) of a self-attention, d(k|v) of a cross-attention

    // attention head pointers (M->noperm): the attention GEMMs run on the (B*T, HD) tensors in place
    // through cuBLASLt pointer-array batches. Every operand of every attention call site has one slot:
    // a device array of max_B*H pointers (ptr_dev + slot*ptr_stride), of which the first B*H are written by
    // attn_ptrs_build in t5_model_set_batch whenever (B, Ts, Tt) changes (outside any step: the step and
    // its CUDA graphs only read them).
    bool noperm;
    PtrSlot* pslots;      // (npslots) host
    int npslots, cap_pslots;
    ScratchSlots sslot[ATTN_KINDS];
    bool fuse_qkv;        // noperm and q|k|v (and cross k|v) weights contiguous: one projection GEMM each
    size_t ptr_stride;    // pointers per slot: max_B*H rounded up to 32 (every array 256-byte aligned)
    void** ptr_dev;       // (npslots, ptr_stride) device pointer arrays
    void** ptr_host;      // (npslots, ptr_stride) host mirror
    int ptr_B, ptr_Ts, ptr_Tt;  // shape the arrays hold (-1: none yet)
    void* dln;            // (maxN, D) X
    void *dff, *dfa, *dfb;  // (maxN, F) X
    float* dres_enc;      // (B*Ts, D) fp32 residual gradient
    float* dres_dec;      // (B*Tt, D) fp32
    float* d_enc;         // (B*Ts, D) fp32 gradient of enc_out (summed over decoder blocks)
    float* dlm32;         // (B*Tt, D) fp32 gradient of lm_in32
    float* dbias_enc;     // (H, Ts, Ts) fp32
    float* dbias_dec;     // (H, Tt, Tt) fp32
    float* rms_scratch;   // rmsnorm_backward_scratch_floats
    void* emb_scratch;
    void* ce_scratch;

    uint64_t* seed_dev;   // (1) uint64 the dropout seed the kernels read (dropout.cuh device seed)

    // CUDA graphs of forward+backward (opt.cuda_graph), one per fixed shape; see t5_model_forward_backward
    StepGraph graphs[T5_MAX_GRAPHS];
    uint64_t graph_clock;     // LRU stamp
    int* ready_log;           // units in the order the backward called grad_ready (replayed on the host)
    int ready_count, ready_cap;

    void* arena;
    size_t arena_bytes;
    uint64_t seed;
    float p;  // dropout probability of the current forward
    bool fwd_with_grad;
    // t5_model_set_profile: events recorded between the forward's segments (src/report/flops_profile.h's order)
    cudaEvent_t* prof_ev;
    int prof_n, prof_i;
    bool prof_on;           // only inside t5_model_forward (not the backward's recomputation, not a graph capture)
};

// ---------------------------------------------------------------------------------------------
// arena: one cudaMalloc for every activation; a first pass with base == NULL measures it

typedef struct {
    char* base;
    size_t used;
} Arena;

static void* arena_take(Arena* a, size_t bytes) {
    size_t off = a->used;
    a->used += CEIL_DIV(bytes ? bytes : 1, (size_t)256) * 256;
    return a->base ? a->base + off : NULL;
}

// T codes of the pointer slots: 0 = Ts, 1 = Tt
static void attn_kind_codes(AttnKind kind, int* tq, int* tk) {
    *tq = kind == ATTN_ENC_SELF ? 0 : 1;
    *tk = kind == ATTN_DEC_SELF ? 1 : 0;
}

// registers one pointer array (both layout passes count them; the second has the real bases)
static int pslot_add(T5Model* M, const void* base, size_t es, bool heads, int ld, int tq, int tk) {
    if (!M->noperm) return -1;
    if (M->npslots == M->cap_pslots) {
        M->cap_pslots = M->cap_pslots ? 2 * M->cap_pslots : 256;
        M->pslots = realloc_check(M->pslots, (size_t)M->cap_pslots * sizeof(PtrSlot));
    }
    M->pslots[M->npslots] = (PtrSlot){.base = base, .es = (int)es, .heads = heads, .ld = ld, .tq = tq, .tk = tk};
    return M->npslots++;
}

static void layout_attn(T5Model* M, Arena* a, AttnActs* x, AttnKind kind, size_t xs, size_t ps, int B, int H, int Tq,
                        int Tk, int D, int HD, bool drop) {
    size_t Nq = (size_t)B * Tq, Nk = (size_t)B * Tk;
    int tq, tk;
    attn_kind_codes(kind, &tq, &tk);
    x->kind = kind;
    x->ln = arena_take(a, Nq * D * xs);
    x->rstd = arena_take(a, Nq * 4);
    // fuse_qkv: self-attention q|k|v in one (Nq, 3HD) tensor, cross-attention k|v in one (Nk, 2HD) tensor
    int ldq = HD, ldkv = HD;
    if (M->fuse_qkv && kind != ATTN_CROSS) {
        x->q = arena_take(a, Nq * 3 * HD * xs);
        x->k = (char*)x->q + HD * xs;
        x->v = (char*)x->q + 2 * HD * xs;
        ldq = ldkv = 3 * HD;
    } else if (M->fuse_qkv) {
        x->q = arena_take(a, Nq * HD * xs);
        x->k = arena_take(a, Nk * 2 * HD * xs);
        x->v = (char*)x->k + HD * xs;
        ldkv = 2 * HD;
    } else {
        x->q = arena_take(a, Nq * HD * xs);
        x->k = arena_take(a, Nk * HD * xs);
        x->v = arena_take(a, Nk * HD * xs);
    }
    x->probs = arena_take(a, (size_t)B * H * Tq * Tk * ps);
    x->probs_drop = drop || ps != xs ? arena_take(a, (size_t)B * H * Tq * Tk * xs) : NULL;
    x->ctx = arena_take(a, Nq * HD * xs);
    x->x_out = arena_take(a, Nq * D * 4);
    x->slot.q = pslot_add(M, x->q, xs, true, ldq, tq, tq);
    x->slot.k = pslot_add(M, x->k, xs, true, ldkv, tk, tk);
    x->slot.v = pslot_add(M, x->v, xs, true, ldkv, tk, tk);
    x->slot.ctx = pslot_add(M, x->ctx, xs, true, HD, tq, tq);
    x->slot.probs = pslot_add(M, x->probs, ps, false, 0, tq, tk);
    x->slot.probs_drop = drop || ps != xs ? pslot_add(M, x->probs_drop, xs, false, 0, tq, tk) : -1;
}

static void layout_ff(Arena* a, FFActs* f, size_t xs, size_t N, int D, int F, bool gated, bool drop) {
    f->ln = arena_take(a, N * D * xs);
    f->rstd = arena_take(a, N * 4);
    f->a = arena_take(a, N * F * xs);
    f->b = gated ? arena_take(a, N * F * xs) : NULL;
    f->g = gated ? arena_take(a, N * F * xs) : NULL;
    f->drop = drop ? arena_take(a, N * F * xs) : NULL;
}

static void model_layout(T5Model* M, Arena* a) {
    const int B = M->opt.max_B, Ts = M->opt.max_Ts, Tt = M->opt.max_Tt;
    const size_t xs = M->xs, ps = dtype_size(M->PX), Ns = (size_t)B * Ts, Nt = (size_t)B * Tt, Nmax = T5_MAX(Ns, Nt);
    const int D = M->D, H = M->H, HD = M->HD, F = M->F, V = M->V;
    const bool drop = M->opt.dropout_rate > 0;
    const bool one = M->opt.gradient_checkpointing || M->opt.forward_only;  // one block's activations
    const bool fwd = M->opt.forward_only;  // no backward: none of the gradient buffers below

    M->input_ids = arena_take(a, Ns * 4);
    M->attn_mask = arena_take(a, Ns * 4);
    M->dec_ids = arena_take(a, Nt * 4);
    M->dec_mask = arena_take(a, Nt * 4);
    M->labels = arena_take(a, Nt * 4);
    M->buckets_enc = arena_take(a, (size_t)relpos_table_len(Ts) * 4);
    M->buckets_dec = arena_take(a, (size_t)relpos_table_len(Tt) * 4);

    for (int l = 0; l <= M->L; l++) M->resid_enc[l] = arena_take(a, Ns * D * 4);
    for (int l = 0; l <= M->Ld; l++) M->resid_dec[l] = arena_take(a, Nt * D * 4);
    int ne = one ? 1 : M->L, nd = one ? 1 : M->Ld;
    M->npslots = 0;
    for (int l = 0; l < ne; l++) {
        layout_attn(M, a, &M->enc_acts[l].sa, ATTN_ENC_SELF, xs, ps, B, H, Ts, Ts, D, HD, drop);
        layout_ff(a, &M->enc_acts[l].ff, xs, Ns, D, F, M->gated, drop);
    }
    for (int l = 0; l < nd; l++) {
        layout_attn(M, a, &M->dec_acts[l].sa, ATTN_DEC_SELF, xs, ps, B, H, Tt, Tt, D, HD, drop);
        layout_attn(M, a, &M->dec_acts[l].ca, ATTN_CROSS, xs, ps, B, H, Tt, Ts, D, HD, drop);
        layout_ff(a, &M->dec_acts[l].ff, xs, Nt, D, F, M->gated, drop);
    }
    M->bias_enc = arena_take(a, (size_t)H * Ts * Ts * 4);
    M->bias_dec = arena_take(a, (size_t)H * Tt * Tt * 4);
    M->rstd_encf = arena_take(a, Ns * 4);
    M->rstd_decf = arena_take(a, Nt * 4);
    M->enc_out32 = arena_take(a, Ns * D * 4);
    M->enc_out = arena_take(a, Ns * D * xs);
    M->lm_in32 = arena_take(a, Nt * D * 4);
    M->lm_in = arena_take(a, Nt * D * xs);
    M->dlm32 = fwd ? NULL : arena_take(a, Nt * D * 4);
    M->logits = arena_take(a, Nt * V * xs);
    M->dlogits = M->opt.keep_logits && !fwd ? arena_take(a, Nt * V * xs) : M->logits;
    M->loss = arena_take(a, 4);
    M->seed_dev = arena_take(a, sizeof(uint64_t));
    M->losses = arena_take(a, Nt * 4);

    size_t TT = T5_MAX(T5_MAX((size_t)Ts * Ts, (size_t)Tt * Tt), (size_t)Tt * Ts);
    size_t NHD = Nmax * (size_t)HD;
    M->lin = arena_take(a, Nmax * T5_MAX(HD, D) * xs);
    M->scores = arena_take(a, (size_t)B * H * TT * 4);
    // the forward's scratch: lin, scores (fp32 Q K^T) and dS (Q K^T in X); the rest is the backward's
    M->dS = arena_take(a, (size_t)B * H * TT * T5_MAX(ps, xs));
    for (int kd = 0; kd < ATTN_KINDS; kd++) {
        int tq, tk;
        attn_kind_codes((AttnKind)kd, &tq, &tk);
        M->sslot[kd] = (ScratchSlots){.scores = pslot_add(M, M->scores, 4, false, 0, tq, tk),
                                      .dS = pslot_add(M, M->dS, xs, false, 0, tq, tk),
                                      .dP = -1, .dctx = -1, .dq = -1, .dk = -1, .dv = -1};
    }
    if (fwd) {
        M->ce_scratch = arena_take(a, cross_entropy_scratch_bytes((int)Nt));
        return;
    }
    M->dbranch = arena_take(a, Nmax * D * xs);
    M->dctx = arena_take(a, NHD * xs);
    M->dOh = M->noperm ? NULL : arena_take(a, NHD * xs);
    M->dP = arena_take(a, (size_t)B * H * TT * T5_MAX(ps, xs));
    M->dqh = M->noperm ? NULL : arena_take(a, NHD * xs);
    M->dkh = M->noperm ? NULL : arena_take(a, NHD * xs);
    M->dvh = M->noperm ? NULL : arena_take(a, NHD * xs);
    M->dqm = arena_take(a, NHD * xs);
    M->dkm = M->fuse_qkv ? NULL : arena_take(a, NHD * xs);
    M->dvm = M->fuse_qkv ? NULL : arena_take(a, NHD * xs);
    M->dqkv = M->fuse_qkv ? arena_take(a, 3 * NHD * xs) : NULL;
    for (int kd = 0; kd < ATTN_KINDS; kd++) {
        int tq, tk;
        attn_kind_codes((AttnKind)kd, &tq, &tk);
        ScratchSlots* ss = &M->sslot[kd];
        ss->dP = pslot_add(M, M->dP, ps, false, 0, tq, tk);
        ss->dctx = pslot_add(M, M->dctx, xs, true, HD, tq, tq);
        if (M->fuse_qkv && kd != ATTN_CROSS) {  // d(q|k|v) (N, 3HD): one dX and one dW GEMM for the three
            ss->dq = pslot_add(M, M->dqkv, xs, true, 3 * HD, tq, tq);
            ss->dk = pslot_add(M, (char*)M->dqkv + HD * xs, xs, true, 3 * HD, tk, tk);
            ss->dv = pslot_add(M, (char*)M->dqkv + 2 * HD * xs, xs, true, 3 * HD, tk, tk);
        } else if (M->fuse_qkv) {  // cross: dq (Nq, HD), d(k|v) (Nk, 2HD)
            ss->dq = pslot_add(M, M->dqm, xs, true, HD, tq, tq);
            ss->dk = pslot_add(M, M->dqkv, xs, true, 2 * HD, tk, tk);
            ss->dv = pslot_add(M, (char*)M->dqkv + HD * xs, xs, true, 2 * HD, tk, tk);
        } else {
            ss->dq = pslot_add(M, M->dqm, xs, true, HD, tq, tq);
            ss->dk = pslot_add(M, M->dkm, xs, true, HD, tk, tk);
            ss->dv = pslot_add(M, M->dvm, xs, true, HD, tk, tk);
        }
    }
    M->dln = arena_take(a, Nmax * D * xs);
    M->dff = arena_take(a, Nmax * F * xs);
    M->dfa = arena_take(a, Nmax * F * xs);
    M->dfb = arena_take(a, Nmax * F * xs);
    M->dres_enc = arena_take(a, Ns * D * 4);
    M->dres_dec = arena_take(a, Nt * D * 4);
    M->d_enc = arena_take(a, Ns * D * 4);
    M->dbias_enc = arena_take(a, (size_t)H * Ts * Ts * 4);
    M->dbias_dec = arena_take(a, (size_t)H * Tt * Tt * 4);
    M->rms_scratch = arena_take(a, rmsnorm_backward_scratch_floats((int)Nmax, D) * 4);
    M->emb_scratch = arena_take(a, embedding_backward_scratch_bytes((int)Nmax));
    M->ce_scratch = arena_take(a, cross_entropy_scratch_bytes((int)Nt));
}

// the dimensions model_layout reads, from the table and the options (t5_model_create and the twin below)
static void model_dims(T5Model* M, const ParamTable* t, const T5ModelOptions* opt) {
    const T5Config* c = &t->cfg;
    M->t = t;
    M->opt = *opt;
    M->X = opt->dtype;
    M->xs = dtype_size(opt->dtype);
    M->PX = opt->probs_in_x ? opt->dtype : DT_F32;
    M->NX = opt->nongemm_in_x ? opt->dtype : DT_F32;
    M->D = c->d_model;
    M->H = c->num_heads;
    M->Dk = c->d_kv;
    M->HD = c->num_heads * c->d_kv;
    M->F = c->d_ff;
    M->V = c->vocab_size;
    M->L = c->num_layers;
    M->Ld = c->num_decoder_layers;
    M->gated = c->feed_forward == T5_FF_GATED_GELU;
    M->ptr_stride = CEIL_DIV((size_t)opt->max_B * M->H, (size_t)32) * 32;  // 256-byte aligned arrays
}

bool t5_model_qkv_contiguous(const ParamTable* t) {
    const size_t W = (size_t)t->cfg.num_heads * t->cfg.d_kv * t->cfg.d_model;
    const ParamDesc* P = t->params;
    for (int l = 0; l < t->cfg.num_layers + t->cfg.num_decoder_layers; l++) {
        BlockParamIdx b;
        params_block_index(t, l < t->cfg.num_layers ? STACK_ENCODER : STACK_DECODER,
                           l < t->cfg.num_layers ? l : l - t->cfg.num_layers, &b);
        if (P[b.k].offset != P[b.q].offset + W || P[b.v].offset != P[b.k].offset + W) return false;
        if (b.ck >= 0 && P[b.cv].offset != P[b.ck].offset + W) return false;
    }
    return true;
}

size_t t5_model_activation_bytes_for(const ParamTable* t, const T5ModelOptions* opt, bool noperm, bool fuse_qkv,
                                     size_t* ptr_bytes) {
    if (ptr_bytes) *ptr_bytes = 0;
    if (opt->max_B <= 0 || opt->max_Ts <= 0 || opt->max_Tt <= 0) return 0;
    T5Model* M = calloc_check(1, sizeof *M);
    model_dims(M, t, opt);
    M->noperm = noperm;
    M->fuse_qkv = noperm && fuse_qkv;
    M->resid_enc = calloc_check((size_t)M->L + 1, sizeof(float*));
    M->resid_dec = calloc_check((size_t)M->Ld + 1, sizeof(float*));
    const bool one = opt->gradient_checkpointing || opt->forward_only;
    int ne = one ? 1 : M->L, nd = one ? 1 : M->Ld;
    M->enc_acts = calloc_check((size_t)T5_MAX(ne, 1), sizeof(BlockActs));
    M->dec_acts = calloc_check((size_t)T5_MAX(nd, 1), sizeof(BlockActs));
    Arena a = {0};
    model_layout(M, &a);
    if (ptr_bytes && M->noperm) *ptr_bytes = (size_t)M->npslots * M->ptr_stride * sizeof(void*);
    free(M->pslots);
    free(M->resid_enc);
    free(M->resid_dec);
    free(M->enc_acts);
    free(M->dec_acts);
    free(M);
    return a.used;
}

// ---------------------------------------------------------------------------------------------
// attention head pointers (see T5Model.noperm)

// largest power of two <= 256 dividing every byte offset given (0 = no constraint)
static int ptr_align(int64_t o1, int64_t o2, int64_t o3) {
    int a = 256;
    while (a > 1 && ((o1 % a) != 0 || (o2 % a) != 0 || (o3 % a) != 0)) a >>= 1;
    return a;
}

// operand of a pointer-array GEMM: the array, the row length of its matrices (0 = packed), their alignment
typedef struct {
    void* const* p;
    int ld;
    int align;
} BatchOp;

// heads of a (B*T, ld) tensor, es bytes per element; ld and the base come from the slot (the creation-time
// probe, before any slot exists, asks for ld = probe_ld at a base offset of probe_off bytes)
static BatchOp heads_op_ld(const T5Model* M, int slot, int T, size_t es, int ld, int64_t base_off) {
    const int64_t sb = (int64_t)T * ld * (int64_t)es, sh = (int64_t)M->Dk * (int64_t)es;
    return (BatchOp){.p = M->ptr_dev ? M->ptr_dev + (size_t)slot * M->ptr_stride : NULL,
                     .ld = ld,
                     .align = ptr_align(sb, sh, base_off)};
}
static BatchOp heads_op(const T5Model* M, int slot, int T, size_t es) {
    const PtrSlot* ps = &M->pslots[slot];
    return heads_op_ld(M, slot, T, es, ps->ld, (int64_t)((uintptr_t)ps->base % 256));
}

// (B, H, Tq, Tk) contiguous, es bytes per element
static BatchOp mats_op(const T5Model* M, int slot, int Tq, int Tk, size_t es) {
    return (BatchOp){.p = M->ptr_dev ? M->ptr_dev + (size_t)slot * M->ptr_stride : NULL,
                     .ld = 0,
                     .align = ptr_align((int64_t)Tq * Tk * (int64_t)es, 0, 0)};
}

// batched row-major GEMM over the B*H heads of the current batch: d[i] (m,n) = op(a[i]) op(b[i]), X operands
static void bmm_ptr(const T5Model* M, BatchOp d, DType dt_d, BatchOp a, bool ta, BatchOp b, bool tb, int m, int n,
                    int k, cudaStream_t s) {
    GemmDesc g = {.M = m, .N = n, .K = k, .trans_a = ta, .trans_b = tb, .dt_ab = M->X, .dt_d = dt_d,
                  .batch = M->B * M->H, .lda = a.ld, .ldb = b.ld, .ldd = d.ld, .alpha = 1.0f, .beta = 0.0f,
                  .epilogue = GEMM_EPI_NONE};
    matmul_batched_ptr(&g, d.p, (const void* const*)a.p, (const void* const*)b.p, a.align, b.align, d.align, s);
}

// true when the six attention GEMMs of the pointer-array path have an algorithm at the largest shape with heads of
// row length ld at a base offset of base_off bytes (asked once, host only; the arrays are not touched)
static bool attn_ptr_probe(T5Model* M, int ld, int64_t base_off, int* fail_mnk) {
    M->ptr_dev = NULL;
    const int T = T5_MAX(M->opt.max_Ts, M->opt.max_Tt), Dk = M->Dk;
    const size_t xs = M->xs, ps = dtype_size(M->PX);
    const DType sdt = M->opt.scores_fp32 || M->X == DT_F32 ? DT_F32 : M->X;
    const BatchOp hq = heads_op_ld(M, 0, T, xs, ld, base_off), pm = mats_op(M, 0, T, T, xs);
    const BatchOp sm = mats_op(M, 0, T, T, dtype_size(sdt)), dpm = mats_op(M, 0, T, T, ps);
    struct {
        BatchOp d, a, b;
        DType dt_d;
        bool ta, tb;
        int m, n, k;
    } c[6] = {
        {sm, hq, hq, sdt, false, true, T, T, Dk},   // S = Q K^T
        {hq, pm, hq, M->X, false, false, T, Dk, T},  // ctx = P V
        {dpm, hq, hq, M->PX, false, true, T, T, Dk},  // dP = dO V^T
        {hq, pm, hq, M->X, true, false, T, Dk, T},   // dV = P^T dO
        {hq, pm, hq, M->X, false, false, T, Dk, T},  // dQ = dS K
        {hq, pm, hq, M->X, true, false, T, Dk, T},   // dK = dS^T Q
    };
    for (int i = 0; i < 6; i++) {
        GemmDesc g = {.M = c[i].m, .N = c[i].n, .K = c[i].k, .trans_a = c[i].ta, .trans_b = c[i].tb, .dt_ab = M->X,
                      .dt_d = c[i].dt_d, .batch = M->opt.max_B * M->H, .lda = c[i].a.ld, .ldb = c[i].b.ld,
                      .ldd = c[i].d.ld, .alpha = 1.0f, .beta = 0.0f, .epilogue = GEMM_EPI_NONE};
        if (!matmul_batched_ptr_supported(&g, c[i].a.align, c[i].b.align, c[i].d.align)) {
            fail_mnk[0] = g.M, fail_mnk[1] = g.N, fail_mnk[2] = g.K;
            return false;
        }
    }
    return true;
}

// pointer-array attention unless T5TRAIN_ATTN_PERMUTE=1 asks for the permuted path or cuBLASLt lacks it
static bool attn_noperm_choose(T5Model* M) {
    const char* e = getenv("T5TRAIN_ATTN_PERMUTE");
    if (e && strcmp(e, "1") == 0) return false;
    int mnk[3];
    if (!attn_ptr_probe(M, M->HD, 0, mnk)) {
        t5_warn("attention: cuBLASLt has no pointer-array GEMM for %s (M=%d N=%d K=%d); heads are permuted",
                dtype_name(M->X), mnk[0], mnk[1], mnk[2]);
        return false;
    }
    return true;
}

// fused projections (pointer-array path only): q|k|v of every self-attention and k|v of every cross-attention
// are adjacent in the unit (HF order q, k, v), so one GEMM with the (3HD, D) / (2HD, D) weight block computes
// them, and one dX and one dW GEMM take their backward; the heads are then read with row length 3HD / 2HD.
// T5TRAIN_FUSE_QKV=0 turns it off (the separate GEMMs).
static bool attn_fuse_choose(T5Model* M) {
    const char* e = getenv("T5TRAIN_FUSE_QKV");
    if (!M->noperm || (e && strcmp(e, "0") == 0)) return false;
    const size_t W = (size_t)M->HD * M->D;
    const ParamDesc* P = M->t->params;
    for (int l = 0; l < M->L + M->Ld; l++) {
        const BlockParamIdx* b = l < M->L ? &M->enc_idx[l] : &M->dec_idx[l - M->L];
        if (P[b->k].offset != P[b->q].offset + W || P[b->v].offset != P[b->k].offset + W) return false;
        if (b->ck >= 0 && P[b->cv].offset != P[b->ck].offset + W) return false;
    }
    int mnk[3];
    return attn_ptr_probe(M, 3 * M->HD, (int64_t)(M->HD * M->xs), mnk) &&
           attn_ptr_probe(M, 2 * M->HD, (int64_t)(M->HD * M->xs), mnk);
}

// writes the first B*H pointers of every slot for the current (B, Ts, Tt), when that shape changed. Uploaded in
// `stream`'s order: only from t5_model_set_batch (between its stream synchronisations), never inside a step.
static void attn_ptrs_build(T5Model* M, cudaStream_t stream) {
    if (!M->noperm || (M->ptr_B == M->B && M->ptr_Ts == M->Ts && M->ptr_Tt == M->Tt)) return;
    const int B = M->B, H = M->H, Dk = M->Dk;
    const size_t BHmax = M->ptr_stride;
    for (int j = 0; j < M->npslots; j++) {
        const PtrSlot* ps = &M->pslots[j];
        void** out = M->ptr_host + (size_t)j * BHmax;
        const int Tq = ps->tq ? M->Tt : M->Ts, Tk = ps->tk ? M->Tt : M->Ts;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const size_t off = ps->heads ? (size_t)b * Tq * ps->ld + (size_t)h * Dk : (size_t)(b * H + h) * Tq * Tk;
                out[b * H + h] = (void*)(ps->base + off * (size_t)ps->es);
            }
    }
    CUDA_CHECK(cudaMemcpyAsync(M->ptr_dev, M->ptr_host, (size_t)M->npslots * BHmax * sizeof(void*),
                               cudaMemcpyHostToDevice, stream));
    M->ptr_B = M->B;
    M->ptr_Ts = M->Ts;
    M->ptr_Tt = M->Tt;
}

T5Model* t5_model_create(const ParamTable* t, ZeroEngine* Z, const T5ModelOptions* opt, char* err, size_t errlen) {
    const T5Config* c = &t->cfg;
    if (opt->max_B <= 0 || opt->max_Ts <= 0 || opt->max_Tt <= 0) {
        snprintf(err, errlen, "invalid model sizes: max batch %d, max source length %d, max target length %d",
                 opt->max_B, opt->max_Ts, opt->max_Tt);
        return NULL;
    }
    if (!(opt->label_smoothing >= 0.0f && opt->label_smoothing < 1.0f)) {
        snprintf(err, errlen, "label smoothing %g outside [0, 1)", (double)opt->label_smoothing);
        return NULL;
    }
    if (opt->dtype != zero_working_dtype(Z)) {
        snprintf(err, errlen, "model dtype %s differs from the parameter engine's working dtype %s",
                 dtype_name(opt->dtype), dtype_name(zero_working_dtype(Z)));
        return NULL;
    }
    T5Model* M = calloc_check(1, sizeof *M);
    model_dims(M, t, opt);
    M->Z = Z;
    M->GD = zero_grad_dtype(Z);
    M->gs = dtype_size(M->GD);
    M->NB = c->relative_attention_num_buckets;
    M->max_dist = c->relative_attention_max_distance;
    M->eps = c->layer_norm_epsilon;
    M->tied = c->tie_word_embeddings;
    M->scale_out = c->scale_decoder_outputs;
    M->train = true;

    M->enc_idx = calloc_check((size_t)M->L, sizeof(BlockParamIdx));
    M->dec_idx = calloc_check((size_t)M->Ld, sizeof(BlockParamIdx));
    for (int l = 0; l < M->L; l++) params_block_index(t, STACK_ENCODER, l, &M->enc_idx[l]);
    for (int l = 0; l < M->Ld; l++) params_block_index(t, STACK_DECODER, l, &M->dec_idx[l]);
    M->p_embed = params_find(t, ROLE_EMBED, STACK_NONE, -1);
    M->p_lm_head = M->tied ? M->p_embed : params_find(t, ROLE_LM_HEAD, STACK_NONE, -1);
    M->p_enc_final = params_find(t, ROLE_FINAL_LN, STACK_ENCODER, -1);
    M->p_dec_final = params_find(t, ROLE_FINAL_LN, STACK_DECODER, -1);
    M->u_shared = params_unit_shared(t);
    M->u_final = params_unit_final_norms(t);
    M->u_lm = M->tied ? M->u_shared : params_unit_lm_head(t);

    M->resid_enc = calloc_check((size_t)M->L + 1, sizeof(float*));
    M->resid_dec = calloc_check((size_t)M->Ld + 1, sizeof(float*));
    const bool one = opt->gradient_checkpointing || opt->forward_only;
    int ne = one ? 1 : M->L, nd = one ? 1 : M->Ld;
    M->enc_acts = calloc_check((size_t)T5_MAX(ne, 1), sizeof(BlockActs));
    M->dec_acts = calloc_check((size_t)T5_MAX(nd, 1), sizeof(BlockActs));

    M->noperm = attn_noperm_choose(M);
    M->fuse_qkv = attn_fuse_choose(M);
    M->ptr_B = M->ptr_Ts = M->ptr_Tt = -1;
    Arena a = {0};
    model_layout(M, &a);
    M->arena_bytes = a.used;
    if (a.used != t5_model_activation_bytes_for(t, opt, M->noperm, M->fuse_qkv, NULL))
        t5_die(T5_EXIT_FAILURE, "internal: the activation arena (%zu bytes) differs from t5_model_activation_bytes_for",
               a.used);
    if (cudaMalloc(&M->arena, a.used) != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        snprintf(err, errlen,
                 "out of GPU memory for activations: %.2f GiB needed for batch %d x (%d, %d) in %s, %.2f GiB free%s",
                 (double)a.used / (1 << 30), opt->max_B, opt->max_Ts, opt->max_Tt, dtype_name(opt->dtype),
                 (double)free_b / (1 << 30),
                 opt->gradient_checkpointing || opt->forward_only ? "" : " (gradient_checkpointing would keep only block inputs)");
        t5_model_destroy(M);
        return NULL;
    }
    a = (Arena){.base = M->arena};
    model_layout(M, &a);
    if (M->noperm) {
        const size_t n = (size_t)M->npslots * M->ptr_stride;
        M->ptr_host = calloc_check(n, sizeof(void*));
        CUDA_CHECK(cudaMalloc((void**)&M->ptr_dev, n * sizeof(void*)));
    }

    // bucket tables (host, HF's fp32 formula) -> device once
    int nb_e = relpos_table_len(opt->max_Ts), nb_d = relpos_table_len(opt->max_Tt);
    int* h = malloc_check((size_t)T5_MAX(nb_e, nb_d) * sizeof(int));
    M->relo_enc = relpos_bucket_table(h, opt->max_Ts, true, M->NB, M->max_dist);
    CUDA_CHECK(cudaMemcpy(M->buckets_enc, h, (size_t)nb_e * sizeof(int), cudaMemcpyHostToDevice));
    M->relo_dec = relpos_bucket_table(h, opt->max_Tt, false, M->NB, M->max_dist);
    CUDA_CHECK(cudaMemcpy(M->buckets_dec, h, (size_t)nb_d * sizeof(int), cudaMemcpyHostToDevice));
    free(h);
    matmul_init();
    // the legacy-stream uploads above must have landed before the caller's (possibly non-blocking) stream runs
    CUDA_CHECK(cudaDeviceSynchronize());
    return M;
}

void t5_set_tf32(bool on) { matmul_set_tf32(on); }

void t5_model_destroy(T5Model* M) {
    if (!M) return;
    for (int i = 0; i < T5_MAX_GRAPHS; i++) {
        if (M->graphs[i].captured) CUDA_CHECK(cudaGraphExecDestroy(M->graphs[i].exec));
        free(M->graphs[i].ready);
    }
    free(M->ready_log);
    if (M->arena) cudaFree(M->arena);
    if (M->ptr_dev) cudaFree(M->ptr_dev);
    free(M->ptr_host);
    free(M->pslots);
    free(M->enc_idx);
    free(M->dec_idx);
    free(M->resid_enc);
    free(M->resid_dec);
    free(M->enc_acts);
    free(M->dec_acts);
    free(M);
}

size_t t5_model_activation_bytes(const T5Model* M) { return M->arena_bytes; }
void t5_model_set_train(T5Model* M, bool train) { M->train = train; }
const float* t5_model_loss_device(const T5Model* M) { return M->loss; }
const void* t5_model_logits(const T5Model* M) { return M->logits; }

float t5_model_loss(T5Model* M, cudaStream_t stream) {
    float h = 0;
    CUDA_CHECK(cudaMemcpyAsync(&h, M->loss, sizeof h, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return h;
}

// ---------------------------------------------------------------------------------------------
// batch

static int check_ids(const int* ids, int B, int T, int lo, int hi, bool allow_ignore, const char* field, char* err,
                     size_t errlen) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            int v = ids[(size_t)b * T + i];
            if (allow_ignore && v == T5_LABEL_IGNORE) continue;
            if (v < lo || v >= hi) {
                snprintf(err, errlen, "%s[%d][%d] = %d is outside [%d, %d)%s", field, b, i, v, lo, hi,
                         allow_ignore ? " and is not -100" : "");
                return -1;
            }
        }
    return 0;
}

int t5_model_set_batch(T5Model* M, const T5Batch* bt, cudaStream_t stream, char* err, size_t errlen) {
    if (bt->B <= 0 || bt->Ts <= 0 || bt->Tt <= 0 || bt->B > M->opt.max_B || bt->Ts > M->opt.max_Ts ||
        bt->Tt > M->opt.max_Tt) {
        snprintf(err, errlen, "batch shape (B %d, Ts %d, Tt %d) is empty or exceeds the model's maxima (%d, %d, %d)",
                 bt->B, bt->Ts, bt->Tt, M->opt.max_B, M->opt.max_Ts, M->opt.max_Tt);
        return -1;
    }
    if (!bt->input_ids) {
        snprintf(err, errlen, "batch has no input_ids");
        return -1;
    }
    if (!bt->labels && !bt->decoder_input_ids) {
        snprintf(err, errlen, "batch has neither labels nor decoder_input_ids");
        return -1;
    }
    const int B = bt->B, Ts = bt->Ts, Tt = bt->Tt;
    size_t Ns = (size_t)B * Ts, Nt = (size_t)B * Tt;
    if (check_ids(bt->input_ids, B, Ts, 0, M->V, false, "input_ids", err, errlen)) return -1;
    if (bt->attention_mask && check_ids(bt->attention_mask, B, Ts, 0, 2, false, "attention_mask", err, errlen))
        return -1;
    if (bt->labels && check_ids(bt->labels, B, Tt, 0, M->V, true, "labels", err, errlen)) return -1;
    if (bt->decoder_input_ids && check_ids(bt->decoder_input_ids, B, Tt, 0, M->V, false, "decoder_input_ids", err, errlen))
        return -1;
    if (bt->decoder_attention_mask &&
        check_ids(bt->decoder_attention_mask, B, Tt, 0, 2, false, "decoder_attention_mask", err, errlen))
        return -1;

    int* host = malloc_check((Ns + 2 * Nt) * sizeof(int));
    int* mask = host;
    int* dec = host + Ns;
    for (size_t i = 0; i < Ns; i++) mask[i] = bt->attention_mask ? bt->attention_mask[i] : 1;
    if (bt->decoder_input_ids) {
        memcpy(dec, bt->decoder_input_ids, Nt * sizeof(int));
    } else {
        // HF _shift_right: start token, then labels[:-1] with -100 replaced by pad
        for (int b = 0; b < B; b++) {
            dec[(size_t)b * Tt] = M->t->cfg.decoder_start_token_id;
            for (int i = 1; i < Tt; i++) {
                int v = bt->labels[(size_t)b * Tt + i - 1];
                dec[(size_t)b * Tt + i] = v == T5_LABEL_IGNORE ? M->t->cfg.pad_token_id : v;
            }
        }
    }
    M->B = B;
    M->Ts = Ts;
    M->Tt = Tt;
    M->has_labels = bt->labels != NULL;
    M->has_dec_mask = bt->decoder_attention_mask != NULL;
    // copies in the stream's order, then waited for: the host arrays are freed right after (outside forward/backward).
    // (A plain cudaMemcpy runs on the legacy stream and, from pageable memory, may return before its DMA lands: a
    // kernel on a non-blocking stream could then read the old ids or head pointers.)
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemcpyAsync(M->input_ids, bt->input_ids, Ns * sizeof(int), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(M->attn_mask, mask, Ns * sizeof(int), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(M->dec_ids, dec, Nt * sizeof(int), cudaMemcpyHostToDevice, stream));
    if (bt->labels) CUDA_CHECK(cudaMemcpyAsync(M->labels, bt->labels, Nt * sizeof(int), cudaMemcpyHostToDevice, stream));
    if (bt->decoder_attention_mask)
        CUDA_CHECK(cudaMemcpyAsync(M->dec_mask, bt->decoder_attention_mask, Nt * sizeof(int), cudaMemcpyHostToDevice,
                                   stream));
    attn_ptrs_build(M, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    free(host);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// helpers

static inline void* wptr(const T5Model* M, void* unit_base, int pidx) {
    return (char*)unit_base + M->t->params[pidx].offset * M->xs;
}
// gradient of a parameter, dtype M->GD (zero_grad_dtype: X, or fp32)
static inline void* gptr(const T5Model* M, void* grad_base, int pidx) {
    return (char*)grad_base + M->t->params[pidx].offset * M->gs;
}
// weights of a non-GEMM op (norm weight, bias table, embedding lookup), dtype M->NX
static inline const void* nwptr(const T5Model* M, void* unit_base, int pidx) {
    return M->cur_f32 ? (const void*)zero_fp32_tensor(M->Z, M->cur_unit, M->t->params[pidx].offset)
                      : wptr(M, unit_base, pidx);
}
// zero_fetch plus (unless nongemm_in_x) the unit's fp32 view for the non-GEMM ops.
// NOTE(numerics): as HF autocast, RMSNorm weights, the relative-bias tables and the embedding lookup use fp32
// parameters; only GEMM operands are X. (In fp32 runs both views are the same buffer.)
static void* unit_fetch(T5Model* M, int unit, cudaStream_t s) {
    void* wb = zero_fetch(M->Z, unit, s);
    M->cur_unit = unit;
    M->cur_f32 = M->NX == DT_F32;
    return wb;
}

// zero_grad_ready, logged so that a graph replay can repeat the engine's host bookkeeping in the same order
static void unit_grad_ready(T5Model* M, int unit, cudaStream_t s) {
    zero_grad_ready(M->Z, unit, s);
    if (M->ready_count == M->ready_cap) {
        M->ready_cap = M->ready_cap ? 2 * M->ready_cap : 64;
        M->ready_log = realloc_check(M->ready_log, (size_t)M->ready_cap * sizeof(int));
    }
    M->ready_log[M->ready_count++] = unit;
}

// batched row-major GEMM: d[i] (M,N) = op(a[i]) op(b[i]) for i < batch
// the next profile event (t5_model_set_profile), in stream order; a no-op unless profiling this forward
static void prof_mark(T5Model* M, cudaStream_t s) {
    if (!M->prof_on || M->prof_i >= M->prof_n) return;
    CUDA_CHECK(cudaEventRecord(M->prof_ev[M->prof_i++], s));
}

static void bmm(void* d, DType dt_d, const void* a, bool ta, const void* b, bool tb, DType dt_ab, int batch, int m,
                int n, int k, int64_t sa, int64_t sb, int64_t sd, cudaStream_t s) {
    GemmDesc g = {.M = m, .N = n, .K = k, .trans_a = ta, .trans_b = tb, .dt_ab = dt_ab, .dt_d = dt_d,
                  .batch = batch, .stride_a = sa, .stride_b = sb, .stride_d = sd, .alpha = 1.0f, .beta = 0.0f,
                  .epilogue = GEMM_EPI_NONE};
    matmul(&g, d, a, b, s);
}

// ---------------------------------------------------------------------------------------------
// attention sublayer
//   x_out (B*Tq, D) fp32 = x_in + dropout(o(attn(rmsnorm(x_in))))
//   kv_src: NULL for self-attention (k, v from the normed input), else (B*Tk, D) X (encoder output)

typedef struct {
    int q, k, v, o, ln;
} AttnIdx;

// true when P V reads a separate X tensor (dropout on, or probabilities stored in fp32)
static bool attn_separate_pv(const T5Model* M) { return M->p > 0 || M->PX != M->X; }

static void attn_forward(T5Model* M, void* wb, AttnIdx w, AttnActs* a, const float* x_in, const void* kv_src, int Tq,
                         int Tk, const float* bias, const int* key_mask, bool causal, uint64_t off_probs,
                         uint64_t off_out, cudaStream_t s) {
    const DType X = M->X;
    const int B = M->B, H = M->H, Dk = M->Dk, HD = M->HD, D = M->D;
    const int Nq = B * Tq, Nk = B * Tk;
    const float p = M->p;
    rmsnorm_forward(a->ln, X, a->rstd, x_in, nwptr(M, wb, w.ln), M->NX, Nq, D, M->eps, s);
    const void* kv_in = kv_src ? kv_src : a->ln;
    const bool np = M->noperm;
    const size_t xs = M->xs;
    const ScratchSlots* ss = &M->sslot[a->kind];
    // q, k, v: fused (q|k|v (Nq, 3HD), or q (Nq, HD) and k|v (Nk, 2HD) for cross-attention), or each (B*T, HD) in
    // place (noperm), or through lin into (B, H, T, Dk)
    if (M->fuse_qkv && !kv_src) {
        linear_forward(a->q, X, a->ln, wptr(M, wb, w.q), X, Nq, 3 * HD, D, s);
    } else if (M->fuse_qkv) {
        linear_forward(a->q, X, a->ln, wptr(M, wb, w.q), X, Nq, HD, D, s);
        linear_forward(a->k, X, kv_in, wptr(M, wb, w.k), X, Nk, 2 * HD, D, s);
    } else {
        linear_forward(np ? a->q : M->lin, X, a->ln, wptr(M, wb, w.q), X, Nq, HD, D, s);
        if (!np) split_heads(a->q, M->lin, X, B, Tq, H, Dk, s);
        linear_forward(np ? a->k : M->lin, X, kv_in, wptr(M, wb, w.k), X, Nk, HD, D, s);
        if (!np) split_heads(a->k, M->lin, X, B, Tk, H, Dk, s);
        linear_forward(np ? a->v : M->lin, X, kv_in, wptr(M, wb, w.v), X, Nk, HD, D, s);
        if (!np) split_heads(a->v, M->lin, X, B, Tk, H, Dk, s);
    }
    // S (B,H,Tq,Tk) fp32 = Q K^T, no 1/sqrt(Dk) (T5 folds it into q's init)
    const int64_t sQ = (int64_t)Tq * Dk, sK = (int64_t)Tk * Dk, sS = (int64_t)Tq * Tk;
    const void* sc;
    DType sdt;
    if (M->opt.scores_fp32 || X == DT_F32) {
        if (np)
            bmm_ptr(M, mats_op(M, ss->scores, Tq, Tk, 4), DT_F32, heads_op(M, a->slot.q, Tq, xs), false,
                    heads_op(M, a->slot.k, Tk, xs), true, Tq, Tk, Dk, s);
        else
            bmm(M->scores, DT_F32, a->q, false, a->k, true, X, B * H, Tq, Tk, Dk, sQ, sK, sS, s);
        sc = M->scores;
        sdt = DT_F32;
    } else {
        // NOTE(numerics): as HF autocast, the Q K^T matmul outputs X; the position bias and the mask are then
        // added in fp32 (transformers 5 adds them out of place, promoting to fp32) and the softmax runs in fp32.
        // Measured on the tiny fixtures: fp32 scores put fp16 gradients 1.9x over tolerance vs HF (scores_fp32).
        // The softmax kernel reads the X scores as fp32 itself (no cast pass).
        if (np)
            bmm_ptr(M, mats_op(M, ss->dS, Tq, Tk, xs), X, heads_op(M, a->slot.q, Tq, xs), false,
                    heads_op(M, a->slot.k, Tk, xs), true, Tq, Tk, Dk, s);
        else
            bmm(M->dS, X, a->q, false, a->k, true, X, B * H, Tq, Tk, Dk, sQ, sK, sS, s);
        sc = M->dS;
        sdt = X;
    }
    // P of P V: X, written by the softmax kernel (dropout applied) unless it is the probs themselves
    const bool sep = attn_separate_pv(M);
    const void* pd = sep ? a->probs_drop : a->probs;
    attention_softmax_forward_ex(a->probs, M->PX, sep ? a->probs_drop : NULL, X, sc, sdt, bias, key_mask, causal, 0, B,
                                 H, Tq, Tk, p, M->seed, off_probs, s);
    // ctx heads (B,H,Tq,Dk) = dropout(P) V -> merged (B*Tq, HD) (written in place when noperm)
    if (np) {
        bmm_ptr(M, heads_op(M, a->slot.ctx, Tq, xs), X, mats_op(M, sep ? a->slot.probs_drop : a->slot.probs, Tq, Tk, xs),
                false, heads_op(M, a->slot.v, Tk, xs), false, Tq, Dk, Tk, s);
    } else {
        bmm(M->lin, X, pd, false, a->v, false, X, B * H, Tq, Dk, Tk, sS, sK, sQ, s);
        merge_heads(a->ctx, M->lin, X, B, Tq, H, Dk, s);
    }
    linear_forward(M->lin, X, a->ctx, wptr(M, wb, w.o), X, Nq, D, HD, s);
    residual_dropout_add_out(a->x_out, x_in, M->lin, X, (size_t)Nq * D, p, M->seed, off_out, s);
}

// dres (B*Tq, D) fp32: on entry d x_out, on exit d x_in (+= through the norm).
// d_kv (B*Tk, D) fp32 += gradient of kv_src (cross-attention), NULL for self-attention.
// dbias (H,Tq,Tk) fp32 += position-bias gradient, or NULL.
static void attn_backward(T5Model* M, void* wb, void* gb, AttnIdx w, const AttnActs* a, const float* x_in,
                          const void* kv_src, float* d_kv, int Tq, int Tk, float* dbias, uint64_t off_probs,
                          uint64_t off_out, float* dres, cudaStream_t s) {
    const DType X = M->X;
    const int B = M->B, H = M->H, Dk = M->Dk, HD = M->HD, D = M->D;
    const int Nq = B * Tq, Nk = B * Tk;
    const float p = M->p;
    const void* pd = attn_separate_pv(M) ? a->probs_drop : a->probs;  // the X operand of P V
    const int64_t sQ = (int64_t)Tq * Dk, sK = (int64_t)Tk * Dk, sS = (int64_t)Tq * Tk;
    residual_dropout_backward(M->dbranch, X, dres, (size_t)Nq * D, p, M->seed, off_out, s);
    linear_backward(M->dctx, X, false, gptr(M, gb, w.o), M->GD, false, M->dbranch, a->ctx, wptr(M, wb, w.o), X, Nq, D, HD, s);
    const bool np = M->noperm;
    const size_t xs = M->xs;
    const ScratchSlots* ss = &M->sslot[a->kind];
    const int pd_slot = attn_separate_pv(M) ? a->slot.probs_drop : a->slot.probs;
    // dP (B,H,Tq,Tk) PX = dO V^T ; dV (B,H,Tk,Dk) = dropout(P)^T dO   (dO: the heads of dctx)
    if (np) {
        bmm_ptr(M, mats_op(M, ss->dP, Tq, Tk, dtype_size(M->PX)), M->PX, heads_op(M, ss->dctx, Tq, xs), false,
                heads_op(M, a->slot.v, Tk, xs), true, Tq, Tk, Dk, s);
        bmm_ptr(M, heads_op(M, ss->dv, Tk, xs), X, mats_op(M, pd_slot, Tq, Tk, xs), true, heads_op(M, ss->dctx, Tq, xs),
                false, Tk, Dk, Tq, s);
    } else {
        split_heads(M->dOh, M->dctx, X, B, Tq, H, Dk, s);
        bmm(M->dP, M->PX, M->dOh, false, a->v, true, X, B * H, Tq, Tk, Dk, sQ, sK, sS, s);
        bmm(M->dvh, X, pd, true, M->dOh, false, X, B * H, Tk, Dk, Tq, sS, sQ, sK, s);
    }
    // softmax backward with the stored PX probabilities; dS PX, then X for the GEMMs (HF: the fp32 softmax
    // gradient is cast to X by the backward of scores.float())
    attention_softmax_backward_ex(M->dS, X, dbias, M->dP, a->probs, M->PX, B, H, Tq, Tk, p, M->seed, off_probs, s);
    const void* dSx = M->dS;
    // dQ (B,H,Tq,Dk) = dS K ; dK (B,H,Tk,Dk) = dS^T Q -> (B*T, HD) dqm, dkm, dvm
    if (np) {
        bmm_ptr(M, heads_op(M, ss->dq, Tq, xs), X, mats_op(M, ss->dS, Tq, Tk, xs), false, heads_op(M, a->slot.k, Tk, xs),
                false, Tq, Dk, Tk, s);
        bmm_ptr(M, heads_op(M, ss->dk, Tk, xs), X, mats_op(M, ss->dS, Tq, Tk, xs), true, heads_op(M, a->slot.q, Tq, xs),
                false, Tk, Dk, Tq, s);
    } else {
        bmm(M->dqh, X, dSx, false, a->k, false, X, B * H, Tq, Dk, Tk, sS, sK, sQ, s);
        bmm(M->dkh, X, dSx, true, a->q, false, X, B * H, Tk, Dk, Tq, sS, sQ, sK, s);
        merge_heads(M->dqm, M->dqh, X, B, Tq, H, Dk, s);
        merge_heads(M->dkm, M->dkh, X, B, Tk, H, Dk, s);
        merge_heads(M->dvm, M->dvh, X, B, Tk, H, Dk, s);
    }
    if (M->fuse_qkv && !kv_src) {
        // d ln = d(q|k|v) W_qkv in one fp32 accumulation; d W_qkv (3HD, D) = the q, k, v gradients, adjacent
        linear_backward(M->dln, X, false, gptr(M, gb, w.q), M->GD, false, M->dqkv, a->ln, wptr(M, wb, w.q), X, Nq,
                        3 * HD, D, s);
    } else if (M->fuse_qkv) {
        linear_backward(M->dln, X, false, gptr(M, gb, w.q), M->GD, false, M->dqm, a->ln, wptr(M, wb, w.q), X, Nq, HD,
                        D, s);
        linear_backward(d_kv, DT_F32, true, gptr(M, gb, w.k), M->GD, false, M->dqkv, kv_src, wptr(M, wb, w.k), X, Nk,
                        2 * HD, D, s);
    } else {
        linear_backward(M->dln, X, false, gptr(M, gb, w.q), M->GD, false, M->dqm, a->ln, wptr(M, wb, w.q), X, Nq, HD,
                        D, s);
        if (kv_src) {
            // the encoder output's gradient is summed in fp32 over every decoder block
            linear_backward(d_kv, DT_F32, true, gptr(M, gb, w.k), M->GD, false, M->dkm, kv_src, wptr(M, wb, w.k), X,
                            Nk, HD, D, s);
            linear_backward(d_kv, DT_F32, true, gptr(M, gb, w.v), M->GD, false, M->dvm, kv_src, wptr(M, wb, w.v), X,
                            Nk, HD, D, s);
        } else {
            linear_backward(M->dln, X, true, gptr(M, gb, w.k), M->GD, false, M->dkm, a->ln, wptr(M, wb, w.k), X, Nq, HD,
                            D, s);
            linear_backward(M->dln, X, true, gptr(M, gb, w.v), M->GD, false, M->dvm, a->ln, wptr(M, wb, w.v), X, Nq, HD,
                            D, s);
        }
    }
    rmsnorm_backward(dres, gptr(M, gb, w.ln), M->GD, false, M->dln, X, x_in, nwptr(M, wb, w.ln), M->NX, a->rstd, Nq, D, M->rms_scratch, s);
}

// ---------------------------------------------------------------------------------------------
// feed-forward sublayer: x_out = x_in + dropout(wo(dropout(act(...))))
// write_out == false (checkpoint recompute) stops after the activations the backward needs.

static void ff_forward(T5Model* M, void* wb, const BlockParamIdx* pi, FFActs* f, const float* x_in, float* x_out,
                       int N, uint64_t off_act, uint64_t off_out, bool write_out, cudaStream_t s) {
    const DType X = M->X;
    const int D = M->D, F = M->F;
    const float p = M->p;
    const size_t NF = (size_t)N * F;
    rmsnorm_forward(f->ln, X, f->rstd, x_in, nwptr(M, wb, pi->ffln), M->NX, N, D, M->eps, s);
    void* act;
    if (M->gated) {
        linear_forward(f->a, X, f->ln, wptr(M, wb, pi->wi0), X, N, F, D, s);
        linear_forward(f->b, X, f->ln, wptr(M, wb, pi->wi1), X, N, F, D, s);
        gated_gelu_forward(f->g, f->a, f->b, X, NF, s);
        act = f->g;
    } else {
        // a = relu(ln Wi^T): ReLU in the GEMM epilogue (on the fp32 accumulator, then one rounding: the same
        // values as rounding first, rounding is monotone and keeps the sign)
        GemmDesc g = {.M = N, .N = F, .K = D, .trans_a = false, .trans_b = true, .dt_ab = X, .dt_d = X, .batch = 1,
                      .alpha = 1.0f, .beta = 0.0f, .epilogue = GEMM_EPI_RELU};
        matmul(&g, f->a, f->ln, wptr(M, wb, pi->wi), s);
        act = f->a;
    }
    void* act_d = act;
    if (p > 0) {
        dropout_forward(f->drop, act, X, NF, p, M->seed, off_act, s);
        act_d = f->drop;
    }
    if (!write_out) return;
    // NOTE(numerics): HF keeps `wo` in fp32 (_keep_in_fp32_modules) when loading fp16 weights; under autocast
    // (our reference) wo runs in X like every other GEMM. A keep_wo_fp32 option can be added later.
    linear_forward(M->lin, X, act_d, wptr(M, wb, pi->wo), X, N, D, F, s);
    residual_dropout_add_out(x_out, x_in, M->lin, X, (size_t)N * D, p, M->seed, off_out, s);
}

static void ff_backward(T5Model* M, void* wb, void* gb, const BlockParamIdx* pi, const FFActs* f, const float* x_in,
                        int N, uint64_t off_act, uint64_t off_out, float* dres, cudaStream_t s) {
    const DType X = M->X;
    const int D = M->D, F = M->F;
    const float p = M->p;
    const size_t NF = (size_t)N * F;
    const void* act = M->gated ? f->g : f->a;
    const void* act_d = p > 0 ? f->drop : act;
    residual_dropout_backward(M->dbranch, X, dres, (size_t)N * D, p, M->seed, off_out, s);
    linear_backward(M->dff, X, false, gptr(M, gb, pi->wo), M->GD, false, M->dbranch, act_d, wptr(M, wb, pi->wo), X, N, D,
                    F, s);
    if (p > 0 && M->gated) dropout_backward(M->dff, M->dff, X, NF, p, M->seed, off_act, s);
    if (M->gated) {
        gated_gelu_backward(M->dfa, M->dfb, M->dff, f->a, f->b, X, NF, s);
        linear_backward(M->dln, X, false, gptr(M, gb, pi->wi0), M->GD, false, M->dfa, f->ln, wptr(M, wb, pi->wi0), X, N, F,
                        D, s);
        linear_backward(M->dln, X, true, gptr(M, gb, pi->wi1), M->GD, false, M->dfb, f->ln, wptr(M, wb, pi->wi1), X, N, F,
                        D, s);
    } else {
        relu_dropout_backward(M->dff, M->dff, f->a, X, NF, p, M->seed, off_act, s);  // both in one pass
        linear_backward(M->dln, X, false, gptr(M, gb, pi->wi), M->GD, false, M->dff, f->ln, wptr(M, wb, pi->wi), X, N, F, D,
                        s);
    }
    rmsnorm_backward(dres, gptr(M, gb, pi->ffln), M->GD, false, M->dln, X, x_in, nwptr(M, wb, pi->ffln), M->NX, f->rstd, N, D,
                     M->rms_scratch, s);
}

// ---------------------------------------------------------------------------------------------
// blocks

static AttnIdx sa_idx(const BlockParamIdx* b) { return (AttnIdx){b->q, b->k, b->v, b->o, b->ln}; }
static AttnIdx ca_idx(const BlockParamIdx* b) { return (AttnIdx){b->cq, b->ck, b->cv, b->co, b->cln}; }

static bool one_block(const T5Model* M) { return M->opt.gradient_checkpointing || M->opt.forward_only; }
static BlockActs* enc_acts(T5Model* M, int l) { return &M->enc_acts[one_block(M) ? 0 : l]; }
static BlockActs* dec_acts(T5Model* M, int l) { return &M->dec_acts[one_block(M) ? 0 : l]; }

// encoder block l: resid_enc[l] -> resid_enc[l+1] (write_out false: recompute activations only)
static void enc_block_forward(T5Model* M, int l, void* wb, bool write_out, cudaStream_t s) {
    const BlockParamIdx* pi = &M->enc_idx[l];
    BlockActs* A = enc_acts(M, l);
    if (l == 0)  // the position bias of block 0's table, shared by every block of the stack
        position_bias_forward(M->bias_enc, nwptr(M, wb, pi->relbias), M->NX, M->buckets_enc, M->relo_enc, M->NB, M->H,
                              M->Ts, M->Ts, 0, s);
    attn_forward(M, wb, sa_idx(pi), &A->sa, M->resid_enc[l], NULL, M->Ts, M->Ts, M->bias_enc, M->attn_mask, false,
                 site_offset(STACK_ENCODER, l, SITE_SA_PROBS), site_offset(STACK_ENCODER, l, SITE_SA_OUT), s);
    prof_mark(M, s);
    ff_forward(M, wb, pi, &A->ff, A->sa.x_out, M->resid_enc[l + 1], M->B * M->Ts,
               site_offset(STACK_ENCODER, l, SITE_FF_ACT), site_offset(STACK_ENCODER, l, SITE_FF_OUT), write_out, s);
    prof_mark(M, s);
}

static void dec_block_forward(T5Model* M, int l, void* wb, bool write_out, cudaStream_t s) {
    const BlockParamIdx* pi = &M->dec_idx[l];
    BlockActs* A = dec_acts(M, l);
    if (l == 0)
        position_bias_forward(M->bias_dec, nwptr(M, wb, pi->relbias), M->NX, M->buckets_dec, M->relo_dec, M->NB, M->H,
                              M->Tt, M->Tt, 0, s);
    attn_forward(M, wb, sa_idx(pi), &A->sa, M->resid_dec[l], NULL, M->Tt, M->Tt, M->bias_dec,
                 M->has_dec_mask ? M->dec_mask : NULL, true, site_offset(STACK_DECODER, l, SITE_SA_PROBS),
                 site_offset(STACK_DECODER, l, SITE_SA_OUT), s);
    prof_mark(M, s);
    attn_forward(M, wb, ca_idx(pi), &A->ca, A->sa.x_out, M->enc_out, M->Tt, M->Ts, NULL, M->attn_mask, false,
                 site_offset(STACK_DECODER, l, SITE_CA_PROBS), site_offset(STACK_DECODER, l, SITE_CA_OUT), s);
    prof_mark(M, s);
    ff_forward(M, wb, pi, &A->ff, A->ca.x_out, M->resid_dec[l + 1], M->B * M->Tt,
               site_offset(STACK_DECODER, l, SITE_FF_ACT), site_offset(STACK_DECODER, l, SITE_FF_OUT), write_out, s);
    prof_mark(M, s);
}

static void enc_block_backward(T5Model* M, int l, void* wb, void* gb, cudaStream_t s) {
    const BlockParamIdx* pi = &M->enc_idx[l];
    BlockActs* A = enc_acts(M, l);
    ff_backward(M, wb, gb, pi, &A->ff, A->sa.x_out, M->B * M->Ts, site_offset(STACK_ENCODER, l, SITE_FF_ACT),
                site_offset(STACK_ENCODER, l, SITE_FF_OUT), M->dres_enc, s);
    attn_backward(M, wb, gb, sa_idx(pi), &A->sa, M->resid_enc[l], NULL, NULL, M->Ts, M->Ts, M->dbias_enc,
                  site_offset(STACK_ENCODER, l, SITE_SA_PROBS), site_offset(STACK_ENCODER, l, SITE_SA_OUT),
                  M->dres_enc, s);
    if (l == 0)  // every block's bias gradient has been summed into dbias_enc by now
        position_bias_backward(gptr(M, gb, pi->relbias), M->GD, false, M->dbias_enc, M->buckets_enc, M->relo_enc, M->NB, M->H,
                               M->Ts, M->Ts, 0, s);
}

static void dec_block_backward(T5Model* M, int l, void* wb, void* gb, cudaStream_t s) {
    const BlockParamIdx* pi = &M->dec_idx[l];
    BlockActs* A = dec_acts(M, l);
    ff_backward(M, wb, gb, pi, &A->ff, A->ca.x_out, M->B * M->Tt, site_offset(STACK_DECODER, l, SITE_FF_ACT),
                site_offset(STACK_DECODER, l, SITE_FF_OUT), M->dres_dec, s);
    attn_backward(M, wb, gb, ca_idx(pi), &A->ca, A->sa.x_out, M->enc_out, M->d_enc, M->Tt, M->Ts, NULL,
                  site_offset(STACK_DECODER, l, SITE_CA_PROBS), site_offset(STACK_DECODER, l, SITE_CA_OUT),
                  M->dres_dec, s);
    attn_backward(M, wb, gb, sa_idx(pi), &A->sa, M->resid_dec[l], NULL, NULL, M->Tt, M->Tt, M->dbias_dec,
                  site_offset(STACK_DECODER, l, SITE_SA_PROBS), site_offset(STACK_DECODER, l, SITE_SA_OUT),
                  M->dres_dec, s);
    if (l == 0)
        position_bias_backward(gptr(M, gb, pi->relbias), M->GD, false, M->dbias_dec, M->buckets_dec, M->relo_dec, M->NB, M->H,
                               M->Tt, M->Tt, 0, s);
}

// ---------------------------------------------------------------------------------------------
// whole model

// The kernels of forward_body and backward_body read the dropout seed from M->seed_dev (stored in stream order
// by the caller), so the same launches can be captured once in a CUDA graph and replayed with a new seed.
static void forward_body(T5Model* M, float grad_scale, cudaStream_t s) {
    ZeroEngine* Z = M->Z;
    const DType X = M->X;
    const int B = M->B, Ts = M->Ts, Tt = M->Tt, D = M->D, V = M->V;
    const size_t Ns = (size_t)B * Ts, Nt = (size_t)B * Tt;
    const uint64_t seed = M->seed;  // ignored by the kernels while the device seed is set (dropout.cuh)
    void* wb;

    // encoder: h = dropout(embed(ids)) (fp32 residual; T5 does not scale the embedding)
    prof_mark(M, s);  // the profile's segments (t5_model_set_profile): embedding, each layer, final norm, lm_head, loss
    wb = unit_fetch(M, M->u_shared, s);
    embedding_forward(M->resid_enc[0], M->input_ids, nwptr(M, wb, M->p_embed), M->NX, (int)Ns, D, s);
    zero_release(Z, M->u_shared, s);
    if (M->p > 0)
        dropout_forward(M->resid_enc[0], M->resid_enc[0], DT_F32, Ns * D, M->p, seed,
                        site_offset(STACK_ENCODER, -1, SITE_EMBED), s);
    prof_mark(M, s);
    for (int l = 0; l < M->L; l++) {
        int u = params_unit_enc_block(M->t, l);
        wb = unit_fetch(M, u, s);
        enc_block_forward(M, l, wb, true, s);
        zero_release(Z, u, s);
    }
    // final norm, dropout (and the tied scaling) in fp32, then one rounding to X for the GEMMs: as HF autocast,
    // where these outputs stay fp32 until a linear layer casts them
    wb = unit_fetch(M, M->u_final, s);
    rmsnorm_forward(M->enc_out32, DT_F32, M->rstd_encf, M->resid_enc[M->L], nwptr(M, wb, M->p_enc_final), M->NX,
                    (int)Ns, D, M->eps, s);
    zero_release(Z, M->u_final, s);
    if (M->p > 0)
        dropout_forward(M->enc_out32, M->enc_out32, DT_F32, Ns * D, M->p, seed,
                        site_offset(STACK_ENCODER, -1, SITE_FINAL), s);
    cast(M->enc_out, X, M->enc_out32, DT_F32, Ns * D, s);
    prof_mark(M, s);

    // decoder
    wb = unit_fetch(M, M->u_shared, s);
    embedding_forward(M->resid_dec[0], M->dec_ids, nwptr(M, wb, M->p_embed), M->NX, (int)Nt, D, s);
    zero_release(Z, M->u_shared, s);
    if (M->p > 0)
        dropout_forward(M->resid_dec[0], M->resid_dec[0], DT_F32, Nt * D, M->p, seed,
                        site_offset(STACK_DECODER, -1, SITE_EMBED), s);
    prof_mark(M, s);
    for (int l = 0; l < M->Ld; l++) {
        int u = params_unit_dec_block(M->t, l);
        wb = unit_fetch(M, u, s);
        dec_block_forward(M, l, wb, true, s);
        zero_release(Z, u, s);
    }
    wb = unit_fetch(M, M->u_final, s);
    rmsnorm_forward(M->lm_in32, DT_F32, M->rstd_decf, M->resid_dec[M->Ld], nwptr(M, wb, M->p_dec_final), M->NX,
                    (int)Nt, D, M->eps, s);
    zero_release(Z, M->u_final, s);
    if (M->p > 0)
        dropout_forward(M->lm_in32, M->lm_in32, DT_F32, Nt * D, M->p, seed, site_offset(STACK_DECODER, -1, SITE_FINAL),
                        s);
    // scale_decoder_outputs (v1.0): sequence_output * D^-0.5 before the projection; v1.1 and the 5.x tied-unscaled
    // model: no scaling (transformers keeps the scale apart from the tying)
    if (M->scale_out) scale_inplace(M->lm_in32, DT_F32, Nt * D, 1.0f / sqrtf((float)D), s);
    cast(M->lm_in, X, M->lm_in32, DT_F32, Nt * D, s);
    prof_mark(M, s);
    wb = unit_fetch(M, M->u_lm, s);
    linear_forward(M->logits, X, M->lm_in, wptr(M, wb, M->p_lm_head), X, (int)Nt, V, D, s);
    zero_release(Z, M->u_lm, s);
    prof_mark(M, s);

    if (M->has_labels)
        cross_entropy_smoothed_forward_backward(M->loss, M->losses, M->fwd_with_grad ? M->dlogits : NULL, M->logits,
                                                X, M->labels, (int)Nt, V, grad_scale, M->opt.label_smoothing,
                                                M->ce_scratch, s);
    else
        CUDA_CHECK(cudaMemsetAsync(M->loss, 0, sizeof(float), s));
    prof_mark(M, s);
}

void t5_model_forward(T5Model* M, bool with_grad, float grad_scale, uint64_t seed, cudaStream_t s) {
    if (with_grad && M->opt.forward_only)
        t5_die(T5_EXIT_FAILURE, "internal: t5_model_forward with_grad on a forward_only model (no gradient buffers)");
    M->seed = seed;
    M->p = M->train ? M->opt.dropout_rate : 0.0f;
    M->fwd_with_grad = with_grad && M->has_labels;
    dropout_store_seed(M->seed_dev, seed, s);
    dropout_set_device_seed(M->seed_dev);
    M->prof_on = M->prof_ev != NULL;
    M->prof_i = 0;
    forward_body(M, grad_scale, s);
    M->prof_on = false;
    dropout_set_device_seed(NULL);
}

void t5_model_set_profile(T5Model* M, cudaEvent_t* ev, int n) {
    const int want = 2 * M->L + 3 * M->Ld + 7;
    if (ev && n != want)
        t5_die(T5_EXIT_FAILURE, "internal: t5_model_set_profile got %d events, the forward records %d", n, want);
    M->prof_ev = ev;
    M->prof_n = ev ? n : 0;
}

static void backward_body(T5Model* M, cudaStream_t s) {
    ZeroEngine* Z = M->Z;
    const DType X = M->X;
    const int B = M->B, Ts = M->Ts, Tt = M->Tt, D = M->D, V = M->V, H = M->H;
    const size_t Ns = (size_t)B * Ts, Nt = (size_t)B * Tt;
    const bool ckpt = M->opt.gradient_checkpointing;
    void* wb;
    void* gb;

    CUDA_CHECK(cudaMemsetAsync(M->dres_dec, 0, Nt * D * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(M->dres_enc, 0, Ns * D * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(M->d_enc, 0, Ns * D * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(M->dbias_enc, 0, (size_t)H * Ts * Ts * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(M->dbias_dec, 0, (size_t)H * Tt * Tt * sizeof(float), s));

    // lm_head: dlm_in (B*Tt, D) = dlogits W ; dW += dlogits^T lm_in
    wb = unit_fetch(M, M->u_lm, s);
    gb = zero_grad(Z, M->u_lm);
    linear_backward(M->dln, X, false, gptr(M, gb, M->p_lm_head), M->GD, false, M->dlogits, M->lm_in,
                    wptr(M, wb, M->p_lm_head), X, (int)Nt, V, D, s);
    zero_release(Z, M->u_lm, s);
    if (!M->tied) unit_grad_ready(M, M->u_lm, s);
    cast(M->dlm32, DT_F32, M->dln, X, Nt * D, s);
    if (M->scale_out) scale_inplace(M->dlm32, DT_F32, Nt * D, 1.0f / sqrtf((float)D), s);
    if (M->p > 0)
        dropout_backward(M->dlm32, M->dlm32, DT_F32, Nt * D, M->p, M->seed, site_offset(STACK_DECODER, -1, SITE_FINAL),
                         s);
    wb = unit_fetch(M, M->u_final, s);
    gb = zero_grad(Z, M->u_final);
    rmsnorm_backward(M->dres_dec, gptr(M, gb, M->p_dec_final), M->GD, false, M->dlm32, DT_F32, M->resid_dec[M->Ld],
                     nwptr(M, wb, M->p_dec_final), M->NX, M->rstd_decf, (int)Nt, D, M->rms_scratch, s);
    zero_release(Z, M->u_final, s);

    for (int l = M->Ld - 1; l >= 0; l--) {
        int u = params_unit_dec_block(M->t, l);
        wb = unit_fetch(M, u, s);
        gb = zero_grad(Z, u);
        if (ckpt) dec_block_forward(M, l, wb, false, s);
        dec_block_backward(M, l, wb, gb, s);
        zero_release(Z, u, s);
        unit_grad_ready(M, u, s);
    }
    if (M->p > 0)
        dropout_backward(M->dres_dec, M->dres_dec, DT_F32, Nt * D, M->p, M->seed,
                         site_offset(STACK_DECODER, -1, SITE_EMBED), s);
    gb = zero_grad(Z, M->u_shared);
    // the embedding's first contribution: the tied lm_head GEMM wrote it above; untied, it starts here from 0
    if (!M->tied) CUDA_CHECK(cudaMemsetAsync(gptr(M, gb, M->p_embed), 0, (size_t)V * D * M->gs, s));
    embedding_backward(gptr(M, gb, M->p_embed), M->GD, M->dres_dec, M->dec_ids, (int)Nt, D, V, M->emb_scratch, s);

    // encoder output: d_enc (fp32, summed over the decoder's cross-attentions) -> final norm -> blocks
    if (M->p > 0)
        dropout_backward(M->d_enc, M->d_enc, DT_F32, Ns * D, M->p, M->seed, site_offset(STACK_ENCODER, -1, SITE_FINAL),
                         s);
    wb = unit_fetch(M, M->u_final, s);
    gb = zero_grad(Z, M->u_final);
    rmsnorm_backward(M->dres_enc, gptr(M, gb, M->p_enc_final), M->GD, false, M->d_enc, DT_F32, M->resid_enc[M->L],
                     nwptr(M, wb, M->p_enc_final), M->NX, M->rstd_encf, (int)Ns, D, M->rms_scratch, s);
    zero_release(Z, M->u_final, s);
    unit_grad_ready(M, M->u_final, s);

    for (int l = M->L - 1; l >= 0; l--) {
        int u = params_unit_enc_block(M->t, l);
        wb = unit_fetch(M, u, s);
        gb = zero_grad(Z, u);
        if (ckpt) enc_block_forward(M, l, wb, false, s);
        enc_block_backward(M, l, wb, gb, s);
        zero_release(Z, u, s);
        unit_grad_ready(M, u, s);
    }
    if (M->p > 0)
        dropout_backward(M->dres_enc, M->dres_enc, DT_F32, Ns * D, M->p, M->seed,
                         site_offset(STACK_ENCODER, -1, SITE_EMBED), s);
    gb = zero_grad(Z, M->u_shared);
    embedding_backward(gptr(M, gb, M->p_embed), M->GD, M->dres_enc, M->input_ids, (int)Ns, D, V, M->emb_scratch, s);
    unit_grad_ready(M, M->u_shared, s);
}

// The unit order forward_body + backward_body fetch in (the ZeRO stage 3 trace; the engine checks every fetch
// against it). Keep in step with the two functions above: test_gpu_zero records the real order and compares.
int t5_model_fetch_trace(const ParamTable* t, int* out, int cap) {
    const int L = t->cfg.num_layers, Ld = t->cfg.num_decoder_layers;
    const int sh = params_unit_shared(t), fin = params_unit_final_norms(t);
    const int lm = params_unit_lm_head(t) >= 0 ? params_unit_lm_head(t) : sh;
    int n = 0;
#define PUSH(u)                 \
    do {                        \
        if (n < cap) out[n] = (u); \
        n++;                    \
    } while (0)
    PUSH(sh);
    for (int l = 0; l < L; l++) PUSH(params_unit_enc_block(t, l));
    PUSH(fin);
    PUSH(sh);
    for (int l = 0; l < Ld; l++) PUSH(params_unit_dec_block(t, l));
    PUSH(fin);
    PUSH(lm);
    PUSH(lm);
    PUSH(fin);
    for (int l = Ld - 1; l >= 0; l--) PUSH(params_unit_dec_block(t, l));
    PUSH(fin);
    for (int l = L - 1; l >= 0; l--) PUSH(params_unit_enc_block(t, l));
#undef PUSH
    return n;
}

// The order backward_body asks for each unit's gradient first (zero_grad: u + 1) and hands it on (grad_ready:
// -(u + 1)), for the estimate's replay of the engine's gradient buffers. Keep in step with backward_body: the
// engine compares every backward's order with it (end line "gradient order mismatches 0", asserted by test_gpu_zero
// for stages 2 and 3); test_bufcache checks it is well formed.
int t5_model_grad_trace(const ParamTable* t, int* out, int cap) {
    const int L = t->cfg.num_layers, Ld = t->cfg.num_decoder_layers;
    const int sh = params_unit_shared(t), fin = params_unit_final_norms(t);
    const bool tied = params_unit_lm_head(t) < 0;
    const int lm = tied ? sh : params_unit_lm_head(t);
    int n = 0;
#define PUSH(v)                    \
    do {                           \
        if (n < cap) out[n] = (v); \
        n++;                       \
    } while (0)
    PUSH(lm + 1);
    if (!tied) PUSH(-(lm + 1));
    PUSH(fin + 1);
    for (int l = Ld - 1; l >= 0; l--) {
        PUSH(params_unit_dec_block(t, l) + 1);
        PUSH(-(params_unit_dec_block(t, l) + 1));
    }
    if (!tied) PUSH(sh + 1);
    PUSH(-(fin + 1));
    for (int l = L - 1; l >= 0; l--) {
        PUSH(params_unit_enc_block(t, l) + 1);
        PUSH(-(params_unit_enc_block(t, l) + 1));
    }
    PUSH(-(sh + 1));
#undef PUSH
    return n;
}

void t5_model_zero_describe(const ParamTable* t, ZeroOptions* o) {
    ZeroTensor* zt = calloc_check((size_t)T5_MAX(t->num_params, 1), sizeof(ZeroTensor));
    for (int i = 0; i < t->num_params; i++) {
        const ParamDesc* p = &t->params[i];
        zt[i] = (ZeroTensor){.unit = p->unit, .offset = p->offset, .numel = p->numel, .decay = p->decay,
                             .fp32_view = params_role_reads_fp32(p->role),
                             .rows = p->ndim == 2 ? p->shape[0] : 0, .cols = p->ndim == 2 ? p->shape[1] : 0};
    }
    const int cap = 4 * t->num_units + 16;
    int* trace = malloc_check((size_t)cap * sizeof(int));
    int* gtrace = malloc_check((size_t)cap * sizeof(int));
    o->tensors = zt;
    o->num_tensors = t->num_params;
    o->trace = trace;
    o->trace_len = t5_model_fetch_trace(t, trace, cap);
    o->grad_trace = gtrace;
    o->grad_trace_len = t5_model_grad_trace(t, gtrace, cap);
}

void t5_model_zero_free(ZeroOptions* o) {
    free((void*)o->tensors);
    free((void*)o->trace);
    free((void*)o->grad_trace);
    o->tensors = NULL;
    o->trace = o->grad_trace = NULL;
    o->num_tensors = o->trace_len = o->grad_trace_len = 0;
}

void t5_model_backward(T5Model* M, cudaStream_t s) {
    if (!M->fwd_with_grad)
        t5_die(T5_EXIT_FAILURE, "internal: t5_model_backward without a forward(with_grad) over a batch with labels");
    M->ready_count = 0;
    dropout_set_device_seed(M->seed_dev);
    backward_body(M, s);
    dropout_set_device_seed(NULL);
    M->fwd_with_grad = false;
}

// ---------------------------------------------------------------------------------------------
// CUDA graphs: forward(with_grad) + backward captured once per fixed shape and replayed.
// The first call for a shape runs eagerly (lazy one-time work: cuBLASLt plans, kernel attributes); the second
// captures (ThreadLocal mode: an unsafe call would fail the capture, never run silently) and launches the
// graph; later calls only store the seed and launch. What the graph cannot see is done on the host around it:
// the engine's bookkeeping (stage 0 fetch/release are pure bookkeeping with fixed pointers, so the captured
// pointers stay valid; grad_ready is replayed from the log in the backward's order).

static StepGraph* graph_find(T5Model* M, float p, float grad_scale) {
    StepGraph* victim = &M->graphs[0];
    for (int i = 0; i < T5_MAX_GRAPHS; i++) {
        StepGraph* g = &M->graphs[i];
        if (g->used && g->B == M->B && g->Ts == M->Ts && g->Tt == M->Tt && g->has_dec_mask == M->has_dec_mask &&
            g->p == p && g->grad_scale == grad_scale)
            return g;
        if (!g->used || (victim->used && g->last_use < victim->last_use)) victim = g;
    }
    if (victim->captured) CUDA_CHECK(cudaGraphExecDestroy(victim->exec));
    free(victim->ready);
    *victim = (StepGraph){.used = true, .B = M->B, .Ts = M->Ts, .Tt = M->Tt, .has_dec_mask = M->has_dec_mask,
                          .p = p, .grad_scale = grad_scale};
    return victim;
}

void t5_model_forward_backward(T5Model* M, float grad_scale, uint64_t seed, cudaStream_t s) {
    if (!M->has_labels)
        t5_die(T5_EXIT_FAILURE, "internal: t5_model_forward_backward over a batch without labels");
    if (!M->opt.cuda_graph) {
        t5_model_forward(M, true, grad_scale, seed, s);
        t5_model_backward(M, s);
        return;
    }
    const float p = M->train ? M->opt.dropout_rate : 0.0f;
    StepGraph* g = graph_find(M, p, grad_scale);
    g->last_use = ++M->graph_clock;
    if (!g->captured && g->nready == 0 && !g->ready) {  // first sight of this shape: eager, and remember it
        t5_model_forward(M, true, grad_scale, seed, s);
        t5_model_backward(M, s);
        g->ready = malloc_check((size_t)T5_MAX(M->ready_count, 1) * sizeof(int));
        g->nready = M->ready_count;
        memcpy(g->ready, M->ready_log, (size_t)M->ready_count * sizeof(int));
        return;
    }
    M->seed = seed;
    M->p = p;
    dropout_store_seed(M->seed_dev, seed, s);
    if (!g->captured) {
        cudaGraph_t graph;
        M->fwd_with_grad = true;
        M->ready_count = 0;
        dropout_set_device_seed(M->seed_dev);
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        forward_body(M, grad_scale, s);
        backward_body(M, s);
        CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        dropout_set_device_seed(NULL);
        CUDA_CHECK(cudaGraphInstantiate(&g->exec, graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
        g->captured = true;
        if (M->ready_count != g->nready || memcmp(M->ready_log, g->ready, (size_t)g->nready * sizeof(int)) != 0)
            t5_die(T5_EXIT_FAILURE, "internal: the captured backward handed units to the engine in another order");
    } else {
        // the host bookkeeping the captured calls did at capture time
        for (int i = 0; i < g->nready; i++) zero_grad_ready(M->Z, g->ready[i], s);
    }
    CUDA_CHECK(cudaGraphLaunch(g->exec, s));
    M->fwd_with_grad = false;
}

int t5_model_num_graphs(const T5Model* M) {
    int n = 0;
    for (int i = 0; i < T5_MAX_GRAPHS; i++) n += M->graphs[i].captured;
    return n;
}
