/*
 * trainer.h: the training loop, as HF run_translation.py + Seq2SeqTrainer (+ the DeepSpeed engine when a deepspeed
 * section drives the run) do it; the ZeRO engine (src/zero/engine.h) holds parameters and optimizer at every stage.
 *
 * One optimizer update ("step", HF's global_step) =
 *     for each of n micro-batches (n = gradient_accumulation_steps, fewer only for the last update of an epoch):
 *         forward with dlogits scaled by loss_scale / n      (micro-batch mean loss x 1/n, DeepSpeed's
 *         backward (grads += )                                scale_wrt_gas and HF's loss / gas)
 *     global norm of the scaled fp32 gradient + inf/nan flag (one deterministic device pass)
 *     fp16: DeepSpeed DynamicLossScaler.update_scale(overflow); overflow -> the step is skipped: no weight change,
 *           no Adam step count, no LR-schedule advance, DeepSpeed's OVERFLOW line logged; global_step still +1
 *     else: AdamW on the flat fp32 master (GPU, fused), gradient multiplied by 1/combined where
 *           combined = loss_scale * max(1, (norm/loss_scale + 1e-6)/clip)   (DeepSpeed's unscale+clip; see
 *           docs/training_results.md for why this rule is also used without a deepspeed section)
 *     lr of update u = schedule(number of updates applied before it)
 * bf16 / fp32: no loss scaling; a non-finite gradient norm stops the run with an error (never a silent NaN).
 *
 * Checkpoints (src/train/checkpoint.h protocol: temporary directory, rename, completion marker t5train_done):
 * output_dir/checkpoint-<step>/ = model.safetensors (the fp32 master, HF names: exact weights on resume) +
 * config.json + tokenizer files + trainer_state.json + t5train_state.bin with the blobs "trainer" (counters,
 * logging window), "optimizer" (Adam m then v, fp32), "scaler" (LossScaler), "scheduler" (schedule position +
 * Adam step state), "data_position" (DataLoaderState), "rng" (seed, micro-batch counter).
 * Resume ("DIR" or "last") loads all of it; the run then continues bit-identically. With "last" an incomplete
 * or corrupt checkpoint is reported and skipped for the previous good one; a named DIR must be good.
 * SIGINT/SIGTERM: the current step finishes, a checkpoint is saved, the run exits 0 with a message.
 *
 * trainer.c does not include src/cli/config.h (its LrSchedulerType names collide with src/train/lr_schedule.h):
 * src/cli/run.c translates the resolved RunConfig into TrainerArgs.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/dtype.h"
#include "comms_logger.h"
#include "flops_profiler.h"
#include "../../data/dataset.h"
#include "../../model/generate.h"
#include "../../model/t5_config.h"
#include "../../model/zero.h"
#include "../zero/loss_scaler.h"
#include "../report/model_card.h"
#include "../zero/zenflow_sched.h"
#include "../upload/push_to_hub.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TRAINER_INTERVAL_NO = 0, TRAINER_INTERVAL_STEPS, TRAINER_INTERVAL_EPOCH } TrainerInterval;
// the optimizer (its value is saved in checkpoints: never renumber)
typedef enum { TRAINER_OPTIM_ADAMW = 0, TRAINER_OPTIM_ADAFACTOR = 1 } TrainerOptimizer;

typedef struct {
    // model
    T5Config model;              // architecture (preset or config.json)
    char weights_path[4096];     // safetensors file / index / dir to load; "" with init_random
    bool init_random;            // --init random: HF _init_weights with `seed`
    float dropout_rate;          // used in train mode
    bool gradient_checkpointing; // recompute each block in backward
    char tokenizer_files_dir[4096];  // directory whose tokenizer files are copied to output_dir at the end ("")
    char tokenizer_file[4096];   // a spiece.model to copy when tokenizer_files_dir is "" ("" none)
    // data (data/dataset.h); train/eval splits opened by the trainer
    DataOptions data;
    bool do_train, do_eval, do_predict;
    // generation + BLEU in evaluation / prediction (run_translation's --predict_with_generate)
    bool predict_with_generate;
    GenerateOptions gen;         // max_length, num_beams, length_penalty, early_stopping
    bool eval_sort_by_length;    // generation's batches of the length-sorted order (EvalGenConfig.sort_by_length)
    // precision
    DType dtype;                 // fp32, fp16 (DeepSpeed loss scaler), bf16
    DType grad_dtype;            // parameter gradients: dtype (DeepSpeed's default) or fp32
    LossScalerConfig scaler;     // fp16 only
    // optimization
    int64_t gradient_accumulation_steps;
    int64_t max_steps;           // > 0 wins over num_train_epochs
    double num_train_epochs;
    double lr;                   // the LR schedule's peak (DeepSpeed's optimizer lr, or HF's learning_rate)
    // the optimizer: AdamW, or transformers' Adafactor (every stage; the engine steps it with the constants of
    // zero below, its lr the schedule's unless relative_step); saved in the checkpoints, which resume only with it
    TrainerOptimizer optimizer;
    double clip;                 // global-norm clip (<= 0: off)
    double label_smoothing_factor;   // HF's LabelSmoother epsilon in [0, 1): train and eval loss (0: plain CE)
    // the ZeRO engine's plan (deepspeed.zero_optimization + the optimizer; src/zero/engine.h), which steps the
    // optimizer at every stage (stage 0: fused GPU AdamW / Adafactor over resident flat buffers; 1-3: partitions,
    // offloads, buckets, prefetch...). src/cli fills the knobs and the optimizer's constants (AdamW's betas, eps,
    // weight decay and mode, or Adafactor's options), the trainer the dtypes and accumulation steps, the engine the
    // tensors and traces.
    ZeroOptions zero;
    // deepspeed.zero_optimization.zenflow (src/zero/zenflow.h): on, and its options
    bool zenflow;
    ZenflowOpts zenflow_opts;
    // LR schedule: an HF name ("linear", "cosine", "constant", ...) or "WarmupLR" / "WarmupDecayLR"
    char sched_name[32];
    double warmup_steps, warmup_ratio;   // HF schedules (hf_get_warmup_steps)
    double ds_warmup_min_lr, ds_warmup_max_lr;
    int64_t ds_warmup_num_steps;         // DeepSpeed schedules; < 0: "auto" left unresolved -> from warmup_*
    int ds_warmup_type;                  // 0 log, 1 linear
    int64_t ds_total_num_steps;          // WarmupDecayLR; <= 0: the computed number of updates
    // logging / eval / save (HF TrainingArguments)
    TrainerInterval logging_strategy, eval_strategy, save_strategy;
    double logging_steps, eval_steps, save_steps;   // below 1: a ratio of the total steps (trainer_interval_steps)
    bool logging_first_step;
    int64_t save_total_limit;    // <= 0: keep all
    // best model (HF load_best_model_at_end / metric_for_best_model / greater_is_better; EarlyStoppingCallback's
    // patience and threshold); the decisions live in best_model.c
    bool load_best_model_at_end;
    char metric_for_best_model[96];  // "" = none (run.c sets "loss" when load_best_model_at_end)
    bool greater_is_better;
    int64_t early_stopping_patience; // <= 0: no early stopping
    double early_stopping_threshold;
    char run_name[256];              // HF's run_name (default output_dir): a label for the reporters
    uint64_t seed;
    // files
    char output_dir[4096];
    char resume_from_checkpoint[4096];   // "", a checkpoint dir, or "last"
    char report_to[64];          // --report_to as resolved ("none", "csv", "tensorboard", "csv,tensorboard")
    char logging_dir[4096];      // TensorBoard's folder (src/report/report_to.h)
    // --push_to_hub (src/upload/push_to_hub.h): the repo was created by src/cli before the run (push.repo_id is its
    // full id there); rank 0 pushes after each checkpoint in the background (hub_strategy other than end;
    // src/train/trainer_push.h) and at the end
    PushToHubArgs push;
    // output_dir/README.md at the end (run_translation's create_model_card, or push_to_hub's before its upload):
    // what the card says of the run, filled by src/cli/run.c; rank 0 adds the log history and writes it
    ModelCardArgs card;
    // HF's include_num_input_tokens_seen: 0 no, 1 all (the batches' input_ids, padding included), 2 non_padding
    // (their attention_mask sum), summed over the ranks, into trainer_state's num_input_tokens_seen and the log
    int num_input_tokens;
    // DeepSpeed's wall_clock_breakdown: each update's micro-batches timed on the compute stream (CUDA events, as
    // DeepSpeed's timers) and printed as DeepSpeed prints them: a "fwd_microstep | bwd_microstep | ..." line per
    // micro-batch, then the update's "fwd | bwd | bwd_inner | bwd_allreduce | step" sums
    bool wall_clock_breakdown;
    // DeepSpeed's flops_profiler: the profile of one update (src/train/flops_profiler.h); tf32: --tf32 (its MFU line)
    FlopsProfilerArgs flops_profiler;
    // DeepSpeed's comms_logger: the collectives timed (src/train/comms_logger.h)
    CommsLoggerArgs comms_logger;
    bool tf32;
    // test hooks
    char dump_batches[4096];     // write the token ids of the first dump_batches_steps updates to this JSON file
    int64_t dump_batches_steps;
    int64_t inject_inf_step;     // > 0: put +inf into the gradient at this update (overflow test)
    int64_t stop_after_steps;    // > 0: behave as if SIGTERM arrived after this update (save + exit 0)
    // out of memory explained (issue 17): after the engine's or the activation arena's allocation fails, appends
    // the estimate for this job and a plan predicted to fit to the message (set by src/cli, which may call the
    // planner; args is this TrainerArgs); NULL: the message alone
    void (*oom_advice)(const void* args, char* buf, size_t len);
    // the lengths the planner sizes the activations for: the data's longest examples as the trainer will size them
    // (dataset_activation_lengths; src/cli/run.c scans the data before planning); 0: the max lengths (an upper bound)
    int plan_src_len, plan_tgt_len;
    bool save_on_each_node;  // several nodes without a shared file system: each node's local rank 0 writes too
    // DeepSpeed's stage3_gather_16bit_weights_on_model_save: the final model in the run's 16-bit dtype (checkpoints
    // keep the fp32 master, which resume needs); false or an fp32 run: fp32
    bool save_16bit_model;
} TrainerArgs;

// Defaults matching HF TrainingArguments (lr 5e-5, linear, clip 1.0, logging/save every 500, seed 42, ...).
void trainer_args_default(TrainerArgs* a);

// Runs training (do_train), evaluation (do_eval: loss, + BLEU with predict_with_generate) and prediction
// (do_predict on the test split: predict_results.json, generated_predictions.txt) on the GPU. Returns the process exit code; errors are
// fatal (t5_die with a one-line message).
// The splits a run opens (DataSplit order: train with do_train, validation with do_eval or an evaluation strategy,
// test with do_predict): the trainer's data, run.c's pre-flight checks and the planner's lengths all follow this.
void trainer_splits_used(const TrainerArgs* a, bool used[3]);
int trainer_run(const TrainerArgs* a);

// ---- pure loop arithmetic (HF Trainer._inner_training_loop), unit-tested on the CPU

// Updates per epoch: max(ceil(num_batches / gas), 1) (transformers >= 4.46 rounding; the last update of an
// epoch may use fewer micro-batches).
int64_t trainer_updates_per_epoch(int64_t num_batches, int64_t gas);
// Total updates: max_steps if > 0, else ceil(num_train_epochs * updates_per_epoch).
int64_t trainer_total_steps(int64_t max_steps, double num_train_epochs, int64_t updates_per_epoch);
// Epochs the loop may run: ceil(max_steps / upe) with max_steps, else ceil(num_train_epochs).
int64_t trainer_num_epochs(int64_t max_steps, double num_train_epochs, int64_t updates_per_epoch);
// Micro-batches of update number `step_in_epoch` (0-based) of an epoch of num_batches batches.
int64_t trainer_micro_batches(int64_t num_batches, int64_t gas, int64_t step_in_epoch);
// logging / eval / save steps as HF's TrainerState.compute_steps: below 1 a ratio of the run's total steps,
// ceil(total_steps x v); else v.
int64_t trainer_interval_steps(double v, int64_t total_steps);
// HF DefaultFlowCallback on_step_end for a "steps" strategy: step > 0 && interval > 0 && step % interval == 0.
bool trainer_step_due(TrainerInterval strategy, int64_t step, int64_t interval);
// A resume's counters agree: the trainer's updates (global_step, overflow-skipped ones included) minus the skipped
// ones are the updates the optimizer applied (its state's step count). Returns 0, or -1 with err set (a checkpoint
// whose trainer blob and optimizer state come from different points of a run).
int trainer_resume_counts_check(int64_t global_step, int64_t skipped_steps, int64_t applied_steps, char* err,
                                size_t errlen);

#ifdef __cplusplus
}
#endif
