/*
 * test_nvme_io.c: the NVMe offload's I/O layer (src/nvme/) on a temporary folder: O_DIRECT alignment, round trips
 * of odd sizes through the swap pool under every pipeline / submission setting, many requests in flight, short
 * completions continued and a file shorter than expected refused, ENOSPC / the file size limit (RLIMIT_FSIZE in a
 * child) and the free-space check, a missing folder, a filesystem refusing O_DIRECT (a hook; /dev/shm for real
 * when it refuses), DeepSpeed's CPU AdamW stepping m, v through the swap file bit-identical to host memory, and
 * t5train --dry_run checking nvme_path.
 */
#include "t5test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/base/common.h"
#include "../src/nvme/aio.h"
#include "../src/nvme/swap.h"
#include "../src/zero/cpu_adam.h"

static const char* dir_ok(void) {
    static char d[512];
    if (!d[0]) snprintf(d, sizeof d, "%s", t5test_tmpdir());
    return d;
}

static uint8_t pat(int r, size_t i, int gen) { return (uint8_t)(r * 131 + i * 7 + (i >> 12) * 13 + gen * 29 + 1); }

static NvmeSwapConfig swap_cfg(int bufs, bool pr, bool pw) {
    NvmeSwapConfig c = {.io = nvme_io_config_default(), .buffer_count = bufs, .pipeline_read = pr, .pipeline_write = pw};
    c.io.block_size = 8192;  // several requests per region
    c.io.queue_depth = 4;
    return c;
}

static void test_alignment(void** state) {
    (void)state;
    for (size_t n = 1; n < 20000; n += 4999) {
        void* p = nvme_alloc(n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % NVME_ALIGN, 0);
        free(p);
    }
    assert_int_equal(nvme_align_up(0), 0);
    assert_int_equal(nvme_align_up(1), NVME_ALIGN);
    assert_int_equal(nvme_align_up(NVME_ALIGN), NVME_ALIGN);
    NvmeIoConfig c = nvme_io_config_default();
    assert_int_equal(c.block_size, 1048576);  // DeepSpeed 0.19.8's aio defaults
    assert_int_equal(c.queue_depth, 8);
    assert_int_equal(c.threads, 1);
    assert_false(c.single_submit);
    assert_true(c.overlap_events);
    NvmeIo* io;
    char err[512];
    c.block_size = 5000;  // not a multiple of the O_DIRECT alignment
    assert_int_equal(nvme_io_create(&io, &c, err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, "aio.block_size 5000"));
    // a region of the swap file starts aligned, whatever the sizes before it
    const size_t rb[3] = {1, 4097, 10};
    uint64_t fb;
    size_t pb;
    nvme_swap_sizes(3, rb, 4, &fb, &pb);
    assert_int_equal(fb, 4096 + 8192 + 4096);
    assert_int_equal(pb, 4 * 8192);
}

// two passes through the pool: the first writes a pattern into fresh (zero) regions, the second checks and rewrites
static void round_trip(NvmeSwapConfig c, int threads) {
    c.io.threads = threads;
    const size_t rb[] = {1, 4095, 4096, 4097, 3 * 8192 + 17, 100000, 12, 65536};
    const int n = (int)(sizeof rb / sizeof rb[0]);
    NvmeSwap* S;
    char err[512];
    int rc = nvme_swap_create(&S, dir_ok(), "rt.swp", n, rb, &c, err, sizeof err);
    if (rc) fail_msg("%s", err);
    int seq[8];
    for (int gen = 0; gen < 3; gen++) {
        for (int k = 0; k < n; k++) seq[k] = (k * 3 + gen) % n;  // another order each pass
        assert_int_equal(nvme_swap_begin(S, seq, n, err, sizeof err), 0);
        for (int k = 0; k < n; k++) {
            void* b;
            assert_int_equal(nvme_swap_acquire(S, k, &b, err, sizeof err), 0);
            const int r = seq[k];
            uint8_t* p = b;
            for (size_t i = 0; i < rb[r]; i++) {
                const uint8_t want = gen == 0 ? 0 : pat(r, i, gen - 1);
                if (p[i] != want) fail_msg("pass %d region %d byte %zu: %u, want %u", gen, r, i, p[i], want);
                p[i] = pat(r, i, gen);
            }
            assert_int_equal(nvme_swap_release(S, k, err, sizeof err), 0);
        }
        assert_int_equal(nvme_swap_end(S, err, sizeof err), 0);
    }
    // range I/O at odd offsets (checkpoints): read, then rewrite a piece and read the region back
    uint8_t buf[100000];
    assert_int_equal(nvme_swap_read_range(S, 5, 4093, 9000, buf, err, sizeof err), 0);
    for (size_t i = 0; i < 9000; i++) assert_int_equal(buf[i], pat(5, 4093 + i, 2));
    for (size_t i = 0; i < 333; i++) buf[i] = (uint8_t)(i ^ 0x5a);
    assert_int_equal(nvme_swap_write_range(S, 5, 8190, 333, buf, err, sizeof err), 0);
    assert_int_equal(nvme_swap_read_range(S, 5, 0, rb[5], buf, err, sizeof err), 0);
    for (size_t i = 0; i < rb[5]; i++)
        assert_int_equal(buf[i], i >= 8190 && i < 8190 + 333 ? (uint8_t)((i - 8190) ^ 0x5a) : pat(5, i, 2));
    assert_int_equal(nvme_swap_read_range(S, 4, 0, rb[4], buf, err, sizeof err), 0);  // its neighbours untouched
    for (size_t i = 0; i < rb[4]; i++) assert_int_equal(buf[i], pat(4, i, 2));
    assert_int_equal(nvme_swap_read_range(S, 6, 0, rb[6], buf, err, sizeof err), 0);
    for (size_t i = 0; i < rb[6]; i++) assert_int_equal(buf[i], pat(6, i, 2));
    assert_true(nvme_swap_pool_bytes(S) == (size_t)c.buffer_count * 102400);
    nvme_swap_destroy(S);
}

static void test_round_trip_settings(void** state) {
    (void)state;
    for (int bufs = 1; bufs <= 4; bufs++)
        for (int p = 0; p < 4; p++) round_trip(swap_cfg(bufs, p & 1, p & 2), 1 + (bufs + p) % 3);
    NvmeSwapConfig c = swap_cfg(3, true, true);
    c.io.single_submit = true;
    round_trip(c, 2);
    c.io.single_submit = false;
    c.io.overlap_events = false;
    round_trip(c, 1);
    c.io.queue_depth = 1;
    round_trip(c, 3);
}

// a file of its own for the raw job tests: created O_DIRECT (and unlinked) under the temporary folder
static int raw_file(const char* name, uint64_t bytes) {
    int fd;
    char err[512];
    if (nvme_file_create(dir_ok(), name, bytes, &fd, err, sizeof err)) fail_msg("%s", err);
    return fd;
}

static void test_many_in_flight(void** state) {
    (void)state;
    const size_t bytes = 4u << 20;
    const int fd = raw_file("many.swp", bytes);
    NvmeIoConfig c = nvme_io_config_default();
    c.block_size = NVME_ALIGN;  // 1024 requests
    c.queue_depth = 64;
    c.threads = 2;
    NvmeIo* io;
    char err[512];
    assert_int_equal(nvme_io_create(&io, &c, err, sizeof err), 0);
    uint8_t* a = nvme_alloc(bytes);
    uint8_t* b = nvme_alloc(bytes);
    for (size_t i = 0; i < bytes; i++) a[i] = pat(9, i, 0);
    NvmeJob jw, jr;
    nvme_io_submit(io, &jw, NVME_WRITE, fd, "many.swp", a, bytes, 0);
    assert_int_equal(nvme_io_wait(io, &jw, err, sizeof err), 0);
    memset(b, 0, bytes);
    nvme_io_submit(io, &jr, NVME_READ, fd, "many.swp", b, bytes, 0);
    assert_int_equal(nvme_io_wait(io, &jr, err, sizeof err), 0);
    assert_memory_equal(a, b, bytes);
    NvmeIoStats st;
    nvme_io_stats(io, &st);
    assert_int_equal(st.bytes_written, bytes);
    assert_int_equal(st.bytes_read, bytes);
    assert_int_equal(st.requests, 2 * bytes / NVME_ALIGN);
    assert_true(st.max_in_flight > 1);  // the queue really is deeper than one
    assert_true(st.max_in_flight <= 64);
    nvme_io_destroy(io);
    free(a);
    free(b);
    close(fd);
}

static void test_short_completions(void** state) {
    (void)state;
    // every third completion reported half done: continued from its last aligned byte, same bytes in the end
    nvme_test_hooks = (NvmeTestHooks){.short_every = 3};
    round_trip(swap_cfg(3, true, true), 2);
    nvme_test_hooks = (NvmeTestHooks){0};
    // a file shorter than the read: refused with its offset, never zeros made up
    const int fd = raw_file("short.swp", 3 * NVME_ALIGN);
    assert_int_equal(ftruncate(fd, NVME_ALIGN + 100), 0);  // shorter than the reader expects
    NvmeIoConfig c = nvme_io_config_default();
    NvmeIo* io;
    char err[512];
    assert_int_equal(nvme_io_create(&io, &c, err, sizeof err), 0);
    void* b = nvme_alloc(3 * NVME_ALIGN);
    NvmeJob j;
    nvme_io_submit(io, &j, NVME_READ, fd, "short.swp", b, 3 * NVME_ALIGN, 0);
    assert_int_equal(nvme_io_wait(io, &j, err, sizeof err), T5_EXIT_FAILURE);
    assert_non_null(strstr(err, "short read at offset"));
    assert_non_null(strstr(err, "shorter than expected"));
    NvmeIoStats st;
    nvme_io_stats(io, &st);
    assert_true(st.short_continued >= 1);  // the first 4096 bytes came, the rest was asked again
    nvme_io_destroy(io);
    free(b);
    close(fd);
}

static void test_enospc(void** state) {
    (void)state;
    char err[512];
    // a write failing with ENOSPC (the hook) ends the pass with a line naming the bytes and the file
    nvme_test_hooks = (NvmeTestHooks){.fail_write_errno = ENOSPC, .write_fail_after = 8192};
    NvmeSwapConfig c = swap_cfg(2, true, true);
    const size_t rb[3] = {20000, 20000, 20000};
    NvmeSwap* S;
    assert_int_equal(nvme_swap_create(&S, dir_ok(), "nospc.swp", 3, rb, &c, err, sizeof err), 0);
    int seq[3] = {0, 1, 2}, rc = 0;
    assert_int_equal(nvme_swap_begin(S, seq, 3, err, sizeof err), 0);
    for (int k = 0; k < 3 && !rc; k++) {
        void* b;
        rc = nvme_swap_acquire(S, k, &b, err, sizeof err);
        if (!rc) rc = nvme_swap_release(S, k, err, sizeof err);
    }
    if (!rc) rc = nvme_swap_end(S, err, sizeof err);
    nvme_test_hooks = (NvmeTestHooks){0};
    assert_int_equal(rc, T5_EXIT_FAILURE);
    assert_non_null(strstr(err, "No space left on device"));
    assert_non_null(strstr(err, "nospc.swp"));
    assert_non_null(strstr(err, "bytes free in"));
    nvme_swap_destroy(S);
    // more than the folder has free: refused before anything is written, naming needed and free
    int fd;
    rc = nvme_file_create(dir_ok(), "huge.swp", (uint64_t)1 << 60, &fd, err, sizeof err);
    assert_int_equal(rc, T5_EXIT_FAILURE);
    assert_non_null(strstr(err, "1152921504606846976 bytes"));
    assert_non_null(strstr(err, "free"));
    char path[600];
    snprintf(path, sizeof path, "%s/huge.swp", dir_ok());
    assert_int_not_equal(access(path, F_OK), 0);
    // the file size limit (RLIMIT_FSIZE) in a child: fallocate is refused with EFBIG, and the line says so
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    const pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {1 << 16, 1 << 16};
        setrlimit(RLIMIT_FSIZE, &rl);
        char e2[512] = "";
        int f;
        const int r = nvme_file_create(dir_ok(), "fsize.swp", 1 << 20, &f, e2, sizeof e2);
        dprintf(pfd[1], "%d %s", r, e2);
        _exit(0);
    }
    close(pfd[1]);
    char line[600] = "";
    ssize_t got = read(pfd[0], line, sizeof line - 1);
    close(pfd[0]);
    waitpid(pid, NULL, 0);
    assert_true(got > 0);
    assert_int_equal(atoi(line), T5_EXIT_FAILURE);
    assert_non_null(strstr(line, "file size limit"));
}

static void test_missing_folder(void** state) {
    (void)state;
    char d[600], err[512];
    int fd;
    snprintf(d, sizeof d, "%s/no/such/folder", dir_ok());
    assert_int_equal(nvme_file_create(d, "x.swp", 4096, &fd, err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, d));
    assert_non_null(strstr(err, "No such file or directory"));
    assert_non_null(strstr(err, "mkdir -p"));
    snprintf(d, sizeof d, "%s/plain_file", dir_ok());
    t5test_write_file(d, "x");
    assert_int_equal(nvme_file_create(d, "x.swp", 4096, &fd, err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, "is not a folder"));
}

static void test_o_direct_refused(void** state) {
    (void)state;
    char err[512];
    int fd;
    nvme_test_hooks = (NvmeTestHooks){.open_einval = true};
    const int rc = nvme_file_create(dir_ok(), "od.swp", 4096, &fd, err, sizeof err);
    nvme_test_hooks = (NvmeTestHooks){0};
    assert_int_equal(rc, T5_EXIT_FAILURE);
    assert_non_null(strstr(err, dir_ok()));
    assert_non_null(strstr(err, "refuses O_DIRECT"));
    char fs[64];
    nvme_fs_name(dir_ok(), fs, sizeof fs);
    assert_non_null(strstr(err, fs));
    // for real: /dev/shm (tmpfs) refuses O_DIRECT on kernels before 6.6; newer ones accept it
    char shm[] = "/dev/shm/t5nvme.XXXXXX";
    if (!mkdtemp(shm)) {
        printf("# no writable /dev/shm here: only the hook's refusal was checked\n");
        return;
    }
    const int r2 = nvme_file_create(shm, "od.swp", 4096, &fd, err, sizeof err);
    rmdir(shm);
    if (r2 == 0) {
        close(fd);
        printf("# /dev/shm accepts O_DIRECT on this kernel: only the hook's refusal was checked\n");
        return;
    }
    assert_non_null(strstr(err, "tmpfs filesystem, which refuses O_DIRECT"));
}

// The engine's use (src/zero/part_nvme.c): one region per CPU unit holding its Adam m then v, stepped by DeepSpeed's
// CPU AdamW in a pass per step. Six steps through the swap file, pipelined and not, end with the same master, m and v
// bits as the same steps over m, v in host memory.
static void adam_through_swap(int bufs, bool pr, bool pw) {
    enum { NU = 5, STEPS = 6 };
    const size_t n[NU] = {1000, 4097, 70000, 3, 123457};
    size_t tot = 0, rb[NU];
    for (int u = 0; u < NU; u++) tot += n[u], rb[u] = n[u] * 8;
    float* g = malloc(tot * 4);
    float *w_ref = malloc(tot * 4), *w = malloc(tot * 4), *m_ref = calloc(tot, 4), *v_ref = calloc(tot, 4);
    for (size_t i = 0; i < tot; i++) w_ref[i] = w[i] = (float)((int)(i % 201) - 100) * 1e-3f;
    NvmeSwapConfig c = swap_cfg(bufs, pr, pw);
    c.io.threads = 2;
    NvmeSwap* S;
    char err[512];
    if (nvme_swap_create(&S, dir_ok(), "adam.swp", NU, rb, &c, err, sizeof err)) fail_msg("%s", err);
    int seq[NU] = {0, 1, 2, 3, 4};
    CpuAdam ca;
    cpu_adam_init(&ca, 0.9f, 0.999f, 1e-8f, true);
    for (int step = 1; step <= STEPS; step++) {
        for (size_t i = 0; i < tot; i++) g[i] = (float)(((i * 2654435761u + (size_t)step * 40503u) % 2001) - 1000) * 1e-4f;
        cpu_adam_begin_step(&ca, step, 0.9f, 0.999f);
        assert_int_equal(nvme_swap_begin(S, seq, NU, err, sizeof err), 0);
        size_t off = 0;
        for (int u = 0; u < NU; u++) {
            void* b;
            assert_int_equal(nvme_swap_acquire(S, u, &b, err, sizeof err), 0);
            float* m = b;
            cpu_adam_update(&ca, 1e-3f, 0.01f, w + off, m, m + n[u], g + off, DT_F32, 1.0f, NULL, DT_F32, n[u]);
            assert_int_equal(nvme_swap_release(S, u, err, sizeof err), 0);
            cpu_adam_update(&ca, 1e-3f, 0.01f, w_ref + off, m_ref + off, v_ref + off, g + off, DT_F32, 1.0f, NULL,
                            DT_F32, n[u]);
            off += n[u];
        }
        assert_int_equal(nvme_swap_end(S, err, sizeof err), 0);
    }
    assert_memory_equal(w, w_ref, tot * 4);
    size_t off = 0;
    float* back = malloc(123457 * 8);
    for (int u = 0; u < NU; u++) {  // the checkpoint's view: m, v read back from the file
        assert_int_equal(nvme_swap_read_range(S, u, 0, n[u] * 4, back, err, sizeof err), 0);
        assert_int_equal(nvme_swap_read_range(S, u, n[u] * 4, n[u] * 4, back + n[u], err, sizeof err), 0);
        assert_memory_equal(back, m_ref + off, n[u] * 4);
        assert_memory_equal(back + n[u], v_ref + off, n[u] * 4);
        off += n[u];
    }
    assert_true(m_ref[5] != 0.0f && v_ref[5] != 0.0f);
    nvme_swap_destroy(S);
    free(back);
    free(g);
    free(w_ref);
    free(w);
    free(m_ref);
    free(v_ref);
}

static void test_adam_through_swap(void** state) {
    (void)state;
    adam_through_swap(1, false, false);  // DeepSpeed's default: no pipelining
    adam_through_swap(2, true, false);
    adam_through_swap(3, true, true);    // read k+1 and write k-1 while k is stepped
}

// t5train --dry_run checks nvme_path before anything is created (src/cli/nvme_check.c): a missing folder is exit 2
// naming it; an existing one is listed among the checks with the swap file's size
static void test_dry_run_checks_nvme_path(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    const char* d = t5test_data_dir();
    char ds[700], nv[700], out[700];
    static char text[1 << 16];
    snprintf(nv, sizeof nv, "%s/dry_nvme", dir_ok());
    snprintf(out, sizeof out, "%s/dry_out", dir_ok());
    snprintf(ds, sizeof ds, "%s/dry_ds.json", dir_ok());
    for (int exists = 0; exists < 2; exists++) {
        if (exists) mkdir(nv, 0700);
        char json[1500];
        snprintf(json, sizeof json,
                 "{\"train_micro_batch_size_per_gpu\": \"auto\", \"zero_optimization\": {\"stage\": 3, "
                 "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}}}", nv);
        t5test_write_file(ds, json);
        const int rc = t5test_run(text, sizeof text,
                                  "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name "
                                  "%s/t5-spiece/spiece.model --train_file %s/wmt16-ro-en/validation.en --source_lang en "
                                  "--target_lang ro --max_train_samples 50 --do_train --max_steps 2 --output_dir %s "
                                  "--deepspeed %s --dry_run 2>&1",
                                  t5test_bin(), t5test_repo_dir(), d, d, out, ds);
        if (!exists) {
            if (rc != T5_EXIT_USAGE) fail_msg("a missing nvme_path: exit %d (want 2):\n%s", rc, text);
            assert_contains(text, "No such file or directory");
            assert_contains(text, nv);
        } else {
            if (rc != 0) fail_msg("dry run with nvme_path %s: exit %d:\n%s", nv, rc, text);
            assert_contains(text, "dry run: checked nvme_path");
            assert_contains(text, "the swap file of Adam m, v needs");
        }
        assert_int_not_equal(access(out, F_OK), 0);  // nothing created
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_round_trip_settings),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_short_completions),
        cmocka_unit_test(test_enospc),
        cmocka_unit_test(test_missing_folder),
        cmocka_unit_test(test_o_direct_refused),
        cmocka_unit_test(test_adam_through_swap),
        cmocka_unit_test(test_dry_run_checks_nvme_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
