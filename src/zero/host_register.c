/*
 * host_register.c: the background registration of pageable host buffers (see host_register.h). No CUDA call: the
 * register / unregister calls are ZeroRegOps.
 */
#include "host_register.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/common.h"

int zero_hostreg_mode(const char* v) {
    if (!v || !*v) return 1;  // on by default (measured on an H200, session 8: docs/zero.md)
    if (strcmp(v, "0") == 0) return 0;
    if (strcmp(v, "1") == 0) return 1;
    return -1;
}

int zero_hostreg_delay_ms(const char* v) {
    if (!v || !*v) return 0;
    char* end;
    errno = 0;
    const long k = strtol(v, &end, 10);
    return *end || errno || k < 0 || k > 60000 ? -1 : (int)k;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

// ---------------------------------------------------------------------------------------------
// the chunk plan

typedef struct {
    size_t off, len;
    int unit;
} Region;

static int region_cmp(const void* a, const void* b) {
    const Region *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : x->unit - y->unit;
}

// Chunks of buffer bi (appended to R->chunk): cut after a region whose end falls on a page of the address, or at the
// last region (that chunk runs to the buffer's end). reg: the buffer's nr regions, sorted, non-overlapping.
static void plan_buffer(ZeroHostReg* R, int bi, const Region* reg, int nr, size_t page) {
    const uintptr_t base = (uintptr_t)R->base[bi];
    size_t start = 0;
    int first = reg[0].unit, n = 0;
    for (int k = 0; k < nr; k++) {
        n++;
        const size_t end = reg[k].off + reg[k].len;
        const bool last = k == nr - 1;
        if (!last && ((base + end) & (page - 1)) != 0) continue;  // the next region shares this page: same chunk
        ZeroRegChunk* c = &R->chunk[R->num_chunks++];
        c->buf = bi;
        c->off = start;
        c->bytes = (last ? R->bytes[bi] : end) - start;
        c->first_unit = first;
        c->num_units = n;
        atomic_init(&c->registered, 0);
        R->total_bytes += c->bytes;
        start = end;
        n = 0;
        if (!last) first = reg[k + 1].unit;
    }
}

void zero_hostreg_plan(ZeroHostReg* R, int num_units, int num_bufs, const ZeroRegBufDesc* b, size_t page) {
    memset(R, 0, sizeof *R);
    atomic_init(&R->stop, false);
    atomic_init(&R->phase, ZR_IDLE);
    atomic_init(&R->registered_bytes, 0);
    atomic_init(&R->started, false);
    if (num_bufs < 0 || num_bufs > ZERO_HOSTREG_MAX_BUFS || num_units < 0)
        t5_die(T5_EXIT_FAILURE, "internal: host registration plan of %d buffers, %d units", num_bufs, num_units);
    if (page == 0 || (page & (page - 1)) != 0) t5_die(T5_EXIT_FAILURE, "internal: page size %zu", page);
    R->num_bufs = num_bufs;
    R->chunk = calloc_check((size_t)T5_MAX(num_units, 1) * (size_t)T5_MAX(num_bufs, 1), sizeof *R->chunk);
    Region* reg = malloc_check((size_t)T5_MAX(num_units, 1) * sizeof *reg);
    for (int bi = 0; bi < num_bufs; bi++) {
        R->base[bi] = b[bi].base;
        R->bytes[bi] = b[bi].bytes;
        R->buf_first[bi] = R->num_chunks;
        int nr = 0;
        for (int u = 0; u < num_units && b[bi].base && b[bi].bytes > 0; u++) {
            if (b[bi].unit_len[u] == 0) continue;
            if (b[bi].unit_off[u] > b[bi].bytes || b[bi].unit_len[u] > b[bi].bytes - b[bi].unit_off[u])
                t5_die(T5_EXIT_FAILURE, "internal: unit %d's region lies outside host buffer %d", u, bi);
            reg[nr++] = (Region){b[bi].unit_off[u], b[bi].unit_len[u], u};
        }
        qsort(reg, (size_t)nr, sizeof *reg, region_cmp);
        for (int k = 1; k < nr; k++)
            if (reg[k].off < reg[k - 1].off + reg[k - 1].len)
                t5_die(T5_EXIT_FAILURE, "internal: units %d and %d overlap in host buffer %d", reg[k - 1].unit,
                       reg[k].unit, bi);
        if (nr > 0) plan_buffer(R, bi, reg, nr, page);
        R->buf_count[bi] = R->num_chunks - R->buf_first[bi];
    }
    free(reg);
}

// ---------------------------------------------------------------------------------------------
// lookups (lock-free: the plan is fixed once made, the flags are atomics)

int zero_hostreg_chunk_of(const ZeroHostReg* R, const void* p) {
    const char* c = p;
    for (int bi = 0; bi < R->num_bufs; bi++) {
        if (R->buf_count[bi] == 0 || c < R->base[bi] || c >= R->base[bi] + R->bytes[bi]) continue;
        const size_t off = (size_t)(c - R->base[bi]);
        // the last chunk of the buffer starting at or before off (chunks are sorted and cover the buffer from its
        // first region on)
        int lo = R->buf_first[bi], hi = lo + R->buf_count[bi] - 1, got = -1;
        while (lo <= hi) {
            const int mid = lo + (hi - lo) / 2;
            if (R->chunk[mid].off <= off) {
                got = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        return got;
    }
    return -1;
}

bool zero_hostreg_covers(const ZeroHostReg* R, const void* p, size_t n) {
    if (!R || n == 0) return false;
    const int k = zero_hostreg_chunk_of(R, p);
    if (k < 0) return false;
    const ZeroRegChunk* c = &R->chunk[k];
    const size_t off = (size_t)((const char*)p - R->base[c->buf]);
    // a range reaching past its chunk would span two registrations (never made: every copy lies in one unit's region)
    if (n > c->off + c->bytes - off) return false;
    return atomic_load_explicit(&c->registered, memory_order_acquire) == 1;
}

// ---------------------------------------------------------------------------------------------
// the worker

static void finish(ZeroHostReg* R, ZeroRegPhase phase) {
    R->t_end = now_s();
    atomic_store_explicit(&R->phase, (int)phase, memory_order_release);
}

// sleeps ms in slices of at most 1 ms; false when asked to stop meanwhile
static bool pause_ms(ZeroHostReg* R, int ms) {
    for (int i = 0; i < ms; i++) {
        if (atomic_load_explicit(&R->stop, memory_order_relaxed)) return false;
        const struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return true;
}

static void warn_failed(ZeroHostReg* R) {
    const size_t done = atomic_load_explicit(&R->registered_bytes, memory_order_relaxed);
    t5_warn("ZeRO: registering the pageable host buffers in the background stopped after %.3f of %.3f GiB (%s); the "
            "rest keeps the pinned staging ring", gib(done), gib(R->total_bytes), R->why);
}

static void* worker(void* arg) {
    ZeroHostReg* R = arg;
    if (R->ops.thread_init && R->ops.thread_init(R->ops.ctx, R->why, sizeof R->why)) {
        warn_failed(R);
        finish(R, ZR_FAILED);
        return NULL;
    }
    for (int i = 0; i < R->num_chunks; i++) {
        if ((R->delay_ms > 0 && !pause_ms(R, R->delay_ms)) || atomic_load_explicit(&R->stop, memory_order_relaxed)) {
            finish(R, ZR_STOPPED);
            return NULL;
        }
        ZeroRegChunk* c = &R->chunk[i];
        R->why[0] = '\0';
        if (R->ops.reg(R->ops.ctx, R->base[c->buf] + c->off, c->bytes, R->why, sizeof R->why) != 0) {
            if (!R->why[0]) snprintf(R->why, sizeof R->why, "the register call failed");
            warn_failed(R);
            finish(R, ZR_FAILED);
            return NULL;
        }
        // the copies of this chunk's units may take the DMA from now on (zero_hostreg_covers' acquire load)
        atomic_store_explicit(&c->registered, 1, memory_order_release);
        atomic_fetch_add_explicit(&R->registered_bytes, c->bytes, memory_order_relaxed);
    }
    finish(R, ZR_DONE);
    return NULL;
}

// Workers alive in this process. The trainer does not destroy the engine at the end of a run (the process exit frees
// it), so an atexit handler stops and joins every live worker first: handlers run in reverse order of registration,
// and this one is registered after the CUDA runtime's (the engine has made CUDA calls by then), so the runtime's
// teardown never meets a register call under way. g_mu also serializes two stops of the same worker (a failing
// thread's exit against the main thread's zp_destroy).
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ZeroHostReg* g_live[16];
static bool g_atexit_set;
static atomic_int g_exit_wait_ms = ZERO_HOSTREG_EXIT_WAIT_MS;

void zero_hostreg_set_exit_wait_ms(int ms) { atomic_store(&g_exit_wait_ms, T5_MAX(ms, 0)); }

// under g_mu. deadline NULL: join without a limit; else join until then (CLOCK_REALTIME), and past it leave the
// worker running (one warning line; only at the process's exit)
static void stop_locked(ZeroHostReg* R, const struct timespec* deadline) {
    atomic_store(&R->stop, true);
    if (atomic_load(&R->started)) {
        const int e = deadline ? pthread_timedjoin_np(R->thread, NULL, deadline) : pthread_join(R->thread, NULL);
        if (e == 0) {
            atomic_store(&R->started, false);
        } else {
            t5_warn("ZeRO: the background registration of the pageable host buffers did not stop within %d ms "
                    "(a register call under way, %.3f of %.3f GiB registered); exiting without waiting for it",
                    atomic_load(&g_exit_wait_ms), gib(atomic_load(&R->registered_bytes)), gib(R->total_bytes));
        }
    }
    for (size_t i = 0; i < T5_ARRAY_LEN(g_live); i++)
        if (g_live[i] == R) g_live[i] = NULL;
}

// one deadline for every live worker: a register call under way (a large chunk, a hung driver) must not hold the
// process's exit for longer than the bound
static void stop_all_at_exit(void) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    const long ms = atomic_load(&g_exit_wait_ms);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < T5_ARRAY_LEN(g_live); i++)
        if (g_live[i]) stop_locked(g_live[i], &dl);
    pthread_mutex_unlock(&g_mu);
}

int zero_hostreg_start(ZeroHostReg* R, ZeroRegOps ops, int delay_ms) {
    if (atomic_load(&R->started) || atomic_load(&R->phase) != ZR_IDLE)
        t5_die(T5_EXIT_FAILURE, "internal: host registration started twice");
    R->ops = ops;
    R->delay_ms = T5_MAX(delay_ms, 0);
    R->t_start = now_s();
    if (R->num_chunks == 0) {
        finish(R, ZR_DONE);
        return 0;
    }
    pthread_mutex_lock(&g_mu);
    size_t slot = 0;
    while (slot < T5_ARRAY_LEN(g_live) && g_live[slot]) slot++;
    int e = slot == T5_ARRAY_LEN(g_live) ? EAGAIN : 0;
    if (e == 0 && !g_atexit_set) e = atexit(stop_all_at_exit) == 0 ? 0 : ENOMEM;
    g_atexit_set |= e == 0;
    atomic_store(&R->phase, ZR_RUNNING);
    if (e == 0) e = pthread_create(&R->thread, NULL, worker, R);
    if (e != 0) {
        pthread_mutex_unlock(&g_mu);
        snprintf(R->why, sizeof R->why, "cannot start its thread: %s",
                 slot == T5_ARRAY_LEN(g_live) ? "too many workers in this process"
                 : !g_atexit_set              ? "atexit failed"
                                              : strerror(e));
        warn_failed(R);
        finish(R, ZR_FAILED);
        return -1;
    }
    atomic_store(&R->started, true);
    g_live[slot] = R;
    pthread_mutex_unlock(&g_mu);
    return 0;
}

void zero_hostreg_stop(ZeroHostReg* R) {
    pthread_mutex_lock(&g_mu);
    stop_locked(R, NULL);
    pthread_mutex_unlock(&g_mu);
}

void zero_hostreg_unregister(ZeroHostReg* R) {
    if (atomic_load(&R->started)) t5_die(T5_EXIT_FAILURE, "internal: host registration undone while its worker runs");
    for (int i = R->num_chunks - 1; i >= 0; i--) {
        ZeroRegChunk* c = &R->chunk[i];
        if (atomic_load_explicit(&c->registered, memory_order_acquire) != 1) continue;
        atomic_store_explicit(&c->registered, 0, memory_order_release);
        if (R->ops.unreg) R->ops.unreg(R->ops.ctx, R->base[c->buf] + c->off, c->bytes);
    }
}

void zero_hostreg_free(ZeroHostReg* R) {
    if (!R->chunk) return;
    zero_hostreg_stop(R);
    zero_hostreg_unregister(R);
    free(R->chunk);
    memset(R, 0, sizeof *R);
}

ZeroRegStatus zero_hostreg_status(const ZeroHostReg* R) {
    ZeroRegStatus s = {0};
    s.phase = (ZeroRegPhase)atomic_load_explicit(&R->phase, memory_order_acquire);
    s.registered = atomic_load_explicit(&R->registered_bytes, memory_order_relaxed);
    s.total = R->total_bytes;
    s.seconds = s.phase >= ZR_DONE ? R->t_end - R->t_start : -1.0;
    return s;
}

// ---------------------------------------------------------------------------------------------
// a copy's path (the engine's zp_copy_to_dev / zp_copy_to_host)

// The copy is cut at chunk boundaries: each piece lies in one chunk (or outside every planned chunk) and takes the
// direct copy when its chunk is registered, the ring otherwise. So a copy that reaches past its chunk (the engine's
// never do: each lies in one unit's region) still never spans two registrations, and each chunk's bytes switch from
// the ring to the direct copy once, as a whole.
size_t zero_hostreg_copy(const ZeroHostReg* H, ZeroRing* R, void* dst, const void* src, size_t n, bool to_host,
                         void* stream, ZeroDirectOps d) {
    size_t direct = 0;
    for (size_t at = 0; at < n;) {
        const char* host = (const char*)(to_host ? (const void*)dst : src) + at;
        size_t len = n - at;
        bool reg = false;
        const int k = H ? zero_hostreg_chunk_of(H, host) : -1;
        if (k >= 0) {
            const ZeroRegChunk* c = &H->chunk[k];
            const size_t off = (size_t)(host - H->base[c->buf]);
            len = T5_MIN(len, c->off + c->bytes - off);
            reg = atomic_load_explicit(&c->registered, memory_order_acquire) == 1;
        }
        void* pd = (char*)dst + at;
        const void* ps = (const char*)src + at;
        if (reg) {
            zero_ring_sync_range(R, host, len);
            d.copy(d.ctx, pd, ps, len, to_host, stream);
            direct += len;
        } else if (to_host) {
            zero_ring_d2h(R, pd, ps, len, stream);
        } else {
            zero_ring_h2d(R, pd, ps, len, stream);
        }
        at += len;
    }
    return direct;
}
