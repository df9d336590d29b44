/*
 * plan.h: the arithmetic of the ZeRO engine, pure C (no CUDA), unit-tested on the CPU.
 *
 *   ZeroLayout  where every unit's elements live on this rank: the partition of each unit over the
 *               ranks (DeepSpeed's partition_parameters.py rule, REFERENCE 4.1), this rank's flat
 *               partition buffer, the optimizer sub-groups (sub_group_size) and which of them the CPU
 *               steps (offload_optimizer.ratio), and the reduce buckets of a unit's gradient.
 *   ZeroSched   stage 3's fetch/prefetch/release decisions over T5's static unit order (REFERENCE 4.2):
 *               one state machine used by the engine at run time and by the tests, so that what the
 *               engine issues is what the plan says.
 *
 * Partition of a unit of numel N (a multiple of 8) over W ranks: part = roundup(ceil(N/W), 8) elements per
 * rank (DeepSpeed pads to a multiple of W; we also keep 16-byte alignment), rank r owns the unit's elements
 * [r*part, (r+1)*part) clipped to N; the tail of the last rank(s) is padding (zeros, never read back).
 * This rank's flat partition buffer holds its units' parts back to back in unit order. At W = 1 the part
 * of unit u is the whole unit, so the flat partition layout equals stage 0's flat layout (a checkpoint's
 * optimizer state is the same tensors at every stage).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int world, rank;
    int num_units;
    size_t* numel;        // (num_units) unit sizes, multiples of 8
    size_t* part;         // (num_units) partition size per rank (multiple of 8)
    size_t* lo;           // (num_units) this rank's first owned element of the unit
    size_t* hi;           // (num_units) one past its last owned real element (hi >= lo; hi - lo <= part)
    size_t* part_offset;  // (num_units) offset of the unit's part in this rank's flat partition
    size_t part_total;    // sum of part[u]
    // optimizer sub-groups: consecutive units, each group up to sub_group_size elements of partition (a unit
    // larger than that is a group of its own: DeepSpeed never splits a tensor across sub-groups)
    int num_groups;
    int* group_first;     // (num_groups) first unit of the group
    int* group_count;     // (num_groups) units in the group
    size_t* group_numel;  // (num_groups) partition elements
    bool* group_cpu;      // (num_groups) stepped by the CPU optimizer (offload_optimizer)
    int* unit_group;      // (num_units)
    size_t cpu_numel;     // partition elements stepped on the CPU
} ZeroLayout;

// Builds the layout. cpu_ratio in [0, 1]: the fraction of partition elements whose optimizer state lives on
// the host (0 = no offload, 1 = all; DeepSpeed's offload_optimizer.ratio). The GPU takes the leading groups,
// the CPU the trailing ones: the next forward needs the leading units first, and the GPU updates them at
// once while the CPU works on the rest. Returns 0, or -1 with a message (bad world/rank/sizes).
int zero_layout_build(ZeroLayout* L, int world, int rank, int num_units, const size_t* unit_numel,
                      int64_t sub_group_size, double cpu_ratio, char* err, size_t errlen);
void zero_layout_free(ZeroLayout* L);

// Reduce buckets of one unit's gradient (REFERENCE 4.3, interleaved as reduce_scatter_coalesced): bucket k
// takes, from every rank's slot [r*part, (r+1)*part) of the unit, the piece [k*piece, k*piece + len_k); the
// W pieces are laid out rank after rank so one reduce-scatter of W*len_k elements hands rank r its piece.
// piece = max(8, rounddown(bucket_elems / W, 8)). Returns the number of buckets.
int zero_layout_num_buckets(const ZeroLayout* L, int unit, int64_t bucket_elems);
// Offset (within each rank's slot) and length of bucket k's piece.
void zero_layout_bucket(const ZeroLayout* L, int unit, int64_t bucket_elems, int k, size_t* off, size_t* len);

// ---- stage 3 schedule

typedef enum { ZS_GATHER = 0, ZS_RELEASE = 1 } ZeroSchedKind;
typedef struct {
    ZeroSchedKind kind;
    int unit;
    bool prefetch;  // a gather issued ahead of use (else: on demand)
} ZeroSchedAction;

typedef enum { ZS_NOT_AVAILABLE = 0, ZS_AVAILABLE = 1 } ZeroSchedStatus;

typedef struct {
    // the plan
    int num_units;
    const size_t* numel;      // (num_units)
    bool* persistent;         // (num_units) never released (numel <= persistence threshold)
    int* trace;               // (trace_len) unit order of one forward + backward
    int trace_len;
    int64_t prefetch_bucket;  // stage3_prefetch_bucket_size (elements)
    int64_t max_live;         // stage3_max_live_parameters (elements)
    int64_t max_reuse;        // stage3_max_reuse_distance (elements)
    // state
    int pos;                  // trace position of the next fetch
    int prefetch_pos;         // first trace position the prefetcher has not looked at
    bool valid;               // the fetches so far followed the trace
    int mismatches;           // fetches that left the trace (the rest of that pass runs on demand)
    ZeroSchedStatus* status;  // (num_units)
    int* fetched;             // (num_units) between fetch and release
    int64_t live;             // elements of AVAILABLE non-persistent units
    int64_t peak_live;
} ZeroSched;

// trace: the unit order of a forward + backward (copied). persistence_threshold: units of at most this many
// elements stay gathered (DeepSpeed's per-tensor rule applied to our gather unit; the norm weights and
// relative-bias tables inside block units are kept resident in fp32 by the engine's fp32 views).
void zero_sched_init(ZeroSched* S, int num_units, const size_t* numel, const int* trace, int trace_len,
                     int64_t prefetch_bucket, int64_t max_live, int64_t max_reuse, int64_t persistence_threshold);
void zero_sched_free(ZeroSched* S);
// The model fetches `unit`: the actions to take now, in order (a demand gather first when the unit is not
// available, then the prefetches the plan allows). Returns the number written to out (cap >= num_units + 1).
int zero_sched_fetch(ZeroSched* S, int unit, ZeroSchedAction* out, int cap);
// The model releases `unit`: 0 or 1 action (ZS_RELEASE when the unit is not needed again within the reuse
// distance and is not persistent).
int zero_sched_release(ZeroSched* S, int unit, ZeroSchedAction* out, int cap);
// End of a forward+backward (or of an off-trace pass such as evaluation): releases every non-persistent
// unit still available (written to out) and rewinds the trace.
int zero_sched_reset(ZeroSched* S, ZeroSchedAction* out, int cap);
// Marks a unit available or not outside the trace (the engine's hold mode for evaluation).
void zero_sched_set_available(ZeroSched* S, int unit, bool available);
// Elements walked from trace position `from` (exclusive) to the next use of `unit`, or -1 when it is not
// used again in this pass.
int64_t zero_sched_reuse_distance(const ZeroSched* S, int from, int unit);

#ifdef __cplusplus
}
#endif
