/*
 * test_gpu_flops_profiler.c: DeepSpeed's flops_profiler and autotuning sections through the binary on the GPU, on
 * the tiny HF fixture model (test/fixtures/t5/tiny_v10) and 32 real WMT16 pairs padded to 48 tokens (a fixed shape:
 * 4 x (48 + 48) per micro-batch):
 *   - profile_step 2 with accumulation 2 over 4 updates: exactly one profile, "at step 2"; its MACs those of
 *     flops_t5_forward for the shape, its params the model's; fwd, bwd, step and iter latency positive and
 *     consistent (iter = fwd + bwd + step within rounding), samples/s = 4 / iter; every T5Layer* of the tree timed,
 *     the Linear layers inside not; with bf16 on a known GPU the MFU line; gradient checkpointing on (the backward's
 *     recomputation records no profile event);
 *   - output_file: the profile goes to the file, stdout says where;
 *   - autotuning enabled (micro-batch bounds 2..3): the run trains with a micro-batch in the bounds and writes
 *     ds_config_optimal.json / cmd_optimal.txt / summary.txt in results_dir.
 */
#include "t5test.h"

#include <jansson.h>
#include <math.h>

#include "../model/t5_config.h"
#include "../src/base/common.h"
#include "../src/report/flops.h"
#include "../src/report/flops_profile.h"

static char g_text[1 << 20];

static int count(const char* text, const char* needle) {
    int n = 0;
    for (const char* p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

// the value of a summary line "key<spaces>  value" as text (up to the line's end, trailing spaces removed)
static void value_of(const char* text, const char* key, char* out, size_t cap) {
    char pat[256];
    snprintf(pat, sizeof pat, "\n%s", key);
    const char* p = strstr(text, pat);
    if (!p) fail_msg("no line '%s' in:\n%s", key, text);
    p += strlen(pat);
    while (*p == ' ') p++;
    size_t n = strcspn(p, "\n");
    while (n > 0 && p[n - 1] == ' ') n--;
    snprintf(out, cap, "%.*s", (int)n, p);
}

// "12.5 ms" -> seconds
static double seconds(const char* v) {
    char unit[8] = "";
    double x = 0;
    if (sscanf(v, "%lf %7s", &x, unit) < 1) fail_msg("not a duration: '%s'", v);
    if (!strcmp(unit, "ms")) return x * 1e-3;
    if (!strcmp(unit, "us")) return x * 1e-6;
    if (!strcmp(unit, "s")) return x;
    fail_msg("unit of '%s'", v);
    return 0;
}

static int run(const char* out, const char* extra, const char* ds) {
    const char* d = t5test_data_dir();
    return t5test_run(g_text, sizeof g_text,
                      "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name %s/t5-spiece/spiece.model "
                      "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro --max_source_length 48 "
                      "--max_target_length 48 --pad_to_max_length --max_train_samples 32 --gradient_accumulation_steps 2 "
                      "--do_train --max_steps 4 --save_steps 100 --logging_steps 1 --seed 7 --output_dir %s %s "
                      "--deepspeed '%s' 2>&1",
                      t5test_bin(), t5test_repo_dir(), d, d, out, extra, ds);
}

static void test_profile_at_step(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char out[600];
    snprintf(out, sizeof out, "%s/prof", t5test_tmpdir());
    int rc = run(out, "--per_device_train_batch_size 4 --bf16 --gradient_checkpointing",
                 "{\"flops_profiler\": {\"enabled\": true, \"profile_step\": 2, \"top_modules\": 2}, "
                 "\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\", "
                 "\"bf16\": {\"enabled\": \"auto\"}}");
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    assert_int_equal(count(g_text, "-------------------------- DeepSpeed Flops Profiler --------------------------"), 1);
    assert_contains(g_text, "Profile Summary at step 2:");
    const char* prof = strstr(g_text, "DeepSpeed Flops Profiler");
    T5Config cfg;
    char p[1024], err[512], v[128], want[128];
    snprintf(p, sizeof p, "%s/test/fixtures/t5/tiny_v10/config.json", t5test_repo_dir());
    if (t5_config_load_json(p, &cfg, err, sizeof err)) fail_msg("%s", err);
    snprintf(want, sizeof want, "%s", "");
    flops_profile_number(want, sizeof want, flops_t5_forward(&cfg, 4, 48, 48) / 2);
    strncat(want, "MACs", sizeof want - strlen(want) - 1);
    value_of(prof, "fwd MACs per GPU: ", v, sizeof v);
    assert_string_equal(v, want);
    flops_profile_params(want, sizeof want, (double)t5_config_num_params(&cfg));
    value_of(prof, "params per GPU: ", v, sizeof v);
    assert_string_equal(v, want);
    value_of(prof, "batch size per GPU: ", v, sizeof v);
    assert_string_equal(v, "4");
    double lat[4];
    const char* keys[] = {"fwd latency: ", "bwd latency: ", "step latency: ", "iter latency: "};
    for (int i = 0; i < 4; i++) {
        value_of(prof, keys[i], v, sizeof v);
        lat[i] = seconds(v);
        print_message("%s%s\n", keys[i], v);
        assert_true(lat[i] > 0 && lat[i] < 10);
    }
    assert_true(fabs(lat[3] - (lat[0] + lat[1] + lat[2])) <= 0.02 * lat[3] + 2e-5);  // 2 digits each
    value_of(prof, "samples/second: ", v, sizeof v);
    const double sps = atof(v);
    assert_true(fabs(sps - 4 / lat[3]) <= 0.02 * sps + 0.01);
    // the tree: the top at 100% latency; every T5Layer* timed; the Linear layers inside them not
    assert_contains(prof, "= 100% MACs, ");
    assert_contains(prof, "= 100% latency");
    int layers = 0;
    for (const char* q = prof; (q = strstr(q, "T5LayerFF(\n")); q++, layers++) {
        char first[512];  // the line after "T5LayerFF(": its own profile
        const char* l = q + strlen("T5LayerFF(\n");
        snprintf(first, sizeof first, "%.*s", (int)strcspn(l, "\n"), l);
        if (!strstr(first, "% latency") || strstr(first, "not timed")) fail_msg("an untimed T5LayerFF: %s", first);
    }
    assert_true(layers > 0);
    assert_contains(prof, "(q): Linear(");
    assert_contains(prof, "latency not timed (inside its parent's), in_features=");
    assert_contains(prof, "Top 2 modules in terms of params, MACs or fwd latency at different model depths:");
    // bf16 on a GPU of the table: the MFU line (none on a GPU whose peak t5train does not know)
    char name[256];
    if (t5test_run(name, sizeof name, "nvidia-smi --query-gpu=name --format=csv,noheader -i 0") == 0) {
        name[strcspn(name, "\n")] = 0;
        print_message("GPU %s\n", name);
        if (flops_device_peak_16bit(name) > 0) assert_contains(prof, "MFU (t5train) = 3 * fwd flops per GPU / iter latency / peak: ");
        else assert_null(strstr(prof, "MFU (t5train)"));
    }
    assert_contains(g_text, "step 4/4 | loss ");
}

static void test_output_file(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char out[600], file[700], ds[1200];
    snprintf(out, sizeof out, "%s/prof_file", t5test_tmpdir());
    snprintf(file, sizeof file, "%s/profiles/step1.txt", t5test_tmpdir());
    snprintf(ds, sizeof ds, "{\"flops_profiler\": {\"enabled\": true, \"detailed\": false, \"output_file\": \"%s\"}}", file);
    int rc = run(out, "--per_device_train_batch_size 4", ds);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    assert_null(strstr(g_text, "DeepSpeed Flops Profiler"));
    char want[800];
    snprintf(want, sizeof want, "flops profiler: the profile of step 1 is in %s", file);
    assert_contains(g_text, want);
    char* text = t5_read_file(file, NULL);
    assert_non_null(text);
    assert_contains(text, "Profile Summary at step 1:");
    assert_contains(text, "Aggregated Profile per GPU");
    assert_null(strstr(text, "Detailed Profile per GPU"));
    free(text);
}

static void test_autotuning_run(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char out[600], res[700], ds[1200], p[900];
    snprintf(out, sizeof out, "%s/autotune", t5test_tmpdir());
    snprintf(res, sizeof res, "%s/at_results", t5test_tmpdir());
    snprintf(ds, sizeof ds,
             "{\"autotuning\": {\"enabled\": true, \"results_dir\": \"%s\", \"min_train_micro_batch_size_per_gpu\": 2, "
             "\"max_train_micro_batch_size_per_gpu\": 3, \"tuner_type\": \"model_based\"}, "
             "\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\"}",
             res);
    int rc = run(out, "", ds);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    assert_contains(g_text, "is the optimal setup predicted by the memory planner");
    assert_contains(g_text, "deepspeed.autotuning.tuner_type: accepted, no effect");
    snprintf(p, sizeof p, "%s/ds_config_optimal.json", res);
    json_error_t je;
    json_t* j = json_load_file(p, 0, &je);
    if (!j) fail_msg("%s: %s", p, je.text);
    const json_int_t mb = json_integer_value(json_object_get(j, "train_micro_batch_size_per_gpu"));
    assert_true(mb >= 2 && mb <= 3);
    assert_null(json_object_get(j, "autotuning"));
    json_decref(j);
    char line[64];
    snprintf(line, sizeof line, "Instantaneous batch size per device = %lld", (long long)mb);
    assert_contains(g_text, line);
    snprintf(p, sizeof p, "%s/cmd_optimal.txt", res);
    assert_true(t5_is_file(p));
    snprintf(p, sizeof p, "%s/summary.txt", res);
    assert_true(t5_is_file(p));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_at_step),
        cmocka_unit_test(test_output_file),
        cmocka_unit_test(test_autotuning_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
