/*
 * test_results.c: src/report/results.c writes train/eval/all_results.json and trainer_state.json byte for byte
 * as transformers does (fixtures from scripts/make_trainer_log_fixtures.py, which calls HF's own
 * TrainerState.save_to_json and json.dump), merges all_results like save_metrics(combined=True), and
 * reads trainer_state.json back.
 */
#include "t5test.h"

#include <dirent.h>
#include <jansson.h>

#include "../src/base/common.h"
#include "../src/report/results.h"

static char* fixture_text(const char* name) {
    char* dir = t5_path_join(t5test_repo_dir(), "test/fixtures/trainer_log");
    char* p = t5_path_join(dir, name);
    char* text = t5_read_file(p, NULL);
    if (!text) fail_msg("missing fixture %s", p);
    free(dir);
    free(p);
    return text;
}

static char* read_in(const char* dir, const char* name) {
    char* p = t5_path_join(dir, name);
    char* text = t5_read_file(p, NULL);
    if (!text) fail_msg("%s was not written", p);
    free(p);
    return text;
}

static json_t* train_metrics(void) {
    json_t* m = json_object();
    results_set_real(m, "epoch", 1.0);
    results_set_real(m, "total_flos", 1234567890123.0);
    results_set_real(m, "train_loss", 1.234567891);
    results_set_real(m, "train_runtime", 3725.4567);
    results_set_int(m, "train_samples", 500);
    results_set_real(m, "train_samples_per_second", 0.134);
    results_set_real(m, "train_steps_per_second", 0.134);
    return m;
}

static json_t* eval_metrics(void) {
    json_t* m = json_object();
    results_set_real(m, "epoch", 1.0);
    results_set_real(m, "eval_loss", 0.987654321);
    results_set_real(m, "eval_runtime", 61.03);
    results_set_int(m, "eval_samples", 1999);
    results_set_real(m, "eval_samples_per_second", 32.755);
    results_set_real(m, "eval_steps_per_second", 8.193);
    results_set_real(m, "eval_bleu", 27.1234);
    results_set_real(m, "eval_gen_len", 28.4);
    return m;
}

static void test_save_metrics_like_hf(void** state) {
    (void)state;
    char* dir = t5_path_join(t5test_tmpdir(), "metrics");
    assert_int_equal(t5_mkdir_p(dir), 0);
    char err[512] = "";
    json_t* tm = train_metrics();
    json_t* em = eval_metrics();
    assert_int_equal(results_save_metrics(dir, "train", tm, true, err, sizeof err), 0);
    char* got = read_in(dir, "train_results.json");
    char* want = fixture_text("train_results.json");
    assert_string_equal(got, want);
    free(got);
    free(want);
    assert_int_equal(results_save_metrics(dir, "eval", em, true, err, sizeof err), 0);
    got = read_in(dir, "all_results.json");
    want = fixture_text("all_results.json");
    assert_string_equal(got, want);  // union of train and eval, sorted, indent 4
    free(got);
    free(want);
    // eval_results.json has only eval's keys and parses back to the same values
    got = read_in(dir, "eval_results.json");
    json_t* back = json_loads(got, 0, NULL);
    assert_non_null(back);
    assert_true(json_equal(back, em));
    json_decref(back);
    free(got);
    // a later save of the same split overwrites its keys in all_results
    json_object_set_new(em, "eval_loss", json_real(0.5));
    assert_int_equal(results_save_metrics(dir, "eval", em, true, err, sizeof err), 0);
    got = read_in(dir, "all_results.json");
    back = json_loads(got, 0, NULL);
    assert_true(json_real_value(json_object_get(back, "eval_loss")) == 0.5);
    assert_true(json_real_value(json_object_get(back, "train_loss")) == 1.234567891);
    assert_int_equal(json_object_size(back), 14);
    json_decref(back);
    free(got);
    // no temporary files left behind
    DIR* d = opendir(dir);
    struct dirent* e;
    int files = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        assert_null(strstr(e->d_name, ".tmp-"));
        files++;
    }
    closedir(d);
    assert_int_equal(files, 3);
    // a corrupt all_results.json is an error naming the file and position
    char* ap = t5_path_join(dir, "all_results.json");
    t5test_write_file(ap, "{\n  \"epoch\": 1.0,\n  oops\n}");
    assert_int_equal(results_save_metrics(dir, "train", tm, true, err, sizeof err), -1);
    assert_contains(err, "all_results.json:3:");
    free(ap);
    json_decref(tm);
    json_decref(em);
    free(dir);
}

static void test_log_metrics_block(void** state) {
    (void)state;
    char* out = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&out, &len);
    json_t* tm = train_metrics();
    json_t* em = eval_metrics();
    results_log_metrics(f, "train", tm);
    results_log_metrics(f, "eval", em);
    fclose(f);
    char* want = fixture_text("metrics.txt");
    assert_string_equal(out, want);
    free(want);
    free(out);
    json_decref(tm);
    json_decref(em);
}

static void test_speed_metrics(void** state) {
    (void)state;
    json_t* m = json_object();
    results_speed_metrics(m, "train", 3725.45678, 500, 500, -1);
    char* s = results_dumps(m, -1, true);
    assert_string_equal(s, "{\"train_runtime\": 3725.4568, \"train_samples_per_second\": 0.134, "
                           "\"train_steps_per_second\": 0.134}");
    free(s);
    json_decref(m);
    m = json_object();
    results_speed_metrics(m, "eval", 0.0, 10, 2, 100);
    s = results_dumps(m, 2, true);
    assert_string_equal(s, "{\n  \"eval_runtime\": 0.0\n}");
    free(s);
    json_decref(m);
}

static void test_dumps_python_style(void** state) {
    (void)state;
    json_t* v = json_pack("{s:[], s:{}, s:s, s:[i, f, b, n]}", "z", "a", "s", "h\u00e9\"\n\xf0\x9f\x98\x80", "l", 3,
                          65536.0, 1);
    char* s = results_dumps(v, 2, true);
    assert_string_equal(s, "{\n  \"a\": {},\n  \"l\": [\n    3,\n    65536.0,\n    true,\n    null\n  ],\n"
                           "  \"s\": \"h\\u00e9\\\"\\n\\ud83d\\ude00\",\n  \"z\": []\n}");
    free(s);
    json_decref(v);
}

static void fill_state(TrainerState* s) {
    trainer_state_init(s);
    s->epoch = 1.0;
    s->global_step = 100;
    s->max_steps = 500;
    s->logging_steps = 100;
    s->eval_steps = 250;
    s->save_steps = 250;
    s->train_batch_size = 1;
    s->num_train_epochs = 1;
    s->total_flos = 1234567890123.0;
    s->should_training_stop = true;
    s->should_save = true;
    json_t* e = json_object();
    results_set_real(e, "loss", 2.8415);
    results_set_real(e, "grad_norm", 3.718281828459045);
    results_set_real(e, "learning_rate", 4.02e-05);
    results_set_real(e, "epoch", 0.2);
    trainer_state_append_log(s, e);
    s->global_step = 250;
    e = json_object();
    results_set_real(e, "eval_loss", 1.9876543);
    results_set_real(e, "eval_bleu", 21.0123);
    results_set_real(e, "eval_runtime", 12.3456);
    results_set_real(e, "epoch", 0.5);
    trainer_state_append_log(s, e);
    s->global_step = 500;
    e = json_object();
    results_set_real(e, "train_runtime", 3725.4567);
    results_set_real(e, "train_samples_per_second", 0.134);
    results_set_real(e, "train_steps_per_second", 0.134);
    results_set_real(e, "total_flos", 1234567890123.0);
    results_set_real(e, "train_loss", 2.1234567891);
    results_set_real(e, "epoch", 1.0);
    trainer_state_append_log(s, e);
}

static void test_trainer_state_like_hf(void** state) {
    (void)state;
    TrainerState s;
    fill_state(&s);
    char* path = t5_path_join(t5test_tmpdir(), "trainer_state.json");
    char err[512] = "";
    assert_int_equal(trainer_state_save(&s, path, err, sizeof err), 0);
    char* got = t5_read_file(path, NULL);
    char* want = fixture_text("trainer_state.json");
    assert_string_equal(got, want);
    free(got);
    free(want);

    // read HF's own file back
    char* fdir = t5_path_join(t5test_repo_dir(), "test/fixtures/trainer_log");
    char* fpath = t5_path_join(fdir, "trainer_state.json");
    TrainerState r;
    trainer_state_init(&r);
    assert_int_equal(trainer_state_load(&r, fpath, err, sizeof err), 0);
    assert_int_equal(r.global_step, 500);
    assert_int_equal(r.max_steps, 500);
    assert_int_equal(r.eval_steps, 250);
    assert_int_equal(r.train_batch_size, 1);
    assert_true(r.total_flos == 1234567890123.0);
    assert_true(r.should_training_stop);
    assert_false(r.should_log);
    assert_int_equal(json_array_size(r.log_history), 3);
    assert_true(json_equal(r.log_history, s.log_history));
    // resume appends to the loaded history
    r.global_step = 600;
    trainer_state_append_log(&r, json_pack("{s:f}", "loss", 1.5));
    assert_int_equal(json_integer_value(json_object_get(json_array_get(r.log_history, 3), "step")), 600);

    // bad files: clear errors naming the file, state untouched
    t5test_write_file(path, "{\"global_step\": \"ten\"}");
    assert_int_equal(trainer_state_load(&r, path, err, sizeof err), -1);
    assert_contains(err, "trainer_state.json: \"global_step\" must be an integer");
    t5test_write_file(path, "{\"global_step\": 3,");
    assert_int_equal(trainer_state_load(&r, path, err, sizeof err), -1);
    assert_contains(err, "trainer_state.json:1:");
    assert_int_equal(r.global_step, 600);
    trainer_state_free(&r);
    trainer_state_free(&s);
    free(fpath);
    free(fdir);
    free(path);
}

// total_flos as HF's floating_point_ops: 6 * input_ids.numel() * num_parameters(exclude_embeddings=True).
// The counts are t5-small's 60,506,624 parameters less shared (32128 x 512) and the two relative_attention_bias
// tables (32 x 8 each), and t5-v1_1-small's with its untied lm_head counted (worked out block by block).
static void test_hf_total_flos(void** state) {
    (void)state;
    T5Config c;
    assert_true(t5_config_preset("t5-small", &c));
    assert_int_equal(results_hf_nonembedding_params(&c), 60506624 - 32128 * 512 - 2 * 32 * 8);
    assert_int_equal(results_hf_nonembedding_params(&c), 44056576);
    // a batch of 4 rows padded to 24 source tokens: 96 input ids
    assert_true(results_hf_floating_point_ops(&c, 96) == 6.0 * 96 * 44056576.0);
    assert_true(t5_config_preset("google/t5-v1_1-small", &c));
    assert_int_equal(results_hf_nonembedding_params(&c),
                     8 * (4 * 512 * 384 + 3 * 512 * 1024 + 2 * 512) +          // encoder blocks
                         8 * (8 * 512 * 384 + 3 * 512 * 1024 + 3 * 512) +      // decoder blocks
                         2 * 512 + 32128 * 512);                                // final norms, untied lm_head
    assert_int_equal(results_hf_nonembedding_params(&c), 60511232);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_metrics_like_hf),
        cmocka_unit_test(test_log_metrics_block),
        cmocka_unit_test(test_speed_metrics),
        cmocka_unit_test(test_dumps_python_style),
        cmocka_unit_test(test_trainer_state_like_hf),
        cmocka_unit_test(test_hf_total_flos),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
