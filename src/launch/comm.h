/*
 * comm.h: the NCCL communicator of a multi-process run and the watchdog that ends every rank, with a
 * sentence naming the rank and the collective, when NCCL fails or a rank dies: never a hang.
 *
 * comm_init: the launcher environment (launch_env.h), the GPU of this local rank (checked against the
 * devices this process sees: CUDA_VISIBLE_DEVICES), the bootstrap (bootstrap.h: MPI or the TCP
 * rendezvous; rank 0 makes the id with ncclGetUniqueId), ncclCommInitRank, then a watchdog thread
 * that every 100 ms
 *   - asks ncclCommGetAsyncError (an NCCL error: the rank, the collective in flight, NCCL's text);
 *   - polls the rendezvous liveness channel (a rank that exited, or aborted, named by rank 0);
 *   - checks the oldest collective in flight (comm_collective_enqueued records an event after it):
 *     not complete within T5TRAIN_COLLECTIVE_TIMEOUT seconds (default 1800, HF's ddp_timeout) ->
 *     "rank R: <collective> #N did not complete within T s".
 * On any of these: one "t5train: error: rank R: ..." line, the other ranks told (rdv_abort, or
 * MPI_Abort under MPI), ncclCommAbort, exit 1. ncclCommInitRank itself is watched the same way.
 * world_size 1: no NCCL communicator at all (comm_nccl returns NULL), nothing to watch.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "launch_env.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LaunchComm LaunchComm;

// config_hash: hash of the resolved config (ranks must agree). NULL + one sentence in err on failure.
LaunchComm* comm_init(const LaunchEnv* env, uint64_t config_hash, char* err, size_t errlen);

int comm_rank(const LaunchComm* c);
int comm_world_size(const LaunchComm* c);
int comm_local_rank(const LaunchComm* c);
int comm_local_world_size(const LaunchComm* c);  // ranks on this host
ncclComm_t comm_nccl(const LaunchComm* c);  // NULL for one rank
// A second communicator over the same ranks (ncclCommSplit, made on the first call: every rank calls it at the
// same point), for collectives on another stream than comm_nccl's: each communicator's collectives are issued
// on one stream in the same order on every rank, so no two streams race on one communicator. Watched and
// aborted with the first. NULL for one rank.
ncclComm_t comm_nccl_second(LaunchComm* c);
// Every rank reaches this point (an all-reduce on its own stream, synchronous). One rank: nothing.
void comm_barrier(LaunchComm* c);
// ---- the trainer's collectives: on comm_nccl's communicator, ordered on stream s after the work before them
// (c NULL or one rank: local, no NCCL). The host ones are synchronous: decisions every rank takes alike.
// d (n) fp32 on the device, in place: the sum over the ranks (the step's losses)
void comm_all_reduce_sum_f32(LaunchComm* c, float* d, size_t n, cudaStream_t s);
// v reduced over the ranks by op (ncclMax, ncclMin, ...), on the host
int comm_host_i32(LaunchComm* c, int v, ncclRedOp_t op, cudaStream_t s);
// mine (n) on the host of every rank, rank after rank, into all (world * n) on the host of every rank (sharded
// evaluation's results, src/eval/shard.h); synchronous. One rank: a copy.
void comm_all_gather_host_i32(LaunchComm* c, const int32_t* mine, size_t n, int32_t* all, cudaStream_t s);
void comm_all_gather_host_f32(LaunchComm* c, const float* mine, size_t n, float* all, cudaStream_t s);
// rank 0's v on every rank
int comm_from_rank0(LaunchComm* c, int v, cudaStream_t s);
// true only when every rank passes true
bool comm_agree(LaunchComm* c, bool mine, cudaStream_t s);
// every rank reaches this point, after the work already on s (comm_barrier: on a stream of its own)
void comm_barrier_on(LaunchComm* c, cudaStream_t s);

// An NCCL call's return value: anything but success ends every rank naming the collective (comm_fail).
void comm_check(LaunchComm* c, ncclResult_t r, const char* collective);

// Call right after enqueuing a collective on stream s: the watchdog times it and names it (`name` must
// outlive the collective: a string literal). Blocks while 256 collectives are in flight.
void comm_collective_enqueued(LaunchComm* c, const char* name, cudaStream_t s);

// Orderly end: waits for the collectives in flight, tells the peers, destroys the communicator.
void comm_finish(LaunchComm* c);

#ifdef __cplusplus
}
#endif
