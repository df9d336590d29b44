/*
 * bench_cpu_adam.c: throughput of the CPU AdamW (src/zero/cpu_adam.c) against the machine's memory bandwidth.
 *
 *   build-x/bench/bench_cpu_adam [--steps K] [--simd avx512|avx2|scalar] SIZE_M...
 *   e.g. bench_cpu_adam 100 1000 3000    (100M, 1B, 3B fp32 parameters; default: 10 100)
 *
 * Threads: OpenMP (OMP_NUM_THREADS; pin with OMP_PROC_BIND=close OMP_PLACES=cores for stable numbers).
 * Buffers are 2 MB aligned, advised for huge pages (BENCH_NO_THP=1: not) and first touched by the
 * same static OpenMP schedule the kernels use.
 *
 * Bytes moved per parameter, counted exactly as the algorithm reads and writes them (logical traffic):
 *   fp32 grad, no working copy:   read master+m+v 12, grad 4; write master+m+v 12         = 28 B
 *   bf16/fp16 grad + working copy: read master+m+v 12, grad 2; write master+m+v 12, copy 2 = 28 B
 * Physical DRAM traffic can be higher by the write-allocate read of the working copy (+2 B, the
 * master/m/v lines are already cached when written back): 30 B for the 16-bit variants.
 * STREAM-style kernels in the same run (STREAM's byte convention, no write-allocate counted):
 *   copy  b[i] = a[i]              8 B per element
 *   triad a[i] = b[i] + s*c[i]    12 B per element
 * Memory needed: 18 B per parameter for the optimizer buffers (+ 12 B the STREAM arrays reuse).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../../src/zero/cpu_adam.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// 2 MB aligned and advised for transparent huge pages (as torch's CPU allocator does for large
// buffers): with 4 KB pages the page walks of 7 streams cost ~20% at 1B parameters. BENCH_NO_THP=1
// turns the advice off to measure that.
static void* alloc64(size_t bytes) {
    void* p = NULL;
    const size_t align = (size_t)2 << 20;
    bytes = (bytes + align - 1) / align * align;
    if (posix_memalign(&p, align, bytes) != 0) {
        fprintf(stderr, "bench_cpu_adam: cannot allocate %.2f GB\n", bytes / 1e9);
        exit(1);
    }
    if (!getenv("BENCH_NO_THP")) madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

int main(int argc, char** argv) {
    int steps = 5;
    const char* simd = NULL;
    double sizes[16];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--simd") && i + 1 < argc) simd = argv[++i];
        else if (nsizes < 16 && atof(argv[i]) > 0) sizes[nsizes++] = atof(argv[i]);
        else {
            fprintf(stderr, "usage: %s [--steps K] [--simd avx512|avx2|scalar] SIZE_IN_MILLIONS...\n", argv[0]);
            return 2;
        }
    }
    if (nsizes == 0) sizes[nsizes++] = 10, sizes[nsizes++] = 100;
    CpuAdam a;
    cpu_adam_init(&a, 0.9f, 0.999f, 1e-8f, true);
    if (simd) {
        CpuAdamSimd s = !strcmp(simd, "avx512") ? CPU_ADAM_AVX512 : !strcmp(simd, "avx2") ? CPU_ADAM_AVX2 : CPU_ADAM_SCALAR;
        if (cpu_adam_set_simd(&a, s) != 0) {
            fprintf(stderr, "bench_cpu_adam: this CPU has no %s\n", simd);
            return 1;
        }
    }
    printf("# cpu_adam: %s path, %d OpenMP threads, %d timed steps after 1 warm-up, huge pages %s\n",
           cpu_adam_simd_name(a.simd), omp_get_max_threads(), steps, getenv("BENCH_NO_THP") ? "not advised" : "advised");
    printf("%-9s %-26s %10s %14s %10s\n", "params", "variant", "s/step", "params/s", "GB/s");
    for (int si = 0; si < nsizes; si++) {
        size_t n = (size_t)(sizes[si] * 1e6);
        float* p = alloc64(n * 4);
        float* m = alloc64(n * 4);
        float* v = alloc64(n * 4);
        float* g32 = alloc64(n * 4);
        uint16_t* g16 = alloc64(n * 2);
        uint16_t* w = alloc64(n * 2);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            p[i] = (float)(i % 1000) * 1e-3f - 0.5f;
            m[i] = 0.0f, v[i] = 0.0f;
            g32[i] = (float)(i % 7) * 1e-3f - 3e-3f;
            g16[i] = cpu_adam_f32_to_bf16(g32[i]);
            w[i] = 0;
        }
        const struct {
            const char* name;
            DType gdt;
            bool work;
            DType wdt;
            double bytes;
        } var[] = {
            {"fp32 grad, no copy", DT_F32, false, DT_BF16, 28.0},
            {"bf16 grad + bf16 copy", DT_BF16, true, DT_BF16, 28.0},
            {"fp16 grad + fp16 copy", DT_F16, true, DT_F16, 28.0},
        };
        int64_t step = 0;
        for (size_t k = 0; k < sizeof var / sizeof var[0]; k++) {
            const void* g = var[k].gdt == DT_F32 ? (const void*)g32 : (const void*)g16;
            void* wp = var[k].work ? (void*)w : NULL;
            cpu_adam_begin_step(&a, ++step, 0.9f, 0.999f);
            cpu_adam_update(&a, 1e-4f, 0.01f, p, m, v, g, var[k].gdt, 1.0f, wp, var[k].wdt, n);  // warm-up
            double t0 = now();
            for (int s = 0; s < steps; s++) {
                cpu_adam_begin_step(&a, ++step, 0.9f, 0.999f);
                cpu_adam_update(&a, 1e-4f, 0.01f, p, m, v, g, var[k].gdt, 1.0f / 1024.0f, wp, var[k].wdt, n);
            }
            double dt = (now() - t0) / steps;
            printf("%7.0fM  %-26s %10.4f %14.4g %10.2f\n", sizes[si], var[k].name, dt, n / dt, var[k].bytes * n / dt / 1e9);
        }
        // STREAM copy / triad over n floats, reusing the optimizer buffers
        float *A = p, *B = m, *C = v;
        const float sc = 3.0f;
        double tc = 1e30, tt = 1e30;
        for (int r = 0; r < steps + 1; r++) {
            double t0 = now();
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++) B[i] = A[i];
            double t1 = now();
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++) A[i] = B[i] + sc * C[i];
            double t2 = now();
            if (r > 0) tc = fmin(tc, t1 - t0), tt = fmin(tt, t2 - t1);  // STREAM reports the best time
        }
        printf("%7.0fM  %-26s %10.4f %14s %10.2f\n", sizes[si], "STREAM copy (8 B/elem)", tc, "-", 8.0 * n / tc / 1e9);
        printf("%7.0fM  %-26s %10.4f %14s %10.2f\n", sizes[si], "STREAM triad (12 B/elem)", tt, "-", 12.0 * n / tt / 1e9);
        free(p), free(m), free(v), free(g32), free(g16), free(w);
    }
    return 0;
}
