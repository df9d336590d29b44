/*
 * comms_log.h: DeepSpeed's comms_logger underneath t5train's collectives (deepspeed.comms_logger, docs/config.md
 * "comms_logger"): every NCCL collective that src/launch/comm.c and src/zero/coll.c issue is timed by two CUDA events
 * on its own stream, one recorded just before the NCCL call and one just after, so the time is the collective's
 * kernel on the GPU (including the wait for the slowest rank, as DeepSpeed's timer does), never a host sync.
 *
 * The events go into a ring and are read lazily: comms_log_poll (the trainer, once per update) hands the collectives
 * already complete to the sink, comms_log_finish waits for the rest. Only when the ring is full does recording wait
 * for its oldest collective (issued RING collectives ago, long complete in practice).
 *
 * Disabled (the default): comms_log_begin is one test of a bit mask and returns -1; comms_log_end(-1) returns.
 * Contract: every collective is issued by one thread (the one driving the model; coll.h), which is also the thread
 * that polls; the sink runs on it and must not call back into comms_log_*. Collectives issued while `s` is being
 * captured into a CUDA graph are not timed (an event in a capture is a graph node, not a time).
 *
 * Op names are DeepSpeed's record names for the calls its ZeRO engine makes (deepspeed/comm/comm.py): the parameter
 * gathers are all_gather_into_tensor (allgather_fn), the gradient reduce-scatters reduce_scatter_tensor
 * (reduce_scatter_fn), the rest all_reduce, broadcast and barrier. Message sizes are DeepSpeed's: the bytes of the
 * tensor argument (all_gather_into_tensor: this rank's input piece; reduce_scatter_tensor: the whole input).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    COMMS_ALL_REDUCE = 0,
    COMMS_REDUCE_SCATTER,  // "reduce_scatter_tensor"
    COMMS_ALL_GATHER,      // "all_gather_into_tensor"
    COMMS_BROADCAST,
    COMMS_BARRIER,
    COMMS_NUM_OPS
} CommsOp;

// DeepSpeed's record name of each op ("all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "broadcast",
// "barrier")
const char* comms_op_name(CommsOp op);
// The op a prof_ops entry names: the names above, and DeepSpeed's list-form names "all_gather" and "reduce_scatter"
// for the tensor forms (t5train's collectives are all flat tensors). -1: not a collective t5train issues.
int comms_op_from_name(const char* name);
// "all_reduce, reduce_scatter_tensor, ..." (every name comms_op_from_name accepts), for error messages
void comms_op_list(char* buf, size_t cap);

// One timed collective, handed to the sink in issue order.
typedef struct {
    CommsOp op;
    uint64_t bytes;      // DeepSpeed's msg size (see the top comment)
    const char* caller;  // the collective's name as the watchdog knows it ("the gradient reduce-scatter")
    double ms;           // cudaEventElapsedTime between the two events
} CommsRecord;
typedef void (*CommsSink)(void* ctx, const CommsRecord* r);

// Times the ops whose bit (1u << op) is in `ops` from now on (0: off), handing each to sink(ctx, record). Call
// with the CUDA device set (the events are made on first use).
void comms_log_configure(unsigned ops, CommsSink sink, void* ctx);
// Right before the NCCL call on stream s: a slot (>= 0), or -1 when `op` is not timed. `caller` must outlive the
// collective (a string literal).
int comms_log_begin(CommsOp op, uint64_t bytes, const char* caller, cudaStream_t s);
// Right after the NCCL call (or its ncclGroupEnd) on the same stream, with begin's slot.
void comms_log_end(int slot, cudaStream_t s);
// Hands every collective already complete to the sink (cudaEventQuery: no wait). Returns how many.
int comms_log_poll(void);
// Waits for every collective recorded, hands them to the sink, stops timing and frees the events.
void comms_log_finish(void);

#ifdef __cplusplus
}
#endif
