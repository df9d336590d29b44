/*
 * test_config_zenflow.c: DeepSpeed's zero_optimization.zenflow section through the configuration (src/cli/
 * config_table.c, config_resolve.c ds_check_zenflow, src/zero/zenflow_sched.c zenflow_opts_check), on the CPU:
 *   - an empty section takes DeepSpeed 0.19's defaults (topk_ratio 0.1, select_strategy / select_interval /
 *     update_interval "auto", auto_ratio 0.99, pt_reserved_cores_perc 0.5, ...); null and absence mean off;
 *   - every key with a value of its own; "auto" and a number both round-trip through the printed table and the
 *     written JSON;
 *   - bad values: out of range, wrong type, a string other than "auto", an unknown key (with "did you mean"),
 *     DeepSpeed's cross-key rules, where it runs (stage 1-3 with offload_optimizer cpu), offload without
 *     overlap_comm, gradient_accumulation_steps > 1, steps_per_epoch set by hand;
 *   - what the engine runs (src/zero/zenflow.c: one rank, stages 1-3 with offload_optimizer cpu, fp32 / fp16 /
 *     bf16, AdamW, a numeric update_interval, every select_strategy, checkpoints (save_strategy steps / epoch)
 *     and resume_from_checkpoint) is accepted, and so is it by the binary (--dry_run, exit 0, with and without
 *     checkpoints); every other valid section stops at config_check_implemented with one line "not implemented
 *     yet: ..." naming the thing (update_interval "auto", overlap_step, offload, several ranks, offload_param,
 *     nvme, ratio below 1, Adafactor).
 */
#include "t5test.h"

#include <math.h>

#include "../src/base/common.h"
#include "../src/cli/config.h"

static RunConfig cfg;  // large: static

#define BASE "--model t5-small --dataset wmt16-ro-en --output_dir /tmp/t5train_cfg_zf_unused "
#define NIY "not implemented yet: "
#define ZF_AUTO_REFUSAL NIY "zero_optimization.zenflow.update_interval \"auto\""

// parse + resolve of BASE --deepspeed {zero_optimization: {stage 2, offload_optimizer cpu<zero_extra>, zenflow: <zf>}}
// --save_strategy no plus `more` flags (later flags win). Returns the first non-zero code; *stage_out says which step gave it (0 parse, 1 resolve,
// 2 check_implemented)
static int run_zf(const char* zero_extra, const char* zf, const char* more, int* stage_out, char* err, size_t n) {
    char line[4096];
    // zero_extra starting with '!': the whole zero_optimization head instead of stage 2 + offload_optimizer cpu
    const bool own = zero_extra[0] == '!';
    snprintf(line, sizeof line,
             BASE "--deepspeed {\"zero_optimization\":{%s%s,\"zenflow\":%s}} --save_strategy no %s",
             own ? "" : "\"stage\":2,\"offload_optimizer\":{\"device\":\"cpu\"}", own ? zero_extra + 1 : zero_extra,
             zf, more);
    char* argv[128];
    const int argc = t5test_argv(line, argv, 128);
    config_init(&cfg);
    int rc = config_parse_args(&cfg, argc, argv, err, n);
    *stage_out = 0;
    if (rc) return rc;
    *stage_out = 1;
    if ((rc = config_resolve(&cfg, err, n))) return rc;
    *stage_out = 2;
    return config_check_implemented(&cfg, err, n);
}

// a valid section the engine does not run yet: parse and resolve pass, the implemented check refuses with one
// line "not implemented yet: ..." containing want
static void expect_refusal_only(const char* zero_extra, const char* zf, const char* more, const char* want) {
    char err[4096] = "";
    int st;
    int rc = run_zf(zero_extra, zf, more, &st, err, sizeof err);
    if (st != 2) fail_msg("zenflow %s: stopped before the implemented check (step %d): %s", zf, st, err);
    if (rc != T5_EXIT_USAGE || strncmp(err, NIY, strlen(NIY)) != 0 || !strstr(err, want) || strchr(err, '\n'))
        fail_msg("zenflow %s %s: rc %d, '%s' (expected '%s')", zf, more, rc, err, want);
    print_message("not implemented, as expected: %s\n", err);
}

// a section the engine runs: every check passes
static void expect_accepted(const char* zero_extra, const char* zf, const char* more) {
    char err[4096] = "";
    int st;
    int rc = run_zf(zero_extra, zf, more, &st, err, sizeof err);
    if (rc) fail_msg("zenflow %s %s %s: rc %d at step %d: %s", zero_extra, zf, more, rc, st, err);
}

static void expect_bad(const char* zero_extra, const char* zf, const char* more, const char* want) {
    char err[4096] = "";
    int st;
    int rc = run_zf(zero_extra, zf, more, &st, err, sizeof err);
    if (rc != T5_EXIT_USAGE || st == 2) fail_msg("zenflow %s: rc %d at step %d '%s', expected '%s'", zf, rc, st, err, want);
    if (!strstr(err, want)) fail_msg("zenflow %s: error\n  %s\nlacks '%s'", zf, err, want);
    if (strchr(err, '\n')) fail_msg("zenflow %s: the error is more than one line: %s", zf, err);
    print_message("refused as expected: %s\n", err);
}

static void value_of(const char* key, char* buf, size_t len) {
    int ki = config_key_index(key);
    if (ki < 0) fail_msg("no key %s", key);
    config_format_value(&cfg, ki, buf, len);
}

static void expect_shown(const char* key, const char* want) {
    char buf[128];
    value_of(key, buf, sizeof buf);
    if (strcmp(buf, want) != 0) fail_msg("%s is '%s', expected '%s'", key, buf, want);
}

#define ZK "deepspeed.zero_optimization.zenflow."

static void test_defaults(void** state) {
    (void)state;
    expect_refusal_only("", "{}", "", ZF_AUTO_REFUSAL);
    const DsZenflow* z = &cfg.ds.zero_optimization.zenflow;
    assert_true(z->present);
    assert_true(z->topk_ratio == 0.1);
    assert_int_equal(z->select_strategy, 0);  // "auto"
    assert_true(z->select_interval == CONFIG_INT_AUTO);
    assert_true(z->update_interval == CONFIG_INT_AUTO);
    assert_false(z->overlap_step);
    assert_false(z->offload);
    assert_true(z->auto_ratio == 0.99);
    assert_int_equal(z->full_warm_up_rounds, 0);
    assert_true(z->pt_reserved_cores_perc == 0.5);
    expect_shown(ZK "select_strategy", "auto");
    expect_shown(ZK "select_interval", "auto");
    expect_shown(ZK "update_interval", "auto");
    expect_shown(ZK "topk_ratio", "0.1");
    // the startup table lists the section's keys
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    config_print_table(&cfg, f);
    fclose(f);
    if (!strstr(text, "zenflow.update_interval") || !strstr(text, "zenflow.pt_reserved_cores_perc"))
        fail_msg("the config table lacks the zenflow keys:\n%s", t5test_tail(text, 3000));
    free(text);
}

static void test_off(void** state) {
    (void)state;
    char err[4096] = "";
    int st;
    // null: DeepSpeed's default (ZenFlow off); the run is not refused for it
    int rc = run_zf("", "null", "", &st, err, sizeof err);
    if (rc) fail_msg("zenflow null: rc %d: %s", rc, err);
    assert_false(cfg.ds.zero_optimization.zenflow.present);
    // absent
    char* argv[64];
    int argc = t5test_argv(BASE "--deepspeed {\"zero_optimization\":{\"stage\":2}}", argv, 64);
    config_init(&cfg);
    if (config_parse_args(&cfg, argc, argv, err, sizeof err) || config_resolve(&cfg, err, sizeof err) ||
        config_check_implemented(&cfg, err, sizeof err))
        fail_msg("no zenflow: %s", err);
    assert_false(cfg.ds.zero_optimization.zenflow.present);
}

static void test_every_key(void** state) {
    (void)state;
    expect_refusal_only(",\"overlap_comm\":true",
                        "{\"topk_ratio\":0.05,\"select_strategy\":\"step\",\"select_interval\":8,"
                        "\"update_interval\":4,\"overlap_step\":true,\"offload\":true,\"auto_ratio\":0.5,"
                        "\"full_warm_up_rounds\":3,\"pt_reserved_cores_perc\":0.25}",
                        "", NIY "zero_optimization.zenflow.overlap_step true");
    {  // both unwired keys are named in the one line
        char err[4096];
        config_check_implemented(&cfg, err, sizeof err);
        if (!strstr(err, "zero_optimization.zenflow.offload true")) fail_msg("offload not named: %s", err);
    }
    const DsZenflow* z = &cfg.ds.zero_optimization.zenflow;
    assert_true(z->topk_ratio == 0.05);
    assert_int_equal(z->select_strategy, 1);  // "step"
    assert_int_equal(z->select_interval, 8);
    assert_int_equal(z->update_interval, 4);
    assert_true(z->overlap_step);
    assert_true(z->offload);
    assert_true(z->auto_ratio == 0.5);
    assert_int_equal(z->full_warm_up_rounds, 3);
    assert_true(z->pt_reserved_cores_perc == 0.25);
    expect_shown(ZK "select_strategy", "step");
    expect_shown(ZK "select_interval", "8");
    expect_shown(ZK "update_interval", "4");
    // epoch with a number, update_interval auto; stage 3 and stage 1; an integer where DeepSpeed has a float
    expect_refusal_only("", "{\"select_strategy\":\"epoch\",\"select_interval\":2}", "", ZF_AUTO_REFUSAL);
    assert_int_equal(cfg.ds.zero_optimization.zenflow.select_strategy, 2);
    expect_shown(ZK "update_interval", "auto");
    expect_refusal_only("", "{\"pt_reserved_cores_perc\":1,\"topk_ratio\":0.2}", "", ZF_AUTO_REFUSAL);
    char err[4096];
    char line[1024];
    for (int stage = 1; stage <= 3; stage += 2) {
        snprintf(line, sizeof line,
                 BASE "--deepspeed {\"zero_optimization\":{\"stage\":%d,\"offload_optimizer\":{\"device\":\"cpu\"},"
                      "\"zenflow\":{\"update_interval\":2}}} --save_strategy no",
                 stage);
        char* argv[64];
        int argc = t5test_argv(line, argv, 64);
        config_init(&cfg);
        if (config_parse_args(&cfg, argc, argv, err, sizeof err) || config_resolve(&cfg, err, sizeof err))
            fail_msg("stage %d: %s", stage, err);
        if (config_check_implemented(&cfg, err, sizeof err)) fail_msg("stage %d: %s", stage, err);  // wired
    }
    // the written JSON (explicit keys) keeps "auto" as "auto" and numbers as numbers
    expect_refusal_only("", "{\"select_strategy\":\"step\",\"select_interval\":6,\"update_interval\":\"auto\"}", "",
                        ZF_AUTO_REFUSAL);
    char path[512];
    snprintf(path, sizeof path, "%s/zf_resolved.json", t5test_tmpdir());
    if (config_write_json(&cfg, path, err, sizeof err)) fail_msg("write: %s", err);
    FILE* f = fopen(path, "r");
    assert_non_null(f);
    static char text[1 << 18];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    if (!strstr(text, "\"update_interval\": \"auto\"") || !strstr(text, "\"select_interval\": 6"))
        fail_msg("written JSON lacks the zenflow values:\n%s", t5test_tail(text, 4000));
}

static void test_bad_values(void** state) {
    (void)state;
    // the table's types and ranges
    expect_bad("", "{\"topk_ratio\":1.5}", "", "topk_ratio: 1.5 is out of range");
    expect_bad("", "{\"topk_ratio\":-0.1}", "", "out of range");
    expect_bad("", "{\"auto_ratio\":\"x\"}", "", "expected a number");
    expect_bad("", "{\"pt_reserved_cores_perc\":2}", "", "pt_reserved_cores_perc: 2 is out of range");
    expect_bad("", "{\"select_strategy\":\"sometimes\"}", "", "\"sometimes\" is not one of auto, step, epoch");
    expect_bad("", "{\"select_strategy\":\"step\",\"select_interval\":\"5\"}", "", "expected an integer or \"auto\"");
    expect_bad("", "{\"update_interval\":0}", "", "update_interval: 0 is out of range");
    expect_bad("", "{\"update_interval\":2.5}", "", "expected an integer");
    expect_bad("", "{\"full_warm_up_rounds\":-1}", "", "full_warm_up_rounds: -1 is out of range");
    expect_bad("", "{\"overlap_step\":1}", "", "expected true or false");
    expect_bad("", "{\"topk_ration\":0.2}", "", "zenflow.topk_ration: unknown key (did you mean topk_ratio?)");
    expect_bad("", "[]", "", "expected an object");
    expect_bad("", "{\"steps_per_epoch\":100}", "", "not implemented: setting zenflow.steps_per_epoch");
    // DeepSpeed's cross-key rules
    expect_bad("", "{\"select_interval\":4}", "", "select_interval 4 with select_strategy \"auto\"");
    expect_bad("", "{\"select_strategy\":\"step\"}", "", "select_interval \"auto\" needs select_strategy \"auto\"");
    expect_bad("", "{\"select_strategy\":\"step\",\"select_interval\":2,\"update_interval\":4}", "",
               "select_interval 2 is below update_interval 4");
    expect_bad("", "{\"topk_ratio\":0}", "", "update_interval \"auto\" needs topk_ratio strictly between 0 and 1");
    // where it runs
    char err[4096];
    char* argv[64];
    const char* where[][2] = {
        {BASE "--deepspeed {\"zero_optimization\":{\"stage\":0,\"zenflow\":{}}}", "stage is 0, offload_optimizer device none"},
        {BASE "--deepspeed {\"zero_optimization\":{\"stage\":2,\"zenflow\":{}}}", "stage is 2, offload_optimizer device none"},
        {BASE "--deepspeed {\"zero_optimization\":{\"stage\":2,\"offload_optimizer\":{\"device\":\"nvme\",\"nvme_path\":"
              "\"/tmp\"},\"zenflow\":{}}}",
         "offload_optimizer device nvme"},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(where); i++) {
        int argc = t5test_argv(where[i][0], argv, 64);
        config_init(&cfg);
        int rc = config_parse_args(&cfg, argc, argv, err, sizeof err);
        if (!rc) rc = config_resolve(&cfg, err, sizeof err);
        if (rc != T5_EXIT_USAGE || !strstr(err, "zenflow needs ZeRO stage 1, 2 or 3 with offload_optimizer device \"cpu\"") ||
            !strstr(err, where[i][1]))
            fail_msg("%s: rc %d '%s'", where[i][0], rc, err);
    }
    // offload needs overlap_comm (false by default below stage 3)
    expect_bad("", "{\"offload\":true}", "", "offload true needs zero_optimization.overlap_comm true");
    // no accumulation of its own
    expect_bad("", "{\"update_interval\":4}", "--gradient_accumulation_steps 2", "set gradient_accumulation_steps 1");
}

// what the engine runs: stages 1-3 (offload_optimizer cpu), fp32 / fp16 / bf16, every select_strategy with a
// numeric update_interval, warm-up, topk_ratio, and the keys without effect here (pt_reserved_cores_perc, auto_ratio)
static void test_wired(void** state) {
    (void)state;
    const char* zfs[] = {
        "{\"update_interval\":4,\"select_strategy\":\"step\",\"select_interval\":8,\"topk_ratio\":0.1}",
        "{\"update_interval\":2}",  // select_strategy "auto"
        "{\"update_interval\":1,\"select_strategy\":\"epoch\",\"select_interval\":1,\"full_warm_up_rounds\":5}",
        "{\"update_interval\":3,\"select_strategy\":\"step\",\"select_interval\":3,\"topk_ratio\":1,"
        "\"pt_reserved_cores_perc\":0.3,\"auto_ratio\":0.5}",
    };
    const char* precs[] = {"", "--fp16", "--bf16"};
    char extra[128];
    for (int stage = 1; stage <= 3; stage++)
        for (size_t p = 0; p < T5_ARRAY_LEN(precs); p++)
            for (size_t i = 0; i < T5_ARRAY_LEN(zfs); i++) {
                snprintf(extra, sizeof extra, "!\"stage\":%d,\"offload_optimizer\":{\"device\":\"cpu\"}", stage);
                expect_accepted(extra, zfs[i], precs[p]);
            }
}

// valid sections the engine does not run yet: one line "not implemented yet: ..." naming the thing, exit 2
static void test_not_implemented(void** state) {
    (void)state;
    const char* zf = "{\"update_interval\":2,\"select_strategy\":\"step\",\"select_interval\":4}";
    expect_refusal_only("", "{\"update_interval\":\"auto\",\"select_strategy\":\"step\",\"select_interval\":4}",
                        "", ZF_AUTO_REFUSAL);
    expect_refusal_only("", "{\"update_interval\":2,\"select_strategy\":\"step\",\"select_interval\":4,"
                            "\"overlap_step\":true}", "", NIY "zero_optimization.zenflow.overlap_step true");
    expect_refusal_only(",\"overlap_comm\":true", "{\"update_interval\":2,\"offload\":true}", "",
                        NIY "zero_optimization.zenflow.offload true");
    expect_refusal_only("!\"stage\":3,\"offload_optimizer\":{\"device\":\"cpu\"},\"offload_param\":{\"device\":\"cpu\"}",
                        zf, "",
                        NIY "zero_optimization.zenflow with offload_param");
    expect_refusal_only("!\"stage\":3,\"offload_optimizer\":{\"device\":\"nvme\",\"nvme_path\":\"/tmp\"}", zf, "",
                        "zero_optimization.zenflow with offload_optimizer device nvme");
    expect_refusal_only("!\"stage\":2,\"offload_optimizer\":{\"device\":\"cpu\",\"ratio\":0.5}", zf, "",
                        "zero_optimization.zenflow with offload_optimizer.ratio below 1");
    expect_refusal_only("", zf, "--optim adafactor", "zero_optimization.zenflow with Adafactor");
    // checkpoints and resume are wired (src/zero/zenflow.c, zenflow_state.c): accepted
    expect_accepted("", zf, "--save_strategy steps --save_steps 10");
    expect_accepted("", zf, "--save_strategy epoch");
    expect_accepted("", zf, "--resume_from_checkpoint /tmp/t5train_cfg_zf_unused/checkpoint-2");
    // several ranks (the launcher's world size; resolve does not look at it)
    expect_accepted("", zf, "");
    cfg.world_size = 2;
    char err[4096];
    if (config_check_implemented(&cfg, err, sizeof err) != T5_EXIT_USAGE ||
        !strstr(err, NIY "zero_optimization.zenflow with several ranks (world size 2)"))
        fail_msg("two ranks: '%s'", err);
}

// the binary: a wired ZenFlow config passes --dry_run (exit 0), with checkpoints too
static void test_binary_dry_run(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    static char out[1 << 16];
    const char* d = t5test_data_dir();
    char* o = t5_path_join(t5test_tmpdir(), "zf_dry");
    const char* zf = "'{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}, "
                     "\"zenflow\": {\"topk_ratio\": 0.05, \"update_interval\": 4, \"select_strategy\": \"step\", "
                     "\"select_interval\": 8}}}'";
    for (int save = 0; save < 2; save++) {
        int rc = t5test_run(out, sizeof out,
                            "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name "
                            "%s/t5-spiece/spiece.model --train_file %s/wmt16-ro-en/validation.en --source_lang en "
                            "--target_lang ro --max_train_samples 8 --output_dir %s --do_train --max_steps 2 "
                            "--save_strategy %s --deepspeed %s --dry_run 2>&1",
                            t5test_bin(), t5test_repo_dir(), d, d, o, save ? "steps" : "no", zf);
        if (rc != 0)
            fail_msg("save_strategy %s: exit %d:\n%s", save ? "steps" : "no", rc, t5test_tail(out, 3000));
    }
    // a bad value: exit 2 with the key named
    int rc = t5test_run(out, sizeof out,
                    "%s --model t5-small --dataset wmt16-ro-en --output_dir %s --do_train --deepspeed '{\"zero_optimization\": "
                    "{\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}, \"zenflow\": {\"select_interval\": 3}}}' "
                    "--dry_run 2>&1",
                    t5test_bin(), o);
    if (rc != 2 || !strstr(out, "zero_optimization.zenflow.select_interval 3 with select_strategy \"auto\""))
        fail_msg("bad value: exit %d:\n%s", rc, t5test_tail(out, 3000));
    free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),   cmocka_unit_test(test_off),
        cmocka_unit_test(test_every_key),  cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_wired),      cmocka_unit_test(test_not_implemented),
        cmocka_unit_test(test_binary_dry_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
