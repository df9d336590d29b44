/*
 * test_t5_config.c: presets (shapes and parameter counts), config.json reading with HF's defaults and
 * feed_forward_proj parsing, writing + reading back, and the one-line errors for bad config.json files.
 */
#include "t5test.h"

#include "../model/t5_config.h"
#include "../src/base/common.h"

static char* tmp_file(const char* name, const char* text) {
    static char path[4][512];
    static int k = 0;
    char* p = path[k++ % 4];
    snprintf(p, 512, "%s/%s", t5test_tmpdir(), name);
    t5test_write_file(p, text);
    return p;
}

static void test_preset_param_counts(void** state) {
    (void)state;
    // model.num_parameters() of the HF checkpoints (tied embedding counted once)
    static const struct {
        const char* name;
        size_t n;
    } known[] = {
        {"t5-small", 60506624},         {"t5-base", 222903552},      {"t5-large", 737668096},
        {"t5-3b", 2851598336},          {"t5-11b", 11307321344ULL},  {"google/flan-t5-small", 76961152},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        T5Config c;
        assert_true(t5_config_preset(known[i].name, &c));
        if (t5_config_num_params(&c) != known[i].n)
            fail_msg("%s: %zu params, HF has %zu", known[i].name, t5_config_num_params(&c), known[i].n);
    }
    // v1.1 and FLAN-T5 share shapes, size by size
    const char* sizes[] = {"small", "base", "large", "xl", "xxl"};
    for (int i = 0; i < 5; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "google/t5-v1_1-%s", sizes[i]);
        snprintf(b, sizeof b, "google/flan-t5-%s", sizes[i]);
        T5Config x, y;
        assert_true(t5_config_preset(a, &x));
        assert_true(t5_config_preset(b, &y));
        assert_int_equal(t5_config_num_params(&x), t5_config_num_params(&y));
        assert_int_equal(x.feed_forward, T5_FF_GATED_GELU);
        assert_false(x.tie_word_embeddings);
    }
}

static void test_preset_shapes_and_names(void** state) {
    (void)state;
    T5Config c;
    assert_true(t5_config_preset("t5-3b", &c));
    assert_int_equal(c.d_model, 1024);
    assert_int_equal(c.num_heads * c.d_kv, 4096);  // H * Dk != D
    assert_int_equal(c.d_ff, 16384);
    assert_int_equal(c.vocab_size, 32128);
    assert_int_equal(c.relative_attention_num_buckets, 32);
    assert_int_equal(c.relative_attention_max_distance, 128);
    assert_true(c.tie_word_embeddings);
    assert_int_equal(c.feed_forward, T5_FF_RELU);
    assert_true(c.dropout_rate == 0.1f);
    assert_true(c.layer_norm_epsilon == 1e-6f);
    assert_true(t5_config_preset("google-t5/t5-3b", &c));
    assert_string_equal(c.name, "t5-3b");
    assert_true(t5_config_preset("flan-t5-xl", &c));
    assert_string_equal(c.name, "google/flan-t5-xl");
    assert_int_equal(c.d_model, 2048);
    assert_int_equal(c.num_heads, 32);
    assert_int_equal(c.d_ff, 5120);
    assert_int_equal(c.num_decoder_layers, 24);
    assert_true(t5_config_preset("google/t5-v1_1-small", &c));
    assert_int_equal(c.num_layers, 8);
    assert_int_equal(c.num_heads, 6);
    assert_false(t5_config_preset("t5-13b", &c));
    assert_false(t5_config_preset("", &c));
    assert_contains(t5_config_preset_names(), "t5-11b");
    assert_contains(t5_config_preset_names(), "google/flan-t5-xxl");
}

static void test_load_fixture_configs(void** state) {
    (void)state;
    char path[4200], err[512];
    T5Config c;
    snprintf(path, sizeof path, "%s/test/fixtures/t5/tiny_v10/config.json", t5test_repo_dir());
    assert_int_equal(t5_config_load_json(path, &c, err, sizeof err), 0);
    assert_int_equal(c.d_model, 8);
    assert_int_equal(c.num_heads, 2);
    assert_int_equal(c.d_kv, 4);
    assert_int_equal(c.d_ff, 16);
    assert_int_equal(c.num_layers, 2);
    assert_int_equal(c.num_decoder_layers, 2);
    assert_int_equal(c.feed_forward, T5_FF_RELU);
    assert_true(c.tie_word_embeddings);
    // the fixture model's own count (transformers: 259808)
    assert_int_equal(t5_config_num_params(&c), 259808);
    snprintf(path, sizeof path, "%s/test/fixtures/t5/tiny_v11/config.json", t5test_repo_dir());
    assert_int_equal(t5_config_load_json(path, &c, err, sizeof err), 0);
    assert_int_equal(c.num_heads * c.d_kv, 12);
    assert_int_equal(c.num_decoder_layers, 3);
    assert_int_equal(c.feed_forward, T5_FF_GATED_GELU);
    assert_false(c.tie_word_embeddings);
    assert_int_equal(t5_config_num_params(&c), 518872);  // transformers: 518872
}

static void test_defaults_like_hf(void** state) {
    (void)state;
    char err[512];
    T5Config c;
    assert_int_equal(t5_config_load_json(tmp_file("min.json", "{\"model_type\": \"t5\"}"), &c, err, sizeof err), 0);
    assert_int_equal(c.vocab_size, 32128);
    assert_int_equal(c.d_model, 512);
    assert_int_equal(c.d_kv, 64);
    assert_int_equal(c.d_ff, 2048);
    assert_int_equal(c.num_layers, 6);
    assert_int_equal(c.num_decoder_layers, 6);
    assert_int_equal(c.num_heads, 8);
    assert_int_equal(c.feed_forward, T5_FF_RELU);
    assert_true(c.tie_word_embeddings);
    assert_int_equal(c.pad_token_id, 0);
    assert_int_equal(c.eos_token_id, 1);
    assert_int_equal(c.decoder_start_token_id, 0);
    // num_decoder_layers follows num_layers when absent or null
    assert_int_equal(t5_config_load_json(tmp_file("l3.json", "{\"num_layers\": 3, \"num_decoder_layers\": null}"), &c,
                                         err, sizeof err),
                     0);
    assert_int_equal(c.num_decoder_layers, 3);
    // "gated-gelu_new" is the same as "gated-gelu" for HF; unknown keys are ignored like HF does
    assert_int_equal(t5_config_load_json(tmp_file("g.json", "{\"feed_forward_proj\": \"gated-gelu_new\", "
                                                            "\"n_positions\": 512, \"task_specific_params\": {}}"),
                                         &c, err, sizeof err),
                     0);
    assert_int_equal(c.feed_forward, T5_FF_GATED_GELU);
    // transformers 5.x: scale_decoder_outputs carries the v1.0/v1.1 distinction
    assert_int_equal(t5_config_load_json(tmp_file("s.json", "{\"tie_word_embeddings\": true, "
                                                            "\"scale_decoder_outputs\": false}"),
                                         &c, err, sizeof err),
                     0);
    assert_false(c.tie_word_embeddings);
}

static void test_save_load_round_trip(void** state) {
    (void)state;
    const char* names[] = {"t5-small", "t5-3b", "t5-11b", "google/flan-t5-base", "google/t5-v1_1-xxl"};
    for (int i = 0; i < 5; i++) {
        T5Config a, b;
        char err[512], path[512];
        assert_true(t5_config_preset(names[i], &a));
        a.num_decoder_layers = a.num_layers + 1;  // exercise the asymmetric case too
        a.dropout_rate = 0.05f;
        snprintf(path, sizeof path, "%s/rt%d.json", t5test_tmpdir(), i);
        assert_int_equal(t5_config_save_json(&a, path, err, sizeof err), 0);
        assert_int_equal(t5_config_load_json(path, &b, err, sizeof err), 0);
        assert_int_equal(a.d_model, b.d_model);
        assert_int_equal(a.d_kv, b.d_kv);
        assert_int_equal(a.d_ff, b.d_ff);
        assert_int_equal(a.num_layers, b.num_layers);
        assert_int_equal(a.num_decoder_layers, b.num_decoder_layers);
        assert_int_equal(a.num_heads, b.num_heads);
        assert_int_equal(a.feed_forward, b.feed_forward);
        assert_int_equal(a.tie_word_embeddings, b.tie_word_embeddings);
        assert_true(a.dropout_rate == b.dropout_rate);
        assert_true(a.layer_norm_epsilon == b.layer_norm_epsilon);
        assert_int_equal(t5_config_num_params(&a), t5_config_num_params(&b));
        // what transformers needs to pick the class, and short decimals
        char* text = t5_read_file(path, NULL);
        assert_non_null(text);
        assert_contains(text, "\"T5ForConditionalGeneration\"");
        assert_contains(text, "\"model_type\": \"t5\"");
        assert_contains(text, "\"dropout_rate\": 0.05");
        assert_contains(text, "\"layer_norm_epsilon\": 1e-");
        assert_contains(text, a.feed_forward == T5_FF_RELU ? "\"relu\"" : "\"gated-gelu\"");
        free(text);
    }
}

static void expect_error(const char* name, const char* text, const char* needle) {
    char err[512] = "";
    T5Config c;
    const char* p = tmp_file(name, text);
    assert_int_equal(t5_config_load_json(p, &c, err, sizeof err), -1);
    assert_contains(err, needle);
    assert_contains(err, name);  // names the file
    assert_null(strchr(err, '\n'));
}

static void test_bad_configs(void** state) {
    (void)state;
    expect_error("bad1.json", "{\"d_model\": 512,,}", "invalid JSON");
    expect_error("bad2.json", "{\"feed_forward_proj\": \"gated-silu\"}", "\"gated-silu\" is not supported");
    expect_error("bad3.json", "{\"feed_forward_proj\": \"gelu\"}", "not supported");
    expect_error("bad4.json", "{\"feed_forward_proj\": \"fancy-gelu\"}", "not of the form");
    expect_error("bad5.json", "{\"d_model\": \"512\"}", "\"d_model\" must be an integer");
    expect_error("bad6.json", "{\"num_heads\": 0}", "\"num_heads\" = 0 is out of range");
    expect_error("bad7.json", "{\"model_type\": \"bart\"}", "only \"t5\" models");
    expect_error("bad8.json", "[1, 2]", "JSON object");
    expect_error("bad9.json", "{\"dropout_rate\": 1.5}", "\"dropout_rate\"");
    expect_error("bad10.json", "{\"tie_word_embeddings\": \"yes\"}", "true or false");
    expect_error("bad11.json", "{\"relative_attention_num_buckets\": 31}", "must be even");
    char err[512];
    T5Config c;
    assert_int_equal(t5_config_load_json("/nonexistent/config.json", &c, err, sizeof err), -1);
    assert_contains(err, "/nonexistent/config.json");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_param_counts), cmocka_unit_test(test_preset_shapes_and_names),
        cmocka_unit_test(test_load_fixture_configs), cmocka_unit_test(test_defaults_like_hf),
        cmocka_unit_test(test_save_load_round_trip), cmocka_unit_test(test_bad_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
