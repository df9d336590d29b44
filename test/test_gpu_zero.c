/*
 * test_gpu_zero.c: the ZeRO engine (src/zero/) through the binary: "same model, same numbers".
 *
 * Every run trains a random-init t5-small shape (60M parameters, 6+6 blocks, --init random) on real WMT16
 * validation pairs with a deepspeed section whose only difference is zero_optimization:
 *   - fp32, 30 updates of 2 micro-batches (accumulation), warmup, weight decay, clipping: stages 1, 2, 3, each
 *     with and without offload_optimizer cpu, stage 3 with offload_param cpu, and offload ratio 0.3 against
 *     stage 0: every loss within 1e-6 relative, the final fp32 weights within 1e-6 relative L2;
 *   - pin_memory false (pageable host buffers, copied through the engine's pinned staging ring, whose use the end
 *     line reports): stage 2 + offload_optimizer and stage 3 + both offloads (buffer_count 2) in the fp32 cases,
 *     fp16 stage 3 + both offloads in the low-precision ones;
 *   - fp16 and bf16, stage 3 with both offloads against stage 0 (gradient_accumulation_steps 1: the host gradients
 *     share the 16-bit weights' buffer), and fp16 from a scale of 2^40 (skipped steps, whose shared buffers are
 *     rounded again from the master): every loss within 1e-3 relative and the same
 *     skipped (overflow) steps;
 *   - stage 3 + offload: stop at step 6 + --resume_from_checkpoint last == an uninterrupted run, bit for bit;
 *     a checkpoint written by stage 0 resumes under stage 3 (the optimizer state is the same tensors);
 *   - the engine's fetches follow its static trace (0 mismatches reported);
 *   - Adafactor (--optim adafactor) in the engine: stage 3 + both offloads and stage 2 + offload_optimizer ratio 0.3
 *     against stage 0, fp32, beta1 None (HF Trainer's Adafactor) and beta1 0.9 with relative_step and
 *     scale_parameter (the logged lr is tensor 0's): losses and logged lr within 1e-6 relative, final weights within
 *     1e-6 relative L2 (the same fp32 operations: expected bit-identical); fp16 stage 3 + both offloads (the
 *     gradients in the 16-bit host weights' buffer) within 1e-3 and the same skipped steps; a stage 0 Adafactor
 *     checkpoint resumed under stage 3 + both offloads and a stage 3 one under stage 0 end at the stage 0 run's
 *     weights;
 *   - the 50-step trajectory of test_gpu_trainer (tiny_v10, fp32, against PyTorch's committed trajectory) rerun under
 *     ZeRO stage 3 with both offloads: within the same tolerance;
 *   - stage3_gather_16bit_weights_on_model_save (bf16, stage 3 + both offloads): the final model.safetensors holds
 *     bf16 tensors, each the fp32 master of the same run without the key rounded to bf16, byte for byte;
 *   - pin_memory false with the pageable buffers registered with CUDA in the background (T5TRAIN_PAGEABLE_REGISTER=1,
 *     and one chunk every 400 ms so that the copies switch from the ring to the DMA mid-run) and unset (the default:
 *     on) against the ring alone (=0), fp16 (shared 16-bit buffer) and fp32 (2 micro-batches through
 *     the host gradients): bit-identical losses and final weights, the end line reporting registered bytes and bytes
 *     copied directly > 0 (and, for the slow one, ring bytes too: both paths in one run; with the registration off,
 *     neither registered nor direct bytes); T5TRAIN_PAGEABLE_REGISTER=yes stops with exit 2 when a buffer is
 *     pageable and is ignored in a pinned run.
 * Every other pin_memory false case runs with T5TRAIN_PAGEABLE_REGISTER=0 (zrun): the ring alone, as it checks.
 * Small buckets, prefetch buckets, sub-groups and persistence threshold make every code path run with several
 * pieces (docs/zero.md says what each knob does).
 */
#include "t5test.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>

#include "../src/base/common.h"
#include "../src/base/safetensors.h"

static char g_text[1 << 18];

#define ZSTEPS 30

static void write_ds(const char* path, const char* precision, const char* zero) {
    FILE* f = fopen(path, "w");
    if (!f) fail_msg("cannot write %s", path);
    fprintf(f,
            "{ %s \"gradient_clipping\": 1.0, \"gradient_accumulation_steps\": \"auto\", "
            "\"train_micro_batch_size_per_gpu\": \"auto\", \"zero_optimization\": %s }\n",
            precision, zero);
    fclose(f);
}

// the command every run of this file shares (t5-small shape, random init, 400 real pairs, ZSTEPS updates), for
// gradient_accumulation_steps gas into out; callers append the deepspeed config and their own flags
static void zcmd(char* buf, size_t cap, const char* out, int gas) {
    const char* d = t5test_data_dir();
    int k = snprintf(buf, cap,
                     "%s --model_name_or_path t5-small --init random --tokenizer_name %s/t5-spiece/spiece.model "
                     "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro --max_source_length 48 "
                     "--max_target_length 48 --max_train_samples 400 --per_device_train_batch_size 4 "
                     "--gradient_accumulation_steps %d --do_train --max_steps %d --learning_rate 1e-3 --warmup_steps 5 "
                     "--weight_decay 0.01 --dropout_rate 0 --save_steps 1000 --logging_steps 1 --seed 11 --output_dir %s",
                     t5test_bin(), d, d, gas, ZSTEPS, out);
    if (k < 0 || (size_t)k >= cap) fail_msg("command line too long");
}

// one run with `env` (VAR=value words) before the command; returns the output dir (malloc'd)
static char* zrun_env(const char* tag, const char* env, const char* precision, const char* zero, const char* extra,
                      int gas) {
    char* out = t5_path_join(t5test_tmpdir(), tag);
    char ds[4200];
    snprintf(ds, sizeof ds, "%s.ds.json", out);
    write_ds(ds, precision, zero);
    char cmd[8192];
    zcmd(cmd, sizeof cmd, out, gas);
    int rc = t5test_run(g_text, sizeof g_text, "%s %s --overwrite_output_dir --deepspeed %s %s %s 2>&1", env, cmd, ds,
                        strstr(precision, "fp16") ? "--fp16" : strstr(precision, "bf16") ? "--bf16" : "",
                        extra ? extra : "");
    if (rc) {
        size_t len = strlen(g_text);
        fail_msg("%s: exit %d:\n...%s", tag, rc, g_text + (len > 3000 ? len - 3000 : 0));
    }
    return out;
}

// one run; pin_memory false runs keep every copy on the pinned staging ring (the cases below check its use), without
// the background registration of the pageable buffers, which test_pageable_register runs
static char* zrun(const char* tag, const char* precision, const char* zero, const char* extra, int gas) {
    return zrun_env(tag, "T5TRAIN_PAGEABLE_REGISTER=0", precision, zero, extra, gas);
}

static double result_value(const char* dir, const char* file, const char* key) {
    char* p = t5_path_join(dir, file);
    json_error_t jerr;
    json_t* j = json_load_file(p, 0, &jerr);
    if (!j) fail_msg("cannot read %s: %s", p, jerr.text);
    json_t* v = json_object_get(j, key);
    if (!v) fail_msg("%s has no %s", p, key);
    double x = json_number_value(v);
    json_decref(j);
    free(p);
    return x;
}

// relative L2 of all tensors of b/model.safetensors against a/model.safetensors
static double weights_rel_l2(const char* a, const char* b) {
    double r = 0;
    (void)t5test_weights_compare(a, b, &r);
    return r;
}

// loss trajectories: max relative difference; also checks the skipped counts agree step by step
static double compare_runs(const char* ref, const char* got, const char* what) {
    double la[ZSTEPS + 1], lb[ZSTEPS + 1], sa[ZSTEPS + 1], sb[ZSTEPS + 1];
    int na = t5test_jsonl_doubles(ref, "loss", la, ZSTEPS + 1), nb = t5test_jsonl_doubles(got, "loss", lb, ZSTEPS + 1);
    if (na != ZSTEPS || nb != ZSTEPS) fail_msg("%s: %d / %d loss lines, want %d", what, na, nb, ZSTEPS);
    t5test_jsonl_doubles(ref, "skipped", sa, ZSTEPS + 1);
    t5test_jsonl_doubles(got, "skipped", sb, ZSTEPS + 1);
    double worst = 0;
    for (int i = 0; i < ZSTEPS; i++) {
        double r = fabs(lb[i] - la[i]) / fmax(fabs(la[i]), 1e-30);
        if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
        if (sa[i] != sb[i]) fail_msg("%s: skipped steps differ at step %d (%g vs %g)", what, i + 1, sa[i], sb[i]);
    }
    print_message("%-34s loss max rel diff %.3e (first %.6f last %.6f)\n", what, worst, lb[0], lb[ZSTEPS - 1]);
    return worst;
}

#define SMALL_KNOBS                                                                                            \
    "\"reduce_bucket_size\": 300000, \"stage3_prefetch_bucket_size\": 2000000, "                              \
    "\"stage3_param_persistence_threshold\": 5000, \"sub_group_size\": 4000000, \"stage3_max_live_parameters\": " \
    "20000000, \"stage3_max_reuse_distance\": 5000000"

static void test_fp32_every_stage(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    // the reference and one stage 3 case also evaluate with generation (stage 3 holds every unit gathered for the
    // evaluation and the generator captures its decode step in CUDA graphs): eval_loss and BLEU must be equal
    char evalf[1024];
    snprintf(evalf, sizeof evalf,
             "--do_eval --predict_with_generate --validation_file %s/wmt16-ro-en/validation.en --max_eval_samples 8 "
             "--per_device_eval_batch_size 4 --generation_max_length 16",
             t5test_data_dir());
    char* ref = zrun("z0", "", "{\"stage\": 0}", evalf, 2);
    static const struct {
        const char* tag;
        const char* zero;
    } cases[] = {
        {"z1", "{\"stage\": 1, " SMALL_KNOBS "}"},
        {"z2", "{\"stage\": 2, " SMALL_KNOBS "}"},
        {"z3", "{\"stage\": 3, " SMALL_KNOBS "}"},
        {"z1_off", "{\"stage\": 1, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, " SMALL_KNOBS "}"},
        {"z2_off", "{\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false}, " SMALL_KNOBS "}"},
        {"z3_off", "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, " SMALL_KNOBS "}"},
        {"z3_off_param",
         "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, \"offload_param\": "
         "{\"device\": \"cpu\", \"pin_memory\": true}, " SMALL_KNOBS "}"},
        {"z3_ratio03",
         "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true, \"ratio\": 0.3}, "
         "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}, " SMALL_KNOBS "}"},
        // pageable host buffers through the pinned staging ring (2 slots: every transfer wraps it): gradients down
        // and, with the 2 micro-batches, up again; gathers of the offloaded partitions (fp32: the master itself);
        // the CPU optimizer's publish of the fp32 views
        {"z3_off_param_pageable",
         "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false, \"buffer_count\": 2}, "
         "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}, " SMALL_KNOBS "}"},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(cases); i++) {
        const bool ev = strcmp(cases[i].tag, "z3_off_param") == 0;
        char* got = zrun(cases[i].tag, "", cases[i].zero, ev ? evalf : NULL, 2);
        if (ev) {
            const char* keys[] = {"eval_loss", "eval_bleu", "eval_gen_len"};
            for (size_t k = 0; k < T5_ARRAY_LEN(keys); k++) {
                double x = result_value(ref, "eval_results.json", keys[k]), y = result_value(got, "eval_results.json", keys[k]);
                print_message("%-34s %s %.6f (stage 0 %.6f)\n", cases[i].tag, keys[k], y, x);
                if (!(x == y)) fail_msg("%s: %s %.9g differs from stage 0's %.9g", cases[i].tag, keys[k], y, x);
            }
        }
        if (strstr(g_text, "trace mismatches 0") == NULL && strstr(cases[i].zero, "\"stage\": 3"))
            fail_msg("%s: the fetches left the static trace:\n%s", cases[i].tag, g_text);
        // stages 2/3: the backward's gradients in the order the estimate replays (model/t5.c t5_model_grad_trace)
        if (strstr(g_text, "ZeRO engine:") && strstr(g_text, "gradient order mismatches 0") == NULL)
            fail_msg("%s: the gradients left t5_model_grad_trace's order:\n%s", cases[i].tag, g_text);
        // pageable buffers go through the pinned staging ring; pinned ones never do
        const bool pageable = strstr(cases[i].zero, "\"pin_memory\": false") != NULL;
        if (pageable != (strstr(g_text, "through the pinned staging ring") != NULL))
            fail_msg("%s: %s the staging ring:\n%s", cases[i].tag,
                     pageable ? "pageable host buffers but no bytes through" : "pinned host buffers but bytes through",
                     g_text);
        double worst = compare_runs(ref, got, cases[i].tag);
        double w = weights_rel_l2(ref, got);
        print_message("%-34s final weights rel L2 %.3e\n", cases[i].tag, w);
        if (!(worst <= 1e-6)) fail_msg("%s: loss trajectory differs by %.3e > 1e-6", cases[i].tag, worst);
        if (!(w <= 1e-6)) fail_msg("%s: final weights differ by %.3e > 1e-6", cases[i].tag, w);
        free(got);
    }
    free(ref);
}

// pinned false: both offloads pageable (pin_memory false), every copy through the pinned staging ring
static void low_precision_case(const char* prec_json, const char* tag, bool pinned) {
    char t0[64], t3[64], zero[1024];
    snprintf(t0, sizeof t0, "%s_z0", tag);
    snprintf(t3, sizeof t3, "%s_z3", tag);
    snprintf(zero, sizeof zero,
             "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": %s}, "
             "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": %s}, " SMALL_KNOBS "}",
             pinned ? "true" : "false", pinned ? "true" : "false");
    char* ref = zrun(t0, prec_json, "{\"stage\": 0}", NULL, 1);
    char* got = zrun(t3, prec_json, zero, NULL, 1);
    // gradient_accumulation_steps 1 with both offloads: the host gradients share the 16-bit weights' buffer
    if (!strstr(g_text, "offloaded gradients share the 16-bit weights' host buffer"))
        fail_msg("%s: stage 3 + both offloads at gradient_accumulation_steps 1 did not share the host buffer:\n%s", tag,
                 g_text);
    if (pinned != (strstr(g_text, "through the pinned staging ring") == NULL))
        fail_msg("%s: pin_memory %s but the staging ring %s:\n%s", tag, pinned ? "true" : "false",
                 pinned ? "was used" : "was not used", g_text);
    double worst = compare_runs(ref, got, tag);
    if (!(worst <= 1e-3)) fail_msg("%s: loss trajectory differs by %.3e > 1e-3", tag, worst);
    if (strstr(tag, "skips")) {
        double sk[ZSTEPS + 1], any = 0;
        int n = t5test_jsonl_doubles(got, "skipped", sk, ZSTEPS + 1);
        for (int i = 0; i < n; i++) any += sk[i] != 0;
        print_message("%-34s %g of %d step lines report skipped steps\n", tag, any, n);
        if (any == 0) fail_msg("%s: no step was skipped; the case does not test the skip path", tag);
    }
    double w = weights_rel_l2(ref, got);
    print_message("%-34s final weights rel L2 %.3e\n", tag, w);
    if (!(w <= 1e-3)) fail_msg("%s: final weights differ by %.3e > 1e-3", tag, w);
    free(ref);
    free(got);
}

static void test_fp16_bf16_stage3_offload(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    low_precision_case("\"fp16\": {\"enabled\": true, \"initial_scale_power\": 12, \"loss_scale_window\": 5},", "fp16",
                       true);
    low_precision_case("\"bf16\": {\"enabled\": true},", "bf16", true);
    // pageable host buffers (pin_memory false): 16-bit gathers, gradients into the shared 16-bit host weights and the
    // CPU optimizer's publish all through the pinned staging ring
    low_precision_case("\"fp16\": {\"enabled\": true, \"initial_scale_power\": 12, \"loss_scale_window\": 5},",
                       "fp16_pageable", false);
    // a scale of 2^40 overflows the first steps: each skipped step must restore the 16-bit host weights the
    // gradients were written over (zero_optimizer_skip), or the next forward reads gradients as weights
    low_precision_case("\"fp16\": {\"enabled\": true, \"initial_scale_power\": 40, \"loss_scale_window\": 5, "
                       "\"hysteresis\": 1},",
                       "fp16_skips", true);
}

// stop at 6, resume to 30 under stage 3 + offload == straight run; a stage 0 checkpoint resumes under stage 3
static void test_resume(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    const char* z3 = "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, "
                     "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}, " SMALL_KNOBS "}";
    char* a = zrun("r_a", "", z3, NULL, 2);
    // b: stop after step 6, then resume
    char* b = t5_path_join(t5test_tmpdir(), "r_b");
    char ds[4200];
    snprintf(ds, sizeof ds, "%s.ds.json", b);
    write_ds(ds, "", z3);
    char cmd[8192];
    zcmd(cmd, sizeof cmd, b, 2);
    const size_t used = strlen(cmd);
    snprintf(cmd + used, sizeof cmd - used, " --deepspeed %s", ds);
    int rc = t5test_run(g_text, sizeof g_text, "T5TRAIN_STOP_AFTER_STEPS=6 %s --overwrite_output_dir 2>&1", cmd);
    if (rc) fail_msg("stop at 6: exit %d:\n%s", rc, g_text);
    rc = t5test_run(g_text, sizeof g_text, "%s --resume_from_checkpoint last 2>&1", cmd);
    if (rc) fail_msg("resume: exit %d:\n%s", rc, g_text);
    rc = t5test_run(g_text, sizeof g_text, "cmp %s/model.safetensors %s/model.safetensors 2>&1", a, b);
    if (rc) fail_msg("stage 3 resume: final weights differ from the uninterrupted run: %s", g_text);
    // stage 0 writes checkpoint-6, stage 3 resumes it; compare with the stage 0 run going straight on
    char* c = zrun("r_c0", "", "{\"stage\": 0}", NULL, 2);
    char* e = t5_path_join(t5test_tmpdir(), "r_e");
    snprintf(ds, sizeof ds, "%s.ds0.json", e);
    write_ds(ds, "", "{\"stage\": 0}");
    char cmd0[8192];
    zcmd(cmd0, sizeof cmd0, e, 2);
    rc = t5test_run(g_text, sizeof g_text, "T5TRAIN_STOP_AFTER_STEPS=6 %s --deepspeed %s --overwrite_output_dir 2>&1",
                    cmd0, ds);
    if (rc) fail_msg("stage 0 stop at 6: exit %d:\n%s", rc, g_text);
    char ds3[4200];
    snprintf(ds3, sizeof ds3, "%s.ds3.json", e);
    write_ds(ds3, "", z3);
    rc = t5test_run(g_text, sizeof g_text, "%s --deepspeed %s --resume_from_checkpoint last 2>&1", cmd0, ds3);
    if (rc) fail_msg("stage 3 resuming a stage 0 checkpoint: exit %d:\n%s", rc, g_text);
    double w = weights_rel_l2(c, e);
    print_message("stage 0 checkpoint resumed under stage 3: final weights rel L2 %.3e\n", w);
    if (!(w <= 1e-6)) fail_msg("stage 0 -> stage 3 resume differs by %.3e", w);
    // and back: stage 3 writes checkpoint-6, stage 0 resumes it (the stage 0 straight run c is the reference again)
    char* g = t5_path_join(t5test_tmpdir(), "r_g");
    char cmdg[8192];
    zcmd(cmdg, sizeof cmdg, g, 2);
    rc = t5test_run(g_text, sizeof g_text, "T5TRAIN_STOP_AFTER_STEPS=6 %s --deepspeed %s --overwrite_output_dir 2>&1",
                    cmdg, ds3);
    if (rc) fail_msg("stage 3 stop at 6: exit %d:\n%s", rc, g_text);
    rc = t5test_run(g_text, sizeof g_text, "%s --deepspeed %s --resume_from_checkpoint last 2>&1", cmdg, ds);
    if (rc) fail_msg("stage 0 resuming a stage 3 checkpoint: exit %d:\n%s", rc, g_text);
    w = weights_rel_l2(c, g);
    print_message("stage 3 checkpoint resumed under stage 0: final weights rel L2 %.3e\n", w);
    if (!(w <= 1e-6)) fail_msg("stage 3 -> stage 0 resume differs by %.3e", w);
    free(a);
    free(b);
    free(c);
    free(e);
    free(g);
}

// test_gpu_trainer's trajectory against torch, rerun under ZeRO-3 with both offloads (the same flags; the deepspeed
// section clips at the flags' max_grad_norm, as HF's integration fills "auto")
static void test_trajectory_zero3_matches_torch(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* fx = t5_path_join(t5test_repo_dir(), "test/fixtures/trainer/trajectory_tiny_v10_fp32.json");
    json_error_t jerr;
    json_t* ref = json_load_file(fx, 0, &jerr);
    if (!ref) fail_msg("cannot read %s: %s", fx, jerr.text);
    const char* flags = json_string_value(json_object_get(ref, "flags"));
    json_t* tl = json_object_get(ref, "torch_loss");
    int steps = (int)json_integer_value(json_object_get(ref, "max_steps"));
    double tol = json_real_value(json_object_get(ref, "tolerance_rel"));
    assert_non_null(flags);
    const char* mg = strstr(flags, "--max_grad_norm ");
    double clip = mg ? atof(mg + strlen("--max_grad_norm ")) : 1.0;
    char* out = t5_path_join(t5test_tmpdir(), "traj_z3");
    char ds[4200], zero[512], prec[64];
    snprintf(ds, sizeof ds, "%s.ds.json", out);
    snprintf(zero, sizeof zero,
             "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, "
             "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}}");
    snprintf(prec, sizeof prec, "\"gradient_clipping\": %.17g,", clip);
    FILE* f = fopen(ds, "w");
    assert_non_null(f);
    fprintf(f, "{ %s \"zero_optimization\": %s }\n", prec, zero);
    fclose(f);
    const char* d = t5test_data_dir();
    int rc = t5test_run(g_text, sizeof g_text,
                        "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name %s/t5-spiece/spiece.model "
                        "--train_file %s/wmt16-ro-en/validation.en %s --max_steps %d --output_dir %s --deepspeed %s 2>&1",
                        t5test_bin(), t5test_repo_dir(), d, d, flags, steps, out, ds);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    double loss[512];
    int n = t5test_jsonl_doubles(out, "loss", loss, 512);
    assert_int_equal(n, steps);
    double worst = 0;
    int worst_i = 0;
    for (int i = 0; i < n; i++) {
        double r = json_real_value(json_array_get(tl, (size_t)i));
        double rel = fabs(loss[i] - r) / fabs(r);
        if (rel > worst) worst = rel, worst_i = i;
    }
    print_message("ZeRO-3 + offload: max per-step loss rel diff vs torch %.3e at step %d (tolerance %.0e, %.1f%% used)\n",
                  worst, worst_i + 1, tol, 100 * worst / tol);
    assert_true(worst <= tol);
    json_decref(ref);
    free(out);
    free(fx);
}

// Adafactor (src/zero/step_adafactor.c) against the trainer's stage 0 Adafactor
#define ADA_Z3_OFF                                                                                           \
    "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, "                 \
    "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}, " SMALL_KNOBS "}"
#define ADA_Z2_RATIO                                                                                         \
    "{\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true, \"ratio\": 0.3}, "  \
    SMALL_KNOBS "}"

// logged learning rates of two runs: max relative difference
static double compare_lr(const char* ref, const char* got) {
    double a[ZSTEPS + 1], b[ZSTEPS + 1];
    int na = t5test_jsonl_doubles(ref, "learning_rate", a, ZSTEPS + 1), nb = t5test_jsonl_doubles(got, "learning_rate", b, ZSTEPS + 1);
    if (na != ZSTEPS || nb != ZSTEPS) fail_msg("%d / %d learning_rate lines, want %d", na, nb, ZSTEPS);
    double worst = 0;
    for (int i = 0; i < ZSTEPS; i++) worst = fmax(worst, fabs(b[i] - a[i]) / fmax(fabs(a[i]), 1e-30));
    return worst;
}

static void test_adafactor_engine(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    static const struct {
        const char* tag;
        const char* flags;
    } settings[] = {
        {"none", "--optim adafactor"},  // HF Trainer's: lr + schedule, beta1 None, no scale_parameter
        {"b1_rel", "--optim adafactor --adafactor_beta1 0.9 --adafactor_relative_step true "
                   "--adafactor_scale_parameter true"},
    };
    static const struct {
        const char* tag;
        const char* zero;
    } cases[] = {{"z3_off", ADA_Z3_OFF}, {"z2_ratio03", ADA_Z2_RATIO}};
    for (size_t s = 0; s < T5_ARRAY_LEN(settings); s++) {
        char tag[96];
        snprintf(tag, sizeof tag, "ada_%s_z0", settings[s].tag);
        char* ref = zrun(tag, "", "{\"stage\": 0}", settings[s].flags, 2);
        for (size_t i = 0; i < T5_ARRAY_LEN(cases); i++) {
            snprintf(tag, sizeof tag, "ada_%s_%s", settings[s].tag, cases[i].tag);
            char* got = zrun(tag, "", cases[i].zero, settings[s].flags, 2);
            if (!strstr(g_text, "ZeRO stage")) fail_msg("%s: not the engine:\n%s", tag, g_text);
            double worst = compare_runs(ref, got, tag);
            double lr = compare_lr(ref, got);
            double w = weights_rel_l2(ref, got);
            print_message("%-34s logged lr max rel diff %.3e, final weights rel L2 %.3e\n", tag, lr, w);
            if (!(worst <= 1e-6)) fail_msg("%s: loss trajectory differs by %.3e > 1e-6", tag, worst);
            if (!(lr <= 1e-6)) fail_msg("%s: logged learning rate differs by %.3e > 1e-6", tag, lr);
            if (!(w <= 1e-6)) fail_msg("%s: final weights differ by %.3e > 1e-6", tag, w);
            free(got);
        }
        free(ref);
    }
    // fp16, accumulation 1: the offloaded gradients share the 16-bit host weights' buffer (the 14-byte layout)
    const char* fp16 = "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 12, \"loss_scale_window\": 5},";
    char* ref = zrun("ada_fp16_z0", fp16, "{\"stage\": 0}", "--optim adafactor --adafactor_beta1 0.9", 1);
    char* got = zrun("ada_fp16_z3", fp16, ADA_Z3_OFF, "--optim adafactor --adafactor_beta1 0.9", 1);
    if (!strstr(g_text, "offloaded gradients share the 16-bit weights' host buffer"))
        fail_msg("ada fp16: stage 3 + both offloads did not share the host buffer:\n%s", g_text);
    double worst = compare_runs(ref, got, "ada_fp16_z3");
    if (!(worst <= 1e-3)) fail_msg("ada fp16: loss trajectory differs by %.3e > 1e-3", worst);
    free(ref);
    free(got);
}

// a stage 0 Adafactor checkpoint resumed under stage 3 + both offloads, and back, end at the stage 0 run's weights
static void ada_resume_leg(const char* tag, const char* ref, const char* zero_stop, const char* zero_resume) {
    char* out = t5_path_join(t5test_tmpdir(), tag);
    char ds_stop[4200], ds_resume[4200];
    snprintf(ds_stop, sizeof ds_stop, "%s.stop.json", out);
    snprintf(ds_resume, sizeof ds_resume, "%s.resume.json", out);
    write_ds(ds_stop, "", zero_stop);
    write_ds(ds_resume, "", zero_resume);
    char cmd[8192];
    zcmd(cmd, sizeof cmd, out, 2);
    const size_t used = strlen(cmd);
    snprintf(cmd + used, sizeof cmd - used, " --optim adafactor --adafactor_beta1 0.9");
    int rc = t5test_run(g_text, sizeof g_text, "T5TRAIN_STOP_AFTER_STEPS=6 %s --deepspeed %s --overwrite_output_dir 2>&1",
                        cmd, ds_stop);
    if (rc) fail_msg("%s: stop at 6: exit %d:\n%s", tag, rc, g_text);
    rc = t5test_run(g_text, sizeof g_text, "%s --deepspeed %s --resume_from_checkpoint last 2>&1", cmd, ds_resume);
    if (rc) fail_msg("%s: resume: exit %d:\n%s", tag, rc, g_text);
    double w = weights_rel_l2(ref, out);
    print_message("%-34s final weights rel L2 %.3e vs the straight stage 0 run\n", tag, w);
    if (!(w <= 1e-6)) fail_msg("%s: resumed run differs by %.3e", tag, w);
    free(out);
}

static void test_adafactor_resume_across_stages(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* ref = zrun("ada_r_z0", "", "{\"stage\": 0}", "--optim adafactor --adafactor_beta1 0.9", 2);
    ada_resume_leg("ada_r_0to3", ref, "{\"stage\": 0}", ADA_Z3_OFF);
    ada_resume_leg("ada_r_3to0", ref, ADA_Z3_OFF, "{\"stage\": 0}");
    ada_resume_leg("ada_r_3to3", ref, ADA_Z3_OFF, ADA_Z3_OFF);
    free(ref);
}

// DeepSpeed's stage3_gather_16bit_weights_on_model_save: the final model in the run's 16-bit dtype. Training is the
// same bits with and without the key, so the 16-bit file is the fp32 file rounded (safetensors_convert's rounding).
static void test_16bit_final_save(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    const char* bf16 = "\"bf16\": {\"enabled\": true},";
    const char* off = "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}";
    char z32[512], z16[512];
    snprintf(z32, sizeof z32, "%s}", off);
    snprintf(z16, sizeof z16, "%s, \"stage3_gather_16bit_weights_on_model_save\": true}", off);
    char* a = zrun("save_fp32", bf16, z32, NULL, 1);
    assert_non_null(strstr(g_text, "the model's weights are fp32"));
    char* b = zrun("save_bf16", bf16, z16, NULL, 1);
    assert_non_null(strstr(g_text, "the model's weights are bf16 (stage3_gather_16bit_weights_on_model_save)"));
    char err[1024];
    char* pa = t5_path_join(a, "model.safetensors");
    char* pb = t5_path_join(b, "model.safetensors");
    SafeTensors *sa = NULL, *sb = NULL;
    if (safetensors_open(&sa, pa, err, sizeof err) || safetensors_open(&sb, pb, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(safetensors_count(sa), safetensors_count(sb));
    size_t bytes_a = 0, bytes_b = 0, diff = 0;
    for (int i = 0; i < safetensors_count(sa); i++) {
        const char* name = safetensors_name(sa, i);
        const SafeTensorInfo *ia = NULL, *ib = NULL;
        if (safetensors_info(sa, name, &ia, err, sizeof err) || safetensors_info(sb, name, &ib, err, sizeof err))
            fail_msg("%s", err);
        if (ia->dtype != DT_F32 || ib->dtype != DT_BF16) fail_msg("%s: dtypes %d / %d", name, ia->dtype, ib->dtype);
        float* x = malloc(ia->numel * sizeof(float));
        uint16_t* want = malloc(ia->numel * 2);
        uint16_t* got = malloc(ia->numel * 2);
        if (safetensors_read(sa, name, x, DT_F32, NULL, -1, err, sizeof err) ||
            safetensors_read(sb, name, got, DT_BF16, NULL, -1, err, sizeof err))
            fail_msg("%s", err);
        safetensors_convert(want, DT_BF16, x, DT_F32, ia->numel);
        for (size_t k = 0; k < ia->numel; k++) diff += want[k] != got[k];
        bytes_a += ia->nbytes;
        bytes_b += ib->nbytes;
        free(x);
        free(want);
        free(got);
    }
    print_message("16-bit final save: %zu bytes of tensors against %zu in fp32, %zu elements differ from the rounded "
                  "fp32 master\n", bytes_b, bytes_a, diff);
    assert_int_equal(diff, 0);
    assert_int_equal(2 * bytes_b, bytes_a);
    safetensors_close(sa);
    safetensors_close(sb);
    free(pa);
    free(pb);
    free(a);
    free(b);
}

// The end line's "pageable host memory registered in the background: X of Y GiB": X (and Y in *total), -1 when absent
static double registered_gib(const char* text, double* total) {
    const char* key = "registered in the background: ";
    const char* p = strstr(text, key);
    double x = -1, y = -1;
    if (!p || sscanf(p + strlen(key), "%lf of %lf GiB", &x, &y) != 2) return -1;
    *total = y;
    return x;
}

// The end line's "..., X GiB copied directly" (the pageable bytes that took the direct copy once their chunk was
// registered): X, -1 when absent
static double direct_gib(const char* text) {
    const char* key = " GiB copied directly";
    const char* p = strstr(text, key);
    if (!p) return -1;
    const char* q = p;
    while (q > text && (isdigit((unsigned char)q[-1]) || q[-1] == '.')) q--;
    double x = -1;
    return q < p && sscanf(q, "%lf", &x) == 1 ? x : -1;
}

// pin_memory false, the pageable buffers registered with CUDA in the background (src/zero/part_hostreg.c) against the
// staging ring alone (T5TRAIN_PAGEABLE_REGISTER=0): the same copies of the same bytes, so the same losses and final
// weights bit for bit, registration done at once (=1) or one chunk every 400 ms (the switch from the ring to the
// direct copies in the middle of the run: the end line reports bytes through the ring and bytes registered)
static void pageable_register_case(const char* tag, const char* prec, const char* zero, int gas) {
    char t[96];
    snprintf(t, sizeof t, "%s_reg0", tag);
    char* ref = zrun_env(t, "T5TRAIN_PAGEABLE_REGISTER=0", prec, zero, NULL, gas);
    double total = 0;
    if (!strstr(g_text, "through the pinned staging ring") || registered_gib(g_text, &total) >= 0)
        fail_msg("%s: T5TRAIN_PAGEABLE_REGISTER=0 must copy through the ring alone:\n%s", t, t5test_tail(g_text, 3000));
    static const struct {
        const char* sfx;
        const char* env;
        bool reg;   // the registration runs (else: the ring alone, no registration reported)
        bool ring;  // bytes through the ring too (the switch happened during the run)
    } runs[] = {
        {"reg1", "T5TRAIN_PAGEABLE_REGISTER=1", true, false},
        {"reg_default", "env -u T5TRAIN_PAGEABLE_REGISTER", true, false},  // unset: on (the default)
        {"reg1_slow", "T5TRAIN_PAGEABLE_REGISTER=1 T5TRAIN_PAGEABLE_REGISTER_DELAY_MS=400", true, true},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(runs); i++) {
        snprintf(t, sizeof t, "%s_%s", tag, runs[i].sfx);
        char* got = zrun_env(t, runs[i].env, prec, zero, NULL, gas);
        total = 0;
        const double reg = registered_gib(g_text, &total), direct = direct_gib(g_text);
        const bool ring = strstr(g_text, "through the pinned staging ring") != NULL;
        print_message("%-34s registered %.3f of %.3f GiB in the background; %.3f GiB copied directly; ring %s\n", t,
                      reg, total, direct, ring ? "used" : "unused");
        if (runs[i].reg && !(reg > 0))
            fail_msg("%s: no bytes registered in the background:\n%s", t, t5test_tail(g_text, 3000));
        // registered is not enough: some copy must have taken the direct path (the counter of zero_hostreg_copy's
        // direct bytes), and with the registration off none may
        if (runs[i].reg && !(direct > 0))
            fail_msg("%s: no bytes copied directly after the registration:\n%s", t, t5test_tail(g_text, 3000));
        if (!runs[i].reg && direct >= 0)
            fail_msg("%s: direct copies reported with the registration off:\n%s", t, t5test_tail(g_text, 3000));
        if (!runs[i].reg && reg >= 0)
            fail_msg("%s: registration reported though it is off:\n%s", t, t5test_tail(g_text, 3000));
        if (runs[i].ring && !ring) fail_msg("%s: no bytes through the ring:\n%s", t, t5test_tail(g_text, 3000));
        double la[ZSTEPS + 1], lb[ZSTEPS + 1];
        const int na = t5test_jsonl_doubles(ref, "loss", la, ZSTEPS + 1), nb = t5test_jsonl_doubles(got, "loss", lb, ZSTEPS + 1);
        if (na != ZSTEPS || nb != ZSTEPS) fail_msg("%s: %d / %d loss lines, want %d", t, na, nb, ZSTEPS);
        for (int k = 0; k < ZSTEPS; k++)
            if (memcmp(&la[k], &lb[k], sizeof la[k]) != 0)
                fail_msg("%s: loss of step %d is %.9g, the ring alone's %.9g", t, k + 1, lb[k], la[k]);
        const int rc = t5test_run(g_text, sizeof g_text, "cmp %s/model.safetensors %s/model.safetensors 2>&1", ref, got);
        if (rc) fail_msg("%s: final weights differ from the ring alone's: %s", t, g_text);
        free(got);
    }
    free(ref);
}

static void test_pageable_register(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    // fp16, both offloads, accumulation 1: 16-bit gathers, gradients into the shared 16-bit host weights, the CPU
    // optimizer's publish of the weights and fp32 views (h_w, h_master registered)
    pageable_register_case("preg_fp16",
                           "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 12, \"loss_scale_window\": 5},",
                           "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false}, "
                           "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}, " SMALL_KNOBS "}",
                           1);
    // fp32, 2 micro-batches, 2 slots: the host gradients accumulated through h_gacc (up, add, down), fp32 gathers from
    // the master itself
    pageable_register_case("preg_fp32",
                           "", "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false, "
                           "\"buffer_count\": 2}, \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}, "
                           SMALL_KNOBS "}",
                           2);
    // a value other than 0 / 1 with a pageable buffer: one line, exit 2, before the engine allocates its host buffers
    char* out = t5_path_join(t5test_tmpdir(), "preg_bad");
    char ds[4200], cmd[8192];
    snprintf(ds, sizeof ds, "%s.ds.json", out);
    write_ds(ds, "", "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false}}");
    zcmd(cmd, sizeof cmd, out, 1);
    const int rc = t5test_run(g_text, sizeof g_text, "T5TRAIN_PAGEABLE_REGISTER=yes %s --deepspeed %s 2>&1", cmd, ds);
    if (rc != 2 || !strstr(g_text, "T5TRAIN_PAGEABLE_REGISTER=yes: give 1"))
        fail_msg("T5TRAIN_PAGEABLE_REGISTER=yes: exit %d (want 2):\n%s", rc, t5test_tail(g_text, 2000));
    free(out);
    // every host buffer pinned: the variable is never read, so the same value runs (zrun_env fails on a non-zero exit)
    out = zrun_env("preg_bad_pinned", "T5TRAIN_PAGEABLE_REGISTER=yes", "",
                   "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}}", NULL, 1);
    free(out);
}

int main(void) {
    t5test_filter_from_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_every_stage),
        cmocka_unit_test(test_fp16_bf16_stage3_offload),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_trajectory_zero3_matches_torch),
        cmocka_unit_test(test_adafactor_engine),
        cmocka_unit_test(test_adafactor_resume_across_stages),
        cmocka_unit_test(test_16bit_final_save),
        cmocka_unit_test(test_pageable_register),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
