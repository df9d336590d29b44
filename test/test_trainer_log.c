/*
 * test_trainer_log.c: src/report/trainer_log.c against the real thing: tqdm's format_meter and Python's float
 * repr/round (fixtures from scripts/make_trainer_log_fixtures.py), HF's header text, and the log files
 * parsed back with jansson.
 */
#include "t5test.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <unistd.h>

#include "../src/base/common.h"
#include "../src/report/results.h"
#include "../src/report/trainer_log.h"

static char* fixture_path(const char* name) {
    char* dir = t5_path_join(t5test_repo_dir(), "test/fixtures/trainer_log");
    char* p = t5_path_join(dir, name);
    free(dir);
    return p;
}

// splits a line on tabs in place; returns the field count
static int split_tabs(char* line, char** f, int maxf) {
    int n = 0;
    f[n++] = line;
    for (char* p = line; *p && n < maxf; p++)
        if (*p == '\t') {
            *p = 0;
            f[n++] = p + 1;
        }
    return n;
}

static void test_meter_matches_tqdm(void** state) {
    (void)state;
    char* path = fixture_path("meter.tsv");
    char* text = t5_read_file(path, NULL);
    assert_non_null(text);
    int cases = 0;
    for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char* f[8];
        assert_int_equal(split_tabs(line, f, 8), 6);
        int64_t n = atoll(f[0]), total = atoll(f[1]);
        double elapsed = strtod(f[2], NULL);
        double rate = strcmp(f[3], "none") == 0 ? -1 : strtod(f[3], NULL);
        int ncols = atoi(f[4]);
        char got[1024];
        progress_format_meter(got, sizeof got, n, total, elapsed, rate, 0, ncols);
        if (strcmp(got, f[5]) != 0)
            fail_msg("format_meter(n=%lld, total=%lld, elapsed=%g, rate=%s, ncols=%d):\n  got  [%s]\n  tqdm [%s]",
                     (long long)n, (long long)total, elapsed, f[3], ncols, got, f[5]);
        cases++;
    }
    assert_true(cases >= 15);
    free(text);
    free(path);
}

static void test_format_interval(void** state) {
    (void)state;
    char b[32];
    progress_format_interval(b, sizeof b, 606.4);
    assert_string_equal(b, "10:06");
    progress_format_interval(b, sizeof b, 95516.9);
    assert_string_equal(b, "26:31:56");
    progress_format_interval(b, sizeof b, 0);
    assert_string_equal(b, "00:00");
    progress_format_interval(b, sizeof b, 3599.99);
    assert_string_equal(b, "59:59");
    progress_format_interval(b, sizeof b, 3600);
    assert_string_equal(b, "1:00:00");
    progress_format_interval(b, sizeof b, -5.5);
    assert_string_equal(b, "-00:05");
}

static void test_python_repr_and_round(void** state) {
    (void)state;
    char* path = fixture_path("repr.tsv");
    char* text = t5_read_file(path, NULL);
    assert_non_null(text);
    int cases = 0;
    for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char* f[6];
        assert_int_equal(split_tabs(line, f, 6), 4);
        double x = strtod(f[0], NULL);  // C99 strtod reads Python's float.hex()
        char got[400];
        py_float_repr(got, sizeof got, x);
        if (strcmp(got, f[1])) fail_msg("repr(%s): got %s, Python %s", f[0], got, f[1]);
        py_float_repr(got, sizeof got, py_round(x, 4));
        if (strcmp(got, f[2])) fail_msg("round(%s, 4): got %s, Python %s", f[1], got, f[2]);
        py_float_repr(got, sizeof got, py_round(x, 2));
        if (strcmp(got, f[3])) fail_msg("round(%s, 2): got %s, Python %s", f[1], got, f[3]);
        cases++;
    }
    assert_true(cases >= 20);
    free(text);
    free(path);
}

static char* capture(void (*fn)(FILE*, void*), void* arg) {
    char* buf = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    fn(f, arg);
    fclose(f);
    return buf;
}

static void header_fn(FILE* f, void* arg) { trainer_log_header(f, (const TrainHeader*)arg); }

static void test_hf_header(void** state) {
    (void)state;
    TrainHeader h = {.num_examples = 500, .num_epochs = 1, .per_device_batch_size = 1, .total_batch_size = 1,
                     .gradient_accumulation_steps = 1, .max_steps = 500, .num_trainable_params = 2851598336LL};
    char* got = capture(header_fn, &h);
    assert_string_equal(got,
                        "***** Running training *****\n"
                        "  Num examples = 500\n"
                        "  Num Epochs = 1\n"
                        "  Instantaneous batch size per device = 1\n"
                        "  Total train batch size (w. parallel, distributed & accumulation) = 1\n"
                        "  Gradient Accumulation steps = 1\n"
                        "  Total optimization steps = 500\n"
                        "  Number of trainable parameters = 2,851,598,336\n");
    free(got);
    char b[48];
    trainer_log_format_thousands(b, sizeof b, 610320);
    assert_string_equal(b, "610,320");
    trainer_log_format_thousands(b, sizeof b, 999);
    assert_string_equal(b, "999");
    trainer_log_format_thousands(b, sizeof b, -1234567);
    assert_string_equal(b, "-1,234,567");
}

static StepLog example_step(void) {
    StepLog s = {.step = 120, .max_steps = 3000, .epoch = 0.1234, .loss = 1.2345678, .grad_norm = 0.81234,
                 .lr = 4.8e-05, .loss_scale = 65536, .skipped = 3, .step_ms = 412.34, .tokens_per_s = 18234.4,
                 .samples_per_s = 12.46, .gpu_mem_alloc_gib = 10.21, .gpu_mem_peak_gib = 12.34, .rss_gib = 3.14};
    return s;
}

static void test_step_lines(void** state) {
    (void)state;
    StepLog s = example_step();
    char b[1024];
    trainer_log_format_step(b, sizeof b, &s);
    assert_string_equal(b,
                        "step 120/3000 | loss 1.234568 | norm 0.8123 | lr 4.80e-05 | scale 65536 | skipped 3 | "
                        "412.3 ms | 18234 tok/s | 12.5 samples/s | mem 10.2/12.3 GiB | rss 3.1 GiB");
    s.grad_norm = 0.81;
    trainer_log_format_hf_dict(b, sizeof b, &s);
    assert_string_equal(b, "{'loss': 1.2346, 'grad_norm': 0.81, 'learning_rate': 4.8e-05, 'epoch': 0.12}");
    trainer_log_format_main(b, sizeof b, &s);
    assert_string_equal(b, "s:120 trl:1.2346 lr:4.8e-05 norm:0.81 scale:65536");
    // bf16 run: no scaler fields; unknown memory not printed
    s.loss_scale = 0;
    s.gpu_mem_alloc_gib = s.gpu_mem_peak_gib = -1;
    s.rss_gib = -1;
    trainer_log_format_step(b, sizeof b, &s);
    assert_string_equal(b, "step 120/3000 | loss 1.234568 | norm 0.8100 | lr 4.80e-05 | 412.3 ms | 18234 tok/s | "
                           "12.5 samples/s");
    // a short buffer is truncated, never overrun
    char small[16];
    memset(small, 'x', sizeof small);
    int n = trainer_log_format_step(small, 10, &s);
    assert_true(n > 10);
    assert_int_equal(strlen(small), 9);
    assert_int_equal(small[10], 'x');
}

// include_num_input_tokens_seen: the count on the step line, in HF's dict (after the epoch, as Trainer.log), in
// trainer_log.jsonl and main.log; absent when off (above)
static void test_tokens_seen(void** state) {
    (void)state;
    StepLog s = example_step();
    s.grad_norm = 0.81;
    s.tokens_seen_on = true;
    s.num_input_tokens_seen = 123456;
    char b[1024];
    trainer_log_format_step(b, sizeof b, &s);
    assert_non_null(strstr(b, " | tokens seen 123456"));
    trainer_log_format_hf_dict(b, sizeof b, &s);
    assert_string_equal(b, "{'loss': 1.2346, 'grad_norm': 0.81, 'learning_rate': 4.8e-05, 'epoch': 0.12, "
                           "'num_input_tokens_seen': 123456}");
    trainer_log_format_json(b, sizeof b, &s);
    json_error_t je;
    json_t* j = json_loads(b, 0, &je);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "num_input_tokens_seen")), 123456);
    json_decref(j);
    trainer_log_format_main(b, sizeof b, &s);
    assert_non_null(strstr(b, " nits:123456"));
}

// wall_clock_breakdown: DeepSpeed's SynchronizedWallClockTimer.log lines (utils/timer.py, 0.19.8), byte for byte
static void test_wall_clock_lines(void** state) {
    (void)state;
    const double ms[5] = {12.345, 30.5, 25.25, 5.25, 0};
    char b[512];
    trainer_log_format_wall_clock(b, sizeof b, true, ms);
    assert_string_equal(b, "[Rank 0] time (ms) | fwd_microstep: 12.35 | bwd_microstep: 30.50 | bwd_inner_microstep: "
                           "25.25 | bwd_allreduce_microstep: 5.25 | step_microstep: 0.00");
    const double sum[5] = {24.5, 61, 50.5, 10.5, 7.125};
    trainer_log_format_wall_clock(b, sizeof b, false, sum);
    assert_string_equal(b, "[Rank 0] time (ms) | fwd: 24.50 | bwd: 61.00 | bwd_inner: 50.50 | bwd_allreduce: 10.50 | "
                           "step: 7.12");
}

// --log_level warning and above: HF's logger.info lines (the header, "***** train metrics *****", info lines) go;
// the step and eval-metric lines (HF's progress callback) and warnings stay; error drops the warnings too
static void test_log_level(void** state) {
    (void)state;
    TrainHeader h = {.num_examples = 5, .num_epochs = 1, .per_device_batch_size = 1, .total_batch_size = 1,
                     .gradient_accumulation_steps = 1, .max_steps = 5, .num_trainable_params = 10};
    char* dir = t5_path_join(t5test_tmpdir(), "levels");
    assert_int_equal(t5_mkdir_p(dir), 0);
    for (int lvl = T5_LOG_PASSIVE; lvl <= T5_LOG_CRITICAL; lvl++) {
        t5_set_log_level(lvl);
        char* out = NULL;
        size_t len = 0;
        FILE* o = open_memstream(&out, &len);
        trainer_log_header(o, &h);
        trainer_log_eval_header(o, 5, 1);
        json_t* m = json_pack("{s:f}", "train_loss", 1.5);
        results_log_metrics(o, "train", m);
        json_decref(m);
        TrainerLog t;
        trainer_log_init(&t, o, dir, 0);
        trainer_log_line(&t, "Saving model checkpoint to x");
        StepLog s = example_step();
        trainer_log_step(&t, &s);
        const char* keys[1] = {"eval_loss"};
        double vals[1] = {0.5};
        trainer_log_eval(&t, 5, keys, vals, 1);
        trainer_log_free(&t);
        fclose(o);
        const bool info = lvl <= T5_LOG_INFO;
        if ((strstr(out, "***** Running training *****") != NULL) != info) fail_msg("level %d: header", lvl);
        if ((strstr(out, "***** Running Evaluation *****") != NULL) != info) fail_msg("level %d: eval header", lvl);
        if ((strstr(out, "***** train metrics *****") != NULL) != info) fail_msg("level %d: metrics", lvl);
        if ((strstr(out, "Saving model checkpoint") != NULL) != info) fail_msg("level %d: info line", lvl);
        if (!strstr(out, "step 120/3000") || !strstr(out, "eval step 5 | eval_loss 0.5000"))
            fail_msg("level %d: a step or eval line is missing:\n%s", lvl, out);
        assert_int_equal(t5_log_info(), info);
        free(out);
    }
    t5_set_log_level(T5_LOG_PASSIVE);
    free(dir);
}

static void test_log_files_parse_back(void** state) {
    (void)state;
    char* dir = t5_path_join(t5test_tmpdir(), "logs");
    assert_int_equal(t5_mkdir_p(dir), 0);
    char* out = NULL;
    size_t outlen = 0;
    FILE* o = open_memstream(&out, &outlen);
    TrainerLog t;
    trainer_log_init(&t, o, dir, 0);
    StepLog s = example_step();
    double losses[3] = {2.5, 1.0 / 3.0, 0.1 + 0.2};
    for (int i = 0; i < 3; i++) {
        s.step = 10 * (i + 1);
        s.loss = losses[i];
        trainer_log_step(&t, &s);
    }
    s.grad_norm = NAN;  // not computed: null in JSON
    s.step = 40;
    trainer_log_step(&t, &s);
    const char* keys[2] = {"eval_loss", "eval_bleu"};
    double vals[2] = {0.987654321, 27.1234};
    trainer_log_eval(&t, 40, keys, vals, 2);
    trainer_log_overflow(&t, 41,
                         "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
                         32768);
    // rank 1 writes nothing
    TrainerLog t1;
    trainer_log_init(&t1, o, dir, 1);
    trainer_log_step(&t1, &s);
    trainer_log_free(&t1);
    fclose(o);
    assert_contains(out, "step 10/3000 | loss 2.500000");
    assert_contains(out, "{'loss': 0.3333, 'grad_norm': 0.81234, 'learning_rate': 4.8e-05, 'epoch': 0.12}");
    assert_contains(out, "{'loss': 0.3, 'learning_rate': 4.8e-05, 'epoch': 0.12}");
    assert_contains(out, "eval step 40 | eval_loss 0.9877 | eval_bleu 27.1234");
    assert_contains(out, "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n");

    char* jp = t5_path_join(dir, "trainer_log.jsonl");
    char* text = t5_read_file(jp, NULL);
    assert_non_null(text);
    int nl = 0;
    for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), nl++) {
        json_error_t e;
        json_t* j = json_loads(line, 0, &e);
        if (!j) fail_msg("line %d is not JSON (%s): %s", nl + 1, e.text, line);
        if (nl < 3) {
            assert_int_equal(json_integer_value(json_object_get(j, "step")), 10 * (nl + 1));
            // the loss survives bit for bit (shortest round-trip repr)
            double l = json_real_value(json_object_get(j, "loss"));
            assert_memory_equal(&l, &losses[nl], sizeof l);
            assert_true(json_real_value(json_object_get(j, "learning_rate")) == 4.8e-05);
            assert_true(json_number_value(json_object_get(j, "loss_scale")) == 65536);
            assert_int_equal(json_integer_value(json_object_get(j, "skipped")), 3);
            assert_true(json_real_value(json_object_get(j, "rss_gib")) == 3.14);
        } else if (nl == 3) {
            assert_true(json_is_null(json_object_get(j, "grad_norm")));
        } else if (nl == 4) {
            assert_true(json_real_value(json_object_get(j, "eval_loss")) == 0.987654321);
            assert_true(json_real_value(json_object_get(j, "eval_bleu")) == 27.1234);
        } else {
            assert_string_equal(json_string_value(json_object_get(j, "event")), "overflow");
            assert_contains(json_string_value(json_object_get(j, "message")), "reducing to 32768");
        }
        json_decref(j);
    }
    assert_int_equal(nl, 6);
    free(text);
    char* mp = t5_path_join(dir, "main.log");
    text = t5_read_file(mp, NULL);
    assert_non_null(text);
    assert_contains(text, "s:10 trl:2.5000 lr:4.8e-05 norm:0.8123 scale:65536\n");
    assert_contains(text, "s:40 eval_loss:0.9877 eval_bleu:27.1234\n");
    assert_contains(text, "s:41 overflow:32768\n");
    trainer_log_free(&t);
    free(text);
    free(mp);
    free(jp);
    free(out);
    free(dir);
}

static void test_progress_plain_lines(void** state) {
    (void)state;
    char* out = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&out, &len);  // not a terminal: plain lines
    ProgressBar p;
    progress_init(&p, f, 100, 0, 1000.0, 0);
    assert_false(p.tty);
    for (int i = 1; i <= 50; i++) progress_update(&p, i, 1000.0 + i);  // 1 it/s, a line every 30 s
    progress_close(&p, 1050.0);
    fclose(f);
    // initial line, one at 30 s (30 steps), final at 50 s; no carriage returns
    assert_null(strchr(out, '\r'));
    assert_string_equal(out,
                        "  0%|          | 0/100 [00:00<?, ?it/s]\n"
                        " 30%|███       | 30/100 [00:30<01:10,  1.00it/s]\n"
                        " 50%|█████     | 50/100 [00:50<00:50,  1.00it/s]\n");
    free(out);
}

// --disable_tqdm: no bar line at all, the log lines written through the bar still print
static void test_progress_disabled(void** state) {
    (void)state;
    char* out = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&out, &len);
    ProgressBar p;
    progress_set_disabled(true);
    progress_init(&p, f, 100, 0, 1000.0, 0);
    for (int i = 1; i <= 50; i++) progress_update(&p, i, 1000.0 + i);
    progress_write(&p, "{'loss': 1.5, 'epoch': 0.5}");
    progress_close(&p, 1050.0);
    progress_set_disabled(false);
    fclose(f);
    assert_string_equal(out, "{'loss': 1.5, 'epoch': 0.5}\n");
    free(out);
}

static void test_progress_tty_redraw(void** state) {
    (void)state;
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) || unlockpt(m)) skip();
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    assert_true(s >= 0);
    FILE* f = fdopen(s, "w");
    ProgressBar p;
    progress_init(&p, f, 1000, 0, 0.0, 80);
    assert_true(p.tty);
    // 20 updates in 0.05 s: throttled to at most 10 redraws/s -> none
    for (int i = 1; i <= 20; i++) progress_update(&p, i, 0.0025 * i);
    progress_update(&p, 25, 0.2);  // due: redraw with rate 25/0.2 = 125 it/s
    progress_write(&p, "step 25/1000 | loss 1.000000");
    progress_close(&p, 0.3);
    fclose(f);
    char buf[4096];
    ssize_t n = 0, r;
    fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
    while (n < (ssize_t)sizeof buf - 1 && (r = read(m, buf + n, sizeof buf - 1 - n)) > 0) n += r;
    buf[n] = 0;
    close(m);
    // the pty turns \n into \r\n; count redraws: initial + one due update + the redraw after write + close
    int draws = 0;
    for (char* q = buf; (q = strstr(q, "/1000 [")); q++) draws++;
    assert_contains(buf, "\r  0%|");
    assert_contains(buf, "| 25/1000 [00:00<00:07, 125.00it/s]");
    assert_contains(buf, "step 25/1000 | loss 1.000000");
    assert_int_equal(draws, 4);
}

static void test_host_rss(void** state) {
    (void)state;
    const char* status = "Name:\tt5train\nVmPeak:\t 9999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n";
    assert_int_equal(trainer_log_parse_status(status, "VmRSS"), 1024 * 1024);
    assert_int_equal(trainer_log_parse_status(status, "VmHWM"), 2048 * 1024);
    assert_int_equal(trainer_log_parse_status(status, "VmSwap"), -1);
    int64_t rss = trainer_log_host_rss();
    assert_true(rss > 1024 * 1024);
    assert_true(trainer_log_host_peak_rss() >= rss);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meter_matches_tqdm),
        cmocka_unit_test(test_format_interval),
        cmocka_unit_test(test_python_repr_and_round),
        cmocka_unit_test(test_hf_header),
        cmocka_unit_test(test_step_lines),
        cmocka_unit_test(test_tokens_seen),
        cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_wall_clock_lines),
        cmocka_unit_test(test_log_files_parse_back),
        cmocka_unit_test(test_progress_plain_lines),
        cmocka_unit_test(test_progress_disabled),
        cmocka_unit_test(test_progress_tty_redraw),
        cmocka_unit_test(test_host_rss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
