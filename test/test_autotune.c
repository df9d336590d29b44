/*
 * test_autotune.c: DeepSpeed's `autotuning` and `flops_profiler` sections in the config (src/cli/autotune.h,
 * config_table.c, config_foreign.c), on the CPU:
 *   - autotuning enabled: zero_plan auto with a note; the micro-batch bounds from min/max_train_micro_batch_size_per_gpu
 *     and min/max_train_batch_size (over gradient_accumulation_steps x world size) reach the planner's search, whose
 *     pick stays inside them (t5-3b on a fake H100 and on a 24 GB card);
 *   - refused with one line: metric latency, mp_size 2, an empty range, max_train_batch_size below one row per GPU,
 *     autotuning without do_train; the trial keys (tuner_type, ...) accepted with a note;
 *   - results_dir: ds_config_optimal.json (the plan's stage, offloads and batch keys, no autotuning section; it
 *     loads and resolves again with the chosen batch), cmd_optimal.txt, summary.txt;
 *   - flops_profiler keys: DeepSpeed's defaults, ranges, output_file.
 */
#include "t5test.h"

#include <jansson.h>

#include "../src/base/common.h"
#include "../src/cli/autotune.h"
#include "../src/cli/config.h"
#include "../src/cli/planner.h"
#include "../src/report/flops.h"
#include "../src/report/flops_profile.h"

static RunConfig cfg;
static char err[CONFIG_ERR_LEN];
static const double GiB = 1073741824.0;

// parses "t5train <base> <extra>" with a DeepSpeed config given inline; 0 or the exit code (err holds the line)
static int parse(const char* ds, const char* extra) {
    static char line[4096];
    snprintf(line, sizeof line,
             "--model_name_or_path t5-3b --do_train --dataset_name wmt16 --dataset_config_name ro-en --source_lang en "
             "--target_lang ro --output_dir %s/at --fp16 %s",
             t5test_tmpdir(), extra);
    char* argv[64];
    int argc = t5test_argv(line, argv, 60);
    argv[argc++] = "--deepspeed";
    argv[argc++] = (char*)ds;
    argv[argc] = NULL;
    config_init(&cfg);
    err[0] = 0;
    int rc = config_parse_args(&cfg, argc, argv, err, sizeof err);
    return rc ? rc : config_resolve(&cfg, err, sizeof err);
}

static bool has_note(const char* needle) {
    for (int i = 0; i < cfg.num_notes; i++)
        if (strstr(cfg.notes[i], needle)) return true;
    return false;
}

static void test_bounds_and_search(void** state) {
    (void)state;
    if (parse("{\"autotuning\": {\"enabled\": true, \"min_train_micro_batch_size_per_gpu\": 4, "
              "\"max_train_micro_batch_size_per_gpu\": 6, \"tuner_type\": \"random\", \"fast\": false}, "
              "\"zero_optimization\": {\"stage\": 0}}", ""))
        fail_msg("%s", err);
    assert_string_equal(cfg.zero_plan, "auto");
    assert_true(has_note("deepspeed.autotuning: the memory planner predicts the plan"));
    assert_true(has_note("micro-batch in 4..6"));
    assert_true(has_note("deepspeed.autotuning.tuner_type: accepted, no effect"));
    int lo, hi;
    assert_int_equal(autotune_bounds(&cfg, &lo, &hi, err, sizeof err), 0);
    assert_int_equal(lo, 4);
    assert_int_equal(hi, 6);
    PlanSearch s;
    planner_search_from_config(&cfg, &s);
    assert_true(s.batch_auto);
    assert_int_equal(s.min_batch, 4);
    assert_int_equal(s.max_batch, 6);
    // the planner's pick stays in [4, 6]: t5-3b fp16 8x128 on the measured H100 (79.6 GiB, 125 GiB host) fits more
    // than 6 at stage 0 (test_estimate), so 6; with min 4 on a 24 GB card the pick is at least 4 or nothing fits
    PlanInput in;
    memset(&in, 0, sizeof in);
    assert_true(t5_config_preset("t5-3b", &in.model));
    in.dtype = in.grad_dtype = DT_F16;
    in.batch = 8;
    in.src_len = in.tgt_len = 128;
    in.grad_accum_steps = 1;
    in.gpus_per_node = in.num_nodes = 1;
    zero_options_default(&in.knobs);
    PlanPick p;
    assert_int_equal(planner_auto_search(&in, &s, true, (size_t)(79.6 * GiB), (size_t)(125 * GiB), 0.05, &p, NULL, err,
                                         sizeof err), 0);
    assert_int_equal(p.batch, 6);
    int rc = planner_auto_search(&in, &s, true, (size_t)(24e9), (size_t)(125 * GiB), 0.05, &p, NULL, err, sizeof err);
    assert_true(rc == 0 || rc == 1);
    assert_true(p.batch >= 4 && p.batch <= 6);
    // the global batch bounds over accumulation 2: max_train_batch_size 20 -> micro <= 10, min 7 -> micro >= 4
    if (parse("{\"autotuning\": {\"enabled\": true, \"max_train_batch_size\": 20, \"min_train_batch_size\": 7}}",
              "--gradient_accumulation_steps 2"))
        fail_msg("%s", err);
    assert_int_equal(autotune_bounds(&cfg, &lo, &hi, err, sizeof err), 0);
    assert_int_equal(lo, 4);
    assert_int_equal(hi, 10);
    // disabled: nothing changes
    assert_int_equal(parse("{\"autotuning\": {\"enabled\": false, \"tuner_type\": \"random\"}}", ""), 0);
    assert_true(cfg.zero_plan[0] == 0 || strcmp(cfg.zero_plan, "auto") != 0);
    planner_search_from_config(&cfg, &s);
    assert_false(s.batch_auto);
}

static void test_refusals(void** state) {
    (void)state;
    struct {
        const char *ds, *extra, *want;
    } cases[] = {
        {"{\"autotuning\": {\"enabled\": true, \"metric\": \"latency\"}}", "", "ranks plans by predicted samples/s"},
        {"{\"autotuning\": {\"enabled\": true, \"mp_size\": 2}}", "", "not implemented yet: model parallelism"},
        {"{\"autotuning\": {\"enabled\": true, \"min_train_micro_batch_size_per_gpu\": 8, "
         "\"max_train_micro_batch_size_per_gpu\": 4}}", "", "no micro-batch lies within the bounds"},
        {"{\"autotuning\": {\"enabled\": true, \"max_train_batch_size\": 3}}", "--gradient_accumulation_steps 4",
         "is below gradient_accumulation_steps x world size = 4"},
        {"{\"autotuning\": {\"enabled\": true, \"metric\": \"speed\"}}", "", "is not one of throughput, latency, flops"},
        {"{\"autotuning\": {\"enabled\": true, \"max_train_micro_batch_size_per_gpu\": 0}}", "", "out of range"},
        {"{\"autotuning\": {\"enabled\": true, \"tuner_num_trail\": 3}}", "", "autotuning.tuner_num_trail: unknown key"},
        {"{\"flops_profiler\": {\"enabled\": true, \"profile_step\": -1}}", "", "out of range"},
        {"{\"flops_profiler\": {\"enabled\": true, \"top_modules\": 0}}", "", "out of range"},
        {"{\"flops_profiler\": {\"enabled\": true, \"recompute_fwd_factor\": 2}}", "", "out of range"},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(cases); i++) {
        int rc = parse(cases[i].ds, cases[i].extra);
        if (rc != T5_EXIT_USAGE || !strstr(err, cases[i].want) || strchr(err, '\n'))
            fail_msg("%s %s: rc %d, '%s' (want '%s')", cases[i].ds, cases[i].extra, rc, err, cases[i].want);
    }
    // without do_train there is no training batch to plan
    config_init(&cfg);
    const char* argv[] = {"t5train", "--model_name_or_path", "t5-3b", "--do_eval", "--dataset_name", "wmt16",
                          "--dataset_config_name", "ro-en", "--source_lang", "en", "--target_lang", "ro", "--deepspeed",
                          "{\"autotuning\": {\"enabled\": true}}", NULL};
    assert_int_equal(config_parse_args(&cfg, 14, (char**)argv, err, sizeof err), 0);
    assert_int_equal(config_resolve(&cfg, err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, "needs do_train"));
}

static char* read_in(const char* dir, const char* name) {
    char* p = t5_path_join(dir, name);
    char* t = t5_read_file(p, NULL);
    free(p);
    if (!t) fail_msg("missing %s/%s", dir, name);
    return t;
}

static void test_results_dir(void** state) {
    (void)state;
    char ds[1024], dir[600];
    snprintf(dir, sizeof dir, "%s/at_results", t5test_tmpdir());
    snprintf(ds, sizeof ds,
             "{\"autotuning\": {\"enabled\": true, \"results_dir\": \"%s\"}, \"train_micro_batch_size_per_gpu\": "
             "\"auto\", \"gradient_accumulation_steps\": \"auto\", \"fp16\": {\"enabled\": \"auto\"}, "
             "\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}}}",
             dir);
    if (parse(ds, "--gradient_accumulation_steps 2")) fail_msg("%s", err);
    // the plan as run.c has it after planner_pick_apply: stage 2, optimizer offloaded at ratio 0.5, micro-batch 5
    ZeroOptions zo;
    zero_options_default(&zo);
    zo.stage = 2;
    zo.offload_optimizer = true;
    zo.optimizer_pin_memory = true;
    zo.ratio = 0.5;
    char* argv[] = {"./t5train", "--model_name_or_path", "t5-3b", "--deepspeed", "old.json", "--fp16", NULL};
    if (autotune_write_results(&cfg, &zo, 5, true, 12.345, 6, argv, err, sizeof err)) fail_msg("%s", err);
    char* text = read_in(dir, "ds_config_optimal.json");
    json_error_t je;
    json_t* j = json_loads(text, 0, &je);
    assert_non_null(j);
    assert_null(json_object_get(j, "autotuning"));
    assert_int_equal(json_integer_value(json_object_get(j, "train_micro_batch_size_per_gpu")), 5);
    assert_int_equal(json_integer_value(json_object_get(j, "gradient_accumulation_steps")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "train_batch_size")), 10);
    json_t* z = json_object_get(j, "zero_optimization");
    assert_int_equal(json_integer_value(json_object_get(z, "stage")), 2);
    assert_string_equal(json_string_value(json_object_get(json_object_get(z, "offload_optimizer"), "device")), "cpu");
    assert_true(json_real_value(json_object_get(json_object_get(z, "offload_optimizer"), "ratio")) == 0.5);
    assert_string_equal(json_string_value(json_object_get(json_object_get(z, "offload_param"), "device")), "none");
    json_decref(j);
    free(text);
    text = read_in(dir, "cmd_optimal.txt");
    char want[1024];
    snprintf(want, sizeof want,
             "./t5train --model_name_or_path t5-3b --fp16 --deepspeed %s/ds_config_optimal.json "
             "--per_device_train_batch_size 5 --gradient_checkpointing\n",
             dir);
    assert_string_equal(text, want);
    free(text);
    text = read_in(dir, "summary.txt");
    assert_contains(text, "| global       | 0 | 12.35 | z2_gas2_tmbspg5_offload_optimizer |");
    assert_contains(text, "no experiments were run");
    free(text);
    // the optimal config runs again as written: it resolves with the chosen batch
    char path[700];
    snprintf(path, sizeof path, "%s/ds_config_optimal.json", dir);
    if (parse(path, "--gradient_accumulation_steps 2 --per_device_train_batch_size 5"))
        fail_msg("ds_config_optimal.json does not resolve again: %s", err);
    assert_int_equal(cfg.ds.zero_optimization.stage, 2);
    assert_int_equal(cfg.ds.train_micro_batch_size_per_gpu, 5);
    // an unwritable results_dir: one line, exit 1
    config_init(&cfg);
    snprintf(cfg.ds.autotuning.results_dir, sizeof cfg.ds.autotuning.results_dir, "/proc/no/such");
    cfg.world_size = 1;
    assert_int_equal(autotune_write_results(&cfg, &zo, 5, false, 1, 6, argv, err, sizeof err), T5_EXIT_FAILURE);
    assert_non_null(strstr(err, "deepspeed.autotuning.results_dir /proc/no/such"));
}

static void test_flops_profiler_keys(void** state) {
    (void)state;
    assert_int_equal(parse("{\"flops_profiler\": {\"enabled\": true}}", ""), 0);
    const DsFlopsProfiler* f = &cfg.ds.flops_profiler;
    assert_true(f->enabled && f->detailed);
    assert_int_equal(f->profile_step, 1);
    assert_int_equal(f->module_depth, -1);
    assert_int_equal(f->top_modules, 1);
    assert_true(f->recompute_fwd_factor == 0.0);
    assert_string_equal(f->output_file, "");
    assert_int_equal(parse("{\"flops_profiler\": {\"enabled\": true, \"profile_step\": 5, \"module_depth\": 3, "
                           "\"top_modules\": 4, \"detailed\": false, \"recompute_fwd_factor\": 1.0, "
                           "\"output_file\": \"prof.txt\"}}", ""),
                     0);
    assert_int_equal(f->profile_step, 5);
    assert_int_equal(f->module_depth, 3);
    assert_int_equal(f->top_modules, 4);
    assert_false(f->detailed);
    assert_true(f->recompute_fwd_factor == 1.0);
    assert_string_equal(f->output_file, "prof.txt");
    assert_false(has_note("recompute_fwd_factor 1"));
    // gradient checkpointing with the default factor: a note (DeepSpeed's advice)
    assert_int_equal(parse("{\"flops_profiler\": {\"enabled\": true}}", "--gradient_checkpointing"), 0);
    assert_true(has_note("recompute_fwd_factor 1 counts it"));
}

// through the binary: `t5train estimate` shows the autotuned plan (the bounds held) and the flops profile of a shape
static void test_estimate_command(void** state) {
    (void)state;
    static char out[1 << 16];
    int rc = t5test_run(out, sizeof out,
                        "%s estimate --model t5-3b --fp16 --do_train --source_len 128 --target_len 128 --gpu_mem 79.6 "
                        "--host_mem 125 --deepspeed '{\"autotuning\": {\"enabled\": true, "
                        "\"min_train_micro_batch_size_per_gpu\": 3, \"max_train_micro_batch_size_per_gpu\": 5}}' 2>&1",
                        t5test_bin());
    if (rc) fail_msg("exit %d: %s", rc, out);
    assert_contains(out, "zero plan auto: micro-batch 5, gradient checkpointing off: stage 0");
    assert_contains(out, "zero plan auto: micro-batch 5 is the cap (5)");
    rc = t5test_run(out, sizeof out, "%s estimate --model t5-small --batch 2 --source_len 48 --target_len 40 "
                    "--flops_profile 2>&1", t5test_bin());
    if (rc) fail_msg("exit %d: %s", rc, out);
    T5Config c;
    assert_true(t5_config_preset("t5-small", &c));
    char v[64], want[160];
    flops_profile_number(v, sizeof v, flops_t5_forward(&c, 2, 48, 40) / 2);
    snprintf(want, sizeof want, "\n%-70s  %-8s\n", "fwd MACs per GPU: ", strcat(v, "MACs"));
    assert_contains(out, want);
    assert_contains(out, "Profile Summary at step 1:");
    assert_contains(out, "(lm_head): Linear(16.45 M = 27.19% Params");
    assert_contains(out, "latency not timed");
    // a bad shape: one line, exit 2
    rc = t5test_run(out, sizeof out, "%s estimate --model t5-small --batch 0 --flops_profile 2>&1", t5test_bin());
    assert_int_equal(rc, 2);
    // evaluation only (--do_eval without --do_train): the run's model keeps one block's activations (forward_only),
    // and the estimate sizes it so; with --do_train the same batch needs every layer's (t5-11b at eval batch 32:
    // 117 GiB of activations before session 7's fix)
    double act[2];
    for (int k = 0; k < 2; k++) {
        rc = t5test_run(out, sizeof out, "%s estimate --model t5-11b --bf16 %s --per_device_eval_batch_size 32 "
                        "--per_device_train_batch_size 32 --source_len 128 --target_len 128 --gpu_mem 139.8 "
                        "--host_mem 125 2>&1", t5test_bin(), k ? "--do_train --do_eval" : "--do_eval");
        if (rc) fail_msg("exit %d: %s", rc, out);
        const char* row = strstr(out, "\nstage 0 ");
        assert_non_null(row);
        double v[7];
        assert_int_equal(sscanf(row + 8, "%lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                                &v[6]), 7);
        act[k] = v[4];  // params grads optim comm act work GPU
    }
    print_message("t5-11b bf16 32 x (128+128), stage 0 activations: %.2f GiB evaluation only, %.2f GiB training\n",
                  act[0], act[1]);
    assert_true(act[1] > 100.0);
    assert_true(act[0] < act[1] / 10);
    // ZeRO inference (issue 29 item 3): an evaluation-only engine keeps no optimizer state, gradients or fp32 master
    // (model/zero.h no_optimizer_state), so t5-11b at eval batch 32 fits 2 x 80 GB at stage 3 (98.7 GiB per GPU
    // before: 13.7 params, 11.7 grads, 63.2 optim)
    rc = t5test_run(out, sizeof out, "%s estimate --model t5-11b --bf16 --do_eval --per_device_eval_batch_size 32 "
                    "--source_len 128 --target_len 128 --num_gpus 2 --gpu_mem 79.6 --host_mem 125 2>&1", t5test_bin());
    if (rc) fail_msg("exit %d: %s", rc, out);
    const char* row = strstr(out, "\nstage 3 ");
    assert_non_null(row);
    double g[7];
    assert_int_equal(sscanf(row + 8, "%lf %lf %lf %lf %lf %lf %lf", &g[0], &g[1], &g[2], &g[3], &g[4], &g[5], &g[6]),
                     7);
    print_message("t5-11b bf16 eval 32 x (128+128), 2 GPUs, stage 3: %.2f GiB per GPU (params %.2f, act %.2f)\n", g[6],
                  g[0], g[4]);
    assert_true(g[1] == 0.0 && g[2] == 0.0 && g[3] == 0.0);  // grads, optim, comm
    assert_true(g[0] > 13.67 && g[0] < 13.77 && g[6] < 79.6 / 1.05);
    const char* end = strchr(row + 1, '\n');
    assert_non_null(end);
    assert_non_null(strstr(row, "| yes"));
    assert_true(strstr(row, "| yes") < end);
}

// a dry run refuses an output_file or results_dir that cannot be written (one line, exit 2) and accepts good ones
static void test_dry_run_paths(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    static char out[1 << 16];
    const char* d = t5test_data_dir();
    char plain[700];
    snprintf(plain, sizeof plain, "%s/plain", t5test_tmpdir());  // a file where a folder would have to be
    t5test_write_file(plain, "x");
    const char* ds[] = {"{\"flops_profiler\": {\"enabled\": true, \"output_file\": \"plain/prof.txt\"}}",
                        "{\"autotuning\": {\"enabled\": true, \"results_dir\": \"plain/at\"}}",
                        "{\"flops_profiler\": {\"enabled\": true, \"output_file\": \"/tmp\"}}",
                        "{\"flops_profiler\": {\"enabled\": true, \"output_file\": \"prof/p.txt\"}, "
                        "\"autotuning\": {\"enabled\": true}}"};
    const char* want[] = {"deepspeed.flops_profiler.output_file's folder plain exists and is not a directory",
                          "deepspeed.autotuning.results_dir plain/at cannot be created: plain is not a directory",
                          "deepspeed.flops_profiler.output_file /tmp is a directory", NULL};
    for (int i = 0; i < 4; i++) {
        int rc = t5test_run(out, sizeof out,
                            "cd %s && %s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name "
                            "%s/t5-spiece/spiece.model --train_file %s/wmt16-ro-en/validation.en --source_lang en "
                            "--target_lang ro --max_train_samples 16 --do_train --max_steps 2 --output_dir out%d "
                            "--dry_run --deepspeed '%s' 2>&1",
                            t5test_tmpdir(), t5test_bin(), t5test_repo_dir(), d, d, i, ds[i]);
        if (want[i]) {
            if (rc != 2 || !strstr(out, want[i])) fail_msg("%s: exit %d, want '%s':\n%s", ds[i], rc, want[i], out);
        } else {
            if (rc != 0) fail_msg("%s: exit %d:\n%s", ds[i], rc, out);
            assert_contains(out, "dry run: autotuning writes autotuning_results/ds_config_optimal.json");
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounds_and_search),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_results_dir),
        cmocka_unit_test(test_flops_profiler_keys),
        cmocka_unit_test(test_estimate_command),
        cmocka_unit_test(test_dry_run_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
