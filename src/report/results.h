/*
 * results.h: the JSON files HF's Trainer leaves in output_dir, written the way HF writes them.
 *
 *   train_results.json / eval_results.json / predict_results.json   Trainer.save_metrics(split, m)
 *       json.dump(m, indent=4, sort_keys=True), no trailing newline
 *   all_results.json                                                 save_metrics(combined=True): the old
 *       file's dict updated with m (so train then eval gives the union, eval's keys winning)
 *   trainer_state.json                                               TrainerState.save_to_json
 *       json.dumps(asdict(state), indent=2, sort_keys=True) + "\n", in output_dir and in every checkpoint
 *   "***** train metrics *****" console block                        Trainer.log_metrics (metrics_format)
 *
 * Numbers are printed as Python prints them (shortest round-trip repr, "1.0" for integral floats), so a
 * file written here is byte-identical to HF's for the same values. Every file is written atomically:
 * <path>.tmp-<pid>, fsync, rename, fsync of the directory. Errors are returned (message in err naming the
 * file), never fatal: the caller decides.
 */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../model/t5_config.h"

#ifdef __cplusplus
extern "C" {
#endif

// Python json.dumps(v, indent=indent, sort_keys=sort_keys) (indent < 0: separators ", " ": " on one line).
// Floats as Python's repr, non-ASCII escaped as \uXXXX (ensure_ascii). Returns a malloc'd string.
char* results_dumps(const json_t* v, int indent, bool sort_keys);

// Writes len bytes to path atomically (temp file in the same directory, fsync, rename, fsync dir).
// Returns 0, or -1 with a message in err.
int results_write_atomic(const char* path, const void* data, size_t len, char* err, size_t errcap);

// Sets obj[key] = v as a JSON real, or null when v is NaN/inf (jansson cannot hold those).
void results_set_real(json_t* obj, const char* key, double v);
void results_set_int(json_t* obj, const char* key, int64_t v);

// HF's speed_metrics(split, start_time, num_samples, num_steps, num_tokens): <split>_runtime (rounded to 4),
// <split>_samples_per_second, _steps_per_second, _tokens_per_second (rounded to 3); a count < 0 is left out,
// and nothing but the runtime when runtime == 0.
void results_speed_metrics(json_t* m, const char* split, double runtime, int64_t num_samples, int64_t num_steps,
                           int64_t num_tokens);

// The train split's speed metrics as HF's Trainer computes them at the end of training (speed_metrics("train",
// start_time, num_samples=num_train_samples, num_steps=state.max_steps)): train_runtime (this session's wall
// time), train_samples_per_second = num_train_samples / runtime with num_train_samples = max_steps_arg *
// total_train_batch_size when --max_steps > 0, else num_examples * num_train_epochs_arg; train_steps_per_second =
// state_max_steps / runtime. (HF counts the whole run's samples and steps even after a resume, over this
// session's runtime; so does this.)
void results_train_speed_metrics(json_t* m, double runtime, int64_t max_steps_arg, double num_train_epochs_arg,
                                 int64_t num_examples, int64_t total_train_batch_size, int64_t state_max_steps);

// Trainer.save_metrics(split, metrics, combined): output_dir/<split>_results.json and, if combined,
// all_results.json merged. split is "train", "eval", "predict" (or "all").
int results_save_metrics(const char* output_dir, const char* split, const json_t* metrics, bool combined,
                         char* err, size_t errcap);

// Trainer.log_metrics: "***** <split> metrics *****" then "  key = value" aligned, keys sorted; runtime as
// H:MM:SS.cc, total_flos as "<GF>GF", floats rounded to 4 digits.
void results_log_metrics(FILE* f, const char* split, const json_t* metrics);

// ---------------------------------------------------------------------------------------------
// trainer_state.json (transformers trainer_callback.py TrainerState)

typedef struct {
    double epoch;               // fractional epoch reached
    int64_t global_step;        // optimizer updates done (overflow-skipped steps count, as in HF+DeepSpeed)
    int64_t max_steps;
    int64_t logging_steps;      // 500
    int64_t eval_steps;         // 500
    int64_t save_steps;         // 500
    int64_t train_batch_size;   // per-device batch size (<= 0: null)
    int64_t num_train_epochs;
    int64_t num_input_tokens_seen;
    double total_flos;
    json_t* log_history;        // array of dicts, owned; entries carry "step"
    // best model (Trainer._determine_best_metric): has_best false -> the three keys are null
    bool has_best;
    double best_metric;
    int64_t best_global_step;
    char best_model_checkpoint[4200];   // "<output_dir>/checkpoint-<best_global_step>"
    // TrainerControl as saved in stateful_callbacks
    bool should_training_stop, should_epoch_stop, should_save, should_evaluate, should_log;
} TrainerState;

// HF defaults: logging/eval/save steps 500, empty log_history.
void trainer_state_init(TrainerState* s);
void trainer_state_free(TrainerState* s);
// Trainer.log: appends {**entry, "step": global_step} to log_history (entry is stolen).
void trainer_state_append_log(TrainerState* s, json_t* entry);
// The whole dataclass as a JSON object (new reference): best_metric, best_global_step,
// best_model_checkpoint, trial_name, trial_params null; is_*_process_zero true; ...
json_t* trainer_state_to_json(const TrainerState* s);
int trainer_state_save(const TrainerState* s, const char* path, char* err, size_t errcap);
// Reads a trainer_state.json (ours or HF's) back, e.g. on resume; unknown keys are ignored.
int trainer_state_load(TrainerState* s, const char* path, char* err, size_t errcap);

// total_flos, HF's way (PreTrainedModel.floating_point_ops, added by the Trainer for every micro-batch it trains):
// 6 * input_ids.numel() * num_parameters(exclude_embeddings=True). input_ids.numel() is the padded source batch
// (rows x padded source length, padding included); the parameter count leaves out the tensors of nn.Embedding
// modules (shared / embed_tokens, relative_attention_bias) and counts a tied lm_head once, as the shared
// embedding (so not at all); an untied lm_head (v1.1, flan-t5) is counted. A model estimate, not what runs.
int64_t results_hf_nonembedding_params(const T5Config* cfg);  // -1: not a valid T5 config
double results_hf_floating_point_ops(const T5Config* cfg, int64_t input_ids_numel);

#ifdef __cplusplus
}
#endif
