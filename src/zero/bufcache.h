/*
 * bufcache.h: the engine's run-time GPU buffers (stage 3 gathered units, stage 2/3 per-unit gradients) kept by exact
 * size and reused in a fixed rule, pure C (no CUDA): the engine and `t5train estimate` run the same rule over the
 * same calls, so the estimate's buffer bytes are the run's.
 *
 * Why not CUDA's stream-ordered pool: a buffer freed on one stream (a release on the compute stream) is reused by
 * an allocation on another (the next gather on the gather stream) only once the pool sees the free completed, so
 * with the CPU running ahead the pool keeps reserving more: measured on an H100, t5-3b stage 3 + both offloads,
 * 1.81 GiB in use at its high water and 4.7-7.2 GiB reserved, varying from run to run.
 *
 * The rule: a size class per distinct buffer size; a class keeps the buffers it has made, the free ones in the
 * order they were freed. take(class): the oldest free buffer of the class, if at least `quarantine` buffers (of
 * any class) were freed after it; else a new buffer. The quarantine keeps the newest frees out of reach: the
 * engine waits for a reused buffer's free (a CUDA event), and the newest free is the work running right now (the
 * unit before the one being prefetched), so reusing it would serialise the gather with that unit's compute.
 *
 *   BufCache C; bufcache_init(&C, nclass, class_bytes, 1);
 *   bool fresh; int id = bufcache_take(&C, c, &fresh);  // fresh: a buffer the class did not have yet
 *   bufcache_give(&C, c, id);
 *   bufcache_bytes(&C)                                   // sum over classes of buffers made x class bytes
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

// The engine's quarantine for both of its caches (gathered units, gradients): the newest give is never reused.
#define BUFCACHE_QUARANTINE 1

typedef struct {
    int nclass;
    size_t* bytes;        // (nclass) buffer size of the class
    int* made;            // (nclass) buffers the class has made (ids 0 .. made-1)
    // per class, a FIFO of free buffer ids with the free serial they were given at
    int** fifo_id;
    int64_t** fifo_serial;
    int *head, *len, *cap;
    int64_t serial;       // buffers given back so far (all classes)
    int quarantine;
} BufCache;

void bufcache_init(BufCache* C, int nclass, const size_t* bytes, int quarantine);
void bufcache_free(BufCache* C);
// Forgets every buffer (made counts back to 0), keeping the classes: to replay from a clean state.
void bufcache_reset(BufCache* C);
int bufcache_take(BufCache* C, int c, bool* fresh);
void bufcache_give(BufCache* C, int c, int id);
size_t bufcache_bytes(const BufCache* C);

// Size classes of a list of sizes (class_of[i] for each of the n sizes; 0 sizes get -1; class sizes in bytes_out,
// capacity n; returns the number of classes). The distinct sizes, largest first: a size joins the class of the
// next larger one when it is at least BUFCACHE_MERGE of that class's size (its buffers then have the class's
// size), else it starts a class. Exact classes would not share memory between units of different sizes that are
// live at different times: T5-3b's encoder blocks (100.7 MB) and decoder blocks (134.2 MB) peak at different
// moments of the step, and exact classes made 3.5 GiB of buffers for 1.6 GiB live at once; one class for both
// makes 2.0 GiB. The shared embedding (65.8 MB, 0.49 of a decoder block) keeps its own.
#define BUFCACHE_MERGE 0.7
int bufcache_classes(const size_t* sizes, int n, int* class_of, size_t* bytes_out);

// The rule per unit, as the engine (unitbuf.c) and the estimate's replays use it: each unit's class and the buffer
// it holds.
typedef struct {
    BufCache C;
    int num_units;
    int* class_of;  // (num_units) the unit's class, -1 for an empty unit
    int* id_of;     // (num_units) the buffer the unit holds in its class, -1 none
} BufUnits;
void bufunits_init(BufUnits* U, int num_units, const size_t* unit_bytes, int quarantine);
void bufunits_free(BufUnits* U);
// Unit u (holding none) takes a buffer of its class: its id (*fresh: a new one), or -1 for an empty unit.
int bufunits_take(BufUnits* U, int u, bool* fresh);
// Unit u gives its buffer back: the id it held, or -1 when it held none.
int bufunits_give(BufUnits* U, int u);

#ifdef __cplusplus
}
#endif
