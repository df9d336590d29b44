/*
 * env_cmd.c: `t5train env`, what DeepSpeed's ds_report tells its users, for a bug report or a first look at
 * a new machine: the versions (version.c), the GPUs and whether this binary runs on them, the CPU and its
 * CPU-AdamW path, the host memory the planner counts on and the locked-memory limit, free disk where the run will read and write, the
 * download libraries, and the environment variables t5train reads.
 *
 *   t5train env [--output_dir DIR] [--cache_dir DIR] [--data_dir DIR] [--json]
 *
 * Works on a machine without a GPU or driver (it says so) and always exits 0, but for a bad argument (2).
 */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "commands.h"
#include "version.h"
#include "../base/common.h"
#include "../download/dynlib.h"
#include "../download/hub_cache.h"
#include "../download/wmt16_sources.h"
#include "../zero/cpu_adam.h"
#include "../zero/host_mem.h"
#include "../../data/dataset.h"

#ifndef T5_GPU_ARCH
#define T5_GPU_ARCH "unknown"
#endif

#define MAX_ITEMS 96
#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct {
    ReportItem it[MAX_ITEMS];
    int n;
} Report;

#define ADD(r, name, ...) report_add((r)->it, &(r)->n, MAX_ITEMS, name, __VA_ARGS__)

// "sm_90a" -> 90, or 0
static int built_arch(void) {
    const char* a = T5_GPU_ARCH;
    return strncmp(a, "sm_", 3) == 0 ? atoi(a + 3) : 0;
}

static void gpus(Report* r) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        ADD(r, "GPUs", "none (%s): training and evaluation need an NVIDIA GPU; estimate, tokenize and bleu run here",
            e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        (void)cudaGetLastError();
        return;
    }
    const char* vis = getenv("CUDA_VISIBLE_DEVICES");
    ADD(r, "GPUs", "%d visible%s%s", count, vis ? ", CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "");
    int want = built_arch();
    for (int d = 0; d < count; d++) {
        struct cudaDeviceProp p;
        char name[16];
        snprintf(name, sizeof name, "GPU %d", d);
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
            ADD(r, name, "properties not readable (%s)", cudaGetErrorString(cudaGetLastError()));
            continue;
        }
        size_t free_b = 0, total_b = 0;
        bool mem = cudaSetDevice(d) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
        if (!mem) (void)cudaGetLastError();
        int cc = p.major * 10 + p.minor;
        char memtxt[64] = "";
        if (mem) snprintf(memtxt, sizeof memtxt, " (%.1f GiB free)", free_b / GIB);
        const char* fit = want == 0    ? "built arch unknown"
                          : cc == want ? "this binary runs on it"
                                       : "this binary was built for " T5_GPU_ARCH ": rebuild with GPU_ARCH=auto";
        ADD(r, name, "%s, sm_%d, %d SMs, %.1f GiB%s, %s", p.name, cc, p.multiProcessorCount, p.totalGlobalMem / GIB,
            memtxt, fit);
    }
}

static void cpu_and_memory(Report* r) {
    char model[256] = "unknown";
    FILE* f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0) {
                char* c = strchr(line, ':');
                if (c) snprintf(model, sizeof model, "%s", c + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    ADD(r, "CPU", "%ld cores online, %s, CPU AdamW path %s", sysconf(_SC_NPROCESSORS_ONLN), model,
        cpu_adam_simd_name(cpu_adam_detect_simd()));
    // what the planner and the offload buffers count on (cgroup-aware, T5TRAIN_HOST_MEM_GIB overrides it); MemTotal is
    // not shown: on some VMs it grows as memory is touched (host_mem.h)
    size_t avail = host_mem_available();
    if (avail == SIZE_MAX)
        ADD(r, "host memory", "unknown (no /proc/meminfo or cgroup limit)");
    else
        ADD(r, "host memory", "%.1f GiB available to this process (what the planner counts on)", avail / GIB);
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        ADD(r, "locked-memory limit", "%.1f MiB (ulimit -l; CUDA pins pin_memory's buffers through its driver)",
            rl.rlim_cur / (1024.0 * 1024.0));
    else
        ADD(r, "locked-memory limit", "unlimited (ulimit -l)");
}

// free space of the file system holding path, or of its nearest existing parent
static void disk(Report* r, const char* what, const char* path) {
    char p[HUB_PATHLEN];
    snprintf(p, sizeof p, "%s", path);
    struct statvfs s;
    while (statvfs(p, &s) != 0) {
        char* slash = strrchr(p, '/');
        if (!slash || slash == p) {
            snprintf(p, sizeof p, "%s", slash == p ? "/" : ".");
            if (statvfs(p, &s) != 0) {
                ADD(r, what, "%s: cannot read its file system (%s)", path, strerror(errno));
                return;
            }
            break;
        }
        *slash = '\0';
    }
    const char* exists = strcmp(p, path) == 0 ? "" : " (not there yet)";
    ADD(r, what, "%s%s: %.1f GiB free of %.1f GiB", path, exists, (double)s.f_bavail * s.f_frsize / GIB,
        (double)s.f_blocks * s.f_frsize / GIB);
}

static void folders(Report* r, const char* output_dir, const char* cache_dir, const char* data_dir) {
    char p[HUB_PATHLEN], err[512];
    if (hub_cache_root(cache_dir, p, sizeof p, err, sizeof err) == 0)
        disk(r, "HF hub cache", p);
    else
        ADD(r, "HF hub cache", "unknown: %s", err);
    if (data_dir)
        disk(r, "data folder", data_dir);
    else if (wmt16_default_data_dir(p, sizeof p, err, sizeof err) == 0)
        disk(r, "data folder", p);
    else
        ADD(r, "data folder", "unknown: %s", err);
    char* tc = dataset_default_cache_dir();
    if (tc)
        disk(r, "token cache", tc);
    else
        ADD(r, "token cache", "none (neither T5TRAIN_CACHE nor HOME is set: the token cache is off)");
    free(tc);
    disk(r, "output_dir", output_dir);
}

static void downloads(Report* r) {
    char err[512];
#ifdef T5_HAVE_CURL
    ADD(r, "libcurl", "%s", dynlib_curl(err, sizeof err) ? "found (Hub and WMT16 downloads work)" : err);
#else
    ADD(r, "libcurl", "not built in (models and data must be on disk)");
#endif
#ifdef T5_HAVE_ARCHIVE
    ADD(r, "libarchive", "%s", dynlib_archive(err, sizeof err) ? "found (WMT16 archives unpack)" : err);
#else
    ADD(r, "libarchive", "not built in (WMT16 must be prepared elsewhere)");
#endif
}

static void variables(Report* r) {
    static const char* shown[] = {"HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                  "T5TRAIN_DATA", "T5TRAIN_CACHE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"};
    static const char* secret[] = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "https_proxy", "HTTPS_PROXY", "http_proxy",
                                   "HTTP_PROXY"};
    for (size_t i = 0; i < T5_ARRAY_LEN(shown); i++) {
        const char* v = getenv(shown[i]);
        ADD(r, shown[i], "%s", v ? v : "(unset)");
    }
    for (size_t i = 0; i < T5_ARRAY_LEN(secret); i++) {
        const char* v = getenv(secret[i]);
        ADD(r, secret[i], "%s", v ? "(set, not shown)" : "(unset)");
    }
    extern char** environ;
    for (char** e = environ; *e; e++) {  // NCCL's own variables, as they change its transports
        if (strncmp(*e, "NCCL_", 5) != 0) continue;
        char name[40];
        size_t k = strcspn(*e, "=");
        snprintf(name, sizeof name, "%.*s", (int)(k < sizeof name - 1 ? k : sizeof name - 1), *e);
        ADD(r, name, "%s", (*e)[k] ? *e + k + 1 : "");
    }
}

static int print_json(const Report* r) {
    json_t* o = json_object();
    for (int i = 0; i < r->n; i++) json_object_set_new(o, r->it[i].name, json_string(r->it[i].value));
    char* s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s) return T5_EXIT_FAILURE;
    printf("%s\n", s);
    free(s);
    return T5_EXIT_OK;
}

int env_main(int argc, char** argv) {
    const char *output_dir = "trainer_output", *cache_dir = NULL, *data_dir = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char** dst = strcmp(a, "--output_dir") == 0 ? &output_dir
                           : strcmp(a, "--cache_dir") == 0 ? &cache_dir
                           : strcmp(a, "--data_dir") == 0  ? &data_dir
                                                           : NULL;
        if (dst) {
            if (i + 1 >= argc || !argv[i + 1][0])
                t5_die(T5_EXIT_USAGE, "env: %s needs a folder (usage: t5train env [--output_dir DIR] [--cache_dir DIR] "
                                      "[--data_dir DIR] [--json])", a);
            *dst = argv[++i];
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("usage: t5train env [--output_dir DIR] [--cache_dir DIR] [--data_dir DIR] [--json]\n"
                   "  the versions, GPUs, CPU, memory, free disk of the folders a run uses, download libraries and\n"
                   "  the environment variables t5train reads (DeepSpeed's ds_report); runs without a GPU\n");
            return T5_EXIT_OK;
        } else {
            t5_die(T5_EXIT_USAGE, "env: unknown argument '%s' (usage: t5train env [--output_dir DIR] [--cache_dir DIR] "
                                  "[--data_dir DIR] [--json])", a);
        }
    }
    static Report r;
    version_items(r.it, &r.n, MAX_ITEMS);
    gpus(&r);
    cpu_and_memory(&r);
    folders(&r, output_dir, cache_dir, data_dir);
    downloads(&r);
    variables(&r);
    if (json) return print_json(&r);
    printf("t5train environment report (DeepSpeed's ds_report; paste it into a bug report)\n");
    report_print(stdout, r.it, r.n);
    return T5_EXIT_OK;
}
