/*
 * mpi_boot.c: the MPI bootstrap (mpi_boot.h).
 */
#include "mpi_boot.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../base/common.h"
#include "launch_env.h"

#ifdef T5_HAVE_MPI
#include <mpi.h>

static bool g_inited;

bool mpi_boot_built(void) { return true; }

int mpi_boot(uint64_t config_hash, MpiBootMakeId make_id, void* ctx, int* rank, int* world, int* local_rank,
             int* local_world, uint8_t id[MPI_BOOT_ID_BYTES], char* err, size_t errlen) {
    int flag = 0;
    MPI_Initialized(&flag);
    if (!flag) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS) return t5_set_err(err, errlen, "MPI_Init failed");
        g_inited = true;
    }
    int r, w;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &w);
    // host-name hashes -> local rank (nccl-tests' getHostHash), plus each rank's config hash
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t mine[2] = {launch_hash64(host, strlen(host), 0), config_hash};
    uint64_t* all = (uint64_t*)malloc_check((size_t)w * 2 * sizeof(uint64_t));
    MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD);
    int lr = 0, lw = 0, differs = -1;
    for (int k = 0; k < w; k++) {
        if (all[2 * k] == mine[0]) {
            if (k < r) lr++;
            lw++;
        }
        if (differs < 0 && all[2 * k + 1] != all[1]) differs = k;
    }
    free(all);
    if (differs >= 0)
        return t5_set_err(err, errlen, "rank %d runs a different configuration than rank 0 (config hash differs): give "
                                       "every rank the same config and flags",
                          differs);
    // rank 0 makes the id; its success travels with it so that every rank fails together
    uint8_t msg[MPI_BOOT_ID_BYTES + 256] = {0};
    if (r == 0) {
        char e[256] = "";
        if (make_id(msg, ctx, e, sizeof e) != 0) {
            msg[MPI_BOOT_ID_BYTES] = 1;
            snprintf((char*)msg + MPI_BOOT_ID_BYTES + 1, 255, "rank 0: %s", e);
        }
    }
    MPI_Bcast(msg, (int)sizeof msg, MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (msg[MPI_BOOT_ID_BYTES]) return t5_set_err(err, errlen, "%s", (char*)msg + MPI_BOOT_ID_BYTES + 1);
    memcpy(id, msg, MPI_BOOT_ID_BYTES);
    *rank = r;
    *world = w;
    *local_rank = lr;
    *local_world = lw;
    return 0;
}

void mpi_boot_finalize(void) {
    int fin = 0;
    if (g_inited && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) MPI_Finalize();
}

void mpi_boot_abort(int code) {
    if (g_inited) MPI_Abort(MPI_COMM_WORLD, code);
}

#else  // built without MPI

bool mpi_boot_built(void) { return false; }

int mpi_boot(uint64_t config_hash, MpiBootMakeId make_id, void* ctx, int* rank, int* world, int* local_rank,
             int* local_world, uint8_t id[MPI_BOOT_ID_BYTES], char* err, size_t errlen) {
    (void)config_hash, (void)make_id, (void)ctx, (void)rank, (void)world, (void)local_rank, (void)local_world, (void)id;
    return t5_set_err(err, errlen, "this t5train was built without MPI (make MPI=1 with mpicc on the PATH): under mpirun, "
                                   "set MASTER_ADDR and MASTER_PORT (mpirun -x MASTER_ADDR=HOST -x MASTER_PORT=PORT) for "
                                   "the TCP rendezvous instead");
}

void mpi_boot_finalize(void) {}
void mpi_boot_abort(int code) { (void)code; }

#endif
