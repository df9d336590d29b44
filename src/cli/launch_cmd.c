/*
 * launch_cmd.c: the launcher's front ends.
 *   t5train --num_gpus N [--master_port P] ARGS...   N ranks of `t5train ARGS...` on this host
 *                                                    (src/launch/local_launch.h), as `deepspeed --num_gpus N`
 *   t5train launch-check [--no_nccl]                 each rank bootstraps as a run would (MPI or the TCP
 *                                                    rendezvous) and prints one line: rank, world, local rank,
 *                                                    host, how the id came, a hash of the id; with NCCL (the
 *                                                    default) it also builds the communicator and all-reduces
 *                                                    one number. --no_nccl exchanges a random id instead, so
 *                                                    the launch environment is checked on machines without GPUs.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "../base/common.h"
#include "../launch/bootstrap.h"
#include "../launch/comm.h"
#include "../launch/launch_env.h"
#include "../launch/local_launch.h"
#include "../report/comms_summary.h"

bool launch_num_gpus_given(int argc, char** argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--num_gpus") == 0 || strncmp(argv[i], "--num_gpus=", 11) == 0) return true;
    return false;
}

int launch_main(int argc, char** argv) {
    char err[512];
    LocalLaunchOptions o;
    int n = local_launch_take_flags(argc, argv, &o, err, sizeof err);
    if (n < 0) t5_die(T5_EXIT_USAGE, "%s", err);
    LaunchEnv env;
    if (launch_env_parse(&env, NULL, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    if (env.world_size > 1)
        t5_die(T5_EXIT_USAGE, "--num_gpus %d inside rank %d of %d already started by %s: drop --num_gpus or the outer "
                              "launcher",
               o.nprocs, env.rank, env.world_size, launch_source_name(env.source));
    argv[0] = (char*)"/proc/self/exe";
    int rc = local_launch(&o, argv, err, sizeof err);
    if (rc < 0) t5_die(T5_EXIT_FAILURE, "%s", err);
    return rc;
}

static int random_id(uint8_t id[MPI_BOOT_ID_BYTES], void* ctx, char* err, size_t errlen) {
    (void)ctx;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, id, MPI_BOOT_ID_BYTES) != MPI_BOOT_ID_BYTES) {
        if (fd >= 0) close(fd);
        return t5_set_err(err, errlen, "cannot read /dev/urandom");
    }
    close(fd);
    return 0;
}

// nccl-tests' figures (STYLE: nccl-tests' performance.md): algbw = bytes / time; busbw = algbw x 2(n-1)/n for
// all-reduce, x (n-1)/n for all-gather and reduce-scatter (bytes: the whole buffer, n x a rank's piece)
static void bandwidth(LaunchComm* c, cudaStream_t s, size_t bytes) {
    const int n = comm_world_size(c), rank = comm_rank(c);
    const size_t count = bytes / 4 / (size_t)n * (size_t)n;
    float* buf = NULL;
    float* out = NULL;
    if (cudaMalloc((void**)&buf, count * 4) != cudaSuccess || cudaMalloc((void**)&out, count * 4) != cudaSuccess)
        t5_die(T5_EXIT_FAILURE, "rank %d: cannot allocate %zu MiB for the bandwidth test", rank, bytes >> 20);
    cudaMemset(buf, 0, count * 4);
    static const char* const names[3] = {"all-reduce", "all-gather", "reduce-scatter"};
    for (int k = 0; k < 3; k++) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        const int warm = 3, iters = 10;
        for (int it = 0; it < warm + iters; it++) {
            if (it == warm) cudaEventRecord(e0, s);
            ncclResult_t r = k == 0   ? ncclAllReduce(buf, out, count, ncclFloat32, ncclSum, comm_nccl(c), s)
                             : k == 1 ? ncclAllGather(buf, out, count / (size_t)n, ncclFloat32, comm_nccl(c), s)
                                      : ncclReduceScatter(buf, out, count / (size_t)n, ncclFloat32, ncclSum, comm_nccl(c), s);
            comm_check(c, r, names[k]);
            comm_collective_enqueued(c, names[k], s);
        }
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        const double t = ms / 1e3 / iters, algbw = (double)count * 4 / t / 1e9;
        const double busbw = algbw * comms_bus_factor(k == 0 ? COMMS_ALL_REDUCE : k == 1 ? COMMS_ALL_GATHER : COMMS_REDUCE_SCATTER, n);
        if (rank == 0)
            printf("rank 0: %s of %.0f MiB over %d ranks: %.3f ms, algbw %.1f GB/s, busbw %.1f GB/s\n", names[k],
                   (double)count * 4 / (1 << 20), n, t * 1e3, algbw, busbw);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    cudaFree(buf);
    cudaFree(out);
}

int launch_check_main(int argc, char** argv) {
    bool no_nccl = false;
    long bw_mib = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no_nccl") == 0) no_nccl = true;
        else if (strcmp(argv[i], "--bandwidth_mib") == 0 && i + 1 < argc) {
            char* end;
            bw_mib = strtol(argv[++i], &end, 10);
            if (*end || bw_mib < 1 || bw_mib > 65536)
                t5_die(T5_EXIT_USAGE, "launch-check: --bandwidth_mib %s: give 1..65536", argv[i]);
        }
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: t5train launch-check [--no_nccl] [--bandwidth_mib N]\n"
                   "  every rank bootstraps as a training run does and prints one line; --no_nccl exchanges a\n"
                   "  random id instead of building the NCCL communicator (no GPU needed); --bandwidth_mib N times\n"
                   "  all-reduce, all-gather and reduce-scatter of N MiB and prints nccl-tests' algbw and busbw\n");
            return T5_EXIT_OK;
        } else
            t5_die(T5_EXIT_USAGE, "launch-check: unknown argument '%s' (--no_nccl, --bandwidth_mib N, --help)", argv[i]);
    }
    char err[640];
    LaunchEnv env;
    if (launch_env_parse(&env, NULL, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    t5_rank = env.rank;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char* how = env.world_size == 1 ? "none" : "tcp";
    int rank, world, lrank;
    uint8_t id[MPI_BOOT_ID_BYTES] = {0};
    long long sum = -1;
    if (no_nccl) {
        Bootstrap b;
        if (launch_bootstrap(&env, 0, 0, random_id, NULL, &b, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
        rank = b.rank, world = b.world_size, lrank = b.local_rank;
        memcpy(id, b.id, sizeof id);
        if (b.via_mpi) how = "mpi";
        printf("rank %d of %d, local rank %d of %d, host %s, id via %s, id hash %016llx\n", rank, world, lrank,
               b.local_world_size, host, how, (unsigned long long)launch_hash64(id, sizeof id, 0));
        rdv_finish(b.rdv);
        if (b.via_mpi) mpi_boot_finalize();
        return T5_EXIT_OK;
    }
    LaunchComm* c = comm_init(&env, 0, err, sizeof err);
    if (!c) t5_die(T5_EXIT_FAILURE, "%s", err);
    rank = comm_rank(c), world = comm_world_size(c), lrank = comm_local_rank(c);
    if (world > 1) {
        long long* d = NULL;
        cudaStream_t s;
        if (cudaStreamCreate(&s) != cudaSuccess || cudaMalloc((void**)&d, sizeof *d) != cudaSuccess)
            t5_die(T5_EXIT_FAILURE, "rank %d: cannot allocate on GPU %d", rank, lrank);
        long long mine = rank + 1;
        cudaMemcpy(d, &mine, sizeof mine, cudaMemcpyHostToDevice);
        ncclResult_t r = ncclAllReduce(d, d, 1, ncclInt64, ncclSum, comm_nccl(c), s);
        if (r != ncclSuccess)
            t5_die(T5_EXIT_FAILURE, "rank %d: ncclAllReduce: %s", rank, ncclGetErrorString(r));
        comm_collective_enqueued(c, "launch-check all-reduce", s);
        if (cudaStreamSynchronize(s) != cudaSuccess || cudaMemcpy(&sum, d, sizeof sum, cudaMemcpyDeviceToHost) != cudaSuccess)
            t5_die(T5_EXIT_FAILURE, "rank %d: the all-reduce failed on the GPU", rank);
        cudaFree(d);
        if (bw_mib > 0) bandwidth(c, s, (size_t)bw_mib << 20);
        cudaStreamDestroy(s);
    }
    printf("rank %d of %d, local rank %d, host %s, GPU %d, NCCL all-reduce sum %lld (expected %lld)\n", rank, world,
           lrank, host, lrank, world > 1 ? sum : 1LL, (long long)world * (world + 1) / 2);
    bool ok = world == 1 || sum == (long long)world * (world + 1) / 2;
    comm_finish(c);
    if (!ok) t5_die(T5_EXIT_FAILURE, "rank %d: the all-reduce gave %lld", rank, sum);
    return T5_EXIT_OK;
}
