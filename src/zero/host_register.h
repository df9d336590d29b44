/*
 * host_register.h: the background registration of the ZeRO engine's pageable host buffers (offload_optimizer /
 * offload_param pin_memory false) with CUDA, so that their copies leave the pinned staging ring (staging.h) for the
 * pinned path's direct DMA while training runs (docs/zero.md, "pin_memory: false"). Pure C: registering and
 * unregistering a range are the caller's ZeroRegOps (part_hostreg.c gives cudaHostRegister / cudaHostUnregister),
 * so that the plan, the worker and its failure and stop paths run on the CPU in test/test_zero_host_register.c.
 *
 * The chunk plan. CUDA's rule: a copy's host range must lie inside one registration (one spanning two
 * registrations, or registered and unregistered memory, fails with an invalid value), and two registrations may not
 * share a page. Every copy the engine makes between a host buffer and the GPU lies inside one unit's region of that
 * buffer (a gather, a publish, a view, a gradient bucket: part.h), and unit regions sit back to back, rarely on page
 * boundaries. So a buffer is cut into chunks only at unit boundaries that fall on a page boundary of the address:
 * a chunk is one or more whole unit regions (the first chunk starts at the buffer, the last ends at its end), every
 * chunk starts on a page, and no unit's region is split. Each chunk is one registration.
 *
 *   zero_hostreg_plan    the chunks of up to ZERO_HOSTREG_MAX_BUFS buffers (in registration priority: buffer by
 *                        buffer in the order given, by address within a buffer)
 *   zero_hostreg_start   a worker thread registers the chunks one by one (optionally pausing delay_ms before each)
 *   zero_hostreg_covers  whether [p, p + n) lies inside one chunk whose registration has returned (an acquire load of
 *                        the chunk's flag, which the worker stores with release after the register call returned):
 *                        the copy may take the pinned path. Once true for a range it stays true until
 *                        zero_hostreg_unregister, so a range's copies switch from the ring to the DMA once, never back.
 *   zero_hostreg_stop    asks the worker to stop before its next chunk and joins it (idempotent); the process's
 *                        exit does the same for every live worker (an atexit handler, registered after the CUDA
 *                        runtime's: the trainer leaves the engine to the exit, and the runtime's teardown must not
 *                        meet a register call under way), but waits at most ZERO_HOSTREG_EXIT_WAIT_MS for them all
 *                        (then one warning, and the exit goes on)
 *   zero_hostreg_unregister  (after stop, once no copy is in flight) unregisters every registered chunk
 *
 * Failure: the first register call that fails stops the worker (its chunk and the rest stay unregistered: their
 * copies keep the ring), one warning line says how many bytes were registered and why; never an abort.
 */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "staging.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_HOSTREG_MAX_BUFS 8

// The value of T5TRAIN_PAGEABLE_REGISTER: NULL or "" -> 1 (on: the default), "0" -> 0 (the staging ring alone),
// "1" -> 1; -1 for anything else (the engine then stops with exit 2, but only when some host buffer its
// copies touch is pageable: a fully pinned run never reads the variable).
int zero_hostreg_mode(const char* v);
// The value of T5TRAIN_PAGEABLE_REGISTER_DELAY_MS (a pause before each chunk, to spread the switch over several steps
// in tests): NULL or "" -> 0, a whole number 0 .. 60000; -1 for anything else.
int zero_hostreg_delay_ms(const char* v);

// One buffer to register: its address and size, and where each unit's region lies in it.
typedef struct {
    void* base;               // page aligned in the engine (an mmap); any address in tests
    size_t bytes;
    const size_t* unit_off;   // (num_units) byte offset of unit u's region in the buffer
    const size_t* unit_len;   // (num_units) its length; 0: unit u has no region in this buffer
} ZeroRegBufDesc;

typedef struct {
    int buf;                  // index into the plan's buffers
    size_t off, bytes;        // [off, off + bytes) of the buffer; off is on a page of the address
    int first_unit, num_units;  // the units whose regions it holds (first_unit: the region at its start)
    atomic_int registered;    // 1 once the register call returned success (release / acquire)
} ZeroRegChunk;

typedef struct {
    // register [p, p + n): 0, or non-zero with a reason in why (one line, no newline)
    int (*reg)(void* ctx, void* p, size_t n, char* why, size_t whylen);
    void (*unreg)(void* ctx, void* p, size_t n);
    // the worker's first call (the engine: cudaSetDevice); NULL: none. Non-zero with why set: nothing is registered.
    int (*thread_init)(void* ctx, char* why, size_t whylen);
    void* ctx;
} ZeroRegOps;

typedef enum {
    ZR_IDLE = 0,     // planned, no worker
    ZR_RUNNING = 1,
    ZR_DONE = 2,     // every chunk registered
    ZR_FAILED = 3,   // a register call failed: the chunks before it are registered, the rest keep the ring
    ZR_STOPPED = 4,  // zero_hostreg_stop before the end
} ZeroRegPhase;

typedef struct {
    int num_bufs;
    char* base[ZERO_HOSTREG_MAX_BUFS];
    size_t bytes[ZERO_HOSTREG_MAX_BUFS];
    int buf_first[ZERO_HOSTREG_MAX_BUFS];  // its chunks: chunk[buf_first[b] .. + buf_count[b]), by offset
    int buf_count[ZERO_HOSTREG_MAX_BUFS];
    int num_chunks;
    ZeroRegChunk* chunk;      // (num_chunks) buffer by buffer; also the registration order
    size_t total_bytes;       // the chunks' bytes: what the worker registers when it completes
    // the worker
    ZeroRegOps ops;
    int delay_ms;
    pthread_t thread;
    atomic_bool started;      // the thread runs and is not joined (written under the stop lock; read anywhere)
    atomic_bool stop;
    atomic_int phase;         // ZeroRegPhase; the final value stored with release after t_end and why
    atomic_size_t registered_bytes;
    double t_start, t_end;    // wall clock (s): the worker's start, its end (valid once phase >= ZR_DONE)
    char why[256];            // ZR_FAILED: the reason (valid once phase == ZR_FAILED, acquire)
} ZeroHostReg;

// Plans the chunks of buffers b[0 .. num_bufs) (see above; page: the host's page size, a power of two). Buffers of 0
// bytes or without any unit region get no chunk. The caller's arrays are not kept.
void zero_hostreg_plan(ZeroHostReg* R, int num_units, int num_bufs, const ZeroRegBufDesc* b, size_t page);
// Starts the worker (a no-op without chunks: phase ZR_DONE at once). Returns 0, or -1 when the thread cannot start
// (phase ZR_FAILED, why set; nothing registered).
int zero_hostreg_start(ZeroHostReg* R, ZeroRegOps ops, int delay_ms);
// True when [p, p + n) (n > 0) lies in one registered chunk. Any thread, any time; lock-free.
bool zero_hostreg_covers(const ZeroHostReg* R, const void* p, size_t n);
// The chunk holding p, or -1 (p in no planned chunk).
int zero_hostreg_chunk_of(const ZeroHostReg* R, const void* p);
void zero_hostreg_stop(ZeroHostReg* R);
// The process's exit waits at most this long for every live worker together (a register call under way: a large
// chunk, a hung driver), then exits without them, with one warning line. Tests may lower it.
#define ZERO_HOSTREG_EXIT_WAIT_MS 10000
void zero_hostreg_set_exit_wait_ms(int ms);
void zero_hostreg_unregister(ZeroHostReg* R);
// stop + unregister + frees the bookkeeping
void zero_hostreg_free(ZeroHostReg* R);

// A snapshot for the statistics (any thread): the phase, bytes registered so far, and for a finished worker (done,
// failed or stopped) the seconds from its start to its end (else -1).
typedef struct {
    ZeroRegPhase phase;
    size_t registered, total;
    double seconds;
} ZeroRegStatus;
ZeroRegStatus zero_hostreg_status(const ZeroHostReg* R);

// The direct copy of a registered range: the pinned path's plain asynchronous copy on `stream` (part.c:
// cudaMemcpyAsync), which reads an H2D's host source when the stream gets there.
typedef struct {
    void (*copy)(void* ctx, void* dst, const void* src, size_t n, bool to_host, void* stream);
    void* ctx;
} ZeroDirectOps;

// One copy between a pageable engine buffer and the GPU (to_host: device src -> host dst; else host src -> device
// dst), as zp_copy_to_dev / zp_copy_to_host issue it, cut at H's chunk boundaries (H may be NULL: none): a piece whose
// host range lies in a registered chunk first has the pending D2H of ring R overlapping it retired
// (zero_ring_sync_range: an older gradient in a slot would otherwise land over this copy's bytes later, or an H2D
// would read the bytes before it landed), then goes by d.copy; every other piece goes through R (zero_ring_h2d /
// zero_ring_d2h). A piece never spans two chunks, so a direct copy never spans two registrations. Returns the bytes
// that took the direct copy (0 .. n).
size_t zero_hostreg_copy(const ZeroHostReg* H, ZeroRing* R, void* dst, const void* src, size_t n, bool to_host,
                         void* stream, ZeroDirectOps d);

#ifdef __cplusplus
}
#endif
