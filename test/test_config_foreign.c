/*
 * test_config_foreign.c: no flag of run_translation.py / Seq2SeqTrainingArguments is "unknown" (issue 32).
 * test/fixtures/config/hf_args.tsv is written by scripts/list_hf_args.py from the installed transformers (5.17 when
 * committed); every name in it must be a t5train key, an alias, or an entry of src/cli/config_foreign.c. The
 * entries behave as documented there: a no-op is accepted with a note, a refused one accepts HF's default (read
 * from the same file) and stops with "not implemented yet" on anything else, from the command line and from files.
 * The same for DeepSpeed: test/fixtures/config/ds_keys.tsv (scripts/list_ds_keys.py, from the installed DeepSpeed)
 * against the deepspeed.* keys, aliases and entries (an entry for a section covers the keys inside it).
 */
#include "t5test.h"

#include <jansson.h>
#include <math.h>
#include <strings.h>

#include "../src/base/common.h"
#include "../src/cli/config.h"
#include "../src/launch/comms_log.h"

static RunConfig cfg;  // large: static
static char err[1024];

static int parse_line(const char* line) {
    char* argv[64];
    int argc = t5test_argv(line, argv, 64);
    config_init(&cfg);
    err[0] = 0;
    return config_parse_args(&cfg, argc, argv, err, sizeof err);
}

// a default as a listed file holds it (JSON) -> the text a command line would give: a string unquoted, a default
// object as "{}" (the section as given)
static void default_text(const char* d, char* out, size_t n) {
    size_t l = strlen(d);
    if (l >= 2 && d[0] == '"' && d[l - 1] == '"') snprintf(out, n, "%.*s", (int)l - 2, d + 1);
    else if (d[0] == '{') snprintf(out, n, "{}");
    else snprintf(out, n, "%s", d);
}

typedef struct {
    char name[96], kind[16], def[128];
} HfArg;

static int read_hf_args(HfArg* out, int cap) {
    char path[1024];
    snprintf(path, sizeof path, "%s/test/fixtures/config/hf_args.tsv", t5test_repo_dir());
    FILE* f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        if (line[0] == '#' || line[0] == '\n') continue;
        if (sscanf(line, "%95[^\t]\t%15[^\t]\t%127[^\t]", out[n].name, out[n].kind, out[n].def) == 3) n++;
    }
    fclose(f);
    return n;
}

static void test_every_hf_flag_is_known(void** state) {
    (void)state;
    static HfArg a[400];
    int n = read_hf_args(a, 400), missing = 0;
    assert_true(n > 100);  // Seq2SeqTrainingArguments alone has over 100 fields
    char list[4096] = "";
    for (int i = 0; i < n; i++) {
        if (config_key_index(a[i].name) >= 0 || config_foreign_index(a[i].name) >= 0) continue;
        missing++;
        strncat(list, " ", sizeof list - strlen(list) - 1);
        strncat(list, a[i].name, sizeof list - strlen(list) - 1);
    }
    if (missing) fail_msg("%d HF flags are unknown to t5train:%s", missing, list);
}

typedef struct {
    char key[160], def[512], where[64];
} DsKey;

static int read_ds_keys(DsKey* out, int cap) {
    char path[1024];
    snprintf(path, sizeof path, "%s/test/fixtures/config/ds_keys.tsv", t5test_repo_dir());
    FILE* f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char* a = strtok(line, "\t\n");
        char* b = strtok(NULL, "\t\n");
        char* c = strtok(NULL, "\t\n");
        if (!a || !b || !c) continue;
        snprintf(out[n].key, sizeof out[n].key, "deepspeed.%.140s", a);
        snprintf(out[n].def, sizeof out[n].def, "%.500s", b);
        snprintf(out[n].where, sizeof out[n].where, "%.60s", c);
        n++;
    }
    fclose(f);
    return n;
}

// a key is known when it, or a section above it, is a foreign entry, or when it is a key or alias
static bool ds_known(const char* key) {
    if (config_key_index(key) >= 0) return true;
    char k[160];
    snprintf(k, sizeof k, "%.159s", key);
    for (;;) {
        if (config_foreign_index(k) >= 0) return true;
        char* dot = strrchr(k, '.');
        if (!dot || dot - k <= 9) return false;  // stop at "deepspeed"
        *dot = 0;
    }
}

static void test_every_ds_key_is_known(void** state) {
    (void)state;
    static DsKey a[600];
    int n = read_ds_keys(a, 600), missing = 0;
    assert_true(n > 150);
    char list[4096] = "";
    for (int i = 0; i < n; i++) {
        if (ds_known(a[i].key)) continue;
        missing++;
        strncat(list, " ", sizeof list - strlen(list) - 1);
        strncat(list, a[i].key, sizeof list - strlen(list) - 1);
    }
    if (missing) fail_msg("%d DeepSpeed keys are unknown to t5train:%s", missing, list);
    // DeepSpeed's own default of every refused key it names one for (its pydantic models) is accepted
    int checked = 0;
    for (int i = 0; i < n; i++) {
        int fi = config_foreign_index(a[i].key);
        if (fi < 0 || strcmp(a[i].where, "dict") == 0) continue;
        char text[512];
        default_text(a[i].def, text, sizeof text);
        config_init(&cfg);
        if (config_foreign_apply(&cfg, fi, text, a[i].key, err, sizeof err))
            fail_msg("DeepSpeed's default of %s (%s) is refused: %s", a[i].key, a[i].def, err);
        checked++;
    }
    assert_true(checked >= 25);
}

// t5train's default of every key it shares with DeepSpeed's models is DeepSpeed's (the offload sections' pin_memory
// included: true, as DeepSpeed 0.19.8, issue 28)
static void test_deepspeed_defaults(void** state) {
    (void)state;
    static DsKey a[600];
    int n = read_ds_keys(a, 600), compared = 0;
    char list[4096] = "";
    for (int i = 0; i < n; i++) {
        int ki = config_key_index(a[i].key);
        if (ki < 0 || strcmp(a[i].where, "dict") == 0 || CONFIG_KEYS[ki].kind == CONFIG_SECTION) continue;
        json_t* ours = json_loads(CONFIG_KEYS[ki].def, JSON_DECODE_ANY, NULL);
        json_t* theirs = json_loads(a[i].def, JSON_DECODE_ANY, NULL);
        if (!ours || !theirs) fail_msg("%s: defaults not JSON: '%s' / '%s'", a[i].key, CONFIG_KEYS[ki].def, a[i].def);
        bool same = json_equal(ours, theirs);
        if (json_is_number(ours) && json_is_number(theirs))
            same = fabs(json_number_value(ours) - json_number_value(theirs)) <= 1e-9 * fmax(1, fabs(json_number_value(theirs)));
        if (json_is_string(ours) && json_is_string(theirs))
            same = strcasecmp(json_string_value(ours), json_string_value(theirs)) == 0;
        json_decref(ours);
        json_decref(theirs);
        compared++;
        if (!same) {
            char one[300];
            snprintf(one, sizeof one, " %.120s (t5train %.60s, DeepSpeed %.60s)", a[i].key, CONFIG_KEYS[ki].def, a[i].def);
            strncat(list, one, sizeof list - strlen(list) - 1);
        }
    }
    if (list[0]) fail_msg("defaults differ from DeepSpeed's:%s", list);
    assert_true(compared >= 30);
}

static void test_deepspeed_file(void** state) {
    (void)state;
    config_init(&cfg);
    int rc = config_load_string(&cfg,
                                "{\"deepspeed\": {\"flops_profiler\": {\"enabled\": false, \"profile_step\": 1}, "
                                "\"wandb\": {\"enabled\": false}, \"tensorboard\": {}, \"compile\": {\"deepcompile\": true}, "
                                "\"bfloat16\": {\"enabled\": false}, \"zero_optimization\": {\"stage\": 3, "
                                "\"zero_quantized_weights\": false, \"zero_hpz_partition_size\": 1, "
                                "\"max_live_parameters\": 5e8, \"memory_efficient_linear\": true}}}",
                                "job.json", err, sizeof err);
    if (rc) fail_msg("a DeepSpeed config with defaults of keys t5train lacks is refused: %s", err);
    // DeepSpeed's field name is an alias of t5train's stage3_* key: honoured
    assert_int_equal(cfg.ds.zero_optimization.stage3_max_live_parameters, 500000000);
    assert_int_equal(cfg.foreign_set[config_foreign_index("deepspeed.compile")], 1);
    const char* refused[][2] = {
        {"{\"deepspeed\": {\"comet\": {\"enabled\": true}}}", "comet"},
        {"{\"deepspeed\": {\"pipeline\": {\"stages\": 2}}}", "pipeline"},
        {"{\"deepspeed\": {\"zero_optimization\": {\"zero_quantized_weights\": true}}}", "ZeRO++ quantized weights"},
        {"{\"deepspeed\": {\"zero_optimization\": {\"zero_hpz_partition_size\": 8}}}", "ZeRO++ hierarchical"},
        {"{\"deepspeed\": {\"zero_optimization\": {\"zenflow\": {\"steps_per_epoch\": 100}}}}", "steps_per_epoch"},
        {"{\"deepspeed\": {\"bf16\": {\"enabled\": true, \"check_grad_overflow\": false}}}", "overflow check"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        config_init(&cfg);
        rc = config_load_string(&cfg, refused[i][0], "job.json", err, sizeof err);
        if (rc != 2 || !strstr(err, refused[i][1]) || !strstr(err, "not implemented"))
            fail_msg("%s: rc %d, '%s'", refused[i][0], rc, err);
    }
    // a key DeepSpeed does not have either is still unknown
    config_init(&cfg);
    assert_int_equal(config_load_string(&cfg, "{\"deepspeed\": {\"flops_profiller\": {}}}", "job.json", err, sizeof err), 2);
    assert_non_null(strstr(err, "unknown key"));
}

// DeepSpeed's tensorboard / csv_monitor sections turn on t5train's writers; logging_dir from output_path/job_name
static void test_deepspeed_monitors(void** state) {
    (void)state;
    char ds[1024], line[2048];
    snprintf(ds, sizeof ds, "%s/ds_monitors.json", t5test_tmpdir());
    t5test_write_file(ds, "{\"tensorboard\": {\"enabled\": true, \"output_path\": \"/tmp/tb_logs\", \"job_name\": \"t5\"}, "
                          "\"csv_monitor\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 0}}");
    const char* base = "--model_name_or_path t5-small --do_train --dataset_name wmt16 --dataset_config_name ro-en "
                       "--source_lang en --target_lang ro";
    snprintf(line, sizeof line, "%s --output_dir %s/m1 --deepspeed %s", base, t5test_tmpdir(), ds);
    assert_int_equal(parse_line(line), 0);
    if (config_resolve(&cfg, err, sizeof err)) fail_msg("resolve: %s", err);
    assert_string_equal(cfg.logging_dir, "/tmp/tb_logs/t5");
    assert_string_equal(cfg.report_to, "csv,tensorboard");
    // an explicit logging_dir wins, as for HF's own writer
    snprintf(line, sizeof line, "%s --output_dir %s/m2 --deepspeed %s --logging_dir /tmp/mine", base, t5test_tmpdir(), ds);
    assert_int_equal(parse_line(line), 0);
    if (config_resolve(&cfg, err, sizeof err)) fail_msg("resolve: %s", err);
    assert_string_equal(cfg.logging_dir, "/tmp/mine");
    // disabled: nothing changes
    t5test_write_file(ds, "{\"tensorboard\": {\"enabled\": false, \"output_path\": \"/tmp/tb_logs\"}}");
    snprintf(line, sizeof line, "%s --output_dir %s/m3 --deepspeed %s", base, t5test_tmpdir(), ds);
    assert_int_equal(parse_line(line), 0);
    if (config_resolve(&cfg, err, sizeof err)) fail_msg("resolve: %s", err);
    assert_string_equal(cfg.report_to, "none");
    assert_null(strstr(cfg.logging_dir, "tb_logs"));
}

static bool has_note(const char* part) {
    for (int i = 0; i < cfg.num_notes; i++)
        if (strstr(cfg.notes[i], part)) return true;
    return false;
}

// DeepSpeed's comms_logger section: its keys and defaults (CommsLoggerConfig), prof_ops a list checked against the
// collectives t5train issues (one line naming them), written back as a list
static void test_deepspeed_comms_logger(void** state) {
    (void)state;
    char ds[1024], line[2048];
    snprintf(ds, sizeof ds, "%s/ds_comms.json", t5test_tmpdir());
    const char* base = "--model_name_or_path t5-small --do_train --dataset_name wmt16 --dataset_config_name ro-en "
                       "--source_lang en --target_lang ro";
    // DeepSpeed's defaults
    config_init(&cfg);
    assert_false(cfg.ds.comms_logger.enabled);
    assert_false(cfg.ds.comms_logger.verbose);
    assert_true(cfg.ds.comms_logger.prof_all);
    assert_false(cfg.ds.comms_logger.debug);
    assert_string_equal(cfg.ds.comms_logger.prof_ops, "");
    unsigned ops = 0;
    assert_int_equal(config_comms_ops(&cfg.ds.comms_logger, &ops, err, sizeof err), 0);
    assert_int_equal(ops, (1u << COMMS_NUM_OPS) - 1);  // prof_all: every op
    // enabled (it was refused as "not implemented yet" before), prof_ops a list with DeepSpeed's list-form alias
    t5test_write_file(ds, "{\"comms_logger\": {\"enabled\": true, \"verbose\": true, \"prof_all\": false, "
                          "\"debug\": true, \"prof_ops\": [\"all_reduce\", \"all_gather\"]}, "
                          "\"zero_optimization\": {\"stage\": 0}}");
    snprintf(line, sizeof line, "%s --output_dir %s/c1 --deepspeed %s", base, t5test_tmpdir(), ds);
    if (parse_line(line)) fail_msg("comms_logger refused: %s", err);
    cfg.world_size = 2;
    if (config_resolve(&cfg, err, sizeof err)) fail_msg("resolve: %s", err);
    assert_true(cfg.ds.comms_logger.enabled && cfg.ds.comms_logger.verbose && cfg.ds.comms_logger.debug);
    assert_false(cfg.ds.comms_logger.prof_all);
    assert_string_equal(cfg.ds.comms_logger.prof_ops, "all_reduce,all_gather");
    assert_int_equal(config_comms_ops(&cfg.ds.comms_logger, &ops, err, sizeof err), 0);
    assert_int_equal(ops, (1u << COMMS_ALL_REDUCE) | (1u << COMMS_ALL_GATHER));
    assert_false(has_note("comms_logger"));
    // the resolved config writes the list back as a list
    int ki = config_key_index("deepspeed.comms_logger.prof_ops");
    assert_true(ki >= 0);
    char v[256];
    config_format_value(&cfg, ki, v, sizeof v);
    assert_string_equal(v, "[\"all_reduce\", \"all_gather\"]");
    char path[1024];
    snprintf(path, sizeof path, "%s/comms_resolved.json", t5test_tmpdir());
    if (config_write_json(&cfg, path, err, sizeof err)) fail_msg("config_write_json: %s", err);
    json_t* j = json_load_file(path, 0, NULL);
    assert_non_null(j);
    json_t* po = json_object_get(json_object_get(json_object_get(j, "deepspeed"), "comms_logger"), "prof_ops");
    assert_true(json_is_array(po) && json_array_size(po) == 2);
    assert_string_equal(json_string_value(json_array_get(po, 1)), "all_gather");
    json_decref(j);
    // an op t5train does not issue: one line naming t5train's ops (exit 2)
    t5test_write_file(ds, "{\"comms_logger\": {\"enabled\": true, \"prof_ops\": [\"all_reduce\", \"all_to_all_single\"]}}");
    snprintf(line, sizeof line, "%s --output_dir %s/c2 --deepspeed %s", base, t5test_tmpdir(), ds);
    assert_int_equal(parse_line(line), 0);
    assert_int_equal(config_resolve(&cfg, err, sizeof err), 2);
    assert_non_null(strstr(err, "deepspeed.comms_logger.prof_ops: \"all_to_all_single\" is not a collective t5train issues"));
    assert_non_null(strstr(err, "all_reduce, reduce_scatter_tensor, all_gather_into_tensor, broadcast, barrier"));
    assert_null(strchr(err, '\n'));
    // not a list of names
    const char* bad[] = {"{\"deepspeed\": {\"comms_logger\": {\"prof_ops\": 3}}}",
                         "{\"deepspeed\": {\"comms_logger\": {\"prof_ops\": [1]}}}",
                         "{\"deepspeed\": {\"comms_logger\": {\"prof_ops\": [\"a,b\"]}}}",
                         "{\"deepspeed\": {\"comms_logger\": {\"verbose\": \"yes\"}}}",
                         "{\"deepspeed\": {\"comms_logger\": {\"prof_op\": []}}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        config_init(&cfg);
        if (config_load_string(&cfg, bad[i], "job.json", err, sizeof err) != 2) fail_msg("%s accepted", bad[i]);
    }
    assert_non_null(strstr(err, "unknown key"));
    // notes: nothing timed; one rank
    t5test_write_file(ds, "{\"comms_logger\": {\"enabled\": true, \"prof_all\": false}}");
    snprintf(line, sizeof line, "%s --output_dir %s/c3 --deepspeed %s", base, t5test_tmpdir(), ds);
    assert_int_equal(parse_line(line), 0);
    if (config_resolve(&cfg, err, sizeof err)) fail_msg("resolve: %s", err);
    assert_true(has_note("no collective is timed"));
    t5test_write_file(ds, "{\"comms_logger\": {\"enabled\": true}}");
    snprintf(line, sizeof line, "%s --output_dir %s/c4 --deepspeed %s", base, t5test_tmpdir(), ds);
    assert_int_equal(parse_line(line), 0);
    if (config_resolve(&cfg, err, sizeof err)) fail_msg("resolve: %s", err);
    assert_true(has_note("one rank issues no collectives"));
}

static void test_table_is_consistent(void** state) {
    (void)state;
    assert_true(CONFIG_NUM_FOREIGN <= CONFIG_FOREIGN_MAX);
    for (int i = 0; i < CONFIG_NUM_FOREIGN; i++) {
        const ForeignKey* k = &CONFIG_FOREIGN_KEYS[i];
        if (config_key_index(k->key) >= 0) fail_msg("%s is both a key and a foreign key", k->key);
        if (config_foreign_index(k->key) != i) fail_msg("%s is listed twice", k->key);
        if (!k->reason || strlen(k->reason) < 10) fail_msg("%s has no reason", k->key);
    }
}

// HF's own default of every refused flag is accepted (a launch script that spells a default out still runs)
static void test_hf_defaults_accepted(void** state) {
    (void)state;
    static HfArg a[400];
    int n = read_hf_args(a, 400);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        int fi = config_foreign_index(a[i].name);
        if (fi < 0) continue;
        char text[128];
        default_text(a[i].def, text, sizeof text);
        config_init(&cfg);
        int rc = config_foreign_apply(&cfg, fi, text, a[i].name, err, sizeof err);
        if (rc) fail_msg("HF's default of %s (%s) is refused: %s", a[i].name, a[i].def, err);
        checked++;
    }
    assert_true(checked >= 59);  // (hub_always_push became a key)
}

static void test_command_line(void** state) {
    (void)state;
    // no-ops: accepted, noted once the config is resolved
    assert_int_equal(parse_line("--torch_compile --ddp_timeout 7200 --seed 3"), 0);
    assert_int_equal(cfg.foreign_set[config_foreign_index("torch_compile")], 1);
    assert_int_equal(cfg.foreign_set[config_foreign_index("ddp_timeout")], 1);
    assert_int_equal(cfg.seed, 3);  // the bare boolean flag did not swallow the next flag
    assert_int_equal(parse_line("--torch_compile true --seed 4"), 0);
    assert_int_equal(cfg.seed, 4);
    // refused: the default spelled out is fine, anything else is "not implemented yet" (exit 2)
    const char* fine[] = {"--eval_delay 0", "--ddp_backend nccl", "--save_safetensors", "--save_safetensors True"};
    for (size_t i = 0; i < sizeof fine / sizeof *fine; i++)
        if (parse_line(fine[i])) fail_msg("'%s' refused: %s", fine[i], err);
    const char* refused[] = {"--eval_delay 5", "--token hf_x", "--ddp_backend gloo", "--use_cpu",
                             "--save_safetensors false"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        int rc = parse_line(refused[i]);
        if (rc != 2) fail_msg("'%s' gave %d, want 2", refused[i], rc);
        if (!strstr(err, "--") || (!strstr(err, "not implemented") && !strstr(err, "t5train")))
            fail_msg("'%s': %s", refused[i], err);
    }
    // --tf32 is a key of t5train's own now (null and false: off, PyTorch's default)
    assert_int_equal(parse_line("--tf32"), 0);
    assert_true(cfg.tf32);
    assert_int_equal(parse_line("--tf32=False"), 0);
    assert_false(cfg.tf32);
    assert_int_equal(parse_line("--tf32 maybe"), 2);
    // --auto_find_batch_size and --disable_tqdm likewise
    assert_int_equal(parse_line("--auto_find_batch_size --disable_tqdm"), 0);
    assert_true(cfg.auto_find_batch_size && cfg.disable_tqdm);
    // the log levels, include_num_input_tokens_seen (HF's str | bool) and the hub_* flags are keys of t5train's own
    assert_int_equal(parse_line("--log_level warning --log_level_replica error"), 0);
    assert_int_equal(cfg.log_level, T5_LOG_WARNING);
    assert_int_equal(cfg.log_level_replica, T5_LOG_ERROR);
    assert_int_equal(parse_line("--log_level passive"), 0);
    assert_int_equal(cfg.log_level, T5_LOG_PASSIVE);
    assert_int_equal(cfg.log_level_replica, T5_LOG_WARNING);  // HF's default
    assert_int_equal(parse_line("--log_level verbose"), 2);
    assert_non_null(strstr(err, "passive, debug, info, warning, error, critical"));
    const char* tokens_seen[][2] = {{"no", "0"}, {"all", "1"}, {"non_padding", "2"}, {"True", "1"}, {"false", "0"}};
    for (size_t i = 0; i < 5; i++) {
        char line[128];
        snprintf(line, sizeof line, "--include_num_input_tokens_seen %s", tokens_seen[i][0]);
        if (parse_line(line)) fail_msg("'%s': %s", line, err);
        assert_int_equal(cfg.include_num_input_tokens_seen, atoi(tokens_seen[i][1]));
    }
    assert_int_equal(parse_line("--include_num_input_tokens_seen some"), 2);
    assert_int_equal(parse_line("--push_to_hub --hub_model_id org/m --hub_strategy checkpoint --hub_private_repo "
                                "--hub_revision dev --hub_token hf_abc"), 0);
    assert_true(cfg.push_to_hub && cfg.hub_private_repo);
    assert_string_equal(cfg.hub_model_id, "org/m");
    assert_string_equal(cfg.hub_revision, "dev");
    assert_int_equal(cfg.hub_strategy, 2);  // HUB_STRATEGY_CHECKPOINT
    char shown[128];
    config_format_value(&cfg, config_key_index("hub_token"), shown, sizeof shown);
    assert_string_equal(shown, "\"<HUB_TOKEN>\"");  // never printed
    assert_string_equal(cfg.hub_token, "hf_abc");
    assert_int_equal(parse_line("--hub_strategy sometimes"), 2);
    assert_int_equal(parse_line("--push_to_hub"), 0);
    assert_int_equal(cfg.hub_strategy, 1);  // HF's default, every_save
    assert_false(cfg.hub_always_push);      // HF's default: a push still running skips the next
    assert_int_equal(parse_line("--push_to_hub --hub_always_push"), 0);
    assert_true(cfg.hub_always_push);
    // a flag nobody defines is still unknown
    assert_int_equal(parse_line("--torch_compiled"), 2);
    assert_non_null(strstr(err, "unknown flag --torch_compiled"));
}

static void test_config_file(void** state) {
    (void)state;
    config_init(&cfg);
    assert_int_equal(config_load_string(&cfg,
                                        "{\"push_to_hub\": false, \"fsdp\": \"\", \"debug\": [], \"tf32\": null, "
                                        "\"remove_unused_columns\": false, \"gradient_checkpointing_kwargs\": "
                                        "{\"use_reentrant\": false}}",
                                        "job.json", err, sizeof err),
                     0);
    assert_int_equal(cfg.foreign_set[config_foreign_index("remove_unused_columns")], 1);
    assert_false(cfg.tf32);  // HF writes "tf32": null: off
    assert_int_equal(cfg.foreign_set[config_foreign_index("gradient_checkpointing_kwargs")], 1);
    // a config file: include_num_input_tokens_seen as JSON true; hub_token as t5train_config.json writes it (the mask)
    // reads back as null
    config_init(&cfg);
    assert_int_equal(config_load_string(&cfg, "{\"push_to_hub\": true, \"include_num_input_tokens_seen\": true, "
                                              "\"hub_token\": \"<HUB_TOKEN>\"}", "job.json", err, sizeof err),
                     0);
    assert_true(cfg.push_to_hub);
    assert_int_equal(cfg.include_num_input_tokens_seen, 1);
    assert_string_equal(cfg.hub_token, "");
    config_init(&cfg);
    assert_int_not_equal(config_load_string(&cfg, "{\"fsdp\": \"full_shard\"}", "job.json", err, sizeof err), 0);
    assert_non_null(strstr(err, "FSDP"));
}

// the binary: a no-op flag's note is printed with the resolved config; the value of a secret flag never is
static void test_binary_notes(void** state) {
    (void)state;
    char out[1 << 16], cmd[2048];
    snprintf(cmd, sizeof cmd,
             "'%s' --model t5-small --init random --dataset_name wmt16 --dataset_config ro-en --source_lang en "
             "--target_lang ro --do_train --output_dir '%s/o' --data_dir '%s/nodata' --torch_compile "
             "--hub_token hf_SECRET_VALUE --dry_run 2>&1",
             t5test_bin(), t5test_tmpdir(), t5test_tmpdir());
    t5test_run(out, sizeof out, "%s", cmd);
    assert_non_null(strstr(out, "note: torch_compile: accepted, no effect: the model is compiled CUDA already"));
    assert_null(strstr(out, "hf_SECRET_VALUE"));
    assert_null(strstr(out, "unknown flag"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_hf_flag_is_known),
        cmocka_unit_test(test_table_is_consistent),
        cmocka_unit_test(test_hf_defaults_accepted),
        cmocka_unit_test(test_command_line),
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_binary_notes),
        cmocka_unit_test(test_every_ds_key_is_known),
        cmocka_unit_test(test_deepspeed_defaults),
        cmocka_unit_test(test_deepspeed_file),
        cmocka_unit_test(test_deepspeed_monitors),
        cmocka_unit_test(test_deepspeed_comms_logger),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
