/*
 * flops_profiler.c: DeepSpeed's flops_profiler in the trainer (flops_profiler.h): CUDA events on the compute
 * stream, read once after the profiled update's step.
 */
#include "flops_profiler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/check.h"
#include "../base/common.h"
#include "../report/flops.h"
#include "../report/flops_profile.h"

struct FlopsProfiler {
    FlopsProfilerArgs a;
    T5Config cfg;
    int world;
    int nev;                // forward events: flops_profile_num_segments + 1
    cudaEvent_t* ev;        // the forward's events, then backward end, step begin, step end
    int64_t B, S, T;
    bool armed;             // the profiled update's events were recorded
    double peak;
    char peak_what[320];
};

FlopsProfiler* flops_profiler_create(const FlopsProfilerArgs* a, const T5Config* cfg, DType dtype, bool tf32,
                                     int world_size, int rank) {
    if (!a->enabled || rank != 0) return NULL;
    FlopsProfiler* p = calloc(1, sizeof *p);
    if (!p) t5_die(T5_EXIT_FAILURE, "out of host memory (flops profiler)");
    p->a = *a;
    p->cfg = *cfg;
    p->world = world_size;
    p->nev = flops_profile_num_segments(cfg) + 1;
    p->ev = malloc_check((size_t)(p->nev + 3) * sizeof(cudaEvent_t));
    for (int i = 0; i < p->nev + 3; i++) CUDA_CHECK(cudaEventCreate(&p->ev[i]));
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        // the MFU's peak: dense 16-bit tensor cores for fp16 / bf16, plain fp32 for fp32 (with --tf32 the GEMMs run
        // on TF32 tensor cores, so the fp32 peak makes MFU read high; docs/training.md says so)
        p->peak = dtype == DT_F32 ? flops_device_peak_fp32(prop.name) : flops_device_peak_16bit(prop.name);
        snprintf(p->peak_what, sizeof p->peak_what, "%s on %s", dtype == DT_F32 ? (tf32 ? "fp32 (TF32 GEMMs)" : "fp32")
                                                                                 : "16-bit dense",
                 prop.name);
    } else {
        (void)cudaGetLastError();
    }
    return p;
}

void flops_profiler_destroy(FlopsProfiler* p) {
    if (!p) return;
    for (int i = 0; i < p->nev + 3; i++) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p);
}

bool flops_profiler_due(const FlopsProfiler* p, int64_t global_step) { return p && global_step == p->a.profile_step; }

void flops_profiler_forward_begin(FlopsProfiler* p, T5Model* M, int64_t B, int64_t S, int64_t T, cudaStream_t s) {
    (void)s;
    p->B = B;
    p->S = S;
    p->T = T;
    t5_model_set_profile(M, p->ev, p->nev);
}

void flops_profiler_forward_end(FlopsProfiler* p, T5Model* M) {
    (void)p;
    t5_model_set_profile(M, NULL, 0);
}

void flops_profiler_backward_end(FlopsProfiler* p, cudaStream_t s) {
    CUDA_CHECK(cudaEventRecord(p->ev[p->nev], s));
    p->armed = true;
}

void flops_profiler_step_begin(FlopsProfiler* p, cudaStream_t s) { CUDA_CHECK(cudaEventRecord(p->ev[p->nev + 1], s)); }

int flops_profiler_step_end(FlopsProfiler* p, int64_t global_step, cudaStream_t s, char* err, size_t errlen) {
    if (!p->armed) return 0;
    p->armed = false;
    CUDA_CHECK(cudaEventRecord(p->ev[p->nev + 2], s));
    CUDA_CHECK(cudaEventSynchronize(p->ev[p->nev + 2]));
    const int nseg = p->nev - 1;
    double* seg = malloc_check((size_t)nseg * sizeof(double));
    float ms;
    for (int i = 0; i < nseg; i++) {
        CUDA_CHECK(cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]));
        seg[i] = ms;
    }
    float bwd, step;
    CUDA_CHECK(cudaEventElapsedTime(&bwd, p->ev[nseg], p->ev[p->nev]));
    CUDA_CHECK(cudaEventElapsedTime(&step, p->ev[p->nev + 1], p->ev[p->nev + 2]));
    FlopsProfileInput in = {.cfg = p->cfg, .B = p->B, .S = p->S, .T = p->T, .profile_step = global_step,
                            .world_size = p->world, .seg_ms = seg, .bwd_ms = bwd, .step_ms = step,
                            .recompute_fwd_factor = p->a.recompute_fwd_factor, .peak_flops = p->peak,
                            .peak_what = p->peak_what, .module_depth = p->a.module_depth,
                            .top_modules = p->a.top_modules, .detailed = p->a.detailed};
    int rc = 0;
    if (p->a.output_file[0]) {  // DeepSpeed: the profile goes to the file instead of stdout
        char* dir = strdup_check(p->a.output_file);
        char* slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = 0;
            t5_mkdir_p(dir);
        }
        free(dir);
        errno = 0;
        FILE* f = fopen(p->a.output_file, "w");
        bool ok = f && flops_profile_write(f, &in) == 0;
        if (f && fclose(f) != 0) ok = false;
        if (!ok) {
            rc = -1;
            snprintf(err, errlen, "flops_profiler.output_file %s: %s", p->a.output_file, errno ? strerror(errno) : "cannot write");
        } else {
            printf("flops profiler: the profile of step %lld is in %s\n", (long long)global_step, p->a.output_file);
        }
    } else {
        flops_profile_write(stdout, &in);
    }
    fflush(stdout);
    free(seg);
    return rc;
}
