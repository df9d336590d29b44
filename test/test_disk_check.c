/*
 * test_disk_check.c: the disk arithmetic of src/cli/disk_check.c (the bytes a run's saves need, at the peak) worked
 * out by hand, the free space of a folder not created yet, the count of checkpoint folders, the refusal's line,
 * the plan of a real run (t5-small, AdamW and Adafactor), and t5train --dry_run refused on a nearly full disk.
 */
#include "t5test.h"

#include <sys/stat.h>

#include "../src/cli/disk_check.h"
#include "../src/base/common.h"
#include "../model/params.h"

#define MB ((uint64_t)1000000)

static SavePlan plan_1m(void) {  // 1M parameters, AdamW, one rank, final model, checkpoints every save
    SavePlan p = {.params = MB, .world_size = 1, .final_bytes_per_param = 4, .final_model = true, .checkpoints = true,
                  .save_total_limit = 0, .planned_checkpoints = -1};
    return p;
}

static void test_save_bytes(void** state) {
    (void)state;
    SavePlan p = plan_1m();
    SaveBytes b;
    const uint64_t C = 12 * MB + SAVE_SMALL_BYTES, F = 4 * MB + SAVE_SMALL_BYTES;  // weights + m + v; fp32 weights
    // no limit, checkpoints by epoch: one checkpoint and the final model counted, unbounded (the warning)
    disk_save_bytes(&p, &b);
    assert_int_equal(b.checkpoint, C);
    assert_int_equal(b.final_model, F);
    assert_int_equal(b.need, C + F);
    assert_true(b.unbounded && b.final_at_peak);
    // save_total_limit 2: 3 checkpoints while the third is written (before rotation) > 2 and the final model
    p.save_total_limit = 2;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.need, 3 * C);
    assert_int_equal(b.new_checkpoints, 3);
    assert_false(b.unbounded || b.final_at_peak);
    // 1 checkpoint in all (the one at the last step), no limit: that one and the final model, bounded
    p.save_total_limit = 0;
    p.planned_checkpoints = 1;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.need, C + F);
    assert_false(b.unbounded);
    // no checkpoint will be written (save_strategy no is checkpoints false; here the count alone): the final model
    p.planned_checkpoints = 0;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.need, F);
    // a resume with 2 checkpoints on the disk and a limit of 2: one new checkpoint at the peak, then rotation
    p.planned_checkpoints = -1;
    p.save_total_limit = 2;
    p.existing_checkpoints = 2;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.need, C);
    // more on the disk than the limit (a resume with a smaller limit): a save still writes one before it rotates
    p.existing_checkpoints = 3;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.need, C);
    // a resume near the end, no limit: 19 of 20 planned checkpoints on the disk, one left to write, and the final model
    p.save_total_limit = 0;
    p.planned_checkpoints = 20;
    p.existing_checkpoints = 19;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.need, C + F);
    assert_false(b.unbounded);
    // stage 0 on 4 ranks: every rank writes the whole optimizer state; stages 1-3: the partitions add up to one
    p = plan_1m();
    p.world_size = 4;
    p.save_total_limit = 1;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.checkpoint, 4 * MB + 4 * 8 * MB + SAVE_SMALL_BYTES);
    p.state_partitioned = true;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.checkpoint, C);
    // Adafactor: its state floats replace m and v
    p.adafactor_floats = 3000;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.checkpoint, 4 * MB + 4 * 3000 + SAVE_SMALL_BYTES);
    // evaluation only: nothing is saved
    p = plan_1m();
    p.final_model = p.checkpoints = false;
    disk_save_bytes(&p, &b);
    assert_int_equal(b.need, 0);
}

static void test_check_line(void** state) {
    (void)state;
    SavePlan p = plan_1m();
    p.save_total_limit = 2;
    SaveBytes b;
    disk_save_bytes(&p, &b);
    char err[600];
    bool warn;
    assert_int_equal(disk_check_saves(&b, b.need, "/x", &warn, err, sizeof err), 0);  // exactly enough
    assert_false(warn);
    assert_int_equal(disk_check_saves(&b, b.need - 1, "/x", &warn, err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, "output_dir's filesystem (/x) has 0.05 GB free, the saves need 0.05 GB "
                                "(3 checkpoints of 0.02 GB at the peak)"));
    p.save_total_limit = 0;
    disk_save_bytes(&p, &b);
    assert_int_equal(disk_check_saves(&b, 100 * b.need, "/x", &warn, err, sizeof err), 0);
    assert_true(warn);  // passes, with the warning that checkpoints are unbounded
    assert_int_equal(disk_check_saves(&b, 0, "/x", &warn, err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, "(1 checkpoint of 0.02 GB and the final model of 0.01 GB at the peak)"));
}

static void test_folders(void** state) {
    (void)state;
    char* out = t5_path_join(t5test_tmpdir(), "out");
    char* deep = t5_path_join(out, "not/yet");
    uint64_t free_bytes = 0;
    char where[4096], err[512];
    // output_dir does not exist yet: the nearest existing ancestor's filesystem
    assert_int_equal(disk_free_bytes(deep, &free_bytes, where, sizeof where, err, sizeof err), 0);
    assert_string_equal(where, t5test_tmpdir());
    assert_true(free_bytes > 0);
    assert_int_equal(disk_count_checkpoints(out), 0);
    assert_int_equal(mkdir(out, 0755), 0);
    const char* names[] = {"checkpoint-10", "checkpoint-200", "checkpoint-x", "checkpoint-5.tmp-9", "runs"};
    for (size_t i = 0; i < T5_ARRAY_LEN(names); i++) {
        char* d = t5_path_join(out, names[i]);
        assert_int_equal(mkdir(d, 0755), 0);
        free(d);
    }
    assert_int_equal(disk_count_checkpoints(out), 2);
    free(deep);
    free(out);
}

// a t5-small run's plan: its parameters once (tied), AdamW's 8 bytes, Adafactor's factors
static void test_plan_of_a_run(void** state) {
    (void)state;
    TrainerArgs a;
    trainer_args_default(&a);
    assert_true(t5_config_preset("t5-small", &a.model));
    a.do_train = true;
    a.save_strategy = TRAINER_INTERVAL_STEPS;
    a.max_steps = 1000;
    a.save_steps = 300;
    snprintf(a.output_dir, sizeof a.output_dir, "%s/none", t5test_tmpdir());
    SavePlan p;
    disk_save_plan(&a, 2, &p);
    ParamTable T;
    char err[256];
    assert_int_equal(params_build(&T, &a.model, err, sizeof err), 0);
    assert_int_equal(p.params, T.total_numel);
    assert_true(p.params > 60000000 && p.params < 61000000);  // t5-small: 60.5M
    assert_int_equal(p.planned_checkpoints, 4);  // steps 300, 600, 900 and the last, 1000
    a.save_steps = 0.25;  // a ratio: every 250 steps
    disk_save_plan(&a, 2, &p);
    assert_int_equal(p.planned_checkpoints, 4);
    a.save_steps = 300;
    assert_int_equal(p.world_size, 2);
    assert_false(p.state_partitioned);
    assert_int_equal(p.adafactor_floats, 0);
    a.optimizer = TRAINER_OPTIM_ADAFACTOR;
    a.zero.stage = 2;
    disk_save_plan(&a, 2, &p);
    uint64_t want = 0;
    for (int i = 0; i < T.num_params; i++)
        want += T.params[i].ndim == 2 ? (uint64_t)(T.params[i].shape[0] + T.params[i].shape[1]) : T.params[i].numel;
    // two ranks: each holding a slice of a matrix keeps its whole factors (more than one copy, at most two)
    assert_true(p.adafactor_floats > want && p.adafactor_floats <= 2 * want);
    assert_true(p.adafactor_floats < p.params / 50);  // factored: far below one float a parameter
    assert_true(p.state_partitioned);
    disk_save_plan(&a, 1, &p);
    assert_int_equal(p.adafactor_floats, want);  // one rank: the stage 0 layout
    // HF keeps 2 with load_best_model_at_end and a limit of 1 (the best is never rotated away)
    a.save_total_limit = 1;
    a.load_best_model_at_end = true;
    disk_save_plan(&a, 2, &p);
    assert_int_equal(p.save_total_limit, 2);
    params_free(&T);
}

// t5train --dry_run into a folder whose filesystem is too small: exit 2, the line, nothing created. A small
// filesystem is a tmpfs where this process may mount one (root); else skipped.
static void test_dry_run_refused(void** state) {
    (void)state;
    const char* data = t5test_data_dir();
    if (!data) skip();
    char* mnt = t5_path_join(t5test_tmpdir(), "small");
    assert_int_equal(mkdir(mnt, 0755), 0);
    static char out[1 << 17];  // the config table comes first
    if (t5test_run(out, sizeof out, "mount -t tmpfs -o size=20m tmpfs %s", mnt) != 0) {
        free(mnt);
        skip();
    }
    int rc = t5test_run(out, sizeof out,
                        "%s --model t5-small --init random --tokenizer_name %s/t5-spiece/spiece.model "
                        "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro --do_train "
                        "--max_steps 10 --output_dir %s/out --dry_run",
                        t5test_bin(), data, data, mnt);
    char check[512];
    snprintf(check, sizeof check, "%s/out", mnt);
    struct stat st;
    const bool created = stat(check, &st) == 0;
    t5test_run(check, sizeof check, "umount %s", mnt);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "not enough disk space for this run's saves"));
    assert_non_null(strstr(out, "the final model of 0.25 GB"));
    assert_false(created);
    free(mnt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_bytes),      cmocka_unit_test(test_check_line),
        cmocka_unit_test(test_folders),         cmocka_unit_test(test_plan_of_a_run),
        cmocka_unit_test(test_dry_run_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
