/*
 * part_hostreg.c: the partitioned engine's pageable host buffers registered with CUDA in the background
 * (host_register.h gives the plan and the worker; this file the CUDA calls and the engine's buffers).
 *
 * With pin_memory false the engine starts as before: its host buffers pageable, every copy between them and the GPU
 * through the pinned staging ring (part.h). Unless T5TRAIN_PAGEABLE_REGISTER=0, right after zp_create has allocated
 * them, a worker thread registers the buffers the GPU copies touch, chunk by chunk (a chunk: whole unit regions, cut
 * at page boundaries), with cudaHostRegister; zp_copy_to_dev / zp_copy_to_host (part.c) take the pinned path's plain cudaMemcpyAsync for a
 * range whose chunk is registered, the ring otherwise. The same bytes move either way, so the results are
 * bit-identical; only the speed changes, from the ring's to the pinned step's, as the chunks come in.
 *
 * Which buffers, in this order: the 16-bit weights (h_w: the offloaded parameters' gathers, the CPU optimizer's
 * publish, and in the 14-byte layout the gradients), the accumulated gradients (h_gacc), the fp32 master (the fp32
 * views' publish; fp32 runs' gathers). Adam's m and v (h_m, h_v; Adafactor's state) are never copied to or from the
 * GPU: registering them would lock memory for nothing, so they stay pageable.
 *
 * T5TRAIN_PAGEABLE_REGISTER: unset, empty or 1: on whenever one of those buffers is pageable (the default since it
 * ran on an H200: t5-3b's homework step with pin_memory false 1.01x the pinned one, docs/zero.md); 0: off (the ring
 * alone); anything else: exit 2, checked only when one of
 * those buffers is pageable (a fully pinned run never reads it). T5TRAIN_PAGEABLE_REGISTER_DELAY_MS (tests): a pause
 * before each chunk.
 * A failed cudaHostRegister (out of memory, a locked-memory limit, a range registered already) stops the worker with
 * one warning line; the chunks registered so far keep the DMA, the rest the ring; the run goes on.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../base/common.h"
#include "part.h"

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

// ---------------------------------------------------------------------------------------------
// the CUDA side of ZeroRegOps (the worker's thread)

static int reg_thread_init(void* ctx, char* why, size_t whylen) {
    const ZeroPart* P = ctx;
    const cudaError_t e = cudaSetDevice(P->device);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    snprintf(why, whylen, "cudaSetDevice(%d): %s", P->device, cudaGetErrorString(e));
    return -1;
}

static int reg_range(void* ctx, void* p, size_t n, char* why, size_t whylen) {
    (void)ctx;
    // portable, as host_mem.c's pinned buffers: every context sees the range pinned
    const cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();  // this thread's error state cleared: a later call must not report it
    snprintf(why, whylen, "cudaHostRegister of %.3f GiB: %s", gib(n), cudaGetErrorString(e));
    return -1;
}

static void unreg_range(void* ctx, void* p, size_t n) {
    (void)ctx;
    (void)n;
    if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------

int zp_hostreg_mode(void) {
    const char* v = getenv("T5TRAIN_PAGEABLE_REGISTER");
    const int m = zero_hostreg_mode(v);
    if (m < 0)
        t5_die(T5_EXIT_USAGE, "T5TRAIN_PAGEABLE_REGISTER=%s: give 1 (register pageable host buffers in the background) "
               "(the default) or 0 (the pinned staging ring alone)", v);
    const char* d = getenv("T5TRAIN_PAGEABLE_REGISTER_DELAY_MS");
    if (zero_hostreg_delay_ms(d) < 0)
        t5_die(T5_EXIT_USAGE, "T5TRAIN_PAGEABLE_REGISTER_DELAY_MS=%s: give a whole number of milliseconds, 0 .. 60000", d);
    return m;
}

// The descriptions of the pageable buffers the GPU copies touch (see above), with each CPU unit's region: its
// partition p = L.part[u] elements, where carve_units put it. off/len: (3 x num_units) caller-owned arrays.
static int describe(const ZeroPart* P, ZeroRegBufDesc* d, size_t* off, size_t* len) {
    const int nu = P->num_units;
    const HostBuf* hb[3] = {&P->h_w, &P->h_gacc, &P->h_master};
    int nb = 0;
    for (int k = 0; k < 3; k++) {
        if (!hb[k]->ptr || hb[k]->pinned) continue;
        size_t* o = off + (size_t)nb * nu;
        size_t* l = len + (size_t)nb * nu;
        for (int u = 0; u < nu; u++) {
            const ZpUnit* U = &P->u[u];
            // the unit's slot in this buffer (GPU-stepped units have none; gacc is whost itself when shared)
            const void* p = !U->opt_cpu                 ? NULL
                            : k == 0                    ? U->whost
                            : k == 1 && !P->share_gw    ? U->gacc
                            : k == 2                    ? (const void*)U->master
                                                        : NULL;
            const size_t es = k == 0 ? P->xs : k == 1 ? P->as : 4;
            o[u] = p ? (size_t)((const char*)p - (const char*)hb[k]->ptr) : 0;
            l[u] = p ? P->L.part[u] * es : 0;
        }
        d[nb++] = (ZeroRegBufDesc){hb[k]->ptr, hb[k]->bytes, o, l};
    }
    return nb;
}

// after zp_create has allocated and carved every buffer (P->u's pointers)
void zp_hostreg_start(ZeroPart* P) {
    const int nu = P->num_units;
    size_t* off = calloc_check((size_t)3 * nu, sizeof *off);
    size_t* len = calloc_check((size_t)3 * nu, sizeof *len);
    ZeroRegBufDesc d[3];
    const int nb = describe(P, d, off, len);
    // the setting is read only when some buffer the copies touch is pageable (default off)
    if (nb > 0 && zp_hostreg_mode() == 1) {
        P->hostreg = calloc_check(1, sizeof *P->hostreg);
        const long page = sysconf(_SC_PAGESIZE);
        zero_hostreg_plan(P->hostreg, nu, nb, d, page > 0 ? (size_t)page : 4096);
        const ZeroRegOps ops = {reg_range, unreg_range, reg_thread_init, P};
        (void)zero_hostreg_start(P->hostreg, ops, zero_hostreg_delay_ms(getenv("T5TRAIN_PAGEABLE_REGISTER_DELAY_MS")));
    }
    free(off);
    free(len);
}

void zp_hostreg_stop(ZeroPart* P) {
    if (P->hostreg) zero_hostreg_stop(P->hostreg);
}

void zp_hostreg_release(ZeroPart* P) {
    if (!P->hostreg) return;
    zero_hostreg_free(P->hostreg);  // stop (already done), unregister every registered chunk
    free(P->hostreg);
    P->hostreg = NULL;
}

void zp_hostreg_stats(const ZeroPart* P, ZeroStats* st) {
    if (!P->hostreg) return;
    const ZeroRegStatus s = zero_hostreg_status(P->hostreg);
    st->host_register_on = true;
    st->host_register_total = s.total;
    st->host_registered_bytes = s.registered;
    st->host_register_phase = (int)s.phase;
    st->host_register_s = s.seconds;
}
