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
    B->num_units = num_units;
    B->class_of = malloc_check((size_t)num_units * sizeof *B->class_of);
    B->id_of = malloc_check((size_t)num_units * sizeof *B->id_of);
    size_t* cb = malloc_check((size_t)T5_MAX(num_units, 1) * sizeof *cb);
    const int nc = bufcache_classes(unit_bytes, num_units, B->class_of, cb);
    bufcache_init(&B->C, nc, cb, quarantine);
    free(cb);
    for (int u = 0; u < num_units; u++) B->id_of[u] = -1;
    B->ptr = calloc_check((size_t)T5_MAX(nc, 1), sizeof *B->ptr);
    B->ev = calloc_check((size_t)T5_MAX(nc, 1), sizeof *B->ev);
    B->cap = calloc_check((size_t)T5_MAX(nc, 1), sizeof *B->cap);
}

void* zp_bufs_take(ZpBufs* B, int u, cudaStream_t s, const char* what) {
    const int c = B->class_of[u];
    if (c < 0) return NULL;  // an empty unit
    if (B->id_of[u] >= 0) t5_die(T5_EXIT_FAILURE, "internal: unit buffer of %s taken twice", what);
    bool fresh;
    const int id = bufcache_take(&B->C, c, &fresh);
    if (fresh) {
        if (id >= B->cap[c]) {
            const int nc = T5_MAX(8, 2 * B->cap[c]);
            B->ptr[c] = realloc_check(B->ptr[c], (size_t)nc * sizeof **B->ptr);
            B->ev[c] = realloc_check(B->ev[c], (size_t)nc * sizeof **B->ev);
            B->cap[c] = nc;
        }
        CUDA_ALLOC_CHECK(cudaMalloc(&B->ptr[c][id], B->C.bytes[c]), what, B->C.bytes[c]);
        CUDA_CHECK(cudaEventCreateWithFlags(&B->ev[c][id], cudaEventDisableTiming));
    } else {
        CUDA_CHECK(cudaStreamWaitEvent(s, B->ev[c][id], 0));  // after the work that used it last
    }
    B->id_of[u] = id;
    return B->ptr[c][id];
}

void zp_bufs_give(ZpBufs* B, int u, cudaStream_t s) {
    const int c = B->class_of[u], id = B->id_of[u];
    if (c < 0) return;  // an empty unit
    if (id < 0) t5_die(T5_EXIT_FAILURE, "internal: unit buffer given back twice");
    CUDA_CHECK(cudaEventRecord(B->ev[c][id], s));
    bufcache_give(&B->C, c, id);
    B->id_of[u] = -1;
}

size_t zp_bufs_bytes(const ZpBufs* B) { return B->class_of ? bufcache_bytes(&B->C) : 0; }

void zp_bufs_destroy(ZpBufs* B) {
    if (!B->class_of) return;
    for (int c = 0; c < B->C.nclass; c++) {
        for (int i = 0; i < B->C.made[c]; i++) {
            cudaFree(B->ptr[c][i]);
            cudaEventDestroy(B->ev[c][i]);
        }
        free(B->ptr[c]);
        free(B->ev[c]);
    }
    free(B->ptr);
    free(B->ev);
    free(B->cap);
    free(B->class_of);
    free(B->id_of);
    bufcache_free(&B->C);
    memset(B, 0, sizeof *B);
}
