/*
 * oom.c: out of memory explained while the run is under way (see oom.h).
 */
#include "oom.h"

#include <stdio.h>
#include <string.h>

static T5OomAdvice g_advice;
static const void* g_ctx;

// t5_check_failed (common.c) asks this before its [CUDA ERROR] line: CUDA's "out of memory" becomes the sentence
static void oom_check_hook(const char* kind, const char* stmt, const char* msg, const char* file, int line) {
    (void)file;
    (void)line;
    if (strcmp(kind, "CUDA") != 0 || !msg || strcmp(msg, cudaGetErrorString(cudaErrorMemoryAllocation)) != 0) return;
    (void)cudaGetLastError();
    // pinned host buffers fail with the same code: say which memory ran out
    const bool host = strstr(stmt, "MallocHost") || strstr(stmt, "HostAlloc") || strstr(stmt, "HostRegister");
    char what[512];
    snprintf(what, sizeof what, "`%s`", stmt);
    t5_oom_die(host, what, 0);
}

void t5_oom_set_advice(T5OomAdvice fn, const void* ctx) {
    g_advice = fn;
    g_ctx = ctx;
    t5_check_failed_hook = oom_check_hook;
}

static double gib(size_t b) { return (double)b / 1073741824.0; }

int t5_oom_format(char* buf, size_t len, bool host, const char* what, size_t bytes, bool have_mem, size_t free_b,
                  size_t total_b, const char* advice) {
    char need[64] = ": ", mem[160];
    if (bytes) snprintf(need, sizeof need, ": %.2f GiB needed, ", gib(bytes));
    if (!have_mem) snprintf(mem, sizeof mem, "free memory unknown");
    else if (host) snprintf(mem, sizeof mem, "%.2f GiB available (MemAvailable)", gib(free_b));
    else snprintf(mem, sizeof mem, "%.2f GiB free of %.2f GiB", gib(free_b), gib(total_b));
    return snprintf(buf, len, "out of %s memory during the run allocating %s%s%s%s", host ? "pinned host" : "GPU", what,
                    need, mem, advice ? advice : "");
}

// MemAvailable from /proc/meminfo (src/zero's host_mem_available adds the cgroup rule; floor 0 cannot call it)
static bool mem_available(size_t* out) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256];
    bool ok = false;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "MemAvailable:", 13) == 0) {
            *out = (size_t)strtoull(line + 13, NULL, 10) * 1024;
            ok = true;
        }
    fclose(f);
    return ok;
}

void t5_oom_die(bool host, const char* what, size_t bytes) {
    size_t fr = 0, tot = 0;
    bool have = false;
    if (host) {
        have = mem_available(&fr);
    } else {
        have = cudaMemGetInfo(&fr, &tot) == cudaSuccess;
        if (!have) (void)cudaGetLastError();
    }
    static char advice[1024], msg[2048];
    advice[0] = 0;
    if (g_advice) g_advice(g_ctx, advice, sizeof advice);
    t5_oom_format(msg, sizeof msg, host, what, bytes, have, fr, tot, advice);
    t5_die(T5_EXIT_FAILURE, "%s", msg);
}
