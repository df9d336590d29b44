/*
 * test_gpu_estimate.c: `t5train estimate` against what a run really uses (issue 17 item 2), through the binary:
 * for each model (t5-small, t5-base, t5-large, t5-3b; random init; $T5TRAIN_ESTIMATE_MODELS overrides the list,
 * "none" leaves only the two-GPU test) and each plan the ZeRO-3 issue runs (stage 0; the homework's stage 3 with both
 * offloads, configs/ds_config_zero3.json; the same at ratio 0.5, configs/ds_config_zero3_t5-11b_one_h200.json), the estimate's
 * row for the run's own flags (fp16, micro-batch 8, 128 + 128 padded tokens) is compared with the run (4 steps):
 *   GPU: the highest gpu_mem_peak_gib of trainer_log.jsonl (CUDA's used memory, pool and context included);
 *   host: the highest rss_gib minus the stage 0 run's of the same model (the process without engine buffers),
 *         against the row's pinned + pageable; rows under 1 GiB are printed only (the baseline's noise is of that
 *         order).
 * Rule (the issue's): within 10% of the measurement and never below it by more than 5%. With two GPUs visible, the
 * multi-GPU issue's plans too: stages 0-3 of t5-base on two GPUs (`--num_gpus 2`, rank 0's GPU, bf16). One-GPU runs
 * use the first visible GPU: CUDA's used memory is per device, so another process on another GPU does not count.
 * scripts/device/estimate_accuracy.sh is the same comparison with nvidia-smi sampling, for t5-11b and other batches.
 * --auto_find_batch_size (a dry run, t5-3b stage 0 bf16 at micro-batch 2048, which no GPU holds): refused without
 * it, and with it lowered by x 0.9 steps to a micro-batch the plan check accepts.
 */
#include "t5test.h"

#include <cuda_runtime.h>
#include <math.h>

#include "../src/base/common.h"

static char g_out[1 << 18];

typedef struct {
    double gpu, host, step;  // GiB, GiB (pinned + pageable), s
} Predicted;

// The row named `row` in `t5train estimate` output: params grads optim comm act work GPU | pinned pageable | s/step
static bool parse_row(const char* text, const char* row, Predicted* p) {
    const size_t n = strlen(row);
    for (const char* l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, row, n) != 0) continue;
        const char* q = l + n;
        if (*q != ' ') continue;
        while (*q == ' ') q++;
        if (*q < '0' || *q > '9') continue;  // "stage 0" must not take "stage 0, offload..." or a sentence
        double v[10];
        int k = 0;
        while (k < 10 && *q && *q != '\n') {
            if (*q == '|' || *q == ' ') {
                q++;
                continue;
            }
            char* end;
            v[k] = strtod(q, &end);
            if (end == q) break;
            k++;
            q = end;
        }
        if (k < 10) return false;
        p->gpu = v[6];
        p->host = v[7] + v[8];
        p->step = v[9];
        return true;
    }
    return false;
}

static double max_of(const char* out, const char* key) {
    double v[64];
    int n = t5test_jsonl_doubles(out, key, v, 64);
    double m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]) && v[i] > m) m = v[i];
    return m;
}

// the rule; prints the line either way
static bool within(const char* what, const char* name, double pred, double meas) {
    const double d = meas > 0 ? (pred - meas) / meas : NAN;
    const bool ok = meas > 0 && fabs(d) <= 0.10 && d >= -0.05;
    print_message("%-9s %-40s %s predicted %7.2f GiB, measured %7.2f GiB (%+.1f%%) %s\n", what, name,
                  strcmp(what, "gpu") ? "host" : "GPU ", pred, meas, 100 * d, ok ? "ok" : "OUT OF RULE");
    return ok;
}

// One plan: the estimate for the flags + PLAN_FLAGS (row ROW), then the run, both as t5train LAUNCH ...; returns the
// run's peak RSS (GiB) through *rss. Fails the test on a missing row or a failed run; counts rule failures in *bad.
static void one(const char* model, const char* tag, const char* launch, const char* plan_flags, const char* row,
                double base_rss, double* rss, int* bad) {
    const char* d = t5test_data_dir();
    static char flags[16384];
    int k = snprintf(flags, sizeof flags,
             "--model_name_or_path %s --init random --tokenizer_name %s/t5-spiece/spiece.model "
             "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro "
             "--per_device_train_batch_size 8 --max_source_length 128 --max_target_length 128 --pad_to_max_length "
             "--max_train_samples 64 --do_train --max_steps 4 --logging_steps 1 --save_strategy no %s",
             model, d, d, plan_flags);
    if (k < 0 || (size_t)k >= sizeof flags) fail_msg("command line too long");
    int rc = t5test_run(g_out, sizeof g_out, "%s estimate %s %s 2>&1", t5test_bin(), launch, flags);
    if (rc != 0) fail_msg("%s %s: estimate exited %d:\n%s", model, tag, rc, g_out);
    Predicted p = {0, 0, 0};
    if (!parse_row(g_out, row, &p)) fail_msg("%s %s: no row '%s' in the estimate:\n%s", model, tag, row, g_out);
    char out[4096];
    snprintf(out, sizeof out, "%s/%s_%s", t5test_tmpdir(), model, tag);
    rc = t5test_run(g_out, sizeof g_out, "%s %s %s --output_dir %s --overwrite_output_dir 2>&1", t5test_bin(), launch,
                    flags, out);
    if (rc != 0) fail_msg("%s %s: the run exited %d:\n%s", model, tag, rc, g_out);
    const double gpu = max_of(out, "gpu_mem_peak_gib");
    *rss = max_of(out, "rss_gib");
    char name[128];
    snprintf(name, sizeof name, "%s %s", model, tag);
    if (!within("gpu", name, p.gpu, gpu)) ++*bad;
    if (base_rss >= 0) {
        if (p.host >= 1.0) {
            if (!within("host", name, p.host, *rss - base_rss)) ++*bad;
        } else {
            print_message("%-9s %-40s host predicted %7.2f GiB, measured %7.2f GiB (under 1 GiB: not gated)\n", "host",
                          name, p.host, *rss - base_rss);
        }
    }
    // the final model (t5-3b's is 11 GB) is not needed
    t5test_run(g_out, sizeof g_out, "rm -rf %s", out);
}

static void test_one_gpu_plans(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    const char* env = getenv("T5TRAIN_ESTIMATE_MODELS");
    char models[256];
    snprintf(models, sizeof models, "%s", env && *env ? env : "t5-small t5-base t5-large t5-3b");
    const char* repo = t5test_repo_dir();
    char s3[4096], s3half[4096];
    snprintf(s3, sizeof s3, "--fp16 --deepspeed %s/configs/ds_config_zero3.json", repo);
    snprintf(s3half, sizeof s3half, "--fp16 --deepspeed %s/configs/ds_config_zero3_t5-11b_one_h200.json", repo);
    int bad = 0;
    if (strcmp(models, "none") == 0) skip();  // the two-GPU test alone
    char* save = NULL;  // strtok_r: the helpers below use strtok
    for (char* m = strtok_r(models, " ", &save); m; m = strtok_r(NULL, " ", &save)) {
        double base = 0, rss = 0;
        one(m, "stage0", "", "--fp16", "stage 0", -1, &base, &bad);
        one(m, "zero3_offload", "", s3,
            "stage 3, offload_optimizer cpu (ratio 1.00), offload_param cpu", base, &rss, &bad);
        one(m, "zero3_ratio05", "", s3half,
            "stage 3, offload_optimizer cpu (ratio 0.50), offload_param cpu", base, &rss, &bad);
    }
    assert_int_equal(bad, 0);
}

static void test_two_gpu_plans(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        print_message("skipped: fewer than two GPUs visible\n");
        skip();
    }
    int bad = 0;
    for (int stage = 0; stage <= 3; stage++) {
        char flags[256], tag[32], row[32];
        snprintf(flags, sizeof flags, "--bf16 --deepspeed '{\"zero_optimization\": {\"stage\": %d}}'", stage);
        snprintf(tag, sizeof tag, "2gpu_stage%d", stage);
        snprintf(row, sizeof row, "stage %d", stage);
        double rss;
        one("t5-base", tag, "--num_gpus 2", flags, row, -1, &rss, &bad);
    }
    assert_int_equal(bad, 0);
}

static void test_auto_find_batch_size(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    const char* d = t5test_data_dir();
    static char flags[4096];
    snprintf(flags, sizeof flags,
             "--model_name_or_path t5-3b --init random --tokenizer_name %s/t5-spiece/spiece.model "
             "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro --bf16 "
             "--per_device_train_batch_size 2048 --max_source_length 128 --max_target_length 128 --pad_to_max_length "
             "--do_train --max_steps 4 --save_strategy no --output_dir %s/afbs --dry_run",
             d, d, t5test_tmpdir());
    int rc = t5test_run(g_out, sizeof g_out, "%s %s 2>&1", t5test_bin(), flags);
    if (rc != 1 || !strstr(g_out, "predicted not to fit")) fail_msg("micro-batch 2048 not refused (%d):\n%s", rc, g_out);
    rc = t5test_run(g_out, sizeof g_out, "%s %s --auto_find_batch_size 2>&1", t5test_bin(), flags);
    const char* line = strstr(g_out, "auto_find_batch_size: per_device_train_batch_size 2048 -> ");
    if (rc != 0 || !line) fail_msg("--auto_find_batch_size (%d):\n%s", rc, g_out);
    const int b = atoi(line + strlen("auto_find_batch_size: per_device_train_batch_size 2048 -> "));
    print_message("t5-3b bf16 stage 0, 128 + 128: --auto_find_batch_size picked micro-batch %d\n", b);
    // one of accelerate's steps from 2048 (int(b x 0.9) each), below 2048
    int s = 2048;
    while (s > b) s = (int)(s * 0.9);
    assert_int_equal(s, b);
    assert_true(b > 0 && b < 2048);
    // a DeepSpeed config fixing train_batch_size with a number: the global batch is kept through accumulation
    // (micro-batch: the largest divisor of 4096 at or below the one found; HF would shrink the global batch)
    rc = t5test_run(g_out, sizeof g_out,
                    "%s %s --gradient_accumulation_steps 2 --auto_find_batch_size --deepspeed '{\"train_batch_size\": 4096, "
                    "\"bf16\": {\"enabled\": \"auto\"}}' 2>&1", t5test_bin(), flags);
    line = strstr(g_out, "auto_find_batch_size: train_batch_size 4096 kept (a number in the DeepSpeed config): micro-batch ");
    if (rc != 0 || !line) fail_msg("--auto_find_batch_size with train_batch_size 4096 (%d):\n%s", rc, g_out);
    int micro = 0;
    long long gas = 0;
    assert_int_equal(sscanf(strstr(line, "micro-batch "), "micro-batch %d x gradient_accumulation_steps %lld", &micro, &gas), 2);
    print_message("train_batch_size 4096 kept: micro-batch %d x accumulation %lld\n", micro, gas);
    assert_true(micro >= 1 && micro <= b && (long long)micro * gas == 4096);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_find_batch_size),
        cmocka_unit_test(test_one_gpu_plans),
        cmocka_unit_test(test_two_gpu_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
