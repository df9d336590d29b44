/*
 * config_foreign.c: the flags and keys of HF and DeepSpeed that t5train does not mirror with a key of its own,
 * so that none is ever "unknown" (issue 32). Each is either
 *   - a no-op: it means nothing for one compiled binary (torch.compile, DDP knobs, dataloader workers, ...); it is
 *     accepted whatever its value and the run prints one note saying why it has no effect; or
 *   - refused: its engine does not exist yet; the default value (and null / false / the values in `fine`) is
 *     accepted silently, anything else stops with "not implemented yet: <reason>".
 * test_config_foreign checks that every flag of test/fixtures/config/hf_args.tsv (written by scripts/list_hf_args.py
 * from the installed transformers) is a key, an alias, or listed here. DeepSpeed's keys: not listed yet.
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
#define HUB "used by --push_to_hub, which is not implemented yet"
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
    {"tf32", B, REFUSE, "", "not implemented yet: --tf32 (fp32 GEMMs run in full fp32)"},
    {"gradient_checkpointing_kwargs", S, NOOP, "", "t5train's recomputation has no use_reentrant or other variants"},
    {"torch_compile", B, NOOP, "", TORCH_COMPILE},
    {"torch_compile_backend", S, NOOP, "", TORCH_COMPILE},
    {"torch_compile_mode", S, NOOP, "", TORCH_COMPILE},
    {"use_liger_kernel", B, NOOP, "", "Liger's Triton kernels are for PyTorch models; t5train's are fused CUDA already"},
    {"liger_kernel_config", S, NOOP, "", "Liger's Triton kernels are for PyTorch models; t5train's are fused CUDA already"},
    {"use_cache", B, NOOP, "", "training never uses the KV cache and generation always does"},
    {"neftune_noise_alpha", F, REFUSE, "", "not implemented yet: NEFTune embedding noise"},
    {"torch_empty_cache_steps", I, NOOP, "", "t5train allocates its buffers once; there is no caching allocator to empty"},
    {"auto_find_batch_size", B, REFUSE, "",
     "not implemented yet: --auto_find_batch_size (per_device_train_batch_size auto with --zero_plan auto picks the "
     "largest batch that fits: docs/estimate.md)"},
    {"use_cpu", B, REFUSE, "", "t5train trains on NVIDIA GPUs only"},
    {"full_determinism", B, NOOP, "",
     "runs are deterministic already (fixed kernels and reduction orders, counter-based dropout)"},
    // ---- logging
    {"log_on_each_node", B, NOOP, "", "t5train logs from rank 0 only"},
    {"logging_nan_inf_filter", B, NOOP, "",
     "a non-finite loss is never averaged into the log: fp16 skips the step (DeepSpeed's OVERFLOW line), bf16 and "
     "fp32 stop with an error"},
    {"include_num_input_tokens_seen", S, REFUSE, "no", "not implemented yet: --include_num_input_tokens_seen"},
    {"log_level", S, REFUSE, "passive|info", "not implemented yet: log levels other than info (t5train logs HF's info lines)"},
    {"log_level_replica", S, NOOP, "", "ranks other than 0 print errors only"},
    {"disable_tqdm", B, REFUSE, "", "not implemented yet: --disable_tqdm (the progress bar always prints)"},
    {"project", S, NOOP, "", TRACKIO},
    {"trackio_space_id", S, NOOP, "", TRACKIO},
    {"trackio_bucket_id", S, NOOP, "", TRACKIO},
    {"trackio_static_space_id", S, NOOP, "", TRACKIO},
    {"skip_memory_metrics", B, NOOP, "", "t5train does not add HF's memory-tracker metrics to the results files"},
    // ---- evaluation
    {"eval_delay", F, REFUSE, "0", "not implemented yet: --eval_delay"},
    {"prediction_loss_only", B, REFUSE, "",
     "not implemented yet: --prediction_loss_only (predict_with_generate false gives a loss-only evaluation)"},
    {"eval_on_start", B, REFUSE, "", "not implemented yet: --eval_on_start"},
    {"eval_do_concat_batches", B, NOOP, "", "evaluation metrics are computed without concatenating tensors"},
    {"eval_use_gather_object", B, NOOP, "", "evaluation metrics are computed without gathering Python objects"},
    {"eval_accumulation_steps", I, NOOP, "", "generated ids go to host memory batch by batch already"},
    {"include_for_metrics", S, REFUSE, "[]", "not implemented yet: compute_metrics is run_translation's (BLEU, gen_len)"},
    {"batch_eval_metrics", B, REFUSE, "", "not implemented yet: metrics are computed over the whole split"},
    // ---- checkpoints and the Hub
    {"save_only_model", B, REFUSE, "", "not implemented yet: checkpoints always hold the optimizer state"},
    {"enable_jit_checkpoint", B, REFUSE, "", "not implemented yet: --enable_jit_checkpoint"},
    {"push_to_hub", B, REFUSE, "", "not implemented yet: --push_to_hub"},
    {"hub_token", S, NOOP, "", HUB},
    {"hub_private_repo", B, NOOP, "", HUB},
    {"hub_model_id", S, NOOP, "", HUB},
    {"hub_strategy", S, NOOP, "", HUB},
    {"hub_always_push", B, NOOP, "", HUB},
    {"hub_revision", S, NOOP, "", HUB},
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
};
const int CONFIG_NUM_FOREIGN = (int)(sizeof CONFIG_FOREIGN_KEYS / sizeof CONFIG_FOREIGN_KEYS[0]);

int config_foreign_index(const char* key) {
    for (int i = 0; i < CONFIG_NUM_FOREIGN; i++)
        if (strcmp(CONFIG_FOREIGN_KEYS[i].key, key) == 0) return i;
    return -1;
}

// a JSON value as the text a command line would hold ("true", "0", "[]", the string itself)
static void value_text(const json_t* v, char* out, size_t n) {
    if (json_is_string(v)) snprintf(out, n, "%s", json_string_value(v));
    else if (json_is_true(v)) snprintf(out, n, "true");
    else if (json_is_false(v)) snprintf(out, n, "false");
    else if (json_is_null(v)) snprintf(out, n, "null");
    else if (json_is_number(v)) snprintf(out, n, "%.17g", json_number_value(v));
    else if (json_is_array(v)) snprintf(out, n, json_array_size(v) ? "[...]" : "[]");
    else snprintf(out, n, json_object_size(v) ? "{...}" : "{}");
}

// the values a refused key may hold: null, false, empty, zero, or one of `fine` ('|'-separated)
static bool fine_value(const ForeignKey* k, const char* s) {
    if (!s[0] || strcmp(s, "null") == 0 || strcmp(s, "None") == 0 || strcmp(s, "false") == 0 ||
        strcmp(s, "False") == 0)
        return true;
    char* end;
    double d = strtod(s, &end);
    if (end != s && !*end && d == 0 && k->kind != CONFIG_STR) return true;
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
