/*
 * oom.h: out of memory explained (issue 17 item 4, DESIGN invariant 8) for an allocation that fails while
 * the run is under way (a gathered stage-3 unit, a gradient buffer, a workspace, a pinned host buffer): one
 * sentence naming the buffer, the bytes it needed, what was free, and what the run's advice hook says (set by
 * the front end: src/cli's planner, the estimate for this job and a plan predicted to fit), then exit 1.
 *
 *   CUDA_ALLOC_CHECK(cudaMallocAsync(&p, n, s), "stage 3 gathered unit decoder.block.3", n);
 *   CUDA_HOST_ALLOC_CHECK(cudaMallocHost(&p, n), "pinned Adam state", n);
 *
 * A plain CUDA_CHECK that fails with "out of memory" (cudaErrorMemoryAllocation) gets the same sentence, naming
 * the statement instead of the buffer (t5_check_failed calls the hook installed by t5_oom_set_advice); other
 * CUDA errors keep the [CUDA ERROR] line.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// The run's advice: appends "; ..." text to buf (may leave it empty). ctx is handed back as given.
typedef void (*T5OomAdvice)(const void* ctx, char* buf, size_t len);

// Installs the advice (NULL: none) and routes CUDA_CHECK's out-of-memory failures to t5_oom_die.
void t5_oom_set_advice(T5OomAdvice fn, const void* ctx);

// The sentence, without the "t5train: error: " prefix (pure: the CPU test checks it).
//   host:     false: GPU memory (free/total from cudaMemGetInfo), true: pinned host memory (avail: MemAvailable
//             or the cgroup limit, total unused)
//   what:     the buffer ("stage 3 gathered unit decoder.block.3") or, from CUDA_CHECK, the statement
//   bytes:    what it needed, 0 when unknown (CUDA_CHECK)
//   have_mem: false when the free memory could not be read
//   advice:   the hook's text ("; the estimate ...; set ...") or NULL
// Returns the length written (as snprintf).
int t5_oom_format(char* buf, size_t len, bool host, const char* what, size_t bytes, bool have_mem, size_t free_b,
                  size_t total_b, const char* advice);

// Prints the sentence (free memory read now, the advice hook asked) and exits with T5_EXIT_FAILURE.
__attribute__((noreturn)) void t5_oom_die(bool host, const char* what, size_t bytes);

#ifdef __cplusplus
}
#endif

#define T5_ALLOC_CHECK_GEN_(host, stmt, what, bytes)                                                  \
    do {                                                                                              \
        cudaError_t t5_alloc_status_ = (stmt);                                                        \
        if (t5_alloc_status_ == cudaErrorMemoryAllocation) {                                          \
            (void)cudaGetLastError();                                                                 \
            t5_oom_die(host, what, bytes);                                                            \
        }                                                                                             \
        if (t5_alloc_status_ != cudaSuccess)                                                          \
            t5_check_failed("CUDA", #stmt, cudaGetErrorString(t5_alloc_status_), __FILE__, __LINE__, __func__); \
    } while (0)
#define CUDA_ALLOC_CHECK(stmt, what, bytes) T5_ALLOC_CHECK_GEN_(false, stmt, what, bytes)
#define CUDA_HOST_ALLOC_CHECK(stmt, what, bytes) T5_ALLOC_CHECK_GEN_(true, stmt, what, bytes)
