/*
 * coll.h: the ZeRO engine's collectives over NCCL (several ranks), each registered with the launch watchdog
 * (src/launch/comm.h) so that a failing or hanging collective ends every rank with its name, and timed for
 * deepspeed.comms_logger when it is on (src/launch/comms_log.h: CUDA events around the NCCL call, read lazily).
 *
 * Two communicators over the same ranks, one per stream, so that no two streams race on one communicator (the
 * ranks must issue each communicator's collectives in one order, and its kernels must run in that order):
 *   main    gradient reduce-scatters (s_grad, or the compute stream without overlap_comm), the norm / overflow /
 *           loss all-reduces and the gathers for saving (compute stream, after it waited for s_grad)
 *   params  parameter all-gathers and the fp32 views' broadcasts (s_gather)
 * Every collective is issued by the thread that drives the model, in an order that depends only on the model
 * and the data, never on timing (the CPU optimizer thread issues none).
 */
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdbool.h>
#include <stddef.h>

#include "../base/dtype.h"

struct LaunchComm;

typedef struct {
    int world, rank;
    struct LaunchComm* lc;
    ncclComm_t main;
    ncclComm_t params;
} ZeroColl;

// world 1 (lc NULL or one rank): every field zero but world = 1. Several ranks: `params` is made here
// (ncclCommSplit: every rank calls this at the same point).
void zcoll_init(ZeroColl* c, struct LaunchComm* lc);
ncclDataType_t zcoll_dtype(DType t);
// in place: rank r's per_rank elements sit at buf + r * per_rank
void zcoll_all_gather(const ZeroColl* c, ncclComm_t comm, void* buf, size_t per_rank, DType t, cudaStream_t s,
                      const char* name);
// send: world x recv_count elements, rank after rank; recv: this rank's sum
void zcoll_reduce_scatter(const ZeroColl* c, const void* send, void* recv, size_t recv_count, DType t, cudaStream_t s,
                          const char* name);
// one group of in-place fp32 broadcasts: ptr[i] (count[i] floats) from rank root[i]
void zcoll_broadcast_group(const ZeroColl* c, ncclComm_t comm, int n, float* const* ptr, const size_t* count,
                           const int* root, cudaStream_t s, const char* name);
void zcoll_all_reduce(const ZeroColl* c, void* buf, size_t n, DType t, ncclRedOp_t op, cudaStream_t s,
                      const char* name);
// in place, fp64 SUM on `main` (NCCL's all-reduce hands every rank the same bits: each element is reduced once
// and the result copied to the others)
void zcoll_all_reduce_f64(const ZeroColl* c, double* buf, size_t n, cudaStream_t s, const char* name);
void zcoll_all_reduce_i32(const ZeroColl* c, int* buf, size_t n, ncclRedOp_t op, cudaStream_t s, const char* name);
// true only when every rank passes true (synchronous; src/launch/comm.h comm_agree)
bool zcoll_agree(const ZeroColl* c, bool mine, cudaStream_t s);
