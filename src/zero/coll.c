/*
 * coll.c: the ZeRO engine's collectives (coll.h).
 */
#include "coll.h"

#include <string.h>

#include "../base/check.h"
#include "../base/common.h"
#include "../launch/comm.h"
#include "../launch/comms_log.h"

void zcoll_init(ZeroColl* c, struct LaunchComm* lc) {
    memset(c, 0, sizeof *c);
    c->world = 1;
    if (!lc || comm_world_size(lc) == 1) return;
    c->lc = lc;
    c->world = comm_world_size(lc);
    c->rank = comm_rank(lc);
    c->main = comm_nccl(lc);
    c->params = comm_nccl_second(lc);
}

ncclDataType_t zcoll_dtype(DType t) {
    return t == DT_F32 ? ncclFloat32 : t == DT_F16 ? ncclFloat16 : ncclBfloat16;
}

void zcoll_all_gather(const ZeroColl* c, ncclComm_t comm, void* buf, size_t per_rank, DType t, cudaStream_t s,
                      const char* name) {
    const void* send = (const char*)buf + (size_t)c->rank * per_rank * dtype_size(t);
    const int ev = comms_log_begin(COMMS_ALL_GATHER, per_rank * dtype_size(t), name, s);  // this rank's piece
    comm_check(c->lc, ncclAllGather(send, buf, per_rank, zcoll_dtype(t), comm, s), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c->lc, name, s);
}

void zcoll_reduce_scatter(const ZeroColl* c, const void* send, void* recv, size_t recv_count, DType t, cudaStream_t s,
                          const char* name) {
    // DeepSpeed's msg size of reduce_scatter_tensor: the whole input
    const int ev = comms_log_begin(COMMS_REDUCE_SCATTER, (uint64_t)c->world * recv_count * dtype_size(t), name, s);
    comm_check(c->lc, ncclReduceScatter(send, recv, recv_count, zcoll_dtype(t), ncclSum, c->main, s), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c->lc, name, s);
}

void zcoll_all_reduce(const ZeroColl* c, void* buf, size_t n, DType t, ncclRedOp_t op, cudaStream_t s,
                      const char* name) {
    const int ev = comms_log_begin(COMMS_ALL_REDUCE, n * dtype_size(t), name, s);
    comm_check(c->lc, ncclAllReduce(buf, buf, n, zcoll_dtype(t), op, c->main, s), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c->lc, name, s);
}

void zcoll_all_reduce_f64(const ZeroColl* c, double* buf, size_t n, cudaStream_t s, const char* name) {
    const int ev = comms_log_begin(COMMS_ALL_REDUCE, n * sizeof *buf, name, s);
    comm_check(c->lc, ncclAllReduce(buf, buf, n, ncclFloat64, ncclSum, c->main, s), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c->lc, name, s);
}

void zcoll_all_reduce_i32(const ZeroColl* c, int* buf, size_t n, ncclRedOp_t op, cudaStream_t s, const char* name) {
    const int ev = comms_log_begin(COMMS_ALL_REDUCE, n * sizeof *buf, name, s);
    comm_check(c->lc, ncclAllReduce(buf, buf, n, ncclInt32, op, c->main, s), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c->lc, name, s);
}

bool zcoll_agree(const ZeroColl* c, bool mine, cudaStream_t s) { return comm_agree(c->lc, mine, s); }

void zcoll_broadcast_group(const ZeroColl* c, ncclComm_t comm, int n, float* const* ptr, const size_t* count,
                           const int* root, cudaStream_t s, const char* name) {
    if (n == 0) return;
    // one group runs as one kernel: timed as one broadcast of all its bytes
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += count[i] * sizeof(float);
    const int ev = comms_log_begin(COMMS_BROADCAST, bytes, name, s);
    comm_check(c->lc, ncclGroupStart(), name);
    for (int i = 0; i < n; i++)
        comm_check(c->lc, ncclBroadcast(ptr[i], ptr[i], count[i], ncclFloat32, root[i], comm, s), name);
    comm_check(c->lc, ncclGroupEnd(), name);
    comms_log_end(ev, s);
    comm_collective_enqueued(c->lc, name, s);
}
