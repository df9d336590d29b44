/*
 * flops_profiler.h: DeepSpeed's flops_profiler in the trainer. At the update whose global step (updates done
 * before it, DeepSpeed's engine.global_steps) is profile_step, rank 0 times the first micro-batch: its forward per
 * module (t5_model_set_profile's events), its backward with the gradients handed to the engine, and the update's
 * gradient norm + engine step (DeepSpeed's ZeRO step computes the norm); then prints the profile
 * (src/report/flops_profile.h) to stdout, or to output_file instead, as DeepSpeed does. Every other update costs one
 * comparison.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../model/t5.h"
#include "../../model/t5_config.h"
#include "../base/dtype.h"

typedef struct {
    bool enabled;
    int64_t profile_step;          // DeepSpeed's default 1
    int module_depth;              // -1
    int top_modules;               // 1
    bool detailed;                 // true
    double recompute_fwd_factor;   // 0
    char output_file[512];         // "": stdout
} FlopsProfilerArgs;

typedef struct FlopsProfiler FlopsProfiler;

// NULL when !a->enabled or rank != 0. Creates the events.
FlopsProfiler* flops_profiler_create(const FlopsProfilerArgs* a, const T5Config* cfg, DType dtype, bool tf32,
                                     int world_size, int rank);
void flops_profiler_destroy(FlopsProfiler* p);
// Whether the update after global_step updates is profiled.
bool flops_profiler_due(const FlopsProfiler* p, int64_t global_step);
// Around the first micro-batch of a profiled update: before its forward (the batch's shape), after its forward,
// after its gradients were handed to the engine.
void flops_profiler_forward_begin(FlopsProfiler* p, T5Model* M, int64_t B, int64_t S, int64_t T, cudaStream_t s);
void flops_profiler_forward_end(FlopsProfiler* p, T5Model* M);
void flops_profiler_backward_end(FlopsProfiler* p, cudaStream_t s);
// Around the gradient norm and the engine's step of the profiled update; step_end waits for it and prints the profile. 0, or -1 with a
// message in err (output_file cannot be written).
void flops_profiler_step_begin(FlopsProfiler* p, cudaStream_t s);
int flops_profiler_step_end(FlopsProfiler* p, int64_t global_step, cudaStream_t s, char* err, size_t errlen);
