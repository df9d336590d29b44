/*
 * staging.c: the pinned staging ring (see staging.h). No CUDA call: the copies and waits are ZeroRingOps.
 */
#include "staging.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"

// Threads of one pageable <-> slot copy: T5TRAIN_STAGING_THREADS, default min(8, processors / 2); 1 is a plain
// memcpy. Measured on an H200 host (16 cores), t5-3b fp16 homework ZeRO-3 with pin_memory false, batch 8: 2988 ms
// per step with 1 thread, 1610 with 4, 1353 with 8, 1397-1472 with 12 or 16 (pinned: 907 ms); slots of 16 or
// 64 MiB instead of 4 were no faster (docs/zero.md, "pin_memory: false").
int zero_staging_threads(const char* v, int procs) {
    if (!v || !*v) return T5_MIN(8, T5_MAX(1, procs / 2));
    char* end;
    const long k = strtol(v, &end, 10);
    return *end || k < 1 || k > 64 ? -1 : (int)k;
}

// read once (both engine threads compute the same value; a race between them writes the same int)
static int copy_threads(void) {
    static int n = 0;
    if (n == 0) {
        const char* v = getenv("T5TRAIN_STAGING_THREADS");
        const int k = zero_staging_threads(v, omp_get_num_procs());
        if (k < 0) t5_die(T5_EXIT_USAGE, "T5TRAIN_STAGING_THREADS=%s: give a whole number of threads, 1 .. 64", v);
        n = k;
    }
    return n;
}

// memcpy of n bytes cut into copy_threads() pieces of whole 4 KiB pages, each copied by its own OpenMP thread
static void host_copy(void* dst, const void* src, size_t n) {
    const int t = copy_threads();
    if (t == 1 || n < ((size_t)1 << 20)) {
        memcpy(dst, src, n);
        return;
    }
    const size_t piece = CEIL_DIV(CEIL_DIV(n, (size_t)t), (size_t)4096) * 4096;
#pragma omp parallel for num_threads(t) schedule(static)
    for (int i = 0; i < t; i++) {
        const size_t off = (size_t)i * piece;
        if (off < n) memcpy((char*)dst + off, (const char*)src + off, T5_MIN(piece, n - off));
    }
}

size_t zero_staging_num_chunks(size_t bytes, size_t slot_bytes) {
    if (slot_bytes == 0) t5_die(T5_EXIT_FAILURE, "internal: staging ring with 0-byte slots");
    return CEIL_DIV(bytes, slot_bytes);
}

void zero_staging_chunk(size_t bytes, size_t slot_bytes, size_t i, size_t* off, size_t* len) {
    *off = i * slot_bytes;
    *len = *off >= bytes ? 0 : T5_MIN(slot_bytes, bytes - *off);
}

void zero_ring_init(ZeroRing* R, int count, size_t slot_bytes, void* mem, ZeroRingOps ops) {
    memset(R, 0, sizeof *R);
    if (count < 1 || slot_bytes == 0 || !mem)
        t5_die(T5_EXIT_FAILURE, "internal: staging ring of %d slots of %zu bytes", count, slot_bytes);
    R->count = count;
    R->slot_bytes = slot_bytes;
    R->mem = mem;
    R->slot = calloc_check((size_t)count, sizeof *R->slot);
    R->ops = ops;
    pthread_mutex_init(&R->mu, NULL);
}

static char* slot_mem(ZeroRing* R, int k) { return R->mem + (size_t)k * R->slot_bytes; }

// The copy through slot k completed (waited for on the host); a device -> host copy's bytes move on to their
// destination. Only then may the slot be written again (by the host for h2d, by the device for d2h).
static void retire(ZeroRing* R, int k) {
    ZeroRingSlot* sl = &R->slot[k];
    if (!sl->busy) return;
    R->ops.wait(R->ops.ctx, k);
    if (sl->to_host) host_copy(sl->host_dst, slot_mem(R, k), sl->len);
    memset(sl, 0, sizeof *sl);
}

// Retires, oldest first, the busy slots selected by `pick` (all, or the d2h ones overlapping [p, p + n)).
static void retire_in_order(ZeroRing* R, bool all, const char* p, size_t n) {
    for (;;) {
        int best = -1;
        for (int k = 0; k < R->count; k++) {
            const ZeroRingSlot* sl = &R->slot[k];
            if (!sl->busy) continue;
            if (!all && !(sl->to_host && sl->host_dst < p + n && p < sl->host_dst + sl->len)) continue;
            if (best < 0 || sl->seq < R->slot[best].seq) best = k;
        }
        if (best < 0) return;
        retire(R, best);
    }
}

// The next slot, round robin, retired first if its last copy is still pending.
static int take(ZeroRing* R) {
    const int k = R->next;
    R->next = (R->next + 1) % R->count;
    if (R->slot[k].busy) {
        R->reuse_waits++;
        retire(R, k);
    }
    return k;
}

void zero_ring_h2d(ZeroRing* R, void* dev_dst, const void* host_src, size_t n, void* s) {
    if (n == 0) return;
    pthread_mutex_lock(&R->mu);
    // the host reads host_src now: a device -> host transfer of this ring still pending into it lands first
    retire_in_order(R, false, host_src, n);
    const size_t nc = zero_staging_num_chunks(n, R->slot_bytes);
    for (size_t i = 0; i < nc; i++) {
        size_t off, len;
        zero_staging_chunk(n, R->slot_bytes, i, &off, &len);
        const int k = take(R);
        host_copy(slot_mem(R, k), (const char*)host_src + off, len);
        R->ops.copy(R->ops.ctx, k, (char*)dev_dst + off, slot_mem(R, k), len, false, s);
        R->slot[k] = (ZeroRingSlot){.busy = true, .to_host = false, .host_dst = NULL, .len = len, .seq = ++R->seq};
        R->chunks++;
    }
    R->bytes += (double)n;
    pthread_mutex_unlock(&R->mu);
}

void zero_ring_d2h(ZeroRing* R, void* host_dst, const void* dev_src, size_t n, void* s) {
    if (n == 0) return;
    pthread_mutex_lock(&R->mu);
    // an older pending transfer into the same bytes lands first (it would otherwise overwrite this one's later)
    retire_in_order(R, false, host_dst, n);
    const size_t nc = zero_staging_num_chunks(n, R->slot_bytes);
    for (size_t i = 0; i < nc; i++) {
        size_t off, len;
        zero_staging_chunk(n, R->slot_bytes, i, &off, &len);
        const int k = take(R);
        R->ops.copy(R->ops.ctx, k, slot_mem(R, k), (const char*)dev_src + off, len, true, s);
        R->slot[k] = (ZeroRingSlot){.busy = true, .to_host = true, .host_dst = (char*)host_dst + off, .len = len,
                                    .seq = ++R->seq};
        R->chunks++;
    }
    R->bytes += (double)n;
    pthread_mutex_unlock(&R->mu);
}

void zero_ring_drain(ZeroRing* R) {
    pthread_mutex_lock(&R->mu);
    retire_in_order(R, true, NULL, 0);
    pthread_mutex_unlock(&R->mu);
}

void zero_ring_sync_range(ZeroRing* R, const void* p, size_t n) {
    if (n == 0) return;
    pthread_mutex_lock(&R->mu);
    retire_in_order(R, false, p, n);
    pthread_mutex_unlock(&R->mu);
}

double zero_ring_bytes(ZeroRing* R) {
    pthread_mutex_lock(&R->mu);
    const double b = R->bytes;
    pthread_mutex_unlock(&R->mu);
    return b;
}

void zero_ring_reset_bytes(ZeroRing* R) {
    pthread_mutex_lock(&R->mu);
    R->bytes = 0;
    pthread_mutex_unlock(&R->mu);
}

void zero_ring_free(ZeroRing* R) {
    if (!R->slot) return;
    zero_ring_drain(R);
    pthread_mutex_destroy(&R->mu);
    free(R->slot);
    memset(R, 0, sizeof *R);
}
