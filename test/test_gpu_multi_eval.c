/*
 * test_gpu_multi_eval.c: sharded evaluation and prediction (issue 29 item 1, src/eval/shard.h), through the binary:
 * `--do_eval --do_predict --predict_with_generate` on one GPU against `t5train --num_gpus N` (2, and 4 when four GPUs
 * are visible), fp32 greedy, on a tiny model trained here for a few steps from test/fixtures/t5/tiny_v10 (so that it
 * emits `</s>` and its sequences end at different lengths) and the first WMT16 validation sources. 35 evaluation and
 * 37 prediction sources in batches of 4: neither is a multiple of ranks x batch, so the last batch is partial and
 * some ranks run padding steps (4 GPUs: three of them in the evaluation's last step).
 * Gates: eval_loss / predict_loss within 1e-6 relative of one GPU's, bleu, gen_len and samples equal, the same keys
 * in eval_results.json / predict_results.json / all_results.json, generated_predictions.txt byte-identical.
 * Cases: stage 0; stage 3 (every unit partitioned, held for the evaluation); stage 3 gathering on demand
 * (T5TRAIN_EVAL_NO_HOLD=1: ZeRO inference, issue 29 item 3: the loss pass and generation sharded, generation in
 * lockstep: every rank steps until no rank has a row left), greedy and with 2 beams, also on a split of one batch (a
 * rank without any real batch); --do_predict alone at stage 3 with offload_param, gathering on demand; training's
 * in-loop evaluation at stage 2 after updates of learning rate 0 (the weights unchanged, the units refreshed after a
 * step).
 * Sharded generation is proven by the line rank 0 prints (src/eval/evaluate.c evaluate_shard_line): the batches each
 * rank generated must be its share (src/eval/shard.h eval_shard_rank_batches), not the whole split; in lockstep the
 * decoder steps, the agreements and the unit gathers must be the same on every rank.
 * Generation takes the length-sorted batches by default (eval_sort_by_length, issue 29 item 2), so the cases above
 * compare sorted runs (1 GPU's sorted batches dealt to the ranks: the same batches on any N); stage 0 also compares
 * unsorted runs. test_sort_switch (one GPU) compares --eval_sort_by_length true against false, greedy and 2 beams:
 * the same generated_predictions.txt line for line and the same metrics (gen_len counted over the input-order batches
 * either way), and the sorted run's line shows fewer padded source positions than the input order.
 * test_zinf_no_optimizer_state (one GPU, bf16): evaluation-only stage 3 engines without optimizer state (issue 29
 * item 3), with and without both offloads, held and on demand, against stage 0: identical metrics and predictions,
 * less resident GPU memory than the training engine. Written without a GPU: not run yet.
 * Skipped unless two GPUs are visible (test_sort_switch, test_zinf_no_optimizer_state: one).
 */
#include "t5test.h"

#include <jansson.h>
#include <math.h>

#include "../src/base/common.h"
#include "../src/eval/shard.h"

static char g_text[1 << 18];
static char g_model[512];  // the model trained by ensure_model

#define REQUIRE_TWO_GPUS() T5_REQUIRE_GPUS(2)

// ENV t5train on GPU 0 (gpus 1) or `t5train --num_gpus N` with the common data flags and EXTRA; exits non-zero -> fail
static void run(const char* tag, const char* env, int gpus, const char* out, const char* extra) {
    const char* d = t5test_data_dir();
    char launch[64] = "", ngpus[32] = "", cmd[8192];
    if (gpus == 1) snprintf(launch, sizeof launch, "CUDA_VISIBLE_DEVICES=0 ");
    else snprintf(ngpus, sizeof ngpus, " --num_gpus %d", gpus);
    int k = snprintf(cmd, sizeof cmd,
                     "%s %s%s%s --tokenizer_name %s/t5-spiece/spiece.model --source_lang en --target_lang ro "
                     "--max_source_length 48 --seed 7 --dropout_rate 0 --output_dir %s %s 2>&1",
                     env, launch, t5test_bin(), ngpus, d, out, extra);
    if (k < 0 || (size_t)k >= sizeof cmd) fail_msg("command line too long");
    const int rc = t5test_run(g_text, sizeof g_text, "%s", cmd);
    if (rc) fail_msg("%s on %d GPU(s): exit %d:\n%s", tag, gpus, rc, t5test_tail(g_text, 4000));
}

// The tiny model trained on one GPU (once per test program): 60 updates on 64 pairs with targets cut to 8 tokens
static void ensure_model(void) {
    if (g_model[0]) return;
    snprintf(g_model, sizeof g_model, "%s/meval_model", t5test_tmpdir());
    char extra[2048];
    snprintf(extra, sizeof extra,
             "--model_name_or_path %s/test/fixtures/t5/tiny_v10 --train_file %s/wmt16-ro-en/validation.en "
             "--max_train_samples 64 --max_target_length 8 --per_device_train_batch_size 8 --do_train --max_steps 60 "
             "--learning_rate 1e-2 --warmup_steps 3 --save_strategy no --logging_steps 10",
             t5test_repo_dir(), t5test_data_dir());
    run("training the model", "", 1, g_model, extra);
}

#define EVAL_BATCH 4

// The evaluation flags: 35 evaluation and 37 prediction sources in batches of 4 (n_eval, n_pred override); n_eval 0:
// --do_predict alone
static void eval_flags(char* buf, size_t cap, int n_eval, int n_pred, const char* more) {
    const char* d = t5test_data_dir();
    char ev[256] = "";
    if (n_eval > 0)
        snprintf(ev, sizeof ev, "--validation_file %s/wmt16-ro-en/validation.en --max_eval_samples %d --do_eval", d,
                 n_eval);
    int k = snprintf(buf, cap,
                     "--model_name_or_path %s %s --test_file %s/wmt16-ro-en/validation.en --max_predict_samples %d "
                     "--max_target_length 24 --per_device_eval_batch_size %d --do_predict "
                     "--predict_with_generate --generation_max_length 24 %s",
                     g_model, ev, d, n_pred, EVAL_BATCH, more);
    if (k < 0 || (size_t)k >= cap) fail_msg("flags too long");
}

// Reads `n` numbers after "| name" / ": name" in line into v
static void shard_line_field(const char* line, const char* name, int64_t* v, int n, const char* tag) {
    const char* p = strstr(line, name);
    if (!p) fail_msg("%s: no \"%s\" in the sharded-generation line: %s", tag, name, line);
    p += strlen(name);
    for (int w = 0; w < n; w++) {
        char* end;
        v[w] = strtoll(p, &end, 10);
        if (end == p) fail_msg("%s: \"%s\" has fewer than %d numbers: %s", tag, name, n, line);
        p = end;
    }
}

// The line rank 0 printed for prefix's generation on `world` ranks (in g_text): the mode must be `mode` ("sharded" or
// "sharded in lockstep (steps agreed)"), each rank's batches its share of n sources; in lockstep every rank ran a
// batch at each step (padding steps too) and the same decoder steps, agreements and unit gathers (> 0)
static void check_shard_line(const char* tag, const char* prefix, int world, int n, const char* mode) {
    char head[256];
    snprintf(head, sizeof head, "%s generation on %d ranks, %s: ", prefix, world, mode);
    const char* at = strstr(g_text, head);
    if (!at) fail_msg("%s: no line \"%s...\" in the output (generation not sharded as expected):\n%s", tag, head, g_text);
    const char* nl = strchr(at, '\n');
    char line[1024];
    snprintf(line, sizeof line, "%.*s", (int)(nl ? nl - at : (long)strlen(at)), at);
    print_message("%s: %s\n", tag, line);
    int64_t batches[8], padding[8], steps[8], agree[8], gathers[8];
    if (world > 8) fail_msg("world %d", world);
    shard_line_field(line, "batches per rank", batches, world, tag);
    shard_line_field(line, "| padding", padding, world, tag);
    shard_line_field(line, "| decoder steps", steps, world, tag);
    shard_line_field(line, "| agreements", agree, world, tag);
    shard_line_field(line, "| unit gathers", gathers, world, tag);
    EvalShard sh;
    eval_shard_plan(&sh, n, EVAL_BATCH, world);
    const bool lockstep = strstr(mode, "lockstep") != NULL;
    for (int r = 0; r < world; r++) {
        if (batches[r] != eval_shard_rank_batches(&sh, r))
            fail_msg("%s: rank %d generated %lld batches, its share of %lld is %lld", tag, r, (long long)batches[r],
                     (long long)sh.n_batches, (long long)eval_shard_rank_batches(&sh, r));
        const int64_t pad = lockstep ? sh.steps - batches[r] : 0;
        if (padding[r] != pad) fail_msg("%s: rank %d ran %lld padding batches, expected %lld", tag, r,
                                        (long long)padding[r], (long long)pad);
        if (!lockstep) continue;
        if (steps[r] != steps[0] || agree[r] != agree[0] || gathers[r] != gathers[0])
            fail_msg("%s: rank %d out of step with rank 0 (decoder steps %lld / %lld, agreements %lld / %lld, unit "
                     "gathers %lld / %lld)", tag, r, (long long)steps[r], (long long)steps[0], (long long)agree[r],
                     (long long)agree[0], (long long)gathers[r], (long long)gathers[0]);
        if (steps[r] <= 0 || agree[r] <= 0 || gathers[r] <= 0)
            fail_msg("%s: rank %d: no decoder step, agreement or gather counted", tag, r);
    }
}

static json_t* load_json(const char* dir, const char* name) {
    char* p = t5_path_join(dir, name);
    json_error_t je;
    json_t* j = json_load_file(p, 0, &je);
    if (!j) fail_msg("%s: %s", p, je.text);
    free(p);
    return j;
}

static double num(const json_t* o, const char* key, const char* where) {
    const json_t* v = json_object_get(o, key);
    if (!v || !json_is_number(v)) fail_msg("%s: no number %s", where, key);
    return json_number_value(v);
}

// the same keys in a results file of both runs
static void same_keys(const char* ref, const char* out, const char* name) {
    json_t *a = load_json(ref, name), *b = load_json(out, name);
    const char* key;
    json_t* v;
    json_object_foreach(a, key, v) if (!json_object_get(b, key)) fail_msg("%s: %s missing on N GPUs", name, key);
    json_object_foreach(b, key, v) if (!json_object_get(a, key)) fail_msg("%s: %s only on N GPUs", name, key);
    json_decref(a);
    json_decref(b);
}

// <prefix>_results.json of out against ref: loss within 1e-6 relative, bleu / gen_len / samples equal
static void same_metrics(const char* tag, const char* ref, const char* out, const char* prefix) {
    char name[64], kl[64], kb[64], kg[64], ks[64];
    snprintf(name, sizeof name, "%s_results.json", prefix);
    snprintf(kl, sizeof kl, "%s_loss", prefix);
    snprintf(kb, sizeof kb, "%s_bleu", prefix);
    snprintf(kg, sizeof kg, "%s_gen_len", prefix);
    snprintf(ks, sizeof ks, "%s_samples", prefix);
    json_t *a = load_json(ref, name), *b = load_json(out, name);
    const double la = num(a, kl, ref), lb = num(b, kl, out);
    const double rel = fabs(la - lb) / fmax(fabs(la), 1e-30);
    print_message("%s %s: loss %.9g / %.9g (rel diff %.3g, gate 1e-6), bleu %g / %g, gen_len %g / %g, samples %g / "
                  "%g\n", tag, prefix, la, lb, rel, num(a, kb, ref), num(b, kb, out), num(a, kg, ref),
                  num(b, kg, out), num(a, ks, ref), num(b, ks, out));
    if (!(rel <= 1e-6)) fail_msg("%s: %s differs by %.3g relative", tag, kl, rel);
    const char* exact[] = {kb, kg, ks};
    for (size_t i = 0; i < T5_ARRAY_LEN(exact); i++)
        if (num(a, exact[i], ref) != num(b, exact[i], out))
            fail_msg("%s: %s %.17g on one GPU, %.17g on N", tag, exact[i], num(a, exact[i], ref), num(b, exact[i], out));
    json_decref(a);
    json_decref(b);
    same_keys(ref, out, name);
}

// generated_predictions.txt byte-identical; returns its number of lines (and checks that not all are empty)
static int same_predictions(const char* tag, const char* ref, const char* out) {
    char *pa = t5_path_join(ref, "generated_predictions.txt"), *pb = t5_path_join(out, "generated_predictions.txt");
    size_t na = 0, nb = 0;
    char *a = t5_read_file(pa, &na), *b = t5_read_file(pb, &nb);
    if (!a || !b) fail_msg("%s: missing %s", tag, !a ? pa : pb);
    if (na != nb || memcmp(a, b, na) != 0) {
        size_t i = 0;
        while (i < na && i < nb && a[i] == b[i]) i++;
        int line = 1;
        for (size_t j = 0; j < i; j++) line += a[j] == '\n';
        fail_msg("%s: generated_predictions.txt differs at byte %zu (line %d; %zu / %zu bytes)", tag, i, line, na, nb);
    }
    int lines = na > 0, empty = 0;
    for (size_t j = 0; j < na; j++) lines += a[j] == '\n';
    for (size_t j = 0; j + 1 < na; j++) empty += a[j] == '\n' && a[j + 1] == '\n';
    if (empty + 1 >= lines) fail_msg("%s: %d of %d predictions empty: the test would compare nothing", tag, empty, lines);
    const char* nl = strchr(a, '\n');
    print_message("%s: generated_predictions.txt identical, %d lines (%d empty), first: %.*s\n", tag, lines, empty,
                  (int)(nl ? nl - a : (long)na), a);
    free(a);
    free(b);
    free(pa);
    free(pb);
    return lines;
}

// the values of key in trainer_log.jsonl's evaluation lines (those without max_steps), in order; returns how many
static int eval_log_values(const char* out, const char* key, double* v, int cap) {
    char* p = t5_path_join(out, "trainer_log.jsonl");
    char* text = t5_read_file(p, NULL);
    if (!text) fail_msg("no %s", p);
    int n = 0;
    for (char* line = strtok(text, "\n"); line && n < cap; line = strtok(NULL, "\n")) {
        json_t* j = json_loads(line, 0, NULL);
        if (!j) fail_msg("%s: not JSON: %s", p, line);
        const json_t* x = json_object_get(j, key);
        if (x && json_is_number(x) && !json_object_get(j, "max_steps")) v[n++] = json_number_value(x);
        json_decref(j);
    }
    free(text);
    free(p);
    return n;
}

// one GPU (ref_env) against 2 GPUs, and 4 when visible (env, extra); n_eval / n_pred sources (n_eval 0: --do_predict
// alone); mode: how the N-GPU generation must be shared (check_shard_line)
static void compare(const char* tag, const char* ref_env, const char* env, const char* more, int n_eval, int n_pred,
                    const char* mode) {
    ensure_model();
    char ref[512], out[512], flags[4096];
    snprintf(ref, sizeof ref, "%s/meval_%s_1gpu", t5test_tmpdir(), tag);
    eval_flags(flags, sizeof flags, n_eval, n_pred, more);
    run(tag, ref_env, 1, ref, flags);
    const int worlds[] = {2, 4};
    for (size_t w = 0; w < T5_ARRAY_LEN(worlds); w++) {
        const int n = worlds[w];
        if (n > t5test_gpu_count()) {
            print_message("%s: %d GPUs not visible, not run\n", tag, n);
            continue;
        }
        snprintf(out, sizeof out, "%s/meval_%s_%dgpu", t5test_tmpdir(), tag, n);
        run(tag, env, n, out, flags);
        char t[128];
        snprintf(t, sizeof t, "%s, %d GPUs", tag, n);
        if (n_eval > 0) check_shard_line(t, "eval", n, n_eval, mode);
        check_shard_line(t, "predict", n, n_pred, mode);
        if (n_eval > 0) same_metrics(t, ref, out, "eval");
        same_metrics(t, ref, out, "predict");
        same_keys(ref, out, "all_results.json");
        assert_int_equal(same_predictions(t, ref, out), n_pred);
    }
}

#define S3 "--deepspeed '{\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0}}'"

#define SHARDED "sharded"
#define LOCKSTEP "sharded in lockstep (steps agreed)"
#define NO_HOLD "T5TRAIN_EVAL_NO_HOLD=1"

static void test_stage0(void** state) {
    (void)state;
    REQUIRE_TWO_GPUS();
    compare("s0", "", "", "", 35, 37, SHARDED);
    compare("s0_unsorted", "", "", "--eval_sort_by_length false", 35, 37, SHARDED);  // HF's batches, dealt alike
}
static void test_stage3_held(void** state) {
    (void)state;
    REQUIRE_TWO_GPUS();
    compare("s3", "", "", S3, 35, 37, SHARDED);
}
// stage 3 gathering on demand on every rank (ZeRO inference, as when the units do not fit), one GPU likewise:
// generation sharded in lockstep, greedy and with 2 beams (device beam search: steps launched ahead, drains agreed)
static void test_stage3_on_demand(void** state) {
    (void)state;
    REQUIRE_TWO_GPUS();
    compare("s3_nohold", NO_HOLD, NO_HOLD, S3, 35, 37, LOCKSTEP);
    compare("s3_nohold_beams2", NO_HOLD, NO_HOLD, S3 " --num_beams 2", 35, 37, LOCKSTEP);
    // 3 sources: one batch; on N GPUs every rank but rank 0 runs only a padding step (the last batch, dropped)
    compare("s3_nohold_one_batch", NO_HOLD, NO_HOLD, S3, 3, 3, LOCKSTEP);
}

// --do_predict alone (no training, no evaluation) at stage 3 with the parameters offloaded to the CPU, gathering on
// demand: the weights stay partitioned (each rank loads its part), generation sharded in lockstep
static void test_predict_only_offload_param(void** state) {
    (void)state;
    REQUIRE_TWO_GPUS();
    compare("s3_offload_param_predict", NO_HOLD, NO_HOLD,
            "--deepspeed '{\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0, "
            "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}}}'",
            0, 37, LOCKSTEP);
}

// "GPU X GiB resident" of the engine's start-up line in g_text (src/zero/engine.c print_plan)
static double resident_gib(const char* tag) {
    const char* key = "GiB pinned), GPU ";
    const char* p = strstr(g_text, key);
    double v = -1;
    if (!p || sscanf(p + strlen(key), "%lf", &v) != 1) fail_msg("%s: no ZeRO plan line", tag);
    return v;
}

// ZeRO inference without optimizer state (model/zero.h no_optimizer_state; issue 29 item 3), one GPU, bf16 (the
// 16-bit path: no fp32 master, the load writes the working partitions and views): stage 3, and stage 3 with both
// offloads (the partitions on the host), give eval_loss, predict metrics and generated_predictions.txt identical to
// stage 0's (the same rounding of the same fp32 checkpoint), and the engine keeps less GPU memory resident than the
// same stage 3 engine built for training (which holds master, Adam m, v, gradient partitions and buckets; checked
// without offload, where those are on the GPU).
static void test_zinf_no_optimizer_state(void** state) {
    (void)state;
    T5_REQUIRE_GPUS(1);
    ensure_model();
    char ref[512], out[512], flags[4096];
    snprintf(ref, sizeof ref, "%s/meval_zinf_s0", t5test_tmpdir());
    eval_flags(flags, sizeof flags, 35, 37, "--bf16");
    run("zinf stage 0", "", 1, ref, flags);
    const char* cases[][2] = {
        {"s3", S3},
        {"s3_offload", "--deepspeed '{\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0, "
                       "\"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}}}'"},
    };
    for (size_t c = 0; c < T5_ARRAY_LEN(cases); c++) {
        char tag[64], more[1024];
        snprintf(tag, sizeof tag, "zinf_%s", cases[c][0]);
        snprintf(more, sizeof more, "--bf16 %s", cases[c][1]);
        eval_flags(flags, sizeof flags, 35, 37, more);
        for (int hold = 0; hold < 2; hold++) {
            // a folder per run: a second run into the same one appends to its trainer_log.jsonl
            snprintf(out, sizeof out, "%s/meval_%s%s", t5test_tmpdir(), tag, hold ? "_held" : "");
            run(tag, hold ? "" : NO_HOLD, 1, out, flags);
            const double eval_gib = resident_gib(tag);
            same_metrics(tag, ref, out, "eval");
            same_metrics(tag, ref, out, "predict");
            assert_int_equal(same_predictions(tag, ref, out), 37);
            double a[8], b[8];
            const int na = eval_log_values(ref, "eval_loss", a, 8), nb = eval_log_values(out, "eval_loss", b, 8);
            assert_int_equal(na, nb);
            for (int i = 0; i < na; i++)
                if (a[i] != b[i]) fail_msg("%s: eval_loss %.17g at stage 0, %.17g here", tag, a[i], b[i]);
            // with both offloads the engine keeps nothing on the GPU either way, and the tiny model's host figures
            // (master, m, v: ~0.005 GiB) print as 0.00 GiB both ways (4 x H200, session 8): the sizes are
            // test_estimate's (test_eval_only_sizes) and the residency is compared at stage 3 alone
            if (hold || strstr(cases[c][0], "offload")) continue;
            // the same engine built for training (one update of learning rate 0): more resident GPU memory
            static char tflags[8192];
            char tout[600];
            snprintf(tout, sizeof tout, "%s_train", out);
            snprintf(tflags, sizeof tflags, "%s --do_train --train_file %s/wmt16-ro-en/validation.en "
                     "--max_train_samples 8 --per_device_train_batch_size 4 --max_steps 1 --learning_rate 0 "
                     "--save_strategy no", flags, t5test_data_dir());
            run(tag, "", 1, tout, tflags);
            const double train_gib = resident_gib(tag);
            print_message("%s: engine resident %.3f GiB evaluation only, %.3f GiB for training\n", tag, eval_gib,
                          train_gib);
            assert_true(eval_gib < train_gib);
        }
    }
}

// training's in-loop evaluation (eval_steps) after 2 updates of learning rate 0 at stage 2: one GPU x 4 against
// N GPUs x (4 / N); the logged eval_loss / eval_bleu of step 2 and the final eval_results.json agree
static void test_in_loop_eval(void** state) {
    (void)state;
    REQUIRE_TWO_GPUS();
    ensure_model();
    const char* d = t5test_data_dir();
    char ref[512], out[512], flags[4096], more[2048];
    snprintf(ref, sizeof ref, "%s/meval_loop_1gpu", t5test_tmpdir());
    snprintf(out, sizeof out, "%s/meval_loop_2gpu", t5test_tmpdir());
    const char* common = "--do_train --train_file %s/wmt16-ro-en/validation.en --max_train_samples 16 --max_steps 2 "
                         "--learning_rate 0 --save_strategy no --logging_steps 1 --evaluation_strategy steps "
                         "--eval_steps 2 --per_device_train_batch_size %d --deepspeed '{\"zero_optimization\": "
                         "{\"stage\": 2}}'";
    snprintf(more, sizeof more, common, d, 4);
    eval_flags(flags, sizeof flags, 35, 37, more);
    run("in-loop", "", 1, ref, flags);
    snprintf(more, sizeof more, common, d, 2);
    eval_flags(flags, sizeof flags, 35, 37, more);
    run("in-loop", "", 2, out, flags);
    check_shard_line("in-loop, 2 GPUs", "predict", 2, 37, SHARDED);
    double a[8], b[8];
    const char* keys[] = {"eval_loss", "eval_bleu", "eval_gen_len"};
    for (size_t i = 0; i < T5_ARRAY_LEN(keys); i++) {
        const int na = eval_log_values(ref, keys[i], a, 8), nb = eval_log_values(out, keys[i], b, 8);
        assert_true(na >= 1);  // step 2's (and the final evaluation's)
        assert_int_equal(na, nb);
        for (int k = 0; k < na; k++) {
            const double rel = fabs(a[k] - b[k]) / fmax(fabs(a[k]), 1e-30);
            print_message("in-loop %s, evaluation %d: %.9g (1 GPU) / %.9g (2 GPUs), rel diff %.3g\n", keys[i], k + 1,
                          a[k], b[k], rel);
            if (!(rel <= (i == 0 ? 1e-6 : 0))) fail_msg("in-loop %s differs by %.3g", keys[i], rel);
        }
    }
    same_metrics("in-loop, 2 GPUs", ref, out, "eval");
    same_metrics("in-loop, 2 GPUs", ref, out, "predict");
    same_predictions("in-loop, 2 GPUs", ref, out);
}

// The line the trainer prints for prefix's sorted generation (in g_text): present and padded positions <= the input
// order's with the switch on; absent with it off
static void check_sort_line(const char* tag, const char* prefix, bool on) {
    char head[128];
    snprintf(head, sizeof head, "%s generation: batches sorted by source length: ", prefix);
    const char* at = strstr(g_text, head);
    if (!on) {
        if (at) fail_msg("%s: eval_sort_by_length false, yet \"%s\" in the output", tag, head);
        return;
    }
    if (!at) fail_msg("%s: no line \"%s...\" in the output (batches not sorted):\n%s", tag, head, g_text);
    long long sorted = -1, input = -1;
    if (sscanf(at + strlen(head), "%lld padded source positions (input order: %lld)", &sorted, &input) != 2)
        fail_msg("%s: unreadable line: %.200s", tag, at);
    print_message("%s %s: padded source positions %lld sorted, %lld in input order\n", tag, prefix, sorted, input);
    if (sorted <= 0 || sorted > input) fail_msg("%s: sorted batches pad to %lld positions, input order %lld", tag,
                                                sorted, input);
}

// --eval_sort_by_length true (the default) against false on one GPU, fp32, greedy and 2 beams: 35 evaluation and 37
// prediction sources in batches of 4. The sorted batches differ in composition and widths; fp32 rows are expected to
// come out the same (a row's logits do not depend on its batch's other rows beyond the last bit, and the tiny model's
// argmax has no such near-tie on these sources: if this fails at a prediction, that is what changed); gen_len must be
// equal by construction (counted over the input-order batches, beam search's </s> fill included)
static void test_sort_switch(void** state) {
    (void)state;
    T5_REQUIRE_GPUS(1);
    ensure_model();
    const char* cases[][2] = {{"sort_greedy", ""}, {"sort_beams2", "--num_beams 2"}};
    for (size_t c = 0; c < T5_ARRAY_LEN(cases); c++) {
        char on[512], off[512], flags[4096], more[256], tag[128];
        snprintf(on, sizeof on, "%s/meval_%s_on", t5test_tmpdir(), cases[c][0]);
        snprintf(off, sizeof off, "%s/meval_%s_off", t5test_tmpdir(), cases[c][0]);
        snprintf(more, sizeof more, "%s --eval_sort_by_length false", cases[c][1]);
        eval_flags(flags, sizeof flags, 35, 37, more);
        run(cases[c][0], "", 1, off, flags);
        snprintf(tag, sizeof tag, "%s off", cases[c][0]);
        check_sort_line(tag, "predict", false);
        eval_flags(flags, sizeof flags, 35, 37, cases[c][1]);  // the default: on
        run(cases[c][0], "", 1, on, flags);
        snprintf(tag, sizeof tag, "%s on", cases[c][0]);
        check_sort_line(tag, "eval", true);
        check_sort_line(tag, "predict", true);
        snprintf(tag, sizeof tag, "%s, sorted against input order", cases[c][0]);
        same_metrics(tag, off, on, "eval");
        same_metrics(tag, off, on, "predict");
        same_keys(off, on, "all_results.json");
        assert_int_equal(same_predictions(tag, off, on), 37);
    }
}

int main(void) {
    t5test_filter_from_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort_switch),
        cmocka_unit_test(test_stage0),
        cmocka_unit_test(test_stage3_held),
        cmocka_unit_test(test_stage3_on_demand),
        cmocka_unit_test(test_predict_only_offload_param),
        cmocka_unit_test(test_in_loop_eval),
        cmocka_unit_test(test_zinf_no_optimizer_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
