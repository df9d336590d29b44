/*
 * unitbuf.c: the engine's run-time unit buffers (stage 3 gathered units, stage 2/3 gradients) on the GPU, handed out
 * by bufcache's rule (bufcache.h) so that the estimate replays exactly what is allocated.
 *
 * A fresh buffer is a cudaMalloc kept until the engine goes (the first step makes them all); a reused one was given
 * back by a stream-ordered free: its CUDA event, recorded on the freeing stream, is waited for by the stream that
 * takes it (the gather stream for units, the compute stream for gradients), so it is overwritten only after the
 * work that used it.
 */
#include <stdio.h>
#include <string.h>

#include "../base/check.h"
#include "../base/common.h"
#include "../base/oom.h"
#include "part.h"

void zp_bufs_init(ZpBufs* B, int num_units, const size_t* unit_bytes, int quarantine) {
    memset(B, 0, sizeof *B);
    bufunits_init(&B->U, num_units, unit_bytes, quarantine);
    const size_t nc = (size_t)T5_MAX(B->U.C.nclass, 1);
    B->ptr = calloc_check(nc, sizeof *B->ptr);
    B->ev = calloc_check(nc, sizeof *B->ev);
    B->cap = calloc_check(nc, sizeof *B->cap);
}

void* zp_bufs_take(ZpBufs* B, int u, cudaStream_t s, const char* kind, const char* name) {
    if (B->U.id_of[u] >= 0) t5_die(T5_EXIT_FAILURE, "internal: %s %s taken twice", kind, name);
    bool fresh;
    const int id = bufunits_take(&B->U, u, &fresh), c = B->U.class_of[u];
    if (id < 0) return NULL;  // an empty unit
    if (fresh) {
        if (id >= B->cap[c]) {
            const int nc = T5_MAX(8, 2 * B->cap[c]);
            B->ptr[c] = realloc_check(B->ptr[c], (size_t)nc * sizeof **B->ptr);
            B->ev[c] = realloc_check(B->ev[c], (size_t)nc * sizeof **B->ev);
            B->cap[c] = nc;
        }
        char what[192];
        snprintf(what, sizeof what, "%s %s", kind, name);
        CUDA_ALLOC_CHECK(cudaMalloc(&B->ptr[c][id], B->U.C.bytes[c]), what, B->U.C.bytes[c]);
        CUDA_CHECK(cudaEventCreateWithFlags(&B->ev[c][id], cudaEventDisableTiming));
    } else {
        CUDA_CHECK(cudaStreamWaitEvent(s, B->ev[c][id], 0));  // after the work that used it last
    }
    return B->ptr[c][id];
}

void zp_bufs_give(ZpBufs* B, int u, cudaStream_t s) {
    const int c = B->U.class_of[u], id = B->U.id_of[u];
    if (c < 0) return;  // an empty unit
    if (id < 0) t5_die(T5_EXIT_FAILURE, "internal: unit buffer given back twice");
    CUDA_CHECK(cudaEventRecord(B->ev[c][id], s));
    bufunits_give(&B->U, u);
}

size_t zp_bufs_bytes(const ZpBufs* B) { return B->U.class_of ? bufcache_bytes(&B->U.C) : 0; }

void zp_bufs_destroy(ZpBufs* B) {
    if (!B->U.class_of) return;
    for (int c = 0; c < B->U.C.nclass; c++) {
        for (int i = 0; i < B->U.C.made[c]; i++) {
            cudaFree(B->ptr[c][i]);
            cudaEventDestroy(B->ev[c][i]);
        }
        free(B->ptr[c]);
        free(B->ev[c]);
    }
    free(B->ptr);
    free(B->ev);
    free(B->cap);
    bufunits_free(&B->U);
    memset(B, 0, sizeof *B);
}
