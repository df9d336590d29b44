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
    // transformers 5.x: scale_decoder_outputs is read apart from tie_word_embeddings; the weights decide the
    // projection (test_output_projection)
    assert_int_equal(t5_config_load_json(tmp_file("s.json", "{\"tie_word_embeddings\": true, "
                                                            "\"scale_decoder_outputs\": false}"),
                                         &c, err, sizeof err),
                     0);
    assert_true(c.tie_word_embeddings);
    assert_false(c.scale_decoder_outputs);
    assert_true(c.tie_from_weights);
}

// a safetensors file holding the named F32 tensors of shape [2] (a stand-in for a checkpoint's weights)
static void write_weights(const char* path, const char* const* names, int n) {
    char hdr[4096] = "{";
    for (int i = 0; i < n; i++) {
        size_t l = strlen(hdr);
        snprintf(hdr + l, sizeof hdr - l, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[%d,%d]}",
                 i ? "," : "", names[i], 8 * i, 8 * i + 8);
    }
    strcat(hdr, "}");
    size_t hl = (strlen(hdr) + 7) / 8 * 8;
    while (strlen(hdr) < hl) strcat(hdr, " ");
    FILE* f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t h64 = hl;
    fwrite(&h64, 8, 1, f);
    fwrite(hdr, 1, hl, f);
    float z[2] = {0, 0};
    for (int i = 0; i < n; i++) fwrite(z, sizeof z, 1, f);
    fclose(f);
}

// issue 14 item 1: the projection (lm_head.weight or shared.weight) and the D^-0.5 scale are two notions
static void test_output_projection(void** state) {
    (void)state;
    char err[512], w_tied[512], w_untied[512], dir[512], idx[600], s1[600], s2[600];
    snprintf(w_tied, sizeof w_tied, "%s/w_tied.safetensors", t5test_tmpdir());
    snprintf(w_untied, sizeof w_untied, "%s/w_untied.safetensors", t5test_tmpdir());
    const char* tied_names[] = {"shared.weight", "encoder.final_layer_norm.weight"};
    const char* untied_names[] = {"shared.weight", "encoder.final_layer_norm.weight", "lm_head.weight"};
    write_weights(w_tied, tied_names, 2);
    write_weights(w_untied, untied_names, 3);
    // a sharded checkpoint whose lm_head.weight is in the second shard
    snprintf(dir, sizeof dir, "%s/sharded", t5test_tmpdir());
    assert_int_equal(t5_mkdir_p(dir), 0);
    snprintf(s1, sizeof s1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(s2, sizeof s2, "%s/model-00002-of-00002.safetensors", dir);
    write_weights(s1, tied_names, 2);
    const char* second[] = {"lm_head.weight"};
    write_weights(s2, second, 1);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    t5test_write_file(idx, "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"
                           "\"shared.weight\": \"model-00001-of-00002.safetensors\", "
                           "\"encoder.final_layer_norm.weight\": \"model-00001-of-00002.safetensors\", "
                           "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}");
    static const struct {
        const char* what;
        const char* json;
        const char* weights;  // NULL: random init (no weights)
        bool tied, scaled;
    } CASES[] = {
        // files written before transformers 5: tie_word_embeddings says both
        {"v1.0 (4.x)", "{\"tie_word_embeddings\": true}", "T", true, true},
        {"v1.0 (4.x) with an lm_head.weight copy", "{\"tie_word_embeddings\": true}", "U", true, true},
        {"v1.1 (4.x)", "{\"tie_word_embeddings\": false}", "U", false, false},
        {"no key (HF default: tied)", "{}", "T", true, true},
        // transformers 5.x: scale_decoder_outputs for the scale, the weights for the projection
        {"v1.0 (5.x)", "{\"tie_word_embeddings\": true, \"scale_decoder_outputs\": true}", "T", true, true},
        {"v1.1 (5.x)", "{\"tie_word_embeddings\": true, \"scale_decoder_outputs\": false}", "U", false, false},
        {"tied-unscaled: T5Config(tie_word_embeddings=False) saved by 5.x",
         "{\"tie_word_embeddings\": true, \"scale_decoder_outputs\": false}", "T", true, false},
        {"sharded v1.1 (5.x)", "{\"tie_word_embeddings\": true, \"scale_decoder_outputs\": false}", "S", false, false},
        {"tied-unscaled, random init", "{\"tie_word_embeddings\": true, \"scale_decoder_outputs\": false}", NULL, true,
         false},
        {"what t5train writes for v1.1", "{\"tie_word_embeddings\": false, \"scale_decoder_outputs\": false}", "U",
         false, false},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        T5Config c;
        assert_int_equal(t5_config_load_json(tmp_file("proj.json", CASES[i].json), &c, err, sizeof err), 0);
        const char* w = !CASES[i].weights ? NULL : CASES[i].weights[0] == 'T' ? w_tied
                                               : CASES[i].weights[0] == 'U' ? w_untied : idx;
        if (t5_config_resolve_head(&c, w, err, sizeof err)) fail_msg("%s: %s", CASES[i].what, err);
        if (c.tie_word_embeddings != CASES[i].tied || c.scale_decoder_outputs != CASES[i].scaled)
            fail_msg("%s: tied %d scaled %d, expected %d %d", CASES[i].what, c.tie_word_embeddings,
                     c.scale_decoder_outputs, CASES[i].tied, CASES[i].scaled);
        // what t5train writes reads back as the same model (with the weights it writes: lm_head iff untied)
        char path[512];
        snprintf(path, sizeof path, "%s/proj_rt.json", t5test_tmpdir());
        assert_int_equal(t5_config_save_json(&c, path, err, sizeof err), 0);
        T5Config b;
        assert_int_equal(t5_config_load_json(path, &b, err, sizeof err), 0);
        assert_int_equal(t5_config_resolve_head(&b, c.tie_word_embeddings ? w_tied : w_untied, err, sizeof err), 0);
        if (b.tie_word_embeddings != c.tie_word_embeddings || b.scale_decoder_outputs != c.scale_decoder_outputs)
            fail_msg("%s: written and read back as tied %d scaled %d", CASES[i].what, b.tie_word_embeddings,
                     b.scale_decoder_outputs);
        // the parameter count follows the projection (lm_head counted only when untied)
        size_t base = t5_config_num_params(&c);
        c.tie_word_embeddings = !c.tie_word_embeddings;
        size_t other = t5_config_num_params(&c);
        assert_int_equal(CASES[i].tied ? other - base : base - other, (size_t)c.vocab_size * (size_t)c.d_model);
    }
    // weights that cannot be opened: an error naming the file (only when the weights decide)
    T5Config c;
    assert_int_equal(t5_config_load_json(tmp_file("proj.json", CASES[5].json), &c, err, sizeof err), 0);
    assert_int_equal(t5_config_resolve_head(&c, "/nonexistent/model.safetensors", err, sizeof err), -1);
    assert_contains(err, "/nonexistent/model.safetensors");
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
        assert_int_equal(a.scale_decoder_outputs, b.scale_decoder_outputs);
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
        cmocka_unit_test(test_output_projection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
