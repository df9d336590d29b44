/*
 * run.c: `t5train [--config FILE] [flags...]`, a training / evaluation run.
 *
 * Order (DESIGN.md invariant 5; nothing is created in output_dir before the config is valid):
 *   parse argv (files, then flags) -> resolve "auto" -> check output_dir -> print the table
 *   -> (--dry_run: exit 0) -> write output_dir/t5train_config.json -> check what this build
 *   implements (config_check_implemented + the run-level checks below) -> translate the resolved
 *   RunConfig into TrainerArgs -> trainer_run (src/train/trainer.c).
 *
 * Test hooks (not config keys, stripped from argv before the config parser sees them):
 *   --dump_batches FILE [--dump_batches_steps N]   token ids of the first N (50) updates as JSON
 *   env T5TRAIN_INJECT_INF_STEP=k                   +inf into the gradient of update k (overflow test)
 *   env T5TRAIN_STOP_AFTER_STEPS=k                  behave as if SIGTERM came during update k
 *   env T5TRAIN_EVAL_NO_HOLD=1                      stage 3 evaluates gathering units on demand (as when they do not fit)
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include "../../data/dataset.h"
#include "../../data/readers.h"
#include "../../data/tokenizer.h"
#include "../../model/model_lookup.h"
#include "../../model/t5.h"
#include "commands.h"
#include "../base/oom.h"
#include "../base/common.h"
#include "autotune.h"
#include "planner.h"
#include "config.h"
#include "fetch_inputs.h"
#include "disk_check.h"
#include "nvme_check.h"
#include "../train/trainer.h"
#include "../zero/cpu_adafactor.h"
#include "../train/checkpoint.h"
#include "../report/trainer_log.h"
#include "../train/best_model.h"
#include "../base/safetensors.h"
#include "../base/signals.h"
#include "../../model/params.h"
#include "../launch/comm.h"
#include "../launch/launch_env.h"
#include "../upload/push_to_hub.h"
#include "version.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

// world size from the launcher's environment (src/launch/launch_env.h: torchrun/deepspeed RANK/WORLD_SIZE,
// OpenMPI OMPI_COMM_WORLD_*, Slurm SLURM_PROCID/SLURM_NTASKS; a bad or partial setting is one error line)
static int run_world_size(void) {
    char err[512];
    LaunchEnv env;
    if (launch_env_parse(&env, NULL, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    t5_rank = env.rank;
    // several ranks without MPI to exchange the NCCL id: the TCP rendezvous needs rank 0's address (a usage error,
    // found by --dry_run too; with OpenMPI's variables and without MASTER_ADDR, MPI is asked at start)
    if (env.world_size > 1 && !env.have_master && env.source != LAUNCH_SOURCE_OPENMPI)
        t5_die(T5_EXIT_USAGE, "%d ranks started by %s, but MASTER_ADDR and MASTER_PORT are not set: every rank needs "
                              "rank 0's host and a free TCP port on it for the rendezvous",
               env.world_size, launch_source_name(env.source));
    // several ranks: this rank's GPU from the start. The planner reads free memory (cudaMemGetInfo) before the
    // communicator exists; on the default device that made a CUDA context on GPU 0 for every rank, kept for the whole
    // run, and planned every rank against GPU 0. comm_init selects it again, and reports a local rank without a GPU
    // (MPI without a local rank: comm_init finds it from the host names)
    int ndev = 0;
    if (env.world_size > 1 && env.local_rank >= 0 && cudaGetDeviceCount(&ndev) == cudaSuccess && env.local_rank < ndev)
        (void)cudaSetDevice(env.local_rank);
    (void)cudaGetLastError();
    return env.world_size;
}

static int64_t env_int(const char* name) {
    const char* v = getenv(name);
    if (!v || !v[0]) return -1;
    char* end;
    long long n = strtoll(v, &end, 10);
    if (*end || n < 1) t5_die(T5_EXIT_USAGE, "bad %s=%s in the environment (a positive integer)", name, v);
    return (int64_t)n;
}

static bool key_present(const RunConfig* c, const char* key) {
    int s = config_key_source(c, key);
    return s > 0 && s != CONFIG_SRC_DEFAULT;
}

static bool key_unresolved_auto(const RunConfig* c, const char* key) {
    return config_key_source(c, key) == CONFIG_SRC_AUTO;
}

static TrainerInterval interval(int strategy) {
    return strategy == STRATEGY_STEPS ? TRAINER_INTERVAL_STEPS
           : strategy == STRATEGY_EPOCH ? TRAINER_INTERVAL_EPOCH
                                        : TRAINER_INTERVAL_NO;
}

static void copy_str(char* dst, size_t cap, const char* src) {
    if (strlen(src) >= cap) t5_die(T5_EXIT_USAGE, "path too long: %.80s...", src);
    snprintf(dst, cap, "%s", src);
}

// best model: HF TrainingArguments.__post_init__ (metric "loss" when load_best_model_at_end has none,
// greater_is_better from the name) and its checks, EarlyStoppingCallback's requirements; the metric must be one
// the evaluation logs (HF raises KeyError at the first evaluation; here it is an input error before anything runs)
static void run_best_model_args(const RunConfig* c, TrainerArgs* a) {
    static char err[1024];
    a->load_best_model_at_end = c->load_best_model_at_end;
    const char* metric = c->metric_for_best_model[0] ? c->metric_for_best_model
                                                     : (c->load_best_model_at_end ? "loss" : "");
    copy_str(a->metric_for_best_model, sizeof a->metric_for_best_model, metric);
    a->greater_is_better = key_present(c, "greater_is_better") ? c->greater_is_better
                                                               : (metric[0] && best_model_default_greater(metric));
    a->early_stopping_patience = c->early_stopping_patience > 0 ? c->early_stopping_patience : 0;
    a->early_stopping_threshold = c->early_stopping_threshold;
    copy_str(a->run_name, sizeof a->run_name, c->run_name[0] ? c->run_name : c->output_dir);
    if (best_model_check_args(a->load_best_model_at_end, metric, a->eval_strategy, a->eval_steps, a->save_strategy,
                              a->save_steps, a->early_stopping_patience, err, sizeof err))
        t5_die(T5_EXIT_USAGE, "%s", err);
    if (!metric[0]) return;
    char key[128];
    best_model_metric_key(metric, key, sizeof key);
    const char* known[] = {"eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second",
                           c->predict_with_generate ? "eval_bleu" : NULL, c->predict_with_generate ? "eval_gen_len" : NULL};
    for (size_t i = 0; i < T5_ARRAY_LEN(known); i++)
        if (known[i] && strcmp(known[i], key) == 0) return;
    t5_die(T5_EXIT_USAGE, "metric_for_best_model is '%s', which is not in the evaluation metrics (eval_loss, "
                          "eval_runtime, eval_samples_per_second, eval_steps_per_second%s)",
           key, c->predict_with_generate ? ", eval_bleu, eval_gen_len" : "; eval_bleu and eval_gen_len need --predict_with_generate");
}

static void preflight_creatable(const char* key, const char* path);
static int data_pending;  // --dry_run: the splits a run would download and prepare (bit 1 << DataSplit)

// DataOptions' defaults with where the data comes from (dataset or files, languages) from the config
static void data_options_sources(const RunConfig* c, DataOptions* o) {
    data_options_default(o);
    o->dataset_name = c->dataset_name[0] ? c->dataset_name : NULL;
    o->dataset_config = c->dataset_config_name[0] ? c->dataset_config_name : NULL;
    o->data_dir = c->data_dir[0] ? c->data_dir : NULL;
    o->split_file[0] = c->train_file[0] ? c->train_file : NULL;
    o->split_file[1] = c->validation_file[0] ? c->validation_file : NULL;
    o->split_file[2] = c->test_file[0] ? c->test_file : NULL;
    o->source_lang = c->source_lang;
    o->target_lang = c->target_lang;
}

// --dry_run with a model that is not in the cache (fetch_inputs.c listed what would be downloaded): the checks
// that need no model file (the dataset's downloads, the output paths), then exit 0; the checks of config.json,
// the weights, the tokenizer and the plan need the files, which a dry run does not download.
static void dry_run_model_pending(const RunConfig* c) {
    DataOptions o;
    data_options_sources(c, &o);
    run_fetch_dataset(c, &o);
    preflight_creatable("output_dir", c->output_dir);
    if (c->logging_dir[0]) preflight_creatable("logging_dir", c->logging_dir);
    printf("dry run: not checked until the model is downloaded: its config.json, the weights' header, the tokenizer, "
           "the data files against it, the memory plan (a run without --dry_run downloads it, then checks them)\n");
    printf("dry run: nothing was downloaded or created\n");
    fflush(stdout);
    exit(T5_EXIT_OK);
}

// The model: its shape (a preset or config.json) and, unless --init random, where its weights are. Returns the name
// looked up (the tokenizer is looked for beside it).
static const char* args_model(const RunConfig* c, TrainerArgs* a, ModelLocation* loc, bool* have_loc) {
    static char err[MODEL_LOOKUP_ERRLEN];
    const char* name = run_model_source(c);  // a Hub name missing from the HF cache: downloaded (fetch_inputs.h)
    if (c->dry_run && run_model_pending()) dry_run_model_pending(c);
    a->init_random = c->init == MODEL_INIT_RANDOM;
    *have_loc = false;
    if (a->init_random) {
        if (!c->model_found)
            t5_die(T5_EXIT_USAGE, "--init random needs a model shape: '%s' is neither a preset (%s) nor a directory "
                                  "with config.json", c->config_name[0] ? c->config_name : name,
                   t5_config_preset_names());
        a->model = c->model;
    } else {
        if (model_lookup(name, MODEL_NEED_WEIGHTS, loc, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
        *have_loc = true;
        if (t5_config_load_json(c->config_name[0] ? c->config_name : loc->config_path, &a->model, err, sizeof err))
            t5_die(T5_EXIT_USAGE, "%s%s", c->config_name[0] ? "--config_name: " : "", err);
        // a transformers 5.x config.json: the weights say whether lm_head.weight or shared.weight projects
        if (t5_config_resolve_head(&a->model, loc->weights_path, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
        copy_str(a->weights_path, sizeof a->weights_path, loc->weights_path);
    }
    a->dropout_rate = isnan(c->dropout_rate) ? a->model.dropout_rate : (float)c->dropout_rate;
    a->label_smoothing_factor = c->label_smoothing_factor;  // [0, 1) checked by the key table
    a->gradient_checkpointing = c->gradient_checkpointing;
    return name;
}

// The tokenizer: --tokenizer_name, the model folder's spiece.model, or the Hub name's. Returns its path (static).
static const char* args_tokenizer(const RunConfig* c, TrainerArgs* a, const char* name, const ModelLocation* loc,
                                  bool have_loc) {
    static char err[MODEL_LOOKUP_ERRLEN];
    char tokpath[MODEL_LOOKUP_PATHLEN];
    if (c->tokenizer_name[0]) {
        copy_str(tokpath, sizeof tokpath, c->tokenizer_name);
    } else if (have_loc && loc->tokenizer == MODEL_TOKENIZER_SPIECE) {
        copy_str(tokpath, sizeof tokpath, loc->tokenizer_path);
    } else if (model_lookup_tokenizer(name, tokpath, sizeof tokpath, err, sizeof err)) {
        t5_die_hint(T5_EXIT_USAGE, "pass --tokenizer_name PATH/spiece.model (or a directory holding it)",
                    "no tokenizer for model '%s': %s", name, err);
    }
    char* spm = NULL;
    uint64_t hash;
    if (tokenizer_file_hash(tokpath, &spm, &hash, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    copy_str(a->tokenizer_file, sizeof a->tokenizer_file, spm);
    char* d = strdup_check(spm);
    copy_str(a->tokenizer_files_dir, sizeof a->tokenizer_files_dir, dirname(d));
    free(d);
    static char tokpath_keep[MODEL_LOOKUP_PATHLEN];
    copy_str(tokpath_keep, sizeof tokpath_keep, spm);
    free(spm);
    return tokpath_keep;
}

// The data: sources, lengths, batch sizes, the rank's shard, and which splits run.
static void args_data(const RunConfig* c, TrainerArgs* a, const char* tokpath) {
    DataOptions* o = &a->data;
    data_options_sources(c, o);
    data_pending = run_fetch_dataset(c, o);  // wmt16-ro-en splits missing on disk: prepared (a dry run: listed)
    o->tokenizer_path = tokpath;
    o->source_prefix = c->source_prefix_set ? c->source_prefix : NULL;
    o->max_source_length = (int)c->max_source_length;
    o->max_target_length = (int)c->max_target_length;
    o->val_max_target_length = c->val_max_target_length > 0 ? (int)c->val_max_target_length : 0;
    o->max_samples[0] = c->max_train_samples;
    o->max_samples[1] = c->max_eval_samples;
    o->max_samples[2] = c->max_predict_samples;
    o->num_threads = 0;
    o->train_batch_size = (int)c->per_device_train_batch_size;
    o->eval_batch_size = (int)c->per_device_eval_batch_size;
    o->seed = (uint64_t)(c->data_seed >= 0 ? c->data_seed : c->seed);
    o->rank = t5_rank;  // several ranks: each reads its shard of every global batch (data/dataloader.h)
    o->world_size = (int)c->world_size;
    o->shuffle = true;
    o->drop_last = c->dataloader_drop_last;
    o->group_by_length = c->group_by_length;
    o->pad_to_max_length = c->pad_to_max_length;
    o->pad_to_multiple_of = config_run_dtype(c) == DT_F16 ? 8 : 0;  // run_translation: DataCollatorForSeq2Seq(pad_to_multiple_of=8 if fp16)
    a->do_train = c->do_train;
    a->do_eval = c->do_eval;
    a->do_predict = c->do_predict;
}

static void args_generation(const RunConfig* c, TrainerArgs* a) {
    // generation (run_translation: max_length = generation_max_length or val_max_target_length,
    //      num_beams = num_beams or generation_num_beams or 1; the config has resolved those fallbacks)
    a->predict_with_generate = c->predict_with_generate;
    a->gen.max_length = (int)(c->generation_max_length > 0   ? c->generation_max_length
                              : c->val_max_target_length > 0 ? c->val_max_target_length
                                                              : c->max_target_length);
    a->gen.num_beams = (int)(c->num_beams > 0 ? c->num_beams : c->generation_num_beams > 0 ? c->generation_num_beams : 1);
    a->gen.length_penalty = (float)c->length_penalty;
    a->gen.early_stopping = c->early_stopping ? GEN_EARLY_STOP_TRUE : GEN_EARLY_STOP_FALSE;
    a->eval_sort_by_length = c->eval_sort_by_length;
    static char gerr[256];
    if (generate_options_check(&a->gen, gerr, sizeof gerr)) t5_die(T5_EXIT_USAGE, "%s", gerr);
}

// Precision, the gradient accumulation dtype and the loss scaler (DeepSpeed's, or torch GradScaler's numbers).
static void args_precision(const RunConfig* c, TrainerArgs* a) {
    const DsConfig* ds = &c->ds;
    a->dtype = config_run_dtype(c);
    a->grad_dtype = a->dtype;
    if (c->has_deepspeed && ds->data_types.grad_accum_dtype != COMM_DTYPE_DEFAULT) {
        const int g = (int)ds->data_types.grad_accum_dtype;
        const DType gd = g == COMM_DTYPE_FP32 ? DT_F32 : g == COMM_DTYPE_FP16 ? DT_F16 : DT_BF16;
        if (gd != DT_F32 && gd != a->dtype)  // config_resolve rejects this with a message
            t5_die(T5_EXIT_USAGE, "internal: grad_accum_dtype %s in a %s run", dtype_name(gd), dtype_name(a->dtype));
        a->grad_dtype = gd;
    }
    loss_scaler_config_default(&a->scaler);
    if (c->has_deepspeed) {
        // DeepSpeed's mapping, with its "no scaler key present -> class defaults (2^32, hysteresis 1)" quirk
        const DsFp16* f = &ds->fp16;
        a->scaler.loss_scale = f->loss_scale;
        a->scaler.initial_scale_power = (int)f->initial_scale_power;
        a->scaler.loss_scale_window = f->loss_scale_window;
        a->scaler.hysteresis = (int)f->hysteresis;
        a->scaler.consecutive_hysteresis = f->consecutive_hysteresis;
        a->scaler.min_loss_scale = f->min_loss_scale;
        a->scaler.has_initial_scale_power = key_present(c, "deepspeed.fp16.initial_scale_power");
        a->scaler.has_loss_scale_window = key_present(c, "deepspeed.fp16.loss_scale_window");
        a->scaler.has_hysteresis = key_present(c, "deepspeed.fp16.hysteresis");
        a->scaler.has_consecutive_hysteresis = key_present(c, "deepspeed.fp16.consecutive_hysteresis");
        a->scaler.has_min_loss_scale = key_present(c, "deepspeed.fp16.min_loss_scale");
    } else {
        // no deepspeed section: the same DeepSpeed state machine with torch GradScaler's numbers
        // (init 2^16, growth after 2000 clean steps, halve on overflow, no hysteresis)
        a->scaler.initial_scale_power = 16;
        a->scaler.loss_scale_window = 2000;
        a->scaler.hysteresis = 1;
        a->scaler.has_initial_scale_power = a->scaler.has_loss_scale_window = a->scaler.has_hysteresis = true;
    }
}

// The optimizer: DeepSpeed's optimizer section, or HF's AdamW / Adafactor flags, into the engine's plan (a->zero: the
// engine steps it at every stage) and a->optimizer (the trainer's checkpoints record it); the schedule's lr into a->lr.
static void args_optimizer(const RunConfig* c, TrainerArgs* a) {
    const DsConfig* ds = &c->ds;
    ZeroOptions* zo = &a->zero;
    a->gradient_accumulation_steps = c->gradient_accumulation_steps;
    a->max_steps = c->max_steps;
    a->num_train_epochs = c->num_train_epochs;
    if (c->has_deepspeed && ds->optimizer.present) {
        a->lr = ds->optimizer.lr;
        zo->beta1 = (float)ds->optimizer.betas[0];
        zo->beta2 = (float)ds->optimizer.betas[1];
        zo->eps = (float)ds->optimizer.eps;
        zo->weight_decay = (float)ds->optimizer.weight_decay;
        zo->adamw_mode = ds->optimizer.type == DS_OPTIM_ADAMW || ds->optimizer.adam_w_mode;
    } else {
        a->lr = c->learning_rate;
        zo->beta1 = (float)c->adam_beta1;
        zo->beta2 = (float)c->adam_beta2;
        zo->eps = (float)c->adam_epsilon;
        zo->weight_decay = (float)c->weight_decay;
        zo->adamw_mode = true;
    }
    // optim adafactor: transformers' Adafactor as HF's Trainer builds it (lr = learning_rate, scale_parameter and
    // relative_step False, the rest Adafactor's defaults) unless the adafactor_* keys say otherwise
    a->optimizer = TRAINER_OPTIM_ADAMW;
    CpuAdafactorOpts ao;
    cpu_adafactor_default_opts(&ao);
    if (c->optim == OPTIM_ADAFACTOR && !(c->has_deepspeed && ds->optimizer.present)) {
        a->optimizer = TRAINER_OPTIM_ADAFACTOR;
        ao.relative_step = c->adafactor_relative_step;
        ao.has_lr = !ao.relative_step;  // relative_step: lr None (HF refuses both)
        ao.lr = ao.has_lr ? c->learning_rate : 0.0;
        ao.scale_parameter = c->adafactor_scale_parameter;
        ao.warmup_init = c->adafactor_warmup_init;
        ao.has_beta1 = !isnan(c->adafactor_beta1);
        ao.beta1 = ao.has_beta1 ? c->adafactor_beta1 : 0.0;
        ao.clip_threshold = c->adafactor_clip_threshold;
        ao.decay_rate = c->adafactor_decay_rate;
        ao.eps1 = c->adafactor_eps1;
        ao.eps2 = c->adafactor_eps2;
        ao.weight_decay = c->weight_decay;
        char e[256];
        if (cpu_adafactor_check_opts(&ao, e, sizeof e)) t5_die(T5_EXIT_USAGE, "adafactor: %s", e);
    }
    // (the lr comes with each step: the schedule's, or Adafactor's relative step)
    zo->optimizer = a->optimizer == TRAINER_OPTIM_ADAFACTOR ? ZERO_OPTIM_ADAFACTOR : ZERO_OPTIM_ADAMW;
    zo->adafactor = (ZeroAdafactor){.eps1 = ao.eps1, .eps2 = ao.eps2, .clip_threshold = ao.clip_threshold,
                                    .decay_rate = ao.decay_rate, .has_beta1 = ao.has_beta1, .beta1 = ao.beta1,
                                    .weight_decay = ao.weight_decay, .scale_parameter = ao.scale_parameter,
                                    .relative_step = ao.relative_step, .warmup_init = ao.warmup_init};
}

// The ZeRO engine (deepspeed.zero_optimization) and the DeepSpeed sections the trainer reads beside it.
static void args_zero(const RunConfig* c, TrainerArgs* a) {
    const DsConfig* ds = &c->ds;
    a->zero.world = (int)c->world_size;  // the communicator joins in run_main, after every check
    a->zero.rank = t5_rank;
    a->save_on_each_node = c->save_on_each_node;
    a->save_16bit_model = c->has_deepspeed && c->ds.zero_optimization.stage3_gather_16bit_weights_on_model_save;
    a->wall_clock_breakdown = c->has_deepspeed && c->ds.wall_clock_breakdown;
    if (c->has_deepspeed && c->ds.flops_profiler.enabled) {  // DeepSpeed's flops_profiler (src/train/flops_profiler.h)
        const DsFlopsProfiler* fp = &c->ds.flops_profiler;
        a->flops_profiler = (FlopsProfilerArgs){.enabled = true, .profile_step = fp->profile_step,
                                                .module_depth = (int)fp->module_depth, .top_modules = (int)fp->top_modules,
                                                .detailed = fp->detailed, .recompute_fwd_factor = fp->recompute_fwd_factor};
        copy_str(a->flops_profiler.output_file, sizeof a->flops_profiler.output_file, fp->output_file);
    }
    if (c->has_deepspeed && c->ds.comms_logger.enabled) {  // DeepSpeed's comms_logger (src/launch/comms_log.h)
        char err[512];
        unsigned ops = 0;
        if (config_comms_ops(&c->ds.comms_logger, &ops, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);  // resolve checked it
        a->comms_logger.ops = ops;
        a->comms_logger.verbose = c->ds.comms_logger.verbose;
        a->comms_logger.debug = c->ds.comms_logger.debug;
    }
    a->tf32 = c->tf32;
    a->zero.comm_dtype = a->dtype;
    if (c->has_deepspeed) {
        const DsZero* z = &ds->zero_optimization;
        const int64_t d = a->model.d_model;
        ZeroOptions* zo = &a->zero;
        zo->stage = (int)z->stage;
        zo->offload_optimizer = z->offload_optimizer.device != OFFLOAD_NONE;  // nvme: stepped on the CPU as well
        if (z->offload_optimizer.device == OFFLOAD_NVME) {  // Adam m, v in a swap file (docs/zero.md "NVMe")
            snprintf(zo->nvme_path, sizeof zo->nvme_path, "%s", z->offload_optimizer.nvme_path);
            zo->nvme_pipeline_read = z->offload_optimizer.pipeline_read;
            zo->nvme_pipeline_write = z->offload_optimizer.pipeline_write;
            zo->aio_block_size = ds->aio.block_size;
            zo->aio_queue_depth = (int)ds->aio.queue_depth;
            zo->aio_threads = (int)ds->aio.intra_op_parallelism;
            zo->aio_single_submit = ds->aio.single_submit;
            zo->aio_overlap_events = ds->aio.overlap_events;
        }
        zo->optimizer_pin_memory = z->offload_optimizer.pin_memory;
        if (z->zenflow.present) {  // ZenFlow (src/zero/zenflow.h; config_resolve.c refused what it lacks)
            a->zenflow = true;
            a->zenflow_opts = config_zenflow_opts(&z->zenflow);
        }
        zo->ratio = z->offload_optimizer.ratio;
        zo->buffer_count = (int)z->offload_optimizer.buffer_count;
        zo->offload_param = z->offload_param.device == OFFLOAD_CPU;
        zo->param_pin_memory = z->offload_param.pin_memory;
        zo->sub_group_size = z->sub_group_size;
        // the d_model "auto" sizes when config_resolve could not see the model (HF's trainer_config_finalize)
        zo->reduce_bucket_size = key_unresolved_auto(c, "deepspeed.zero_optimization.reduce_bucket_size")
                                     ? d * d : z->reduce_bucket_size;
        zo->prefetch_bucket_size = key_unresolved_auto(c, "deepspeed.zero_optimization.stage3_prefetch_bucket_size")
                                       ? (int64_t)(0.9 * (double)(d * d)) : z->stage3_prefetch_bucket_size;
        zo->persistence_threshold =
            key_unresolved_auto(c, "deepspeed.zero_optimization.stage3_param_persistence_threshold")
                ? 10 * d : z->stage3_param_persistence_threshold;
        zo->allgather_bucket_size = z->allgather_bucket_size;
        zo->max_live_parameters = z->stage3_max_live_parameters;
        zo->max_reuse_distance = z->stage3_max_reuse_distance;
        zo->overlap_comm = z->overlap_comm;
        const int cd = ds->communication_data_type;
        if (cd != COMM_DTYPE_DEFAULT) zo->comm_dtype = cd == COMM_DTYPE_FP32 ? DT_F32 : cd == COMM_DTYPE_FP16 ? DT_F16 : DT_BF16;
    }
}

// Clipping and the learning-rate schedule (DeepSpeed's scheduler section, or HF's lr_scheduler_type).
static void args_schedule(const RunConfig* c, TrainerArgs* a) {
    const DsConfig* ds = &c->ds;
    // DeepSpeed clips with its own key (absent = 0 = off, as DeepSpeed); HF alone clips with max_grad_norm
    a->clip = config_clip_norm(c);
    a->warmup_steps = (double)c->warmup_steps;
    a->warmup_ratio = c->warmup_ratio;
    if (c->has_deepspeed && ds->scheduler.present) {
        snprintf(a->sched_name, sizeof a->sched_name, "%s",
                 ds->scheduler.type == DS_SCHED_WARMUP_DECAY_LR ? "WarmupDecayLR" : "WarmupLR");
        a->ds_warmup_min_lr = ds->scheduler.warmup_min_lr;
        a->ds_warmup_max_lr = ds->scheduler.warmup_max_lr;
        a->ds_warmup_type = ds->scheduler.warmup_type == DS_WARMUP_LINEAR ? 1 : 0;
        a->ds_warmup_num_steps = key_unresolved_auto(c, "deepspeed.scheduler.params.warmup_num_steps")
                                     ? -1
                                     : ds->scheduler.warmup_num_steps;
        a->ds_total_num_steps = key_unresolved_auto(c, "deepspeed.scheduler.params.total_num_steps")
                                    ? -1
                                    : ds->scheduler.total_num_steps;
    } else {
        static const char* names[] = {"linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                                      "constant_with_warmup"};
        snprintf(a->sched_name, sizeof a->sched_name, "%s", names[c->lr_scheduler_type]);
    }
}

// Logging, evaluation and saving intervals, output folders, the Hub push and the test hooks.
static void args_reporting(const RunConfig* c, TrainerArgs* a) {
    a->logging_strategy = interval(c->logging_strategy);
    a->eval_strategy = interval(c->evaluation_strategy);
    a->save_strategy = interval(c->save_strategy);
    a->logging_steps = c->logging_steps;
    a->eval_steps = c->eval_steps > 0 ? c->eval_steps : c->logging_steps;
    a->save_steps = c->save_steps;
    a->logging_first_step = c->logging_first_step;
    a->save_total_limit = c->save_total_limit;
    run_best_model_args(c, a);
    a->seed = (uint64_t)c->seed;
    copy_str(a->output_dir, sizeof a->output_dir, c->output_dir);
    copy_str(a->resume_from_checkpoint, sizeof a->resume_from_checkpoint, c->resume_from_checkpoint);
    copy_str(a->report_to, sizeof a->report_to, c->report_to);
    copy_str(a->logging_dir, sizeof a->logging_dir, c->logging_dir);
    a->push.enabled = c->push_to_hub;
    copy_str(a->push.repo_id, sizeof a->push.repo_id, c->hub_model_id);
    copy_str(a->push.token, sizeof a->push.token, c->hub_token);
    copy_str(a->push.revision, sizeof a->push.revision, c->hub_revision);
    a->push.private_repo = c->hub_private_repo;
    a->push.strategy = c->hub_strategy;  // the config's choices are in HubStrategy's order
    a->push.always_push = c->hub_always_push;
    a->num_input_tokens = c->include_num_input_tokens_seen;
    a->inject_inf_step = env_int("T5TRAIN_INJECT_INF_STEP");
    a->stop_after_steps = env_int("T5TRAIN_STOP_AFTER_STEPS");
}

// The model card's view of the run (src/report/model_card.h): run_translation's kwargs and the TrainingArguments
// extract_hyperparameters_from_trainer reads, as HF would have them for this command line.
static void args_model_card(const RunConfig* c, TrainerArgs* a) {
    ModelCardArgs* m = &a->card;
    memset(m, 0, sizeof *m);
    // run_translation passes finetuned_from=model_name_or_path; --init random (t5train's own) trains from scratch
    if (c->init != MODEL_INIT_RANDOM) copy_str(m->finetuned_from, sizeof m->finetuned_from, c->model_name_or_path);
    m->finetuned_from_is_dir = m->finetuned_from[0] && t5_is_dir(m->finetuned_from);
    model_card_model_name(c->output_dir, c->push_to_hub ? c->hub_model_id : NULL, m->finetuned_from, m->model_name,
                          sizeof m->model_name);
    copy_str(m->dataset_name, sizeof m->dataset_name, c->dataset_name);
    if (c->dataset_name[0]) copy_str(m->dataset_config, sizeof m->dataset_config, c->dataset_config_name);
    copy_str(m->source_lang, sizeof m->source_lang, c->source_lang);
    copy_str(m->target_lang, sizeof m->target_lang, c->target_lang);
    m->learning_rate = c->learning_rate;
    m->train_batch_size = c->per_device_train_batch_size;
    m->eval_batch_size = c->per_device_eval_batch_size;
    m->seed = c->seed;
    m->world_size = c->world_size;
    // HF: ParallelMode.DISTRIBUTED under a launcher (LOCAL_RANK set), which the deepspeed launcher also is
    m->distributed = c->world_size > 1 || c->has_deepspeed;
    m->gradient_accumulation_steps = c->gradient_accumulation_steps;
    static const char* const OPTIMS[] = {"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused",
                                         "adafactor",   "sgd",               "adagrad"};
    copy_str(m->optim, sizeof m->optim, c->adafactor ? "adafactor" : OPTIMS[c->optim]);
    m->adam_beta1 = c->adam_beta1, m->adam_beta2 = c->adam_beta2, m->adam_epsilon = c->adam_epsilon;
    static const char* const SCHEDS[] = {"linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                                         "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau"};
    copy_str(m->lr_scheduler_type, sizeof m->lr_scheduler_type, SCHEDS[c->lr_scheduler_type]);
    // transformers 5 has one warmup_steps (a ratio below 1); t5train keeps transformers 4's two keys, steps winning
    m->warmup_steps = c->warmup_steps > 0 ? (double)c->warmup_steps : c->warmup_ratio;
    m->max_steps = c->max_steps > 0 ? c->max_steps : -1;
    m->num_train_epochs = c->num_train_epochs;
    m->fp16 = c->fp16;
    m->label_smoothing_factor = c->label_smoothing_factor;
    version_card_lines(m->versions, sizeof m->versions);
}

// The resolved RunConfig -> what the trainer needs. Dies (one line) on what this build cannot run.
static void run_build_trainer_args(const RunConfig* c, TrainerArgs* a) {
    trainer_args_default(a);
    const DsConfig* ds = &c->ds;
    if (c->sortish_sampler) t5_die(T5_EXIT_USAGE, "not implemented yet: sortish_sampler");
    if (!c->has_deepspeed || !ds->scheduler.present) {
        if (c->lr_scheduler_type == LR_SCHED_INVERSE_SQRT || c->lr_scheduler_type == LR_SCHED_REDUCE_LR_ON_PLATEAU)
            t5_die(T5_EXIT_USAGE, "not implemented yet: lr_scheduler_type %s",
                   c->lr_scheduler_type == LR_SCHED_INVERSE_SQRT ? "inverse_sqrt" : "reduce_lr_on_plateau");
    }
    ModelLocation loc;
    bool have_loc;
    const char* name = args_model(c, a, &loc, &have_loc);
    args_data(c, a, args_tokenizer(c, a, name, &loc, have_loc));
    args_generation(c, a);
    args_precision(c, a);
    // the engine's plan (DeepSpeed's defaults from trainer_args_default): its optimizer, which the automatic plan
    // sizes, then its zero_optimization knobs (the trainer fills the dtypes and the accumulation steps)
    args_optimizer(c, a);
    args_zero(c, a);
    args_schedule(c, a);
    args_reporting(c, a);
    args_model_card(c, a);
}


// ---------------------------------------------------------------------------------------------
// preflight (issue 14 item 2): every check that needs no GPU, before anything is created. Each
// failure is one line and exit 2 (an input error); --dry_run runs all of them and lists what it checked.

static char preflight_done[10][400];
static int preflight_count;
static void preflight_note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void preflight_note(const char* fmt, ...) {
    if (preflight_count >= (int)T5_ARRAY_LEN(preflight_done)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(preflight_done[preflight_count++], sizeof preflight_done[0], fmt, ap);
    va_end(ap);
}

// the saves against output_dir's free space (issue 28 item 4), once the ZeRO stage is known: refused with exit 2
// before anything is created, a dry run included; a warning when no save_total_limit bounds the checkpoints
static void preflight_disk(const TrainerArgs* a, int world_size) {
    SavePlan plan;
    SaveBytes b;
    disk_save_plan(a, world_size, &plan);
    disk_save_bytes(&plan, &b);
    if (b.need == 0) return;
    uint64_t free_bytes;
    char where[4096], err[4600];
    if (disk_free_bytes(a->output_dir, &free_bytes, where, sizeof where, err, sizeof err)) {
        t5_warn("the free disk space was not checked: %s", err);
        return;
    }
    bool warn;
    int rc = disk_check_saves(&b, free_bytes, where, &warn, err, sizeof err);
    if (rc) t5_die(rc, "%s", err);
    if (warn && t5_rank == 0)
        t5_warn("no save_total_limit: every checkpoint of %.2f GB stays in output_dir (%.2f GB free on %s)",
                (double)b.checkpoint / 1e9, (double)free_bytes / 1e9, where);
    preflight_note("disk: %.2f GB free on %s, the saves need %.2f GB%s", (double)free_bytes / 1e9, where,
                   (double)b.need / 1e9, b.unbounded ? " and one checkpoint more per save" : "");
}

// the weights' safetensors header against the model config: every tensor of the parameter table is
// there with its shape (a tied lm_head may be absent), nothing else but HF's known aliases
static void preflight_weights(const TrainerArgs* a) {
    char err[1024];
    ParamTable t;
    if (params_build(&t, &a->model, err, sizeof err)) t5_die(T5_EXIT_USAGE, "model config: %s", err);
    SafeTensors* st = NULL;
    if (safetensors_open(&st, a->weights_path, err, sizeof err)) {
        params_free(&t);
        t5_die(T5_EXIT_USAGE, "%s", err);
    }
    for (int i = 0; i < t.num_params; i++) {
        const ParamDesc* p = &t.params[i];
        const SafeTensorInfo* info = NULL;
        if (!safetensors_has(st, p->name))
            t5_die(T5_EXIT_USAGE, "missing tensor '%s' in %s (the model config asks for it)", p->name, a->weights_path);
        if (safetensors_info(st, p->name, &info, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
        bool same = info->ndim == p->ndim && info->shape[0] == p->shape[0] && (p->ndim == 1 || info->shape[1] == p->shape[1]);
        if (!same)
            t5_die(T5_EXIT_USAGE, "tensor '%s' in %s has %d dimensions [%lld, %lld], the model config asks for [%lld, %lld]",
                   p->name, a->weights_path, info->ndim, (long long)info->shape[0],
                   (long long)(info->ndim > 1 ? info->shape[1] : 1), (long long)p->shape[0], (long long)p->shape[1]);
    }
    static const char* const ALIASES[] = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"};
    for (int i = 0; i < safetensors_count(st); i++) {
        const char* name = safetensors_name(st, i);
        bool known = params_find_name(&t, name) >= 0;
        for (size_t k = 0; k < T5_ARRAY_LEN(ALIASES) && !known; k++) known = strcmp(name, ALIASES[k]) == 0;
        if (!known)
            t5_die(T5_EXIT_USAGE, "unexpected tensor '%s' in %s (not part of a %s model with this config.json)", name,
                   a->weights_path, a->model.feed_forward == T5_FF_GATED_GELU ? "T5 v1.1" : "T5 v1.0");
    }
    preflight_note("weights %s: %d tensors, names and shapes match config.json", a->weights_path, t.num_params);
    safetensors_close(st);
    params_free(&t);
}

static void preflight_tokenizer(const TrainerArgs* a) {
    char err[1024];
    Tokenizer* tok = tokenizer_open(a->tokenizer_file, err, sizeof err);
    if (!tok) t5_die(T5_EXIT_USAGE, "tokenizer: %s", err);
    int v = tokenizer_vocab_size(tok), mv = a->model.vocab_size;
    tokenizer_close(tok);
    if (v > mv)
        t5_die(T5_EXIT_USAGE, "the tokenizer %s has %d ids but the model's vocab_size is %d (another model's tokenizer?)",
               a->tokenizer_file, v, mv);
    if (v < mv / 2)
        t5_die(T5_EXIT_USAGE, "the tokenizer %s has only %d ids for a model vocabulary of %d: a truncated or foreign "
                              "spiece.model?", a->tokenizer_file, v, mv);
    preflight_note("tokenizer %s: %d ids for the model's %d", a->tokenizer_file, v, mv);
}

static void preflight_jsonl(const char* key, const char* f, const char* sl, const char* tl);

// a data file: exists, is a regular file of a supported type, and its first records parse
static void preflight_file(const char* key, const char* f, const char* sl, const char* tl) {
    struct stat st;
    if (stat(f, &st) != 0) {
        if (errno == ENOENT) {
            // the path-prefix form: P names the pair P.<src> + P.<tgt> (dataset.h); checked when resolved
            char a[4096], b[4096];
            snprintf(a, sizeof a, "%s.%s", f, sl);
            snprintf(b, sizeof b, "%s.%s", f, tl);
            if (t5_is_file(a) && t5_is_file(b)) return;
            t5_die(T5_EXIT_USAGE, "%s not found: %s", key, f);
        }
        t5_die(T5_EXIT_USAGE, "%s %s cannot be read: %s", key, f, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) t5_die(T5_EXIT_USAGE, "%s %s is a directory, not a data file", key, f);
    if (S_ISFIFO(st.st_mode)) t5_die(T5_EXIT_USAGE, "%s %s is a fifo (named pipe), not a regular file", key, f);
    if (!S_ISREG(st.st_mode)) t5_die(T5_EXIT_USAGE, "%s %s is not a regular file", key, f);
    if (access(f, R_OK) != 0) t5_die(T5_EXIT_USAGE, "%s %s cannot be read: %s", key, f, strerror(errno));
    size_t n = strlen(f);
    char suf_s[24], suf_t[24];
    snprintf(suf_s, sizeof suf_s, ".%s", sl);
    snprintf(suf_t, sizeof suf_t, ".%s", tl);
    bool jsonl = (n > 5 && !strcmp(f + n - 5, ".json")) || (n > 6 && !strcmp(f + n - 6, ".jsonl"));
    bool sgm = n > 4 && !strcmp(f + n - 4, ".sgm");
    bool text = (n > strlen(suf_s) && !strcmp(f + n - strlen(suf_s), suf_s)) ||
                (n > strlen(suf_t) && !strcmp(f + n - strlen(suf_t), suf_t));
    if (!jsonl && !sgm && !text) {
        const char* dot = strrchr(f, '.');
        t5_die(T5_EXIT_USAGE, "%s %s: unsupported file type '%s' (t5train reads .json/.jsonl lines, parallel text .%s + "
                              ".%s, and WMT .sgm)", key, f, dot && !strchr(dot, '/') ? dot : "(no extension)", sl, tl);
    }
    if (!jsonl) return;  // parallel text and SGML: read whole by preflight_data once resolved
    preflight_jsonl(key, f, sl, tl);
}

// the first 16 records of a JSON-lines file parse, with both languages as strings
static void preflight_jsonl(const char* key, const char* f, const char* sl, const char* tl) {
    FILE* fp = fopen(f, "rb");
    if (!fp) t5_die(T5_EXIT_USAGE, "%s %s cannot be read: %s", key, f, strerror(errno));
    char* line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, records = 0;
    while (records < 16 && (len = getline(&line, &cap, fp)) >= 0) {
        lineno++;
        size_t bad;
        if ((size_t)len != strlen(line))
            t5_die(T5_EXIT_USAGE, "%s %s line %d: holds a NUL byte", key, f, lineno);
        if (!utf8_validate(line, (size_t)len, &bad))
            t5_die(T5_EXIT_USAGE, "%s %s line %d: invalid UTF-8 at byte %zu", key, f, lineno, bad);
        const char* s = line;
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
        if (!*s) continue;
        json_error_t je;
        json_t* row = json_loads(line, 0, &je);
        if (!row) t5_die(T5_EXIT_USAGE, "%s %s line %d: invalid JSON: %s", key, f, lineno, je.text);
        json_t* tr = json_object_get(row, "translation");
        if (!json_is_object(row) || !json_is_object(tr))
            t5_die(T5_EXIT_USAGE, "%s %s line %d: expected {\"translation\": {\"%s\": ..., \"%s\": ...}}", key, f,
                   lineno, sl, tl);
        const char* langs[2] = {sl, tl};
        for (int k = 0; k < 2; k++) {
            json_t* v = json_object_get(tr, langs[k]);
            if (!v) t5_die(T5_EXIT_USAGE, "%s %s line %d: the translation has no \"%s\" key", key, f, lineno, langs[k]);
            if (!json_is_string(v))
                t5_die(T5_EXIT_USAGE, "%s %s line %d: translation \"%s\" is not a string", key, f, lineno, langs[k]);
        }
        json_decref(row);
        records++;
    }
    free(line);
    fclose(fp);
    if (records == 0) t5_die(T5_EXIT_USAGE, "%s %s holds no translation pairs", key, f);
}

// The data of every split the run opens (the trainer's rule: train with do_train, validation with
// do_eval or an evaluation strategy, test with do_predict), resolved the way dataset_open resolves
// it (explicit files, else the dataset by name under data_dir, $T5TRAIN_DATA, the default cache):
// explicit files are checked by preflight_file; parallel text and SGML are read whole by the readers
// (equal line counts, closed segments, UTF-8), JSON lines found by dataset name have their first
// records parsed. Tokenizing comes later; what it could still refuse is an empty text side.
static void preflight_data(const RunConfig* c, const TrainerArgs* a) {
    char err[2048];
    if (c->data_dir[0] && !t5_is_dir(c->data_dir))
        t5_die(T5_EXIT_USAGE, "data_dir %s %s", c->data_dir,
               t5_path_exists(c->data_dir) ? "is not a directory" : "does not exist");
    static const char* const keys[3] = {"train_file", "validation_file", "test_file"};
    static const char* const what[3] = {"training data", "evaluation data", "prediction data"};
    const char* files[3] = {c->train_file, c->validation_file, c->test_file};
    bool used[3];
    trainer_splits_used(a, used);
    for (int i = 0; i < 3; i++) {
        if (files[i][0] && (used[i] || i == 0)) preflight_file(keys[i], files[i], c->source_lang, c->target_lang);
        if (!used[i]) continue;
        if (data_pending & (1 << i)) {  // --dry_run: not on disk; a run downloads and prepares it first
            preflight_note("%s: not on disk, would be downloaded and prepared (listed above)", what[i]);
            continue;
        }
        char *src = NULL, *tgt = NULL, fmt = 0;
        if (dataset_resolve_files(&a->data, (DataSplit)i, &src, &tgt, &fmt, err, sizeof err))
            t5_die(T5_EXIT_USAGE, "%s: %s", what[i], err);
        if (fmt == 'j' && !files[i][0]) preflight_jsonl(keys[i], src, c->source_lang, c->target_lang);
        if (fmt == 't' || fmt == 's') {
            TextPairs tp;
            int rc = fmt == 't' ? text_pairs_read_parallel(src, tgt, &tp, err, sizeof err)
                                : text_pairs_read_sgml(src, tgt, &tp, err, sizeof err);
            if (rc) t5_die(T5_EXIT_USAGE, "%s: %s", what[i], err);
            bool empty = tp.n == 0;
            text_pairs_free(&tp);
            if (empty) t5_die(T5_EXIT_USAGE, "%s: %s holds no translation pairs", what[i], src);
        }
        preflight_note("%s %s%s%s", what[i], src, tgt ? " + " : "", tgt ? tgt : "");
        free(src);
        free(tgt);
    }
}

// --resume_from_checkpoint: a complete checkpoint (marker, state file, weights header) of this model
static void preflight_resume(const RunConfig* c, const TrainerArgs* a) {
    char err[1024];
    char* dir = checkpoint_resolve_resume(c->resume_from_checkpoint, c->output_dir, NULL, err, sizeof err);
    if (!dir)
        t5_die(T5_EXIT_USAGE, "%s%s", strncmp(err, "--resume_from_checkpoint", 24) ? "--resume_from_checkpoint: " : "",
               err);
    char* cj = t5_path_join(dir, "config.json");
    T5Config ck;
    if (!t5_is_file(cj)) t5_die(T5_EXIT_USAGE, "--resume_from_checkpoint %s has no config.json", dir);
    if (t5_config_load_json(cj, &ck, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    char* cw = t5_path_join(dir, "model.safetensors");
    if (t5_is_file(cw) && t5_config_resolve_head(&ck, cw, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    free(cw);
    const T5Config* m = &a->model;
    if (ck.vocab_size != m->vocab_size || ck.d_model != m->d_model || ck.d_kv != m->d_kv || ck.d_ff != m->d_ff ||
        ck.num_layers != m->num_layers || ck.num_decoder_layers != m->num_decoder_layers ||
        ck.num_heads != m->num_heads || ck.feed_forward != m->feed_forward ||
        ck.tie_word_embeddings != m->tie_word_embeddings || ck.scale_decoder_outputs != m->scale_decoder_outputs ||
        ck.relative_attention_num_buckets != m->relative_attention_num_buckets)
        t5_die(T5_EXIT_USAGE, "--resume_from_checkpoint %s holds another model (D=%d F=%d H=%d L=%d/%d V=%d) than "
                              "--model_name_or_path (D=%d F=%d H=%d L=%d/%d V=%d)", dir, ck.d_model, ck.d_ff,
               ck.num_heads, ck.num_layers, ck.num_decoder_layers, ck.vocab_size, m->d_model, m->d_ff, m->num_heads,
               m->num_layers, m->num_decoder_layers, m->vocab_size);
    preflight_note("checkpoint %s: complete, same model", dir);
    free(cj);
    free(dir);
}

// a directory that will be created: its nearest existing ancestor must be a directory we can write
static void preflight_creatable(const char* key, const char* path) {
    if (t5_is_dir(path)) return;
    if (t5_path_exists(path)) t5_die(T5_EXIT_USAGE, "%s %s exists and is not a directory", key, path);
    char* p = strdup_check(path);
    for (;;) {
        char* slash = strrchr(p, '/');
        if (!slash) { snprintf(p, 2, "."); break; }
        if (slash == p) { p[1] = 0; break; }
        *slash = 0;
        if (t5_path_exists(p)) break;
    }
    if (!t5_is_dir(p)) t5_die(T5_EXIT_USAGE, "%s %s cannot be created: %s is not a directory", key, path, p);
    if (access(p, W_OK | X_OK) != 0)
        t5_die(T5_EXIT_USAGE, "%s %s cannot be created in %s: %s", key, path, p, strerror(errno));
    free(p);
}

// --push_to_hub: a token, not offline (no request; the repo is created when the run starts)
static void preflight_push(const RunConfig* c, TrainerArgs* a) {
    if (!c->push_to_hub || t5_rank != 0) return;
    static char what[1200], err[1024];
    if (push_to_hub_check(&a->push, c->output_dir, what, sizeof what, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    preflight_note("%s", what);
}

static void run_preflight(const RunConfig* c, TrainerArgs* a) {
    preflight_creatable("output_dir", c->output_dir);
    preflight_push(c, a);
    if (c->logging_dir[0]) preflight_creatable("logging_dir", c->logging_dir);
    if (!a->init_random) preflight_weights(a);
    preflight_tokenizer(a);
    preflight_data(c, a);
    if (c->resume_from_checkpoint[0]) preflight_resume(c, a);
    // DeepSpeed's files: autotuning's results_dir, the flops profile's output_file (its folder)
    if (c->has_deepspeed && c->ds.autotuning.enabled)
        preflight_creatable("deepspeed.autotuning.results_dir", c->ds.autotuning.results_dir);
    const char* pf = c->ds.flops_profiler.output_file;
    if (c->has_deepspeed && c->ds.flops_profiler.enabled && pf[0]) {
        if (t5_is_dir(pf)) t5_die(T5_EXIT_USAGE, "deepspeed.flops_profiler.output_file %s is a directory", pf);
        char* dir = strdup_check(pf);
        char* slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        preflight_creatable("deepspeed.flops_profiler.output_file's folder", slash ? (dir[0] ? dir : "/") : ".");
        free(dir);
    }
}

// The lengths the trainer will size the activations for (dataset_activation_lengths over the splits it opens), into
// a->plan_src_len / plan_tgt_len, so that the planner (the automatic plan, the fixed plan's check, the out-of-memory
// advice) sizes the run the trainer makes rather than the max lengths: the homework data's longest source is ~1/5
// of the default 1024. Tokenizes now (the trainer then opens the token cache); a dry run reads a valid cache or
// tokenizes in memory, and writes none. Only where a GPU will be planned for; without one, and for splits a dry run would download, the
// planner keeps the caps.
static void run_data_lengths(const RunConfig* c, TrainerArgs* a) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        (void)cudaGetLastError();
        return;
    }
    if (data_pending) return;
    bool used[3];
    trainer_splits_used(a, used);
    static char err[2048];
    DataOptions o = a->data;
    o.cache_read_only = c->dry_run;
    o.quiet = t5_rank != 0;
    Tokenizer* tok = tokenizer_open(o.tokenizer_path, err, sizeof err);
    if (!tok) t5_die(T5_EXIT_USAGE, "tokenizer: %s", err);
    Dataset* ds[3] = {NULL, NULL, NULL};
    static const char* const what[3] = {"training data", "evaluation data", "prediction data"};
    for (int i = 0; i < 3; i++) {
        if (!used[i]) continue;
        ds[i] = dataset_open(&o, (DataSplit)i, tok, err, sizeof err);
        if (!ds[i]) t5_die(T5_EXIT_USAGE, "%s: %s", what[i], err);
    }
    dataset_activation_lengths(&o, ds, 3, &a->plan_src_len, &a->plan_tgt_len);
    for (int i = 0; i < 3; i++)
        if (ds[i]) dataset_close(ds[i]);
    tokenizer_close(tok);
    preflight_note("the data's longest example: activations for %d source and %d target tokens", a->plan_src_len,
                   a->plan_tgt_len);
}

// Removes the trainer's test-hook flags from argv (in place); returns the new argc.
static int run_strip_hooks(int argc, char** argv, char* dump, size_t cap, int64_t* dump_steps) {
    int k = 1;
    for (int i = 1; i < argc; i++) {
        const char* s = argv[i];
        const char* val = NULL;
        bool is_dump = strncmp(s, "--dump_batches", 14) == 0 && (s[14] == 0 || s[14] == '=');
        bool is_steps = strncmp(s, "--dump_batches_steps", 20) == 0 && (s[20] == 0 || s[20] == '=');
        if (!is_dump && !is_steps) {
            argv[k++] = argv[i];
            continue;
        }
        const char* eq = strchr(s, '=');
        if (eq) val = eq + 1;
        else if (i + 1 < argc) val = argv[++i];
        else t5_die(T5_EXIT_USAGE, "%s needs a value", s);
        if (is_steps) {
            char* end;
            long long n = strtoll(val, &end, 10);
            if (*end || n < 1) t5_die(T5_EXIT_USAGE, "--dump_batches_steps '%s' must be a positive integer", val);
            *dump_steps = n;
        } else {
            copy_str(dump, cap, val);
        }
    }
    argv[k] = NULL;
    return k;
}

// A planner's choice written into c (reset to raw by the caller): the config resolved again (batch sizes, steps) and
// the TrainerArgs rebuilt, keeping the data lengths run_data_lengths measured
static void run_resolve_again(RunConfig* c, TrainerArgs* targs) {
    char err[CONFIG_ERR_LEN];
    int rc = config_resolve(c, err, sizeof err);
    if (rc) t5_die(rc, "%s", err);
    const int ls = targs->plan_src_len, lt = targs->plan_tgt_len;
    run_build_trainer_args(c, targs);
    targs->plan_src_len = ls;
    targs->plan_tgt_len = lt;
}

// --auto_find_batch_size with a fixed plan: the micro-batch lowered until the estimate fits (planner_find_batch),
// then the config resolved again from raw with it, as the automatic plan does. The global batch follows the
// micro-batch as in HF, unless the DeepSpeed JSON fixes train_batch_size with a number: then it is kept through
// gradient accumulation (the largest micro-batch at or below the one found that divides it, issue 32 item 4).
static void run_find_batch(RunConfig* c, const RunConfig* raw, TrainerArgs* targs) {
    FILE* log = t5_rank == 0 ? stdout : NULL;
    const int b = planner_find_batch(targs, log);
    if (b == 0 || b == c->per_device_train_batch_size) return;  // none fits: planner_check_run says so next
    const bool keep = c->has_deepspeed && raw->src[config_key_index("deepspeed.train_batch_size")] == CONFIG_SRC_FILE;
    const int64_t global = c->ds.train_batch_size, per_rank = global / c->world_size;  // resolved: divisible
    int micro = b;
    int64_t gas = c->gradient_accumulation_steps;
    if (keep) {
        while (micro > 1 && per_rank % micro) micro--;
        gas = per_rank / micro;
        if (log)
            fprintf(log, "auto_find_batch_size: train_batch_size %lld kept (a number in the DeepSpeed config): "
                    "micro-batch %d x gradient_accumulation_steps %lld x %d GPU(s)\n", (long long)global, micro,
                    (long long)gas, c->world_size);
    }
    *c = *raw;
    c->per_device_train_batch_size = micro;
    c->src[config_key_index("per_device_train_batch_size")] = CONFIG_SRC_DERIVED;
    if (keep) {
        c->gradient_accumulation_steps = gas;
        c->src[config_key_index("gradient_accumulation_steps")] = CONFIG_SRC_DERIVED;
    }
    // HF (trainer_config_process with auto_find_batch_size): the DeepSpeed batch keys follow, even when numbers
    if (c->has_deepspeed) {
        c->ds.train_micro_batch_size_per_gpu = micro;
        c->ds.gradient_accumulation_steps = gas;
        c->ds.train_batch_size = (int64_t)micro * gas * c->world_size;
    }
    run_resolve_again(c, targs);
}

int run_main(int argc, char** argv) {
    static RunConfig cfg;  // large (paths): static, not on the stack
    static TrainerArgs targs;
    RunConfig* c = &cfg;
    char err[CONFIG_ERR_LEN];
    config_init(c);
    c->world_size = run_world_size();

    static char dump[4096];
    int64_t dump_steps = 50;
    argc = run_strip_hooks(argc, argv, dump, sizeof dump, &dump_steps);

    int rc = config_parse_args(c, argc, argv, err, sizeof err);
    if (rc) t5_die(rc, "%s", err);
    if (c->help) {
        config_print_help(stdout);
        return T5_EXIT_OK;
    }
    static RunConfig raw;  // before "auto" is resolved: the zero plan auto may resolve it again (issue 17)
    raw = *c;
    if ((rc = config_resolve(c, err, sizeof err))) t5_die(rc, "%s", err);
    t5_set_log_level(t5_rank == 0 ? c->log_level : c->log_level_replica);  // HF's get_process_log_level
    // resuming continues in the same output_dir (HF run_translation): its checkpoints are why it is not empty
    if (!c->resume_from_checkpoint[0] && (rc = config_check_output_dir(c, err, sizeof err))) t5_die(rc, "%s", err);

    if (t5_rank == 0) {
        if (t5_log_info()) config_print_table(c, stdout);  // HF logs its TrainingArguments at info
        if (!c->source_prefix_set && strstr(c->model_name_or_path, "t5"))
            t5_warn("You're running a t5 model but didn't provide a source prefix, which is expected, e.g. with "
                    "`--source_prefix 'translate English to Romanian: '`");
    }
    // every check that needs no GPU, before anything is created (issue 14): what this build runs, the
    // model, weights header, tokenizer, data files, the checkpoint to resume, the output paths
    if ((rc = config_check_implemented(c, err, sizeof err))) t5_die(rc, "%s", err);
    if (!c->do_train && !c->do_eval && !c->do_predict)
        t5_die_hint(T5_EXIT_USAGE, "add --do_train, --do_eval and/or --do_predict",
                    "nothing to do: none of do_train, do_eval, do_predict");
    run_build_trainer_args(c, &targs);
    run_preflight(c, &targs);
    if (strcmp(c->zero_plan, "auto") == 0 || c->do_train) run_data_lengths(c, &targs);
    PlanPick pick = {0};
    if (strcmp(c->zero_plan, "auto") == 0) {  // issue 17: before anything is created
        PlanSearch ps;
        if (planner_auto_run(c, &raw, &targs, &ps, &pick)) {
            // it chose the micro-batch or gradient checkpointing: the config again with them (batch sizes, steps)
            *c = raw;
            planner_pick_to_config(&pick, &ps, c);
            run_resolve_again(c, &targs);
            planner_pick_apply(&pick, &targs.zero, NULL);
        }
    }
    if (c->has_deepspeed && c->ds.autotuning.enabled && t5_rank == 0) {  // DeepSpeed's results_dir (autotune.h)
        if (c->dry_run || pick.batch == 0)
            printf("dry run: autotuning writes %s/ds_config_optimal.json once the plan is chosen at start\n",
                   c->ds.autotuning.results_dir);
        else if ((rc = autotune_write_results(c, &targs.zero, targs.data.train_batch_size, targs.gradient_checkpointing,
                                              pick.samples_s, argc, argv, err, sizeof err)))
            t5_die(rc, "%s", err);
    }
    if (c->auto_find_batch_size && c->do_train && strcmp(c->zero_plan, "auto") != 0) run_find_batch(c, &raw, &targs);
    targs.oom_advice = planner_oom_advice;  // out of memory explained (issue 17)
    t5_oom_set_advice(planner_oom_advice, &targs);  // the same, for an allocation failing during the run (oom.h)
    // a fixed plan predicted not to fit: refused now, before anything is allocated or created (issue 17 item 4);
    // the automatic plan has already been fitted
    if (strcmp(c->zero_plan, "auto") != 0 && c->do_train) planner_check_run(&targs);
    preflight_disk(&targs, c->world_size);
    char nvme_note[400], nvme_err[1200];  // offload_optimizer nvme: nvme_path and its free space (nvme_check.c)
    if ((rc = nvme_check_run(&targs, nvme_note, sizeof nvme_note, nvme_err, sizeof nvme_err))) t5_die(rc, "%s", nvme_err);
    if (nvme_note[0]) preflight_note("%s", nvme_note);
    if (c->dry_run) {
        if (t5_rank != 0) return T5_EXIT_OK;  // several ranks: rank 0 reports (each ran every check)
        for (int i = 0; i < preflight_count; i++) printf("dry run: checked %s\n", preflight_done[i]);
        printf("dry run: every check passed; nothing was downloaded or created\n");
        return T5_EXIT_OK;
    }

    // --push_to_hub: the repo created (or found) before anything is trained, as HF's Trainer does at its start;
    // no network, a refused token or an unknown namespace stop the run here (rank 0; the others learn it at the
    // rendezvous)
    if (c->push_to_hub && t5_rank == 0 && push_to_hub_init(&targs.push, c->output_dir, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "push_to_hub: %s", err);

    // several ranks: the NCCL communicator (every rank passed every check above; a rank that failed has exited,
    // and the others learn it from the bootstrap), then rank 0 creates output_dir while the others wait
    LaunchComm* comm = NULL;
    if (c->world_size > 1) {
        LaunchEnv env;
        if (launch_env_parse(&env, NULL, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
        static char cerr[640];
        // the hash covers the resolved config and the ZeRO plan (the automatic plan is picked on each rank from its
        // own readings: ranks that picked differently are refused at the rendezvous, not left to hang)
        const ZeroOptions* z = &targs.zero;
        const double plan[6] = {z->stage, z->offload_optimizer, z->offload_param, z->ratio,
                                (double)targs.data.train_batch_size, targs.gradient_checkpointing};
        comm = comm_init(&env, config_hash(c) ^ launch_hash64(plan, sizeof plan, 0), cerr, sizeof cerr);
        if (!comm) t5_die(T5_EXIT_FAILURE, "%s", cerr);
        targs.zero.comm = comm;
        if (t5_rank != 0) {  // HF's main process logs: the other ranks' stdout goes nowhere (errors: stderr)
            fflush(stdout);
            if (!freopen("/dev/null", "w", stdout)) t5_die(T5_EXIT_FAILURE, "cannot redirect stdout of rank %d", t5_rank);
        }
        if (t5_rank != 0) comm_barrier(comm);
    }
    bool created = !t5_path_exists(c->output_dir);
    if (t5_mkdir_p(c->output_dir) != 0)
        t5_die(T5_EXIT_FAILURE, "cannot create output_dir %s: %s", c->output_dir, strerror(errno));
    char* path = t5_path_join(c->output_dir, "t5train_config.json");
    if (created) {  // a SIGINT/SIGTERM before the training loop removes what this run created (signals.h)
        signals_track_setup(c->output_dir, true);
        signals_track_setup(path, false);
    }
    if (t5_rank == 0 && (rc = config_write_json(c, path, err, sizeof err))) t5_die(rc, "%s", err);
    free(path);
    if (comm && t5_rank == 0) comm_barrier(comm);
    copy_str(targs.dump_batches, sizeof targs.dump_batches, dump);
    targs.dump_batches_steps = dump_steps;

    t5_set_tf32(c->tf32);
    progress_set_disabled(c->disable_tqdm);
    rc = trainer_run(&targs);
    comm_finish(comm);
    return rc;
}
