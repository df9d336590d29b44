/*
 * test_loss_scaler.c: src/train/loss_scaler.c against golden traces of DeepSpeed's DynamicLossScaler
 * (test/fixtures/loss_scaler/<scenario>.txt, written by scripts/make_loss_scaler_fixtures.py, a line-by-line
 * transcription of deepspeed/runtime/fp16/loss_scaler.py + config.py). Every step must match exactly:
 * the scale (compared as doubles), the hysteresis counter, last_overflow_iter and the log line.
 */
#include "t5test.h"

#include <math.h>

#include "../src/base/common.h"
#include "../src/zero/loss_scaler.h"

// Parses the "config k=v ..." line into a LossScalerConfig with the presence flags set.
static void parse_config(const char* line, LossScalerConfig* c) {
    loss_scaler_config_default(c);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", line + strlen("config "));
    for (char* tok = strtok(buf, " \n"); tok; tok = strtok(NULL, " \n")) {
        char* eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = '\0';
        const char* v = eq + 1;
        if (!strcmp(tok, "loss_scale")) c->loss_scale = atof(v);
        else if (!strcmp(tok, "initial_scale_power")) c->initial_scale_power = atoi(v), c->has_initial_scale_power = true;
        else if (!strcmp(tok, "loss_scale_window")) c->loss_scale_window = atoll(v), c->has_loss_scale_window = true;
        else if (!strcmp(tok, "hysteresis")) c->hysteresis = atoi(v), c->has_hysteresis = true;
        else if (!strcmp(tok, "consecutive_hysteresis")) c->consecutive_hysteresis = atoi(v) != 0, c->has_consecutive_hysteresis = true;
        else if (!strcmp(tok, "min_loss_scale")) c->min_loss_scale = atof(v), c->has_min_loss_scale = true;
        else fail_msg("unknown config key %s", tok);
    }
}

// Runs one fixture; returns the number of steps checked.
static int run_fixture(const char* name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/test/fixtures/loss_scaler/%s.txt", t5test_repo_dir(), name);
    FILE* f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    char line[1024];
    LossScalerConfig cfg;
    LossScaler s;
    int steps = 0, lineno = 0;
    bool have_init = false, saw_error = false;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        if (!strncmp(line, "config ", 7)) {
            parse_config(line, &cfg);
            char err[256];
            assert_int_equal(loss_scaler_init(&s, &cfg, err, sizeof err), 0);
            continue;
        }
        if (!strncmp(line, "init ", 5)) {
            int dyn, ds, cons;
            double scale, minsc;
            long long win;
            assert_int_equal(sscanf(line, "init %d %lf %lld %d %d %lf", &dyn, &scale, &win, &ds, &cons, &minsc), 6);
            assert_int_equal(s.dynamic, dyn);
            if (s.cur_scale != scale) fail_msg("%s: initial scale %.17g, DeepSpeed %.17g", name, s.cur_scale, scale);
            if (dyn) {
                assert_int_equal(s.scale_window, win);
                assert_int_equal(s.delayed_shift, ds);
                assert_int_equal(s.cur_hysteresis, ds);
                assert_int_equal(s.consecutive_hysteresis, cons);
                assert_true(s.min_scale == minsc);
            }
            have_init = true;
            continue;
        }
        assert_true(have_init);
        const char* bar = strstr(line, " | ");
        assert_non_null(bar);
        const char* msg = bar + 3;
        if (!strncmp(line, "error ", 6)) {
            int it = atoi(line + 6);
            LossScalerUpdate u = loss_scaler_update(&s, true);
            if (u.event != LOSS_SCALER_AT_MIN)
                fail_msg("%s:%d: iter %d: DeepSpeed raises at min scale, we got event %d", name, lineno, it, u.event);
            assert_string_equal(msg, LOSS_SCALER_MIN_SCALE_MSG);
            assert_int_equal(s.cur_iter, it);
            saw_error = true;
            break;
        }
        int it, ov, hyst;
        double scale;
        long long last;
        assert_int_equal(sscanf(line, "%d %d %lf %d %lld", &it, &ov, &scale, &hyst, &last), 5);
        assert_int_equal(s.cur_iter, it);
        LossScalerUpdate u = loss_scaler_update(&s, ov != 0);
        if (s.cur_scale != scale)
            fail_msg("%s:%d: iter %d overflow %d: scale %.17g, DeepSpeed %.17g", name, lineno, it, ov, s.cur_scale, scale);
        assert_true(u.new_scale == s.cur_scale);
        assert_int_equal(u.overflow, ov);
        if (s.dynamic) {
            if (s.cur_hysteresis != hyst)
                fail_msg("%s:%d: iter %d: hysteresis %d, DeepSpeed %d", name, lineno, it, s.cur_hysteresis, hyst);
            assert_int_equal(s.last_overflow_iter, last);
        } else {
            assert_int_equal(u.event, ov ? LOSS_SCALER_STATIC_OVERFLOW : LOSS_SCALER_KEPT);
        }
        char got[512];
        int len = loss_scaler_format_overflow(got, sizeof got, &u, 0);
        if (!strcmp(msg, "-")) {
            if (len != 0) fail_msg("%s:%d: unexpected log line '%s'", name, lineno, got);
        } else if (strcmp(got, msg) != 0) {
            fail_msg("%s:%d: log line\n  got:      '%s'\n  DeepSpeed '%s'", name, lineno, got, msg);
        }
        steps++;
    }
    fclose(f);
    (void)saw_error;
    assert_true(steps > 0);
    return steps;
}

#define FIXTURE_TEST(name)                                    \
    static void test_##name(void** state) {                   \
        (void)state;                                          \
        int n = run_fixture(#name);                           \
        print_message("# %s: %d steps match DeepSpeed\n", #name, n); \
    }
FIXTURE_TEST(class_defaults)
FIXTURE_TEST(ds_defaults)
FIXTURE_TEST(homework)
FIXTURE_TEST(hysteresis3)
FIXTURE_TEST(consecutive)
FIXTURE_TEST(window_growth)
FIXTURE_TEST(min_scale)
FIXTURE_TEST(min_scale_fraction)
FIXTURE_TEST(static)
FIXTURE_TEST(random_long)

// The defaults quirk spelled out: no dynamic key -> 2^32 / hysteresis 1; any key -> 2^16 / hysteresis 2.
static void test_defaults_quirk(void** state) {
    (void)state;
    LossScalerConfig c;
    LossScaler s;
    char err[256];
    loss_scaler_config_default(&c);
    assert_int_equal(loss_scaler_init(&s, &c, err, sizeof err), 0);
    assert_true(s.dynamic);
    assert_true(s.cur_scale == 4294967296.0);
    assert_int_equal(s.delayed_shift, 1);
    assert_int_equal(s.scale_window, 1000);
    c.has_min_loss_scale = true;  // value is the default 1, only its presence matters
    assert_int_equal(loss_scaler_init(&s, &c, err, sizeof err), 0);
    assert_true(s.cur_scale == 65536.0);
    assert_int_equal(s.delayed_shift, 2);
    // the first overflow with hysteresis 2 is logged with the hysteresis wording
    LossScalerUpdate u = loss_scaler_update(&s, true);
    char line[256];
    assert_true(loss_scaler_format_overflow(line, sizeof line, &u, 0) > 0);
    assert_string_equal(line, "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but "
                              "hysteresis is 2. Reducing hysteresis to 1");
}

static void test_bad_config(void** state) {
    (void)state;
    LossScalerConfig c;
    LossScaler s;
    char err[256];
    loss_scaler_config_default(&c);
    c.has_loss_scale_window = true, c.loss_scale_window = 0;
    assert_int_equal(loss_scaler_init(&s, &c, err, sizeof err), -1);
    assert_contains(err, "loss_scale_window");
    loss_scaler_config_default(&c);
    c.has_hysteresis = true, c.hysteresis = 0;
    assert_int_equal(loss_scaler_init(&s, &c, err, sizeof err), -1);
    assert_contains(err, "hysteresis");
    loss_scaler_config_default(&c);
    c.loss_scale = -1;
    assert_int_equal(loss_scaler_init(&s, &c, err, sizeof err), -1);
    assert_contains(err, "loss_scale");
    loss_scaler_config_default(&c);
    c.has_min_loss_scale = true, c.min_loss_scale = 0;
    assert_int_equal(loss_scaler_init(&s, &c, err, sizeof err), -1);
    assert_contains(err, "min_loss_scale");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_defaults),  cmocka_unit_test(test_ds_defaults),
        cmocka_unit_test(test_homework),        cmocka_unit_test(test_hysteresis3),
        cmocka_unit_test(test_consecutive),     cmocka_unit_test(test_window_growth),
        cmocka_unit_test(test_min_scale),       cmocka_unit_test(test_min_scale_fraction),
        cmocka_unit_test(test_static),          cmocka_unit_test(test_random_long),
        cmocka_unit_test(test_defaults_quirk),  cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
