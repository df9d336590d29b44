/*
 * test_evaluate.c: the CPU parts of src/eval/evaluate.c: gen_len counting (HF np.count_nonzero(pred != pad)), Python
 * round(x, 4), the post-processing (decode with skip_special_tokens, optional clean-up, strip) with the real
 * T5 tokenizer, the "\n".join of generated_predictions.txt, and the metric keys.
 */
#include <jansson.h>
#include <math.h>

#include "t5test.h"

#include "../data/tokenizer.h"
#include "../src/base/common.h"
#include "../src/eval/evaluate.h"

static void test_count_nonpad(void** state) {
    (void)state;
    // greedy row: start token 0, tokens, </s>, pad
    const int32_t greedy[8] = {0, 37, 8, 1, 0, 0, 0, 0};
    assert_int_equal(evaluate_count_nonpad(greedy, 8, 0), 3);
    // beam row: HF fills after the hypothesis with </s> (pad 0 is falsy in `pad or eos`): counted
    const int32_t beam[8] = {0, 37, 8, 1, 1, 1, 1, 1};
    assert_int_equal(evaluate_count_nonpad(beam, 8, 0), 7);
    assert_int_equal(evaluate_count_nonpad(beam, 1, 0), 0);
    // mean of the two, rounded to 4 decimals as HF: (3 + 7) / 2
    assert_true(evaluate_round4((3.0 + 7.0) / 2.0) == 5.0);
}

static void test_round4(void** state) {
    (void)state;
    assert_true(evaluate_round4(27.123449999) == 27.1234);
    assert_true(evaluate_round4(27.12345001) == 27.1235);
    assert_true(evaluate_round4(2.0 / 3.0) == 0.6667);
    // 0.00005 is stored just above 5e-5, so Python's round(0.00005, 4) gives 0.0001
    assert_true(evaluate_round4(0.00005) == 0.0001);
    // 27.12345 is stored below the tie: Python's round() gives 27.1234 (values checked with CPython 3)
    assert_true(evaluate_round4(27.12345) == 27.1234);
    assert_true(evaluate_round4(1.00005) == 1.0001);
    assert_true(evaluate_round4(100.0) == 100.0);
    assert_true(evaluate_round4(0.0) == 0.0);
}

static void test_join_lines(void** state) {
    (void)state;
    char a[] = "Salut.", b[] = "", c[] = "Bun\xc4\x83 ziua";
    char* lines[3] = {a, b, c};
    size_t len = 0;
    char* s = evaluate_join_lines(lines, 3, &len);
    assert_string_equal(s, "Salut.\n\nBun\xc4\x83 ziua");
    assert_int_equal(len, strlen(s));
    free(s);
    s = evaluate_join_lines(lines, 0, &len);
    assert_string_equal(s, "");
    free(s);
}

static void test_postprocess_real_tokenizer(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* dir = t5_path_join(t5test_data_dir(), "t5-spiece");
    char err[1024];
    Tokenizer* tok = tokenizer_open(dir, err, sizeof err);
    free(dir);
    if (!tok) fail_msg("%s", err);
    int32_t* ids = NULL;
    size_t cap = 0;
    const char* text = "Hello , world . It 's fine";
    int n = tokenizer_encode(tok, NULL, text, strlen(text), 0, &ids, &cap, err, sizeof err);
    assert_true(n > 3);
    // a generated row: decoder start (pad 0) first, then the tokens, </s>, fill
    int32_t row[64];
    row[0] = 0;
    memcpy(row + 1, ids, sizeof(int32_t) * (size_t)n);  // ends with </s>
    for (int i = n + 1; i < 64; i++) row[i] = 1;
    char* plain = evaluate_postprocess(tok, row, 64, false);
    char* clean = evaluate_postprocess(tok, row, 64, true);
    // skip_special_tokens drops pad and every </s>; strip() removes nothing here; clean-up joins " ," " ." " 's"
    assert_string_equal(plain, "Hello , world . It 's fine");
    assert_string_equal(clean, "Hello, world. It's fine");
    free(plain);
    free(clean);
    // an empty generation (only </s>) decodes to ""
    int32_t empty[3] = {0, 1, 0};
    char* e = evaluate_postprocess(tok, empty, 3, false);
    assert_string_equal(e, "");
    free(e);
    free(ids);
    tokenizer_close(tok);
}

static void test_metric_keys(void** state) {
    (void)state;
    EvalGenResult r;
    memset(&r, 0, sizeof r);
    snprintf(r.prefix, sizeof r.prefix, "predict");
    r.bleu = 27.1234;
    r.gen_len = 31.5;
    r.runtime = 2.0;
    r.num_samples = 10;
    r.num_steps = 3;
    json_t* m = json_object();
    evaluate_add_metrics(m, &r);
    assert_true(json_real_value(json_object_get(m, "predict_bleu")) == 27.1234);
    assert_true(json_real_value(json_object_get(m, "predict_gen_len")) == 31.5);
    assert_true(json_real_value(json_object_get(m, "predict_runtime")) == 2.0);
    assert_true(json_real_value(json_object_get(m, "predict_samples_per_second")) == 5.0);
    assert_true(json_real_value(json_object_get(m, "predict_steps_per_second")) == 1.5);
    assert_int_equal(json_integer_value(json_object_get(m, "predict_samples")), 10);
    json_decref(m);
    // no predictions kept -> a clear error
    char err[256];
    assert_int_equal(evaluate_write_predictions(t5test_tmpdir(), &r, err, sizeof err), -1);
    assert_contains(err, "keep_predictions");
    // with predictions: the file is "\n".join, no trailing newline
    char l1[] = "Unu.", l2[] = "Doi.";
    char* lines[2] = {l1, l2};
    r.predictions = lines;
    r.num_samples = 2;
    assert_int_equal(evaluate_write_predictions(t5test_tmpdir(), &r, err, sizeof err), 0);
    char* p = t5_path_join(t5test_tmpdir(), "generated_predictions.txt");
    size_t len = 0;
    char* text = t5_read_file(p, &len);
    assert_string_equal(text, "Unu.\nDoi.");
    free(text);
    free(p);
}

// the line saying how the ranks shared a generation (the trainer prints it on several ranks; test_gpu_multi_eval
// parses it): every rank's counts in rank order, "" for one rank, truncated safely
static void test_shard_line(void** state) {
    (void)state;
    EvalGenRankCounts c[2] = {{5, 0, 96, 24, 960}, {4, 1, 96, 24, 960}};
    EvalGenResult r = {.prefix = "eval", .mode = EVAL_GEN_LOCKSTEP, .world = 2, .ranks = c};
    char buf[512];
    evaluate_shard_line(&r, buf, sizeof buf);
    assert_string_equal(buf, "eval generation on 2 ranks, sharded in lockstep (steps agreed): batches per rank 5 4 | "
                             "padding 0 1 | decoder steps 96 96 | agreements 24 24 | unit gathers 960 960");
    r.mode = EVAL_GEN_WHOLE_SPLIT;
    evaluate_shard_line(&r, buf, sizeof buf);
    assert_non_null(strstr(buf, "eval generation on 2 ranks, whole split on every rank: batches per rank 5 4 |"));
    for (size_t cap = 1; cap < 40; cap += 7) {  // truncated, terminated, never past cap
        char small[48];
        memset(small, 'x', sizeof small);
        evaluate_shard_line(&r, small, cap);
        assert_int_equal(strlen(small), cap - 1);
        assert_int_equal(small[cap], 'x');
    }
    r.world = 1;
    evaluate_shard_line(&r, buf, sizeof buf);
    assert_string_equal(buf, "");
}

static void test_options_check(void** state) {
    (void)state;
    GenerateOptions o;
    generate_options_default(&o);
    char err[256];
    assert_int_equal(generate_options_check(&o, err, sizeof err), 0);
    assert_int_equal(o.max_length, 128);
    o.num_beams = 0;
    assert_int_equal(generate_options_check(&o, err, sizeof err), -1);
    assert_contains(err, "num_beams = 0");
    o.num_beams = 4;
    o.no_repeat_ngram_size = 2;
    assert_int_equal(generate_options_check(&o, err, sizeof err), -1);
    assert_contains(err, "not implemented yet: no_repeat_ngram_size");
    o.no_repeat_ngram_size = 0;
    o.max_length = 1;
    assert_int_equal(generate_options_check(&o, err, sizeof err), -1);
    assert_contains(err, "max_length = 1");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_nonpad),        cmocka_unit_test(test_round4),
        cmocka_unit_test(test_join_lines),          cmocka_unit_test(test_postprocess_real_tokenizer),
        cmocka_unit_test(test_metric_keys),         cmocka_unit_test(test_options_check),
        cmocka_unit_test(test_shard_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
