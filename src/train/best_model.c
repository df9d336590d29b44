/*
 * best_model.c: see best_model.h. Semantics from transformers (trainer.py _determine_best_metric,
 * training_args.py __post_init__, trainer_callback.py EarlyStoppingCallback); decisions only, no I/O.
 */
#include "best_model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void best_model_metric_key(const char* name, char* out, size_t cap) {
    if (strncmp(name, "eval_", 5) == 0) snprintf(out, cap, "%s", name);
    else snprintf(out, cap, "eval_%s", name);
}

bool best_model_default_greater(const char* name) {
    const size_t n = strlen(name);
    return !(n >= 4 && strcmp(name + n - 4, "loss") == 0);
}

int best_model_init(BestModel* b, const char* metric, bool greater_is_better, int64_t patience, double threshold,
                    char* err, size_t errcap) {
    memset(b, 0, sizeof *b);
    b->best_step = -1;
    if (metric && metric[0]) {
        if (strlen(metric) + 6 > sizeof b->key) {
            snprintf(err, errcap, "metric_for_best_model: name too long (%zu characters)", strlen(metric));
            return -1;
        }
        best_model_metric_key(metric, b->key, sizeof b->key);
    }
    b->greater_is_better = greater_is_better;
    b->patience = patience;
    b->threshold = threshold;
    if (!(threshold >= 0.0) || !isfinite(threshold)) {
        snprintf(err, errcap, "early_stopping_threshold must be a finite number >= 0, got %g", threshold);
        return -1;
    }
    return 0;
}

static const char* interval_name(TrainerInterval s) {
    return s == TRAINER_INTERVAL_STEPS ? "steps" : s == TRAINER_INTERVAL_EPOCH ? "epoch" : "no";
}

int best_model_check_args(bool load_best, const char* metric, TrainerInterval eval_strategy, double eval_steps,
                          TrainerInterval save_strategy, double save_steps, int64_t patience, char* err,
                          size_t errcap) {
    if (load_best) {
        if (eval_strategy != save_strategy) {
            snprintf(err, errcap, "--load_best_model_at_end requires the save and eval strategy to match, but found "
                                  "evaluation strategy %s and save strategy %s",
                     interval_name(eval_strategy), interval_name(save_strategy));
            return -1;
        }
        // TrainingArguments: whole steps must divide; ratios (below 1) both or neither, compared in millionths
        if (eval_strategy == TRAINER_INTERVAL_STEPS && (eval_steps <= 0 || fmod(save_steps, eval_steps) != 0)) {
            if (eval_steps > 0 && (eval_steps < 1 || save_steps < 1)) {
                if (!(eval_steps < 1 && save_steps < 1)) {
                    snprintf(err, errcap, "--load_best_model_at_end requires the saving steps to be a multiple of the "
                             "evaluation steps, which cannot get guaranteed when mixing ratio and absolute steps for "
                             "save_steps %g and eval_steps %g", save_steps, eval_steps);
                    return -1;
                }
                const long long s = llround(save_steps * 1e6), e = llround(eval_steps * 1e6);
                if (e == 0 || s % e != 0) {
                    snprintf(err, errcap, "--load_best_model_at_end requires the saving steps to be a multiple of the "
                             "evaluation steps, but found %g, which is not a multiple of %g", save_steps, eval_steps);
                    return -1;
                }
            } else {
                snprintf(err, errcap, "--load_best_model_at_end requires the saving steps to be a round multiple of "
                         "the evaluation steps, but found %g, which is not a round multiple of %g", save_steps,
                         eval_steps);
                return -1;
            }
        }
    }
    if (patience > 0) {
        // EarlyStoppingCallback.on_train_begin's asserts
        if (!load_best) {
            snprintf(err, errcap, "early stopping (early_stopping_patience %lld) requires load_best_model_at_end true",
                     (long long)patience);
            return -1;
        }
        if (!metric || !metric[0]) {
            snprintf(err, errcap, "early stopping requires metric_for_best_model");
            return -1;
        }
        if (eval_strategy == TRAINER_INTERVAL_NO) {
            snprintf(err, errcap, "early stopping requires an eval strategy of steps or epoch (eval_strategy is no)");
            return -1;
        }
    }
    return 0;
}

int best_model_observe(BestModel* b, const json_t* metrics, int64_t step, bool* should_stop, char* err,
                       size_t errcap) {
    *should_stop = false;
    if (!b->key[0]) return 0;
    const json_t* v = json_object_get(metrics, b->key);
    if (!v || !json_is_number(v)) {
        int k = snprintf(err, errcap, "metric_for_best_model is '%s', which is not in the evaluation metrics (",
                         b->key);
        const char* name;
        const json_t* val;
        bool first = true;
        json_object_foreach((json_t*)metrics, name, val) {
            (void)val;
            if (k >= 0 && (size_t)k < errcap) k += snprintf(err + k, errcap - (size_t)k, "%s%s", first ? "" : ", ", name);
            first = false;
        }
        if (k >= 0 && (size_t)k < errcap) snprintf(err + k, errcap - (size_t)k, ")");
        return -1;
    }
    const double x = json_number_value(v);
    // EarlyStoppingCallback.check_metric_value: against the best so far (before this evaluation updates it)
    if (b->patience > 0) {
        const bool better = b->greater_is_better ? x > b->best_metric : x < b->best_metric;
        if (!b->has_best || (better && fabs(x - b->best_metric) > b->threshold)) b->patience_counter = 0;
        else b->patience_counter++;
        *should_stop = b->patience_counter >= b->patience;
    }
    // _determine_best_metric: best starts at -inf / +inf, a strictly better value wins (NaN never does)
    const bool better = !b->has_best ? (b->greater_is_better ? x > -INFINITY : x < INFINITY)
                                     : (b->greater_is_better ? x > b->best_metric : x < b->best_metric);
    if (!better) return 0;
    b->has_best = true;
    b->best_metric = x;
    b->best_step = step;
    return 1;
}
