/*
 * model_card.h: output_dir/README.md, the model card HF's run_translation.py leaves at its end (transformers 5.17:
 * `trainer.create_model_card(**kwargs)`, or `trainer.push_to_hub(**kwargs)`, which writes the same card before its
 * upload), as modelcard.py's TrainingSummary.from_trainer(...).to_model_card() writes it:
 *
 *   ---                                   yaml.dump(create_metadata(), sort_keys=False): library_name, language
 *   library_name: transformers            [source_lang, target_lang], base_model, tags [generated_from_trainer],
 *   ...                                   datasets [dataset_name], metrics (bleu when evaluated), model-index
 *   ---
 *   <!-- This model card has been generated automatically ... -->
 *   # <model name>
 *   This model is a fine-tuned version of [base](https://huggingface.co/base) on the <dataset> dataset.
 *   It achieves the following results on the evaluation set: (the last eval entry of the log history)
 *   ## Model description / ## Intended uses & limitations / ## Training and evaluation data
 *   ## Training procedure / ### Training hyperparameters (extract_hyperparameters_from_trainer)
 *   ### Training results                  make_markdown_table(parse_log_history(log_history))
 *   ### Framework versions                t5train's, CUDA's and NCCL's versions (HF: Transformers, Pytorch, ...)
 *
 * What differs from HF's card is listed in docs/training.md, "The model card".
 */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_CARD_STR 1024

// What run_translation and the Trainer's args know, from the resolved config (src/cli/run.c fills it).
typedef struct {
    char model_name[MODEL_CARD_STR];      // "# <name>" and model-index's name (model_card_model_name)
    char finetuned_from[MODEL_CARD_STR];  // --model_name_or_path
    bool finetuned_from_is_dir;           // a local folder: no base_model, no Hub link (see docs/training.md)
    char dataset_name[MODEL_CARD_STR];    // --dataset_name ("" = null: train_file runs)
    char dataset_config[MODEL_CARD_STR];  // --dataset_config_name ("" = null)
    char source_lang[16], target_lang[16];  // "" = null
    double learning_rate;
    int64_t train_batch_size, eval_batch_size;  // per device (HF's args.train_batch_size with one GPU a process)
    int64_t seed;
    int world_size;
    bool distributed;                     // HF's ParallelMode.DISTRIBUTED: several processes, or DeepSpeed
    int64_t gradient_accumulation_steps;
    char optim[64];                       // HF's optim name: "adamw_torch", "adafactor", ... (optim_args: null)
    double adam_beta1, adam_beta2, adam_epsilon;
    char lr_scheduler_type[64];           // "linear", ...
    double warmup_steps;                  // transformers 5: a count, or a ratio below 1 (warmup_ratio's value)
    int64_t max_steps;                    // -1: num_train_epochs
    double num_train_epochs;
    bool fp16;                            // --fp16: "mixed_precision_training: Native AMP" (not bf16, as HF)
    double label_smoothing_factor;
    char versions[MODEL_CARD_STR];        // "### Framework versions" lines, each "- name version\n"
} ModelCardArgs;

// HF's model name: hub_model_id's last part when pushing with one (push_to_hub), else Path(output_dir).name; when
// that is empty (output_dir "."), the base model's name (from_trainer). hub_model_id NULL or "": none.
void model_card_model_name(const char* output_dir, const char* hub_model_id, const char* finetuned_from, char* out,
                           size_t cap);

// The card's text (malloc'd) from the run's args and the Trainer's log_history (an array of dicts as
// trainer_state.json holds them, plus the final evaluation's entry, as HF's state has it when the card is written).
char* model_card_text(const ModelCardArgs* a, const json_t* log_history);

// Writes output_dir/README.md atomically. 0, or -1 with one sentence in err (the caller warns: nothing else is lost).
int model_card_write(const ModelCardArgs* a, const json_t* log_history, const char* output_dir, char* err,
                     size_t errcap);

#ifdef __cplusplus
}
#endif
