/*
 * test_trainer.c: the trainer loop's pure arithmetic (src/train/trainer.h) against HF Trainer values, and the
 * command-line checks of src/cli/run.c that stop before the GPU.
 *
 * HF references (transformers Trainer._inner_training_loop, >= 4.46):
 *   num_update_steps_per_epoch = max(len_dataloader // gas + int(len_dataloader % gas > 0), 1)
 *   max_steps = args.max_steps if > 0 else math.ceil(args.num_train_epochs * num_update_steps_per_epoch)
 *   num_train_epochs = max_steps // upe + int(max_steps % upe > 0) if max_steps > 0 else ceil(num_train_epochs)
 *   DefaultFlowCallback: log/eval/save when global_step % N == 0 (strategy "steps")
 */
#include "t5test.h"

#include "../src/base/common.h"
#include "../src/train/trainer.h"

static void test_updates_per_epoch(void** state) {
    (void)state;
    // 10 batches, gas 1/3/4/10/16 -> 10, 4 (3+3+3+1), 3 (4+4+2), 1, 1 (never 0)
    assert_int_equal(trainer_updates_per_epoch(10, 1), 10);
    assert_int_equal(trainer_updates_per_epoch(10, 3), 4);
    assert_int_equal(trainer_updates_per_epoch(10, 4), 3);
    assert_int_equal(trainer_updates_per_epoch(10, 10), 1);
    assert_int_equal(trainer_updates_per_epoch(10, 16), 1);
    assert_int_equal(trainer_updates_per_epoch(0, 2), 1);
    // WMT16 ro-en train (610320 pairs), batch 8, gas 1: 76290 updates per epoch
    assert_int_equal(trainer_updates_per_epoch((610320 + 7) / 8, 1), 76290);
}

static void test_total_steps_and_epochs(void** state) {
    (void)state;
    // epochs: ceil(3 * 4) = 12; ceil(2.5 * 3) = 8 (7.5 rounds up)
    assert_int_equal(trainer_total_steps(-1, 3.0, 4), 12);
    assert_int_equal(trainer_total_steps(-1, 2.5, 3), 8);
    assert_int_equal(trainer_num_epochs(-1, 2.5, 3), 3);
    // max_steps wins; epochs = ceil(max_steps / upe)
    assert_int_equal(trainer_total_steps(50, 3.0, 4), 50);
    assert_int_equal(trainer_num_epochs(50, 3.0, 4), 13);
    assert_int_equal(trainer_num_epochs(48, 3.0, 4), 12);
    assert_int_equal(trainer_num_epochs(1, 3.0, 100), 1);
}

static void test_micro_batches_per_update(void** state) {
    (void)state;
    // 10 batches with gas 4: updates of 4, 4, 2 micro-batches, then the epoch is over
    assert_int_equal(trainer_micro_batches(10, 4, 0), 4);
    assert_int_equal(trainer_micro_batches(10, 4, 1), 4);
    assert_int_equal(trainer_micro_batches(10, 4, 2), 2);
    assert_int_equal(trainer_micro_batches(10, 4, 3), 0);
    int64_t sum = 0;
    for (int64_t u = 0; u < trainer_updates_per_epoch(10, 4); u++) sum += trainer_micro_batches(10, 4, u);
    assert_int_equal(sum, 10);
}

static void test_step_predicates(void** state) {
    (void)state;
    assert_true(trainer_step_due(TRAINER_INTERVAL_STEPS, 500, 500));
    assert_true(trainer_step_due(TRAINER_INTERVAL_STEPS, 1000, 500));
    assert_false(trainer_step_due(TRAINER_INTERVAL_STEPS, 499, 500));
    assert_false(trainer_step_due(TRAINER_INTERVAL_STEPS, 0, 500));
    assert_false(trainer_step_due(TRAINER_INTERVAL_NO, 500, 500));
    assert_false(trainer_step_due(TRAINER_INTERVAL_EPOCH, 500, 500));
    assert_false(trainer_step_due(TRAINER_INTERVAL_STEPS, 5, 0));
    assert_true(trainer_step_due(TRAINER_INTERVAL_STEPS, 7, 1));
    // HF's TrainerState.compute_steps: below 1, ceil(total x ratio)
    assert_int_equal(trainer_interval_steps(500, 3000), 500);
    assert_int_equal(trainer_interval_steps(0.5, 3000), 1500);
    assert_int_equal(trainer_interval_steps(0.1, 25), 3);  // ceil(2.5)
    assert_int_equal(trainer_interval_steps(1, 25), 1);
}

// a resume's counters: global_step - skipped = the optimizer's applied updates (issue 34's review)
static void test_resume_counts_check(void** state) {
    (void)state;
    char err[512] = "";
    assert_int_equal(trainer_resume_counts_check(0, 0, 0, err, sizeof err), 0);
    assert_int_equal(trainer_resume_counts_check(2500, 17, 2483, err, sizeof err), 0);
    assert_int_equal(trainer_resume_counts_check(2500, 17, 2500, err, sizeof err), -1);
    assert_non_null(strstr(err, "2483 updates were applied"));
    assert_non_null(strstr(err, "optimizer state has 2500"));
    assert_int_equal(trainer_resume_counts_check(2500, 0, 2499, err, sizeof err), -1);
    assert_int_equal(trainer_resume_counts_check(10, 11, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "impossible"));
    assert_int_equal(trainer_resume_counts_check(-1, 0, 0, err, sizeof err), -1);
}

static void test_args_default_like_hf(void** state) {
    (void)state;
    TrainerArgs a;
    trainer_args_default(&a);
    assert_true(a.lr == 5e-5);
    assert_true(a.clip == 1.0);
    assert_true(a.zero.beta2 == 0.999f);  // the engine's plan (AdamW's constants)
    assert_string_equal(a.sched_name, "linear");
    assert_int_equal(a.logging_steps, 500);
    assert_int_equal(a.save_steps, 500);
    assert_int_equal(a.seed, 42);
    assert_int_equal(a.gradient_accumulation_steps, 1);
}

// run.c refuses what is not built, before touching the GPU or creating anything (exit 2, one line)
static void test_binary_not_implemented_parts(void** state) {
    (void)state;
    static char text[65536];
    char* out = t5_path_join(t5test_tmpdir(), "ni_out");
    int rc = t5test_run(text, sizeof text,
                        "%s --model t5-small --init random --dataset wmt16-ro-en --do_train --sortish_sampler "
                        "--overwrite_output_dir --output_dir %s 2>&1",
                        t5test_bin(), out);
    assert_int_equal(rc, 2);
    assert_contains(text, "not implemented yet: sortish_sampler");
    assert_false(t5_path_exists(out));
    // several ranks need rank 0's address for the rendezvous (MPI aside): refused before anything is created
    rc = t5test_run(text, sizeof text, "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 %s --model t5-small --init random --dataset wmt16-ro-en --do_train --overwrite_output_dir --output_dir %s 2>&1",
                    t5test_bin(), out);
    assert_int_equal(rc, 2);
    assert_contains(text, "MASTER_ADDR and MASTER_PORT are not set");
    assert_false(t5_path_exists(out));
    free(out);
}

// --resume_from_checkpoint last with nothing to resume from: one sentence, exit 2, found by the checks
// that run before anything is created or any GPU is touched (issue 14), so the same with or without a GPU
static void test_binary_resume_without_checkpoint(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    static char text[65536];
    char* out = t5_path_join(t5test_tmpdir(), "resume_none");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name %s/t5-spiece/spiece.model "
             "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro --max_train_samples 16 --do_train --max_steps 2 "
             "--output_dir %s --resume_from_checkpoint last 2>&1",
             t5test_bin(), t5test_repo_dir(), t5test_data_dir(), t5test_data_dir(), out);
    // output_dir does not exist: nothing to resume from, and nothing is created
    int rc = t5test_run(text, sizeof text, "%s", cmd);
    assert_int_equal(rc, 2);
    assert_contains(text, "t5train: error: --resume_from_checkpoint last: output_dir");
    assert_contains(text, "does not exist");
    assert_false(t5_path_exists(out));
    // output_dir exists and holds no checkpoint: the same, and output_dir stays empty
    assert_int_equal(t5_mkdir_p(out), 0);
    rc = t5test_run(text, sizeof text, "%s", cmd);
    assert_int_equal(rc, 2);
    assert_contains(text, "no complete checkpoint in");
    assert_int_equal(t5test_run(text, sizeof text, "ls -A '%s' | wc -l", out), 0);
    assert_string_equal(text, "0\n");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_updates_per_epoch),
        cmocka_unit_test(test_total_steps_and_epochs),
        cmocka_unit_test(test_micro_batches_per_update),
        cmocka_unit_test(test_step_predicates),
        cmocka_unit_test(test_resume_counts_check),
        cmocka_unit_test(test_args_default_like_hf),
        cmocka_unit_test(test_binary_not_implemented_parts),
        cmocka_unit_test(test_binary_resume_without_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
