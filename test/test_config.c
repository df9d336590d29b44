/*
 * test_config.c: the run configuration (src/cli/config.c): the table, every file in configs/, the
 * homework command line and its resolved "auto" values (HF integrations/deepspeed.py rules),
 * CLI-over-file precedence, the bad inputs (each its own message, exit code 2, nothing created
 * in output_dir), through the library API and through the binary.
 */
#include "t5test.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include "../src/base/common.h"
#include "../src/cli/config.h"

static RunConfig cfg;  // large: static

#define HOMEWORK_ARGS                                                                                         \
    "--deepspeed configs/ds_config_zero3.json --model_name_or_path t5-3b --do_train --do_eval "               \
    "--per_device_train_batch_size 1 --per_device_eval_batch_size 4 --output_dir %s --overwrite_output_dir " \
    "--max_train_samples 500 --num_train_epochs 1 --dataset_name wmt16 --dataset_config ro-en --source_lang en " \
    "--target_lang ro --fp16"

// ----------------------------------------------------------------------------
// helpers

// splits a space-separated command line (no quoting) and runs parse + resolve + output_dir check
static int api_run(RunConfig* c, const char* line, char* err, size_t n) {
    char* argv[128];
    const int argc = t5test_argv(line, argv, 128);
    config_init(c);
    int rc = config_parse_args(c, argc, argv, err, n);
    if (rc) return rc;
    if ((rc = config_resolve(c, err, n))) return rc;
    return config_check_output_dir(c, err, n);
}

static int64_t get_int(const RunConfig* c, const char* key) {
    int ki = config_key_index(key);
    if (ki < 0) fail_msg("no key %s", key);
    assert_int_equal(CONFIG_KEYS[ki].kind, CONFIG_INT);
    return *(const int64_t*)((const char*)c + CONFIG_KEYS[ki].offset);
}

static double get_flt(const RunConfig* c, const char* key) {
    int ki = config_key_index(key);
    if (ki < 0) fail_msg("no key %s", key);
    assert_int_equal(CONFIG_KEYS[ki].kind, CONFIG_FLOAT);
    return *(const double*)((const char*)c + CONFIG_KEYS[ki].offset);
}

static bool g_check_src = true;
static void assert_src(const RunConfig* c, const char* key, int src) {
    if (!g_check_src) return;
    int s = config_key_source(c, key);
    if (s != src) fail_msg("%s: source %d, expected %d", key, s, src);
}

static char* tmp_path(const char* name) { return t5_path_join(t5test_tmpdir(), name); }

// A HuggingFace cache (HF_HOME) in which the named models resolve to the committed tiny v1.0 model
// (test/fixtures/t5/tiny_v10 + the real T5 spiece.model): the dry run checks the model, its weights
// header and the tokenizer (issue 14), so the job lines need something real behind "t5-3b". The
// preset still sets the d_model "auto" sizes (config_resolve reads presets by name).
static char* fake_hf_home(void) {
    char* home = tmp_path("fake_hf");
    char text[4096];
    const char* names[] = {"t5-3b", "t5-small"};
    for (size_t i = 0; i < T5_ARRAY_LEN(names); i++) {
        int rc = t5test_run(text, sizeof text,
                            "d='%s/hub/models--%s/snapshots/0123abc' && mkdir -p \"$d\" && "
                            "cp '%s/test/fixtures/t5/tiny_v10/config.json' '%s/test/fixtures/t5/tiny_v10/model.safetensors' "
                            "'%s/t5-spiece/spiece.model' \"$d/\"",
                            home, names[i], t5test_repo_dir(), t5test_repo_dir(), t5test_data_dir());
        if (rc != 0) fail_msg("fake HF cache: exit %d: %s", rc, text);
    }
    return home;
}

// A data root ($T5TRAIN_DATA) holding wmt16-ro-en train/validation/test as JSON lines (3 pairs each)
static char* fake_data_root(void) {
    char* root = tmp_path("fake_data");
    char* dir = t5_path_join(root, "wmt16-ro-en");
    assert_int_equal(t5_mkdir_p(dir), 0);
    const char* splits[] = {"train", "validation", "test"};
    for (size_t i = 0; i < T5_ARRAY_LEN(splits); i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s.jsonl", dir, splits[i]);
        t5test_write_file(p, "{\"translation\": {\"en\": \"Hello world.\", \"ro\": \"Salut lume.\"}}\n"
                             "{\"translation\": {\"en\": \"The cat sleeps.\", \"ro\": \"Pisica doarme.\"}}\n"
                             "{\"translation\": {\"en\": \"Good morning.\", \"ro\": \"Buna dimineata.\"}}\n");
    }
    free(dir);
    return root;
}

// the environment of a job line run against the fakes: no network, no other cache
static void fake_env(char* env, size_t n) {
    char* hf = fake_hf_home();
    char* data = fake_data_root();
    snprintf(env, n, "HF_HOME=%s HF_HUB_CACHE= XDG_CACHE_HOME= HOME=%s/nohome HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "
             "T5TRAIN_DATA=%s T5TRAIN_CACHE=%s/tok_cache", hf, t5test_tmpdir(), data, t5test_tmpdir());
    free(hf);
    free(data);
}

// ----------------------------------------------------------------------------
// the table

static void test_table_is_consistent(void** state) {
    (void)state;
    assert_true(CONFIG_NUM_KEYS <= CONFIG_MAX_KEYS);
    config_init(&cfg);  // aborts on a default that does not pass its own key's checks
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
        assert_int_equal(config_key_index(CONFIG_KEYS[i].key), i);  // unique names
        assert_non_null(CONFIG_KEYS[i].help);
    }
    for (int i = 0; i < CONFIG_NUM_ALIASES; i++) assert_true(config_key_index(CONFIG_ALIASES[i].alias) >= 0);
    // the C enums follow the order of the choices strings
    RunConfig* c = &cfg;
    char err[CONFIG_ERR_LEN];
    assert_int_equal(config_load_string(c,
                                        "{\"lr_scheduler_type\": \"reduce_lr_on_plateau\", \"optim\": \"adagrad\","
                                        " \"evaluation_strategy\": \"epoch\", \"init\": \"random\","
                                        " \"deepspeed\": {\"optimizer\": {\"type\": \"adamw\"},"
                                        " \"scheduler\": {\"type\": \"WarmupDecayLR\"}, \"communication_data_type\": \"bf16\","
                                        " \"zero_optimization\": {\"offload_optimizer\": {\"device\": \"nvme\"},"
                                        " \"offload_param\": {\"device\": \"cpu\"}}}}",
                                        "enums.json", err, sizeof err),
                     0);
    assert_int_equal(c->lr_scheduler_type, LR_SCHED_REDUCE_LR_ON_PLATEAU);
    assert_int_equal(c->optim, OPTIM_ADAGRAD);
    assert_int_equal(c->evaluation_strategy, STRATEGY_EPOCH);
    assert_int_equal(c->init, MODEL_INIT_RANDOM);
    assert_int_equal(c->ds.optimizer.type, DS_OPTIM_ADAMW);  // case-insensitive, as DeepSpeed
    assert_int_equal(c->ds.scheduler.type, DS_SCHED_WARMUP_DECAY_LR);
    assert_int_equal(c->ds.communication_data_type, COMM_DTYPE_BF16);
    assert_int_equal(c->ds.zero_optimization.offload_optimizer.device, OFFLOAD_NVME);
    assert_int_equal(c->ds.zero_optimization.offload_param.device, OFFLOAD_CPU);
}

static void test_defaults_are_hf(void** state) {
    (void)state;
    config_init(&cfg);
    assert_int_equal(cfg.per_device_train_batch_size, 8);
    assert_int_equal(cfg.per_device_eval_batch_size, 8);
    assert_true(cfg.learning_rate == 5e-5);
    assert_true(cfg.adam_beta1 == 0.9 && cfg.adam_beta2 == 0.999 && cfg.adam_epsilon == 1e-8);
    assert_true(cfg.max_grad_norm == 1.0 && cfg.num_train_epochs == 3.0 && cfg.weight_decay == 0.0);
    assert_int_equal(cfg.max_steps, -1);
    assert_int_equal(cfg.seed, 42);
    assert_int_equal(cfg.max_source_length, 1024);
    assert_int_equal(cfg.max_target_length, 128);
    assert_int_equal(cfg.logging_steps, 500);
    assert_int_equal(cfg.save_steps, 500);
    assert_true(cfg.ignore_pad_token_for_loss);
    assert_false(cfg.fp16);
    assert_int_equal(cfg.lr_scheduler_type, LR_SCHED_LINEAR);
    // t5train's own: generation in length-sorted batches (HF's batches with false)
    assert_true(cfg.eval_sort_by_length);
    // DeepSpeed's own defaults
    assert_int_equal(cfg.ds.fp16.initial_scale_power, 16);
    assert_int_equal(cfg.ds.zero_optimization.stage3_max_live_parameters, 1000000000);
    assert_int_equal(cfg.ds.zero_optimization.reduce_bucket_size, 500000000);
    assert_int_equal(cfg.ds.zero_optimization.stage3_param_persistence_threshold, 100000);
    assert_true(cfg.ds.gradient_clipping == 0.0);
}

// ----------------------------------------------------------------------------
// configs/

static void test_every_config_file_loads(void** state) {
    (void)state;
    DIR* d = opendir("configs");
    assert_non_null(d);
    struct dirent* e;
    int n_ds = 0, n_job = 0;
    char err[CONFIG_ERR_LEN];
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0) continue;
        char* path = t5_path_join("configs", e->d_name);
        config_init(&cfg);
        int rc;
        if (strncmp(e->d_name, "ds_", 3) == 0) {
            rc = config_load_deepspeed_file(&cfg, path, err, sizeof err);
            if (!rc) rc = config_load_string(&cfg,
                                             "{\"model_name_or_path\": \"t5-base\", \"dataset_name\": \"wmt16\","
                                             " \"dataset_config_name\": \"ro-en\", \"source_lang\": \"en\","
                                             " \"target_lang\": \"ro\", \"fp16\": true, \"do_train\": true}",
                                             "args", err, sizeof err);
            n_ds++;
        } else {
            rc = config_load_file(&cfg, path, err, sizeof err);
            n_job++;
        }
        if (!rc) rc = config_resolve(&cfg, err, sizeof err);
        if (rc) fail_msg("%s: %s", path, err);
        assert_true(cfg.has_deepspeed);
        // every "auto" of the shipped configs resolves (t5-base / t5-small / t5-3b are presets)
        for (int i = 0; i < CONFIG_NUM_KEYS; i++)
            if (cfg.src[i] == CONFIG_SRC_AUTO && strstr(CONFIG_KEYS[i].key, "stage3_") == NULL)
                fail_msg("%s: %s left unresolved", path, CONFIG_KEYS[i].key);
        free(path);
    }
    closedir(d);
    assert_true(n_ds >= 3);
    assert_true(n_job >= 2);
}

static void check_homework_values(const RunConfig* c, bool check_src) {
    const DsConfig* ds = &c->ds;
    g_check_src = check_src;
    assert_true(c->has_deepspeed);
    assert_int_equal(ds->train_micro_batch_size_per_gpu, 1);
    assert_int_equal(ds->train_batch_size, 1);
    assert_int_equal(ds->gradient_accumulation_steps, 1);
    assert_src(c, "deepspeed.train_micro_batch_size_per_gpu", CONFIG_SRC_RESOLVED);
    assert_src(c, "deepspeed.train_batch_size", CONFIG_SRC_RESOLVED);
    assert_true(ds->optimizer.present);
    assert_int_equal(ds->optimizer.type, DS_OPTIM_ADAMW);
    assert_true(ds->optimizer.lr == 5e-5);
    assert_true(ds->optimizer.betas[0] == 0.9 && ds->optimizer.betas[1] == 0.999);
    assert_true(ds->optimizer.eps == 1e-8);
    assert_true(ds->optimizer.weight_decay == 0.0);
    assert_src(c, "deepspeed.optimizer.params.betas", CONFIG_SRC_RESOLVED);
    assert_int_equal(ds->scheduler.type, DS_SCHED_WARMUP_LR);
    assert_true(ds->scheduler.warmup_min_lr == 0.0);
    assert_true(ds->scheduler.warmup_max_lr == 5e-5);
    assert_int_equal(ds->scheduler.warmup_num_steps, 0);
    assert_src(c, "deepspeed.scheduler.params.warmup_num_steps", CONFIG_SRC_RESOLVED);
    assert_true(ds->gradient_clipping == 1.0);
    assert_src(c, "deepspeed.gradient_clipping", CONFIG_SRC_RESOLVED);
    assert_true(ds->fp16.enabled);
    assert_src(c, "deepspeed.fp16.enabled", CONFIG_SRC_RESOLVED);
    assert_false(ds->bf16.enabled);
    assert_true(ds->fp16.loss_scale == 0.0);
    assert_int_equal(ds->fp16.loss_scale_window, 1000);
    assert_int_equal(ds->fp16.initial_scale_power, 16);
    assert_int_equal(ds->fp16.hysteresis, 2);
    assert_true(ds->fp16.min_loss_scale == 1.0);
    const DsZero* z = &ds->zero_optimization;
    assert_int_equal(z->stage, 3);
    assert_true(c->model_found);
    assert_int_equal(c->model.d_model, 1024);
    assert_int_equal(z->reduce_bucket_size, 1048576);  // 1024^2
    // HF computes 0.9 * 1024^2 = 943718.4 (a float); DeepSpeed's field is an int: 943718
    assert_int_equal(z->stage3_prefetch_bucket_size, 943718);
    assert_int_equal(z->stage3_param_persistence_threshold, 10240);
    assert_src(c, "deepspeed.zero_optimization.stage3_prefetch_bucket_size", CONFIG_SRC_RESOLVED);
    assert_int_equal(z->offload_optimizer.device, OFFLOAD_CPU);
    assert_true(z->offload_optimizer.pin_memory);
    assert_int_equal(z->offload_param.device, OFFLOAD_CPU);
    assert_true(z->offload_param.pin_memory);
    assert_true(z->overlap_comm && z->contiguous_gradients);
    assert_int_equal(z->sub_group_size, 1000000000);
    assert_int_equal(z->stage3_max_live_parameters, 1000000000);
    assert_int_equal(z->stage3_max_reuse_distance, 1000000000);
    assert_true(z->stage3_gather_16bit_weights_on_model_save);
    assert_int_equal(ds->steps_per_print, 2000);
    assert_false(ds->wall_clock_breakdown);
    // the training arguments
    assert_string_equal(c->model_name_or_path, "t5-3b");
    assert_string_equal(c->dataset_name, "wmt16");
    assert_string_equal(c->dataset_config_name, "ro-en");
    assert_string_equal(c->source_lang, "en");
    assert_string_equal(c->target_lang, "ro");
    assert_true(c->do_train && c->do_eval && !c->do_predict);
    assert_int_equal(c->per_device_train_batch_size, 1);
    assert_int_equal(c->per_device_eval_batch_size, 4);
    assert_true(c->overwrite_output_dir && c->fp16 && !c->bf16);
    assert_int_equal(c->max_train_samples, 500);
    assert_true(c->num_train_epochs == 1.0);
    assert_int_equal(c->train_samples, 500);
    assert_int_equal(c->num_training_steps, 500);  // 500 samples / batch 1, 1 epoch
    g_check_src = true;
}

static void test_homework_command_line_resolves(void** state) {
    (void)state;
    char line[2048], err[CONFIG_ERR_LEN];
    char* out = tmp_path("hw_out");
    snprintf(line, sizeof line, HOMEWORK_ARGS, out);
    int rc = api_run(&cfg, line, err, sizeof err);
    if (rc) fail_msg("%s", err);
    check_homework_values(&cfg, true);
    assert_string_equal(cfg.output_dir, out);
    char buf[128];
    config_format_value(&cfg, config_key_index("deepspeed.zero_optimization.reduce_bucket_size"), buf, sizeof buf);
    assert_string_equal(buf, "1048576 (auto)");
    // the ZeRO engine runs stage 3 with CPU offload of optimizer and parameters: the homework is implemented
    rc = config_check_implemented(&cfg, err, sizeof err);
    if (rc) fail_msg("the homework line is refused: %s", err);
    // what is still missing is an input error (exit 2) naming each part: NVMe offload of the parameters (the
    // optimizer's is implemented: src/nvme/, src/zero/part_nvme.c)
    cfg.ds.zero_optimization.offload_optimizer.device = OFFLOAD_NVME;
    rc = config_check_implemented(&cfg, err, sizeof err);
    if (rc) fail_msg("offload_optimizer nvme is refused: %s", err);
    cfg.ds.zero_optimization.offload_param.device = OFFLOAD_NVME;
    rc = config_check_implemented(&cfg, err, sizeof err);
    assert_int_equal(rc, T5_EXIT_USAGE);
    assert_contains(err, "not implemented yet: offload_param device nvme");
    assert_null(strstr(err, "offload_optimizer device nvme"));
    assert_null(strstr(err, "training (do_train)"));
    assert_null(strstr(err, "ZeRO stage"));
    assert_false(t5_path_exists(out));  // the library never creates output_dir
    free(out);
}

// offload_optimizer nvme and the aio section: DeepSpeed 0.19.8's defaults, thread_count the older name of
// intra_op_parallelism, use_gds and Adafactor on NVMe refused as not implemented
static void test_nvme_keys(void** state) {
    (void)state;
    char line[2048], err[CONFIG_ERR_LEN];
    char* out = tmp_path("nvme_out");
    char* ds = tmp_path("nvme_ds.json");
    t5test_write_file(ds, "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", "
                          "\"nvme_path\": \"/local_nvme\"}}}");
    snprintf(line, sizeof line, "--model t5-small --dataset wmt16-ro-en --do_train --output_dir %s --deepspeed %s", out, ds);
    int rc = api_run(&cfg, line, err, sizeof err);
    if (rc) fail_msg("%s", err);
    const DsOffloadOptimizer* oo = &cfg.ds.zero_optimization.offload_optimizer;
    assert_int_equal(oo->device, OFFLOAD_NVME);
    assert_string_equal(oo->nvme_path, "/local_nvme");
    assert_int_equal(oo->buffer_count, 4);
    assert_false(oo->pipeline_read || oo->pipeline_write || oo->fast_init);
    const DsAio* aio = &cfg.ds.aio;
    assert_int_equal(aio->block_size, 1048576);
    assert_int_equal(aio->queue_depth, 8);
    assert_int_equal(aio->intra_op_parallelism, 1);
    assert_false(aio->single_submit || aio->use_gds);
    assert_true(aio->overlap_events);
    if ((rc = config_check_implemented(&cfg, err, sizeof err))) fail_msg("offload_optimizer nvme refused: %s", err);
    t5test_write_file(ds, "{\"aio\": {\"block_size\": 262144, \"queue_depth\": 32, \"thread_count\": 4, "
                          "\"single_submit\": true, \"overlap_events\": false}, \"zero_optimization\": {\"stage\": 2, "
                          "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/x\", \"buffer_count\": 3, "
                          "\"pipeline_read\": true, \"pipeline_write\": true, \"fast_init\": true}}}");
    if ((rc = api_run(&cfg, line, err, sizeof err))) fail_msg("%s", err);
    assert_int_equal(aio->block_size, 262144);
    assert_int_equal(aio->queue_depth, 32);
    assert_int_equal(aio->intra_op_parallelism, 4);  // thread_count: the older name
    assert_true(aio->single_submit && !aio->overlap_events);
    assert_true(oo->pipeline_read && oo->pipeline_write && oo->fast_init);
    assert_int_equal(oo->buffer_count, 3);
    if ((rc = config_check_implemented(&cfg, err, sizeof err))) fail_msg("%s", err);
    cfg.ds.aio.use_gds = true;
    assert_int_equal(config_check_implemented(&cfg, err, sizeof err), T5_EXIT_USAGE);
    assert_contains(err, "not implemented yet: aio.use_gds true (GPUDirect Storage");
    cfg.ds.aio.use_gds = false;
    // DeepSpeed's averaging knobs: a no-op on one rank; on several, what t5train's reduction is, else refused
    const int64_t stage = cfg.ds.zero_optimization.stage;  // 2 here
    cfg.ds.gradient_predivide_factor = 3.0;
    if ((rc = config_check_implemented(&cfg, err, sizeof err))) fail_msg("one rank: %s", err);
    cfg.world_size = 2;
    assert_int_equal(config_check_implemented(&cfg, err, sizeof err), T5_EXIT_USAGE);
    assert_contains(err, "not implemented yet: gradient_predivide_factor 3 on 2 ranks (DeepSpeed refuses it at ZeRO");
    cfg.ds.gradient_predivide_factor = 1.0;
    cfg.ds.prescale_gradients = true;
    assert_int_equal(config_check_implemented(&cfg, err, sizeof err), T5_EXIT_USAGE);
    assert_contains(err, "prescale_gradients true at ZeRO stage 2 on 2 ranks");
    cfg.ds.zero_optimization.stage = 0;  // stage 0: prescale is t5train's order, any factor unused
    cfg.ds.gradient_predivide_factor = 3.0;
    if ((rc = config_check_implemented(&cfg, err, sizeof err))) fail_msg("stage 0 prescale: %s", err);
    cfg.ds.prescale_gradients = false;  // postscale: the factor must be 1.0 or the world size
    assert_int_equal(config_check_implemented(&cfg, err, sizeof err), T5_EXIT_USAGE);
    assert_contains(err, "gradient_predivide_factor 3 on 2 ranks (stage 0 divides by the world size");
    cfg.ds.gradient_predivide_factor = 2.0;
    if ((rc = config_check_implemented(&cfg, err, sizeof err))) fail_msg("stage 0 factor = world: %s", err);
    cfg.ds.gradient_predivide_factor = 1.0;
    cfg.ds.zero_optimization.stage = stage;
    if ((rc = config_check_implemented(&cfg, err, sizeof err))) fail_msg("defaults on two ranks: %s", err);
    cfg.world_size = 1;
    cfg.optim = OPTIM_ADAFACTOR;
    cfg.ds.optimizer.present = false;
    assert_int_equal(config_check_implemented(&cfg, err, sizeof err), T5_EXIT_USAGE);
    assert_contains(err, "offload_optimizer device nvme with Adafactor");
    assert_false(t5_path_exists(out));
    free(out);
    free(ds);
}

static void test_job_config_reproduces_homework(void** state) {
    (void)state;
    char err[CONFIG_ERR_LEN];
    config_init(&cfg);
    int rc = config_load_file(&cfg, "configs/t5-3b-wmt16-zero3.json", err, sizeof err);
    if (!rc) rc = config_resolve(&cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    check_homework_values(&cfg, true);
    // the deepspeed path is relative to the config file's folder
    assert_string_equal(cfg.deepspeed, "configs/ds_config_zero3.json");
}

static void test_world_size_and_steps(void** state) {
    (void)state;
    char err[CONFIG_ERR_LEN];
    config_init(&cfg);
    cfg.world_size = 2;
    int rc = config_load_string(&cfg,
                                "{\"model_name_or_path\": \"t5-small\", \"dataset_name\": \"wmt16\","
                                " \"dataset_config_name\": \"ro-en\", \"source_lang\": \"en\", \"target_lang\": \"ro\","
                                " \"do_train\": true, \"max_train_samples\": 500, \"per_device_train_batch_size\": 4,"
                                " \"gradient_accumulation_steps\": 2, \"num_train_epochs\": 2, \"warmup_ratio\": 0.1,"
                                " \"deepspeed\": {\"train_batch_size\": \"auto\", \"scheduler\": {\"type\":"
                                " \"WarmupDecayLR\", \"params\": {\"total_num_steps\": \"auto\", \"warmup_num_steps\":"
                                " \"auto\"}}, \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": \"auto\"}}}",
                                "steps.json", err, sizeof err);
    if (!rc) rc = config_resolve(&cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    // 500 samples over 2 ranks = 250 each; 63 batches of 4; ceil(63/2) = 32 updates per epoch; 2 epochs
    assert_int_equal(cfg.num_training_steps, 64);
    assert_int_equal(cfg.ds.train_batch_size, 16);  // 4 x 2 x 2
    assert_int_equal(cfg.ds.train_micro_batch_size_per_gpu, 4);
    assert_src(&cfg, "deepspeed.train_micro_batch_size_per_gpu", CONFIG_SRC_DERIVED);
    assert_int_equal(cfg.ds.scheduler.total_num_steps, 64);
    assert_int_equal(cfg.ds.scheduler.warmup_num_steps, 7);  // ceil(64 x 0.1)
    assert_int_equal(cfg.ds.zero_optimization.reduce_bucket_size, 512 * 512);
    assert_false(cfg.ds.zero_optimization.overlap_comm);  // DeepSpeed's default below stage 3
    assert_true(isnan(get_flt(&cfg, "dropout_rate")));
    assert_int_equal(get_int(&cfg, "val_max_target_length"), 128);  // null -> max_target_length
}

static void test_cli_overrides_file(void** state) {
    (void)state;
    char err[CONFIG_ERR_LEN];
    int rc = api_run(&cfg,
                     "--config configs/t5-small-wmt16.json --learning_rate=1e-4 --per_device_train_batch_size 2 "
                     "--fp16 false --num_train_epochs 2.5 --source_prefix= --model t5-base --eval_sort_by_length false",
                     err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_false(cfg.eval_sort_by_length);
    assert_true(cfg.learning_rate == 1e-4);
    assert_src(&cfg, "learning_rate", CONFIG_SRC_CLI);
    assert_int_equal(cfg.per_device_train_batch_size, 2);
    assert_false(cfg.fp16);
    assert_true(cfg.num_train_epochs == 2.5);
    assert_string_equal(cfg.model_name_or_path, "t5-base");
    assert_true(cfg.source_prefix_set);
    assert_string_equal(cfg.source_prefix, "");
    // untouched file values stay
    assert_int_equal(cfg.per_device_eval_batch_size, 32);
    assert_int_equal(cfg.max_train_samples, 20000);
    assert_src(&cfg, "max_train_samples", CONFIG_SRC_FILE);
    // and the DeepSpeed autos follow the overridden values
    assert_true(cfg.ds.optimizer.lr == 1e-4);
    assert_int_equal(cfg.ds.train_micro_batch_size_per_gpu, 2);
    assert_false(cfg.ds.fp16.enabled);
    assert_int_equal(cfg.ds.zero_optimization.stage, 0);
    // a --deepspeed file on the command line replaces the config's inline section
    rc = api_run(&cfg, "--config configs/t5-small-wmt16.json --deepspeed configs/ds_config_zero2.json", err,
                 sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.ds.zero_optimization.stage, 2);
    assert_int_equal(cfg.ds.zero_optimization.allgather_bucket_size, 200000000);
    assert_int_equal(cfg.ds.zero_optimization.reduce_bucket_size, 512 * 512);
}

static void test_bool_spellings(void** state) {
    (void)state;
    char err[CONFIG_ERR_LEN];
    const char* base = "--model t5-small --dataset wmt16-ro-en ";
    struct {
        const char* flags;
        bool fp16;
    } cases[] = {{"--fp16", true},         {"--fp16 true", true},   {"--fp16 True", true},
                 {"--fp16=false", false},  {"--fp16 false", false}, {"--fp16 --no_fp16", false},
                 {"--fp16=1", true},       {"--fp16 no", false}};
    for (size_t i = 0; i < T5_ARRAY_LEN(cases); i++) {
        char line[512];
        snprintf(line, sizeof line, "%s%s", base, cases[i].flags);
        int rc = api_run(&cfg, line, err, sizeof err);
        if (rc) fail_msg("%s: %s", cases[i].flags, err);
        if (cfg.fp16 != cases[i].fp16) fail_msg("%s: fp16 = %d", cases[i].flags, cfg.fp16);
    }
}

// logging / eval / save steps as HF: a float below 1 is a ratio of the total steps (kept for the trainer), above 1 a
// whole number; 0 refused with the steps strategy; eval_steps null takes logging_steps, ratio included
static void test_ratio_steps(void** state) {
    (void)state;
    char err[CONFIG_ERR_LEN];
    const char* base = "--model t5-small --dataset wmt16-ro-en ";
    char line[512];
    snprintf(line, sizeof line, "%s--logging_steps 0.5 --save_steps 0.25 --eval_strategy steps", base);
    if (api_run(&cfg, line, err, sizeof err)) fail_msg("%s", err);
    assert_true(cfg.logging_steps == 0.5 && cfg.save_steps == 0.25 && cfg.eval_steps == 0.5);
    snprintf(line, sizeof line, "%s--logging_steps 2.5", base);
    assert_int_equal(api_run(&cfg, line, err, sizeof err), 2);
    assert_contains(err, "--logging_steps must be an integer if bigger than 1: 2.5");
    snprintf(line, sizeof line, "%s--save_steps 0", base);
    assert_int_equal(api_run(&cfg, line, err, sizeof err), 2);
    assert_contains(err, "requires a non-zero --save_steps");
    snprintf(line, sizeof line, "%s--save_steps 0 --save_strategy no --logging_steps 7.0", base);
    if (api_run(&cfg, line, err, sizeof err)) fail_msg("%s", err);  // no saves: not checked; 7.0 is whole
    // HF: eval_steps null or 0 takes logging_steps, checked after; with logging_steps 0 there is nothing to take
    snprintf(line, sizeof line, "%s--eval_strategy steps --eval_steps 0 --logging_steps 40", base);
    if (api_run(&cfg, line, err, sizeof err)) fail_msg("%s", err);
    assert_true(cfg.eval_steps == 40);
    snprintf(line, sizeof line, "%s--eval_strategy steps --logging_strategy epoch --logging_steps 0", base);
    assert_int_equal(api_run(&cfg, line, err, sizeof err), 2);
    assert_contains(err, "requires either non-zero --eval_steps or --logging_steps");
    snprintf(line, sizeof line, "%s--eval_strategy steps --logging_strategy epoch --logging_steps 2.5", base);
    assert_int_equal(api_run(&cfg, line, err, sizeof err), 2);
    assert_contains(err, "--eval_steps must be an integer if bigger than 1: 2.5");
}

static void test_short_form(void** state) {
    (void)state;
    char err[CONFIG_ERR_LEN];
    int rc = api_run(&cfg, "--model t5-3b --dataset wmt16-ro-en --fp16", err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_string_equal(cfg.model_name_or_path, "t5-3b");
    assert_string_equal(cfg.dataset_name, "wmt16");
    assert_string_equal(cfg.dataset_config_name, "ro-en");
    assert_string_equal(cfg.source_lang, "en");
    assert_string_equal(cfg.target_lang, "ro");
    assert_true(cfg.do_train);  // implied
    assert_true(cfg.fp16);
    assert_false(cfg.has_deepspeed);
}

static void test_unresolved_model_is_a_note(void** state) {
    (void)state;
    char err[CONFIG_ERR_LEN];
    int rc = api_run(&cfg,
                     "--deepspeed configs/ds_config_zero3.json --model /nonexistent/model --dataset wmt16-ro-en --fp16",
                     err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_false(cfg.model_found);
    assert_src(&cfg, "deepspeed.zero_optimization.reduce_bucket_size", CONFIG_SRC_AUTO);
    assert_src(&cfg, "deepspeed.zero_optimization.stage3_prefetch_bucket_size", CONFIG_SRC_AUTO);
    assert_src(&cfg, "deepspeed.optimizer.params.lr", CONFIG_SRC_RESOLVED);
    bool noted = false;
    for (int i = 0; i < cfg.num_notes; i++) noted |= strstr(cfg.notes[i], "d_model") != NULL;
    assert_true(noted);
    // a model directory with a HF config.json gives d_model
    char* dir = tmp_path("mymodel");
    assert_int_equal(t5_mkdir_p(dir), 0);
    char* cj = t5_path_join(dir, "config.json");
    t5test_write_file(cj,
                      "{\"architectures\": [\"T5ForConditionalGeneration\"], \"model_type\": \"t5\", \"d_model\": 256,"
                      " \"d_kv\": 32, \"d_ff\": 1024, \"num_layers\": 2, \"num_heads\": 8, \"vocab_size\": 32128,"
                      " \"feed_forward_proj\": \"relu\", \"tie_word_embeddings\": true}");
    char line[1024];
    snprintf(line, sizeof line, "--deepspeed configs/ds_config_zero3.json --model %s --dataset wmt16-ro-en --fp16", dir);
    rc = api_run(&cfg, line, err, sizeof err);
    if (rc) fail_msg("%s", err);
    if (!cfg.model_found) fail_msg("model dir not read: %s", cfg.num_notes ? cfg.notes[0] : "");
    assert_int_equal(cfg.ds.zero_optimization.reduce_bucket_size, 65536);
    assert_int_equal(cfg.ds.zero_optimization.stage3_prefetch_bucket_size, 58982);  // int(0.9 * 65536)
    assert_int_equal(cfg.ds.zero_optimization.stage3_param_persistence_threshold, 2560);
    free(cj);
    free(dir);
}

static void test_resolved_json_round_trips(void** state) {
    (void)state;
    char line[2048], err[CONFIG_ERR_LEN];
    char* out = tmp_path("rt_out");
    snprintf(line, sizeof line, HOMEWORK_ARGS " --source_prefix translate", out);
    int rc = api_run(&cfg, line, err, sizeof err);
    if (rc) fail_msg("%s", err);
    char* path = tmp_path("resolved.json");
    assert_int_equal(config_write_json(&cfg, path, err, sizeof err), 0);
    static RunConfig again;
    config_init(&again);
    rc = config_load_file(&again, path, err, sizeof err);
    if (!rc) rc = config_resolve(&again, err, sizeof err);
    if (rc) fail_msg("reloading %s: %s", path, err);
    check_homework_values(&again, false);  // explicit values now, no longer auto
    char a[600], b[600];
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
        if (CONFIG_KEYS[i].kind == CONFIG_DEEPSPEED) continue;
        config_format_value(&cfg, i, a, sizeof a);
        config_format_value(&again, i, b, sizeof b);
        char* pa = strstr(a, " (auto)");  // a resolved auto is written as its value
        if (pa) *pa = 0;
        if (strcmp(a, b) != 0) fail_msg("%s: %s before, %s after the round trip", CONFIG_KEYS[i].key, a, b);
    }
    free(path);
    free(out);
}

// ----------------------------------------------------------------------------
// bad inputs: one table, used through the API and through the binary

typedef struct {
    const char* name;
    const char* cfg_text;  // written to $CFG when not NULL
    const char* ds_text;   // written to $DS when not NULL
    const char* args;      // %O = output_dir, %C = the config file, %D = the DeepSpeed file
    const char* expect;    // substring of the one-line error
} BadCase;

#define BASE "--model t5-small --dataset wmt16-ro-en --output_dir %O "
static const BadCase BAD[] = {
    {"grad_accum_dtype_mismatch", NULL, "{\"bf16\": {\"enabled\": \"auto\"}, \"data_types\": {\"grad_accum_dtype\": \"fp16\"}}",
     BASE "--bf16 --deepspeed %D", "data_types.grad_accum_dtype \"fp16\" does not fit a bf16 run"},
    {"malformed_json", "{\"learning_rate\": 1e-4,\n}", NULL, BASE "--config %C", "2:1: invalid JSON"},
    {"unknown_top_key", "{\"learning_rat\": 1e-4}", NULL, BASE "--config %C",
     "learning_rat: unknown key (did you mean learning_rate?)"},
    {"unknown_nested_key", NULL, "{\"zero_optimization\": {\"stagee\": 3}}", BASE "--deepspeed %D",
     "zero_optimization.stagee: unknown key (did you mean stage?)"},
    {"misspelt_stage3_key", NULL, "{\"zero_optimization\": {\"stage\": 3, \"stage3_max_live_parameter\": 1e9}}",
     BASE "--deepspeed %D",
     "zero_optimization.stage3_max_live_parameter: unknown key (did you mean stage3_max_live_parameters?)"},
    {"misplaced_key", NULL, "{\"offload_optimizer\": {\"device\": \"cpu\"}}", BASE "--deepspeed %D",
     "offload_optimizer: unknown key here (it belongs under zero_optimization)"},
    {"wrong_type", "{\"per_device_train_batch_size\": \"eight\"}", NULL, BASE "--config %C",
     "per_device_train_batch_size: expected an integer, got \"eight\""},
    {"negative_batch", NULL, NULL, BASE "--per_device_train_batch_size -1",
     "--per_device_train_batch_size: -1 is out of range (allowed 1..65536)"},
    {"stage_4", NULL, "{\"zero_optimization\": {\"stage\": 4}}", BASE "--deepspeed %D",
     "zero_optimization.stage: 4 is out of range (allowed 0..3)"},
    {"offload_gpu", NULL, "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"gpu\"}}}",
     BASE "--deepspeed %D", "offload_param.device: \"gpu\" is not one of none, cpu, nvme"},
    {"fp16_and_bf16", NULL, NULL, BASE "--fp16 --bf16", "fp16 and bf16 are both true"},
    {"ds_fp16_and_bf16", NULL, "{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
     BASE "--fp16 --deepspeed %D", "ds bf16.enabled=true vs hf bf16|bf16_full_eval=false"},
    {"inconsistent_train_batch_size", NULL, "{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": \"auto\"}",
     BASE "--per_device_train_batch_size 1 --deepspeed %D",
     "ds train_batch_size=8 vs hf train_batch_size (calculated)=1"},
    {"fp16_flag_vs_ds_false", NULL, "{\"fp16\": {\"enabled\": false}}", BASE "--fp16 --deepspeed %D",
     "ds fp16.enabled=false vs hf fp16|fp16_full_eval+fp16_backend(amp)=true"},
    {"lr_mismatch", NULL, "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}}}", BASE "--deepspeed %D",
     "ds optimizer.params.lr=0.001 vs hf learning_rate=5e-05"},
    {"missing_config", NULL, NULL, BASE "--config /nonexistent/job.json", "config file not found: /nonexistent/job.json"},
    {"unreadable_config", NULL, NULL, BASE "--config /tmp", "cannot read config file /tmp: it is a directory"},
    {"missing_ds_file", NULL, NULL, BASE "--deepspeed /nonexistent/ds.json",
     "DeepSpeed config file not found: /nonexistent/ds.json"},
    {"unknown_flag", NULL, NULL, BASE "--learning_rat 1e-4", "unknown flag --learning_rat (did you mean --learning_rate?)"},
    {"flag_missing_value", NULL, NULL, "--model t5-small --dataset wmt16-ro-en --output_dir",
     "--output_dir: missing value"},
    {"auto_not_allowed_ds", NULL, "{\"steps_per_print\": \"auto\"}", BASE "--deepspeed %D",
     "steps_per_print: \"auto\" is not allowed here"},
    {"auto_not_allowed_cli", NULL, NULL, BASE "--learning_rate auto", "--learning_rate: \"auto\" is not allowed here"},
    {"bad_enum", NULL, NULL, BASE "--lr_scheduler_type cosin", "\"cosin\" is not one of linear, cosine"},
    {"bad_number", NULL, NULL, BASE "--learning_rate 1e-4x", "--learning_rate: expected a number, got '1e-4x'"},
    {"bad_bool", NULL, NULL, BASE "--fp16=maybe", "--fp16: expected true or false, got 'maybe'"},
    {"duplicate_key", "{\"seed\": 1, \"seed\": 2}", NULL, BASE "--config %C", "duplicate object key"},
    {"missing_model", NULL, NULL, "--dataset wmt16-ro-en --output_dir %O", "model_name_or_path is required"},
    {"nvme_without_path", NULL, "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\"}}}",
     BASE "--deepspeed %D", "offload_param.device is \"nvme\" but nvme_path is not set"},
    {"aio_block_unaligned", NULL, "{\"aio\": {\"block_size\": 10000}}", BASE "--deepspeed %D",
     "aio.block_size 10000 is not a multiple of 4096"},
    {"aio_block_too_small", NULL, "{\"aio\": {\"block_size\": 512}}", BASE "--deepspeed %D",
     "aio.block_size: 512 is out of range"},
    {"betas_wrong_shape", NULL, "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": [0.9]}}}",
     BASE "--deepspeed %D", "betas: expected a list of two numbers"},
    {"positional_arg", NULL, NULL, BASE "train", "unexpected argument 'train'"},
    {"top_level_not_object", "[1, 2]", NULL, BASE "--config %C", "expected a JSON object ({...}) at the top level"},
    {"fractional_int", "{\"max_train_samples\": 2.5}", NULL, BASE "--config %C",
     "max_train_samples: expected an integer, got 2.5"},
};
#define NBAD ((int)T5_ARRAY_LEN(BAD))

// expands %O %C %D in a case's args into line; writes the files it needs
static void bad_case_setup(const BadCase* bc, int idx, char* line, size_t n, char* out, size_t outn) {
    char name[64];
    snprintf(name, sizeof name, "bad_%02d_out", idx);
    char* o = tmp_path(name);
    snprintf(out, outn, "%s", o);
    free(o);
    snprintf(name, sizeof name, "bad_%02d_cfg.json", idx);
    char* cpath = tmp_path(name);
    snprintf(name, sizeof name, "bad_%02d_ds.json", idx);
    char* dpath = tmp_path(name);
    if (bc->cfg_text) t5test_write_file(cpath, bc->cfg_text);
    if (bc->ds_text) t5test_write_file(dpath, bc->ds_text);
    size_t w = 0;
    for (const char* p = bc->args; *p && w + 1 < n; p++) {
        const char* sub = NULL;
        if (p[0] == '%' && p[1] == 'O') sub = out;
        if (p[0] == '%' && p[1] == 'C') sub = cpath;
        if (p[0] == '%' && p[1] == 'D') sub = dpath;
        if (sub) {
            w += (size_t)snprintf(line + w, n - w, "%s", sub);
            p++;
        } else {
            line[w++] = *p;
        }
    }
    line[w < n ? w : n - 1] = 0;
    free(cpath);
    free(dpath);
}

static void test_bad_inputs_api(void** state) {
    (void)state;
    assert_true(NBAD >= 15);
    static char msgs[64][CONFIG_ERR_LEN];
    for (int i = 0; i < NBAD; i++) {
        char line[2048], out[512], err[CONFIG_ERR_LEN] = "";
        bad_case_setup(&BAD[i], i, line, sizeof line, out, sizeof out);
        int rc = api_run(&cfg, line, err, sizeof err);
        if (rc != T5_EXIT_USAGE) fail_msg("%s: rc %d (expected 2), err '%s'", BAD[i].name, rc, err);
        if (!strstr(err, BAD[i].expect)) fail_msg("%s: expected \"%s\" in \"%s\"", BAD[i].name, BAD[i].expect, err);
        if (strchr(err, '\n')) fail_msg("%s: the message is not one line: %s", BAD[i].name, err);
        assert_false(t5_path_exists(out));
        snprintf(msgs[i], sizeof msgs[i], "%s", err);
        for (int j = 0; j < i; j++)
            if (strcmp(msgs[i], msgs[j]) == 0) fail_msg("%s and %s give the same message", BAD[i].name, BAD[j].name);
    }
}

static void test_bad_inputs_binary(void** state) {
    (void)state;
    for (int i = 0; i < NBAD; i++) {
        char line[2048], out[512], text[8192];
        bad_case_setup(&BAD[i], i, line, sizeof line, out, sizeof out);
        int rc = t5test_run(text, sizeof text, "%s %s", t5test_bin(), line);
        if (rc != 2) fail_msg("%s: exit %d (expected 2):\n%s", BAD[i].name, rc, text);
        if (!strstr(text, "t5train: error: ")) fail_msg("%s: no error line:\n%s", BAD[i].name, text);
        if (!strstr(text, BAD[i].expect)) fail_msg("%s: expected \"%s\" in:\n%s", BAD[i].name, BAD[i].expect, text);
        if (strstr(text, "| Parameter")) fail_msg("%s: the table was printed for an invalid config", BAD[i].name);
        if (t5_path_exists(out)) fail_msg("%s: output_dir %s was created", BAD[i].name, out);
    }
}

static void test_non_empty_output_dir(void** state) {
    (void)state;
    char* out = tmp_path("nonempty_out");
    assert_int_equal(t5_mkdir_p(out), 0);
    char* f = t5_path_join(out, "something.txt");
    t5test_write_file(f, "x");
    char text[16384];
    int rc = t5test_run(text, sizeof text, "%s --model t5-small --dataset wmt16-ro-en --do_train --output_dir %s",
                        t5test_bin(), out);
    assert_int_equal(rc, 2);
    char expect[700];
    snprintf(expect, sizeof expect,
             "Output directory (%s) already exists and is not empty. Use --overwrite_output_dir to overcome.", out);
    assert_contains(text, expect);
    // with --overwrite_output_dir the config is valid; the run goes on to the model lookup, which has no
    // t5-small weights on this machine (HF_HOME pointed at an empty folder): an input error, exit 2,
    // found before anything is written (the non-empty output_dir is left as it was)
    rc = t5test_run(text, sizeof text,
                    "HF_HOME=%s/nohf HOME=%s/nohome XDG_CACHE_HOME= HF_HUB_CACHE= HF_HUB_OFFLINE=1 %s --model t5-small "
                    "--dataset wmt16-ro-en --do_train --output_dir %s --overwrite_output_dir",
                    t5test_tmpdir(), t5test_tmpdir(), t5test_bin(), out);
    assert_int_equal(rc, 2);
    assert_contains(text, "model 't5-small' not found");
    assert_true(t5_is_file(f));
    char* written = t5_path_join(out, "t5train_config.json");
    assert_false(t5_path_exists(written));
    free(written);
    free(f);
    free(out);
}

// ----------------------------------------------------------------------------
// the binary

static void test_binary_homework_run(void** state) {
    (void)state;
    static char text[65536];
    char* out = tmp_path("bin_hw_out");
    char args[2048];
    snprintf(args, sizeof args, HOMEWORK_ARGS, out);
    char env[4096];
    fake_env(env, sizeof env);
    // --dry_run without the model: the dry run checks it (issue 14), exit 2, nothing created
    int rc = t5test_run(text, sizeof text,
                        "HF_HOME=%s/nohf HF_HUB_CACHE= XDG_CACHE_HOME= HOME=%s/nohome HF_HUB_OFFLINE=1 %s %s --dry_run",
                        t5test_tmpdir(), t5test_tmpdir(), t5test_bin(), args);
    if (rc != 2) fail_msg("exit %d:\n%s", rc, text);
    assert_contains(text, "t5train: error: model 't5-3b' not found");
    assert_false(t5_path_exists(out));
    // --dry_run with "t5-3b" in the cache (the tiny model, see fake_hf_home) and the data present:
    // validates, prints the table, lists what it checked, exits 0, creates nothing; ZeRO stage 3 with
    // CPU offload of optimizer and parameters is implemented, so nothing is refused
    rc = t5test_run(text, sizeof text, "%s %s %s --dry_run", env, t5test_bin(), args);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, text);
    assert_contains(text, "dry run: checked weights");
    assert_contains(text, "dry run: checked training data");
    assert_contains(text, "dry run: checked evaluation data");
    assert_contains(text, "dry run: every check passed; nothing was downloaded or created");
    assert_null(strstr(text, "not implemented yet"));
    assert_contains(text, "| Parameter ");
    assert_contains(text, "| deepspeed.zero_optimization.stage3_prefetch_bucket_size");
    assert_contains(text, "943718 (auto)");
    assert_contains(text, "10240 (auto)");
    assert_contains(text, "1048576 (auto)");
    assert_contains(text, "[0.9, 0.999] (auto)");
    assert_contains(text, "+--");
    assert_false(t5_path_exists(out));
    // a real run with no GPU visible (CUDA_VISIBLE_DEVICES=-1, so the same on a GPU machine): every
    // check passes, output_dir and the resolved JSON are written, then the run stops at the GPU (exit 1)
    rc = t5test_run(text, sizeof text, "CUDA_VISIBLE_DEVICES=-1 %s %s %s", env, t5test_bin(), args);
    if (rc != 1) fail_msg("exit %d:\n%s", rc, text);
    assert_contains(text, "t5train: error: ");
    assert_contains(text, "GPU");
    assert_null(strstr(text, "not implemented yet"));
    char* json = t5_path_join(out, "t5train_config.json");
    assert_true(t5_is_file(json));
    // the written file is a valid config by itself
    rc = t5test_run(text, sizeof text, "%s %s --config %s --dry_run", env, t5test_bin(), json);
    if (rc != 0) fail_msg("reloading the resolved config: exit %d:\n%s", rc, text);
    assert_contains(text, "943718");
    free(json);
    free(out);
}

static void test_binary_job_configs(void** state) {
    (void)state;
    static char text[65536];
    const char* files[] = {"configs/t5-3b-wmt16-zero3.json", "configs/t5-small-wmt16.json"};
    char env[4096];
    fake_env(env, sizeof env);
    for (size_t i = 0; i < T5_ARRAY_LEN(files); i++) {
        // the model and data behind the names are checked by the dry run: the fakes stand in for them
        int rc = t5test_run(text, sizeof text, "%s %s --config %s --dry_run", env, t5test_bin(), files[i]);
        if (rc != 0) fail_msg("%s: exit %d:\n%s", files[i], rc, text);
        assert_contains(text, "| deepspeed.fp16.enabled");
        assert_contains(text, "dry run: every check passed");
    }
    // HF style: a lone .json argument is the config (not as argv[1]: main.c takes that for a subcommand)
    int rc = t5test_run(text, sizeof text, "%s %s --print_config configs/t5-3b-wmt16-zero3.json", env, t5test_bin());
    if (rc != 0) fail_msg("exit %d:\n%s", rc, text);
    assert_contains(text, "943718 (auto)");
}

static void test_binary_help(void** state) {
    (void)state;
    static char text[131072];
    int rc = t5test_run(text, sizeof text, "%s --help", t5test_bin());
    assert_int_equal(rc, 0);
    // every flag is listed with its default
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
        if (strchr(CONFIG_KEYS[i].key, '.')) continue;
        char flag[256];
        snprintf(flag, sizeof flag, "--%s ", CONFIG_KEYS[i].key);
        assert_contains(text, flag);
    }
    assert_contains(text, "--per_device_train_batch_size INT");
    assert_contains(text, "(default: 8)");
    assert_contains(text, "(default: 5e-5)");
    assert_contains(text, "stage3_max_live_parameters");
}

// the ranks of one run compare config_hash at the rendezvous: the per-rank --local_rank and a derived logging_dir do
// not count, any other key does
static void test_config_hash(void** state) {
    (void)state;
    static RunConfig a, b;
    char err[CONFIG_ERR_LEN];
    char base[1024], line[1200];
    snprintf(base, sizeof base, HOMEWORK_ARGS, "/nonexistent/t5train_hash");
    snprintf(line, sizeof line, "%s --local_rank 0", base);
    if (api_run(&a, line, err, sizeof err)) fail_msg("%s", err);
    snprintf(line, sizeof line, "%s --local_rank 3", base);
    assert_int_equal(api_run(&b, line, err, sizeof err), 0);
    assert_true(config_hash(&a) == config_hash(&b));
    snprintf(line, sizeof line, "%s --learning_rate 3e-4", base);
    assert_int_equal(api_run(&b, line, err, sizeof err), 0);
    assert_true(config_hash(&a) != config_hash(&b));
    // the default logging_dir (HF's runs/<date>_<host>, each rank's own clock and host) does not count: two ranks
    // that resolved it on either side of a second, or on two hosts, run the same configuration
    assert_int_equal(api_run(&b, base, err, sizeof err), 0);
    assert_int_equal(b.src[config_key_index("logging_dir")], CONFIG_SRC_DERIVED);
    assert_true(config_hash(&a) == config_hash(&b));
    snprintf(b.logging_dir, sizeof b.logging_dir, "/nonexistent/t5train_hash/runs/Jan01_00-00-01_otherhost");
    assert_true(config_hash(&a) == config_hash(&b));
    // a logging_dir the user gave counts like any other key
    snprintf(line, sizeof line, "%s --logging_dir /tmp/t5train_hash_logs_a", base);
    assert_int_equal(api_run(&a, line, err, sizeof err), 0);
    snprintf(line, sizeof line, "%s --logging_dir /tmp/t5train_hash_logs_b", base);
    assert_int_equal(api_run(&b, line, err, sizeof err), 0);
    assert_true(config_hash(&a) != config_hash(&b));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_consistent),
        cmocka_unit_test(test_defaults_are_hf),
        cmocka_unit_test(test_every_config_file_loads),
        cmocka_unit_test(test_homework_command_line_resolves),
        cmocka_unit_test(test_nvme_keys),
        cmocka_unit_test(test_job_config_reproduces_homework),
        cmocka_unit_test(test_world_size_and_steps),
        cmocka_unit_test(test_cli_overrides_file),
        cmocka_unit_test(test_bool_spellings),
        cmocka_unit_test(test_ratio_steps),
        cmocka_unit_test(test_short_form),
        cmocka_unit_test(test_unresolved_model_is_a_note),
        cmocka_unit_test(test_resolved_json_round_trips),
        cmocka_unit_test(test_bad_inputs_api),
        cmocka_unit_test(test_bad_inputs_binary),
        cmocka_unit_test(test_non_empty_output_dir),
        cmocka_unit_test(test_binary_homework_run),
        cmocka_unit_test(test_binary_job_configs),
        cmocka_unit_test(test_binary_help),
        cmocka_unit_test(test_config_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
