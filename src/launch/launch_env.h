/*
 * launch_env.h: this process's place in a multi-process run, read from the launcher's environment.
 *
 * One process per GPU. The launchers users already run set these variables:
 *   torchrun / deepspeed / `t5train --num_gpus N`:  RANK, WORLD_SIZE, LOCAL_RANK (LOCAL_WORLD_SIZE),
 *                                                   MASTER_ADDR, MASTER_PORT (TORCHELASTIC_RUN_ID)
 *   OpenMPI mpirun:                                 OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK (_LOCAL_SIZE)
 *   Slurm srun:                                     SLURM_PROCID, SLURM_NTASKS (SLURM_STEP_NUM_TASKS),
 *                                                   SLURM_LOCALID (SLURM_JOB_ID, SLURM_STEP_ID)
 *   MPICH / Intel MPI (hydra):                      PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
 * Precedence: torchrun-style variables, then OpenMPI, then MPICH (PMI), then Slurm (a torchrun or mpirun started inside
 * a Slurm allocation sees the allocation's SLURM_* too; the innermost launcher wins). No variables: a
 * single-process run (rank 0 of 1).
 *
 * Every bad or partial setting is one sentence naming the variable(s): a value that is not an integer,
 * rank outside [0, world), a local rank outside [0, local world) or >= world, RANK without WORLD_SIZE
 * (or the reverse), LOCAL_RANK without RANK, an srun-less Slurm batch script claiming several tasks, a
 * MASTER_PORT outside 1..65535, MASTER_ADDR without MASTER_PORT (or the reverse).
 * Pure C: no CUDA, no MPI, no sockets; CPU-tested (test/test_launch.c).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LAUNCH_SOURCE_NONE = 0,  // no launcher variables: rank 0 of 1
    LAUNCH_SOURCE_TORCHRUN,  // RANK / WORLD_SIZE (torchrun, deepspeed, t5train --num_gpus)
    LAUNCH_SOURCE_OPENMPI,   // OMPI_COMM_WORLD_*
    LAUNCH_SOURCE_SLURM,     // SLURM_PROCID / SLURM_NTASKS
    LAUNCH_SOURCE_PMI,       // PMI_RANK / PMI_SIZE (MPICH, Intel MPI: the TCP rendezvous, not MPI)
} LaunchSource;

typedef struct {
    LaunchSource source;
    int rank, world_size;
    int local_rank;          // -1 when the launcher does not say (MPI computes it from host names)
    int local_world_size;    // -1 when unknown
    bool have_master;        // MASTER_ADDR and MASTER_PORT both set
    char master_addr[256];
    int master_port;
    uint64_t run_nonce;      // hash of the launcher's run id (TORCHELASTIC_RUN_ID, T5TRAIN_RUN_ID,
                             // SLURM_JOB_ID.SLURM_STEP_ID); 0 when none: every rank agrees on it
    char run_id[128];        // the id it was hashed from ("" when none)
} LaunchEnv;

// envp: a NULL-terminated "NAME=value" array (NULL: this process's environ). Returns 0, or -1 with
// one sentence in err.
int launch_env_parse(LaunchEnv* e, const char* const* envp, char* err, size_t errlen);

// "torchrun-style variables (RANK/WORLD_SIZE)", "OpenMPI (OMPI_COMM_WORLD_*)", ...
const char* launch_source_name(LaunchSource s);

// FNV-1a 64 of a string (the run nonce, config hashes).
uint64_t launch_hash64(const void* data, size_t n, uint64_t seed);

// Parses a whole decimal integer in [lo, hi]; -1 when s is not one.
int launch_parse_int(const char* s, long lo, long hi, long* out);

#ifdef __cplusplus
}
#endif
