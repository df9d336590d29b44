/*
 * comms_log.c: the collectives' CUDA-event timings for deepspeed.comms_logger (comms_log.h).
 */
#include "comms_log.h"

#include <stdio.h>
#include <string.h>

#include "../base/check.h"
#include "../base/common.h"

// Collectives recorded and not yet handed to the sink. A ZeRO-3 update of t5-small issues a few hundred; the
// trainer polls once per update, so the ring fills (and begin waits for its oldest) only in far longer updates.
#define RING 4096

static const char* const OP_NAMES[COMMS_NUM_OPS] = {"all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor",
                                                    "broadcast", "barrier"};

typedef struct {
    cudaEvent_t start, end;  // made on first use, reused
    CommsOp op;
    uint64_t bytes;
    const char* caller;
    bool ended;              // comms_log_end recorded `end`
} Slot;

static struct {
    unsigned ops;  // bit per CommsOp timed; 0: off
    CommsSink sink;
    void* ctx;
    Slot ring[RING];
    int head, count;  // oldest at head
} g;

const char* comms_op_name(CommsOp op) { return op >= 0 && op < COMMS_NUM_OPS ? OP_NAMES[op] : "?"; }

int comms_op_from_name(const char* name) {
    for (int i = 0; i < COMMS_NUM_OPS; i++)
        if (strcmp(name, OP_NAMES[i]) == 0) return i;
    if (strcmp(name, "all_gather") == 0) return COMMS_ALL_GATHER;
    if (strcmp(name, "reduce_scatter") == 0) return COMMS_REDUCE_SCATTER;
    return -1;
}

void comms_op_list(char* buf, size_t cap) {
    snprintf(buf, cap, "%s, %s, %s, %s, %s (and all_gather, reduce_scatter for the tensor forms)", OP_NAMES[0],
             OP_NAMES[1], OP_NAMES[2], OP_NAMES[3], OP_NAMES[4]);
}

void comms_log_configure(unsigned ops, CommsSink sink, void* ctx) {
    g.ops = sink ? ops & ((1u << COMMS_NUM_OPS) - 1) : 0;
    g.sink = sink;
    g.ctx = ctx;
}

// The oldest slot to the sink: waits for it when `wait`, else only when complete. Returns false when it is not
// (or no slot is ready to read).
static bool resolve_oldest(bool wait) {
    if (g.count == 0) return false;
    Slot* x = &g.ring[g.head];
    if (!x->ended) return false;
    if (wait) CUDA_CHECK(cudaEventSynchronize(x->end));
    else {
        cudaError_t e = cudaEventQuery(x->end);
        if (e == cudaErrorNotReady) return false;
        CUDA_CHECK(e);
    }
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, x->start, x->end));
    CommsRecord r = {.op = x->op, .bytes = x->bytes, .caller = x->caller, .ms = ms};
    x->ended = false;
    g.head = (g.head + 1) % RING;
    g.count--;
    g.sink(g.ctx, &r);
    return true;
}

int comms_log_begin(CommsOp op, uint64_t bytes, const char* caller, cudaStream_t s) {
    if (!(g.ops >> op & 1u)) return -1;  // disabled: this test is the whole cost
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(s, &cs));
    if (cs != cudaStreamCaptureStatusNone) return -1;
    if (g.count == RING) resolve_oldest(true);
    const int slot = (g.head + g.count) % RING;
    Slot* x = &g.ring[slot];
    if (!x->start) {
        CUDA_CHECK(cudaEventCreate(&x->start));
        CUDA_CHECK(cudaEventCreate(&x->end));
    }
    CUDA_CHECK(cudaEventRecord(x->start, s));
    x->op = op;
    x->bytes = bytes;
    x->caller = caller;
    x->ended = false;
    g.count++;
    return slot;
}

void comms_log_end(int slot, cudaStream_t s) {
    if (slot < 0) return;
    CUDA_CHECK(cudaEventRecord(g.ring[slot].end, s));
    g.ring[slot].ended = true;
}

int comms_log_poll(void) {
    int n = 0;
    while (resolve_oldest(false)) n++;
    return n;
}

void comms_log_finish(void) {
    while (resolve_oldest(true)) {}
    g.ops = 0;
    g.count = 0;
    for (int i = 0; i < RING; i++) {
        if (g.ring[i].start) CUDA_CHECK(cudaEventDestroy(g.ring[i].start));
        if (g.ring[i].end) CUDA_CHECK(cudaEventDestroy(g.ring[i].end));
        g.ring[i] = (Slot){0};
    }
}
