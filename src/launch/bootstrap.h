/*
 * bootstrap.h: one process of a multi-process run gets its rank, world size, local rank and rank 0's
 * NCCL unique id, by the launcher that started it:
 *   - mpirun (OpenMPI variables) with an MPI build: mpi_boot (MPI_Bcast of the id, STYLE 25);
 *   - otherwise (torchrun-style variables, srun, `t5train --num_gpus`, mpirun without an MPI build but
 *     with MASTER_ADDR/MASTER_PORT): the TCP rendezvous at MASTER_ADDR:MASTER_PORT (rendezvous.h);
 *   - one process: nothing to exchange.
 * Rank 0's id comes from a callback (ncclGetUniqueId in comm.c; random bytes for the CPU check), so
 * all of this runs without a GPU. Timeouts: T5TRAIN_RENDEZVOUS_TIMEOUT seconds (default 300).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "launch_env.h"
#include "mpi_boot.h"
#include "rendezvous.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int rank, world_size, local_rank, local_world_size;
    bool via_mpi;      // the id came through MPI
    Rdv* rdv;          // the TCP liveness channel (NULL under MPI and for one process)
    uint8_t id[RDV_ID_BYTES];
} Bootstrap;

// timeout_s <= 0: T5TRAIN_RENDEZVOUS_TIMEOUT or 300 s. Returns 0, or -1 with one sentence in err.
int launch_bootstrap(const LaunchEnv* env, uint64_t config_hash, double timeout_s, MpiBootMakeId make_id, void* ctx,
                     Bootstrap* b, char* err, size_t errlen);

// T5TRAIN_RENDEZVOUS_TIMEOUT / T5TRAIN_COLLECTIVE_TIMEOUT (seconds, > 0) or the default; -1 with err
// when set but not a positive number.
int launch_timeout_env(const char* name, double dflt, double* out, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
