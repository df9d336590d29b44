/*
 * test_lr_schedule.c: src/train/lr_schedule.c against test/fixtures/lr/schedules.txt, written by
 * scripts/make_lr_fixtures.py (transcriptions of transformers' get_scheduler lambdas + torch LambdaLR
 * and DeepSpeed's WarmupLR/WarmupDecayLR, with the trainer's "use lr, then step the scheduler" loop).
 * Tolerance: |lr - ref| <= 1e-13 * |ref| + 1e-300. Both sides evaluate the same double expressions
 * in the same order; the only possible difference is libm (cos/log/pow) being off by an ulp or two
 * between the Python build and this one, i.e. ~2e-16 relative, far below 1e-13. A schedule that is
 * off by one step differs by >= 1e-4 relative on every case here, so the test can fail.
 */
#include "t5test.h"

#include <math.h>

#include "../src/train/lr_schedule.h"

static void parse_case(char* line, LRSchedule* s, char* name, size_t namecap) {
    char* save = NULL;
    strtok_r(line, " ", &save);  // "case"
    snprintf(name, namecap, "%s", strtok_r(NULL, " ", &save));
    const char* tname = strtok_r(NULL, " ", &save);
    LRScheduleType type;
    if (lr_schedule_type_from_name(tname, &type) != 0) fail_msg("unknown schedule %s", tname);
    LRScheduleParams p;
    lr_schedule_params_default(&p, type);
    for (char* tok = strtok_r(NULL, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char* eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = '\0';
        const char* v = eq + 1;
        if (!strcmp(tok, "lr")) p.lr = atof(v);
        else if (!strcmp(tok, "N") || !strcmp(tok, "total_num_steps")) p.num_training_steps = atoll(v);
        else if (!strcmp(tok, "W")) p.num_warmup_steps = atoll(v);
        else if (!strcmp(tok, "num_cycles")) p.num_cycles = atof(v);
        else if (!strcmp(tok, "lr_end")) p.lr_end = atof(v);
        else if (!strcmp(tok, "power")) p.power = atof(v);
        else if (!strcmp(tok, "warmup_min_lr")) p.warmup_min_lr = atof(v);
        else if (!strcmp(tok, "warmup_max_lr")) p.warmup_max_lr = atof(v);
        else if (!strcmp(tok, "warmup_num_steps")) p.warmup_num_steps = atoll(v);
        else if (!strcmp(tok, "warmup_type")) p.warmup_type = !strcmp(v, "linear") ? LR_WARMUP_LINEAR : LR_WARMUP_LOG;
        else fail_msg("unknown key %s", tok);
    }
    char err[256];
    if (lr_schedule_init(s, type, &p, err, sizeof err) != 0) fail_msg("%s: %s", name, err);
}

static void test_fixture_schedules(void** state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/test/fixtures/lr/schedules.txt", t5test_repo_dir());
    FILE* f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    char line[1024], name[128] = "";
    LRSchedule s;
    int cases = 0, points = 0;
    double worst = 0.0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || !line[0]) continue;
        if (!strncmp(line, "case ", 5)) {
            parse_case(line, &s, name, sizeof name);
            cases++;
            continue;
        }
        long long u;
        double ref;
        assert_int_equal(sscanf(line, "%lld %lf", &u, &ref), 2);
        double got = lr_schedule_get(&s, u);
        double err = fabs(got - ref);
        if (err > 1e-13 * fabs(ref) + 1e-300)
            fail_msg("%s: update %lld: lr %.17g, reference %.17g", name, u, got, ref);
        if (ref != 0.0 && err / fabs(ref) > worst) worst = err / fabs(ref);
        points++;
    }
    fclose(f);
    assert_true(cases >= 20);
    print_message("# %d schedules, %d points, worst relative error %.3g\n", cases, points, worst);
}

// Hand-checked anchors of the step-counting conventions (REFERENCE 5.3).
static void test_first_update_conventions(void** state) {
    (void)state;
    LRSchedule s;
    LRScheduleParams p;
    char err[256];
    // HF linear, warmup 0: the first update uses the full lr; update N uses 0
    lr_schedule_params_default(&p, LR_SCHED_LINEAR);
    p.lr = 5e-5, p.num_training_steps = 10, p.num_warmup_steps = 0;
    assert_int_equal(lr_schedule_init(&s, LR_SCHED_LINEAR, &p, err, sizeof err), 0);
    assert_true(lr_schedule_get(&s, 0) == 5e-5);
    assert_true(lr_schedule_get(&s, 1) == 5e-5 * 0.9);
    assert_true(lr_schedule_get(&s, 10) == 0.0);
    // HF linear, warmup 4: update 0 uses lr 0, update 4 the full lr
    p.num_warmup_steps = 4;
    assert_int_equal(lr_schedule_init(&s, LR_SCHED_LINEAR, &p, err, sizeof err), 0);
    assert_true(lr_schedule_get(&s, 0) == 0.0);
    assert_true(lr_schedule_get(&s, 4) == 5e-5);
    // DeepSpeed WarmupLR log: updates 0 and 1 use warmup_min_lr, update W+1 and later the max
    lr_schedule_params_default(&p, LR_SCHED_DS_WARMUP_LR);
    p.warmup_min_lr = 1e-6, p.warmup_max_lr = 1e-4, p.warmup_num_steps = 10;
    assert_int_equal(lr_schedule_init(&s, LR_SCHED_DS_WARMUP_LR, &p, err, sizeof err), 0);
    assert_true(lr_schedule_get(&s, 0) == 1e-6);
    assert_true(lr_schedule_get(&s, 1) == 1e-6);
    assert_true(lr_schedule_get(&s, 11) == 1e-6 + (1e-4 - 1e-6) * 1.0);
    // warmup_ratio / 5.x fractional warmup_steps
    assert_int_equal(hf_get_warmup_steps(0, 0.1, 37), 4);
    assert_int_equal(hf_get_warmup_steps(0.06, 0, 50), 3);
    assert_int_equal(hf_get_warmup_steps(12, 0.5, 50), 12);
    // polynomial rejects lr_end >= lr
    lr_schedule_params_default(&p, LR_SCHED_POLYNOMIAL);
    p.lr = 1e-8;
    assert_int_equal(lr_schedule_init(&s, LR_SCHED_POLYNOMIAL, &p, err, sizeof err), -1);
    assert_contains(err, "lr_end");
    LRScheduleType t;
    assert_int_equal(lr_schedule_type_from_name("cosine_with_restarts", &t), 0);
    assert_int_equal(t, LR_SCHED_COSINE_WITH_RESTARTS);
    assert_int_equal(lr_schedule_type_from_name("cosine_restarts", &t), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_schedules),
        cmocka_unit_test(test_first_update_conventions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
