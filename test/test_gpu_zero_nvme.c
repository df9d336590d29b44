/*
 * test_gpu_zero_nvme.c: offload_optimizer device nvme (ZeRO-Infinity: Adam m, v of the CPU-stepped units in a swap
 * file under nvme_path, src/nvme/ + src/zero/part_nvme.c) through the binary, against the same runs with
 * offload_optimizer cpu. The engine does the same fp32 operations in the same order whether m, v come from host
 * memory or from the file, so everything is compared bit for bit:
 *   - fp32, the committed tiny model (test/fixtures/t5/tiny_v10) on real WMT16 pairs, 15 updates: stage 3 + both
 *     offloads with the optimizer on NVMe, (a) DeepSpeed's default aio / no pipelining, (b) pipeline_read +
 *     pipeline_write with 3 buffers, small aio blocks, queue depth 4, two I/O threads, single_submit; every loss
 *     and the final model.safetensors identical to offload_optimizer cpu; the start-up line names the swap file and
 *     the end line reports NVMe bytes read and written (the file really was used);
 *   - stage 2 + offload_optimizer nvme with ratio 0.5 (half the units on the GPU, half through the file) against
 *     the same with cpu;
 *   - checkpoints: stop after step 6 with the state on NVMe: checkpoint-6's t5train_state.bin equals the cpu run's
 *     (the save read m, v back from the file); --resume_from_checkpoint last under nvme ends at the uninterrupted
 *     run's weights byte for byte (the resume wrote m, v into the new file);
 *   - a missing nvme_path folder: exit non-zero with one line naming it.
 * nvme_path is a folder under the test's temporary folder ($TMPDIR or /tmp); a filesystem that refuses O_DIRECT
 * there skips the test with the engine's reason.
 */
#include "t5test.h"

#include <sys/stat.h>

#include "../src/base/common.h"

#define NSTEPS 15

static char g_text[1 << 18];
static char g_nvme[600];  // nvme_path

// tiny_v10, fp32, real pairs, NSTEPS updates; small sub-groups and buckets so the optimizer works in pieces
static void ncmd(char* buf, size_t cap, const char* out) {
    const char* d = t5test_data_dir();
    int k = snprintf(buf, cap,
                     "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name %s/t5-spiece/spiece.model "
                     "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro "
                     "--max_source_length 32 --max_target_length 32 --max_train_samples 200 "
                     "--per_device_train_batch_size 4 --gradient_accumulation_steps 1 --do_train --max_steps %d "
                     "--learning_rate 1e-3 --warmup_steps 3 --weight_decay 0.01 --dropout_rate 0 --save_steps 1000 "
                     "--logging_steps 1 --seed 11 --output_dir %s",
                     t5test_bin(), t5test_repo_dir(), d, d, NSTEPS, out);
    if (k < 0 || (size_t)k >= cap) fail_msg("command line too long");
}

#define KNOBS "\"reduce_bucket_size\": 20000, \"sub_group_size\": 60000, \"stage3_param_persistence_threshold\": 100"
#define OFF_PARAM "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}, "

// writes OUT.ds.json with this zero_optimization (and the top-level extra, e.g. an aio section)
static char* write_ds(const char* tag, const char* zero, const char* top) {
    char* out = t5_path_join(t5test_tmpdir(), tag);
    char ds[4200];
    snprintf(ds, sizeof ds, "%s.ds.json", out);
    FILE* f = fopen(ds, "w");
    if (!f) fail_msg("cannot write %s", ds);
    fprintf(f,
            "{ \"gradient_clipping\": 1.0, \"gradient_accumulation_steps\": \"auto\", \"train_micro_batch_size_per_gpu\": "
            "\"auto\", %s \"zero_optimization\": %s }\n",
            top ? top : "", zero);
    fclose(f);
    return out;
}

// one run (env: e.g. T5TRAIN_STOP_AFTER_STEPS=6; extra flags); the exit status, the output in g_text
static int nrun_rc(const char* out, const char* env, const char* extra) {
    char cmd[8192];
    ncmd(cmd, sizeof cmd, out);
    return t5test_run(g_text, sizeof g_text, "%s %s --deepspeed %s.ds.json %s 2>&1", env ? env : "", cmd, out,
                      extra ? extra : "--overwrite_output_dir");
}

static void nrun(const char* tag, const char* out, const char* env, const char* extra) {
    const int rc = nrun_rc(out, env, extra);
    if (rc) {
        size_t len = strlen(g_text);
        fail_msg("%s: exit %d:\n...%s", tag, rc, g_text + (len > 3000 ? len - 3000 : 0));
    }
}

// every logged loss of b equals a's, bit for bit (%.17g in trainer_log.jsonl)
static void same_losses(const char* a, const char* b, const char* what) {
    double la[NSTEPS + 1], lb[NSTEPS + 1];
    const int na = t5test_jsonl_doubles(a, "loss", la, NSTEPS + 1), nb = t5test_jsonl_doubles(b, "loss", lb, NSTEPS + 1);
    if (na != NSTEPS || nb != NSTEPS) fail_msg("%s: %d / %d loss lines, want %d", what, na, nb, NSTEPS);
    for (int i = 0; i < NSTEPS; i++)
        if (la[i] != lb[i]) fail_msg("%s: loss of step %d differs: %.17g vs %.17g", what, i + 1, la[i], lb[i]);
    print_message("%-44s %d losses identical (first %.6f last %.6f)\n", what, NSTEPS, lb[0], lb[NSTEPS - 1]);
}

static void same_file(const char* a, const char* b, const char* what) {
    const int rc = t5test_run(g_text, sizeof g_text, "cmp '%s' '%s' 2>&1", a, b);
    if (rc) fail_msg("%s: %s and %s differ: %s", what, a, b, g_text);
}

static void same_model(const char* a, const char* b, const char* what) {
    char* pa = t5_path_join(a, "model.safetensors");
    char* pb = t5_path_join(b, "model.safetensors");
    same_file(pa, pb, what);
    free(pa);
    free(pb);
}

// the last run's output shows the swap file at start-up and NVMe traffic at the end
static void used_nvme(const char* what) {
    if (!strstr(g_text, "swap file under")) fail_msg("%s: no swap file in the start-up line:\n%s", what, g_text);
    const char* p = strstr(g_text, "; NVMe ");
    double rd = 0, wr = 0;
    if (!p || sscanf(p, "; NVMe %lf GiB read, %lf GiB written", &rd, &wr) != 2 || !(rd > 0) || !(wr > 0))
        fail_msg("%s: the end line reports no NVMe reads and writes:\n%s", what, g_text);
}

// nvme_path under the temporary folder; skips (with the engine's line) where that filesystem refuses O_DIRECT
static void nvme_setup(void) {
    snprintf(g_nvme, sizeof g_nvme, "%s/nvme", t5test_tmpdir());
    mkdir(g_nvme, 0700);
}

static bool refused_o_direct(void) {
    if (!strstr(g_text, "refuses O_DIRECT")) return false;
    const char* p = strstr(g_text, "nvme_path");
    print_message("the temporary folder refuses O_DIRECT; skipping: %.300s\n", p ? p : g_text);
    return true;
}

static void test_nvme_matches_cpu(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    nvme_setup();
    char z[2048];
    // reference: stage 3, both offloads on the CPU
    snprintf(z, sizeof z, "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, " OFF_PARAM KNOBS "}");
    char* ref = write_ds("n_cpu3", z, NULL);
    nrun("stage 3 cpu", ref, NULL, NULL);
    // (a) the optimizer state on NVMe, DeepSpeed's defaults (no pipelining, aio defaults)
    snprintf(z, sizeof z, "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}, " OFF_PARAM
             KNOBS "}", g_nvme);
    char* a = write_ds("n_nvme3", z, NULL);
    if (nrun_rc(a, NULL, NULL)) {
        if (refused_o_direct()) skip();
        fail_msg("stage 3 nvme: %s", g_text);
    }
    used_nvme("stage 3 nvme");
    same_losses(ref, a, "stage 3 nvme vs cpu");
    same_model(ref, a, "stage 3 nvme vs cpu: final weights");
    // (b) pipelined read and write, 3 buffers, small requests, 2 I/O threads, one request per submit
    snprintf(z, sizeof z, "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", "
             "\"buffer_count\": 3, \"pipeline_read\": true, \"pipeline_write\": true}, " OFF_PARAM KNOBS "}", g_nvme);
    char* b = write_ds("n_nvme3p", z, "\"aio\": {\"block_size\": 65536, \"queue_depth\": 4, \"thread_count\": 2, "
                                     "\"single_submit\": true, \"overlap_events\": true},");
    nrun("stage 3 nvme pipelined", b, NULL, NULL);
    used_nvme("stage 3 nvme pipelined");
    same_losses(ref, b, "stage 3 nvme pipelined vs cpu");
    same_model(ref, b, "stage 3 nvme pipelined vs cpu: final weights");
    // stage 2, half of the optimizer on the GPU (ratio 0.5), the other half through the file
    snprintf(z, sizeof z, "{\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.5}, " KNOBS "}");
    char* c2 = write_ds("n_cpu2", z, NULL);
    nrun("stage 2 cpu ratio 0.5", c2, NULL, NULL);
    snprintf(z, sizeof z, "{\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", "
             "\"ratio\": 0.5, \"pipeline_read\": true}, " KNOBS "}", g_nvme);
    char* n2 = write_ds("n_nvme2", z, NULL);
    nrun("stage 2 nvme ratio 0.5", n2, NULL, NULL);
    used_nvme("stage 2 nvme ratio 0.5");
    same_losses(c2, n2, "stage 2 nvme ratio 0.5 vs cpu");
    same_model(c2, n2, "stage 2 nvme ratio 0.5 vs cpu: final weights");
    // nothing is left in nvme_path (the swap files are unlinked at creation)
    const int rc = t5test_run(g_text, sizeof g_text, "ls -A '%s' | wc -l", g_nvme);
    if (rc || atoi(g_text) != 0) fail_msg("files left in %s: %s", g_nvme, g_text);
    free(ref);
    free(a);
    free(b);
    free(c2);
    free(n2);
}

static void test_nvme_checkpoint_resume(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    nvme_setup();
    char z[2048];
    snprintf(z, sizeof z, "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", "
             "\"pipeline_read\": true, \"pipeline_write\": true}, " OFF_PARAM KNOBS "}", g_nvme);
    char* straight = write_ds("r_nvme", z, NULL);
    if (nrun_rc(straight, NULL, NULL)) {
        if (refused_o_direct()) skip();
        fail_msg("stage 3 nvme: %s", g_text);
    }
    // stop after step 6 with the state on NVMe, and the same with the state in host memory: the same checkpoint
    char* stop = write_ds("r_nvme_stop", z, NULL);
    nrun("nvme stop at 6", stop, "T5TRAIN_STOP_AFTER_STEPS=6", NULL);
    used_nvme("nvme stop at 6");
    snprintf(z, sizeof z, "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, " OFF_PARAM KNOBS "}");
    char* cstop = write_ds("r_cpu_stop", z, NULL);
    nrun("cpu stop at 6", cstop, "T5TRAIN_STOP_AFTER_STEPS=6", NULL);
    char pa[1200], pb[1200];
    snprintf(pa, sizeof pa, "%s/checkpoint-6/t5train_state.bin", cstop);
    snprintf(pb, sizeof pb, "%s/checkpoint-6/t5train_state.bin", stop);
    same_file(pa, pb, "checkpoint-6 optimizer state saved from NVMe vs from host memory");
    print_message("checkpoint-6: the optimizer state saved from the swap file equals the cpu run's, byte for byte\n");
    // resume under nvme: the state goes into a new swap file; the end equals the uninterrupted run
    nrun("nvme resume", stop, NULL, "--resume_from_checkpoint last");
    used_nvme("nvme resume");
    same_model(straight, stop, "nvme stop at 6 + resume vs uninterrupted: final weights");
    print_message("stop at 6 + resume with the state on NVMe: final weights identical to the uninterrupted run\n");
    free(straight);
    free(stop);
    free(cstop);
}

static void test_nvme_missing_folder(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    char z[2048], missing[700];
    snprintf(missing, sizeof missing, "%s/no_such_nvme_folder", t5test_tmpdir());
    snprintf(z, sizeof z, "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}, "
             OFF_PARAM KNOBS "}", missing);
    char* out = write_ds("m_nvme", z, NULL);
    const int rc = nrun_rc(out, NULL, NULL);
    if (rc == 0) fail_msg("a missing nvme_path was accepted:\n%s", g_text);
    if (!strstr(g_text, missing) || !strstr(g_text, "No such file or directory"))
        fail_msg("the error does not name the missing folder:\n%s", g_text);
    print_message("missing nvme_path: exit %d, the folder named\n", rc);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvme_matches_cpu),
        cmocka_unit_test(test_nvme_checkpoint_resume),
        cmocka_unit_test(test_nvme_missing_folder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
