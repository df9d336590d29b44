/*
 * test_hf_keys.c: the keys of what t5train writes like run_translation.py (train/eval/predict/all_results.json,
 * trainer_state.json and its log_history entries) against
 *   - test/fixtures/hf_keys/keys.json, the key sets read from transformers' Trainer / TrainerState and
 *     run_translation.py (the fixture says where each comes from), and
 *   - test/fixtures/hf_keys/hf_run_keys.json, the key sets and JSON value types of the files a real short run of
 *     transformers' Seq2SeqTrainer wrote (scripts/hf_run_keys.py; versions in the file), also with
 *     load_best_model_at_end (best_* keys set);
 * keys.json's sets against the real run's; and the train speed metrics' units (HF counts the run's samples and
 * max_steps over the session's runtime). The dicts are built with the calls src/train/trainer.c makes, in its order.
 */
#include "t5test.h"

#include <jansson.h>

#include "../src/base/common.h"
#include "../src/eval/evaluate.h"
#include "../src/report/results.h"

static json_t* load_fixture(const char* name) {
    char* p = t5_path_join(t5test_repo_dir(), name);
    json_error_t je;
    json_t* k = json_load_file(p, 0, &je);
    if (!k) fail_msg("cannot read %s: %s", p, je.text);
    free(p);
    return k;
}
static json_t* fixture(void) { return load_fixture("test/fixtures/hf_keys/keys.json"); }
// the real run's dump (scripts/hf_run_keys.py): name -> {key: "int" | "float" | "str" | "bool" | "null" | ...}
static json_t* g_run;

// sorted "a,b,c" of an object's keys / of a fixture list
static int cmp(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }
static void keys_of(const json_t* o, char* out, size_t cap) {
    const char* ks[64];
    size_t n = 0;
    const char* k;
    json_t* v;
    json_object_foreach((json_t*)o, k, v) if (n < 64) ks[n++] = k;
    qsort(ks, n, sizeof *ks, cmp);
    out[0] = 0;
    for (size_t i = 0; i < n; i++) snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", ks[i]);
}
static void list_of(const json_t* a, char* out, size_t cap) {
    json_t* o = json_object();
    size_t i;
    json_t* v;
    json_array_foreach(a, i, v) json_object_set_new(o, json_string_value(v), json_null());
    keys_of(o, out, cap);
    json_decref(o);
}
// Python's json type names for a decoded value, as the dump writes them
static const char* type_name(const json_t* v) {
    switch (json_typeof(v)) {
        case JSON_INTEGER: return "int";
        case JSON_REAL: return "float";
        case JSON_STRING: return "str";
        case JSON_TRUE:
        case JSON_FALSE: return "bool";
        case JSON_NULL: return "null";
        case JSON_ARRAY: return "list";
        default: return "dict";
    }
}
// keys and value types of `got` against the real run's object `want` (key -> type name)
static void check_run(const char* name, const json_t* want, const json_t* got) {
    if (!json_is_object(want)) fail_msg("hf_run_keys.json has no \"%s\"", name);
    char w[2048], h[2048];
    keys_of(want, w, sizeof w);
    keys_of(got, h, sizeof h);
    if (strcmp(w, h) != 0) fail_msg("%s keys differ from the real HF run's:\n  HF:  %s\n  ours: %s", name, w, h);
    const char* k;
    json_t* t;
    json_object_foreach((json_t*)want, k, t) {
        const char* ours = type_name(json_object_get(got, k));
        if (strcmp(json_string_value(t), ours) != 0)
            fail_msg("%s.%s: the real HF run wrote type %s, ours is type %s", name, k, json_string_value(t), ours);
    }
}
// against keys.json's transcription and, where the real run has `name` (or `run_name`), against the real run
static void check2(const json_t* fx, const char* name, const char* run_name, const json_t* got) {
    char want[2048], have[2048];
    list_of(json_object_get(fx, name), want, sizeof want);
    keys_of(got, have, sizeof have);
    if (strcmp(want, have) != 0) fail_msg("%s keys differ from HF's:\n  HF:  %s\n  ours: %s", name, want, have);
    check_run(run_name, json_object_get(g_run, run_name), got);
}
static void check(const json_t* fx, const char* name, const json_t* got) { check2(fx, name, name, got); }

// run_eval_split's dict: loss, generation metrics (minus <prefix>_samples), speed, epoch unless predict
static json_t* eval_dict(const char* prefix, bool do_train) {
    json_t* m = json_object();
    char key[64];
    snprintf(key, sizeof key, "%s_loss", prefix);
    results_set_real(m, key, 1.5);
    EvalGenResult r;
    memset(&r, 0, sizeof r);
    snprintf(r.prefix, sizeof r.prefix, "%s", prefix);
    r.num_samples = 10, r.num_steps = 3, r.bleu = 20.5, r.gen_len = 12.25, r.runtime = 2.0;
    evaluate_add_metrics(m, &r);
    snprintf(key, sizeof key, "%s_samples", prefix);
    json_object_del(m, key);
    results_speed_metrics(m, prefix, 2.5, 10, 3, -1);
    if (do_train && strcmp(prefix, "predict") != 0) results_set_real(m, "epoch", 1.0);
    return m;
}

static void test_key_sets(void** state) {
    (void)state;
    json_t* fx = fixture();
    const char* out = t5test_tmpdir();
    char err[512];
    // training end (trainer_run)
    json_t* train = json_object();
    results_set_real(train, "epoch", 1.0);
    results_set_real(train, "train_loss", 2.0);
    results_train_speed_metrics(train, 10.0, -1, 1.0, 500, 8, 63);
    results_set_int(train, "train_samples", 500);
    results_set_real(train, "total_flos", 1e12);
    json_t* end_entry = json_deep_copy(train);
    json_object_del(end_entry, "train_samples");
    json_object_set_new(end_entry, "step", json_integer(63));
    check(fx, "log_history_train_end", end_entry);
    assert_int_equal(results_save_metrics(out, "train", train, true, err, sizeof err), 0);
    // log step entry (the trainer's do_log block)
    json_t* e = json_object();
    results_set_real(e, "loss", 2.0);
    results_set_real(e, "grad_norm", 1.0);
    results_set_real(e, "learning_rate", 5e-5);
    results_set_real(e, "epoch", 0.5);
    json_object_set_new(e, "step", json_integer(10));
    check(fx, "log_history_train_step", e);
    // an evaluation during training, as logged
    json_t* ev = eval_dict("eval", true);
    json_object_set_new(ev, "step", json_integer(10));
    check(fx, "log_history_eval", ev);
    // final eval / predict results files
    json_t* fe = eval_dict("eval", true);
    results_set_int(fe, "eval_samples", 10);
    check(fx, "eval_results", fe);
    assert_int_equal(results_save_metrics(out, "eval", fe, true, err, sizeof err), 0);
    json_t* pr = eval_dict("predict", true);
    results_set_int(pr, "predict_samples", 10);
    check(fx, "predict_results", pr);
    assert_int_equal(results_save_metrics(out, "predict", pr, true, err, sizeof err), 0);
    check(fx, "train_results", train);
    // all_results.json: the union, read back from the file
    char* p = t5_path_join(out, "all_results.json");
    json_t* all = json_load_file(p, 0, NULL);
    assert_non_null(all);
    json_t* want = json_array();
    const char* parts[3] = {"train_results", "eval_results", "predict_results"};
    json_t* u = json_object();
    for (int i = 0; i < 3; i++) {
        size_t k;
        json_t* v;
        json_array_foreach(json_object_get(fx, parts[i]), k, v) json_object_set_new(u, json_string_value(v), json_null());
    }
    const char* k;
    json_t* v;
    json_object_foreach(u, k, v) json_array_append_new(want, json_string(k));
    json_object_set_new(fx, "all_results", want);
    check(fx, "all_results", all);
    // the files' value types as read back (reals stay reals: py_float_repr writes "1.0", not "1")
    const char* files[3] = {"train_results", "eval_results", "predict_results"};
    for (int i = 0; i < 3; i++) {
        char fn[64];
        snprintf(fn, sizeof fn, "%s.json", files[i]);
        char* fp = t5_path_join(out, fn);
        json_t* f = json_load_file(fp, 0, NULL);
        assert_non_null(f);
        check_run(files[i], json_object_get(g_run, files[i]), f);
        json_decref(f);
        free(fp);
    }
    // trainer_state.json
    TrainerState s;
    trainer_state_init(&s);
    // as trainer_run fills it before the first step
    s.max_steps = 4, s.logging_steps = 1, s.eval_steps = 2, s.save_steps = 2, s.train_batch_size = 4;
    s.num_train_epochs = 1, s.global_step = 4, s.epoch = 0.5;
    json_t* st = trainer_state_to_json(&s);
    check(fx, "trainer_state", st);
    json_t* cbs = json_object_get(st, "stateful_callbacks");
    json_t* ctl = json_object_get(cbs, "TrainerControl");
    check2(fx, "trainer_control", "trainer_control_args", json_object_get(ctl, "args"));
    // stateful_callbacks {"TrainerControl": {"args": ..., "attributes": {}}}
    char w[256], h[256];
    list_of(json_object_get(g_run, "stateful_callbacks"), w, sizeof w);
    keys_of(cbs, h, sizeof h);
    assert_string_equal(w, h);
    list_of(json_object_get(g_run, "trainer_control"), w, sizeof w);
    keys_of(ctl, h, sizeof h);
    assert_string_equal(w, h);
    check_run("trainer_control_attributes", json_object_get(g_run, "trainer_control_attributes"),
              json_object_get(ctl, "attributes"));
    json_decref(st);
    // the file as written and read back (epoch 1.0 and total_flos 0.0 stay floats)
    s.epoch = 1.0, s.total_flos = 0.0;
    char* sp = t5_path_join(out, "trainer_state.json");
    assert_int_equal(trainer_state_save(&s, sp, err, sizeof err), 0);
    st = json_load_file(sp, 0, NULL);
    assert_non_null(st);
    check_run("trainer_state", json_object_get(g_run, "trainer_state"), st);
    json_decref(st);
    free(sp);
    // with a best model (--load_best_model_at_end): best_global_step int, best_metric float, best_model_checkpoint str
    s.has_best = true;
    s.best_metric = 21.5;
    s.best_global_step = 2;
    snprintf(s.best_model_checkpoint, sizeof s.best_model_checkpoint, "%s/checkpoint-2", out);
    st = trainer_state_to_json(&s);
    json_t* lb = json_object_get(g_run, "load_best_model_at_end_bleu");
    check_run("load_best_model_at_end_bleu.trainer_state", json_object_get(lb, "trainer_state"), st);
    check_run("load_best_model_at_end_bleu.checkpoint_trainer_state", json_object_get(lb, "checkpoint_trainer_state"),
              st);
    json_decref(st);
    trainer_state_free(&s);
    json_decref(u);
    json_decref(all);
    free(p);
    json_decref(e), json_decref(ev), json_decref(fe), json_decref(pr), json_decref(train), json_decref(end_entry);
    json_decref(fx);
}

// keys.json (read from transformers' code) against the real run: the same key sets for every name it lists
static void test_transcription_is_the_real_runs(void** state) {
    (void)state;
    json_t* fx = fixture();
    static const char* const pairs[][2] = {
        {"train_results", "train_results"},
        {"eval_results", "eval_results"},
        {"predict_results", "predict_results"},
        {"log_history_train_step", "log_history_train_step"},
        {"log_history_eval", "log_history_eval"},
        {"log_history_train_end", "log_history_train_end"},
        {"trainer_state", "trainer_state"},
        {"trainer_control", "trainer_control_args"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char w[2048], h[2048];
        list_of(json_object_get(fx, pairs[i][0]), w, sizeof w);
        json_t* r = json_object_get(g_run, pairs[i][1]);
        assert_non_null(r);
        keys_of(r, h, sizeof h);
        if (strcmp(w, h) != 0) fail_msg("keys.json's %s is not the real run's:\n  keys.json: %s\n  run:       %s",
                                        pairs[i][0], w, h);
    }
    // the real run's log_history in trainer_state.json: the final evaluation is logged after save_state, so the
    // file ends with the train summary (t5train: the final eval goes to --report_to only)
    json_t* kinds = json_object_get(g_run, "log_history_kinds_in_order");
    assert_true(json_array_size(kinds) > 0);
    assert_string_equal(json_string_value(json_array_get(kinds, json_array_size(kinds) - 1)), "log_history_train_end");
    json_decref(fx);
}

static void test_train_speed_units(void** state) {
    (void)state;
    json_t* m = json_object();
    // --max_steps 100, batch 8 x accumulation 2: HF's num_train_samples = 100 * 16 = 1600 over the runtime
    results_train_speed_metrics(m, 40.0, 100, 3.0, 500, 16, 100);
    assert_true(json_real_value(json_object_get(m, "train_samples_per_second")) == 40.0);
    assert_true(json_real_value(json_object_get(m, "train_steps_per_second")) == 2.5);
    assert_true(json_real_value(json_object_get(m, "train_runtime")) == 40.0);
    // epochs: num_examples * num_train_epochs (a float), steps = state.max_steps
    results_train_speed_metrics(m, 3.0, -1, 1.5, 500, 8, 94);
    assert_true(json_real_value(json_object_get(m, "train_samples_per_second")) == 250.0);
    assert_true(json_real_value(json_object_get(m, "train_steps_per_second")) == 31.333);
    json_decref(m);
}

int main(void) {
    g_run = load_fixture("test/fixtures/hf_keys/hf_run_keys.json");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_sets),
        cmocka_unit_test(test_transcription_is_the_real_runs),
        cmocka_unit_test(test_train_speed_units),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_run);
    return rc;
}
