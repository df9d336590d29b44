/*
 * params.c: builds the parameter table (see params.h for the unit layout and the ordering rules).
 */
#include "params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/base/common.h"
#include "optim_groups.h"

bool params_name_gets_decay(const char* hf_name) { return hf_param_gets_weight_decay(hf_name); }

typedef struct {
    ParamTable* t;
    int cap;
    size_t unit_cursor;  // next free offset in the current unit
} Builder;

static void builder_begin_unit(Builder* b, UnitKind kind, int layer, const char* name) {
    ParamTable* t = b->t;
    UnitDesc* u = &t->units[t->num_units++];
    memset(u, 0, sizeof *u);
    snprintf(u->name, sizeof u->name, "%s", name);
    u->kind = kind;
    u->layer = layer;
    u->first_param = t->num_params;
    b->unit_cursor = 0;
}

static void builder_add(Builder* b, ParamRole role, T5Stack stack, int layer, int64_t d0, int64_t d1,
                        const char* fmt, ...) __attribute__((format(printf, 7, 8)));
static void builder_add(Builder* b, ParamRole role, T5Stack stack, int layer, int64_t d0, int64_t d1,
                        const char* fmt, ...) {
    ParamTable* t = b->t;
    if (t->num_params == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        t->params = realloc_check(t->params, (size_t)b->cap * sizeof(ParamDesc));
    }
    ParamDesc* p = &t->params[t->num_params];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = d1 > 0 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1 > 0 ? d1 : 1;
    p->numel = (size_t)d0 * (size_t)p->shape[1];
    p->role = role;
    p->stack = stack;
    p->layer = layer;
    p->unit = t->num_units - 1;
    p->offset = b->unit_cursor;
    p->decay = params_name_gets_decay(p->name);
    p->persistent = p->numel <= PARAMS_PERSISTENCE_THRESHOLD;
    b->unit_cursor += CEIL_DIV(p->numel, (size_t)PARAMS_ALIGN_ELEMS) * PARAMS_ALIGN_ELEMS;
    t->total_numel += p->numel;
    t->num_params++;
    UnitDesc* u = &t->units[p->unit];
    u->num_params++;
    u->numel = b->unit_cursor;
}

static void builder_end_unit(Builder* b) { b->t->total_padded += b->t->units[b->t->num_units - 1].numel; }

static void add_attention(Builder* b, T5Stack st, int l, const char* prefix, const char* mod, bool cross,
                          int64_t D, int64_t HD) {
    ParamRole rq = cross ? ROLE_CA_Q : ROLE_SA_Q, rk = cross ? ROLE_CA_K : ROLE_SA_K;
    ParamRole rv = cross ? ROLE_CA_V : ROLE_SA_V, ro = cross ? ROLE_CA_O : ROLE_SA_O;
    builder_add(b, rq, st, l, HD, D, "%s.%s.q.weight", prefix, mod);
    builder_add(b, rk, st, l, HD, D, "%s.%s.k.weight", prefix, mod);
    builder_add(b, rv, st, l, HD, D, "%s.%s.v.weight", prefix, mod);
    builder_add(b, ro, st, l, D, HD, "%s.%s.o.weight", prefix, mod);
}

static void add_ff(Builder* b, const T5Config* c, T5Stack st, int l, const char* prefix) {
    int64_t D = c->d_model, F = c->d_ff;
    if (c->feed_forward == T5_FF_GATED_GELU) {
        builder_add(b, ROLE_FF_WI0, st, l, F, D, "%s.DenseReluDense.wi_0.weight", prefix);
        builder_add(b, ROLE_FF_WI1, st, l, F, D, "%s.DenseReluDense.wi_1.weight", prefix);
    } else {
        builder_add(b, ROLE_FF_WI, st, l, F, D, "%s.DenseReluDense.wi.weight", prefix);
    }
    builder_add(b, ROLE_FF_WO, st, l, D, F, "%s.DenseReluDense.wo.weight", prefix);
    builder_add(b, ROLE_FF_LN, st, l, D, 0, "%s.layer_norm.weight", prefix);
}

int params_build(ParamTable* t, const T5Config* c, char* err, size_t errlen) {
    memset(t, 0, sizeof *t);
    struct {
        const char* name;
        int v;
    } checks[] = {
        {"vocab_size", c->vocab_size},           {"d_model", c->d_model},
        {"d_kv", c->d_kv},                       {"d_ff", c->d_ff},
        {"num_layers", c->num_layers},           {"num_decoder_layers", c->num_decoder_layers},
        {"num_heads", c->num_heads},             {"relative_attention_num_buckets", c->relative_attention_num_buckets},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(checks); i++) {
        if (checks[i].v <= 0) {
            snprintf(err, errlen, "invalid T5 config %s: %s = %d (must be > 0)", c->name, checks[i].name,
                     checks[i].v);
            return -1;
        }
    }
    t->cfg = *c;
    const int L = c->num_layers, Ld = c->num_decoder_layers;
    const int64_t D = c->d_model, HD = (int64_t)c->num_heads * c->d_kv, V = c->vocab_size;
    const int64_t NB = c->relative_attention_num_buckets, H = c->num_heads;
    t->units = calloc_check((size_t)(L + Ld + 3), sizeof(UnitDesc));
    Builder b = {.t = t};
    char prefix[96], uname[32];

    builder_begin_unit(&b, UNIT_SHARED, -1, "shared");
    builder_add(&b, ROLE_EMBED, STACK_NONE, -1, V, D, "shared.weight");
    builder_end_unit(&b);

    for (int l = 0; l < L; l++) {
        snprintf(uname, sizeof uname, "encoder.block.%d", l);
        builder_begin_unit(&b, UNIT_ENC_BLOCK, l, uname);
        snprintf(prefix, sizeof prefix, "encoder.block.%d.layer.0", l);
        add_attention(&b, STACK_ENCODER, l, prefix, "SelfAttention", false, D, HD);
        if (l == 0)
            builder_add(&b, ROLE_SA_RELBIAS, STACK_ENCODER, l, NB, H,
                        "%s.SelfAttention.relative_attention_bias.weight", prefix);
        builder_add(&b, ROLE_SA_LN, STACK_ENCODER, l, D, 0, "%s.layer_norm.weight", prefix);
        snprintf(prefix, sizeof prefix, "encoder.block.%d.layer.1", l);
        add_ff(&b, c, STACK_ENCODER, l, prefix);
        builder_end_unit(&b);
    }
    for (int l = 0; l < Ld; l++) {
        snprintf(uname, sizeof uname, "decoder.block.%d", l);
        builder_begin_unit(&b, UNIT_DEC_BLOCK, l, uname);
        snprintf(prefix, sizeof prefix, "decoder.block.%d.layer.0", l);
        add_attention(&b, STACK_DECODER, l, prefix, "SelfAttention", false, D, HD);
        if (l == 0)
            builder_add(&b, ROLE_SA_RELBIAS, STACK_DECODER, l, NB, H,
                        "%s.SelfAttention.relative_attention_bias.weight", prefix);
        builder_add(&b, ROLE_SA_LN, STACK_DECODER, l, D, 0, "%s.layer_norm.weight", prefix);
        snprintf(prefix, sizeof prefix, "decoder.block.%d.layer.1", l);
        add_attention(&b, STACK_DECODER, l, prefix, "EncDecAttention", true, D, HD);
        builder_add(&b, ROLE_CA_LN, STACK_DECODER, l, D, 0, "%s.layer_norm.weight", prefix);
        snprintf(prefix, sizeof prefix, "decoder.block.%d.layer.2", l);
        add_ff(&b, c, STACK_DECODER, l, prefix);
        builder_end_unit(&b);
    }
    builder_begin_unit(&b, UNIT_FINAL_NORMS, -1, "final_norms");
    builder_add(&b, ROLE_FINAL_LN, STACK_ENCODER, -1, D, 0, "encoder.final_layer_norm.weight");
    builder_add(&b, ROLE_FINAL_LN, STACK_DECODER, -1, D, 0, "decoder.final_layer_norm.weight");
    builder_end_unit(&b);
    if (!c->tie_word_embeddings) {
        builder_begin_unit(&b, UNIT_LM_HEAD, -1, "lm_head");
        builder_add(&b, ROLE_LM_HEAD, STACK_NONE, -1, V, D, "lm_head.weight");
        builder_end_unit(&b);
    }
    return 0;
}

void params_free(ParamTable* t) {
    free(t->params);
    free(t->units);
    memset(t, 0, sizeof *t);
}

int params_unit_shared(const ParamTable* t) {
    (void)t;
    return 0;
}
int params_unit_enc_block(const ParamTable* t, int layer) {
    (void)t;
    return 1 + layer;
}
int params_unit_dec_block(const ParamTable* t, int layer) { return 1 + t->cfg.num_layers + layer; }
int params_unit_final_norms(const ParamTable* t) { return 1 + t->cfg.num_layers + t->cfg.num_decoder_layers; }
int params_unit_lm_head(const ParamTable* t) {
    return t->cfg.tie_word_embeddings ? -1 : 2 + t->cfg.num_layers + t->cfg.num_decoder_layers;
}

int params_find(const ParamTable* t, ParamRole role, T5Stack stack, int layer) {
    int unit;
    switch (role) {
        case ROLE_EMBED: unit = params_unit_shared(t); break;
        case ROLE_LM_HEAD: unit = params_unit_lm_head(t); break;
        case ROLE_FINAL_LN: unit = params_unit_final_norms(t); break;
        default:
            if (layer < 0) return -1;
            if (stack == STACK_ENCODER && layer < t->cfg.num_layers) unit = params_unit_enc_block(t, layer);
            else if (stack == STACK_DECODER && layer < t->cfg.num_decoder_layers) unit = params_unit_dec_block(t, layer);
            else return -1;
    }
    if (unit < 0) return -1;
    const UnitDesc* u = &t->units[unit];
    for (int i = u->first_param; i < u->first_param + u->num_params; i++) {
        const ParamDesc* p = &t->params[i];
        if (p->role == role && (role != ROLE_FINAL_LN || p->stack == stack)) return i;
    }
    return -1;
}

int params_find_name(const ParamTable* t, const char* name) {
    for (int i = 0; i < t->num_params; i++)
        if (strcmp(t->params[i].name, name) == 0) return i;
    return -1;
}

void params_block_index(const ParamTable* t, T5Stack st, int l, BlockParamIdx* b) {
    b->q = params_find(t, ROLE_SA_Q, st, l);
    b->k = params_find(t, ROLE_SA_K, st, l);
    b->v = params_find(t, ROLE_SA_V, st, l);
    b->o = params_find(t, ROLE_SA_O, st, l);
    b->relbias = params_find(t, ROLE_SA_RELBIAS, st, l);
    b->ln = params_find(t, ROLE_SA_LN, st, l);
    b->cq = params_find(t, ROLE_CA_Q, st, l);
    b->ck = params_find(t, ROLE_CA_K, st, l);
    b->cv = params_find(t, ROLE_CA_V, st, l);
    b->co = params_find(t, ROLE_CA_O, st, l);
    b->cln = params_find(t, ROLE_CA_LN, st, l);
    b->wi = params_find(t, ROLE_FF_WI, st, l);
    b->wi0 = params_find(t, ROLE_FF_WI0, st, l);
    b->wi1 = params_find(t, ROLE_FF_WI1, st, l);
    b->wo = params_find(t, ROLE_FF_WO, st, l);
    b->ffln = params_find(t, ROLE_FF_LN, st, l);
}

bool params_role_reads_fp32(ParamRole r) {
    return r == ROLE_EMBED || r == ROLE_SA_RELBIAS || r == ROLE_SA_LN || r == ROLE_CA_LN || r == ROLE_FF_LN ||
           r == ROLE_FINAL_LN;
}
