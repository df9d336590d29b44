/*
 * test_gpu_multi_adafactor.c: transformers' Adafactor (--optim adafactor) at ZeRO stages 1-3 on several GPUs (issue
 * 33), through the binary, on the tiny fixture model (test/fixtures/t5/tiny_v10) and real WMT16 pairs, fp32, dropout
 * off. The engine cuts each unit's elements across the ranks, so a rank can hold a slice of a matrix (the shared
 * embedding is cut on every rank); the row / column sums, sum p^2 and sum u^2 of the cut tensors are all-reduced
 * between the GPU plan's phases (src/zero/ada_split.h, cuda/adafactor.cu). Gates:
 *   - N GPUs x micro-batch 2 against one GPU x micro-batch 2 x gradient accumulation N (the same rows per update, the
 *     same mean of per-micro-batch means: every target of the first 64 pairs is longer than --max_target_length 8, so
 *     every row has the same number of label tokens; test_gpu_multi.c): 30 steps, the loss of every step within 1e-6
 *     relative, the final weights (model.safetensors, fp32) within 1e-6 relative L2 over the whole model; at stage 1
 *     with HF Trainer's Adafactor (lr from the schedule, no parameter scale), stage 2 with beta1 0.9, scale_parameter
 *     and weight decay, stage 3 with relative_step + scale_parameter (Adafactor's own defaults); N = 2, and every
 *     visible GPU (4 or more) when present;
 *   - the split path ran: rank 0 prints "Adafactor on N ranks: K of T tensors cut across ranks";
 *   - resume on another number of GPUs with Adafactor state (beta1 0.9: exp_avg re-cut as well as the statistics):
 *     stopped after step 10 on `first` GPUs, resumed on `second` (micro-batch 4 / GPUs: the same global batch): steps
 *     11-20 within 1e-6 of the uninterrupted run; 2 -> 1 (stage 2), 1 -> 2 (stage 3), and 4 -> 2 with 4 GPUs;
 *   - with offload_optimizer (the CPU Adafactor steps the cut tensors as slices, their sums reduced through the GPU
 *     before the optimizer thread applies them): stage 2 with ratio 0.5 (GPU- and CPU-stepped cut tensors: four
 *     all-reduces per step) and stage 3 with both offloads, the same gates against one GPU with the same offloads.
 * Skipped unless two GPUs are visible.
 */
#include "t5test.h"

#include <cuda_runtime.h>
#include <math.h>

#include "../src/base/common.h"
#include "../src/base/safetensors.h"
#include "multi_adafactor_flags.h"

static char g_text[1 << 18];

static int gpu_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

#define REQUIRE_GPUS(n)                                                               \
    do {                                                                              \
        T5_REQUIRE_GPU();                                                             \
        T5_REQUIRE_DATA();                                                            \
        if (gpu_count() < (n)) {                                                      \
            print_message("skipped: %d GPU(s) visible, this case needs %d\n", gpu_count(), (n)); \
            skip();                                                                   \
        }                                                                             \
    } while (0)

// ENV, then t5train on GPU 0 (gpus 1) or `t5train --num_gpus N`, micro-batch `batch`, accumulation `gas`, EXTRA flags
static void run_args(char* buf, size_t cap, const char* env, int gpus, const char* out, int batch, int gas,
                     int steps, const char* extra) {
    const char* d = t5test_data_dir();
    char launch[64] = "", ngpus[32] = "";
    if (gpus == 1) snprintf(launch, sizeof launch, "CUDA_VISIBLE_DEVICES=0 ");
    else snprintf(ngpus, sizeof ngpus, " --num_gpus %d", gpus);
    int k = snprintf(buf, cap,
             "%s %s%s%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name %s/t5-spiece/spiece.model "
             "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro --max_source_length 48 "
             "--max_target_length 8 --max_train_samples 64 --per_device_train_batch_size %d "
             "--gradient_accumulation_steps %d --dropout_rate 0 --output_dir %s --logging_steps 1 --seed 7 --do_train "
             "--max_steps %d --learning_rate 3e-3 --warmup_steps 3 --optim adafactor %s 2>&1",
             env, launch, t5test_bin(), ngpus, t5test_repo_dir(), d, d, batch, gas, out, steps, extra);
    if (k < 0 || (size_t)k >= cap) fail_msg("command line too long");
}

static void run_ok(const char* what, const char* cmd) {
    const int rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("%s: exit %d:\n%s", what, rc, t5test_tail(g_text, 4000));
}

// relative L2 of b against a over every tensor of the two final models; the worst tensor printed
static double weights_rel_l2(const char* a_dir, const char* b_dir, const char* tag) {
    char err[512];
    SafeTensors *a, *b;
    char* pa = t5_path_join(a_dir, "model.safetensors");
    char* pb = t5_path_join(b_dir, "model.safetensors");
    if (safetensors_open(&a, pa, err, sizeof err)) fail_msg("%s", err);
    if (safetensors_open(&b, pb, err, sizeof err)) fail_msg("%s", err);
    double d2 = 0, n2 = 0, worst = 0;
    const char* worst_name = "";
    const int n = safetensors_count(a);
    assert_int_equal(n, safetensors_count(b));
    for (int i = 0; i < n; i++) {
        const char* name = safetensors_name(a, i);
        const SafeTensorInfo* info;
        if (safetensors_info(a, name, &info, err, sizeof err)) fail_msg("%s", err);
        const size_t m = info->numel;
        float* x = malloc(m * sizeof(float));
        float* y = malloc(m * sizeof(float));
        if (safetensors_read(a, name, x, DT_F32, NULL, -1, err, sizeof err) ||
            safetensors_read(b, name, y, DT_F32, NULL, -1, err, sizeof err))
            fail_msg("%s", err);
        double td = 0, tn = 0;
        for (size_t k = 0; k < m; k++) {
            td += ((double)y[k] - x[k]) * ((double)y[k] - x[k]);
            tn += (double)x[k] * x[k];
        }
        d2 += td;
        n2 += tn;
        const double r = sqrt(td / fmax(tn, 1e-300));
        if (r > worst) worst = r, worst_name = name;
        free(x);
        free(y);
    }
    const double rel = sqrt(d2 / fmax(n2, 1e-300));
    print_message("%s: final weights rel L2 %.3g over %d tensors (worst tensor %s %.3g)\n", tag, rel, n, worst_name,
                  worst);
    safetensors_close(a);
    safetensors_close(b);
    free(pa);
    free(pb);
    return rel;
}

// n GPUs x micro-batch 2 (flags `extra`) against one GPU x micro-batch 2 x accumulation n (flags `extra1`): 30 steps,
// losses and final weights
static void vs_accumulation_with(const char* tag, int n, const char* extra1, const char* extra) {
    char a[512], b[512], cmd[8192];
    snprintf(a, sizeof a, "%s/mada_%s_1gpu", t5test_tmpdir(), tag);
    snprintf(b, sizeof b, "%s/mada_%s_%dgpu", t5test_tmpdir(), tag, n);
    run_args(cmd, sizeof cmd, "", 1, a, 2, n, 30, extra1);
    run_ok("one GPU with accumulation", cmd);
    run_args(cmd, sizeof cmd, "", n, b, 2, 1, 30, extra);
    run_ok(tag, cmd);
    char want[128];
    snprintf(want, sizeof want, "Adafactor on %d ranks: ", n);
    assert_contains(g_text, want);  // the split path: tensors cut across the ranks, their sums all-reduced
    double x[64], y[64];
    assert_int_equal(t5test_jsonl_doubles(a, "loss", x, 64), 30);
    assert_int_equal(t5test_jsonl_doubles(b, "loss", y, 64), 30);
    double worst = 0;
    int at = 0;
    for (int i = 0; i < 30; i++) {
        const double r = fabs(x[i] - y[i]) / fmax(fabs(x[i]), 1e-30);
        if (r > worst) worst = r, at = i + 1;
    }
    print_message("%s: %d GPUs x 2 vs 1 GPU x 2 x accumulation %d: loss step 1 %.7f / %.7f, step 30 %.7f / %.7f; worst "
                  "rel diff %.3g at step %d (gate 1e-6)\n", tag, n, n, x[0], y[0], x[29], y[29], worst, at);
    if (!(worst <= 1e-6)) fail_msg("%s: loss trajectories differ by %.3g relative at step %d", tag, worst, at);
    const double rel = weights_rel_l2(a, b, tag);
    if (!(rel <= 1e-6)) fail_msg("%s: final weights differ by %.3g relative L2", tag, rel);
}

static void vs_accumulation(const char* tag, int n, const char* extra) { vs_accumulation_with(tag, n, extra, extra); }

#define S3 "{\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0}}"
// HF Trainer's Adafactor (scale_parameter and relative_step off: the schedule's lr)
#define ST1 "--save_strategy no --deepspeed '{\"zero_optimization\": {\"stage\": 1}}'"
// beta1 (exp_avg sliced like the elements), the parameter scale (sum p^2 reduced), weight decay
#define ST2 "--save_strategy no --weight_decay 0.01 --adafactor_beta1 0.9 --adafactor_scale_parameter true " \
            "--deepspeed '{\"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 1000}}'"
// Adafactor's own defaults: relative step and parameter scale (the logged lr is tensor 0's, on rank 0)
#define ST3 "--save_strategy no --adafactor_relative_step true --adafactor_scale_parameter true --deepspeed '" S3 "'"

static void test_stage1_two_gpus(void** state) { (void)state; REQUIRE_GPUS(2); vs_accumulation("s1", 2, ST1); }
static void test_stage2_two_gpus(void** state) { (void)state; REQUIRE_GPUS(2); vs_accumulation("s2", 2, ST2); }
static void test_stage3_two_gpus(void** state) { (void)state; REQUIRE_GPUS(2); vs_accumulation("s3", 2, ST3); }
// HF Trainer's Adafactor (no beta1, no parameter scale, no weight decay) at stage 2 with DeepSpeed's default buckets
// on 2 GPUs against stage 0 on one GPU: scripts/device/ds_adafactor_zero2.sh (lr 1e-3, no warm-up) measured t5train's
// 2-GPU ZeRO-2 run 1.26e-5 off one GPU's loss after two updates and 1.7e-3 at step 29 (4 x H200, 2026-11-27), where
// the cases above (stage 2 with 1000-element buckets, beta1 and the scale) pass at 1e-6. That run's DeepSpeed JSON
// had no gradient_clipping (= 0, off) while the one-GPU runs clipped at max_grad_norm 1; every case above passes the
// same JSON on both sides (none of them clips). S2HF_DS_JSON says "auto" (max_grad_norm, 1), so both sides clip;
// test_config_adafactor checks that on the CPU. Not run on a GPU yet.
static void test_stage2_hf_defaults_vs_stage0(void** state) {
    (void)state;
    REQUIRE_GPUS(2);
    vs_accumulation_with("s2hf", 2, "--save_strategy no", "--save_strategy no --deepspeed '" S2HF_DS_JSON "'");
}

// stopped after step 10 on `first` GPUs, resumed on `second`: steps 11-20 within 1e-6 of the uninterrupted run
static void resume_across(const char* tag, const char* ds, int first, int second) {
    char a[512], b[512], cmd[8192], extra[1024];
    snprintf(a, sizeof a, "%s/mada_%s_a", t5test_tmpdir(), tag);
    snprintf(b, sizeof b, "%s/mada_%s_b", t5test_tmpdir(), tag);
    snprintf(extra, sizeof extra, "--adafactor_beta1 0.9 --adafactor_scale_parameter true --deepspeed '%s' "
                                  "--save_strategy steps --save_steps 10", ds);
    run_args(cmd, sizeof cmd, "", first, a, 4 / first, 1, 20, extra);
    run_ok("uninterrupted", cmd);
    run_args(cmd, sizeof cmd, "T5TRAIN_STOP_AFTER_STEPS=10", first, b, 4 / first, 1, 20, extra);
    run_ok("stopped", cmd);
    strcat(extra, " --resume_from_checkpoint last");
    run_args(cmd, sizeof cmd, "", second, b, 4 / second, 1, 20, extra);
    run_ok("resumed", cmd);
    assert_contains(g_text, "optimizer state re-cut");
    double x[64], y[64];
    assert_int_equal(t5test_jsonl_doubles(a, "loss", x, 64), 20);
    assert_int_equal(t5test_jsonl_doubles(b, "loss", y, 64), 20);
    double worst = 0;
    for (int i = 10; i < 20; i++) worst = fmax(worst, fabs(x[i] - y[i]) / fabs(x[i]));
    print_message("%s: Adafactor state %d GPU(s) -> %d GPU(s) at step 10: steps 11-20 worst loss rel diff %.3g (gate "
                  "1e-6)\n", tag, first, second, worst);
    if (!(worst <= 1e-6)) fail_msg("%s: resumed trajectory differs by %.3g", tag, worst);
}

static void test_resume_other_world(void** state) {
    (void)state;
    REQUIRE_GPUS(2);
    resume_across("w2to1_s2", "{\"zero_optimization\": {\"stage\": 2}}", 2, 1);
    resume_across("w1to2_s3", S3, 1, 2);
    if (gpu_count() >= 4) resume_across("w4to2_s3", S3, 4, 2);
}

// offload_optimizer: stage 2 with about half the state on the CPU (sub-groups of 20000: the embedding's GPU-stepped, the
// blocks' CPU-stepped, cut tensors of both kinds), stage 3 with both offloads
#define ST2_OFF "--save_strategy no --adafactor_beta1 0.9 --adafactor_scale_parameter true --deepspeed '{\"zero_optimization\": " \
                "{\"stage\": 2, \"sub_group_size\": 20000, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.5}}}'"
#define ST3_OFF "--save_strategy no --adafactor_relative_step true --adafactor_scale_parameter true --deepspeed '" \
                "{\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0, \"offload_optimizer\": " \
                "{\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}}}'"

static void test_offload_two_gpus(void** state) {
    (void)state;
    REQUIRE_GPUS(2);
    vs_accumulation("s2_off", 2, ST2_OFF);
    vs_accumulation("s3_off", 2, ST3_OFF);
}

// every visible GPU (4 or more, at most 8)
static void test_all_gpus(void** state) {
    (void)state;
    REQUIRE_GPUS(4);
    const int n = T5_MIN(gpu_count(), 8);
    vs_accumulation("s1_all", n, ST1);
    vs_accumulation("s2_all", n, ST2);
    vs_accumulation("s3_all", n, ST3);
    // with offload too (issue 33's Show: every stage with and without offload on 2 and 4 GPUs; added after the
    // session-4 GPU run, not run yet)
    vs_accumulation("s2off_all", n, ST2_OFF);
    vs_accumulation("s3off_all", n, ST3_OFF);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stage1_two_gpus), cmocka_unit_test(test_stage2_two_gpus),
        cmocka_unit_test(test_stage3_two_gpus), cmocka_unit_test(test_stage2_hf_defaults_vs_stage0), cmocka_unit_test(test_resume_other_world),
        cmocka_unit_test(test_offload_two_gpus), cmocka_unit_test(test_all_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
