/*
 * test_zero_staging.c: the ZeRO engine's pinned staging ring (src/zero/staging.h) on the CPU, against a simulated
 * device: streams are FIFO queues of operations that run only when the "device" makes progress (at random points,
 * or when the host waits for a slot's event), so every copy really is asynchronous.
 *   - chunking: ceil(n / slot) chunks, each within a slot, back to back, covering the transfer exactly;
 *   - slot order and reuse: chunks take the slots round robin; a slot is written again (by the host for an H2D, by
 *     the device for a D2H) only after the host waited for the event of the copy that last used it; an H2D's slot
 *     still holds its bytes when the device copies it;
 *   - the engine's uses, randomized (1..5 slots of 1..64 bytes, transfers of 0..300 bytes, 2 streams): gradient
 *     buckets sent down into a pageable host buffer, accumulated over micro-batches (up, add on the device, down),
 *     with parameter gathers (host to device) on a second stream in between; after zero_ring_drain the host buffer
 *     holds the exact sum and every gathered device buffer its source; zero_ring_sync_range lands exactly the
 *     pending copies into a range; of two device-to-host copies into the same bytes the later one wins;
 *   - the 14-byte layout's protocol over several steps (gradients down into the units' own 16-bit weights, the drain
 *     of zp_grad_norm, the CPU optimizer or a skipped step writing the weights in place, gathers of the next step):
 *     no gradient lands over the new weights, every gather reads them (fails without the drain).
 */
#include "t5test.h"

#include "../src/base/common.h"
#include "../src/zero/staging.h"

// ------------------------------------------------------------------ the simulated device

enum { OP_COPY_H2D, OP_COPY_D2H, OP_DEV_ADD, OP_DEV_COPY };

typedef struct {
    int kind;
    int slot;              // ring copies
    uint8_t* dst;
    const uint8_t* src;
    size_t n;
    uint8_t* snap;         // H2D: the slot's bytes when the copy was enqueued
    uint64_t id;
} SimOp;

#define SIM_STREAMS 2
#define SIM_CAP 20000

typedef struct {
    SimOp q[SIM_STREAMS][SIM_CAP];
    int head[SIM_STREAMS], tail[SIM_STREAMS];
    uint64_t next_id;
    // per slot: the stream and op id its event was last recorded after; waited since the last copy through it
    int ev_stream[64];
    uint64_t ev_id[64];
    bool slot_used[64], slot_waited[64];
    int copy_slots[4096];  // the slot of each ring copy, in issue order (first 4096)
    int ncopies;
    int waits;
    uint64_t rng;
} Sim;

static Sim g_sim;

static uint64_t rnd(uint64_t* s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void sim_run_one(Sim* S, int st) {
    assert_true(S->head[st] < S->tail[st]);
    SimOp* op = &S->q[st][S->head[st]++];
    switch (op->kind) {
    case OP_COPY_H2D:
        // the host must not have touched the slot since it enqueued this copy
        assert_memory_equal(op->src, op->snap, op->n);
        memcpy(op->dst, op->src, op->n);
        free(op->snap);
        op->snap = NULL;
        break;
    case OP_COPY_D2H:
    case OP_DEV_COPY:
        memcpy(op->dst, op->src, op->n);
        break;
    case OP_DEV_ADD:
        for (size_t i = 0; i < op->n; i++) op->dst[i] = (uint8_t)(op->dst[i] + op->src[i]);
        break;
    }
}

// the device runs up to `budget` operations from random streams
static void sim_progress(Sim* S, int budget) {
    for (int k = 0; k < budget; k++) {
        const int st = (int)(rnd(&S->rng) % SIM_STREAMS);
        if (S->head[st] < S->tail[st]) sim_run_one(S, st);
    }
}

static void sim_drain_all(Sim* S) {
    for (int st = 0; st < SIM_STREAMS; st++)
        while (S->head[st] < S->tail[st]) sim_run_one(S, st);
}

static void sim_enqueue(Sim* S, int st, SimOp op) {
    assert_true(S->tail[st] < SIM_CAP);
    op.id = ++S->next_id;
    S->q[st][S->tail[st]++] = op;
}

static int stream_of(void* s) { return (int)(intptr_t)s - 1; }
static void* stream_ptr(int st) { return (void*)(intptr_t)(st + 1); }

static void sim_copy(void* ctx, int slot, void* dst, const void* src, size_t n, bool to_host, void* stream) {
    Sim* S = ctx;
    const int st = stream_of(stream);
    assert_true(slot >= 0 && slot < 64);
    // reuse only after the host waited for the slot's previous copy
    if (S->slot_used[slot]) assert_true(S->slot_waited[slot]);
    S->slot_used[slot] = true;
    S->slot_waited[slot] = false;
    if (S->ncopies < (int)T5_ARRAY_LEN(S->copy_slots)) S->copy_slots[S->ncopies] = slot;
    S->ncopies++;
    SimOp op = {.kind = to_host ? OP_COPY_D2H : OP_COPY_H2D, .slot = slot, .dst = dst, .src = src, .n = n};
    if (!to_host) {
        op.snap = malloc(n ? n : 1);
        memcpy(op.snap, src, n);
    }
    sim_enqueue(S, st, op);
    S->ev_stream[slot] = st;
    S->ev_id[slot] = S->next_id;
    sim_progress(S, (int)(rnd(&S->rng) % 3));  // the device runs asynchronously
}

static void sim_wait(void* ctx, int slot) {
    Sim* S = ctx;
    const int st = S->ev_stream[slot];
    while (S->head[st] < S->tail[st] && S->q[st][S->head[st]].id <= S->ev_id[slot]) sim_run_one(S, st);
    S->slot_waited[slot] = true;
    S->waits++;
}

static void sim_reset(Sim* S, uint64_t seed) {
    for (int st = 0; st < SIM_STREAMS; st++)
        for (int i = S->head[st]; i < S->tail[st]; i++) free(S->q[st][i].snap);
    memset(S, 0, sizeof *S);
    S->rng = seed * 2654435761u + 1;
}

static ZeroRing* ring_new(Sim* S, int count, size_t slot_bytes, void** mem) {
    ZeroRing* R = calloc(1, sizeof *R);
    *mem = malloc((size_t)count * slot_bytes);
    zero_ring_init(R, count, slot_bytes, *mem, (ZeroRingOps){sim_copy, sim_wait, S});
    return R;
}

static void ring_del(ZeroRing* R, void* mem) {
    zero_ring_free(R);
    free(R);
    free(mem);
}

// ------------------------------------------------------------------ tests

static void test_chunks(void** state) {
    (void)state;
    const size_t slots[] = {1, 3, 64, 4096, (size_t)4 << 20};
    const size_t sizes[] = {0, 1, 2, 63, 64, 65, 4095, 4096, 4097, 12288, 10000000};
    for (size_t a = 0; a < T5_ARRAY_LEN(slots); a++)
        for (size_t b = 0; b < T5_ARRAY_LEN(sizes); b++) {
            const size_t S = slots[a], n = sizes[b];
            const size_t nc = zero_staging_num_chunks(n, S);
            assert_int_equal(nc, (n + S - 1) / S);
            size_t expect = 0;
            for (size_t i = 0; i < nc; i++) {
                size_t off, len;
                zero_staging_chunk(n, S, i, &off, &len);
                assert_int_equal(off, expect);
                assert_true(len > 0 && len <= S);
                if (i + 1 < nc) assert_int_equal(len, S);
                expect = off + len;
            }
            assert_int_equal(expect, n);
        }
}

static void test_slot_order(void** state) {
    (void)state;
    Sim* S = &g_sim;
    sim_reset(S, 7);
    void* mem;
    ZeroRing* R = ring_new(S, 3, 16, &mem);
    uint8_t host[200], dev[200];
    for (int i = 0; i < 200; i++) host[i] = (uint8_t)i;
    // 10 chunks of 16 bytes (the last 8): slots 0 1 2 0 1 2 0 1 2 0; the 4th chunk onwards reuses a slot, which
    // the device has not necessarily reached: sim_copy asserts the host waited for it first
    zero_ring_h2d(R, dev, host, 152, stream_ptr(0));
    assert_int_equal(S->ncopies, 10);
    for (int i = 0; i < 10; i++) assert_int_equal(S->copy_slots[i], i % 3);
    assert_int_equal(S->waits, 7);
    assert_int_equal(R->reuse_waits, 7);
    zero_ring_drain(R);
    sim_drain_all(S);
    assert_memory_equal(dev, host, 152);
    // a D2H lands in its destination only when retired
    uint8_t out[40];
    memset(out, 0xEE, sizeof out);
    zero_ring_d2h(R, out, dev + 5, 40, stream_ptr(1));
    sim_drain_all(S);  // the device finished, the host has not moved the slots out yet
    for (int i = 0; i < 40; i++) assert_int_equal(out[i], 0xEE);
    zero_ring_sync_range(R, out + 16, 1);  // lands the chunk holding byte 16 only
    for (int i = 0; i < 40; i++) assert_int_equal(out[i], (i >= 16 && i < 32) ? host[5 + i] : 0xEE);
    zero_ring_drain(R);
    assert_memory_equal(out, host + 5, 40);
    assert_true(zero_ring_bytes(R) == 192.0);
    // two D2H into the same bytes: the later one wins even when its slot is retired first (slot order 0 1 2 0 1:
    // the old copy into X sits in slot 1, the new one in slot 0, and the next chunk retires slot 1 after slot 0)
    uint8_t X[8], Y[8], Z[8], V[8], oldv[8], newv[8];
    memset(oldv, 1, 8);
    memset(newv, 2, 8);
    memset(X, 0, 8);
    R->next = 0;
    zero_ring_d2h(R, Y, dev, 8, stream_ptr(0));
    zero_ring_d2h(R, X, oldv, 8, stream_ptr(0));
    zero_ring_d2h(R, Z, dev, 8, stream_ptr(0));
    zero_ring_d2h(R, X, newv, 8, stream_ptr(0));
    zero_ring_d2h(R, V, dev, 8, stream_ptr(0));
    zero_ring_drain(R);
    assert_memory_equal(X, newv, 8);
    memset(X, 0, 8);
    zero_ring_d2h(R, X, oldv, 8, stream_ptr(0));
    zero_ring_d2h(R, X, newv, 8, stream_ptr(1));
    zero_ring_drain(R);
    assert_memory_equal(X, newv, 8);
    ring_del(R, mem);
    sim_reset(S, 0);
}

// transfers of several MiB through 3 MiB slots: each chunk is copied by the staging threads (pieces of whole
// pages, the last one short), both ways, with an odd length and unaligned ends
static void test_large_chunks_threaded(void** state) {
    (void)state;
    Sim* S = &g_sim;
    sim_reset(S, 11);
    void* mem;
    const size_t slot = (size_t)3 << 20, n = ((size_t)10 << 20) + 12345;
    ZeroRing* R = ring_new(S, 2, slot, &mem);
    uint8_t* host = malloc(n + 7);
    uint8_t* dev = malloc(n + 7);
    uint8_t* back = malloc(n + 7);
    for (size_t i = 0; i < n + 7; i++) host[i] = (uint8_t)(i * 2654435761u >> 13);
    memset(dev, 0, n + 7);
    memset(back, 0, n + 7);
    zero_ring_h2d(R, dev + 3, host + 5, n, stream_ptr(0));
    zero_ring_drain(R);
    sim_drain_all(S);
    assert_memory_equal(dev + 3, host + 5, n);
    zero_ring_d2h(R, back + 1, dev + 3, n, stream_ptr(1));
    zero_ring_drain(R);
    assert_memory_equal(back + 1, host + 5, n);
    assert_int_equal(back[0], 0);
    assert_int_equal(back[n + 1], 0);
    free(host);
    free(dev);
    free(back);
    ring_del(R, mem);
    sim_reset(S, 0);
}

static void test_threads_setting(void** state) {
    (void)state;
    assert_int_equal(zero_staging_threads(NULL, 16), 8);
    assert_int_equal(zero_staging_threads("", 16), 8);
    assert_int_equal(zero_staging_threads(NULL, 6), 3);
    assert_int_equal(zero_staging_threads(NULL, 1), 1);
    assert_int_equal(zero_staging_threads(NULL, 64), 8);
    assert_int_equal(zero_staging_threads("1", 16), 1);
    assert_int_equal(zero_staging_threads("64", 16), 64);
    const char* bad[] = {"0", "65", "-2", "4x", "x", "2.5", " "};
    for (size_t i = 0; i < T5_ARRAY_LEN(bad); i++) assert_int_equal(zero_staging_threads(bad[i], 16), -1);
}

// the reduce path (gradient buckets down, accumulated over micro-batches through the host buffer) and the gather
// path (host partitions up on another stream), randomized
static void test_engine_paths_random(void** state) {
    (void)state;
    Sim* S = &g_sim;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        sim_reset(S, seed);
        const int count = 1 + (int)(rnd(&S->rng) % 5);
        const size_t slot = 1 + (size_t)(rnd(&S->rng) % 64);
        void* mem;
        ZeroRing* R = ring_new(S, count, slot, &mem);
        const size_t N = 1 + (size_t)(rnd(&S->rng) % 300);
        const int micro = 1 + (int)(rnd(&S->rng) % 4);
        uint8_t* gacc = malloc(N);     // pageable host gradient partition
        uint8_t* expect = calloc(N, 1);
        memset(gacc, 0x5A, N);         // garbage: micro-batch 0 overwrites it
        uint8_t* grads = malloc((size_t)micro * N);  // device: each micro-batch's gradient
        for (size_t i = 0; i < (size_t)micro * N; i++) grads[i] = (uint8_t)rnd(&S->rng);
        for (int m = 0; m < micro; m++)
            for (size_t i = 0; i < N; i++) expect[i] = (uint8_t)(expect[i] + grads[(size_t)m * N + i]);
        uint8_t* stage = malloc(N);    // device staging (one per stream, reused by every bucket)
        // gathers: host partitions -> device, on stream 1
        const size_t W = 1 + (size_t)(rnd(&S->rng) % 300);
        uint8_t* whost = malloc(W);
        uint8_t* wdev = calloc(W, 1);
        for (size_t i = 0; i < W; i++) whost[i] = (uint8_t)rnd(&S->rng);
        bool gathered = false;
        for (int m = 0; m < micro; m++) {
            // a gather before this micro-batch's backward (the forward's fetch)
            if (rnd(&S->rng) % 2) {
                zero_ring_h2d(R, wdev, whost, W, stream_ptr(1));
                gathered = true;
            }
            size_t off = 0;
            while (off < N) {
                const size_t want = 1 + (size_t)(rnd(&S->rng) % 120);  // (T5_MIN evaluates twice)
                const size_t len = T5_MIN(N - off, want);
                void* s0 = stream_ptr(0);
                if (m == 0) {
                    sim_enqueue(S, 0, (SimOp){.kind = OP_DEV_COPY, .dst = stage, .src = grads + off, .n = len});
                } else {
                    zero_ring_h2d(R, stage, gacc + off, len, s0);  // up (reads the host slot now)
                    sim_enqueue(S, 0,
                                (SimOp){.kind = OP_DEV_ADD, .dst = stage, .src = grads + (size_t)m * N + off, .n = len});
                }
                zero_ring_d2h(R, gacc + off, stage, len, s0);  // down (lands when retired)
                sim_progress(S, (int)(rnd(&S->rng) % 4));
                if (rnd(&S->rng) % 5 == 0) {  // a prefetch meanwhile
                    zero_ring_h2d(R, wdev, whost, W, stream_ptr(1));
                    gathered = true;
                }
                off += len;
            }
        }
        // zp_grad_norm: drain; then the host buffer is final whatever the device did not run yet
        zero_ring_drain(R);
        assert_memory_equal(gacc, expect, N);
        sim_drain_all(S);
        assert_memory_equal(gacc, expect, N);
        if (gathered) assert_memory_equal(wdev, whost, W);
        for (int k = 0; k < count; k++) assert_false(R->slot[k].busy);
        ring_del(R, mem);
        free(gacc);
        free(expect);
        free(grads);
        free(stage);
        free(whost);
        free(wdev);
    }
    sim_reset(S, 0);
}

// the 14-byte layout (share_gw, part.h): a unit's gradient goes down into the pageable host buffer of its own 16-bit
// weights; zp_grad_norm drains the ring; the CPU optimizer then reads the gradient and writes the new weights in
// the same place (or zp_optimizer_skip rounds them again from the master); the next step's gather reads the
// weights. After the drain no retire may land a gradient over the new weights, and every gather sees them.
static void test_shared_weights_protocol(void** state) {
    (void)state;
    Sim* S = &g_sim;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        sim_reset(S, seed + 1000);
        const int count = 1 + (int)(rnd(&S->rng) % 4);
        const size_t slot = 1 + (size_t)(rnd(&S->rng) % 48);
        void* mem;
        ZeroRing* R = ring_new(S, count, slot, &mem);
        enum { NU = 3 };
        const size_t N = 1 + (size_t)(rnd(&S->rng) % 200);
        uint8_t *whost[NU], *wdev[NU], *master[NU], *gdev[NU];
        for (int u = 0; u < NU; u++) {
            whost[u] = malloc(N);
            wdev[u] = calloc(N, 1);
            master[u] = malloc(N);
            gdev[u] = malloc(N);
            for (size_t i = 0; i < N; i++) master[u][i] = whost[u][i] = (uint8_t)rnd(&S->rng);
        }
        for (int step = 0; step < 6; step++) {
            // forward: gather every unit (stream 1); backward: gather again in reverse, then its gradient goes down
            // in buckets (stream 0) into its own weights' buffer
            for (int u = 0; u < NU; u++) zero_ring_h2d(R, wdev[u], whost[u], N, stream_ptr(1));
            for (int u = NU - 1; u >= 0; u--) {
                zero_ring_h2d(R, wdev[u], whost[u], N, stream_ptr(1));
                sim_drain_all(S);  // the compute stream waited for the gather before the unit's backward
                // the units whose backward is still to come hold their weights (the later ones hold gradients now)
                for (int u2 = 0; u2 <= u; u2++) assert_memory_equal(wdev[u2], whost[u2], N);
                for (size_t i = 0; i < N; i++) gdev[u][i] = (uint8_t)rnd(&S->rng);
                for (size_t off = 0; off < N;) {
                    const size_t want = 1 + (size_t)(rnd(&S->rng) % 70);
                    const size_t len = T5_MIN(N - off, want);
                    zero_ring_d2h(R, whost[u] + off, gdev[u] + off, len, stream_ptr(0));
                    sim_progress(S, (int)(rnd(&S->rng) % 3));
                    off += len;
                }
            }
            // zp_grad_norm: drain; the host buffers hold the gradients, whatever the device still has queued
            zero_ring_drain(R);
            for (int u = 0; u < NU; u++) assert_memory_equal(whost[u], gdev[u], N);
            // the CPU optimizer (reads the gradient, writes the weight in its place) or a skipped step (rounds the
            // weights again from the master)
            const bool skip = rnd(&S->rng) % 3 == 0;
            for (int u = 0; u < NU; u++)
                for (size_t i = 0; i < N; i++) {
                    if (!skip) master[u][i] = (uint8_t)(master[u][i] - whost[u][i]);
                    whost[u][i] = master[u][i];
                }
            // whatever the device does now, no gradient lands over the new weights
            sim_drain_all(S);
            for (int u = 0; u < NU; u++) assert_memory_equal(whost[u], master[u], N);
        }
        zero_ring_drain(R);
        sim_drain_all(S);
        for (int u = 0; u < NU; u++) {
            assert_memory_equal(whost[u], master[u], N);
            free(whost[u]);
            free(wdev[u]);
            free(master[u]);
            free(gdev[u]);
        }
        ring_del(R, mem);
    }
    sim_reset(S, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_slot_order), cmocka_unit_test(test_large_chunks_threaded), cmocka_unit_test(test_threads_setting),
        cmocka_unit_test(test_engine_paths_random),
        cmocka_unit_test(test_shared_weights_protocol),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
