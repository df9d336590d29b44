/*
 * check.h: CUDA_CHECK, CUBLAS_CHECK, NCCL_CHECK for host code (C or CUDA), built from the one
 * generic T5_CHECK_GEN in src/base/common.h. A failure prints
 *   [CUDA ERROR] rank R host H file:line func: <stmt> -> <message>
 * and aborts. With DEBUG=1 (T5_DEBUG), CUDA_LAUNCH_CHECK also synchronises the device so a
 * faulting kernel is reported at its own launch.
 */
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif
const char* t5_cublas_status_string(cublasStatus_t s);
#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(stmt) T5_CHECK_GEN("CUDA", stmt, cudaSuccess, cudaGetErrorString)
#define CUBLAS_CHECK(stmt) T5_CHECK_GEN("CUBLAS", stmt, CUBLAS_STATUS_SUCCESS, t5_cublas_status_string)
#define NCCL_CHECK(stmt) T5_CHECK_GEN("NCCL", stmt, ncclSuccess, ncclGetErrorString)

#if defined(T5_DEBUG) && T5_DEBUG
#define CUDA_LAUNCH_CHECK()                       \
    do {                                          \
        CUDA_CHECK(cudaGetLastError());           \
        CUDA_CHECK(cudaDeviceSynchronize());      \
    } while (0)
#else
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
#endif
