/*
 * mpi_boot.h: the bootstrap under mpirun, as nccl-tests does it (STYLE 25): rank and size from MPI,
 * the local rank from an allgather of host-name hashes, the ranks' config hashes compared, and rank 0's
 * NCCL unique id sent with MPI_Bcast followed by a barrier. Built with MPI only (make MPI=auto finds
 * mpicc; T5_HAVE_MPI); without it, mpi_boot_built() is false and mpi_boot() says how to run instead.
 * No CUDA or NCCL here: rank 0's id comes from a callback, so the exchange runs on the CPU
 * (t5train launch-check under mpirun).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPI_BOOT_ID_BYTES 128

// Was this binary built with MPI?
bool mpi_boot_built(void);

typedef int (*MpiBootMakeId)(uint8_t id[MPI_BOOT_ID_BYTES], void* ctx, char* err, size_t errlen);

// MPI_Init, then rank/world/local rank/local world from MPI and the host names; the config hashes of all
// ranks must agree (the message names the first rank that differs); rank 0 calls make_id and every rank
// gets the id. Returns 0, or -1 with one sentence in err (the same on every rank where it can be).
int mpi_boot(uint64_t config_hash, MpiBootMakeId make_id, void* ctx, int* rank, int* world, int* local_rank,
             int* local_world, uint8_t id[MPI_BOOT_ID_BYTES], char* err, size_t errlen);

// MPI_Finalize (no-op when mpi_boot did not initialise MPI).
void mpi_boot_finalize(void);
// MPI_Abort of the whole job (no-op without MPI).
void mpi_boot_abort(int code);

#ifdef __cplusplus
}
#endif
