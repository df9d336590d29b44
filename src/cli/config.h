/*
 * config.h: the run configuration. One JSON file (plus command-line flags that override it)
 * holds the training arguments of HF run_translation.py / Seq2SeqTrainingArguments and a
 * `deepspeed` section with DeepSpeed's own schema (inline, or a path to a DeepSpeed JSON file).
 *
 * Every key, its type, default, range and help text lives in ONE table (src/cli/config_table.c);
 * parsing, validation, --help, the startup table and the resolved JSON are generated from it.
 *
 * Life of a config:
 *   config_init(&c)                   defaults from the table
 *   config_parse_args(&c, argc, argv) --config FILE, --deepspeed FILE, then flags (flags win)
 *   config_resolve(&c)                "auto" filled the way the HF Trainer's DeepSpeed integration
 *                                     does (trainer_config_process / trainer_config_finalize),
 *                                     cross-key checks, mismatches
 *   config_check_output_dir(&c)       HF's "Output directory (...) already exists and is not empty"
 *   config_print_table / config_write_json
 *   config_check_implemented(&c)      the ONE place that says what this build can run
 *
 * Library functions never exit: they return 0 or a T5_EXIT_* code and write a one-line message
 * into err (CONFIG_ERR_LEN bytes). Config errors are T5_EXIT_USAGE (2).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../model/t5_config.h"
#include "../base/dtype.h"
#include "../zero/zenflow_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CONFIG_STR_LEN 512   // longest string value (paths, names) + 1
#define CONFIG_MAX_KEYS 256  // capacity of the per-key bookkeeping arrays (>= table size)
#define CONFIG_ERR_LEN 2048  // size of the error buffers the functions below write to
#define CONFIG_NOTE_LEN 320
#define CONFIG_FOREIGN_MAX 256  // entries of CONFIG_FOREIGN_KEYS (config_foreign.c)
#define CONFIG_INT_AUTO INT64_MIN  // an INT key with CONFIG_F_AUTOVALUE holding "auto"
#define CONFIG_SECRET_MASK "<HUB_TOKEN>"  // a secret's printed value (HF writes hub_token so); read back as null

// Where a key's value came from. A DeepSpeed key that is absent from the DeepSpeed JSON keeps
// CONFIG_SRC_DEFAULT (DeepSpeed's own default applies, as with the HF Trainer).
typedef enum {
    CONFIG_SRC_DEFAULT = 0,  // the table's default
    CONFIG_SRC_FILE,         // --config file or the DeepSpeed JSON
    CONFIG_SRC_CLI,          // command-line flag
    CONFIG_SRC_AUTO,         // "auto", not resolved (yet): see notes
    CONFIG_SRC_RESOLVED,     // "auto", resolved by config_resolve
    CONFIG_SRC_DERIVED,      // filled by config_resolve (null -> fallback, absent batch keys, ...)
} ConfigSource;

// ---- enums (their order matches the `choices` strings of the table in config_table.c)
typedef enum { OFFLOAD_NONE = 0, OFFLOAD_CPU, OFFLOAD_NVME } OffloadDevice;  // "none|cpu|nvme"
typedef enum {
    DS_OPTIM_ADAM = 0,
    DS_OPTIM_ADAMW,
    DS_OPTIM_ADAGRAD,
    DS_OPTIM_LAMB,
    DS_OPTIM_ONEBIT_ADAM,
    DS_OPTIM_ZERO_ONE_ADAM,
    DS_OPTIM_ONEBIT_LAMB,
    DS_OPTIM_LION,
    DS_OPTIM_ADAFACTOR,  // accepted by the parser only to be refused with a reason (config_resolve.c)
} DsOptimizerType;  // "Adam|AdamW|Adagrad|Lamb|OneBitAdam|ZeroOneAdam|OneBitLamb|Lion|Adafactor" (case-insensitive)
typedef enum {
    DS_SCHED_WARMUP_LR = 0,
    DS_SCHED_WARMUP_DECAY_LR,
    DS_SCHED_WARMUP_COSINE_LR,
    DS_SCHED_ONE_CYCLE,
    DS_SCHED_LR_RANGE_TEST,
} DsSchedulerType;  // "WarmupLR|WarmupDecayLR|WarmupCosineLR|OneCycle|LRRangeTest"
typedef enum { DS_WARMUP_LOG = 0, DS_WARMUP_LINEAR } DsWarmupType;  // "log|linear"
typedef enum { COMM_DTYPE_DEFAULT = 0, COMM_DTYPE_FP16, COMM_DTYPE_BF16, COMM_DTYPE_FP32 } CommDataType;
typedef enum { TAG_VALIDATION_WARN = 0, TAG_VALIDATION_IGNORE, TAG_VALIDATION_FAIL } TagValidation;
typedef enum {
    LR_SCHED_LINEAR = 0,
    LR_SCHED_COSINE,
    LR_SCHED_COSINE_WITH_RESTARTS,
    LR_SCHED_POLYNOMIAL,
    LR_SCHED_CONSTANT,
    LR_SCHED_CONSTANT_WITH_WARMUP,
    LR_SCHED_INVERSE_SQRT,
    LR_SCHED_REDUCE_LR_ON_PLATEAU,
} LrSchedulerType;
typedef enum { STRATEGY_NO = 0, STRATEGY_STEPS, STRATEGY_EPOCH } IntervalStrategy;  // "no|steps|epoch"
typedef enum {
    OPTIM_ADAMW_TORCH = 0,
    OPTIM_ADAMW_TORCH_FUSED,
    OPTIM_ADAMW_HF,
    OPTIM_ADAMW_APEX_FUSED,
    OPTIM_ADAFACTOR,
    OPTIM_SGD,
    OPTIM_ADAGRAD,
} TrainerOptim;
typedef enum { MODEL_INIT_PRETRAINED = 0, MODEL_INIT_RANDOM } ModelInit;  // "pretrained|random"

// ---- the DeepSpeed section (DeepSpeed's schema and defaults; runtime/config.py, zero/config.py)
typedef struct {
    bool present;                    // the "fp16" object appears
    bool enabled;                    // false; "auto" -> --fp16
    bool auto_cast;                  // false
    double loss_scale;               // 0 = dynamic
    int64_t initial_scale_power;     // 16
    int64_t loss_scale_window;       // 1000
    int64_t hysteresis;              // 2
    bool consecutive_hysteresis;     // false
    double min_loss_scale;           // 1
    bool fp16_master_weights_and_grads;  // false
} DsFp16;

typedef struct {
    bool present;
    bool enabled;  // false; "auto" -> --bf16
} DsBf16;

typedef struct {
    bool present;
    bool enabled;              // false; "auto" -> fp16 with the apex backend (never, here)
    char opt_level[16];        // "O1"
} DsAmp;

typedef struct {
    bool present;          // the "optimizer" object appears (else: the HF Trainer's own optimizer, `optim`)
    int type;              // DsOptimizerType
    bool params_present;
    double lr;             // 1e-3; "auto" -> learning_rate
    double betas[2];       // [0.9, 0.999]; "auto" -> [adam_beta1, adam_beta2]
    double eps;            // 1e-8; "auto" -> adam_epsilon
    double weight_decay;   // 0 (DeepSpeed's AdamW: 0.01); "auto" -> weight_decay
    bool bias_correction;  // true
    bool adam_w_mode;      // true
    bool torch_adam;       // false
    bool amsgrad;          // false
} DsOptimizer;

typedef struct {
    bool present;              // the "scheduler" object appears (else: lr_scheduler_type)
    int type;                  // DsSchedulerType
    bool params_present;
    double warmup_min_lr;      // 0; "auto" -> 0
    double warmup_max_lr;      // 1e-3; "auto" -> learning_rate
    int64_t warmup_num_steps;  // 1000; "auto" -> warmup_steps or ceil(warmup_ratio * total)
    int warmup_type;           // DsWarmupType, "log"
    int64_t total_num_steps;   // WarmupDecayLR/WarmupCosineLR; "auto" -> computed training steps
    double cos_min_ratio;      // 1e-4 (WarmupCosineLR)
    double warmup_min_ratio;   // 0 (WarmupCosineLR)
    int64_t last_batch_iteration;  // -1
} DsScheduler;

typedef struct {
    bool present;
    int device;                          // OffloadDevice
    char nvme_path[CONFIG_STR_LEN];
    bool pin_memory;                     // false
    double ratio;                        // 1.0
    int64_t buffer_count;                // 4
    bool fast_init;                      // false
    bool pipeline_read, pipeline_write;  // false, false (nvme: overlap the swaps with the step)
} DsOffloadOptimizer;

typedef struct {
    bool present;
    int device;                          // OffloadDevice
    char nvme_path[CONFIG_STR_LEN];
    bool pin_memory;                     // false
    int64_t buffer_count;                // 5
    int64_t buffer_size;                 // 1e8
    int64_t max_in_cpu;                  // 1e9
} DsOffloadParam;

// DeepSpeed's zero_optimization.zenflow (runtime/zenflow/zenflow_config.py); src/zero/zenflow_sched.h has its meaning
typedef struct {
    bool present;                    // the section appears and is not null (DeepSpeed: ZenFlow on)
    double topk_ratio;               // 0.1
    int select_strategy;             // "auto|step|epoch" (ZenflowSelectStrategy)
    int64_t select_interval;         // "auto" (CONFIG_INT_AUTO) or a count
    int64_t update_interval;         // "auto" (CONFIG_INT_AUTO) or a count
    bool overlap_step;               // false
    bool offload;                    // false
    double auto_ratio;               // 0.99
    int64_t full_warm_up_rounds;     // 0
    double pt_reserved_cores_perc;   // 0.5
} DsZenflow;
typedef struct {
    bool present;
    int64_t stage;                                // 0..3
    DsOffloadOptimizer offload_optimizer;
    DsOffloadParam offload_param;
    bool overlap_comm;                            // DeepSpeed: true for stage 3, else false
    bool contiguous_gradients;                    // true
    int64_t sub_group_size;                       // 1e9
    int64_t reduce_bucket_size;                   // 5e8; "auto" -> D^2
    bool reduce_scatter;                          // true
    bool allgather_partitions;                    // true
    int64_t allgather_bucket_size;                // 5e8
    bool round_robin_gradients;                   // false
    bool load_from_fp32_weights;                  // true
    bool elastic_checkpoint;                      // false
    bool ignore_unused_parameters;                // true
    int64_t stage3_prefetch_bucket_size;          // 5e7; "auto" -> int(0.9 D^2)
    int64_t stage3_param_persistence_threshold;   // 1e5; "auto" -> 10 D
    int64_t stage3_max_live_parameters;           // 1e9
    int64_t stage3_max_reuse_distance;            // 1e9
    bool stage3_gather_16bit_weights_on_model_save;  // false
    DsZenflow zenflow;
} DsZero;

typedef struct {
    bool present;
    bool use_node_local_storage;  // false
    int tag_validation;           // TagValidation, "Warn"
    bool load_universal;          // false
} DsCheckpoint;

typedef struct {
    bool present;
    bool partition_activations;
    bool cpu_checkpointing;
    bool contiguous_memory_optimization;
    int64_t number_checkpoints;  // -1 = null
    bool synchronize_checkpoint_boundary;
    bool profile;
} DsActivationCheckpointing;

typedef struct {
    bool present;
    int grad_accum_dtype;  // CommDataType values (null = the model dtype)
} DsDataTypes;

// DeepSpeed's tensorboard / csv_monitor sections (monitor/config.py): t5train's report writers, into
// output_path/job_name (tensorboard: the logging_dir unless one is given)
typedef struct {
    bool present;
    bool enabled;                       // false
    char output_path[CONFIG_STR_LEN];   // ""
    char job_name[CONFIG_STR_LEN];      // "DeepSpeedJobName"
} DsMonitor;

// DeepSpeed's aio section (runtime/swap_tensor/aio_config.py): the NVMe offload's asynchronous I/O
typedef struct {
    bool present;
    int64_t block_size;            // 1048576
    int64_t queue_depth;           // 8
    int64_t intra_op_parallelism;  // 1 (older name thread_count)
    bool single_submit;            // false
    bool overlap_events;           // true
    bool use_gds;                  // false
} DsAio;
// DeepSpeed's flops_profiler section (profiling/config.py): the profile of one update (src/train/flops_profiler.h)
typedef struct {
    bool present;
    bool enabled;                        // false
    double recompute_fwd_factor;         // 0.0
    int64_t profile_step;                // 1
    int64_t module_depth;                // -1
    int64_t top_modules;                 // 1
    bool detailed;                       // true
    char output_file[CONFIG_STR_LEN];    // null: stdout
} DsFlopsProfiler;

// DeepSpeed's comms_logger section (comm/config.py CommsLoggerConfig): t5train's collectives timed by CUDA events
// (src/launch/comms_log.h), DeepSpeed's verbose lines and log_summary table (src/report/comms_summary.h)
typedef struct {
    bool present;
    bool enabled;                   // false
    bool verbose;                   // false: one line per collective
    bool prof_all;                  // true: every op; false: only those in prof_ops
    bool debug;                     // false: one record per (op, the collective's name)
    char prof_ops[CONFIG_STR_LEN];  // [] : a list of op names, kept comma-separated (CONFIG_F_LIST)
} DsCommsLogger;

// DeepSpeed's autotuning section (autotuning/config.py): mapped onto the memory planner's automatic plan
// (config_resolve.c, src/cli/autotune.c; docs/config.md "autotuning"); the keys of its trial experiments are
// config_foreign.c no-ops
typedef struct {
    bool present;
    bool enabled;                                 // false
    char results_dir[CONFIG_STR_LEN];             // "autotuning_results"
    int metric;                                   // "throughput|latency|flops"
    int64_t max_train_batch_size;                 // null (-1)
    int64_t min_train_batch_size;                 // 1
    int64_t max_train_micro_batch_size_per_gpu;   // 1024
    int64_t min_train_micro_batch_size_per_gpu;   // 1
} DsAutotuning;

typedef struct {
    int64_t train_batch_size;                // "auto" -> micro * accumulation * world size
    int64_t train_micro_batch_size_per_gpu;  // "auto" -> per_device_train_batch_size
    int64_t gradient_accumulation_steps;     // "auto" -> gradient_accumulation_steps
    int64_t steps_per_print;                 // 10
    bool wall_clock_breakdown;               // false
    bool memory_breakdown;                   // false
    bool dump_state;                         // false
    double gradient_clipping;                // 0 (off); "auto" -> max_grad_norm
    bool prescale_gradients;                 // false
    double gradient_predivide_factor;        // 1.0
    bool sparse_gradients;                   // false
    bool zero_allow_untested_optimizer;      // false
    bool zero_force_ds_cpu_optimizer;        // true
    int communication_data_type;             // CommDataType (null = the model dtype)
    DsDataTypes data_types;
    DsFp16 fp16;
    DsBf16 bf16;
    DsAmp amp;
    DsOptimizer optimizer;
    DsScheduler scheduler;
    DsZero zero_optimization;
    DsCheckpoint checkpoint;
    DsActivationCheckpointing activation_checkpointing;
    DsMonitor tensorboard;
    DsMonitor csv_monitor;
    DsAio aio;
    DsFlopsProfiler flops_profiler;
    DsAutotuning autotuning;
    DsCommsLogger comms_logger;
} DsConfig;

// ---- the whole run
typedef struct {
    // model (run_translation ModelArguments + ours)
    char model_name_or_path[CONFIG_STR_LEN];  // preset name or a directory with config.json
    char config_name[CONFIG_STR_LEN];
    char tokenizer_name[CONFIG_STR_LEN];
    char cache_dir[CONFIG_STR_LEN];
    char model_revision[CONFIG_STR_LEN];  // Hub branch, tag or commit ("main")
    int init;              // ModelInit
    double dropout_rate;   // NAN = the model's own
    // data (run_translation DataTrainingArguments)
    char dataset_name[CONFIG_STR_LEN];
    char dataset_config_name[CONFIG_STR_LEN];
    char source_lang[16];
    char target_lang[16];
    char source_prefix[CONFIG_STR_LEN];
    bool source_prefix_set;  // source_prefix is not null
    char train_file[CONFIG_STR_LEN];
    char validation_file[CONFIG_STR_LEN];
    char test_file[CONFIG_STR_LEN];
    char data_dir[CONFIG_STR_LEN];
    bool overwrite_cache;
    int64_t preprocessing_num_workers;  // -1 = null
    int64_t max_source_length;
    int64_t max_target_length;
    int64_t val_max_target_length;      // -1 = null -> max_target_length
    bool pad_to_max_length;
    int64_t max_train_samples;          // -1 = null (all)
    int64_t max_eval_samples;
    int64_t max_predict_samples;
    int64_t num_beams;                  // -1 = null -> generation_num_beams -> 1
    bool ignore_pad_token_for_loss;
    // training (Seq2SeqTrainingArguments)
    char output_dir[CONFIG_STR_LEN];
    bool overwrite_output_dir;
    bool do_train, do_eval, do_predict;
    int evaluation_strategy;            // IntervalStrategy
    double eval_steps;                  // NAN = null -> logging_steps; < 1: a ratio of the total steps (HF)
    int64_t per_device_train_batch_size;
    int64_t per_device_eval_batch_size;
    int64_t gradient_accumulation_steps;
    double learning_rate;
    double weight_decay;
    double adam_beta1, adam_beta2, adam_epsilon;
    double max_grad_norm;
    double num_train_epochs;
    int64_t max_steps;                  // -1 = use num_train_epochs
    int lr_scheduler_type;              // LrSchedulerType
    double warmup_ratio;
    int64_t warmup_steps;
    int optim;                          // TrainerOptim
    bool adafactor;
    // t5train: transformers' Adafactor(...) arguments for optim adafactor (defaults: what HF's Trainer passes)
    bool adafactor_scale_parameter, adafactor_relative_step, adafactor_warmup_init;
    double adafactor_beta1;             // NAN = None
    double adafactor_clip_threshold, adafactor_decay_rate, adafactor_eps1, adafactor_eps2;
    char logging_dir[CONFIG_STR_LEN];
    int logging_strategy;               // IntervalStrategy
    bool logging_first_step;
    double logging_steps;               // < 1: a ratio of the total steps (HF)
    int save_strategy;                  // IntervalStrategy
    double save_steps;                  // < 1: a ratio of the total steps (HF)
    int64_t save_total_limit;           // -1 = null (keep all)
    bool load_best_model_at_end;
    char metric_for_best_model[96];     // "" = null
    bool greater_is_better;             // null -> HF's default from the metric name (run.c)
    char run_name[256];                 // "" = null -> output_dir
    int64_t early_stopping_patience;    // -1 = null (no early stopping)
    double early_stopping_threshold;
    bool save_on_each_node;
    int64_t seed;
    int64_t data_seed;                  // -1 = null -> seed
    bool fp16, bf16;
    bool fp16_full_eval, bf16_full_eval;
    bool auto_find_batch_size;  // HF --auto_find_batch_size: the micro-batch lowered to fit (planner_find_batch)
    bool disable_tqdm;  // HF --disable_tqdm: no progress bar (progress_set_disabled)
    bool tf32;  // HF --tf32 (null: false): fp32-input GEMMs on TF32 tensor cores (t5_set_tf32)
    bool gradient_checkpointing;
    char zero_plan[16];                 // "auto": the memory planner picks the ZeRO plan (issue 17)
    int64_t local_rank;
    bool dataloader_drop_last;
    int64_t dataloader_num_workers;
    bool group_by_length;
    bool sortish_sampler;
    double label_smoothing_factor;
    bool predict_with_generate;
    int64_t generation_max_length;      // -1 = null -> val_max_target_length
    int64_t generation_num_beams;       // -1 = null
    double length_penalty;
    bool early_stopping;
    bool eval_sort_by_length;           // t5train's own: generation's batches of the length-sorted order (issue 29)
    char report_to[64];
    char resume_from_checkpoint[CONFIG_STR_LEN];
    // the Hub (HF's push_to_hub / hub_*; src/upload/push_to_hub.h)
    bool push_to_hub;
    char hub_model_id[CONFIG_STR_LEN];  // "" = null: the output_dir's name
    char hub_token[CONFIG_STR_LEN];     // "" = null: HF_TOKEN, else the token file (printed and written masked)
    bool hub_private_repo;              // null: the Hub's default (public)
    int hub_strategy;                   // "end|every_save|checkpoint|all_checkpoints" (HubStrategy's order)
    char hub_revision[256];             // "" = null: main
    bool hub_always_push;               // no push skipped: a save waits for the push still running (HF queues it)
    // logging (HF's log levels; "passive|debug|info|warning|error|critical" in LogLevel's order, src/base/common.h)
    int log_level;                      // rank 0 ("passive": run_translation's info)
    int log_level_replica;              // the other ranks ("warning")
    int include_num_input_tokens_seen;  // "no|all|non_padding" (true: all, false: no)
    char deepspeed[CONFIG_STR_LEN];     // the DeepSpeed JSON path, "" when inline or absent
    // DeepSpeed
    bool has_deepspeed;                 // a deepspeed section/file was given
    DsConfig ds;

    // ---- bookkeeping (not keys)
    char config_path[CONFIG_STR_LEN];   // --config FILE ("" if none)
    bool dry_run;                       // --dry_run / --print_config: validate, print, exit 0
    bool help;                          // --help was given
    int world_size;                     // from the launcher (WORLD_SIZE / OMPI_COMM_WORLD_SIZE), 1 by default
    bool model_found;                   // d_model known
    T5Config model;                     // valid when model_found
    int64_t num_training_steps;         // -1 while unknown (dataset size unknown)
    int64_t train_samples;              // -1 while unknown
    bool resolved;
    uint8_t src[CONFIG_MAX_KEYS];       // ConfigSource per table key
    char notes[24][CONFIG_NOTE_LEN];    // why something stays unresolved, implied choices
    int num_notes;
    uint8_t foreign_set[CONFIG_FOREIGN_MAX];  // no-op HF / DeepSpeed keys that were given (config_foreign.c)
} RunConfig;

// ---- HF / DeepSpeed flags and keys without a key here (src/cli/config_foreign.c): never "unknown"
typedef enum {
    FOREIGN_NOOP = 0,  // accepted whatever its value; one note says why it has no effect
    FOREIGN_REFUSE,    // its default (null, false, zero, empty, or a value of `fine`) accepted; else "not implemented"
} ForeignAction;

typedef struct {
    const char* key;       // a top-level HF flag ("tf32") or a "deepspeed.*" key
    int kind;              // ConfigKind: how the command line reads it (CONFIG_BOOL: the flag alone is true)
    ForeignAction action;
    const char* fine;      // FOREIGN_REFUSE: further accepted values, '|'-separated
    const char* reason;    // FOREIGN_NOOP: why it has no effect; FOREIGN_REFUSE: the error
} ForeignKey;

extern const ForeignKey CONFIG_FOREIGN_KEYS[];
extern const int CONFIG_NUM_FOREIGN;
// index in CONFIG_FOREIGN_KEYS, or -1
int config_foreign_index(const char* key);
// a value given to foreign key fi (as command-line text): 0, or T5_EXIT_USAGE with "<where>: <reason>"
int config_foreign_apply(RunConfig* c, int fi, const char* text, const char* where, char* err, size_t errlen);

// ---- the table of keys (src/cli/config_table.c)
typedef enum {
    CONFIG_BOOL = 0,  // bool
    CONFIG_INT,       // int64_t (a JSON real with an integral value is accepted: 1e9)
    CONFIG_FLOAT,     // double
    CONFIG_STR,       // char[] of the size `len`
    CONFIG_ENUM,      // int index into `choices`
    CONFIG_BETAS,     // double[2]
    CONFIG_SECTION,   // a JSON object; the field is its `present` bool
    CONFIG_DEEPSPEED, // the deepspeed key: a path (string) or an inline object
} ConfigKind;

enum {
    CONFIG_F_AUTO = 1 << 0,      // "auto" accepted (the keys the HF Trainer fills)
    CONFIG_F_NULL = 1 << 1,      // JSON null accepted (INT: -1, FLOAT: NAN, STR: "")
    CONFIG_F_NOCASE = 1 << 3,    // ENUM compared case-insensitively (DeepSpeed optimizer/scheduler types)
    CONFIG_F_TRUNCATE = 1 << 4,  // INT: a fractional value is truncated (DeepSpeed sizes, as pydantic int())
    CONFIG_F_NOCLI = 1 << 5,     // not a command-line flag (file only)
    CONFIG_F_SECRET = 1 << 6,    // STR: printed and written as "<KEY_NAME>" (HF's TrainingArguments.to_dict: hub_token)
    CONFIG_F_BOOLENUM = 1 << 7,  // ENUM: true / false also accepted, as the 2nd / 1st choice (HF's str | bool fields)
    CONFIG_F_LIST = 1 << 8,      // STR: a JSON list of strings (no ','), kept joined by ','; printed and written as a list
    CONFIG_F_AUTOVALUE = 1 << 9, // "auto" is a value of DeepSpeed's own, not an HF fill (ZenFlow's Union[str, int]
                                 // intervals): INT stores CONFIG_INT_AUTO; ENUM has "auto" among its choices
};

typedef struct {
    const char* key;      // dotted path as in the JSON: "learning_rate", "deepspeed.fp16.enabled"
    ConfigKind kind;
    size_t offset;        // of the field in RunConfig
    size_t len;           // STR: the field's size
    const char* def;      // default, as JSON text ("5e-5", "true", "\"linear\"", "null"); NULL for sections
    double lo, hi;        // INT / FLOAT: inclusive range
    const char* choices;  // ENUM: "a|b|c" in the order of the C enum
    unsigned flags;       // CONFIG_F_*
    const char* help;
} ConfigKey;

extern const ConfigKey CONFIG_KEYS[];
extern const int CONFIG_NUM_KEYS;

// other spellings of keys, accepted in files and as flags: {alias, canonical key}
typedef struct {
    const char* alias;
    const char* key;
} ConfigAlias;
extern const ConfigAlias CONFIG_ALIASES[];
extern const int CONFIG_NUM_ALIASES;

// ---- API
// Defaults from the table (never fails).
void config_init(RunConfig* c);
// Index of a key (or alias) in CONFIG_KEYS, -1 if unknown.
int config_key_index(const char* key);
// deepspeed.comms_logger's ops as a mask of 1u << CommsOp (src/launch/comms_log.h): every op with prof_all, plus
// prof_ops. T5_EXIT_USAGE and one line listing t5train's op names when prof_ops names another.
int config_comms_ops(const DsCommsLogger* cl, unsigned* ops, char* err, size_t n);
// zero_optimization.zenflow as src/zero's options ("auto" intervals: ZENFLOW_AUTO)
ZenflowOpts config_zenflow_opts(const DsZenflow* z);
// The run's dtype: --fp16 / --bf16, or the DeepSpeed section's fp16 / bf16 "enabled"; else fp32.
DType config_run_dtype(const RunConfig* c);
// Source of a key's value (CONFIG_SRC_*), by key name; -1 if the key is unknown.
int config_key_source(const RunConfig* c, const char* key);
// Loads a job config (training keys + optional "deepspeed") on top of c.
int config_load_file(RunConfig* c, const char* path, char* err, size_t errlen);
// Loads a DeepSpeed JSON file as the deepspeed section (replacing any earlier one).
int config_load_deepspeed_file(RunConfig* c, const char* path, char* err, size_t errlen);
// Applies a JSON text (a job config) as if it were a file called `name` (for tests and inline use).
int config_load_string(RunConfig* c, const char* text, const char* name, char* err, size_t errlen);
// Parses argv (argv[0] is the program): --config/--deepspeed files first, then every other flag
// (flags beat files). --help sets c->help and returns 0 at once.
int config_parse_args(RunConfig* c, int argc, char** argv, char* err, size_t errlen);
// Fills "auto" and the null fallbacks, checks cross-key rules. Needs world_size set (default 1).
int config_resolve(RunConfig* c, char* err, size_t errlen);
// The gradient clip norm a resolved config trains with (0: off): with a DeepSpeed section its gradient_clipping,
// which is absent = 0 = off unless the JSON says "auto" (then max_grad_norm), as DeepSpeed and HF's Trainer (its
// integration fills only "auto"; the Trainer leaves clipping to DeepSpeed); without one, max_grad_norm.
double config_clip_norm(const RunConfig* c);
// HF's output_dir rule: refuse a non-empty output_dir when training without overwrite_output_dir.
int config_check_output_dir(const RunConfig* c, char* err, size_t errlen);
// The one place that compares what the config asks for with what this build implements.
// Returns 0, or T5_EXIT_FAILURE with "not implemented yet: <what>" in err.
int config_check_implemented(const RunConfig* c, char* err, size_t errlen);
// The startup table (llm.c style) of every resolved key.
void config_print_table(const RunConfig* c, FILE* f);
// --help text, generated from the table.
void config_print_help(FILE* f);
// The resolved config as JSON (loadable again with --config). Returns 0 or T5_EXIT_FAILURE.
int config_write_json(const RunConfig* c, const char* path, char* err, size_t errlen);
// A hash of the resolved config (what t5train_config.json holds, less local_rank): the ranks of one run must agree.
uint64_t config_hash(const RunConfig* c);
// Formats one key's value as it is printed in the table (for tests): "auto" if unresolved.
void config_format_value(const RunConfig* c, int key_index, char* buf, size_t len);
// Levenshtein distance, case-insensitive (for "did you mean").
int config_edit_distance(const char* a, const char* b);

#ifdef __cplusplus
}
#endif
