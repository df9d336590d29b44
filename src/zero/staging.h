/*
 * staging.h: the pinned staging ring through which the ZeRO engine copies between pageable host buffers
 * (offload_optimizer / offload_param pin_memory false) and the GPU, DeepSpeed's "pinned staging ring of
 * buffer_count buffers" (REFERENCE 4.5). Pure C: the copies and the waits are the caller's ZeroRingOps (part.c
 * gives cudaMemcpyAsync + cudaEventRecord on the slot's event, and cudaEventSynchronize), so that the ring's
 * logic runs on the CPU in test/test_zero_staging.c against a simulated device.
 *
 * A ring is `count` slots of `slot_bytes` each in one pinned buffer. A transfer of n bytes is cut into
 * ceil(n / slot_bytes) chunks (zero_staging_chunk); chunk after chunk takes the next slot round robin.
 *
 *   host -> device (zero_ring_h2d): the host copies the chunk from the pageable source into the slot NOW (on the
 *     calling thread), then the ring enqueues slot -> device on the caller's stream and records the slot's event.
 *     So the pageable source is read at issue time, not when the stream reaches the copy: the caller issues it
 *     only once the source holds the bytes it means (the engine does: see part.h, "staging ring").
 *   device -> host (zero_ring_d2h): the ring enqueues device -> slot on the caller's stream, records the slot's
 *     event and remembers (destination, length). The bytes reach the pageable destination later, when the slot
 *     is retired: its event waited for on the host, then slot -> destination by the host. Until then the
 *     destination holds its old bytes: whoever reads it on the host first calls zero_ring_drain (every pending
 *     transfer) or zero_ring_sync_range (the pending ones overlapping a range).
 *
 * Slot reuse: a slot is taken again only after it was retired (the copy that used it completed, and for a
 * device -> host copy its bytes were moved out). Ordering between transfers of the ring itself: before reading a
 * host range (h2d) or writing it (d2h), the pending device -> host transfers overlapping it are retired first,
 * oldest first, so the host sees the bytes in issue order. Stream order of each copy is the caller's stream, as a
 * plain cudaMemcpyAsync would have it.
 *
 * Threads: every call takes the ring's mutex for its whole duration (each engine thread has its own ring, so the
 * lock is never contended; it makes a shared use safe too).
 */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Chunks of a transfer of `bytes` through slots of `slot_bytes`: chunk i is [i * slot_bytes, min(bytes, ...)).
size_t zero_staging_num_chunks(size_t bytes, size_t slot_bytes);
void zero_staging_chunk(size_t bytes, size_t slot_bytes, size_t i, size_t* off, size_t* len);

typedef struct {
    // Enqueue a copy of n bytes on `stream` (to_host: device src -> pinned slot dst; else pinned slot src -> device
    // dst), then record the slot's completion event on the same stream (replacing the slot's previous record).
    void (*copy)(void* ctx, int slot, void* dst, const void* src, size_t n, bool to_host, void* stream);
    // Block the calling thread until the copy last recorded on the slot's event has completed.
    void (*wait)(void* ctx, int slot);
    void* ctx;
} ZeroRingOps;

typedef struct {
    bool busy;        // a copy through it was enqueued and the slot not yet retired
    bool to_host;     // that copy goes device -> host: on retire, slot -> host_dst
    char* host_dst;
    size_t len;
    uint64_t seq;     // issue order (retire overlapping / drain oldest first)
} ZeroRingSlot;

typedef struct {
    int count;
    size_t slot_bytes;
    char* mem;             // count * slot_bytes, pinned (the caller's)
    ZeroRingSlot* slot;
    int next;              // the slot the next chunk takes
    uint64_t seq;
    ZeroRingOps ops;
    pthread_mutex_t mu;
    // statistics (under mu)
    uint64_t chunks;       // chunks issued
    uint64_t reuse_waits;  // chunks that had to retire their slot first (the ring was full)
    double bytes;          // bytes through the ring, both directions
} ZeroRing;

void zero_ring_init(ZeroRing* R, int count, size_t slot_bytes, void* mem, ZeroRingOps ops);

// Threads of each host copy between a pageable buffer and a slot: the value of T5TRAIN_STAGING_THREADS `v` (a whole
// number 1 .. 64), or min(8, procs / 2) when unset or empty; -1 for anything else (the engine then stops, exit 2).
int zero_staging_threads(const char* v, int procs);
// Retires everything pending (zero_ring_drain), then frees the bookkeeping (not mem).
void zero_ring_free(ZeroRing* R);
// dev_dst <- host_src (n bytes) on stream s, through the ring (see above: host_src is read now).
void zero_ring_h2d(ZeroRing* R, void* dev_dst, const void* host_src, size_t n, void* s);
// host_dst <- dev_src (n bytes) on stream s, through the ring; host_dst is written when the transfer is retired.
void zero_ring_d2h(ZeroRing* R, void* host_dst, const void* dev_src, size_t n, void* s);
// Retires every pending transfer, oldest first: on return every device -> host transfer issued so far has
// landed in its destination and every slot is free.
void zero_ring_drain(ZeroRing* R);
// Retires the pending device -> host transfers whose destination overlaps [p, p + n), oldest first.
void zero_ring_sync_range(ZeroRing* R, const void* p, size_t n);
double zero_ring_bytes(ZeroRing* R);
void zero_ring_reset_bytes(ZeroRing* R);

#ifdef __cplusplus
}
#endif
