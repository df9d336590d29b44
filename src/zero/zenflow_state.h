/*
 * zenflow_state.h: the host side of ZenFlow's checkpoint (docs/zero.md "ZenFlow's checkpoint"): what the blobs hold,
 * their sizes, the checks of a checkpoint against this run's config, the schedule's state in and out, and the routing
 * of a streamed blob's pieces to its regions. Pure C, no CUDA (CPU-tested in test_zenflow); src/zero/zenflow.c moves
 * the bytes between these layouts and the GPU / host buffers.
 *
 * Blobs of the state file (engine_state.c names them; only with zero_optimization.zenflow):
 *   zenflow          ZenflowStateHeader, then num_tensors ZenflowStateTensor {R, C, k}, then the schedule's
 *                    update_interval "auto" arrays avg (num_2d fp64) and non (num_2d fp64). Small; read whole
 *                    and checked before anything else is loaded.
 *   zenflow_tensors  per tensor, in the parameter table's order: sel (k int32), sel_m (R x k fp32), sel_v (R x k
 *                    fp32), and when the header's w_ahead is set, the fp32 master's own values of the selected
 *                    columns (R x k fp32; model.safetensors holds the working weights' there, see below).
 *   zenflow_gacc     only when since_update > 0 (a save between two update boundaries): the fp32 host gradient
 *                    accumulated since the last update boundary, every unit's partition in unit order
 *                    (gacc_floats floats). At an update boundary the next micro-step overwrites it, so it is not
 *                    saved.
 *
 * w_ahead: a selective step ran since the master last took the working weights, so W[:, sel] (and the fp32 views'
 * selected columns) hold values the master lacks. Then the checkpoint's model.safetensors holds the master with its
 * selected columns replaced by fp32(W[:, sel]) (the weights the model runs with), and zenflow_tensors carries the
 * master's own values of those columns; a resume loads the file (W = round(master) is then W exactly, the views
 * take the file's values) and writes the master's columns back from the blob.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_adam.h"
#include "zenflow_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZENFLOW_STATE_VERSION 1
// the blobs' names (above)
#define ZENFLOW_BLOB_META "zenflow"
#define ZENFLOW_BLOB_TENSORS "zenflow_tensors"
#define ZENFLOW_BLOB_GACC "zenflow_gacc"

// blob "zenflow"'s header (fixed layout: int64 / double first, then int32 / float, no padding)
typedef struct {
    // the config the state belongs to (a resume needs the same)
    double topk_ratio;
    int64_t select_interval;        // ZENFLOW_AUTO or the number
    int64_t update_interval;
    int64_t full_warm_up_rounds;
    int64_t S, k, W;                // the schedule's intervals in micro-steps (S: select_interval x micro-steps per epoch)
    // the schedule (ZenflowSched)
    int64_t m, u, count;
    // the selective AdamW's step count and its CpuAdam step state (running beta powers)
    int64_t selective_steps;
    int64_t adam_step;
    // micro-steps accumulated into the host gradient since the last update boundary, and that gradient's floats in
    // blob zenflow_gacc (0: no such blob)
    int64_t since_update;
    int64_t gacc_floats;
    int32_t version;                // ZENFLOW_STATE_VERSION
    int32_t num_tensors;
    int32_t select_strategy;        // ZenflowSelectStrategy
    int32_t w_ahead;                // see above
    int32_t state, need0, need1;    // the schedule's auto-rule flags
    int32_t num_2d;                 // the auto rule's arrays (0 with a numeric update_interval)
    float beta1_t, beta2_t, bias_correction1, bias_correction2;
} ZenflowStateHeader;

// one tensor's record in blob "zenflow"
typedef struct {
    int64_t R, C, k;
} ZenflowStateTensor;

// The header of this run's state. selc: the selective AdamW's CpuAdam.
ZenflowStateHeader zenflow_state_header(const ZenflowOpts* o, const ZenflowSched* s, const CpuAdam* selc,
                                        int64_t selective_steps, int64_t since_update, bool w_ahead, int num_tensors,
                                        int64_t gacc_floats);
// A checkpoint's header against this run (o, s as zenflow_sched_init left them, num_tensors): 0, or T5_EXIT_USAGE
// with one line in err naming what differs (version, a key of zero_optimization.zenflow, the micro-steps per epoch
// behind select_interval, the number of tensors). path names the checkpoint in the line.
int zenflow_state_header_check(const ZenflowStateHeader* h, const ZenflowOpts* o, const ZenflowSched* s,
                               int num_tensors, const char* path, char* err, size_t n);
// Tensor i's record against this run's shape (R, C, k): 0 or T5_EXIT_USAGE with one line (k differs: another
// topk_ratio or ZeRO stage 3's max(1, ...)).
int zenflow_state_tensor_check(const ZenflowStateTensor* rec, int i, int64_t R, int64_t C, int64_t k,
                               const char* path, char* err, size_t n);
// The schedule's and the selective AdamW's step state from a checked header (and the auto arrays, num_2d each;
// NULL when num_2d is 0).
void zenflow_state_restore(const ZenflowStateHeader* h, const double* avg, const double* non, ZenflowSched* s,
                           CpuAdam* selc);

// bytes of blob "zenflow" for num_tensors records and num_2d auto-rule entries
size_t zenflow_state_meta_bytes(int num_tensors, int num_2d);
// bytes of tensor (R, k)'s part of blob "zenflow_tensors"
size_t zenflow_state_tensor_bytes(int64_t R, int64_t k, bool w_ahead);

// A blob cut into consecutive regions of known sizes (zenflow_tensors: per tensor sel, sel_m, sel_v[, master]).
// zenflow_state_route hands the piece [off, off + n) of the blob to put(ctx, region, offset in the region, bytes,
// n), split at region boundaries, in order; a piece beyond the last region returns -1.
typedef struct {
    size_t bytes;
} ZenflowRegion;
int zenflow_state_route(const ZenflowRegion* r, int nr, size_t off, const void* data, size_t n,
                        void (*put)(void* ctx, int region, size_t region_off, const void* src, size_t bytes),
                        void* ctx);

#ifdef __cplusplus
}
#endif
