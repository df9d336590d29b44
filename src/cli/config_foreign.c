/*
 * config_foreign.c: the flags and keys of HF and DeepSpeed that t5train does not mirror with a key of its own,
 * so that none is ever "unknown" (issue 32). Each is either
 *   - a no-op: it means nothing for one compiled binary (torch.compile, DDP knobs, dataloader workers, ...); it is
 *     accepted whatever its value and the run prints one note saying why it has no effect; or
 *   - refused: its engine does not exist yet; the default value (and null / false / the values in `fine`) is
 *     accepted silently, anything else stops with "not implemented yet: <reason>".
 * test_config_foreign checks that every flag of test/fixtures/config/hf_args.tsv (written by scripts/list_hf_args.py
 * from the installed transformers) and every DeepSpeed key of test/fixtures/config/ds_keys.tsv (scripts/list_ds_keys.py,
 * from the installed DeepSpeed) is a key, an alias, or listed here (a section listed here covers its keys). A
 * DeepSpeed section counts as its "enabled" value when it has one.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"
#include "../base/common.h"

#define NOOP FOREIGN_NOOP
#define REFUSE FOREIGN_REFUSE
#define B CONFIG_BOOL
#define I CONFIG_INT
#define F CONFIG_FLOAT
#define S CONFIG_STR

#define TORCH_COMPILE "the model is compiled CUDA already (cuBLASLt GEMMs, fused kernels, CUDA graphs)"
#define DDP "a knob of PyTorch DDP; t5train's data parallelism is its ZeRO engine over NCCL (docs/zero.md)"
#define LOADER "a knob of torch's DataLoader; t5train reads an mmap'ed token cache in the training process"
#define COLUMNS "a datasets column option; t5train reads translation pairs, not dataset columns"
#define TRACKIO "used by --report_to trackio, which t5train does not write (report_to: tensorboard, csv)"

const ForeignKey CONFIG_FOREIGN_KEYS[] = {
    // ---- run_translation.py ModelArguments / DataTrainingArguments
    {"use_fast_tokenizer", B, NOOP, "", "t5train's SentencePiece tokenizer gives the ids of HF's fast and slow ones (docs/data.md)"},
    {"token", S, REFUSE, "", "not implemented yet: --token (set HF_TOKEN, or log in with huggingface_hub: docs/download.md)"},
    {"trust_remote_code", B, NOOP, "", "no remote code runs: T5 is compiled in"},
    {"forced_bos_token", S, NOOP, "", "used with mBART / M2M100 tokenizers only; run_translation ignores it for T5"},
    // ---- Seq2SeqTrainingArguments: optimizer and schedule
    {"lr_scheduler_kwargs", S, REFUSE, "{}", "not implemented yet: options of the LR schedules beyond HF's defaults"},
    {"optim_args", S, REFUSE, "", "not implemented yet: optim_args (the optimizer's options are the adam_* / adafactor_* keys)"},
    {"optim_target_modules", S, REFUSE, "", "not implemented yet: GaLore / APOLLO target modules"},
    {"average_tokens_across_devices", B, NOOP, "",
     "the loss of several ranks is DeepSpeed's mean of the ranks' batch means whatever its value "
     "(docs/training_results.md section 6)"},
    // ---- compute
    {"gradient_checkpointing_kwargs", S, NOOP, "", "t5train's recomputation has no use_reentrant or other variants"},
    {"torch_compile", B, NOOP, "", TORCH_COMPILE},
    {"torch_compile_backend", S, NOOP, "", TORCH_COMPILE},
    {"torch_compile_mode", S, NOOP, "", TORCH_COMPILE},
    {"use_liger_kernel", B, NOOP, "", "Liger's Triton kernels are for PyTorch models; t5train's are fused CUDA already"},
    {"liger_kernel_config", S, NOOP, "", "Liger's Triton kernels are for PyTorch models; t5train's are fused CUDA already"},
    {"use_cache", B, NOOP, "", "training never uses the KV cache and generation always does"},
    {"neftune_noise_alpha", F, REFUSE, "", "not implemented yet: NEFTune embedding noise"},
    {"torch_empty_cache_steps", I, NOOP, "", "t5train allocates its buffers once; there is no caching allocator to empty"},
    {"use_cpu", B, REFUSE, "", "t5train trains on NVIDIA GPUs only"},
    {"full_determinism", B, NOOP, "",
     "runs are deterministic already (fixed kernels and reduction orders, counter-based dropout)"},
    // ---- logging
    {"log_on_each_node", B, NOOP, "", "t5train logs from global rank 0 only (HF's log_on_each_node false; the same on one "
     "node); the other ranks follow log_level_replica"},
    {"logging_nan_inf_filter", B, NOOP, "",
     "a non-finite loss is never averaged into the log: fp16 skips the step (DeepSpeed's OVERFLOW line), bf16 and "
     "fp32 stop with an error"},
    {"project", S, NOOP, "", TRACKIO},
    {"trackio_space_id", S, NOOP, "", TRACKIO},
    {"trackio_bucket_id", S, NOOP, "", TRACKIO},
    {"trackio_static_space_id", S, NOOP, "", TRACKIO},
    {"skip_memory_metrics", B, NOOP, "", "t5train does not add HF's memory-tracker metrics to the results files"},
    // ---- evaluation
    {"eval_delay", F, REFUSE, "0|0.0", "not implemented yet: --eval_delay"},
    {"prediction_loss_only", B, REFUSE, "",
     "not implemented yet: --prediction_loss_only (predict_with_generate false gives a loss-only evaluation)"},
    {"eval_on_start", B, REFUSE, "", "not implemented yet: --eval_on_start"},
    {"eval_do_concat_batches", B, NOOP, "", "evaluation metrics are computed without concatenating tensors"},
    {"eval_use_gather_object", B, NOOP, "", "evaluation metrics are computed without gathering Python objects"},
    {"eval_accumulation_steps", I, NOOP, "",
     "each batch's generated ids and loss go to host memory as they come (HF with eval_accumulation_steps 1); the "
     "metrics do not depend on it"},
    {"include_for_metrics", S, REFUSE, "[]", "not implemented yet: compute_metrics is run_translation's (BLEU, gen_len)"},
    {"batch_eval_metrics", B, REFUSE, "", "not implemented yet: metrics are computed over the whole split"},
    // ---- checkpoints and the Hub
    // transformers 4.x (removed in 5: safetensors always); older launch scripts still pass it
    {"save_safetensors", B, REFUSE, "true|True|1",
     "not implemented: pytorch_model.bin (t5train saves model.safetensors always, as transformers 5 does)"},
    {"save_only_model", B, REFUSE, "", "not implemented yet: checkpoints always hold the optimizer state"},
    {"enable_jit_checkpoint", B, REFUSE, "", "not implemented yet: --enable_jit_checkpoint"},
    {"ignore_data_skip", B, REFUSE, "", "not implemented yet: a resume always restores the exact data position"},
    {"restore_callback_states_from_checkpoint", B, NOOP, "",
     "t5train has no callbacks; early stopping's state is always restored"},
    // ---- data loading
    {"dataloader_pin_memory", B, NOOP, "", LOADER},
    {"dataloader_persistent_workers", B, NOOP, "", LOADER},
    {"dataloader_prefetch_factor", I, NOOP, "", LOADER},
    {"dataloader_multiprocessing_context", S, NOOP, "", LOADER},
    {"dataloader_in_order", B, NOOP, "", LOADER},
    {"remove_unused_columns", B, NOOP, "", COLUMNS},
    {"label_names", S, NOOP, "", COLUMNS},
    {"length_column_name", S, NOOP, "", COLUMNS},
    {"train_sampling_strategy", S, REFUSE, "random", "not implemented yet: sampling strategies other than random"},
    // ---- distributed
    {"accelerator_config", S, REFUSE, "{}", "not implemented yet: Accelerate's options"},
    {"parallelism_config", S, REFUSE, "{}", "not implemented yet: tensor / context / sequence parallelism"},
    {"ddp_find_unused_parameters", B, NOOP, "", DDP},
    {"ddp_bucket_cap_mb", I, NOOP, "", DDP},
    {"ddp_broadcast_buffers", B, NOOP, "", DDP},
    {"ddp_static_graph", B, NOOP, "", DDP},
    {"ddp_backend", S, REFUSE, "nccl", "t5train's collectives run over NCCL only"},
    {"ddp_timeout", I, NOOP, "", "collectives are watched by t5train's NCCL watchdog instead (docs/launch.md)"},
    {"fsdp", S, REFUSE, "[]", "not implemented: FSDP (t5train shards with --deepspeed ZeRO-3)"},
    {"fsdp_config", S, REFUSE, "{}", "not implemented: FSDP (t5train shards with --deepspeed ZeRO-3)"},
    {"debug", S, REFUSE, "[]", "not implemented yet: HF's debug options (underflow_overflow, tpu_metrics_debug)"},
    {"generation_config", S, REFUSE, "",
     "not implemented yet: a separate generation config (the model's generation_config.json and the generation_* "
     "flags are read)"},

    // ---- DeepSpeed 0.19.8: sections t5train has no engine for (accepted when absent, empty or "enabled": false)
#define DS "deepspeed."
#define SECTION(name, why) {DS name, S, REFUSE, "", "not implemented yet: DeepSpeed's " name " (" why ")"}
    SECTION("comet", "the monitors t5train writes: --report_to tensorboard, csv"),
    SECTION("wandb", "no network on these machines; --report_to tensorboard, csv"),
    SECTION("compression_training", "no quantization-aware training or pruning"),
    SECTION("curriculum_learning", "the data order is HF's random sampler"),
    SECTION("data_efficiency", "the data order is HF's random sampler"),
    SECTION("eigenvalue", "no eigenvalue-based schedules"),
    SECTION("elasticity", "the world size is fixed at launch"),
    SECTION("hybrid_engine", "no RLHF inference engine"),
    SECTION("nebula", "checkpoints are written by t5train itself: docs/checkpoints.md"),
    SECTION("datastates_ckpt", "checkpoints are written by t5train itself: docs/checkpoints.md"),
    SECTION("pipeline", "no pipeline parallelism"),
    SECTION("progressive_layer_drop", "no layer drop"),
    SECTION("quantize_training", "no quantized training"),
    SECTION("sparse_attention", "T5's attention is dense"),
    SECTION("tensor_parallel", "no tensor parallelism"),
    SECTION("weight_quantization", "no quantized weights"),
    SECTION("expert_parallel", "T5 has no experts"),
    SECTION("torch_autocast", "the fp16 / bf16 sections set the precision"),
    {DS "compile", S, NOOP, "", TORCH_COMPILE},
    {DS "timers", S, NOOP, "", "t5train times every step itself (step_ms in trainer_log.jsonl)"},
    {DS "graph_harvesting", B, NOOP, "", "t5train captures its own CUDA graphs"},
    {DS "disable_allgather", B, NOOP, "", "a legacy option of DeepSpeed's engine"},
    {DS "disable_python_gc", S, NOOP, "", "there is no Python garbage collector in t5train"},
    {DS "dataloader_drop_last", B, NOOP, "", "DeepSpeed's own dataloader is not used (HF's dataloader_drop_last is)"},
    {DS "vocabulary_size", I, NOOP, "", "the vocabulary size is read from the model's config.json"},
    {DS "log_level", S, NOOP, "", "DeepSpeed's Python logger level; t5train prints DeepSpeed's lines (OVERFLOW) always"},
    {DS "managed_gradient_accumulation", B, NOOP, "", "t5train always accumulates gradient_accumulation_steps itself"},
    {DS "use_data_before_expert_parallelism", B, NOOP, "", "T5 has no experts"},
    {DS "seq_parallel_communication_data_type", S, NOOP, "", "there is no sequence parallelism"},
    {DS "gradient_allreduce_op", S, REFUSE, "mean", "not implemented yet: gradient_allreduce_op sum (ranks' gradients are averaged)"},
    // ---- DeepSpeed 0.19.8: keys inside sections t5train has
    // autotuning: the planner predicts each plan's memory and step time instead of launching trial runs
#define AT DS "autotuning."
#define TRIALS "t5train's memory planner predicts each plan's memory and step time instead of running trial experiments"
    {AT "fast", B, NOOP, "", TRIALS " (it plans the stage, offloads and micro-batch together)"},
    {AT "exps_dir", S, NOOP, "", TRIALS " (no experiment folders)"},
    {AT "overwrite", B, NOOP, "", TRIALS " (ds_config_optimal.json is always rewritten)"},
    {AT "start_profile_step", I, NOOP, "", TRIALS " (no profiled trial steps)"},
    {AT "end_profile_step", I, NOOP, "", TRIALS " (no profiled trial steps)"},
    {AT "tuner_type", S, NOOP, "", TRIALS " (every plan is evaluated: no tuner)"},
    {AT "tuner_early_stopping", I, NOOP, "", TRIALS " (every plan is evaluated: no tuner)"},
    {AT "tuner_num_trials", I, NOOP, "", TRIALS " (every plan is evaluated: no tuner)"},
    {AT "num_tuning_micro_batch_sizes", I, NOOP, "", TRIALS " (every micro-batch in the bounds is evaluated)"},
    {AT "arg_mappings", S, NOOP, "", "t5train's flags are HF's names already: the chosen batch goes straight into the run"},
    {AT "metric_path", S, NOOP, "", TRIALS " (no trial writes a metric file)"},
    {AT "model_info", S, NOOP, "", "t5train knows the model's parameters and shapes from its config.json"},
    {AT "model_info_path", S, NOOP, "", "t5train knows the model's parameters and shapes from its config.json"},
    {AT "mp_size", I, REFUSE, "1", "not implemented yet: model parallelism (autotuning.mp_size above 1)"},
    {DS "bf16.bf16_master_weights_and_grads", B, REFUSE, "", "not implemented yet: bf16 master weights (the master is fp32)"},
    {DS "bf16.bf16_optimizer_states", B, REFUSE, "", "not implemented yet: bf16 optimizer states (Adam's are fp32)"},
    {DS "bf16.immediate_grad_update", B, REFUSE, "", "not implemented yet: bf16 immediate_grad_update"},
    {DS "bf16.check_grad_overflow", B, REFUSE, "true",
     "not implemented yet: bf16 without the overflow check (a non-finite bf16 gradient stops the run)"},
    {DS "checkpoint.checkpoint_serialization", B, NOOP, "", "t5train's checkpoint writer is its own: docs/checkpoints.md"},
    {DS "checkpoint.parallel_write", S, NOOP, "", "t5train's checkpoint writer is its own: docs/checkpoints.md"},
    {DS "checkpoint.writer", S, NOOP, "", "t5train's checkpoint writer is its own: docs/checkpoints.md"},
    {DS "data_types.buffer_dtype", S, REFUSE, "", "not implemented yet: data_types.buffer_dtype"},
    {DS "data_types.param_dtype", S, REFUSE, "", "not implemented yet: data_types.param_dtype (fp16 / bf16 set it)"},
    {DS "data_types.keep_in_fp32_modules", S, REFUSE, "[]", "not implemented yet: data_types.keep_in_fp32_modules"},
    {DS "optimizer.legacy_fusion", B, NOOP, "", "t5train's AdamW is one fused kernel"},
    // ---- zero_optimization
#define ZO DS "zero_optimization."
#define ZPP "not implemented yet: ZeRO++ "
    {ZO "zero_quantized_weights", B, REFUSE, "", ZPP "quantized weights"},
    {ZO "zero_quantized_nontrainable_weights", B, REFUSE, "", ZPP "quantized non-trainable weights"},
    {ZO "zero_quantized_gradients", B, REFUSE, "", ZPP "quantized gradients"},
    {ZO "zero_hpz_partition_size", I, REFUSE, "1", ZPP "hierarchical partitioning (zero_hpz_partition_size)"},
    {ZO "zeropp_loco_param", S, REFUSE, "", ZPP "LoCo"},
    {ZO "mics_shard_size", I, REFUSE, "-1", "not implemented yet: MiCS"},
    {ZO "mics_hierarchical_params_gather", B, REFUSE, "", "not implemented yet: MiCS"},
    {ZO "zenflow.steps_per_epoch", I, REFUSE, "",
     "not implemented: setting zenflow.steps_per_epoch (DeepSpeed fills it from its training_dataloader, \"should not "
     "be set by users\"; t5train counts an epoch's micro-steps itself)"},
    {ZO "cpu_offload", B, REFUSE, "", "DeepSpeed's deprecated name: write offload_optimizer: {\"device\": \"cpu\"}"},
    {ZO "cpu_offload_param", B, REFUSE, "", "DeepSpeed's deprecated name: write offload_param: {\"device\": \"cpu\"}"},
    {ZO "cpu_offload_use_pin_memory", B, REFUSE, "",
     "DeepSpeed's deprecated name: write pin_memory inside offload_optimizer / offload_param"},
    {ZO "legacy_stage1", B, REFUSE, "", "not implemented yet: DeepSpeed's legacy stage 1"},
    {ZO "stage3_allgather_sequential", B, REFUSE, "", "not implemented yet: sequential all-gathers"},
    {ZO "allgather_sequential", B, REFUSE, "", "not implemented yet: sequential all-gathers"},
    {ZO "stage3_use_all_reduce_for_fetch_params", B, REFUSE, "", "not implemented yet: all-reduce to fetch parameters"},
    {ZO "use_all_reduce_for_fetch_params", B, REFUSE, "", "not implemented yet: all-reduce to fetch parameters"},
    {ZO "stage3_module_granularity_threshold", I, REFUSE, "", "not implemented yet: module granularity (T5's units are fixed)"},
    {ZO "module_granularity_threshold", I, REFUSE, "", "not implemented yet: module granularity (T5's units are fixed)"},
    {ZO "stage3_model_persistence_threshold", I, REFUSE, "9223372036854775807|9.2233720368547758e+18",
     "not implemented yet: a model-wide persistence limit (stage3_param_persistence_threshold is honoured)"},
    {ZO "model_persistence_threshold", I, REFUSE, "9223372036854775807|9.2233720368547758e+18",
     "not implemented yet: a model-wide persistence limit (stage3_param_persistence_threshold is honoured)"},
    {ZO "pipeline_loading_checkpoint", B, REFUSE, "", "not implemented yet: pipeline_loading_checkpoint"},
    {ZO "parameter_alignment", B, REFUSE, "", "not implemented yet: parameter_alignment"},
    {ZO "compute_grad_norm", B, NOOP, "", "the gradient norm is always computed (it is logged as grad_norm)"},
    {ZO "enable_sanity_checks", B, NOOP, "", "a debug check of DeepSpeed's Python partitioner"},
    {ZO "leaf_module", S, NOOP, "", "T5's ZeRO-3 units are fixed (docs/zero.md)"},
    {ZO "log_trace_cache_warnings", B, NOOP, "", "t5train's stage 3 unit order is static (no trace cache)"},
    {ZO "memory_efficient_linear", B, NOOP, "", "t5train's linear layers keep only what their backward reads"},
    {ZO "override_module_apply", B, NOOP, "", "a PyTorch module hook of DeepSpeed's stage 3"},
    {ZO "save_muon_momentum_buffer_in_memory", B, NOOP, "", "Muon is not an optimizer here"},
    {ZO "use_multi_rank_bucket_allreduce", B, NOOP, "", "t5train's reductions are its own buckets (reduce_bucket_size)"},
    {ZO "offload_optimizer.cpuadam_cores_perc", F, REFUSE, "0.8",
     "not implemented yet: cpuadam_cores_perc (the CPU AdamW uses this rank's share of the cores)"},
    {ZO "offload_optimizer.super_offload", B, REFUSE, "", "not implemented yet: SuperOffload"},
};
const int CONFIG_NUM_FOREIGN = (int)(sizeof CONFIG_FOREIGN_KEYS / sizeof CONFIG_FOREIGN_KEYS[0]);

int config_foreign_index(const char* key) {
    for (int i = 0; i < CONFIG_NUM_FOREIGN; i++)
        if (strcmp(CONFIG_FOREIGN_KEYS[i].key, key) == 0) return i;
    return -1;
}

// a JSON value as the text a command line would hold ("true", "0", "[]", the string itself)
static void value_text(const json_t* v, char* out, size_t n) {
    const json_t* en = json_is_object(v) ? json_object_get(v, "enabled") : NULL;
    if (en && json_is_boolean(en)) snprintf(out, n, "%s", json_is_true(en) ? "true" : "false");  // a section
    else if (json_is_string(v)) snprintf(out, n, "%s", json_string_value(v));
    else if (json_is_true(v)) snprintf(out, n, "true");
    else if (json_is_false(v)) snprintf(out, n, "false");
    else if (json_is_null(v)) snprintf(out, n, "null");
    else if (json_is_number(v)) snprintf(out, n, "%.17g", json_number_value(v));
    else if (json_is_array(v)) snprintf(out, n, json_array_size(v) ? "[...]" : "[]");
    else snprintf(out, n, json_object_size(v) ? "{...}" : "{}");
}

// the values a refused key may hold: null, empty, one of `fine` ('|'-separated), and, when `fine` is empty
// (the default is off), false and zero
static bool fine_value(const ForeignKey* k, const char* s) {
    if (!s[0] || strcmp(s, "null") == 0 || strcmp(s, "None") == 0 || strcmp(s, "{}") == 0 || strcmp(s, "[]") == 0)
        return true;
    if (!k->fine[0]) {
        if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0) return true;
        char* end;
        double d = strtod(s, &end);
        if (end != s && !*end && d == 0 && k->kind != CONFIG_STR) return true;
    }
    size_t len = strlen(s);
    for (const char* p = k->fine; *p;) {
        const char* bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == len && strncmp(p, s, l) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

int config_foreign_apply(RunConfig* c, int fi, const char* text, const char* where, char* err, size_t n) {
    const ForeignKey* k = &CONFIG_FOREIGN_KEYS[fi];
    if (k->action == FOREIGN_REFUSE && !fine_value(k, text))
        return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s", where, k->reason);
    if (k->action == FOREIGN_NOOP && fi < CONFIG_FOREIGN_MAX) c->foreign_set[fi] = 1;
    return 0;
}

int config_foreign_apply_json(RunConfig* c, int fi, const json_t* v, const char* where, char* err, size_t n) {
    char text[256];
    value_text(v, text, sizeof text);
    return config_foreign_apply(c, fi, text, where, err, n);
}

void config_foreign_notes(RunConfig* c) {
    for (int i = 0; i < CONFIG_NUM_FOREIGN && i < CONFIG_FOREIGN_MAX; i++)
        if (c->foreign_set[i])
            add_note(c, "%s: accepted, no effect: %s", CONFIG_FOREIGN_KEYS[i].key, CONFIG_FOREIGN_KEYS[i].reason);
}
