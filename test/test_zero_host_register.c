/*
 * test_zero_host_register.c: the background registration of the ZeRO engine's pageable host buffers
 * (src/zero/host_register.h) on the CPU, with a fake register call (no GPU):
 *   - the settings: T5TRAIN_PAGEABLE_REGISTER (1 on; unset / "" / 0 off, the default; anything else refused) and
 *     the delay;
 *   - the chunk plan, randomized and on the real t5-3b layouts (fp16 16-bit weights, fp32 master): chunks sorted,
 *     back to back from the buffer's start to its end, each starting on a page; every unit's region inside exactly
 *     one chunk (a copy never spans two registrations); a cut at every unit boundary that falls on a page (no
 *     needless merging); buffers without units get none;
 *   - lookups: zero_hostreg_chunk_of / zero_hostreg_covers for ranges inside one chunk, across two, outside;
 *   - the worker: registers every chunk once, in plan order; a range is covered only after its register call
 *     returned, and stays covered (checked while the worker runs); status and seconds; unregister undoes each
 *     registered chunk once, in reverse order;
 *   - failure: the k-th register call fails: the chunks before it stay registered, the rest are never tried, one
 *     warning, phase failed; a failing thread set-up registers nothing;
 *   - stop: with a delay between chunks, zero_hostreg_stop returns promptly with the worker joined, phase stopped,
 *     no chunk registered after it; a plan without chunks is done at once; a process exiting while its worker runs
 *     (the trainer leaves the engine to the exit) has the worker stopped and joined before the atexit handlers
 *     registered earlier (the CUDA runtime's) run; that wait is bounded (a register call under way longer than the
 *     bound: the exit goes on without it);
 *   - a copy spanning chunks (zero_hostreg_copy): cut at the chunk boundaries, the registered chunk's piece direct,
 *     the rest through the ring, every byte delivered both ways; the direct byte count returned;
 *   - the engine's copy protocol (zero_hostreg_copy) against a simulated asynchronous device with two staging rings:
 *     gradient buckets accumulated over micro-batches in a pageable buffer (up, add, down), the CPU optimizer's
 *     publish, the next step's gathers (in half the runs several units in one copy, spanning chunks), while chunks
 *     switch from the ring to the direct copy at random points: every sum and every gathered byte exact, every
 *     direct piece inside one registered chunk; the same protocol without the ring's retire before a direct copy
 *     (the hazard zero_hostreg_copy guards against) is caught.
 */
#include "t5test.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../model/params.h"
#include "../model/t5_config.h"
#include "../src/base/common.h"
#include "../src/zero/host_register.h"
#include "../src/zero/plan.h"

static uint64_t rnd(uint64_t* s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_settings(void** state) {
    (void)state;
    assert_int_equal(zero_hostreg_mode(NULL), 1);  // on by default
    assert_int_equal(zero_hostreg_mode(""), 1);
    assert_int_equal(zero_hostreg_mode("1"), 1);
    assert_int_equal(zero_hostreg_mode("0"), 0);
    const char* bad[] = {"2", "yes", "true", "01", " 1", "1 ", "-1", "on", "off"};
    for (size_t i = 0; i < T5_ARRAY_LEN(bad); i++) assert_int_equal(zero_hostreg_mode(bad[i]), -1);
    assert_int_equal(zero_hostreg_delay_ms(NULL), 0);
    assert_int_equal(zero_hostreg_delay_ms(""), 0);
    assert_int_equal(zero_hostreg_delay_ms("0"), 0);
    assert_int_equal(zero_hostreg_delay_ms("250"), 250);
    assert_int_equal(zero_hostreg_delay_ms("60000"), 60000);
    const char* badd[] = {"-1", "60001", "1.5", "x", "10ms", "99999999999999999999"};
    for (size_t i = 0; i < T5_ARRAY_LEN(badd); i++) assert_int_equal(zero_hostreg_delay_ms(badd[i]), -1);
}

// ------------------------------------------------------------------ plan checks

// The plan's invariants for buffer bi (see the top of the file). off/len: the units' regions given to the plan.
static void check_buffer_plan(const ZeroHostReg* R, int bi, int nu, const size_t* off, const size_t* len, size_t page) {
    const int f = R->buf_first[bi], n = R->buf_count[bi];
    bool any = false;
    for (int u = 0; u < nu; u++) any |= len[u] > 0;
    if (!any || R->bytes[bi] == 0) {
        assert_int_equal(n, 0);
        return;
    }
    assert_true(n >= 1);
    const uintptr_t base = (uintptr_t)R->base[bi];
    size_t at = 0;
    for (int k = f; k < f + n; k++) {
        const ZeroRegChunk* c = &R->chunk[k];
        assert_int_equal(c->buf, bi);
        assert_int_equal(c->off, at);  // back to back from the start
        assert_true(c->bytes > 0);
        assert_int_equal((base + c->off) % page, 0);  // on a page (the test bases are page aligned)
        at += c->bytes;
    }
    assert_int_equal(at, R->bytes[bi]);  // to the end
    for (int u = 0; u < nu; u++) {
        if (len[u] == 0) continue;
        // inside exactly one chunk: the chunk of its first byte holds its last byte too
        const int k = zero_hostreg_chunk_of(R, R->base[bi] + off[u]);
        assert_true(k >= f && k < f + n);
        assert_int_equal(zero_hostreg_chunk_of(R, R->base[bi] + off[u] + len[u] - 1), k);
        // no needless merging: a unit boundary on a page (another unit's region after it) is a chunk boundary
        const size_t end = off[u] + len[u];
        bool next = false;
        for (int v = 0; v < nu; v++) next |= len[v] > 0 && off[v] >= end;
        if (next && (base + end) % page == 0) {
            const int k2 = zero_hostreg_chunk_of(R, R->base[bi] + end);
            assert_int_equal(k2, k + 1);
            assert_int_equal(R->chunk[k2].off, end);
        }
    }
}

static size_t plan_total(const ZeroHostReg* R) {
    size_t t = 0;
    for (int k = 0; k < R->num_chunks; k++) t += R->chunk[k].bytes;
    return t;
}

static void test_plan_random(void** state) {
    (void)state;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    const size_t page = 4096;
    for (int trial = 0; trial < 300; trial++) {
        const int nu = 1 + (int)(rnd(&s) % 40), nb = 1 + (int)(rnd(&s) % 3);
        size_t* off = calloc((size_t)nb * nu, sizeof *off);
        size_t* len = calloc((size_t)nb * nu, sizeof *len);
        ZeroRegBufDesc d[3];
        for (int b = 0; b < nb; b++) {
            size_t at = 0;
            // units in unit order back to back (as carve_units puts them); some absent (GPU-stepped), sizes either
            // whole pages or multiples of 16 bytes; the buffer may end past the last unit (padding)
            for (int u = 0; u < nu; u++) {
                if (rnd(&s) % 5 == 0) continue;
                const uint64_t r = rnd(&s) % 4;
                const size_t l = r == 0 ? page * (1 + rnd(&s) % 3) : 16 * (1 + rnd(&s) % (r == 1 ? 8 : 700));
                off[(size_t)b * nu + u] = at;
                len[(size_t)b * nu + u] = l;
                at += l;
            }
            const size_t bytes = at + (rnd(&s) % 3 == 0 ? 16 * (rnd(&s) % 300) : 0);
            // a fake page-aligned address: the plan only does arithmetic on it
            d[b] = (ZeroRegBufDesc){(void*)(uintptr_t)(((uint64_t)(b + 1) << 32)), bytes, off + (size_t)b * nu,
                                    len + (size_t)b * nu};
        }
        ZeroHostReg R;
        zero_hostreg_plan(&R, nu, nb, d, page);
        size_t expect = 0;
        for (int b = 0; b < nb; b++) {
            check_buffer_plan(&R, b, nu, d[b].unit_off, d[b].unit_len, page);
            if (R.buf_count[b] > 0) expect += d[b].bytes;
            // nothing registered yet: no range is covered
            for (int u = 0; u < nu; u++)
                if (d[b].unit_len[u]) assert_false(zero_hostreg_covers(&R, (char*)d[b].base + d[b].unit_off[u], 1));
        }
        assert_int_equal(R.total_bytes, expect);
        assert_int_equal(plan_total(&R), expect);
        // the registration order is the plan's order: buffer by buffer, by offset
        for (int k = 1; k < R.num_chunks; k++)
            assert_true(R.chunk[k].buf > R.chunk[k - 1].buf ||
                        (R.chunk[k].buf == R.chunk[k - 1].buf && R.chunk[k].off > R.chunk[k - 1].off));
        zero_hostreg_free(&R);
        free(off);
        free(len);
    }
}

// regions given out of order, an empty buffer, a buffer without units, a fixed expected cut
static void test_plan_fixed(void** state) {
    (void)state;
    const size_t page = 4096;
    // unit 0: [0, 4096) (ends on a page: cut); unit 1: [4096, 4096 + 100); unit 2: [4196, 8192) (cut); unit 3 absent;
    // unit 4: [8192, 8192 + 16) to the buffer's end 9000
    const size_t off[5] = {0, 4096, 4196, 0, 8192}, len[5] = {4096, 100, 3996, 0, 16};
    const size_t zoff[5] = {0}, zlen[5] = {0};
    ZeroRegBufDesc d[3] = {{(void*)(uintptr_t)0x10000000, 9000, off, len},
                           {(void*)(uintptr_t)0x20000000, 0, off, len},
                           {(void*)(uintptr_t)0x30000000, 5000, zoff, zlen}};
    ZeroHostReg R;
    zero_hostreg_plan(&R, 5, 3, d, page);
    assert_int_equal(R.num_chunks, 3);
    assert_int_equal(R.buf_count[1], 0);
    assert_int_equal(R.buf_count[2], 0);
    const size_t co[3] = {0, 4096, 8192}, cb[3] = {4096, 4096, 808};
    const int cf[3] = {0, 1, 4}, cn[3] = {1, 2, 1};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(R.chunk[k].off, co[k]);
        assert_int_equal(R.chunk[k].bytes, cb[k]);
        assert_int_equal(R.chunk[k].first_unit, cf[k]);
        assert_int_equal(R.chunk[k].num_units, cn[k]);
    }
    // lookups: inside one chunk, across two, outside every buffer, empty
    char* b0 = (char*)d[0].base;
    atomic_store(&R.chunk[1].registered, 1);
    assert_true(zero_hostreg_covers(&R, b0 + 4096, 4096));
    assert_true(zero_hostreg_covers(&R, b0 + 4196, 3996));
    assert_false(zero_hostreg_covers(&R, b0 + 4096, 4097));    // into chunk 2
    assert_false(zero_hostreg_covers(&R, b0 + 4000, 200));     // from chunk 0
    assert_false(zero_hostreg_covers(&R, b0 + 0, 16));         // chunk 0 not registered
    assert_false(zero_hostreg_covers(&R, b0 + 4096, 0));
    assert_false(zero_hostreg_covers(&R, b0 + 9000, 1));       // past the buffer
    assert_false(zero_hostreg_covers(&R, (char*)d[2].base, 1)); // a buffer without chunks
    assert_false(zero_hostreg_covers(NULL, b0, 1));
    assert_int_equal(zero_hostreg_chunk_of(&R, b0 + 8999), 2);
    assert_int_equal(zero_hostreg_chunk_of(&R, b0 + 9000), -1);
    atomic_store(&R.chunk[1].registered, 0);
    zero_hostreg_free(&R);
}

// The engine's layouts at one rank, everything offloaded (ratio 1): the 16-bit weights (fp16) and the fp32 master of
// the real presets, as carve_units lays them out. Prints the chunks (docs/zero.md quotes t5-3b's).
static void test_plan_real_layouts(void** state) {
    (void)state;
    const char* presets[] = {"t5-small", "t5-3b", "t5-11b"};
    const size_t page = 4096;
    for (size_t p = 0; p < T5_ARRAY_LEN(presets); p++) {
        T5Config c;
        char err[256];
        assert_true(t5_config_preset(presets[p], &c));
        ParamTable T;
        if (params_build(&T, &c, err, sizeof err)) fail_msg("%s: %s", presets[p], err);
        const int nu = T.num_units;
        size_t* numel = malloc((size_t)nu * sizeof *numel);
        for (int u = 0; u < nu; u++) numel[u] = T.units[u].numel;
        ZeroLayout L;
        assert_int_equal(zero_layout_build(&L, 1, 0, nu, numel, 1000000000, 1.0, err, sizeof err), 0);
        const size_t es[2] = {2, 4};
        for (int b = 0; b < 2; b++) {
            size_t* off = malloc((size_t)nu * sizeof *off);
            size_t* len = malloc((size_t)nu * sizeof *len);
            size_t at = 0;
            for (int u = 0; u < nu; u++) {
                off[u] = at;
                len[u] = L.part[u] * es[b];
                at += len[u];
            }
            ZeroRegBufDesc d = {(void*)(uintptr_t)0x7f0000000000ull, at, off, len};
            ZeroHostReg R;
            zero_hostreg_plan(&R, nu, 1, &d, page);
            check_buffer_plan(&R, 0, nu, off, len, page);
            size_t big = 0;
            for (int k = 0; k < R.num_chunks; k++) big = T5_MAX(big, R.chunk[k].bytes);
            print_message("%-9s %s: %d units, %d chunks, largest %.3f GiB of %.3f GiB\n", presets[p],
                          b == 0 ? "fp16 weights" : "fp32 master ", nu, R.num_chunks, (double)big / (1 << 30),
                          (double)at / (1 << 30));
            assert_true(R.num_chunks >= 2);
            zero_hostreg_free(&R);
            free(off);
            free(len);
        }
        zero_layout_free(&L);
        free(numel);
        params_free(&T);
    }
}

// ------------------------------------------------------------------ the worker with a fake register call

#define MAXC 256

typedef struct {
    const ZeroHostReg* R;
    int calls;              // register calls so far
    int fail_at;            // the call (0-based) that fails; -1 none
    int sleep_us;           // each register call takes this long
    atomic_int returned[MAXC];  // set just before a call for chunk k returns success
    int order[MAXC];        // chunk of each call
    int unreg_order[MAXC];  // chunk of each unregister call
    int unregs;
    bool init_fails;
    atomic_int bad;         // the worker thread saw a broken contract (checked on the test's thread: cmocka's
                            // asserts may not fail on another thread)
} Fake;

static int fake_chunk(const Fake* F, void* p) { return zero_hostreg_chunk_of(F->R, p); }

static int fake_reg(void* ctx, void* p, size_t n, char* why, size_t whylen) {
    Fake* F = ctx;
    const int k = fake_chunk(F, p);
    if (k < 0 || k >= MAXC || F->R->base[F->R->chunk[k].buf] + F->R->chunk[k].off != (char*)p ||
        F->R->chunk[k].bytes != n) {
        atomic_store(&F->bad, 1);  // not a chunk's exact range
        return -1;
    }
    F->order[F->calls] = k;
    if (F->sleep_us) {
        const struct timespec ts = {0, (long)F->sleep_us * 1000};
        nanosleep(&ts, NULL);
    }
    if (F->calls++ == F->fail_at) {
        snprintf(why, whylen, "fake cudaHostRegister: out of memory");
        return -1;
    }
    // the flag the engine reads must not be set before the call returned
    if (atomic_load(&F->R->chunk[k].registered) != 0) atomic_store(&F->bad, 1);
    atomic_store(&F->returned[k], 1);
    return 0;
}

static void fake_unreg(void* ctx, void* p, size_t n) {
    Fake* F = ctx;
    const int k = fake_chunk(F, p);
    assert_int_equal(F->R->chunk[k].bytes, n);
    F->unreg_order[F->unregs++] = k;
}

static int fake_init(void* ctx, char* why, size_t whylen) {
    Fake* F = ctx;
    if (!F->init_fails) return 0;
    snprintf(why, whylen, "fake cudaSetDevice: no device");
    return -1;
}

// one buffer of nc chunks of `page` bytes (one unit each), at a real allocation
typedef struct {
    char* mem;
    size_t off[MAXC], len[MAXC];
    ZeroHostReg R;
} Bufs;

static void bufs_plan(Bufs* B, int nc, size_t page) {
    B->mem = aligned_alloc(page, (size_t)nc * page);
    assert_non_null(B->mem);
    for (int u = 0; u < nc; u++) {
        B->off[u] = (size_t)u * page;
        B->len[u] = page;
    }
    ZeroRegBufDesc d = {B->mem, (size_t)nc * page, B->off, B->len};
    zero_hostreg_plan(&B->R, nc, 1, &d, page);
    assert_int_equal(B->R.num_chunks, nc);
}

static void bufs_free(Bufs* B) {
    zero_hostreg_free(&B->R);
    free(B->mem);
}

static ZeroRegPhase wait_phase(const ZeroHostReg* R, double timeout_s) {
    const double t0 = now_s();
    ZeroRegStatus s;
    while ((s = zero_hostreg_status(R)).phase == ZR_RUNNING && now_s() - t0 < timeout_s) {
        const struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return s.phase;
}

static void test_worker_registers_everything(void** state) {
    (void)state;
    static Bufs B;
    static Fake F;
    memset(&F, 0, sizeof F);
    const int nc = 40;
    const size_t page = 4096;
    bufs_plan(&B, nc, page);
    F.R = &B.R;
    F.fail_at = -1;
    F.sleep_us = 300;
    assert_int_equal(zero_hostreg_status(&B.R).phase, ZR_IDLE);
    assert_int_equal(zero_hostreg_start(&B.R, (ZeroRegOps){fake_reg, fake_unreg, fake_init, &F}, 0), 0);
    // while it runs: a covered range was registered (its call returned) and stays covered
    bool seen[MAXC] = {false};
    uint64_t s = 7;
    int polls = 0;
    while (zero_hostreg_status(&B.R).phase == ZR_RUNNING || polls < 100) {
        const int u = (int)(rnd(&s) % (uint64_t)nc);
        const bool cov = zero_hostreg_covers(&B.R, B.mem + B.off[u] + rnd(&s) % 100, 16);
        if (cov) assert_int_equal(atomic_load(&F.returned[u]), 1);
        if (seen[u]) assert_true(cov);
        seen[u] |= cov;
        polls++;
    }
    assert_int_equal(wait_phase(&B.R, 10), ZR_DONE);
    assert_int_equal(atomic_load(&F.bad), 0);
    const ZeroRegStatus st = zero_hostreg_status(&B.R);
    assert_int_equal(st.registered, (size_t)nc * page);
    assert_int_equal(st.total, (size_t)nc * page);
    assert_true(st.seconds >= 0 && st.seconds < 10);
    assert_int_equal(F.calls, nc);
    for (int k = 0; k < nc; k++) {
        assert_int_equal(F.order[k], k);  // each once, in plan order
        assert_true(zero_hostreg_covers(&B.R, B.mem + B.off[k], page));
    }
    zero_hostreg_stop(&B.R);
    zero_hostreg_stop(&B.R);  // idempotent
    zero_hostreg_unregister(&B.R);
    assert_int_equal(F.unregs, nc);
    for (int k = 0; k < nc; k++) {
        assert_int_equal(F.unreg_order[k], nc - 1 - k);  // reverse order
        assert_false(zero_hostreg_covers(&B.R, B.mem + B.off[k], 1));
    }
    zero_hostreg_unregister(&B.R);  // nothing left
    assert_int_equal(F.unregs, nc);
    bufs_free(&B);
}

static void test_worker_failure(void** state) {
    (void)state;
    static Bufs B;
    static Fake F;
    const size_t page = 4096;
    for (int fail_at = 0; fail_at < 6; fail_at++) {
        memset(&F, 0, sizeof F);
        bufs_plan(&B, 6, page);
        F.R = &B.R;
        F.fail_at = fail_at;
        assert_int_equal(zero_hostreg_start(&B.R, (ZeroRegOps){fake_reg, fake_unreg, NULL, &F}, 0), 0);
        assert_int_equal(wait_phase(&B.R, 10), ZR_FAILED);
        assert_int_equal(atomic_load(&F.bad), 0);
        const ZeroRegStatus st = zero_hostreg_status(&B.R);
        assert_int_equal(st.registered, (size_t)fail_at * page);
        assert_true(st.seconds >= 0);
        assert_non_null(strstr(B.R.why, "out of memory"));
        assert_int_equal(F.calls, fail_at + 1);  // the rest never tried
        for (int k = 0; k < 6; k++) assert_int_equal(zero_hostreg_covers(&B.R, B.mem + B.off[k], page), k < fail_at);
        zero_hostreg_stop(&B.R);
        zero_hostreg_unregister(&B.R);
        assert_int_equal(F.unregs, fail_at);  // only what was registered
        bufs_free(&B);
    }
    // the worker's thread set-up fails: nothing registered
    memset(&F, 0, sizeof F);
    bufs_plan(&B, 3, page);
    F.R = &B.R;
    F.fail_at = -1;
    F.init_fails = true;
    assert_int_equal(zero_hostreg_start(&B.R, (ZeroRegOps){fake_reg, fake_unreg, fake_init, &F}, 0), 0);
    assert_int_equal(wait_phase(&B.R, 10), ZR_FAILED);
    assert_int_equal(F.calls, 0);
    assert_int_equal(zero_hostreg_status(&B.R).registered, 0);
    assert_non_null(strstr(B.R.why, "no device"));
    bufs_free(&B);
}

static void test_worker_stop(void** state) {
    (void)state;
    static Bufs B;
    static Fake F;
    const size_t page = 4096;
    // a delay of 20 ms before each of 50 chunks: stopped after about 60 ms, joined promptly
    memset(&F, 0, sizeof F);
    bufs_plan(&B, 50, page);
    F.R = &B.R;
    F.fail_at = -1;
    assert_int_equal(zero_hostreg_start(&B.R, (ZeroRegOps){fake_reg, fake_unreg, NULL, &F}, 20), 0);
    const struct timespec ts = {0, 60 * 1000000};
    nanosleep(&ts, NULL);
    const double t0 = now_s();
    zero_hostreg_stop(&B.R);
    const double dt = now_s() - t0;
    print_message("stop joined the worker in %.1f ms after %d of 50 chunks\n", dt * 1e3, F.calls);
    assert_true(dt < 0.5);
    assert_false(B.R.started);
    assert_int_equal(zero_hostreg_status(&B.R).phase, ZR_STOPPED);
    const int calls = F.calls;
    assert_true(calls < 50);
    assert_int_equal(zero_hostreg_status(&B.R).registered, (size_t)calls * page);
    nanosleep(&ts, NULL);
    assert_int_equal(F.calls, calls);  // nothing after the stop
    zero_hostreg_unregister(&B.R);
    assert_int_equal(F.unregs, calls);
    bufs_free(&B);
    // stop while a register call is under way: it completes, nothing after it
    memset(&F, 0, sizeof F);
    bufs_plan(&B, 20, page);
    F.R = &B.R;
    F.fail_at = -1;
    F.sleep_us = 30000;
    assert_int_equal(zero_hostreg_start(&B.R, (ZeroRegOps){fake_reg, fake_unreg, NULL, &F}, 0), 0);
    const struct timespec ts2 = {0, 10 * 1000000};
    nanosleep(&ts2, NULL);
    zero_hostreg_stop(&B.R);
    assert_true(F.calls >= 1 && F.calls < 20);
    assert_int_equal(zero_hostreg_status(&B.R).phase, ZR_STOPPED);
    assert_int_equal(zero_hostreg_status(&B.R).registered, (size_t)F.calls * page);
    bufs_free(&B);  // stop + unregister + free
    assert_int_equal(F.unregs, F.calls);
    // no chunks: done at once, no thread; free without start
    ZeroHostReg R;
    ZeroRegBufDesc d = {NULL, 0, NULL, NULL};
    zero_hostreg_plan(&R, 0, 1, &d, page);
    assert_int_equal(zero_hostreg_start(&R, (ZeroRegOps){fake_reg, fake_unreg, NULL, &F}, 0), 0);
    assert_int_equal(zero_hostreg_status(&R).phase, ZR_DONE);
    assert_false(R.started);
    zero_hostreg_free(&R);
}

// The process exits while a worker runs (the trainer leaves the engine to the exit): by the time the atexit handlers
// registered before the worker started run (the CUDA runtime's, in the engine), the worker is stopped and joined.
static Bufs g_exit_bufs;
static Fake g_exit_fake;
static int g_exit_pipe = -1;

static void exit_check(void) {
    const ZeroRegStatus st = zero_hostreg_status(&g_exit_bufs.R);
    const char ok = !g_exit_bufs.R.started && st.phase == ZR_STOPPED && st.registered < st.total ? 'y' : 'n';
    if (write(g_exit_pipe, &ok, 1) != 1) _exit(3);
}

// A child process that starts a worker over `chunks` chunks whose register calls each take sleep_us, lets it run
// 20 ms and exits (with exit's wait bounded to wait_ms when >= 0), its atexit `check` (registered before the
// worker's handler, so it runs after it) writing one byte to the pipe; the parent returns that byte, checks the
// child exited 0, and gives the seconds from the fork to the child's end.
static char exit_child(int chunks, int sleep_us, int wait_ms, void (*check)(void), double* seconds) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    const double t0 = now_s();
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        g_exit_pipe = fd[1];
        if (atexit(check) != 0) _exit(4);
        if (wait_ms >= 0) zero_hostreg_set_exit_wait_ms(wait_ms);
        bufs_plan(&g_exit_bufs, chunks, 4096);
        g_exit_fake.R = &g_exit_bufs.R;
        g_exit_fake.fail_at = -1;
        g_exit_fake.sleep_us = sleep_us;
        if (zero_hostreg_start(&g_exit_bufs.R, (ZeroRegOps){fake_reg, fake_unreg, NULL, &g_exit_fake},
                               wait_ms >= 0 ? 0 : 1) != 0)
            _exit(5);
        const struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);  // the worker is under way
        exit(0);
    }
    close(fd[1]);
    char got = 0;
    const ssize_t n = read(fd[0], &got, 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    *seconds = now_s() - t0;
    close(fd[0]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(n, 1);
    return got;
}

static void test_exit_joins_worker(void** state) {
    (void)state;
    double dt;
    assert_int_equal(exit_child(200, 2000, -1, exit_check, &dt), 'y');
}

// The exit's wait is bounded: a register call that takes 0.9 s (a large chunk, a slow driver) with the bound at 50 ms:
// the process exits well before the call returns, the worker left running (one warning line).
static void exit_check_unjoined(void) {
    const char ok = g_exit_bufs.R.started ? 'y' : 'n';  // the handler gave up waiting
    if (write(g_exit_pipe, &ok, 1) != 1) _exit(3);
}

static void test_exit_wait_bounded(void** state) {
    (void)state;
    double dt;
    assert_int_equal(exit_child(4, 900000, 50, exit_check_unjoined, &dt), 'y');
    print_message("the exit returned %.0f ms after the start, a 900 ms register call under way\n", dt * 1e3);
    assert_true(dt < 0.6);
}

// ------------------------------------------------------------------ the copy protocol on a simulated device

// One stream: a FIFO of operations the device runs at random points, or when the host waits for a slot's event
// or synchronises. Copies read their source when they run (a direct H2D reads pageable-now-pinned host memory at
// stream time, as cudaMemcpyAsync from pinned memory does).
enum { OP_COPY, OP_ADD, OP_EVENT };
typedef struct {
    int kind;
    uint8_t* dst;
    const uint8_t* src;
    size_t n;
} DevOp;

#define QCAP 400000
typedef struct {
    DevOp q[QCAP];
    int head, tail;
    int ev_at[2][64];  // ring r, slot k: the queue position just past its last event record
    uint64_t rng;
    int direct, ringed;
} Dev;

static Dev g_dev;

static void dev_run_one(Dev* D) {
    DevOp* o = &D->q[D->head++];
    if (o->kind == OP_COPY) memcpy(o->dst, o->src, o->n);
    if (o->kind == OP_ADD)
        for (size_t i = 0; i < o->n; i++) o->dst[i] = (uint8_t)(o->dst[i] + o->src[i]);
}

static void dev_progress(Dev* D) {
    for (int k = (int)(rnd(&D->rng) % 4); k > 0 && D->head < D->tail; k--) dev_run_one(D);
}

static void dev_sync(Dev* D) {
    while (D->head < D->tail) dev_run_one(D);
}

static void dev_push(Dev* D, int kind, void* dst, const void* src, size_t n) {
    assert_true(D->tail < QCAP);
    D->q[D->tail++] = (DevOp){kind, dst, src, n};
}

typedef struct {
    Dev* D;
    int ring;
} RingCtx;

static void sim_ring_copy(void* ctx, int slot, void* dst, const void* src, size_t n, bool to_host, void* stream) {
    (void)to_host;
    (void)stream;
    RingCtx* c = ctx;
    dev_push(c->D, OP_COPY, dst, src, n);
    dev_push(c->D, OP_EVENT, NULL, NULL, 0);
    c->D->ev_at[c->ring][slot] = c->D->tail;
    dev_progress(c->D);
}

static void sim_ring_wait(void* ctx, int slot) {
    RingCtx* c = ctx;
    while (c->D->head < c->D->ev_at[c->ring][slot]) dev_run_one(c->D);
}

// the plan of the run under way: every direct copy's host range must lie in one registered chunk (CUDA's rule)
static const ZeroHostReg* g_direct_plan;
static int g_direct_outside;

static void sim_direct(void* ctx, void* dst, const void* src, size_t n, bool to_host, void* stream) {
    (void)ctx;
    (void)stream;
    if (g_direct_plan && !zero_hostreg_covers(g_direct_plan, to_host ? (const void*)dst : src, n)) g_direct_outside++;
    dev_push(&g_dev, OP_COPY, dst, src, n);
    dev_progress(&g_dev);
}

// the hazard: a direct copy without retiring the ring's pending D2H into the range first
// (whole copies: run only without run_protocol's spanning gathers)
static size_t copy_without_retire(const ZeroHostReg* H, ZeroRing* R, void* dst, const void* src, size_t n,
                                  bool to_host, void* stream, ZeroDirectOps d) {
    const void* host = to_host ? (const void*)dst : src;
    if (zero_hostreg_covers(H, host, n)) {
        d.copy(d.ctx, dst, src, n, to_host, stream);
        return n;
    }
    if (to_host) zero_ring_d2h(R, dst, src, n, stream);
    else zero_ring_h2d(R, dst, src, n, stream);
    return 0;
}

typedef size_t (*CopyFn)(const ZeroHostReg*, ZeroRing*, void*, const void*, size_t, bool, void*, ZeroDirectOps);

#define PU 12       // units
#define PSTEPS 4
#define PMICRO 2
#define PBUCKET 40  // bytes per gradient bucket

typedef struct {
    size_t off[PU], len[PU];
    size_t bytes;
} Layout;

// Returns true when every accumulated gradient and every gathered unit came out exact. The engine's order: per step
// and micro-batch, each unit's gradient buckets (micro > 0: up from the host, add; then down) on the stream; after the
// last micro-batch, the main ring drained and the device synchronised (zp_grad_norm, the CPU thread's wait); the CPU
// optimizer writes the weights and publishes them through its own ring; the next step's gathers read them.
// flip_per_mille: the chance, before each copy, that the next chunk's registration returns. span: some gathers copy
// two or three adjacent units in one copy (reaching past a chunk's end: zero_hostreg_copy cuts them at the chunks).
static bool run_protocol(uint64_t seed, CopyFn copy, int flip_per_mille, bool span, int* direct, int* ringed) {
    Dev* D = &g_dev;
    memset(D, 0, sizeof *D);
    D->rng = seed * 0x9e3779b97f4a7c15ull + 1;
    const size_t page = 64;
    // 1 .. PU units (few units: a unit's D2H of micro-batch 0 may still sit in the ring at its H2D of micro-batch 1)
    const int nu = 1 + (int)(rnd(&D->rng) % PU);
    Layout lg, lw;
    size_t at = 0;
    for (int u = 0; u < nu; u++) {  // unit sizes: multiples of 16, some whole pages
        lg.off[u] = at;
        lg.len[u] = rnd(&D->rng) % 3 == 0 ? page * (1 + rnd(&D->rng) % 3) : 16 * (1 + rnd(&D->rng) % 12);
        at += lg.len[u];
    }
    lg.bytes = at;
    lw = lg;
    uint8_t* G = aligned_alloc(page, CEIL_DIV(lg.bytes, page) * page);  // host gradients (pageable)
    uint8_t* W = aligned_alloc(page, CEIL_DIV(lw.bytes, page) * page);  // host 16-bit weights (pageable)
    uint8_t* expect = calloc(lg.bytes, 1);
    uint8_t* dgrad = malloc(lg.bytes);   // the backward's gradients (device), one micro-batch
    uint8_t* dstage = malloc(PBUCKET);   // the gradient staging buffer (device)
    uint8_t* dw = malloc(lw.bytes);      // the units' published weights (device)
    uint8_t* dfull = malloc(lw.bytes);   // the gathered units (device)
    uint8_t* src = malloc((size_t)PSTEPS * PMICRO * lg.bytes);  // the gradients' values, kept until synchronised
    memset(G, 0, lg.bytes);
    for (size_t i = 0; i < lw.bytes; i++) W[i] = (uint8_t)rnd(&D->rng);
    ZeroRegBufDesc d[2] = {{W, lw.bytes, lw.off, lw.len}, {G, lg.bytes, lg.off, lg.len}};
    ZeroHostReg H;
    zero_hostreg_plan(&H, nu, 2, d, page);
    const int slots = 1 + (int)(rnd(&D->rng) % 6);
    uint8_t* mem[2] = {malloc((size_t)slots * 24), malloc((size_t)slots * 24)};
    RingCtx rc[2] = {{D, 0}, {D, 1}};
    ZeroRing ring[2];
    for (int r = 0; r < 2; r++) zero_ring_init(&ring[r], slots, 24, mem[r], (ZeroRingOps){sim_ring_copy, sim_ring_wait, &rc[r]});
    const ZeroDirectOps dops = {sim_direct, NULL};
    g_direct_plan = &H;
    int next = 0;  // the next chunk the "worker" registers
    bool ok = true;
#define COPY(rg, dst, s_, n, to_host)                                                                        \
    do {                                                                                                     \
        if (next < H.num_chunks && (int)(rnd(&D->rng) % 1000) < flip_per_mille)                              \
            atomic_store_explicit(&H.chunk[next++].registered, 1, memory_order_release);                     \
        const size_t got_ = copy(&H, &ring[rg], dst, s_, n, to_host, NULL, dops);                           \
        if (got_ > n) ok = false;                                                                            \
        if (got_) (*direct)++;                                                                               \
        if (got_ < n) (*ringed)++;                                                                           \
    } while (0)
    for (int step = 0; step < PSTEPS && ok; step++) {
        for (int m = 0; m < PMICRO; m++) {
            uint8_t* g = src + ((size_t)step * PMICRO + m) * lg.bytes;
            for (size_t i = 0; i < lg.bytes; i++) g[i] = (uint8_t)rnd(&D->rng);
            for (size_t i = 0; i < lg.bytes; i++) expect[i] = (uint8_t)((m == 0 ? 0 : expect[i]) + g[i]);
            dev_push(D, OP_COPY, dgrad, g, lg.bytes);  // the backward
            for (int u = nu - 1; u >= 0; u--)         // the backward's order: last unit first
                for (size_t o = 0; o < lg.len[u]; o += PBUCKET) {
                    const size_t n = T5_MIN((size_t)PBUCKET, lg.len[u] - o);
                    uint8_t* h = G + lg.off[u] + o;
                    if (m > 0) {
                        COPY(0, dstage, h, n, false);
                        dev_push(D, OP_ADD, dstage, dgrad + lg.off[u] + o, n);
                    } else {
                        dev_push(D, OP_COPY, dstage, dgrad + lg.off[u] + o, n);
                    }
                    COPY(0, h, dstage, n, true);
                }
        }
        zero_ring_drain(&ring[0]);  // zp_grad_norm
        dev_sync(D);                // the CPU optimizer thread waits for ev_grads_done
        ok &= memcmp(G, expect, lg.bytes) == 0;
        // the CPU optimizer: new weights from the gradients, published unit by unit through its own ring
        for (size_t i = 0; i < lw.bytes; i++) W[i] = (uint8_t)(W[i] * 3 + G[i] + 1);
        for (int u = 0; u < nu; u++) COPY(1, dw + lw.off[u], W + lw.off[u], lw.len[u], false);
        // the next forward's gathers (offload_param: from the host partition) through the main ring
        for (int u = 0; u < nu;) {
            const int want = span ? 1 + (int)(rnd(&D->rng) % 3) : 1;  // units in this copy
            const int k = T5_MIN(nu - u, want);
            const size_t n = lw.off[u + k - 1] + lw.len[u + k - 1] - lw.off[u];
            COPY(0, dfull + lw.off[u], W + lw.off[u], n, false);
            u += k;
        }
        dev_sync(D);  // the next CPU step writes W only after the step's stream work (ev_updated, ev_grads_done)
        ok &= memcmp(dw, W, lw.bytes) == 0 && memcmp(dfull, W, lw.bytes) == 0;
    }
#undef COPY
    g_direct_plan = NULL;
    for (int r = 0; r < 2; r++) zero_ring_free(&ring[r]);
    zero_hostreg_free(&H);
    free(mem[0]);
    free(mem[1]);
    free(G);
    free(W);
    free(expect);
    free(dgrad);
    free(dstage);
    free(dw);
    free(dfull);
    free(src);
    return ok;
}

// the direct pieces of a copy (test_copy_spans_chunks)
typedef struct {
    int n;
    const char* host[8];
    size_t len[8];
} Pieces;

static void record_direct(void* ctx, void* dst, const void* src, size_t n, bool to_host, void* stream) {
    Pieces* p = ctx;
    sim_direct(NULL, dst, src, n, to_host, stream);
    assert_true(p->n < 8);
    p->host[p->n] = to_host ? (const char*)dst : (const char*)src;
    p->len[p->n++] = n;
}

// A copy that starts in one chunk and runs past its end (three chunks of one page each, the middle one registered)
// is cut at the chunk boundaries: the middle page goes direct as one piece, the rest through the ring, every byte
// arrives, in both directions.
static void test_copy_spans_chunks(void** state) {
    (void)state;
    const size_t page = 64;
    uint8_t* H = aligned_alloc(page, 3 * page);
    uint8_t dev[3 * 64], back[3 * 64];
    for (size_t i = 0; i < 3 * page; i++) H[i] = (uint8_t)(i * 7 + 1);
    const size_t off[3] = {0, page, 2 * page}, len[3] = {page, page, page};
    ZeroRegBufDesc d = {H, 3 * page, off, len};
    ZeroHostReg R;
    zero_hostreg_plan(&R, 3, 1, &d, page);
    assert_int_equal(R.num_chunks, 3);
    atomic_store(&R.chunk[1].registered, 1);
    memset(&g_dev, 0, sizeof g_dev);
    g_dev.rng = 5;
    RingCtx rc = {&g_dev, 0};
    uint8_t mem[4 * 24];
    ZeroRing ring;
    zero_ring_init(&ring, 4, 24, mem, (ZeroRingOps){sim_ring_copy, sim_ring_wait, &rc});
    g_direct_plan = &R;
    g_direct_outside = 0;
    Pieces P = {0};
    const ZeroDirectOps dops = {record_direct, &P};
    // H2D of [10, 3 page - 10): chunk 0's tail, chunk 1 whole, chunk 2's head
    memset(dev, 0, sizeof dev);
    size_t got = zero_hostreg_copy(&R, &ring, dev + 10, H + 10, 3 * page - 20, false, NULL, dops);
    dev_sync(&g_dev);
    assert_int_equal(got, page);
    assert_int_equal(P.n, 1);
    assert_ptr_equal(P.host[0], (const char*)H + page);
    assert_int_equal(P.len[0], page);
    assert_memory_equal(dev + 10, H + 10, 3 * page - 20);
    // D2H of the same range back into H (after the bytes were changed on the "device")
    for (size_t i = 0; i < sizeof dev; i++) dev[i] = (uint8_t)(dev[i] ^ 0x5a);
    memcpy(back, H, sizeof back);
    for (size_t i = 10; i < 3 * page - 10; i++) back[i] = dev[i];
    P.n = 0;
    got = zero_hostreg_copy(&R, &ring, H + 10, dev + 10, 3 * page - 20, true, NULL, dops);
    zero_ring_drain(&ring);
    dev_sync(&g_dev);
    assert_int_equal(got, page);
    assert_int_equal(P.n, 1);
    assert_memory_equal(H, back, sizeof back);
    // nothing registered: all through the ring; everything registered: three direct pieces, one per chunk
    atomic_store(&R.chunk[1].registered, 0);
    P.n = 0;
    assert_int_equal(zero_hostreg_copy(&R, &ring, dev, H, 3 * page, false, NULL, dops), 0);
    assert_int_equal(P.n, 0);
    for (int k = 0; k < 3; k++) atomic_store(&R.chunk[k].registered, 1);
    assert_int_equal(zero_hostreg_copy(&R, &ring, dev, H, 3 * page, false, NULL, dops), 3 * page);
    assert_int_equal(P.n, 3);
    for (int k = 0; k < 3; k++) assert_int_equal(P.len[k], page);
    // no plan: the ring
    assert_int_equal(zero_hostreg_copy(NULL, &ring, dev, H, 3 * page, false, NULL, dops), 0);
    zero_ring_drain(&ring);
    dev_sync(&g_dev);
    assert_int_equal(g_direct_outside, 0);
    g_direct_plan = NULL;
    zero_ring_free(&ring);
    for (int k = 0; k < 3; k++) atomic_store(&R.chunk[k].registered, 0);  // nothing to unregister (no ops)
    zero_hostreg_free(&R);
    free(H);
}

static void test_copy_protocol(void** state) {
    (void)state;
    int direct = 0, ringed = 0, bad_caught = 0;
    g_direct_outside = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        // the chance of a registration before each copy: never (the ring alone), all at once, or spread over the run
        const int flip = seed % 3 == 0 ? 0 : seed % 3 == 1 ? 1000 : (int)(1 + seed % 20);
        // every other seed, gathers of several units in one copy (spanning chunks)
        const bool span = seed % 2 == 0;
        if (!run_protocol(seed, zero_hostreg_copy, flip, span, &direct, &ringed))
            fail_msg("seed %llu (flip %d per mille%s): a gradient sum or a gathered unit is wrong",
                     (unsigned long long)seed, flip, span ? ", spanning gathers" : "");
        int d2 = 0, r2 = 0;
        if (flip > 0 && flip < 1000 && !run_protocol(seed, copy_without_retire, flip, false, &d2, &r2)) bad_caught++;
    }
    print_message("copies: %d direct, %d through the rings; the protocol without the retire failed %d of 100 runs\n",
                  direct, ringed, bad_caught);
    assert_int_equal(g_direct_outside, 0);  // no direct piece outside one registered chunk
    assert_true(direct > 1000 && ringed > 1000);
    assert_true(bad_caught > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        // first: its child must start the process's first worker (the exit handler registered after its own)
        cmocka_unit_test(test_exit_joins_worker),
        cmocka_unit_test(test_exit_wait_bounded),  // likewise (a fork before the parent starts any worker)
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_plan_random),
        cmocka_unit_test(test_plan_fixed),
        cmocka_unit_test(test_plan_real_layouts),
        cmocka_unit_test(test_worker_registers_everything),
        cmocka_unit_test(test_worker_failure),
        cmocka_unit_test(test_worker_stop),
        cmocka_unit_test(test_copy_spans_chunks),
        cmocka_unit_test(test_copy_protocol),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
