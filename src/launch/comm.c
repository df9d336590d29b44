/*
 * comm.c: NCCL communicator setup and the watchdog (comm.h).
 */
#include "comm.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/check.h"
#include "../base/common.h"
#include "bootstrap.h"
#include "comms_log.h"

#define RING 256

typedef struct {
    const char* name;
    uint64_t seq;
    double t0;
    cudaEvent_t ev;
} InFlight;

struct LaunchComm {
    int rank, world, local_rank, device;
    ncclComm_t nccl;
    ncclComm_t nccl2;      // comm_nccl_second: the ZeRO engine's parameter gathers, on their own stream
    Bootstrap boot;
    double timeout;
    pthread_t thread;
    bool thread_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    InFlight ring[RING];
    int head, count;       // oldest at head
    uint64_t seq;
    const char* phase;     // "ncclCommInitRank" while it runs
    double phase_t0;
    volatile int stop;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int make_nccl_id(uint8_t id[MPI_BOOT_ID_BYTES], void* ctx, char* err, size_t errlen) {
    (void)ctx;
    ncclUniqueId u;
    _Static_assert(sizeof u == MPI_BOOT_ID_BYTES && sizeof u == RDV_ID_BYTES, "ncclUniqueId is 128 bytes");
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return t5_set_err(err, errlen, "ncclGetUniqueId: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
    memcpy(id, &u, sizeof u);
    return 0;
}

// every rank ends here: one line, the others told, NCCL aborted, exit 1
__attribute__((noreturn)) static void comm_fail(LaunchComm* c, const char* msg) {
    char line[768];
    snprintf(line, sizeof line, "rank %d: %s", c->rank, msg);
    fprintf(stderr, "t5train: error: %s\n", line);
    fflush(stderr);
    t5_error_reported = 1;
    if (c->boot.rdv) rdv_abort(c->boot.rdv, line);
    if (c->nccl2) ncclCommAbort(c->nccl2);
    if (c->nccl) ncclCommAbort(c->nccl);
    if (c->boot.via_mpi) mpi_boot_abort(T5_EXIT_FAILURE);
    _exit(T5_EXIT_FAILURE);
}

static void* watchdog(void* arg) {
    LaunchComm* c = (LaunchComm*)arg;
    char msg[640];
    while (!c->stop) {
        char why[512];
        // a rank that died or aborted (the relay from rank 0 names it)
        int pr = c->boot.rdv ? rdv_poll(c->boot.rdv, 100, why, sizeof why) : 1;
        if (pr < 0) {
            snprintf(msg, sizeof msg, "stopping: %s", why);
            comm_fail(c, msg);
        }
        if (pr > 0) usleep(100 * 1000);  // no channel, or every peer finished: poll NCCL at the same pace
        pthread_mutex_lock(&c->mu);
        const char* cur = c->count ? c->ring[c->head].name : c->phase ? c->phase : "no collective (between collectives)";
        uint64_t seq = c->count ? c->ring[c->head].seq : 0;
        for (int k = 0; k < 2; k++) {
            ncclComm_t nc = k ? c->nccl2 : c->nccl;
            if (!nc) continue;
            ncclResult_t st = ncclSuccess;
            ncclResult_t q = ncclCommGetAsyncError(nc, &st);
            if (q != ncclSuccess) st = q;
            if (st != ncclSuccess && st != ncclInProgress) {
                snprintf(msg, sizeof msg, "NCCL error in %s (#%llu): %s (%s)", cur, (unsigned long long)seq,
                         ncclGetErrorString(st), ncclGetLastError(nc));
                pthread_mutex_unlock(&c->mu);
                comm_fail(c, msg);
            }
        }
        // retire completed collectives; the oldest one past the timeout ends the run
        while (c->count) {
            InFlight* f = &c->ring[c->head];
            cudaError_t e = cudaEventQuery(f->ev);
            if (e == cudaSuccess) {
                c->head = (c->head + 1) % RING;
                c->count--;
                pthread_cond_broadcast(&c->cv);
                continue;
            }
            if (e != cudaErrorNotReady) {
                snprintf(msg, sizeof msg, "CUDA error while %s (#%llu) ran: %s", f->name, (unsigned long long)f->seq,
                         cudaGetErrorString(e));
                pthread_mutex_unlock(&c->mu);
                comm_fail(c, msg);
            }
            if (now_s() - f->t0 > c->timeout) {
                snprintf(msg, sizeof msg, "%s (#%llu) did not complete within %g s (another rank died or hangs; "
                         "T5TRAIN_COLLECTIVE_TIMEOUT sets the limit)", f->name, (unsigned long long)f->seq, c->timeout);
                pthread_mutex_unlock(&c->mu);
                comm_fail(c, msg);
            }
            break;
        }
        if (c->phase && now_s() - c->phase_t0 > c->timeout) {
            snprintf(msg, sizeof msg, "%s did not complete within %g s (another rank died or hangs)", c->phase,
                     c->timeout);
            pthread_mutex_unlock(&c->mu);
            comm_fail(c, msg);
        }
        pthread_mutex_unlock(&c->mu);
    }
    return NULL;
}

LaunchComm* comm_init(const LaunchEnv* env, uint64_t config_hash, char* err, size_t errlen) {
    LaunchComm* c = (LaunchComm*)calloc_check(1, sizeof(LaunchComm));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (launch_timeout_env("T5TRAIN_COLLECTIVE_TIMEOUT", 1800, &c->timeout, err, errlen)) goto fail;
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev < 1) {
        t5_set_err(err, errlen, "rank %d: no CUDA device (%s)", env->rank, cudaGetErrorString(ce));
        goto fail;
    }
    if (launch_bootstrap(env, config_hash, 0, make_nccl_id, NULL, &c->boot, err, errlen)) goto fail;
    c->rank = c->boot.rank;
    c->world = c->boot.world_size;
    c->local_rank = c->boot.local_rank;
    t5_rank = c->rank;
    if (c->local_rank >= ndev) {
        const char* cvd = getenv("CUDA_VISIBLE_DEVICES");
        t5_set_err(err, errlen, "rank %d has local rank %d but this process sees %d GPU%s (CUDA_VISIBLE_DEVICES=%s): "
                   "start at most %d ranks on this host",
                   c->rank, c->local_rank, ndev, ndev > 1 ? "s" : "", cvd ? cvd : "unset", ndev);
        if (c->boot.rdv) rdv_abort(c->boot.rdv, err);
        goto fail;
    }
    c->device = c->local_rank;
    if ((ce = cudaSetDevice(c->device)) != cudaSuccess) {
        t5_set_err(err, errlen, "rank %d: cudaSetDevice(%d): %s", c->rank, c->device, cudaGetErrorString(ce));
        goto fail;
    }
    if (c->world == 1) return c;
    for (int i = 0; i < RING; i++)
        if ((ce = cudaEventCreateWithFlags(&c->ring[i].ev, cudaEventDisableTiming)) != cudaSuccess) {
            t5_set_err(err, errlen, "rank %d: cudaEventCreate: %s", c->rank, cudaGetErrorString(ce));
            goto fail;
        }
    // the watchdog already watches the communicator's setup: a rank that never joins ends us too
    c->phase = "ncclCommInitRank";
    c->phase_t0 = now_s();
    if (pthread_create(&c->thread, NULL, watchdog, c) != 0) {
        t5_set_err(err, errlen, "rank %d: cannot start the NCCL watchdog thread", c->rank);
        goto fail;
    }
    c->thread_on = true;
    ncclUniqueId u;
    memcpy(&u, c->boot.id, sizeof u);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, c->world, u, c->rank);
    if (r != ncclSuccess) {
        t5_set_err(err, errlen, "rank %d: ncclCommInitRank (%d ranks): %s (%s)", c->rank, c->world, ncclGetErrorString(r),
                   ncclGetLastError(NULL));
        if (c->boot.rdv) rdv_abort(c->boot.rdv, err);
        goto fail;
    }
    pthread_mutex_lock(&c->mu);
    c->nccl = comm;
    c->phase = NULL;
    pthread_mutex_unlock(&c->mu);
    return c;
fail:
    if (c->thread_on) {
        c->stop = 1;
        pthread_join(c->thread, NULL);
    }
    rdv_close(c->boot.rdv);
    free(c);
    return NULL;
}

int comm_rank(const LaunchComm* c) { return c->rank; }
int comm_world_size(const LaunchComm* c) { return c->world; }
int comm_local_rank(const LaunchComm* c) { return c->local_rank; }
int comm_local_world_size(const LaunchComm* c) { return c->world == 1 ? 1 : c->boot.local_world_size; }
ncclComm_t comm_nccl(const LaunchComm* c) { return c->nccl; }

ncclComm_t comm_nccl_second(LaunchComm* c) {
    if (!c || c->world == 1) return NULL;
    if (c->nccl2) return c->nccl2;
    pthread_mutex_lock(&c->mu);
    c->phase = "ncclCommSplit";
    c->phase_t0 = now_s();
    pthread_mutex_unlock(&c->mu);
    ncclComm_t n2 = NULL;
    ncclResult_t r = ncclCommSplit(c->nccl, 0, c->rank, &n2, NULL);
    if (r != ncclSuccess) {
        char msg[512];
        snprintf(msg, sizeof msg, "ncclCommSplit: %s (%s)", ncclGetErrorString(r), ncclGetLastError(c->nccl));
        comm_fail(c, msg);
    }
    pthread_mutex_lock(&c->mu);
    c->nccl2 = n2;
    c->phase = NULL;
    pthread_mutex_unlock(&c->mu);
    return n2;
}

void comm_barrier(LaunchComm* c) {
    if (!c || c->world == 1) return;
    int* d = NULL;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc((void**)&d, sizeof *d) != cudaSuccess ||
        cudaMemset(d, 0, sizeof *d) != cudaSuccess)
        comm_fail(c, "cannot allocate the barrier's buffer on the GPU");
    const int ev = comms_log_begin(COMMS_BARRIER, 0, "a barrier", s);  // DeepSpeed's barrier: no tensor, size 0
    comm_check(c, ncclAllReduce(d, d, 1, ncclInt32, ncclSum, c->nccl, s), "a barrier");
    comms_log_end(ev, s);
    comm_collective_enqueued(c, "a barrier", s);
    if (cudaStreamSynchronize(s) != cudaSuccess) comm_fail(c, "a barrier failed on the GPU");
    cudaFree(d);
    cudaStreamDestroy(s);
}

void comm_check(LaunchComm* c, ncclResult_t r, const char* collective) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    char msg[512];
    snprintf(msg, sizeof msg, "NCCL error in %s: %s (%s)", collective, ncclGetErrorString(r), ncclGetLastError(NULL));
    comm_fail(c, msg);
}

void comm_collective_enqueued(LaunchComm* c, const char* name, cudaStream_t s) {
    if (!c || c->world == 1) return;
    pthread_mutex_lock(&c->mu);
    while (c->count == RING) pthread_cond_wait(&c->cv, &c->mu);
    InFlight* f = &c->ring[(c->head + c->count) % RING];
    f->name = name;
    f->seq = ++c->seq;
    f->t0 = now_s();
    cudaError_t e = cudaEventRecord(f->ev, s);
    c->count++;
    pthread_mutex_unlock(&c->mu);
    if (e != cudaSuccess) {
        char msg[256];
        snprintf(msg, sizeof msg, "cudaEventRecord after %s: %s", name, cudaGetErrorString(e));
        comm_fail(c, msg);
    }
}

void comm_all_reduce_sum_f32(LaunchComm* c, float* d, size_t n, cudaStream_t s) {
    if (!c || c->world == 1) return;
    static const char* name = "an all-reduce of the step's statistics";
    const int ev = comms_log_begin(COMMS_ALL_REDUCE, n * sizeof *d, name, s);
    comm_check(c, ncclAllReduce(d, d, n, ncclFloat32, ncclSum, c->nccl, s), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c, name, s);
}

// one int all-reduced through the GPU; comms_logger records it as `lop` of `bytes` under `name`
static int host_i32(LaunchComm* c, int v, ncclRedOp_t op, CommsOp lop, uint64_t bytes, const char* name,
                    cudaStream_t s) {
    if (!c || c->world == 1) return v;
    int* d = NULL;
    CUDA_CHECK(cudaMallocAsync((void**)&d, sizeof(int), s));
    CUDA_CHECK(cudaMemcpyAsync(d, &v, sizeof v, cudaMemcpyHostToDevice, s));
    const int ev = comms_log_begin(lop, bytes, name, s);
    comm_check(c, ncclAllReduce(d, d, 1, ncclInt32, op, c->nccl, s), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c, name, s);
    int out = 0;
    CUDA_CHECK(cudaMemcpyAsync(&out, d, sizeof out, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaFreeAsync(d, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return out;
}

int comm_host_i32(LaunchComm* c, int v, ncclRedOp_t op, cudaStream_t s) {
    return host_i32(c, v, op, COMMS_ALL_REDUCE, sizeof(int), "an all-reduce of a host decision", s);
}

// elem bytes per element of type t (4 for both callers)
static void all_gather_host(LaunchComm* c, const void* mine, size_t n, void* all, ncclDataType_t t, size_t elem,
                            cudaStream_t s) {
    if (!c || c->world == 1) {
        if (n) memmove(all, mine, n * elem);
        return;
    }
    static const char* name = "an all-gather of evaluation results";
    const size_t total = n * (size_t)c->world;
    char* d = NULL;
    CUDA_CHECK(cudaMallocAsync((void**)&d, total ? total * elem : elem, s));
    CUDA_CHECK(cudaMemcpyAsync(d + (size_t)c->rank * n * elem, mine, n * elem, cudaMemcpyHostToDevice, s));
    // in place: this rank's piece already sits in its slot of the receive buffer
    const int ev = comms_log_begin(COMMS_ALL_GATHER, n * elem, name, s);
    comm_check(c, ncclAllGather(d + (size_t)c->rank * n * elem, d, n, t, c->nccl, s), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c, name, s);
    CUDA_CHECK(cudaMemcpyAsync(all, d, total * elem, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaFreeAsync(d, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

void comm_all_gather_host_i32(LaunchComm* c, const int32_t* mine, size_t n, int32_t* all, cudaStream_t s) {
    all_gather_host(c, mine, n, all, ncclInt32, sizeof *mine, s);
}

void comm_all_gather_host_f32(LaunchComm* c, const float* mine, size_t n, float* all, cudaStream_t s) {
    all_gather_host(c, mine, n, all, ncclFloat32, sizeof *mine, s);
}

int comm_from_rank0(LaunchComm* c, int v, cudaStream_t s) {
    return comm_host_i32(c, !c || c->rank == 0 ? v : INT_MIN, ncclMax, s);
}

bool comm_agree(LaunchComm* c, bool mine, cudaStream_t s) { return comm_host_i32(c, mine ? 1 : 0, ncclMin, s) != 0; }

// DeepSpeed's dist.barrier() at the same places (a checkpoint's commit): comms_logger's "barrier", size 0
void comm_barrier_on(LaunchComm* c, cudaStream_t s) { (void)host_i32(c, 1, ncclMin, COMMS_BARRIER, 0, "a barrier", s); }

void comm_finish(LaunchComm* c) {
    if (!c) return;
    if (c->thread_on) {
        pthread_mutex_lock(&c->mu);
        while (c->count) pthread_cond_wait(&c->cv, &c->mu);  // the watchdog retires them (or fails the run)
        pthread_mutex_unlock(&c->mu);
        c->stop = 1;
        pthread_join(c->thread, NULL);
    }
    if (c->nccl2) ncclCommDestroy(c->nccl2);
    if (c->nccl) ncclCommDestroy(c->nccl);
    for (int i = 0; i < RING && c->world > 1; i++)
        if (c->ring[i].ev) cudaEventDestroy(c->ring[i].ev);
    rdv_finish(c->boot.rdv);
    if (c->boot.via_mpi) mpi_boot_finalize();
    free(c);
}
