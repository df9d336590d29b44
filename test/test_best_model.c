/*
 * test_best_model.c: src/train/best_model.c, HF's best-model and early-stopping decisions
 * (transformers TrainingArguments.__post_init__, Trainer._determine_best_metric, EarlyStoppingCallback):
 * the "eval_" prefix rule, greater_is_better's default, the strategy rules, a sequence of evaluations worked
 * out by hand for loss (lower is better) and bleu (higher is better), the patience counter with a threshold,
 * and the missing-metric error.
 */
#include "t5test.h"

#include <math.h>

#include "../src/train/best_model.h"

static void test_key_and_default(void** state) {
    (void)state;
    char k[64];
    best_model_metric_key("bleu", k, sizeof k);
    assert_string_equal(k, "eval_bleu");
    best_model_metric_key("eval_loss", k, sizeof k);
    assert_string_equal(k, "eval_loss");
    best_model_metric_key("loss", k, sizeof k);
    assert_string_equal(k, "eval_loss");
    assert_false(best_model_default_greater("loss"));
    assert_false(best_model_default_greater("eval_loss"));
    assert_false(best_model_default_greater("my_loss"));
    assert_true(best_model_default_greater("bleu"));
    assert_true(best_model_default_greater("eval_gen_len"));
    assert_true(best_model_default_greater("loss_scale"));  // HF: endswith("loss") only
}

static void test_check_args(void** state) {
    (void)state;
    char err[512];
    const TrainerInterval S = TRAINER_INTERVAL_STEPS, E = TRAINER_INTERVAL_EPOCH, N = TRAINER_INTERVAL_NO;
    assert_int_equal(best_model_check_args(true, "loss", S, 100, S, 200, 0, err, sizeof err), 0);
    assert_int_equal(best_model_check_args(true, "loss", E, 500, E, 500, 0, err, sizeof err), 0);
    assert_int_equal(best_model_check_args(true, "loss", S, 100, E, 500, 0, err, sizeof err), -1);
    assert_contains(err, "save and eval strategy to match");
    assert_int_equal(best_model_check_args(true, "loss", S, 300, S, 500, 0, err, sizeof err), -1);
    assert_contains(err, "found 500, which is not a round multiple of 300");
    // without load_best the steps may be anything
    assert_int_equal(best_model_check_args(false, "", S, 300, S, 500, 0, err, sizeof err), 0);
    // early stopping needs load_best, a metric, an eval strategy
    assert_int_equal(best_model_check_args(false, "loss", S, 100, S, 100, 3, err, sizeof err), -1);
    assert_contains(err, "requires load_best_model_at_end");
    assert_int_equal(best_model_check_args(true, "", S, 100, S, 100, 3, err, sizeof err), -1);
    assert_contains(err, "requires metric_for_best_model");
    assert_int_equal(best_model_check_args(true, "loss", N, 100, N, 100, 3, err, sizeof err), -1);
    assert_contains(err, "eval strategy of steps or epoch");
    assert_int_equal(best_model_check_args(true, "loss", S, 100, S, 100, 3, err, sizeof err), 0);
    // ratios (HF): both or neither, and a multiple in millionths
    assert_int_equal(best_model_check_args(true, "loss", S, 0.1, S, 0.2, 0, err, sizeof err), 0);
    assert_int_equal(best_model_check_args(true, "loss", S, 0.1, S, 0.25, 0, err, sizeof err), -1);
    assert_contains(err, "but found 0.25, which is not a multiple of 0.1");
    assert_int_equal(best_model_check_args(true, "loss", S, 0.1, S, 500, 0, err, sizeof err), -1);
    assert_contains(err, "mixing ratio and absolute steps");
}

static json_t* metrics(const char* k, double v) {
    json_t* m = json_object();
    json_object_set_new(m, "eval_runtime", json_real(1.5));
    json_object_set_new(m, k, json_real(v));
    return m;
}

static int observe(BestModel* b, const char* k, double v, int64_t step, bool* stop) {
    char err[256];
    json_t* m = metrics(k, v);
    int r = best_model_observe(b, m, step, stop, err, sizeof err);
    json_decref(m);
    return r;
}

// eval_loss at steps 100..500: 2.0, 1.5, 1.6, 1.5 (equal: not better), 1.4 -> bests at 100, 200, 500
static void test_loss_sequence(void** state) {
    (void)state;
    BestModel b;
    char err[128];
    assert_int_equal(best_model_init(&b, "loss", best_model_default_greater("loss"), 0, 0.0, err, sizeof err), 0);
    assert_string_equal(b.key, "eval_loss");
    bool stop;
    const double v[5] = {2.0, 1.5, 1.6, 1.5, 1.4};
    const int want[5] = {1, 1, 0, 0, 1};
    const int64_t best_after[5] = {100, 200, 200, 200, 500};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(observe(&b, "eval_loss", v[i], 100 * (i + 1), &stop), want[i]);
        assert_false(stop);
        assert_int_equal(b.best_step, best_after[i]);
    }
    assert_true(b.best_metric == 1.4);
}

// eval_bleu, greater is better, patience 2, threshold 0.5: 10 (best), 10.4 (better by <= 0.5: counter 1, but still
// the new best), 12 (counter 0), 11 (1), 12 (equal: 2 -> stop)
static void test_bleu_early_stopping(void** state) {
    (void)state;
    BestModel b;
    char err[128];
    assert_int_equal(best_model_init(&b, "bleu", true, 2, 0.5, err, sizeof err), 0);
    bool stop;
    const double v[5] = {10, 10.4, 12, 11, 12};
    const int want[5] = {1, 1, 1, 0, 0};
    const int64_t counter[5] = {0, 1, 0, 1, 2};
    const bool stops[5] = {false, false, false, false, true};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(observe(&b, "eval_bleu", v[i], i + 1, &stop), want[i]);
        assert_int_equal(b.patience_counter, counter[i]);
        assert_int_equal(stop, stops[i]);
    }
    assert_int_equal(b.best_step, 3);
    assert_true(b.best_metric == 12);
}

static void test_missing_metric_and_no_selection(void** state) {
    (void)state;
    BestModel b;
    char err[256];
    bool stop;
    assert_int_equal(best_model_init(&b, "bleu", true, 0, 0.0, err, sizeof err), 0);
    json_t* m = metrics("eval_loss", 1.0);
    assert_int_equal(best_model_observe(&b, m, 10, &stop, err, sizeof err), -1);
    assert_contains(err, "'eval_bleu', which is not in the evaluation metrics (eval_runtime, eval_loss)");
    assert_int_equal(best_model_init(&b, "", true, 0, 0.0, err, sizeof err), 0);
    assert_int_equal(best_model_observe(&b, m, 10, &stop, err, sizeof err), 0);
    assert_false(b.has_best);
    assert_int_equal(best_model_init(&b, "loss", false, 1, -1.0, err, sizeof err), -1);
    assert_contains(err, "early_stopping_threshold");
    json_decref(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_and_default),
        cmocka_unit_test(test_check_args),
        cmocka_unit_test(test_loss_sequence),
        cmocka_unit_test(test_bleu_early_stopping),
        cmocka_unit_test(test_missing_metric_and_no_selection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
