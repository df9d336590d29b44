/*
 * test_checkpoint.c: the checkpoint directory protocol and state file of src/train/checkpoint.c, and the
 * SIGINT/SIGTERM path of src/base/signals.c end to end in forked children.
 */
#include "t5test.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/train/checkpoint.h"
#include "../src/base/common.h"
#include "../src/base/signals.h"

#define NOPT 1000

// the state a fake trainer keeps, derived from the step so every checkpoint is distinguishable
typedef struct {
    float opt[NOPT];
    double scale;
    int64_t sched_step;
    int64_t data_pos[2];
    uint64_t rng;
} FakeState;

static void fake_state(FakeState* s, int64_t step) {
    for (int i = 0; i < NOPT; i++) s->opt[i] = (float)step + 0.5f * (float)i;
    s->scale = 65536.0 / (double)(1 + step % 3);
    s->sched_step = step - 1;
    s->data_pos[0] = step / 7;
    s->data_pos[1] = step % 7;
    s->rng = 0x9E3779B97F4A7C15ull * (uint64_t)(step + 1);
}

static char* new_outdir(const char* name) {
    char* d = t5_path_join(t5test_tmpdir(), name);
    checkpoint_remove_tree(d);
    assert_int_equal(t5_mkdir_p(d), 0);
    return d;
}

static void write_state_file(const char* dir, int64_t step, int rank, int world) {
    char err[512] = "";
    FakeState s;
    fake_state(&s, step + rank);
    CheckpointStateWriter* w = checkpoint_state_create(dir, step, rank, world, err, sizeof err);
    if (!w) fail_msg("%s", err);
    // optimizer streamed in 3 chunks, the rest in one piece
    assert_int_equal(checkpoint_state_blob_begin(w, CKPT_TAG_OPTIMIZER, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_blob_write(w, s.opt, 100 * sizeof(float), err, sizeof err), 0);
    assert_int_equal(checkpoint_state_blob_write(w, s.opt + 100, 0, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_blob_write(w, s.opt + 100, (NOPT - 100) * sizeof(float), err, sizeof err), 0);
    assert_int_equal(checkpoint_state_blob_end(w, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_add(w, CKPT_TAG_SCALER, &s.scale, sizeof s.scale, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_add(w, CKPT_TAG_SCHEDULER, &s.sched_step, sizeof s.sched_step, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_add(w, CKPT_TAG_DATA, s.data_pos, sizeof s.data_pos, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_add(w, CKPT_TAG_RNG, &s.rng, sizeof s.rng, err, sizeof err), 0);
    if (checkpoint_state_finish(w, err, sizeof err)) fail_msg("%s", err);
}

// a minimal valid model.safetensors (one F32 tensor of 2 values); truncated: 4 bytes of data missing
static void write_tiny_safetensors(const char* path, bool truncated) {
    const char* json = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    char hdr[128];
    size_t hl = (strlen(json) + 7) / 8 * 8;
    memset(hdr, ' ', sizeof hdr);
    memcpy(hdr, json, strlen(json));
    uint64_t hl64 = hl;
    float data[2] = {1.0f, 2.0f};
    FILE* f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(&hl64, 8, 1, f);
    fwrite(hdr, 1, hl, f);
    fwrite(data, sizeof(float), truncated ? 1 : 2, f);
    fclose(f);
}

// a whole checkpoint through the protocol (world_size 1)
static void save_checkpoint(const char* out, int64_t step) {
    char err[512] = "";
    CheckpointWriter w;
    if (checkpoint_begin(&w, out, step, 1, 0, err, sizeof err)) fail_msg("%s", err);
    char* weights = t5_path_join(w.tmp_dir, "model.safetensors");
    write_tiny_safetensors(weights, false);
    free(weights);
    write_state_file(w.tmp_dir, step, 0, 1);
    if (checkpoint_commit(&w, err, sizeof err)) fail_msg("%s", err);
    checkpoint_writer_free(&w);
}

static char* state_path(const char* out, int64_t step) {
    char* d = checkpoint_dir_path(out, step);
    char* p = t5_path_join(d, "t5train_state.bin");
    free(d);
    return p;
}

// a memstream for reports
typedef struct {
    char* buf;
    size_t len;
    FILE* f;
} Report;
static void report_open(Report* r) { r->f = open_memstream(&r->buf, &r->len); }
static void report_close(Report* r) { fclose(r->f); }

static void check_state_matches(const char* dir, int64_t step) {
    char* p = t5_path_join(dir, "t5train_state.bin");
    char err[512] = "";
    CheckpointState st;
    if (checkpoint_state_open(&st, p, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(st.step, step);
    assert_int_equal(st.nblobs, 5);
    FakeState want, got;
    fake_state(&want, step);
    memset(&got, 0, sizeof got);
    assert_int_equal(checkpoint_state_read(&st, CKPT_TAG_OPTIMIZER, got.opt, sizeof got.opt, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_read(&st, CKPT_TAG_SCALER, &got.scale, sizeof got.scale, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_read(&st, CKPT_TAG_SCHEDULER, &got.sched_step, 8, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_read(&st, CKPT_TAG_DATA, got.data_pos, 16, err, sizeof err), 0);
    assert_int_equal(checkpoint_state_read(&st, CKPT_TAG_RNG, &got.rng, 8, err, sizeof err), 0);
    assert_memory_equal(&got, &want, sizeof got);
    checkpoint_state_close(&st);
    free(p);
}

// ---------------------------------------------------------------------------------------------

static void test_crc32c(void** state) {
    (void)state;
    assert_int_equal(checkpoint_crc32c(0, "123456789", 9), 0xE3069283u);  // the CRC32C check value
    assert_int_equal(checkpoint_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(checkpoint_crc32c(0, "", 0), 0);
    unsigned char buf[1031];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 97)
            assert_int_equal(checkpoint_crc32c(0, buf + off, n), checkpoint_crc32c_sw(0, buf + off, n));
    uint32_t a = checkpoint_crc32c(0, buf, 500);
    assert_int_equal(checkpoint_crc32c(a, buf + 500, 531), checkpoint_crc32c(0, buf, 1031));
}

static void test_names(void** state) {
    (void)state;
    assert_int_equal(checkpoint_parse_name("checkpoint-500"), 500);
    assert_int_equal(checkpoint_parse_name("checkpoint-0"), 0);
    assert_int_equal(checkpoint_parse_name("checkpoint-500.tmp-77"), -1);
    assert_int_equal(checkpoint_parse_name("checkpoint-"), -1);
    assert_int_equal(checkpoint_parse_name("checkpoint-12a"), -1);
    assert_int_equal(checkpoint_parse_name("ckpt-1"), -1);
    char b[64];
    checkpoint_state_filename(b, sizeof b, 0, 1);
    assert_string_equal(b, "t5train_state.bin");
    checkpoint_state_filename(b, sizeof b, 3, 8);
    assert_string_equal(b, "t5train_state_r00003.bin");
    char* p = checkpoint_dir_path("out", 120);
    assert_string_equal(p, "out/checkpoint-120");
    free(p);
}

static void test_blobs_round_trip(void** state) {
    (void)state;
    char* out = new_outdir("roundtrip");
    save_checkpoint(out, 120);
    char* dir = checkpoint_dir_path(out, 120);
    check_state_matches(dir, 120);
    char* f = t5_path_join(dir, "model.safetensors");
    assert_true(t5_is_file(f));
    free(f);
    f = t5_path_join(dir, CHECKPOINT_MARKER);
    char* marker = t5_read_file(f, NULL);
    assert_string_equal(marker, "t5train checkpoint\nstep 120\nworld_size 1\n");
    free(marker);
    free(f);
    // nothing but checkpoint-120 in output_dir
    DIR* d = opendir(out);
    struct dirent* e;
    int n = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            assert_string_equal(e->d_name, "checkpoint-120");
            n++;
        }
    closedir(d);
    assert_int_equal(n, 1);
    // wrong size and missing tag: errors naming the file
    char err[512] = "";
    char* sp = state_path(out, 120);
    CheckpointState st;
    assert_int_equal(checkpoint_state_open(&st, sp, err, sizeof err), 0);
    float small[10];
    assert_int_equal(checkpoint_state_read(&st, CKPT_TAG_OPTIMIZER, small, sizeof small, err, sizeof err), -1);
    assert_contains(err, "t5train_state.bin: 'optimizer' state has 4000 bytes, this run expects 40");
    assert_int_equal(checkpoint_state_read(&st, "ema", small, sizeof small, err, sizeof err), -1);
    assert_contains(err, "t5train_state.bin: no 'ema' state in this checkpoint");
    checkpoint_state_close(&st);
    // a re-save of the same step replaces it (new content, no .old- left)
    CheckpointWriter w;
    assert_int_equal(checkpoint_begin(&w, out, 120, 1, 4242, err, sizeof err), 0);
    assert_non_null(strstr(w.tmp_dir, "checkpoint-120.tmp-4242"));
    write_state_file(w.tmp_dir, 120, 0, 1);
    assert_int_equal(checkpoint_commit(&w, err, sizeof err), 0);
    checkpoint_writer_free(&w);
    f = t5_path_join(dir, "model.safetensors");
    assert_false(t5_path_exists(f));  // the old directory's file is gone with it
    free(f);
    int64_t step = -1;
    assert_int_equal(checkpoint_validate(dir, true, &step, err, sizeof err), 0);
    assert_int_equal(step, 120);
    d = opendir(out);
    n = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    assert_int_equal(n, 1);
    free(sp);
    free(dir);
    free(out);
}

// output_dir with checkpoints 100 and 200 complete, 250 without marker, a tmp dir for 300
static char* messy_outdir(const char* name) {
    char* out = new_outdir(name);
    save_checkpoint(out, 100);
    save_checkpoint(out, 200);
    save_checkpoint(out, 250);
    char* d = checkpoint_dir_path(out, 250);
    char* m = t5_path_join(d, CHECKPOINT_MARKER);
    assert_int_equal(unlink(m), 0);
    free(m);
    free(d);
    char err[512];
    CheckpointWriter w;
    assert_int_equal(checkpoint_begin(&w, out, 300, 1, 999, err, sizeof err), 0);
    write_state_file(w.tmp_dir, 300, 0, 1);  // killed before commit
    checkpoint_writer_free(&w);
    return out;
}

static void test_find_latest_skips_incomplete(void** state) {
    (void)state;
    char* out = messy_outdir("find");
    Report r;
    report_open(&r);
    char* latest = checkpoint_find_latest(out, true, r.f);
    report_close(&r);
    assert_non_null(latest);
    assert_non_null(strstr(latest, "/checkpoint-200"));
    assert_contains(r.buf, "checkpoint-300.tmp-999: temporary directory of a save that did not finish");
    assert_contains(r.buf, "checkpoint-250: no completion marker t5train_done (the save did not finish)");
    assert_contains(r.buf, "using the previous complete checkpoint");
    free(r.buf);
    free(latest);
    // "last" resolves the same way; an empty output_dir is a clear error
    char err[512] = "";
    char* p = checkpoint_resolve_resume("last", out, NULL, err, sizeof err);
    assert_non_null(strstr(p, "/checkpoint-200"));
    free(p);
    char* empty = new_outdir("empty");
    assert_null(checkpoint_resolve_resume("last", empty, NULL, err, sizeof err));
    assert_contains(err, "--resume_from_checkpoint last: no complete checkpoint in ");
    // an explicit directory must be complete
    char* d250 = checkpoint_dir_path(out, 250);
    assert_null(checkpoint_resolve_resume(d250, out, NULL, err, sizeof err));
    assert_contains(err, "checkpoint-250: no completion marker");
    assert_null(checkpoint_resolve_resume("/nonexistent/checkpoint-5", out, NULL, err, sizeof err));
    assert_contains(err, "/nonexistent/checkpoint-5: no such directory");
    char* d100 = checkpoint_dir_path(out, 100);
    p = checkpoint_resolve_resume(d100, out, NULL, err, sizeof err);
    assert_string_equal(p, d100);
    free(p);
    // stale temporary directories can be cleaned at start
    assert_int_equal(checkpoint_remove_stale(out, NULL), 1);
    char* tmp = t5_path_join(out, "checkpoint-300.tmp-999");
    assert_false(t5_path_exists(tmp));
    free(tmp);
    free(d100);
    free(d250);
    free(empty);
    free(out);
}

// a complete checkpoint of `step` under the name `name` in out, with a file "which" holding `tag` (to tell
// an old save from a new one of the same step)
static void complete_as(const char* out, const char* name, int64_t step, const char* tag) {
    char* scratch = new_outdir("scratch_complete");
    save_checkpoint(scratch, step);
    char* src = checkpoint_dir_path(scratch, step);
    char* which = t5_path_join(src, "which");
    t5test_write_file(which, tag);
    char* dst = t5_path_join(out, name);
    assert_int_equal(rename(src, dst), 0);
    free(which);
    free(dst);
    free(src);
    checkpoint_remove_tree(scratch);
    free(scratch);
}

static void assert_which(const char* dir, const char* tag) {
    char* which = t5_path_join(dir, "which");
    char* text = t5_read_file(which, NULL);
    if (!text) fail_msg("%s has no 'which' file", dir);
    assert_string_equal(text, tag);
    free(text);
    free(which);
}

// entries of out other than "." and ".."
static int count_entries(const char* out) {
    DIR* d = opendir(out);
    assert_non_null(d);
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

// issue 14: a complete checkpoint is never removed before its replacement is complete, whatever moment a
// re-save of the same step (resume, then a save at that step) was interrupted at
static void test_resave_never_loses(void** state) {
    (void)state;
    char err[512] = "";
    int64_t step = -1;
    // 1. the old protocol's window (the report): the complete checkpoint-7 was moved to .old-<pid>,
    //    the new one renamed in, killed before its marker. Stale cleanup used to delete the .old- one.
    char* out = new_outdir("resave1");
    complete_as(out, "checkpoint-7.old-123", 7, "old");
    complete_as(out, "checkpoint-7", 7, "new");
    char* d7 = checkpoint_dir_path(out, 7);
    char* m = t5_path_join(d7, CHECKPOINT_MARKER);
    assert_int_equal(unlink(m), 0);  // the new one has no marker: incomplete
    free(m);
    // resume resolution (the preflight runs it before any cleanup) already finds the complete leftover
    char* latest = checkpoint_find_latest(out, true, NULL);
    assert_non_null(latest);
    assert_non_null(strstr(latest, "checkpoint-7.old-123"));
    free(latest);
    assert_int_equal(checkpoint_remove_stale(out, NULL), 1);
    assert_int_equal(checkpoint_validate(d7, true, &step, err, sizeof err), 0);
    assert_int_equal(step, 7);
    assert_which(d7, "old");
    assert_int_equal(count_entries(out), 1);
    free(d7);
    free(out);

    // 2. the fallback without RENAME_EXCHANGE, killed between its renames: checkpoint-7 missing, the old
    //    one aside, the new one complete under its temporary name: the new one is put back
    out = new_outdir("resave2");
    complete_as(out, "checkpoint-7.old-6", 7, "old");
    complete_as(out, "checkpoint-7.tmp-5", 7, "new");
    latest = checkpoint_find_latest(out, true, NULL);
    assert_non_null(strstr(latest, "checkpoint-7.tmp-5"));
    free(latest);
    assert_int_equal(checkpoint_remove_stale(out, NULL), 2);  // one restored, one removed
    d7 = checkpoint_dir_path(out, 7);
    assert_int_equal(checkpoint_validate(d7, true, NULL, err, sizeof err), 0);
    assert_which(d7, "new");
    assert_int_equal(count_entries(out), 1);
    free(d7);
    free(out);

    // 3. killed after the new one got its marker, before the swap: checkpoint-7 (complete) stays as it is
    out = new_outdir("resave3");
    complete_as(out, "checkpoint-7", 7, "old");
    complete_as(out, "checkpoint-7.tmp-5", 7, "new");
    assert_int_equal(checkpoint_remove_stale(out, NULL), 1);
    d7 = checkpoint_dir_path(out, 7);
    assert_int_equal(checkpoint_validate(d7, true, NULL, err, sizeof err), 0);
    assert_which(d7, "old");
    assert_int_equal(count_entries(out), 1);
    free(d7);
    free(out);

    // 4. a leftover whose marker names another step, or a corrupt one, is not put back
    out = new_outdir("resave4");
    complete_as(out, "checkpoint-8.old-1", 7, "wrong step");
    complete_as(out, "checkpoint-9.tmp-1", 9, "corrupt");
    char* sp = t5_path_join(out, "checkpoint-9.tmp-1/t5train_state.bin");
    FILE* f = fopen(sp, "r+b");
    assert_non_null(f);
    fseek(f, 2000, SEEK_SET);
    fputc(0x5A, f);  // one byte of the optimizer blob: its CRC no longer matches
    fclose(f);
    free(sp);
    assert_null(checkpoint_find_latest(out, true, NULL));
    assert_int_equal(checkpoint_remove_stale(out, NULL), 2);
    assert_int_equal(count_entries(out), 0);
    free(out);

    // 5. re-saves through checkpoint_commit: the new content replaces the old, nothing left beside it, and
    //    save_total_limit rotation never counts or touches a leftover
    out = new_outdir("resave5");
    for (int round = 0; round < 3; round++) {
        CheckpointWriter w;
        assert_int_equal(checkpoint_begin(&w, out, 7, 1, 100 + round, err, sizeof err), 0);
        write_state_file(w.tmp_dir, 7, 0, 1);
        char* which = t5_path_join(w.tmp_dir, "which");
        char tag[16];
        snprintf(tag, sizeof tag, "round %d", round);
        t5test_write_file(which, tag);
        free(which);
        assert_int_equal(checkpoint_commit(&w, err, sizeof err), 0);
        checkpoint_writer_free(&w);
        d7 = checkpoint_dir_path(out, 7);
        assert_int_equal(checkpoint_validate(d7, true, NULL, err, sizeof err), 0);
        assert_which(d7, tag);
        assert_int_equal(count_entries(out), 1);
        free(d7);
    }
    complete_as(out, "checkpoint-3.old-9", 3, "aside");
    assert_int_equal(checkpoint_rotate(out, 1, 7, -1, NULL, err, sizeof err), 0);
    assert_int_equal(count_entries(out), 2);
    free(out);
}

static void test_truncated_state_skipped(void** state) {
    (void)state;
    char* out = messy_outdir("trunc");
    save_checkpoint(out, 400);
    char* sp = state_path(out, 400);
    struct stat st;
    assert_int_equal(stat(sp, &st), 0);
    assert_int_equal(truncate(sp, st.st_size - 100), 0);  // the disk filled up mid-write
    Report r;
    report_open(&r);
    char* latest = checkpoint_find_latest(out, false, r.f);  // caught even without checksums
    report_close(&r);
    assert_non_null(strstr(latest, "/checkpoint-200"));
    assert_contains(r.buf, "t5train_state.bin: truncated or padded: the header says");
    free(r.buf);
    free(latest);
    // shorter than the header
    assert_int_equal(truncate(sp, 100), 0);
    char err[512];
    CheckpointState cs;
    assert_int_equal(checkpoint_state_open(&cs, sp, err, sizeof err), -1);
    assert_contains(err, "truncated: 100 bytes, smaller than the 1024-byte header");
    free(sp);
    free(out);
}

// a checkpoint whose state file is fine but whose model.safetensors is damaged is skipped too
static void test_corrupt_weights_skipped(void** state) {
    (void)state;
    char* out = new_outdir("badweights");
    save_checkpoint(out, 100);
    save_checkpoint(out, 200);
    // checkpoint-200's weights lose their last 4 bytes (its state file stays valid)
    char* w200 = t5_path_join(out, "checkpoint-200/model.safetensors");
    write_tiny_safetensors(w200, true);
    free(w200);
    Report r;
    report_open(&r);
    char* latest = checkpoint_find_latest(out, false, r.f);
    report_close(&r);
    assert_non_null(latest);
    assert_non_null(strstr(latest, "/checkpoint-100"));
    assert_contains(r.buf, "checkpoint-200");
    assert_contains(r.buf, "model.safetensors");
    free(r.buf);
    free(latest);
    free(out);
}

static void test_corruption_detected(void** state) {
    (void)state;
    char* out = new_outdir("corrupt");
    save_checkpoint(out, 100);
    save_checkpoint(out, 200);
    char* sp = state_path(out, 200);
    // flip one byte inside the optimizer blob (after the header and its record)
    FILE* f = fopen(sp, "r+b");
    assert_non_null(f);
    fseek(f, 1024 + 64 + 1234, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 1024 + 64 + 1234, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    Report r;
    report_open(&r);
    char* latest = checkpoint_find_latest(out, true, r.f);
    report_close(&r);
    assert_non_null(strstr(latest, "/checkpoint-100"));
    assert_contains(r.buf, "checksum mismatch in 'optimizer' state");
    free(r.buf);
    free(latest);
    // a shallow scan accepts it, but reading the blob catches it
    latest = checkpoint_find_latest(out, false, NULL);
    assert_non_null(strstr(latest, "/checkpoint-200"));
    free(latest);
    char err[512];
    CheckpointState cs;
    assert_int_equal(checkpoint_state_open(&cs, sp, err, sizeof err), 0);
    float opt[NOPT];
    assert_int_equal(checkpoint_state_read(&cs, CKPT_TAG_OPTIMIZER, opt, sizeof opt, err, sizeof err), -1);
    assert_contains(err, "checksum mismatch in 'optimizer' state");
    double scale;
    assert_int_equal(checkpoint_state_read(&cs, CKPT_TAG_SCALER, &scale, sizeof scale, err, sizeof err), 0);
    checkpoint_state_close(&cs);

    // header: wrong magic, newer version (with a valid header checksum), damaged header
    int32_t h[256];
    f = fopen(sp, "r+b");
    assert_int_equal(fread(h, sizeof h, 1, f), 1);
    int32_t good[256];
    memcpy(good, h, sizeof h);
    h[1] = 2;
    h[255] = (int32_t)checkpoint_crc32c(0, h, 255 * 4);
    fseek(f, 0, SEEK_SET);
    fwrite(h, sizeof h, 1, f);
    fflush(f);
    assert_int_equal(checkpoint_state_open(&cs, sp, err, sizeof err), -1);
    assert_contains(err, "state file version 2, this t5train reads version 1");
    h[1] = 1;
    h[7] = 12345;  // step, without fixing the checksum
    fseek(f, 0, SEEK_SET);
    fwrite(h, sizeof h, 1, f);
    fflush(f);
    assert_int_equal(checkpoint_state_open(&cs, sp, err, sizeof err), -1);
    assert_contains(err, "header checksum mismatch");
    h[0] = 0x12345678;
    fseek(f, 0, SEEK_SET);
    fwrite(h, sizeof h, 1, f);
    fclose(f);
    assert_int_equal(checkpoint_state_open(&cs, sp, err, sizeof err), -1);
    assert_contains(err, "not a t5train state file (magic 0x12345678, expected 0x54355354)");
    free(sp);
    free(out);
}

static void test_rotate(void** state) {
    (void)state;
    char* out = new_outdir("rotate");
    for (int s = 100; s <= 500; s += 100) save_checkpoint(out, s);
    char err[512] = "";
    CheckpointWriter w;  // an incomplete one is neither counted nor deleted
    assert_int_equal(checkpoint_begin(&w, out, 600, 1, 1, err, sizeof err), 0);
    checkpoint_writer_free(&w);
    Report r;
    report_open(&r);
    assert_int_equal(checkpoint_rotate(out, 2, 500, 100, r.f, err, sizeof err), 3);  // best_step 100 kept
    report_close(&r);
    char* d;
    int64_t keep[] = {100, 500}, gone[] = {200, 300, 400};
    for (int i = 0; i < 2; i++) {
        d = checkpoint_dir_path(out, keep[i]);
        assert_int_equal(checkpoint_validate(d, true, NULL, err, sizeof err), 0);
        free(d);
    }
    for (int i = 0; i < 3; i++) {
        d = checkpoint_dir_path(out, gone[i]);
        assert_false(t5_path_exists(d));
        free(d);
    }
    assert_contains(r.buf, "Deleting older checkpoint [");
    assert_contains(r.buf, "checkpoint-200] due to args.save_total_limit");
    free(r.buf);
    char* tmp = t5_path_join(out, "checkpoint-600.tmp-1");
    assert_true(t5_is_dir(tmp));
    free(tmp);
    // without a best checkpoint: limit 1 keeps only the one just written
    save_checkpoint(out, 700);
    assert_int_equal(checkpoint_rotate(out, 1, 700, -1, NULL, err, sizeof err), 2);
    char* latest = checkpoint_find_latest(out, true, NULL);
    assert_non_null(strstr(latest, "/checkpoint-700"));
    free(latest);
    d = checkpoint_dir_path(out, 500);
    assert_false(t5_path_exists(d));
    free(d);
    assert_int_equal(checkpoint_rotate(out, 0, 700, -1, NULL, err, sizeof err), 0);  // 0: keep all
    // a checkpoint a background push still reads (src/train/trainer_push.h) is spared as the best one is: limit 1
    // keeps it beside the one just written; once the push ended, the next rotation deletes it
    save_checkpoint(out, 750);
    assert_int_equal(checkpoint_rotate_sparing(out, 1, 750, -1, 700, NULL, err, sizeof err), 0);
    d = checkpoint_dir_path(out, 700);
    assert_true(t5_is_dir(d));
    assert_int_equal(checkpoint_rotate_sparing(out, 1, 750, -1, -1, NULL, err, sizeof err), 1);
    assert_false(t5_path_exists(d));
    free(d);
    // HF's end of training with save_total_limit 1 and a best checkpoint: only the best one stays (the temporary
    // directory of an interrupted save is not a checkpoint and is left alone)
    save_checkpoint(out, 800);
    save_checkpoint(out, 900);
    report_open(&r);
    assert_int_equal(checkpoint_keep_only(out, 800, r.f, err, sizeof err), 2);  // 700 and the newest, 900, go
    report_close(&r);
    assert_contains(r.buf, "checkpoint-900] due to args.save_total_limit");
    free(r.buf);
    latest = checkpoint_find_latest(out, true, NULL);
    assert_non_null(latest);
    assert_non_null(strstr(latest, "/checkpoint-800"));
    free(latest);
    tmp = t5_path_join(out, "checkpoint-600.tmp-1");
    assert_true(t5_is_dir(tmp));
    free(tmp);
    free(out);
}

static void test_multi_rank_checkpoint(void** state) {
    (void)state;
    char* out = new_outdir("ranks");
    char err[512] = "";
    CheckpointWriter w;
    assert_int_equal(checkpoint_begin(&w, out, 50, 2, 31337, err, sizeof err), 0);
    write_state_file(w.tmp_dir, 50, 0, 2);
    write_state_file(w.tmp_dir, 50, 1, 2);
    assert_int_equal(checkpoint_commit(&w, err, sizeof err), 0);
    int64_t step;
    assert_int_equal(checkpoint_validate(w.final_dir, true, &step, err, sizeof err), 0);
    assert_int_equal(step, 50);
    char* r1 = t5_path_join(w.final_dir, "t5train_state_r00001.bin");
    assert_int_equal(unlink(r1), 0);
    assert_int_equal(checkpoint_validate(w.final_dir, true, &step, err, sizeof err), -1);
    assert_contains(err, "cannot open ");
    assert_contains(err, "t5train_state_r00001.bin");
    // a rank's file from another step is refused
    char* r0 = t5_path_join(w.final_dir, "t5train_state_r00000.bin");
    unlink(r0);
    write_state_file(w.final_dir, 49, 0, 2);
    write_state_file(w.final_dir, 50, 1, 2);
    assert_int_equal(checkpoint_validate(w.final_dir, true, &step, err, sizeof err), -1);
    assert_contains(err, "holds step 49 rank 0 of 2, expected step 50 rank 0 of 2");
    free(r0);
    free(r1);
    checkpoint_writer_free(&w);
    free(out);
}

// ---------------------------------------------------------------------------------------------
// signals end to end: a child "trains" (20 ms steps), the parent sends a signal mid-run

static void test_stop_message(void** state) {
    (void)state;
    char b[256];
    signals_format_stop_message(b, sizeof b, SIGINT, 120);
    assert_string_equal(b, "received SIGINT: finishing step 120, saving checkpoint-120, then exiting");
    signals_format_stop_message(b, sizeof b, SIGTERM, 7);
    assert_string_equal(b, "received SIGTERM: finishing step 7, saving checkpoint-7, then exiting");
}

// the fake trainer loop run by the child; never returns
static void child_train(const char* out, int ready_fd, const char* log) {
    FILE* lf = fopen(log, "w");
    if (!lf) _exit(3);
    dup2(fileno(lf), STDOUT_FILENO);
    dup2(fileno(lf), STDERR_FILENO);
    signals_install();
    for (int64_t step = 1; step <= 100000; step++) {
        // one "step": work that a signal must not cut short
        struct timespec ts = {0, 20 * 1000 * 1000};
        while (nanosleep(&ts, &ts) != 0) {
        }
        if (step == 3) {
            char c = 'r';
            if (write(ready_fd, &c, 1) != 1) _exit(4);
        }
        if (signals_stop_requested()) {
            char msg[256];
            signals_format_stop_message(msg, sizeof msg, signals_stop_signal(), step);
            printf("%s\n", msg);
            fflush(stdout);
            char err[512];
            CheckpointWriter w;
            if (checkpoint_begin(&w, out, step, 1, 0, err, sizeof err)) _exit(5);
            FakeState s;
            fake_state(&s, step);
            CheckpointStateWriter* sw = checkpoint_state_create(w.tmp_dir, step, 0, 1, err, sizeof err);
            if (!sw || checkpoint_state_add(sw, CKPT_TAG_OPTIMIZER, s.opt, sizeof s.opt, err, sizeof err) ||
                checkpoint_state_add(sw, CKPT_TAG_SCALER, &s.scale, sizeof s.scale, err, sizeof err) ||
                checkpoint_state_add(sw, CKPT_TAG_SCHEDULER, &s.sched_step, 8, err, sizeof err) ||
                checkpoint_state_add(sw, CKPT_TAG_DATA, s.data_pos, 16, err, sizeof err) ||
                checkpoint_state_add(sw, CKPT_TAG_RNG, &s.rng, 8, err, sizeof err) ||
                checkpoint_state_finish(sw, err, sizeof err) || checkpoint_commit(&w, err, sizeof err)) {
                fprintf(stderr, "save failed: %s\n", err);
                _exit(6);
            }
            printf("saved checkpoint-%lld\n", (long long)step);
            fflush(stdout);
            _exit(0);
        }
    }
    _exit(7);  // never signalled
}

static pid_t start_child(const char* out, const char* log, int* ready_rd) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        child_train(out, p[1], log);
    }
    close(p[1]);
    *ready_rd = p[0];
    char c;
    assert_int_equal(read(p[0], &c, 1), 1);  // the child is mid-run
    return pid;
}

// outside the training loop (issue 14 item 5): a SIGINT/SIGTERM stops the process at once, removes the
// temporary files still registered and nothing else; the trainer's flag handler takes over during the loop
// and gives the immediate one back after
static void test_immediate_stop_removes_tmp(void** state) {
    (void)state;
    char* dir = new_outdir("immediate");
    char* a = t5_path_join(dir, "model.safetensors.tmp.1");
    char* b = t5_path_join(dir, "done.json.tmp.1");
    char* c = t5_path_join(dir, "model.safetensors");
    static const int SIGS[2] = {SIGTERM, SIGINT};
    for (int k = 0; k < 2; k++) {
        t5test_write_file(c, "saved before");
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, STDERR_FILENO);
            signals_install_immediate();
            t5test_write_file(a, "half written");
            signals_track_tmp(a);
            t5test_write_file(b, "renamed in a moment");
            signals_track_tmp(b);
            signals_untrack_tmp(b);  // as after its rename: no longer ours to remove
            // the training loop: the flag handler; a signal there only asks to stop
            signals_install();
            raise(SIGS[k]);
            if (!signals_stop_requested()) _exit(3);
            signals_uninstall();  // the immediate handler is back
            raise(SIGS[k]);
            _exit(4);  // not reached
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 128 + SIGS[k]);
        assert_false(t5_path_exists(a));
        assert_true(t5_path_exists(b));
        char* text = t5_read_file(c, NULL);
        assert_string_equal(text, "saved before");
        free(text);
        unlink(b);
    }
    free(a);
    free(b);
    free(c);
    free(dir);
}

static void test_sigterm_saves_and_exits_0(void** state) {
    (void)state;
    char* out = new_outdir("sigterm");
    char* log = t5_path_join(t5test_tmpdir(), "sigterm.log");
    int rd;
    pid_t pid = start_child(out, log, &rd);
    assert_int_equal(kill(pid, SIGTERM), 0);
    kill(pid, SIGTERM);  // repeated SIGTERM: ignored, the save goes on
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(rd);
    char* text = t5_read_file(log, NULL);
    assert_non_null(text);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child status %d, output:\n%s", status, text);
    assert_contains(text, "t5train: received SIGTERM: stopping after the current step and saving a checkpoint");
    assert_contains(text, "received SIGTERM: finishing step ");
    char* latest = checkpoint_find_latest(out, true, NULL);
    assert_non_null(latest);
    int64_t step = checkpoint_parse_name(strrchr(latest, '/') + 1);
    assert_true(step >= 3);
    char want[128];
    snprintf(want, sizeof want, "finishing step %lld, saving checkpoint-%lld, then exiting\nsaved checkpoint-%lld",
             (long long)step, (long long)step, (long long)step);
    assert_contains(text, want);
    check_state_matches(latest, step);
    free(latest);
    free(text);
    free(log);
    free(out);
}

static void test_sigint_once_saves_twice_exits(void** state) {
    (void)state;
    // once: same clean path as SIGTERM
    char* out = new_outdir("sigint1");
    char* log = t5_path_join(t5test_tmpdir(), "sigint1.log");
    int rd, status;
    pid_t pid = start_child(out, log, &rd);
    kill(pid, SIGINT);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(rd);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char* text = t5_read_file(log, NULL);
    assert_contains(text, "press Ctrl-C again to exit at once without saving");
    assert_contains(text, "received SIGINT: finishing step ");
    free(text);
    char* latest = checkpoint_find_latest(out, true, NULL);
    assert_non_null(latest);
    free(latest);
    free(log);
    free(out);

    // twice: the child is blocked inside a long step; the second Ctrl-C exits at once (130), no checkpoint
    out = new_outdir("sigint2");
    log = t5_path_join(t5test_tmpdir(), "sigint2.log");
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        close(p[0]);
        FILE* lf = fopen(log, "w");
        dup2(fileno(lf), STDERR_FILENO);
        signals_install();
        char c = 'r';
        if (write(p[1], &c, 1) != 1) _exit(4);
        for (;;) pause();  // a step that never ends
    }
    close(p[1]);
    char c;
    assert_int_equal(read(p[0], &c, 1), 1);
    close(p[0]);
    kill(pid, SIGINT);
    usleep(50 * 1000);
    kill(pid, SIGINT);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    text = t5_read_file(log, NULL);
    assert_contains(text, "t5train: received SIGINT again: exiting now without saving a checkpoint");
    free(text);
    assert_null(checkpoint_find_latest(out, true, NULL));
    free(log);
    free(out);
}

static void test_signal_flag_in_process(void** state) {
    (void)state;
    signals_install();
    assert_false(signals_stop_requested());
    raise(SIGTERM);
    assert_true(signals_stop_requested());
    assert_int_equal(signals_stop_signal(), SIGTERM);
    signals_install();  // re-arming clears the flag
    assert_false(signals_stop_requested());
    signals_request_stop(SIGINT);  // another rank was signalled
    assert_int_equal(signals_stop_signal(), SIGINT);
    signals_uninstall();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_blobs_round_trip),
        cmocka_unit_test(test_find_latest_skips_incomplete),
        cmocka_unit_test(test_resave_never_loses),
        cmocka_unit_test(test_truncated_state_skipped),
        cmocka_unit_test(test_corruption_detected),
        cmocka_unit_test(test_corrupt_weights_skipped),
        cmocka_unit_test(test_rotate),
        cmocka_unit_test(test_multi_rank_checkpoint),
        cmocka_unit_test(test_stop_message),
        cmocka_unit_test(test_signal_flag_in_process),
        cmocka_unit_test(test_immediate_stop_removes_tmp),
        cmocka_unit_test(test_sigterm_saves_and_exits_0),
        cmocka_unit_test(test_sigint_once_saves_twice_exits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
