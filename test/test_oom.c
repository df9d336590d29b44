/*
 * test_oom.c: out of memory explained during the run (src/base/oom.h, issue 17 item 4), on the CPU:
 *   - the sentence t5_oom_format composes: the buffer, the bytes needed, what is free (GPU: free of total; pinned
 *     host: MemAvailable), the advice text appended, or "free memory unknown";
 *   - in a child process: CUDA_ALLOC_CHECK on a failed allocation (a statement that evaluates to
 *     cudaErrorMemoryAllocation) exits 1 with one "t5train: error:" line naming the buffer, the bytes and the
 *     advice hook's plan; a plain CUDA_CHECK failing with "out of memory" gets the same sentence naming the
 *     statement; another CUDA error keeps the [CUDA ERROR] line and aborts; without t5_oom_set_advice nothing
 *     changes.
 */
#include "t5test.h"

#include <sys/wait.h>
#include <unistd.h>

#include "../src/base/check.h"
#include "../src/base/oom.h"

static void test_format(void** state) {
    (void)state;
    char b[1024];
    t5_oom_format(b, sizeof b, false, "stage 3 gathered unit decoder.block.3", (size_t)3 << 29, true, (size_t)1 << 29,
                  (size_t)80 << 30, "; set offload_param.device cpu: predicted 9.1 GiB of 79.6 GiB GPU");
    assert_string_equal(b, "out of GPU memory during the run allocating stage 3 gathered unit decoder.block.3: 1.50 GiB "
                           "needed, 0.50 GiB free of 80.00 GiB; set offload_param.device cpu: predicted 9.1 GiB of "
                           "79.6 GiB GPU");
    t5_oom_format(b, sizeof b, true, "pinned Adam state", (size_t)10 << 30, true, (size_t)4 << 30, 0, NULL);
    assert_string_equal(b, "out of pinned host memory during the run allocating pinned Adam state: 10.00 GiB needed, "
                           "4.00 GiB available (MemAvailable)");
    t5_oom_format(b, sizeof b, false, "`cudaMallocAsync(&U->grad, bytes, s)`", 0, false, 0, 0, "");
    assert_string_equal(b, "out of GPU memory during the run allocating `cudaMallocAsync(&U->grad, bytes, s)`: free "
                           "memory unknown");
    // truncation is snprintf's: the length it would have written
    char small[16];
    int n = t5_oom_format(small, sizeof small, false, "x", 1, true, 1, 1, NULL);
    assert_true(n > (int)sizeof small);
    assert_int_equal((int)strlen(small), (int)sizeof small - 1);
}

static void fake_advice(const void* ctx, char* buf, size_t len) {
    snprintf(buf, len, "; the estimate for this job (%s): 99.0 GiB GPU; set gradient_checkpointing true: predicted "
                       "70.0 GiB of 79.6 GiB GPU", (const char*)ctx);
}

enum { CASE_ALLOC_CHECK, CASE_CUDA_CHECK_OOM, CASE_CUDA_CHECK_OTHER, CASE_NO_HOOK, CASE_HOST };

// runs one case in a child with stderr in a pipe: its exit status (or 128+signal) and what it printed
static int child(int which, char* out, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) fail_msg("pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        dup2(fd[1], 1);
        if (which != CASE_NO_HOOK) t5_oom_set_advice(fake_advice, "stage 0, micro-batch 64");
        switch (which) {
            case CASE_ALLOC_CHECK:
                CUDA_ALLOC_CHECK(cudaErrorMemoryAllocation, "stage 3 gathered unit decoder.block.3", (size_t)1 << 30);
                break;
            case CASE_HOST:
                CUDA_HOST_ALLOC_CHECK(cudaErrorMemoryAllocation, "pinned gradient staging", (size_t)1 << 31);
                break;
            case CASE_CUDA_CHECK_OOM:
            case CASE_NO_HOOK:
                t5_check_failed("CUDA", "cudaMallocAsync(&U->grad, bytes, s)",
                                cudaGetErrorString(cudaErrorMemoryAllocation), "src/zero/reduce.c", 28, "f");
            case CASE_CUDA_CHECK_OTHER:
                t5_check_failed("CUDA", "cudaMemcpy(a, b, n, k)", cudaGetErrorString(cudaErrorInvalidValue),
                                "x.c", 1, "f");
        }
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
    out[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int count(const char* s, const char* needle) {
    int n = 0;
    for (const char* p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

static void test_dies_with_the_sentence(void** state) {
    (void)state;
    char out[4096];
    int rc = child(CASE_ALLOC_CHECK, out, sizeof out);
    print_message("%s", out);
    assert_int_equal(rc, 1);
    assert_int_equal(count(out, "t5train: error: "), 1);
    assert_non_null(strstr(out, "t5train: error: out of GPU memory during the run allocating stage 3 gathered unit "
                                "decoder.block.3: 1.00 GiB needed, "));
    assert_non_null(strstr(out, "; the estimate for this job (stage 0, micro-batch 64): 99.0 GiB GPU; set "
                                "gradient_checkpointing true"));
    assert_null(strstr(out, "[CUDA ERROR]"));

    rc = child(CASE_HOST, out, sizeof out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "t5train: error: out of pinned host memory during the run allocating pinned gradient "
                                "staging: 2.00 GiB needed, "));

    rc = child(CASE_CUDA_CHECK_OOM, out, sizeof out);
    print_message("%s", out);
    assert_int_equal(rc, 1);
    assert_int_equal(count(out, "t5train: error: "), 1);
    assert_non_null(strstr(out, "t5train: error: out of GPU memory during the run allocating "
                                "`cudaMallocAsync(&U->grad, bytes, s)`: "));
    assert_non_null(strstr(out, "set gradient_checkpointing true"));
    assert_null(strstr(out, "[CUDA ERROR]"));

    // another CUDA error: the check line and abort, as before
    rc = child(CASE_CUDA_CHECK_OTHER, out, sizeof out);
    assert_int_equal(rc, 128 + 6);  // SIGABRT
    assert_non_null(strstr(out, "[CUDA ERROR]"));
    assert_null(strstr(out, "t5train: error:"));

    // no advice installed (subcommands, tests): CUDA_CHECK is unchanged
    rc = child(CASE_NO_HOOK, out, sizeof out);
    assert_int_equal(rc, 128 + 6);
    assert_non_null(strstr(out, "[CUDA ERROR]"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_dies_with_the_sentence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
