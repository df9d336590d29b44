/*
 * estimate.h: the ZeRO engine's memory needs as pure arithmetic (no CUDA call), the one source of truth for
 * the sizes: zp_create (part.c) allocates exactly the buffers zero_estimate_layout names, and `t5train
 * estimate` / the automatic plan (issue 17) read the same numbers before anything is allocated.
 *
 * What is counted, per rank (this rank's layout, plan.h):
 *   creation time (zp_create / zero_create_ex + stage 0's Adam state, step0.c): fp32 master, Adam m, v and
 *     accumulated gradients of the GPU-stepped partitions; the 16-bit weights kept on the GPU (stage 0 working
 *     copy, stage 1/2 every unit resident, stage 3 the partitions not offloaded); the stage 0/1 resident
 *     gradients; the fp32 views; the gradient staging, comm bucket and norm slots; on the host the master,
 *     m, v, accumulated gradients and 16-bit weights of the CPU-stepped units (pinned or pageable).
 *   run time (stage 2/3, from the stream-ordered pool): stage 3's gathered units at the peak of one simulated
 *     forward + backward along the schedule (plan.c, the same state machine gather.c follows) and the
 *     gradient buffers in flight during the backward (the shared unit's, held through the backward when the
 *     embedding is tied, plus two of the largest other unit: one being written, one being reduced on the
 *     gradient stream).
 * Not counted here: activations (model/t5.h t5_model_activation_bytes_for), the CUDA context and cuBLASLt
 * workspace (the caller adds them).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../model/zero.h"
#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int stage, world;
    // optimizer elements of this rank's partition stepped by the GPU and by the CPU
    size_t gpu_numel, cpu_numel;
    size_t view_elems;        // fp32 view elements (each view rounded up to 8)
    size_t bucket_elems;      // gradient staging buffer elements: min(reduce_bucket_size, largest part)
    size_t send_elems, recv_elems;  // several ranks: a reduce-scatter's send buffer and received piece (comm dtype)
    int num_slots;            // reduce buckets over all units (norm slots)
    // GPU, allocated at creation
    size_t gpu_master, gpu_m, gpu_v;  // fp32 (stage 0: the engine's master and step0.c's Adam m, v)
    // Adafactor (ZeroOptions.optimizer): gpu_m and host_m hold its whole state instead of Adam's m (gpu_v, host_v
    // are 0): per tensor of this rank's partition the row + col statistics of a matrix (rows + cols, also for a
    // slice of one: docs/zero.md), v of a vector, m with beta1; gpu_ada_scratch: the fused GPU plan's scratch
    // (cuda/adafactor.cu) over the GPU-stepped tensors (stage 0: step0.c's plan over every tensor), in gpu_resident
    size_t gpu_ada_scratch;
    // Adafactor on several ranks (stages 1-3): the fp64 all-reduces of every step over the partial sums of the
    // tensors the partitions cut (src/zero/ada_split.h: the shared sections of the GPU plan's reduce buffers, in
    // gpu_ada_scratch; one pair for the GPU-stepped tensors, one more for the CPU-stepped ones with
    // offload_optimizer, whose device buffer is in gpu_ada_scratch too); 0 at one rank or when no tensor is cut
    size_t ada_reduce_doubles;  // doubles all-reduced per step (both pairs)
    size_t host_ada_scratch;    // the CPU-stepped cut tensors' sums and row / column factors (pageable, in host_total)
    size_t gpu_gacc;          // accumulated gradient partitions (stage 0: step0.c's fp32 sum, only with
                              // gradient accumulation)
    size_t gpu_weights;       // 16-bit weights resident (stage 0: the working copy, none in fp32; 1/2: every
                              // unit; 3: the partitions that stay on the GPU)
    size_t gpu_grads;         // resident gradients (stage 0 and 1)
    size_t gpu_views;         // fp32 views (stages 1-3)
    size_t gpu_comm;          // gradient staging, comm-dtype bucket, norm slots, flags and scratch
    size_t gpu_resident;      // the sum above: what zp_create allocates (stage 0: zero_create_ex + step0.c)
    // GPU at run time, from the stream-ordered pool
    size_t gpu_gathered_peak; // stage 3: gathered units at the schedule's peak (persistent units included)
    size_t gpu_grad_peak;     // stages 2/3: per-unit gradient buffers in flight
    int64_t peak_live_elems;  // stage 3: the schedule's peak of live non-persistent elements
    // host, allocated at creation
    size_t host_master, host_m, host_v, host_gacc, host_w;  // host_gacc 0 when it shares host_w
    // (+ host_ada_scratch above)
    // the pinned staging rings (src/zero/staging.h) through which every copy between a pageable host buffer and the
    // GPU goes: allocated only when some host buffer above is pageable (pin_memory false): ZERO_STAGING_RINGS rings
    // (the main thread's, the CPU optimizer thread's) of staging_count (offload_optimizer.buffer_count) slots of
    // staging_slot_bytes each; counted in host_pinned and host_total
    int staging_count;
    size_t staging_slot_bytes;
    size_t host_staging;
    size_t host_total, host_pinned, host_pageable;
    // of host_pageable, the bytes the engine registers with CUDA (pins) in the background once its buffers exist
    // (unless T5TRAIN_PAGEABLE_REGISTER=0; part_hostreg.c): the pageable master, accumulated gradients and
    // 16-bit weights (what the GPU copies touch; m, v stay pageable). host_pinned / host_pageable are the creation-time
    // split; while training runs, up to host_register more of the host memory becomes page-locked (the same bytes, no
    // new allocation)
    size_t host_register;
    // offload_optimizer nvme (ZeroOptions.nvme_path, AdamW): host_m and host_v are 0; the CPU units' m, v live in a
    // swap file of nvme_file_bytes on the disk (one NVME_ALIGN-aligned region of 8 bytes per element for each CPU
    // unit), moved through host_nvme_pool bytes of host buffers (buffer_count x the largest region), counted in
    // host_total but not in host_pinned / host_pageable (the CPU step's memory, never a copy to or from the GPU)
    uint64_t nvme_file_bytes;
    size_t host_nvme_pool;
    // zero_optimization.zenflow (ZeroOptions.zenflow): the selective optimizer's GPU state and scratch of every
    // tensor (src/zero/zenflow_select.h zenflow_tensor_gpu_bytes; cub's radix-sort storage as
    // zenflow_cub_bytes_est), allocated after zp_create (not in gpu_resident), counted in zero_estimate_gpu_peak
    size_t gpu_zenflow;
} ZeroMemEstimate;

// The GPU bytes of ZenFlow's selective state for o's tensors at o->stage (o->zenflow_topk_ratio; 0 when
// o->zenflow is off)
size_t zero_estimate_zenflow(const ZeroOptions* o);

// offload_optimizer nvme's swap file and pool for these options and layout (0, 0 without nvme_path)
void zero_estimate_nvme(const ZeroOptions* o, const ZeroLayout* L, uint64_t* file_bytes, size_t* pool_bytes);

// Staging rings (see host_staging above): one for the main thread (gradients down and up, gathers, the start-up
// publish), one for the CPU optimizer thread (the new weights and fp32 views of each stepped unit); a slot holds
// at most ZERO_STAGING_SLOT_MAX_BYTES (a few MiB: each chunk is one DMA, big enough to run at PCIe speed, small
// enough that buffer_count of them overlap the host copies with the DMAs).
#define ZERO_STAGING_RINGS 2
#define ZERO_STAGING_SLOT_MAX_BYTES ((size_t)4 << 20)

// True when the offloaded units' accumulated gradients share the host buffer of their 16-bit weights: stage 3
// with both offloads (pinned alike), a 16-bit working dtype that is also the accumulation dtype, and
// gradient_accumulation_steps 1. Between a unit's last backward use and the optimizer step nothing reads its
// host weights, and the CPU AdamW reads each gradient element before it writes the weight in its place (a skipped
// step rounds them again from the master: zero_optimizer_skip). Saves 2 bytes per offloaded parameter.
bool zero_host_grads_share_weights(const ZeroOptions* o);

// Floats of Adafactor state of tensor t when this rank owns `owned` of its elements (t->numel at one rank): a
// matrix (rows, cols set) keeps rows + cols (+ owned with beta1), a vector owned (+ owned); 0 when owned is 0.
size_t zero_adafactor_tensor_floats(const ZeroTensor* t, size_t owned, bool has_beta1);

// The creation-time sizes for options o over a built layout L (the one zp_create builds): everything above
// except the run-time peaks. Reads o->tensors (fp32 views). Used by zp_create for its checks and buffers.
void zero_estimate_layout(const ZeroOptions* o, const ZeroLayout* L, ZeroMemEstimate* e);

// Everything: builds this rank's layout (o->world, o->rank; any world size) and, at stage 3, simulates one
// forward + backward over o->trace with the schedule's limits. Stage 0 includes step0.c's Adam m, v and,
// when o->grad_accum_steps > 1, its fp32 accumulation buffer. Returns 0, or -1 with a message (bad options).
int zero_estimate(const ZeroOptions* o, int num_units, const size_t* unit_numel, ZeroMemEstimate* e, char* err,
                  size_t errlen);

// GPU bytes at the peak of a step (resident + run-time peaks).
size_t zero_estimate_gpu_peak(const ZeroMemEstimate* e);

#ifdef __cplusplus
}
#endif
