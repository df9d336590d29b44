/*
 * test_flops_profile.c: DeepSpeed's flops_profiler text for T5 (src/report/flops_profile.h), on the CPU:
 *   - DeepSpeed's number formatting (number_to_string / params_to_string: round to 2 digits, :g, unit);
 *   - the module tree's MACs add up (every module's own MACs = the top module's = flops_t5_forward / 2) and match a
 *     formula written out here for t5-small and t5-v1_1-small at B=2, S=48, T=40; the top's params are the unique
 *     parameter count;
 *   - a tiny config's profile: the summary lines exactly (DeepSpeed's '{:<70}  {:<8}' layout), the times summed
 *     from the segments (a block = its layers, the model = every segment), the aggregated depths (module_depth -1
 *     stops one above the deepest, as DeepSpeed's range(len(info) - 1)), torch's ModuleList grouping of identical
 *     blocks when nothing is timed, "not timed" for modules inside a timed layer, the MFU line, detailed false.
 */
#include "t5test.h"

#include <math.h>

#include "../model/t5_config.h"
#include "../src/report/flops.h"
#include "../src/report/flops_profile.h"

static void test_number_format(void** state) {
    (void)state;
    char b[64];
    flops_profile_number(b, sizeof b, 60506624);
    assert_string_equal(b, "60.51 M");
    flops_profile_number(b, sizeof b, 0);
    assert_string_equal(b, "0 ");
    flops_profile_number(b, sizeof b, 1.5e-5);
    assert_string_equal(b, "15 u");
    flops_profile_number(b, sizeof b, 2e12);
    assert_string_equal(b, "2 T");
    flops_profile_number(b, sizeof b, 999.999);  // round(999.999, 2) = 1000.0 -> "1000"
    assert_string_equal(b, "1000 ");
    flops_profile_number(b, sizeof b, 0.001234);
    assert_string_equal(b, "1.23 m");
    flops_profile_number(b, sizeof b, 2.675e6);  // 2.675 is 2.67499... in binary: Python's round gives 2.67
    assert_string_equal(b, "2.67 M");
    flops_profile_params(b, sizeof b, 2.85e9);
    assert_string_equal(b, "2.85 B");
    flops_profile_params(b, sizeof b, 0);
    assert_string_equal(b, "0");
}

// forward MACs of T5 written out per module (independent of flops.c)
static double macs_by_hand(const T5Config* c, double B, double S, double T) {
    const double D = c->d_model, I = (double)c->num_heads * c->d_kv, F = c->d_ff, V = c->vocab_size;
    const double nff = c->feed_forward == T5_FF_GATED_GELU ? 3 : 2;  // wi (wi_0, wi_1) and wo
    const double Ld = c->num_decoder_layers > 0 ? c->num_decoder_layers : c->num_layers;
    const double enc_sa = 4 * S * D * I + 2 * S * S * I, enc_ff = nff * S * D * F;
    const double dec_sa = 4 * T * D * I + 2 * T * T * I;
    const double dec_ca = 2 * T * D * I + 2 * S * D * I + 2 * T * S * I;  // q, o on the target; k, v on the source
    const double dec_ff = nff * T * D * F;
    return B * (c->num_layers * (enc_sa + enc_ff) + Ld * (dec_sa + dec_ca + dec_ff) + T * D * V);
}

static void test_macs_add_up(void** state) {
    (void)state;
    const char* presets[] = {"t5-small", "google/t5-v1_1-small", "t5-base"};
    for (int k = 0; k < 3; k++) {
        FlopsProfileInput in = {.B = 2, .S = 48, .T = 40, .world_size = 1, .top_modules = 1, .module_depth = -1};
        assert_true(t5_config_preset(presets[k], &in.cfg));
        FlopsProfileTotals t;
        assert_int_equal(flops_profile_totals(&in, &t), 0);
        const double want = macs_by_hand(&in.cfg, 2, 48, 40);
        if (t.macs_top != want) fail_msg("%s: top MACs %.17g, by hand %.17g", presets[k], t.macs_top, want);
        if (t.macs_leaves != t.macs_top) fail_msg("%s: modules' own MACs sum %.17g != top %.17g", presets[k], t.macs_leaves, t.macs_top);
        assert_true(2 * t.macs_top == flops_t5_forward(&in.cfg, 2, 48, 40));
        assert_true(t.params_top == (double)t5_config_num_params(&in.cfg));
    }
    // t5-small by number: 2 x (6 x (4*48*512*512 + 2*48*48*512 + 2*48*512*2048) + 6 x (...) + 40*512*32128)
    FlopsProfileInput in = {.B = 2, .S = 48, .T = 40, .world_size = 1};
    assert_true(t5_config_preset("t5-small", &in.cfg));
    FlopsProfileTotals t;
    assert_int_equal(flops_profile_totals(&in, &t), 0);
    assert_true(t.macs_top == 2.0 * (6 * (50331648.0 + 2359296 + 100663296) +
                                     6 * (41943040.0 + 1638400 + 20971520 + 25165824 + 1966080 + 83886080) +
                                     657981440.0));
    in.B = 0;
    assert_int_equal(flops_profile_totals(&in, &t), -1);
}

static T5Config tiny(int L) {
    T5Config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "tiny");
    c.vocab_size = 32;
    c.d_model = 8;
    c.d_kv = 4;
    c.num_heads = 2;
    c.d_ff = 16;
    c.num_layers = c.num_decoder_layers = L;
    c.relative_attention_num_buckets = 32;
    c.relative_attention_max_distance = 128;
    c.dropout_rate = 0.1f;
    c.feed_forward = T5_FF_RELU;
    c.tie_word_embeddings = c.scale_decoder_outputs = true;
    return c;
}

static int count(const char* s, const char* needle) {
    int n = 0;
    for (const char* p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

// DeepSpeed's line_fmt '{:<70}  {:<8}'
static void expect_line(const char* s, const char* key, const char* value) {
    char want[256];
    snprintf(want, sizeof want, "\n%-70s  %-8s\n", key, value);
    assert_contains(s, want);
}

static char* profile_text(const FlopsProfileInput* in) {
    char* out = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&out, &len);
    assert_non_null(f);
    assert_int_equal(flops_profile_write(f, in), 0);
    fclose(f);
    return out;
}

static void test_tiny_profile(void** state) {
    (void)state;
    FlopsProfileInput in = {.cfg = tiny(1), .B = 1, .S = 4, .T = 3, .profile_step = 3, .world_size = 2,
                            .bwd_ms = 20, .step_ms = 4, .recompute_fwd_factor = 0, .peak_flops = 1e6,
                            .peak_what = "test peak", .module_depth = -1, .top_modules = 2, .detailed = true};
    const int nseg = flops_profile_num_segments(&in.cfg);
    assert_int_equal(nseg, 2 * 1 + 3 * 1 + 6);
    double seg[11];
    for (int i = 0; i < nseg; i++) seg[i] = 1.0 + i;  // 1..11 ms, 66 ms in all
    in.seg_ms = seg;
    char* s = profile_text(&in);
    // enc 1*(1024 + 256) + 1024 = 2304, dec 768 + 144 + 384 + 512 + 192 + 768 = 2768, lm_head 768: 5840 MACs
    assert_contains(s, "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n"
                       "Profile Summary at step 3:\nNotations:\n");
    expect_line(s, "world size: ", "2");
    expect_line(s, "data parallel size: ", "2");
    expect_line(s, "batch size per GPU: ", "1");
    expect_line(s, "fwd MACs per GPU: ", "5.84 KMACs");
    expect_line(s, "fwd flops per GPU: ", "11.68 K");
    expect_line(s, "fwd latency: ", "66 ms");
    // 11680 / 0.066 = 176969.7 -> 176.97 K
    expect_line(s, "fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", "176.97 KFLOPS");
    expect_line(s, "bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency: ", "1.17 MFLOPS");
    expect_line(s, "iter latency: ", "90 ms");
    // samples/s = 1 x 2 / 0.090 = 22.22; MFU = 3 x 11680 / 0.09 / 1e6 = 38.93%
    expect_line(s, "samples/second: ", "22.22");
    assert_contains(s, "38.93% of 1 MFLOPS (test peak)");
    // the tree: the top = every segment (66 ms), the encoder = segments 0..3 (1+2+3+4 = 10 ms), the decoder block =
    // segments 5..7 (6+7+8 = 21 ms), a layer = its segment, lm_head segment 9 (10 ms); inside a layer: not timed
    assert_contains(s, "T5ForConditionalGeneration(\n  ");
    assert_contains(s, "5.84 KMACs = 100% MACs, 66 ms = 100% latency");
    assert_contains(s, "(encoder): T5Stack(\n    856 = 49.77% Params, 2.3 KMACs = 39.45% MACs, 10 ms = 15.15% latency, "
                       "460.8 KFLOPS\n");
    assert_contains(s, "T5Block(\n        856 = 49.77% Params, 2.77 KMACs = 47.4% MACs, 21 ms = 31.82% latency, "
                       "263.62 KFLOPS\n");
    assert_contains(s, "(lm_head): Linear(256 = ");
    assert_contains(s, "768 MACs = 13.15% MACs, 10 ms = 15.15% latency, 153.6 KFLOPS, in_features=8, out_features=32, bias=False)");
    assert_contains(s, "(q): Linear(64 = ");
    assert_contains(s, "latency not timed (inside its parent's), in_features=8, out_features=8, bias=False)");
    assert_contains(s, "(relative_attention_bias): Embedding(64 = ");
    // the shared embedding: both lookups (segments 0 and 4: 1 + 5 = 6 ms), the same at its three places
    assert_contains(s, "\n  (shared): Embedding(256 = 14.88% Params, 0 MACs = 0% MACs, 6 ms = 9.09% latency, 0 FLOPS, 32, 8)\n");
    assert_int_equal(count(s, "(embed_tokens): Embedding(256 = 14.88% Params, 0 MACs = 0% MACs, 6 ms = 9.09% latency, "
                              "0 FLOPS, 32, 8)\n"), 2);
    // aggregated: depths 0..6 (the deepest, 7 = the Linear layers, is not printed: DeepSpeed's range(len - 1))
    assert_contains(s, "Top 2 modules in terms of params, MACs or fwd latency at different model depths:\ndepth 0:\n");
    assert_contains(s, "depth 6:\n");
    assert_null(strstr(s, "depth 7:"));
    assert_contains(s, "depth 1:\n    params      - {'T5Stack': '1.98 K', 'Embedding': '256'}\n"
                       "    MACs        - {'T5Stack': '5.07 KMACs', 'Linear': '768 MACs'}\n"
                       "    fwd latency - {'T5Stack': '");
    assert_contains(s, "depth 6:\n    params      - ");
    assert_contains(s, "    fwd latency - not timed at this depth");
    free(s);

    // nothing timed, 3 identical later blocks: torch's ModuleList groups them; the latency lines say "not timed"
    FlopsProfileInput u = in;
    u.cfg = tiny(4);
    u.seg_ms = NULL;
    u.bwd_ms = u.step_ms = -1;
    s = profile_text(&u);
    assert_contains(s, "(0): T5Block(");
    assert_contains(s, "(1-3): 3 x T5Block(");
    expect_line(s, "fwd latency: ", "not timed");
    assert_null(strstr(s, "MFU"));
    free(s);
    // detailed false: no tree; module_depth 2: depths 0 and 1 only
    u.detailed = false;
    u.module_depth = 2;
    s = profile_text(&u);
    assert_null(strstr(s, "Detailed Profile"));
    assert_null(strstr(s, "T5Block("));
    assert_contains(s, "depth 1:");
    assert_null(strstr(s, "depth 2:"));
    assert_contains(s, "\n------------------------------------------------------------------------------\n");
    free(s);
}

static void test_fp32_peak(void** state) {
    (void)state;
    assert_true(flops_device_peak_fp32("NVIDIA H100 80GB HBM3") == 67e12);
    assert_true(flops_device_peak_fp32("NVIDIA H200") == 67e12);
    assert_true(flops_device_peak_fp32("NVIDIA H100 PCIe") == 51e12);
    assert_true(flops_device_peak_fp32("NVIDIA GeForce RTX 4090") == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_number_format),
        cmocka_unit_test(test_macs_add_up),
        cmocka_unit_test(test_tiny_profile),
        cmocka_unit_test(test_fp32_peak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
