/*
 * version.c: t5train's version and the versions of what it links (version.h).
 *
 * Every value is asked of the library at run time where the library can say (cudaRuntimeGetVersion,
 * cudaDriverGetVersion, cublasLtGetVersion, ncclGetVersion, MPI_Get_library_version) and shown beside the
 * version of the headers the binary was built with, so a mismatch between the two is visible at a glance.
 */
#include "version.h"

#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdarg.h>
#include <string.h>

#ifdef T5_HAVE_MPI
#include <mpi.h>
#endif

#ifndef T5_GIT_COMMIT
#define T5_GIT_COMMIT "unknown"
#endif
#ifndef T5_GPU_ARCH
#define T5_GPU_ARCH "unknown"
#endif

#define NAME_COLUMN 25

const char* version_string(void) { return T5TRAIN_VERSION " (git " T5_GIT_COMMIT ")"; }

void report_add(ReportItem* items, int* n, int cap, const char* name, const char* fmt, ...) {
    if (*n >= cap) return;
    ReportItem* it = &items[(*n)++];
    snprintf(it->name, sizeof it->name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->value, sizeof it->value, fmt, ap);
    va_end(ap);
}

void report_print(FILE* f, const ReportItem* items, int n) {
    for (int i = 0; i < n; i++) {
        int w = fprintf(f, "%s ", items[i].name);
        for (int k = w; k < NAME_COLUMN; k++) fputc('.', f);
        fprintf(f, " %s\n", items[i].value);
    }
}

// CUDA's integer versions: 1000 * major + 10 * minor
#define CUDA_MAJOR(v) ((v) / 1000)
#define CUDA_MINOR(v) (((v) % 1000) / 10)

static void mpi_item(ReportItem* items, int* n, int cap) {
#ifdef T5_HAVE_MPI
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    // callable before MPI_Init (MPI-3); Open MPI's string goes on with ", package: ...": keep the first part
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS && len > 0) {
        lib[len < (int)sizeof lib ? len : (int)sizeof lib - 1] = '\0';
        char* cut = strpbrk(lib, ",\n");
        if (cut) *cut = '\0';
        report_add(items, n, cap, "MPI", "%s (MPI %d.%d headers)", lib, MPI_VERSION, MPI_SUBVERSION);
    } else {
        report_add(items, n, cap, "MPI", "built in, but the library gave no version");
    }
#else
    report_add(items, n, cap, "MPI", "not built in (launch with t5train --num_gpus N or torchrun-style variables)");
#endif
}

void version_items(ReportItem* items, int* n, int cap) {
    report_add(items, n, cap, "t5train", "%s", version_string());
    report_add(items, n, cap, "built for", "%s (CUDA %d.%d headers)", T5_GPU_ARCH, CUDA_MAJOR(CUDART_VERSION),
               CUDA_MINOR(CUDART_VERSION));
    int rt = 0, drv = 0;
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess)
        report_add(items, n, cap, "CUDA runtime", "%d.%d", CUDA_MAJOR(rt), CUDA_MINOR(rt));
    else
        report_add(items, n, cap, "CUDA runtime", "unknown (cudaRuntimeGetVersion failed)");
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
        report_add(items, n, cap, "CUDA driver", "supports CUDA %d.%d%s", CUDA_MAJOR(drv), CUDA_MINOR(drv),
                   drv < rt ? " (older than the runtime: update the driver)" : "");
    else
        report_add(items, n, cap, "CUDA driver", "none (no NVIDIA driver on this machine)");
    size_t lt = cublasLtGetVersion();
    report_add(items, n, cap, "cuBLASLt", "%zu.%zu.%zu (built with %d.%d.%d)", lt / 10000, (lt % 10000) / 100, lt % 100,
               CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
    int nv = 0;
    if (ncclGetVersion(&nv) == ncclSuccess)
        report_add(items, n, cap, "NCCL", "%d.%d.%d (built with %d.%d.%d)", nv / 10000, (nv % 10000) / 100, nv % 100,
                   NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    else
        report_add(items, n, cap, "NCCL", "unknown (ncclGetVersion failed; built with %d.%d.%d)", NCCL_MAJOR, NCCL_MINOR,
                   NCCL_PATCH);
    mpi_item(items, n, cap);
}

void version_card_lines(char* out, size_t cap) {
    ReportItem items[16];
    int n = 0;
    version_items(items, &n, 16);
    static const char* const NAMES[] = {"t5train", "CUDA runtime", "NCCL"};
    size_t o = 0;
    out[0] = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n; i++)
            if (strcmp(items[i].name, NAMES[k]) == 0 && o < cap)
                o += (size_t)snprintf(out + o, cap - o, "- %s %s\n", items[i].name, items[i].value);
}
