/*
 * test_params.c: the parameter table (model/params.h): counts equal t5_config_num_params for every
 * preset, HF names and shapes for t5-small / t5-v1_1-small / t5-3b match transformers' state dicts,
 * units are contiguous, aligned and non-overlapping, flags follow the documented rules.
 */
#include "t5test.h"

#include "../model/params.h"
#include "../src/base/common.h"
#include "../model/t5_config.h"

static const char* presets[] = {
    "t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b",
    "google/t5-v1_1-small", "google/t5-v1_1-base", "google/t5-v1_1-large", "google/t5-v1_1-xl",
    "google/t5-v1_1-xxl", "google/flan-t5-small", "google/flan-t5-base", "google/flan-t5-large",
    "google/flan-t5-xl", "google/flan-t5-xxl",
};

static void build(const char* name, ParamTable* t) {
    T5Config c;
    assert_true(t5_config_preset(name, &c));
    char err[256];
    assert_int_equal(params_build(t, &c, err, sizeof err), 0);
}

static void test_counts_match_config(void** state) {
    (void)state;
    for (size_t i = 0; i < T5_ARRAY_LEN(presets); i++) {
        ParamTable t;
        build(presets[i], &t);
        size_t sum = 0;
        for (int p = 0; p < t.num_params; p++) sum += t.params[p].numel;
        if (sum != t5_config_num_params(&t.cfg) || sum != t.total_numel)
            fail_msg("%s: table has %zu parameters, t5_config_num_params says %zu", presets[i], sum,
                     t5_config_num_params(&t.cfg));
        params_free(&t);
    }
}

// known HF numbers: t5-small 60,506,624 and t5-v1_1-small 76,961,152 (model.num_parameters())
static void test_known_totals(void** state) {
    (void)state;
    ParamTable t;
    build("t5-small", &t);
    assert_int_equal(t.total_numel, 60506624);
    assert_int_equal(t.num_params, 1 + 6 * 8 + 1 + 6 * 13 + 1 + 2);  // shared, enc blocks + bias, dec blocks + bias, final norms
    params_free(&t);
    build("google/t5-v1_1-small", &t);
    assert_int_equal(t.total_numel, 76961152);
    params_free(&t);
}

typedef struct {
    const char* name;
    int ndim;
    int64_t d0, d1;
} Known;

static void check_known(const ParamTable* t, const Known* k, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int p = params_find_name(t, k[i].name);
        if (p < 0) fail_msg("%s: missing %s", t->cfg.name, k[i].name);
        const ParamDesc* d = &t->params[p];
        if (d->ndim != k[i].ndim || d->shape[0] != k[i].d0 || (k[i].ndim == 2 && d->shape[1] != k[i].d1))
            fail_msg("%s: %s has shape (%lld, %lld), HF has (%lld, %lld)", t->cfg.name, k[i].name,
                     (long long)d->shape[0], (long long)d->shape[1], (long long)k[i].d0, (long long)k[i].d1);
    }
}

static void test_hf_names_shapes(void** state) {
    (void)state;
    ParamTable t;
    build("t5-small", &t);
    const Known small[] = {
        {"shared.weight", 2, 32128, 512},
        {"encoder.block.0.layer.0.SelfAttention.q.weight", 2, 512, 512},
        {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 2, 32, 8},
        {"encoder.block.0.layer.0.layer_norm.weight", 1, 512, 0},
        {"encoder.block.5.layer.1.DenseReluDense.wi.weight", 2, 2048, 512},
        {"encoder.block.5.layer.1.DenseReluDense.wo.weight", 2, 512, 2048},
        {"encoder.block.5.layer.1.layer_norm.weight", 1, 512, 0},
        {"encoder.final_layer_norm.weight", 1, 512, 0},
        {"decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 2, 32, 8},
        {"decoder.block.3.layer.1.EncDecAttention.k.weight", 2, 512, 512},
        {"decoder.block.3.layer.1.layer_norm.weight", 1, 512, 0},
        {"decoder.block.5.layer.2.DenseReluDense.wo.weight", 2, 512, 2048},
        {"decoder.block.5.layer.2.layer_norm.weight", 1, 512, 0},
        {"decoder.final_layer_norm.weight", 1, 512, 0},
    };
    check_known(&t, small, T5_ARRAY_LEN(small));
    assert_int_equal(params_find_name(&t, "lm_head.weight"), -1);  // tied
    assert_int_equal(params_find_name(&t, "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"), -1);
    assert_int_equal(params_find_name(&t, "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"), -1);
    assert_int_equal(params_unit_lm_head(&t), -1);
    params_free(&t);

    build("google/t5-v1_1-small", &t);
    const Known v11[] = {
        {"shared.weight", 2, 32128, 512},
        {"lm_head.weight", 2, 32128, 512},
        {"encoder.block.7.layer.0.SelfAttention.q.weight", 2, 384, 512},
        {"encoder.block.7.layer.0.SelfAttention.o.weight", 2, 512, 384},
        {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 2, 32, 6},
        {"encoder.block.7.layer.1.DenseReluDense.wi_0.weight", 2, 1024, 512},
        {"encoder.block.7.layer.1.DenseReluDense.wi_1.weight", 2, 1024, 512},
        {"decoder.block.7.layer.2.DenseReluDense.wo.weight", 2, 512, 1024},
        {"decoder.block.7.layer.1.EncDecAttention.v.weight", 2, 384, 512},
    };
    check_known(&t, v11, T5_ARRAY_LEN(v11));
    assert_int_equal(params_find_name(&t, "encoder.block.0.layer.1.DenseReluDense.wi.weight"), -1);
    params_free(&t);

    build("t5-3b", &t);
    const Known b3[] = {
        {"encoder.block.23.layer.0.SelfAttention.q.weight", 2, 4096, 1024},
        {"decoder.block.23.layer.1.EncDecAttention.o.weight", 2, 1024, 4096},
        {"decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 2, 32, 32},
        {"encoder.block.0.layer.1.DenseReluDense.wi.weight", 2, 16384, 1024},
    };
    check_known(&t, b3, T5_ARRAY_LEN(b3));
    params_free(&t);
}

static void test_units_contiguous_aligned(void** state) {
    (void)state;
    for (size_t i = 0; i < T5_ARRAY_LEN(presets); i++) {
        ParamTable t;
        build(presets[i], &t);
        const T5Config* c = &t.cfg;
        int expect_units = 1 + c->num_layers + c->num_decoder_layers + 1 + (c->tie_word_embeddings ? 0 : 1);
        assert_int_equal(t.num_units, expect_units);
        int next_param = 0;
        size_t padded = 0;
        for (int u = 0; u < t.num_units; u++) {
            const UnitDesc* U = &t.units[u];
            assert_int_equal(U->first_param, next_param);  // units partition the table in order
            size_t cursor = 0;
            for (int p = U->first_param; p < U->first_param + U->num_params; p++) {
                const ParamDesc* d = &t.params[p];
                assert_int_equal(d->unit, u);
                assert_int_equal(d->offset % PARAMS_ALIGN_ELEMS, 0);
                assert_true(d->offset >= cursor);                      // no overlap, increasing
                assert_true(d->offset - cursor < PARAMS_ALIGN_ELEMS);  // no gap beyond padding
                cursor = d->offset + d->numel;
            }
            assert_true(cursor <= U->numel);
            assert_int_equal(U->numel % PARAMS_ALIGN_ELEMS, 0);
            assert_true(U->numel - cursor < PARAMS_ALIGN_ELEMS);
            next_param += U->num_params;
            padded += U->numel;
        }
        assert_int_equal(next_param, t.num_params);
        assert_int_equal(padded, t.total_padded);
        // unit helpers agree with the kinds
        assert_int_equal(t.units[params_unit_shared(&t)].kind, UNIT_SHARED);
        assert_int_equal(t.units[params_unit_enc_block(&t, c->num_layers - 1)].kind, UNIT_ENC_BLOCK);
        assert_int_equal(t.units[params_unit_dec_block(&t, 0)].kind, UNIT_DEC_BLOCK);
        assert_int_equal(t.units[params_unit_final_norms(&t)].kind, UNIT_FINAL_NORMS);
        if (!c->tie_word_embeddings) assert_int_equal(t.units[params_unit_lm_head(&t)].kind, UNIT_LM_HEAD);
        params_free(&t);
    }
}

static void test_flags_and_find(void** state) {
    (void)state;
    ParamTable t;
    build("t5-small", &t);
    for (int p = 0; p < t.num_params; p++) {
        const ParamDesc* d = &t.params[p];
        bool norm = strstr(d->name, "layer_norm") != NULL;
        bool relb = strstr(d->name, "relative_attention_bias") != NULL;
        if (d->decay != !(norm || relb)) fail_msg("%s: decay flag %d", d->name, d->decay);
        assert_int_equal(d->persistent, d->numel <= 100000);
        if (norm || relb) assert_true(d->persistent);
        // every tensor is found again by role
        assert_int_equal(params_find(&t, d->role, d->stack, d->layer), p);
    }
    int q = params_find(&t, ROLE_CA_Q, STACK_DECODER, 4);
    assert_string_equal(t.params[q].name, "decoder.block.4.layer.1.EncDecAttention.q.weight");
    assert_int_equal(params_find(&t, ROLE_CA_Q, STACK_ENCODER, 4), -1);
    assert_int_equal(params_find(&t, ROLE_SA_Q, STACK_ENCODER, 6), -1);
    params_free(&t);
}

// the per-block index used by the model and the generator: every present tensor named as HF names it,
// absent ones -1 (relbias only in block 0, no cross-attention in the encoder, wi vs wi_0/wi_1)
static void test_block_index(void** state) {
    (void)state;
    const char* models[] = {"t5-small", "google/t5-v1_1-small"};
    for (int m = 0; m < 2; m++) {
        ParamTable t;
        build(models[m], &t);
        bool gated = m == 1;
        BlockParamIdx b;
        params_block_index(&t, STACK_DECODER, 1, &b);
        assert_string_equal(t.params[b.cq].name, "decoder.block.1.layer.1.EncDecAttention.q.weight");
        assert_string_equal(t.params[b.ffln].name, "decoder.block.1.layer.2.layer_norm.weight");
        assert_int_equal(b.relbias, -1);
        assert_int_equal(gated ? b.wi : b.wi0, -1);
        assert_string_equal(t.params[gated ? b.wi1 : b.wi].name,
                            gated ? "decoder.block.1.layer.2.DenseReluDense.wi_1.weight"
                                  : "decoder.block.1.layer.2.DenseReluDense.wi.weight");
        params_block_index(&t, STACK_ENCODER, 0, &b);
        assert_string_equal(t.params[b.relbias].name,
                            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
        assert_string_equal(t.params[b.wo].name, "encoder.block.0.layer.1.DenseReluDense.wo.weight");
        assert_int_equal(b.cq, -1);
        assert_int_equal(b.cln, -1);
        params_free(&t);
    }
}

static void test_invalid_config(void** state) {
    (void)state;
    T5Config c;
    assert_true(t5_config_preset("t5-small", &c));
    c.num_heads = 0;
    ParamTable t;
    char err[256];
    assert_int_equal(params_build(&t, &c, err, sizeof err), -1);
    assert_contains(err, "num_heads");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_match_config),
        cmocka_unit_test(test_known_totals),
        cmocka_unit_test(test_hf_names_shapes),
        cmocka_unit_test(test_units_contiguous_aligned),
        cmocka_unit_test(test_flags_and_find),
        cmocka_unit_test(test_block_index),
        cmocka_unit_test(test_invalid_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
