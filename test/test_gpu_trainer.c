/*
 * test_gpu_trainer.c: the trainer through the binary, on the tiny HF fixture model (test/fixtures/t5/tiny_v10,
 * D=8) and 32-64 real WMT16 validation pairs:
 *   - the loss falls, every results file HF writes is there, the final model and checkpoints are complete;
 *   - stop at step 6 (T5TRAIN_STOP_AFTER_STEPS, the SIGTERM path) + --resume_from_checkpoint last gives loss and
 *     grad-norm lines for steps 7..12 byte-identical to an uninterrupted run, and the same final weights
 *     (fp16 with dropout and gradient accumulation: scaler, RNG, data position and Adam state all matter);
 *   - a real SIGTERM mid-run saves a checkpoint and exits 0 with a message;
 *   - fp16 overflow: +inf injected at step 3 logs DeepSpeed's OVERFLOW line, the scale halves, the step is
 *     skipped (the LR of step 4 equals that of step 3); a deepspeed fp16 section without scaler keys starts at
 *     2^32 (DeepSpeed's quirk) and overflows at once;
 *   - a corrupt newest checkpoint is reported and skipped for the previous good one;
 *   - trajectory parity: 50 fp32 steps (accumulation 2, warmup, weight decay, clipping, an epoch boundary) from
 *     tiny_v10 match the committed torch trajectory (test/fixtures/trainer/trajectory_tiny_v10_fp32.json, made by
 *     scripts/trajectory_parity.py --init test/fixtures/t5/tiny_v10 --write_reference) within 1e-4 relative;
 *   - Adafactor (--optim adafactor): stop + resume bit-identical (fp16 with beta1, bf16 with relative_step and
 *     scale_parameter); a resume with another optimizer, or another beta1 layout, is refused with a message;
 *   - Adafactor parity: 50 fp32 steps in 4 settings (relative_step on/off x beta1 None/0.9) against transformers'
 *     Adafactor (test/fixtures/trainer/adafactor_tiny_v10_fp32.{json,safetensors}, made by
 *     scripts/adafactor_parity.py --write_reference test/fixtures/trainer on the device; skipped while absent):
 *     every step's loss within 1e-5 relative, the final weights within 1e-5 relative L2 (every tensor but the
 *     embedding in full, the embedding's used rows + every 16th row, and its sum of squares);
 *   - --load_best_model_at_end with --metric_for_best_model bleu and loss: HF's pick over the run's own
 *     log_history, best_model_checkpoint / best_metric in trainer_state.json, the best checkpoint kept by
 *     rotation, the final weights those of the best checkpoint.
 */
#include "t5test.h"

#include <jansson.h>
#include <math.h>

#include "../src/base/common.h"
#include "../src/base/safetensors.h"

static char g_text[1 << 18];

// common flags: tiny model, real data, fp32 unless the caller adds more
static void base_args(char* buf, size_t cap, const char* out, int samples) {
    const char* d = t5test_data_dir();
    int k = snprintf(buf, cap,
             "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name %s/t5-spiece/spiece.model "
             "--train_file %s/wmt16-ro-en/validation.en --validation_file %s/wmt16-ro-en/validation.en "
             "--source_lang en --target_lang ro --max_source_length 48 --max_target_length 48 "
             "--max_train_samples %d --max_eval_samples 32 --per_device_train_batch_size 8 "
             "--per_device_eval_batch_size 8 --output_dir %s --logging_steps 1 --seed 7",
             t5test_bin(), t5test_repo_dir(), d, d, d, samples, out);
    if (k < 0 || (size_t)k >= cap) fail_msg("command line too long");
}

// Values of `key` in output_dir/trainer_log.jsonl step lines, as the raw text after "key": (NULL-terminated
// malloc'd strings), *n of them.
static char** jsonl_values(const char* out, const char* key, int* n) {
    char* p = t5_path_join(out, "trainer_log.jsonl");
    size_t len;
    char* text = t5_read_file(p, &len);
    free(p);
    *n = 0;
    if (!text) return NULL;
    char** vals = calloc(4096, sizeof(char*));
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    for (char* line = strtok(text, "\n"); line && *n < 4096; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"max_steps\"")) continue;  // step lines only (not eval / overflow events)
        char* k = strstr(line, pat);
        if (!k) continue;
        k += strlen(pat);
        size_t m = strcspn(k, ",}");
        vals[*n] = strndup(k, m);
        (*n)++;
    }
    free(text);
    return vals;
}

static void free_vals(char** v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static bool file_in(const char* dir, const char* name) {
    char* p = t5_path_join(dir, name);
    bool ok = t5_is_file(p);
    free(p);
    return ok;
}

static void test_loss_decreases_and_files(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* out = t5_path_join(t5test_tmpdir(), "dec");
    char cmd[8192], args[4096];
    base_args(args, sizeof args, out, 32);
    snprintf(cmd, sizeof cmd,
             "%s --do_train --do_eval --max_steps 40 --learning_rate 1e-2 --warmup_steps 2 --save_steps 20 "
             "--save_total_limit 1 --evaluation_strategy steps --eval_steps 20 2>&1",
             args);
    int rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    assert_contains(g_text, "***** Running training *****");
    assert_contains(g_text, "***** train metrics *****");
    assert_contains(g_text, "***** eval metrics *****");
    int n;
    char** loss = jsonl_values(out, "loss", &n);
    assert_int_equal(n, 40);
    double first = atof(loss[0]), last5 = 0;
    for (int i = 35; i < 40; i++) last5 += atof(loss[i]) / 5;
    print_message("loss step 1 %.4f, mean of steps 36-40 %.4f\n", first, last5);
    assert_true(isfinite(first) && isfinite(last5));
    assert_true(last5 < first - 1.0);
    free_vals(loss, n);
    const char* files[] = {"model.safetensors", "config.json", "spiece.model", "train_results.json",
                           "eval_results.json", "all_results.json", "trainer_state.json", "main.log",
                           "t5train_config.json", "README.md"};
    for (size_t i = 0; i < T5_ARRAY_LEN(files); i++)
        if (!file_in(out, files[i])) fail_msg("missing %s in %s", files[i], out);
    // the model card (src/report/model_card.h): the final evaluation's loss, the run's hyperparameters, one table row
    // per evaluation during training (steps 20 and 40; a loss logged every step before each)
    char* card_path = t5_path_join(out, "README.md");
    char* card = t5_read_file(card_path, NULL);
    assert_non_null(card);
    assert_contains(card, "model-index:\n- name: dec\n  results: []\n---\n");
    assert_contains(card, "It achieves the following results on the evaluation set:\n- Loss: ");
    assert_contains(card, "- learning_rate: 0.01\n- train_batch_size: 8\n- eval_batch_size: 8\n- seed: 7\n- optimizer: ");
    assert_contains(card, "- lr_scheduler_warmup_steps: 2.0\n- training_steps: 40\n\n### Training results\n\n"
                          "| Training Loss | Epoch ");
    assert_contains(card, "| Validation Loss |\n|:-------------:|");
    assert_contains(card, "| 20   | ");
    assert_contains(card, "| 40   | ");
    free(card);
    free(card_path);
    // save_total_limit 1: only checkpoint-40 is left, complete
    char* c20 = t5_path_join(out, "checkpoint-20");
    char* c40 = t5_path_join(out, "checkpoint-40");
    assert_false(t5_path_exists(c20));
    assert_true(file_in(c40, "t5train_done") && file_in(c40, "model.safetensors") && file_in(c40, "t5train_state.bin") &&
                file_in(c40, "trainer_state.json"));
    char* ev = t5_path_join(out, "eval_results.json");
    char* txt = t5_read_file(ev, NULL);
    assert_non_null(txt);
    assert_contains(txt, "\"eval_loss\"");
    free(txt);
    free(ev);
    free(c20);
    free(c40);
    free(out);
}

// run A: 12 steps straight; run B: stop after 6 (checkpoint), resume "last" to 12. Same lines, same weights.
static void run_resume_case(const char* tag, const char* extra) {
    char* a = t5_path_join(t5test_tmpdir(), tag);
    char b[4096];
    snprintf(b, sizeof b, "%s_b", a);
    char cmd[8192], args[4096];
    const char* common = "--do_train --max_steps 12 --learning_rate 3e-3 --warmup_steps 3 "
                         "--gradient_accumulation_steps 2 --save_steps 100 --dropout_rate 0.1";
    base_args(args, sizeof args, a, 40);
    snprintf(cmd, sizeof cmd, "%s %s %s 2>&1", args, common, extra);
    int rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("run A exit %d:\n%s", rc, g_text);
    base_args(args, sizeof args, b, 40);
    snprintf(cmd, sizeof cmd, "T5TRAIN_STOP_AFTER_STEPS=6 %s %s %s 2>&1", args, common, extra);
    rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("run B (first half) exit %d:\n%s", rc, g_text);
    assert_contains(g_text, "stopped after step 6/12");
    snprintf(cmd, sizeof cmd, "%s %s %s --resume_from_checkpoint last 2>&1", args, common, extra);
    rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("run B (resumed) exit %d:\n%s", rc, g_text);
    assert_contains(g_text, "Continuing training from checkpoint");
    const char* keys[] = {"loss", "grad_norm", "learning_rate", "loss_scale"};
    for (size_t k = 0; k < T5_ARRAY_LEN(keys); k++) {
        int na, nb;
        char** va = jsonl_values(a, keys[k], &na);
        char** vb = jsonl_values(b, keys[k], &nb);
        assert_int_equal(na, 12);
        assert_int_equal(nb, 12);  // 6 before the stop, 6 after the resume
        for (int i = 0; i < 12; i++)
            if (strcmp(va[i], vb[i]) != 0) fail_msg("%s: step %d %s: %s (straight) vs %s (resumed)", tag, i + 1, keys[k], va[i], vb[i]);
        free_vals(va, na);
        free_vals(vb, nb);
    }
    rc = t5test_run(g_text, sizeof g_text, "cmp %s/model.safetensors %s/model.safetensors 2>&1", a, b);
    if (rc) fail_msg("%s: final weights differ after resume: %s", tag, g_text);
    free(a);
}

static void test_resume_bit_identical_fp16(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    run_resume_case("res16", "--fp16");
}

static void test_resume_bit_identical_bf16(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    run_resume_case("resbf", "--bf16");
}

static void test_resume_bit_identical_adafactor(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    run_resume_case("resada", "--fp16 --optim adafactor --adafactor_beta1 0.9");
    run_resume_case("resada_rel", "--bf16 --adafactor --adafactor_relative_step true --adafactor_scale_parameter true");
}

// a checkpoint of run_resume_case("resada") (Adafactor, beta1 0.9, stopped after step 6) resumed by AdamW, and by
// Adafactor without beta1: both refused before a step, exit 2
static void test_resume_other_optimizer_refused(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* a = t5_path_join(t5test_tmpdir(), "resada");
    char ck[4096], args[4096];
    snprintf(ck, sizeof ck, "%s_b/checkpoint-6", a);
    if (!file_in(ck, "t5train_done")) run_resume_case("resada", "--fp16 --optim adafactor --adafactor_beta1 0.9");
    char* o = t5_path_join(t5test_tmpdir(), "resada_other");
    base_args(args, sizeof args, o, 40);
    const char* common = "--do_train --max_steps 12 --gradient_accumulation_steps 2 --save_steps 100 --fp16";
    int rc = t5test_run(g_text, sizeof g_text, "%s %s --resume_from_checkpoint %s 2>&1", args, common, ck);
    assert_int_equal(rc, 2);
    assert_contains(g_text, "was saved by a run with the Adafactor optimizer, this run uses AdamW");
    rc = t5test_run(g_text, sizeof g_text, "%s %s --optim adafactor --resume_from_checkpoint %s 2>&1", args, common, ck);
    assert_int_equal(rc, 2);
    assert_contains(g_text, "resume with the same adafactor_beta1");
    free(o);
    free(a);
}

// Trains tiny_v10 for `steps` with `flags` (+ `extra`) into `out` and returns the largest per-step relative
// difference of its losses against the reference array `tl` (*worst_i: its 0-based step).
static double tiny_run_vs_reference(const char* out, const char* flags, const char* extra, int steps, json_t* tl,
                                    int* worst_i) {
    const char* d = t5test_data_dir();
    int rc = t5test_run(g_text, sizeof g_text,
                        "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name %s/t5-spiece/spiece.model "
                        "--train_file %s/wmt16-ro-en/validation.en %s %s --max_steps %d --output_dir %s "
                        "--overwrite_output_dir 2>&1",
                        t5test_bin(), t5test_repo_dir(), d, d, flags, extra ? extra : "", steps, out);
    if (rc) fail_msg("%s: exit %d:\n%s", out, rc, g_text);
    int n;
    char** loss = jsonl_values(out, "loss", &n);
    assert_int_equal(n, steps);
    double worst = 0;
    *worst_i = 0;
    for (int i = 0; i < n; i++) {
        double r = json_real_value(json_array_get(tl, (size_t)i));
        double rel = fabs(atof(loss[i]) - r) / fabs(r);
        if (rel > worst) worst = rel, *worst_i = i;
    }
    free_vals(loss, n);
    return worst;
}

// relative L2 of t5train's final weights (out/model.safetensors) against the fixture's tensors of one setting
static double adafactor_weights_rel_l2(const char* out, SafeTensors* fx, const char* setting, double* sumsq_rel) {
    char err[1024], name[256];
    char* p = t5_path_join(out, "model.safetensors");
    SafeTensors* ours = NULL;
    if (safetensors_open(&ours, p, err, sizeof err)) fail_msg("%s", err);
    double num = 0, den = 0;
    const size_t plen = strlen(setting) + 1;
    for (int i = 0; i < safetensors_count(fx); i++) {
        const char* fn = safetensors_name(fx, i);
        if (strncmp(fn, setting, plen - 1) != 0 || fn[plen - 1] != '/') continue;
        const char* tn = fn + plen;
        if (!strcmp(tn, "shared.weight.sumsq")) continue;
        const SafeTensorInfo* fi;
        if (safetensors_info(fx, fn, &fi, err, sizeof err)) fail_msg("%s", err);
        float* ref = malloc(fi->numel * sizeof(float));
        if (safetensors_read(fx, fn, ref, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
        const bool rows = !strcmp(tn, "shared.weight.rows");
        snprintf(name, sizeof name, "%s", rows ? "shared.weight" : tn);
        const SafeTensorInfo* oi;
        if (safetensors_info(ours, name, &oi, err, sizeof err)) fail_msg("t5train's weights: %s", err);
        float* got = malloc(oi->numel * sizeof(float));
        if (safetensors_read(ours, name, got, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
        if (rows) {
            const SafeTensorInfo* ii;
            if (safetensors_info(fx, "shared.weight.row_ids", &ii, err, sizeof err)) fail_msg("%s", err);
            float* ids = malloc(ii->numel * sizeof(float));
            if (safetensors_read(fx, "shared.weight.row_ids", ids, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
            const size_t D = (size_t)oi->shape[1];
            assert_int_equal(fi->numel, ii->numel * D);
            for (size_t r = 0; r < ii->numel; r++)
                for (size_t j = 0; j < D; j++) {
                    double d = (double)got[(size_t)ids[r] * D + j] - ref[r * D + j];
                    num += d * d, den += (double)ref[r * D + j] * ref[r * D + j];
                }
            double ss = 0;
            for (size_t k = 0; k < oi->numel; k++) ss += (double)got[k] * got[k];
            snprintf(name, sizeof name, "%s/shared.weight.sumsq", setting);
            float want;
            if (safetensors_read(fx, name, &want, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
            *sumsq_rel = fabs(ss - want) / want;
            free(ids);
        } else {
            assert_int_equal(fi->numel, oi->numel);
            for (size_t k = 0; k < fi->numel; k++) {
                double d = (double)got[k] - ref[k];
                num += d * d, den += (double)ref[k] * ref[k];
            }
        }
        free(ref);
        free(got);
    }
    safetensors_close(ours);
    free(p);
    return sqrt(num / den);
}

static void test_adafactor_matches_torch_fp32(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* fx = t5_path_join(t5test_repo_dir(), "test/fixtures/trainer/adafactor_tiny_v10_fp32.json");
    char* fxw = t5_path_join(t5test_repo_dir(), "test/fixtures/trainer/adafactor_tiny_v10_fp32.safetensors");
    if (!t5_is_file(fx) || !t5_is_file(fxw)) {
        print_message("no Adafactor fixture (%s and .safetensors): make it on a GPU machine with torch + transformers: "
                      "python3 scripts/adafactor_parity.py --bin T5TRAIN --tokenizer DATA/t5-spiece/spiece.model "
                      "--train_file DATA/wmt16-ro-en/validation.en --write_reference test/fixtures/trainer; skipping\n",
                      fx);
        free(fx);
        free(fxw);
        skip();
    }
    json_error_t jerr;
    json_t* ref = json_load_file(fx, 0, &jerr);
    if (!ref) fail_msg("cannot read %s: %s", fx, jerr.text);
    char err[1024];
    SafeTensors* w = NULL;
    if (safetensors_open(&w, fxw, err, sizeof err)) fail_msg("%s", err);
    const char* flags = json_string_value(json_object_get(ref, "flags"));
    const int steps = (int)json_integer_value(json_object_get(ref, "max_steps"));
    const double tol = json_real_value(json_object_get(ref, "tolerance_loss_rel"));
    const double tolw = json_real_value(json_object_get(ref, "tolerance_weights_rel_l2"));
    assert_non_null(flags);
    const char* setting;
    json_t* sv;
    int nset = 0;
    bool all_ok = true;
    json_object_foreach(json_object_get(ref, "settings"), setting, sv) {
        const char* extra = json_string_value(json_object_get(sv, "extra_flags"));
        json_t* tl = json_object_get(sv, "torch_loss");
        assert_int_equal((int)json_array_size(tl), steps);
        char tag[128];
        snprintf(tag, sizeof tag, "ada_%s", setting);
        char* out = t5_path_join(t5test_tmpdir(), tag);
        int worst_i;
        const double worst = tiny_run_vs_reference(out, flags, extra, steps, tl, &worst_i);
        double ssr = 0;
        double l2 = adafactor_weights_rel_l2(out, w, setting, &ssr);
        const bool ok = worst <= tol && l2 <= tolw && ssr <= tolw;
        print_message("%s: max per-step loss rel diff %.3e at step %d (tolerance %.0e, %.1f%% used); final weights "
                      "rel L2 %.3e (tolerance %.0e, %.1f%% used), embedding sum of squares rel diff %.3e %s\n",
                      setting, worst, worst_i + 1, tol, 100 * worst / tol, l2, tolw, 100 * l2 / tolw, ssr,
                      ok ? "OK" : "FAIL");
        all_ok &= ok;
        nset++;
        free(out);
    }
    assert_int_equal(nset, 4);
    assert_true(all_ok);
    safetensors_close(w);
    json_decref(ref);
    free(fx);
    free(fxw);
}

static void test_sigterm_saves_and_exits_0(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* out = t5_path_join(t5test_tmpdir(), "sig");
    char cmd[8192], args[4096];
    base_args(args, sizeof args, out, 64);
    snprintf(cmd, sizeof cmd,
             "%s --do_train --max_steps 1000000 --save_steps 1000000 > %s.log 2>&1 & P=$!; "
             "for i in $(seq 1200); do [ -f %s/trainer_log.jsonl ] && [ $(wc -l < %s/trainer_log.jsonl) -ge 5 ] && break; "
             "sleep 0.1; done; kill -TERM $P; wait $P; echo \"exit=$?\"; cat %s.log",
             args, out, out, out, out);
    t5test_run(g_text, sizeof g_text, "%s", cmd);
    assert_contains(g_text, "exit=0");
    assert_contains(g_text, "received SIGTERM");
    // the checkpoint named in the message is complete
    const char* m = strstr(g_text, "checkpoint-");
    assert_non_null(m);
    int n;
    char** steps = jsonl_values(out, "step", &n);
    assert_true(n >= 5);
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%s", steps[n - 1]);
    char* dir = t5_path_join(out, name);
    if (!file_in(dir, "t5train_done")) fail_msg("no complete %s after SIGTERM:\n%s", dir, g_text);
    free(dir);
    free_vals(steps, n);
    free(out);
}

static void test_fp16_overflow_skips_step(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* out = t5_path_join(t5test_tmpdir(), "ovf");
    char cmd[8192], args[4096];
    base_args(args, sizeof args, out, 32);
    snprintf(cmd, sizeof cmd,
             "T5TRAIN_INJECT_INF_STEP=3 %s --do_train --fp16 --max_steps 6 --learning_rate 1e-3 --save_strategy no 2>&1",
             args);
    int rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    // no deepspeed section: GradScaler's numbers (2^16, no hysteresis) in DeepSpeed's state machine
    assert_contains(g_text, "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768");
    int n;
    char** lr = jsonl_values(out, "learning_rate", &n);
    char** sc = jsonl_values(out, "loss_scale", &n);
    char** sk = jsonl_values(out, "skipped", &n);
    char** gn = jsonl_values(out, "grad_norm", &n);
    assert_int_equal(n, 6);
    // linear decay: steps 1, 2, 3 use different lrs; skipped step 3 did not advance the schedule, so step 4 uses
    // step 3's lr
    assert_string_not_equal(lr[1], lr[2]);
    assert_string_equal(lr[2], lr[3]);
    assert_string_not_equal(lr[3], lr[4]);
    assert_string_equal(sc[1], "65536.0");
    assert_string_equal(sc[2], "32768.0");
    assert_string_equal(sk[1], "0");
    assert_string_equal(sk[2], "1");
    assert_string_equal(gn[2], "null");
    free_vals(lr, n);
    free_vals(sc, n);
    free_vals(sk, n);
    free_vals(gn, n);

    // DeepSpeed fp16 section without scaler keys: DynamicLossScaler() defaults, 2^32 and hysteresis 1
    char* ds = t5_path_join(t5test_tmpdir(), "ds_fp16.json");
    t5test_write_file(ds, "{\"fp16\": {\"enabled\": \"auto\"}, \"zero_optimization\": {\"stage\": 0},"
                          " \"gradient_clipping\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\"}");
    char* out2 = t5_path_join(t5test_tmpdir(), "ovf_ds");
    base_args(args, sizeof args, out2, 32);
    snprintf(cmd, sizeof cmd, "%s --deepspeed %s --do_train --fp16 --max_steps 4 --save_strategy no 2>&1", args, ds);
    rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    assert_contains(g_text, "Attempted loss scale: 4294967296, reducing to 2147483648");
    free(ds);
    free(out2);
    free(out);
}

static void test_corrupt_checkpoint_skipped(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* out = t5_path_join(t5test_tmpdir(), "corrupt");
    char cmd[8192], args[4096];
    base_args(args, sizeof args, out, 32);
    snprintf(cmd, sizeof cmd, "%s --do_train --max_steps 4 --save_steps 2 2>&1", args);
    int rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    // flip bytes in the newest state file: resume "last" must report it and take checkpoint-2
    rc = t5test_run(g_text, sizeof g_text,
                    "printf 'XXXXXXXX' | dd of=%s/checkpoint-4/t5train_state.bin bs=1 seek=2000 conv=notrunc 2>&1", out);
    assert_int_equal(rc, 0);
    snprintf(cmd, sizeof cmd, "%s --do_train --max_steps 6 --save_steps 2 --resume_from_checkpoint last 2>&1", args);
    rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    assert_contains(g_text, "skipping incomplete or corrupt checkpoint");
    assert_contains(g_text, "checksum mismatch");
    assert_contains(g_text, "using the previous complete checkpoint");
    assert_contains(g_text, "checkpoint-2");
    // an explicit corrupt directory is an error, not a fallback
    snprintf(cmd, sizeof cmd, "rm %s/checkpoint-6/t5train_done; %s --do_train --max_steps 8 --resume_from_checkpoint %s/checkpoint-6 2>&1",
             out, args, out);
    rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    assert_int_equal(rc, 2);  // an input error, found by the checks before anything is created (docs/reliability.md)
    assert_contains(g_text, "no completion marker t5train_done");
    free(out);
}

static void test_trajectory_matches_torch_fp32(void** state) {
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
    assert_int_equal((int)json_array_size(tl), steps);
    char* out = t5_path_join(t5test_tmpdir(), "traj");
    int worst_i;
    const double worst = tiny_run_vs_reference(out, flags, NULL, steps, tl, &worst_i);
    print_message("max per-step loss rel diff vs torch %.3e at step %d (tolerance %.0e, %.1f%% used)\n", worst,
                  worst_i + 1, tol, 100 * worst / tol);
    assert_true(worst <= tol);
    json_decref(ref);
    free(out);
    free(fx);
}

// do_eval + do_predict with predict_with_generate: BLEU and gen_len in the results files, one generated line
// per test example (run_translation's outputs).
static void test_eval_and_predict_with_generate(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char* out = t5_path_join(t5test_tmpdir(), "gen");
    char cmd[8192], args[4096];
    base_args(args, sizeof args, out, 16);
    snprintf(cmd, sizeof cmd,
             "%s --do_train --max_steps 2 --do_eval --do_predict --predict_with_generate --test_file %s/wmt16-ro-en/"
             "validation.en --max_predict_samples 12 --generation_max_length 12 --num_beams 2 2>&1",
             args, t5test_data_dir());
    int rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("exit %d:\n%s", rc, g_text);
    assert_contains(g_text, "***** eval metrics *****");
    assert_contains(g_text, "***** predict metrics *****");
    const char* expect[][2] = {{"eval_results.json", "\"eval_bleu\""}, {"eval_results.json", "\"eval_gen_len\""},
                               {"predict_results.json", "\"predict_bleu\""},
                               {"predict_results.json", "\"predict_loss\""},
                               {"all_results.json", "\"predict_gen_len\""}};
    for (size_t i = 0; i < T5_ARRAY_LEN(expect); i++) {
        char* p = t5_path_join(out, expect[i][0]);
        char* txt = t5_read_file(p, NULL);
        if (!txt) fail_msg("missing %s", p);
        assert_contains(txt, expect[i][1]);
        free(txt);
        free(p);
    }
    char* p = t5_path_join(out, "generated_predictions.txt");
    rc = t5test_run(g_text, sizeof g_text, "tr -cd '\\n' < %s | wc -c", p);
    assert_int_equal(rc, 0);
    assert_int_equal(atoi(g_text), 11);  // "\n".join(12 predictions): 11 newlines
    free(p);
    free(out);
}

// --load_best_model_at_end with --metric_for_best_model (bleu: greater is better; loss: lower), HF's rules: evaluation and
// save every 4 steps, save_total_limit 1 (rotation must keep the best checkpoint beside the newest). Checked against the
// run's own log_history, not a fixed answer: best_model_checkpoint is the first evaluation with the strictly best
// metric (HF's _determine_best_metric), best_metric its value, that checkpoint still exists, and the final
// model.safetensors is the best checkpoint's weights byte for byte ("Loading best model from ...").
static void best_model_case(const char* tag, const char* metric, bool greater) {
    char* out = t5_path_join(t5test_tmpdir(), tag);
    char cmd[8192], args[4096];
    base_args(args, sizeof args, out, 64);
    snprintf(cmd, sizeof cmd,
             "%s --do_train --do_eval --max_steps 16 --learning_rate 3e-3 --evaluation_strategy steps --eval_steps 4 "
             "--save_strategy steps --save_steps 4 --save_total_limit 1 --load_best_model_at_end "
             "--metric_for_best_model %s --predict_with_generate --generation_max_length 12 --run_name %s "
             "--overwrite_output_dir 2>&1",
             args, metric, tag);
    int rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("%s: exit %d:\n%s", tag, rc, g_text);
    char* p = t5_path_join(out, "trainer_state.json");
    json_error_t jerr;
    json_t* st = json_load_file(p, 0, &jerr);
    if (!st) fail_msg("cannot read %s: %s", p, jerr.text);
    char key[64];
    snprintf(key, sizeof key, "eval_%s", metric);
    // HF's rule over the evaluations in log order
    double best = greater ? -INFINITY : INFINITY;
    long long best_step = -1;
    int nevals = 0;
    size_t i;
    json_t* e;
    json_array_foreach(json_object_get(st, "log_history"), i, e) {
        json_t* v = json_object_get(e, key);
        if (!v) continue;
        double x = json_number_value(v);
        nevals++;
        // each evaluation's entry carries the step it ran at (every 4 steps), not the last save's
        assert_int_equal(json_integer_value(json_object_get(e, "step")), 4 * nevals);
        if (greater ? x > best : x < best) best = x, best_step = (long long)json_integer_value(json_object_get(e, "step"));
    }
    print_message("%s: %d evaluations, best %s %.6g at step %lld\n", tag, nevals, key, best, best_step);
    assert_int_equal(nevals, 4);
    assert_true(best_step > 0);
    char want[4200];
    snprintf(want, sizeof want, "%s/checkpoint-%lld", out, best_step);
    const char* got = json_string_value(json_object_get(st, "best_model_checkpoint"));
    if (!got || strcmp(got, want) != 0) fail_msg("%s: best_model_checkpoint %s, want %s", tag, got ? got : "(none)", want);
    double bm = json_number_value(json_object_get(st, "best_metric"));
    if (!(fabs(bm - best) <= 1e-9 * fmax(1.0, fabs(best)))) fail_msg("%s: best_metric %.9g, want %.9g", tag, bm, best);
    if (!file_in(want, "t5train_done")) fail_msg("%s: the best checkpoint %s was rotated away", tag, want);
    assert_contains(g_text, "Loading best model from");
    rc = t5test_run(g_text, sizeof g_text, "cmp %s/model.safetensors %s/model.safetensors 2>&1", want, out);
    if (rc) fail_msg("%s: the final model is not the best checkpoint's: %s", tag, g_text);
    json_decref(st);
    free(p);
    free(out);
}

static void test_load_best_model_at_end(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    best_model_case("best_bleu", "bleu", true);
    best_model_case("best_loss", "loss", false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_decreases_and_files),
        cmocka_unit_test(test_resume_bit_identical_fp16),
        cmocka_unit_test(test_resume_bit_identical_bf16),
        cmocka_unit_test(test_resume_bit_identical_adafactor),
        cmocka_unit_test(test_resume_other_optimizer_refused),
        cmocka_unit_test(test_sigterm_saves_and_exits_0),
        cmocka_unit_test(test_fp16_overflow_skips_step),
        cmocka_unit_test(test_corrupt_checkpoint_skipped),
        cmocka_unit_test(test_trajectory_matches_torch_fp32),
        cmocka_unit_test(test_adafactor_matches_torch_fp32),
        cmocka_unit_test(test_eval_and_predict_with_generate),
        cmocka_unit_test(test_load_best_model_at_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
