/*
 * best_model.h: HF Trainer's best-model selection and EarlyStoppingCallback as pure functions
 * (transformers TrainingArguments.__post_init__, Trainer._determine_best_metric / _load_best_model,
 * EarlyStoppingCallback.on_evaluate), so the trainer loop only calls them and the decisions are CPU-tested
 * (test/test_best_model.c).
 *   best_model_metric_key   "bleu" -> "eval_bleu"; a name already starting with "eval_" is kept
 *   best_model_default_greater  HF's greater_is_better default: false when the name ends in "loss"
 *   best_model_check_args   the TrainingArguments rules for load_best_model_at_end and the callback's
 *                            requirements for early stopping (one sentence in err)
 *   best_model_observe      one evaluation's metrics: the early-stopping check first (HF's on_evaluate runs
 *                            inside evaluate(), against the best metric of the earlier evaluations), then the
 *                            best-metric update (_determine_best_metric)
 */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char key[128];             // the metric looked up in the eval metrics, "eval_" prefixed ("" = no selection)
    bool greater_is_better;
    bool has_best;             // best_metric / best_step valid
    double best_metric;        // trainer_state.json best_metric
    int64_t best_step;         // best_global_step; checkpoint-<best_step> is best_model_checkpoint (-1: none)
    int64_t patience;          // early_stopping_patience (<= 0: no early stopping)
    double threshold;          // early_stopping_threshold
    int64_t patience_counter;  // evaluations in a row without a large enough improvement
} BestModel;

void best_model_metric_key(const char* name, char* out, size_t cap);
bool best_model_default_greater(const char* name);
// metric "" = none. Fills b (no best yet). Returns 0 or -1 with err (an input error).
int best_model_init(BestModel* b, const char* metric, bool greater_is_better, int64_t patience, double threshold,
                    char* err, size_t errcap);
// load_best: --load_best_model_at_end; strategies/steps of eval and save; early stopping on when patience > 0.
int best_model_check_args(bool load_best, const char* metric, TrainerInterval eval_strategy, double eval_steps,
                          TrainerInterval save_strategy, double save_steps, int64_t patience, char* err,
                          size_t errcap);
// The metric of one evaluation. Returns 1 when it is a new best (best_* updated to step), 0 when not, -1 when the
// metric is missing from `metrics` (HF's KeyError: err lists the available keys). *should_stop: early stopping
// reached its patience (false without early stopping).
int best_model_observe(BestModel* b, const json_t* metrics, int64_t step, bool* should_stop, char* err,
                       size_t errcap);

#ifdef __cplusplus
}
#endif
