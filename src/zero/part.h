/*
 * part.h: the partitioned engine (ZeRO stages 1-3) behind model/zero.h, internal to src/zero/.
 *
 *   part.c      create/destroy: the layout, every buffer (device, pinned or pageable host), the streams,
 *               fp32 views, state IO, zero_sync_working
 *   gather.c    parameters: fetch / release / prefetch along the stage 3 schedule, the hold mode
 *   reduce.c    gradients: per-unit buffers, buckets, "reduce-scatter", accumulation, D2H, squared norm
 *   part_step.c the optimizer step: the GPU sub-groups in one fused launch, the CPU optimizer thread for the
 *               offloaded ones, the 16-bit weights sent back unit by unit; the arithmetic below it, in step.c
 *               (AdamW) and step_adafactor.c (Adafactor), which call nothing of the partition
 *
 * Per unit u (this rank's partition p = L.part[u] elements, owned range [lo, hi) of the unit):
 *   master, m, v   (p) fp32        optimizer state, GPU or host (opt_cpu)
 *   gacc           (p) accum dtype the accumulated gradient partition, GPU or host (opt_cpu)
 *   wpart          (p) X           stage 3: the 16-bit partition gathers read (GPU, or host with offload_param
 *                                  for CPU-stepped units)
 *   whost          (p) X           CPU-stepped units: the CPU AdamW's 16-bit output (pinned when any of the
 *                                  offloads pins; == wpart when that is on the host; NULL in fp32: master)
 *   wfull          (numel) X       the gathered unit on the GPU: resident at stages 1/2, per fetch at stage 3
 *   grad           (numel) G       the backward's gradient: resident at stage 1, per backward at 2/3
 *   views          fp32 copies of the tensors the model reads in fp32, resident on the GPU
 *
 * Staging ring (pin_memory false: some of h_master/m/v, h_gacc, h_w are pageable). Every copy between a pageable
 * engine host buffer and the GPU on the step's path goes through a pinned staging ring (staging.h; sizes in
 * estimate.c), unless its chunk was registered in the background (the default, T5TRAIN_PAGEABLE_REGISTER=0 turns it off; below): then it takes
 * the plain copy. zp_copy_to_dev / zp_copy_to_host pick the ring or the registered chunk's direct copy when the host
 * side lies in a pageable HostBuf and issue the plain cudaMemcpyAsync otherwise, so with every buffer pinned (no
 * ring) nothing changes. Two rings, one
 * per thread: ring_main (the thread that drives the model: gradients down and, with accumulation, up (reduce.c);
 * gathers of offloaded 16-bit partitions (gather.c); zp_sync_working's publish) and ring_opt (the CPU optimizer
 * thread: each stepped unit's 16-bit weights and fp32 views, zp_publish_unit_host). The ordering rules:
 *   - an H2D through a ring reads its pageable source when it is issued (the host copies it into the slot), not
 *     when the stream gets there. Every source is final by then: a gather of an offloaded unit is issued after
 *     the host waited for the CPU step of that unit (zp_wait_unit_updated); the publish after the CPU AdamW
 *     wrote the unit (same thread); the accumulation's H2D of gacc reads what the previous micro-batch's D2H put
 *     there, which the ring retires first (zero_ring_h2d retires pending D2H overlapping its source), and
 *     nothing else writes gacc between micro-batches.
 *   - a D2H through ring_main (gradients into pageable gacc, or into the shared 16-bit weights, share_gw) lands in
 *     its destination only when the ring retires it. Host readers of gacc / whost: the CPU optimizer thread
 *     (after ev_grads_done) and zp_optimizer_skip. zp_grad_norm drains ring_main (every D2H retired: waited for
 *     and copied out) before it returns, and zp_optimizer_step / zp_optimizer_skip drain it again before the
 *     thread is handed the step (opt_step++ under mu: the thread's reads happen after the main thread's copies)
 *     or the weights are rounded again. So by the time anyone reads gacc after ev_grads_done, the bytes are
 *     there. The next writer of a unit's host slot after that is the next step's zp_grad_ready, which first
 *     waits for the CPU step of the unit (zp_wait_unit_updated).
 *   - a slot is reused only after its copy completed (cudaEventSynchronize on the slot's event); copies run on
 *     the stream the plain copy would have used, so stream order is unchanged.
 * The rules above are the ring's; a piece whose chunk is registered (below) follows the pinned path's instead.
 * Not through a ring (not on the step's path): the start-up random init's copies into the master
 * (model/t5_weights.c, cudaMemcpyDefault from the device: the driver stages a pageable destination) and the
 * synchronous state / master copies of zero.c and state_copy here, which touch host buffers only with memcpy.
 *
 * Background registration (part_hostreg.c, host_register.h; on unless T5TRAIN_PAGEABLE_REGISTER=0): from the end of
 * zp_create a worker thread registers h_w, h_gacc and h_master (pageable ones) with cudaHostRegister, chunk by chunk
 * (a chunk: whole unit regions, cut at page boundaries; every copy lies in one unit's region, so in one chunk). A copy
 * whose range lies in a registered chunk is issued as the pinned path's plain cudaMemcpyAsync; the others keep the
 * ring. A range switches once (ring, then DMA), never back, so two copies of the same bytes never mix the paths in
 * the wrong order, except for what the ring still holds: before a direct copy of a range, the calling thread's ring
 * retires its pending D2H into that range (zero_ring_sync_range, the ring's own rule for its copies), so an older
 * gradient through a slot cannot land over a newer one, and an H2D never reads the bytes before that D2H landed.
 * From then on the pinned path's ordering rules hold as they are (the host reads after ev_grads_done / stream waits,
 * and an H2D's source is read when the stream gets there: every source stays final until the stream has passed,
 * as with pinned buffers). zp_destroy joins the worker first and unregisters after the device and the rings are
 * quiet, before the buffers are unmapped.
 */
#pragma once
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../cuda/adamw.cuh"
#include "../../model/zero.h"
#include "cpu_adam.h"
#include "host_mem.h"
#include "plan.h"
#include "bufcache.h"
#include "coll.h"
#include "staging.h"
#include "host_register.h"

// Run-time unit buffers (unitbuf.c): one per unit in use, from size classes by bufcache's rule
typedef struct {
    BufUnits U;          // the rule and which buffer each unit holds
    void*** ptr;         // [class][id] device buffers
    cudaEvent_t** ev;    // [class][id] the event of the buffer's last give (its freeing stream)
    int* cap;            // (classes) capacity of ptr / ev
} ZpBufs;
void zp_bufs_init(ZpBufs* B, int num_units, const size_t* unit_bytes, int quarantine);
// s waits for the buffer's last give; "<kind> <name>" names the buffer in an error (formatted only then)
void* zp_bufs_take(ZpBufs* B, int u, cudaStream_t s, const char* kind, const char* name);
void zp_bufs_give(ZpBufs* B, int u, cudaStream_t s);                     // after the work queued on s
size_t zp_bufs_bytes(const ZpBufs* B);  // every buffer made
void zp_bufs_destroy(ZpBufs* B);

typedef struct {
    size_t offset, numel;  // inside the unit
    bool decay;
} ZpSeg;

typedef struct {
    bool opt_cpu;
    float* master;
    float* m;
    float* v;
    void* gacc;
    void* wpart;
    bool wpart_host;
    void* whost;
    void* wfull;
    void* grad;
    bool grad_alloc;
    bool fetched;
    bool grad_ready;
    bool gather_waited;      // the compute stream already waits on its last gather (no second wait: CUDA graphs)
    int64_t update_waited;   // the last optimizer step whose ev_updated the compute stream waits on
    bool gather_pending;     // the schedule counts it gathered; the copy waits for the CPU step's result
    bool stale;              // wfull holds weights older than the last step (persistent / held units)
    bool wfull_pool;         // stage 3: wfull came from the stream-ordered pool (hold mode), not from wbufs
    cudaEvent_t ev_gathered;
    cudaEvent_t ev_grad;     // the unit's gradient is complete (compute stream)
    cudaEvent_t ev_grad_read;  // stage 1: the reduction stream has read the resident gradient (zp_grad_ready)
    bool grad_read_wait;     // stage 1: the next backward waits for ev_grad_read before writing the gradient again
    bool has_gaps;           // elements no tensor covers: its fresh gradient buffers are cleared
    int64_t wfull_ver;       // several ranks, stages 1/2: the weights version (ZeroPart.wver) its wfull was gathered at
    int64_t views_ver;       // several ranks: the weights version its fp32 views were broadcast at
    cudaEvent_t ev_updated;  // the CPU step's copies of this unit to the GPU are done
    int64_t updated_step;    // the last optimizer step whose CPU result for this unit is written (host side)
    int nsegs;
    ZpSeg* segs;             // tensors of the owned range (for weight decay)
    int nviews;
    size_t* view_off;        // (nviews) tensor offsets inside the unit
    size_t* view_numel;
    float** view_ptr;        // device fp32 copies
    int nbcast;              // several ranks: the views' pieces and the rank owning each (zp_views_sync), fixed
    float** bcast_ptr;       // at creation
    size_t* bcast_count;
    int* bcast_root;
    int bucket_first;        // index of its first sumsq slot
    int num_buckets;
} ZpUnit;

// a staging ring with its pinned memory and one CUDA event per slot (staging.h)
typedef struct {
    ZeroRing r;
    HostBuf mem;
    cudaEvent_t* ev;
} ZpRing;

typedef struct ZeroPart {
    ZeroOptions o;
    ZeroLayout L;
    ZeroSched S;
    int num_units;
    char** name;
    DType X, G, C, A;        // working, gradient, communication, accumulation dtypes
    ZeroColl coll;           // several ranks: the collectives (coll.h)
    size_t* pnumel;          // (num_units) world x part: a gathered unit / a unit's gradient buffer (= numel at W = 1)
    int64_t wver;            // weights version: +1 at every optimizer step and zp_sync_working (several ranks)
    void* d_recv;            // several ranks: a reduce-scatter's received piece (comm dtype)
    size_t xs, gs, cs, as;
    ZpUnit* u;
    // memory
    HostBuf h_master, h_m, h_v, h_gacc, h_w;   // host partitions of the CPU-stepped units
    ZpRing* ring_main;       // staging rings (above): NULL when every host buffer is pinned
    ZpRing* ring_opt;
    ZeroHostReg* hostreg;    // the pageable buffers' background registration (part_hostreg.c); NULL: none
    void* d_state;           // device partitions of the GPU-stepped units: master, m, v, gacc (one allocation each)
    float* d_master;
    float* d_m;
    float* d_v;
    void* d_gacc;
    void* d_wpart;           // stage 3 GPU partitions
    void* d_wfull;           // stages 1/2: every unit resident
    void* d_grad;            // stage 1: every unit's gradient resident
    float* d_views;
    void* d_stage;           // gradient staging (reduce_bucket elements of max(comm, accum) size)
    void* d_bucket;          // comm-dtype bucket
    double* d_slots;         // (num_slots + 1) squared norms of the buckets, then their fp64 total
    int* d_flags;
    void* d_sq_scratch;
    int num_slots;
    size_t bucket_elems;
    size_t gpu_bytes;
    // streams and events
    cudaStream_t s_gather, s_grad, s_copy;
    cudaEvent_t ev_grads_done;   // every gradient of the backward handed on (s_grad)
    cudaEvent_t ev_gpu_step;     // the GPU part of the last step (compute stream)
    cudaEvent_t ev_hold;         // every gather of zero_hold_begin done (s_gather)
    cudaMemPool_t pool;
    ZpBufs wbufs;   // stage 3 gathered units (the hold mode's extra units come from the pool instead)
    ZpBufs gbufs;   // stage 2/3 per-unit gradients
    // stage 2/3: the gradient order the estimate replays (ZeroOptions.grad_trace, copied), checked as the backward
    // asks for and hands on each gradient: one mismatch counted per pass at most (ZeroStats.grad_order_mismatches)
    int* gtrace;
    int gtrace_len, gpos;
    bool gvalid;
    // micro-batches
    int micro, n_micro;
    bool share_gw;           // CPU units' gradients land in their 16-bit host weights (zero_host_grads_share_weights)
    // GPU optimizer
    AdamWPlan* gpu_plan;
    int gpu_plan_tensors;
    CpuAdam cpu_adam;
    // CPU optimizer thread
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t opt_step;            // steps handed to the thread
    int64_t opt_done;            // steps the thread finished
    bool quit;
    ZeroStepArgs pending;
    int device;
    // hold mode
    bool held;
    // stats
    ZeroStats st;
    int64_t thread_h2d;          // bytes the optimizer thread copied (summed into st by zero_stats)
    int64_t direct_bytes;        // pageable-buffer bytes that took the direct copy (registered chunks; both threads,
                                 // atomic; zero_stats reports it beside the ring's bytes)
    struct ZpAda* ada;           // Adafactor (o.optimizer): step_adafactor.c's tables and plan; NULL: AdamW
    struct ZpNvme* nvme;         // offload_optimizer nvme: part_nvme.c's swap file of the CPU units' m, v; NULL: host
    struct ZpZenflow* zf;        // zero_optimization.zenflow: zenflow.c's tensors and schedule; NULL: off
} ZeroPart;

// zero.c: the partition of a stage 1-3 engine (NULL at stage 0), for src/zero's own files (zenflow.c)
ZeroPart* zero_part(ZeroEngine* Z);

// part.c
// A broken call contract (a bug): aborts naming the unit and the rule, as stage 0's checks do.
__attribute__((noreturn)) void zp_contract_failed(ZeroPart* P, int unit, const char* fn, const char* rule);
ZeroPart* zp_create(const ZeroOptions* o, int num_units, const size_t* unit_numel, const char* const* unit_name,
                    char* err, size_t errlen);
void zp_destroy(ZeroPart* P);
// working := round(master) for every unit; the caller waited for the optimizer (zp_optimizer_wait)
void zp_sync_working(ZeroPart* P, cudaStream_t s);
// Adam's m (which 0) or v (1), flat partition elements [offset, offset + n); the caller waited for the optimizer
void zp_state_read(ZeroPart* P, int which, size_t offset, size_t n, float* out);
void zp_state_write(ZeroPart* P, int which, size_t offset, size_t n, const float* in);
const float* zp_fp32_tensor(ZeroPart* P, int unit, size_t offset);
// CPU unit: H2D of its new weights + views on s_copy, then ev_updated; ring: the calling thread's
void zp_publish_unit_host(ZeroPart* P, int unit, ZpRing* ring);
// the GPU destination of a unit's 16-bit weights: its partition (stage 3; NULL when that is on the host) or its
// resident copy (stages 1/2)
static inline void* zp_unit_x_dst(const ZeroPart* P, int u) {
    const ZpUnit* U = &P->u[u];
    if (P->o.stage == 3) return U->wpart_host ? NULL : U->wpart;
    return (char*)U->wfull + P->L.lo[u] * P->xs;
}
// evaluation only with a 16-bit working dtype (ZeroOptions.no_optimizer_state): no unit has an fp32 master
static inline bool zp_no_master(const ZeroPart* P) { return P->o.no_optimizer_state && P->X != DT_F32; }
// part_noopt.c (no_optimizer_state): the load path without a master. Owned elements [offset, offset + n) of unit u
// (unit coordinates, inside [lo, hi)) from fp32 `src` (device memory when src_dev, else host) rounded into the
// working partition (GPU, or the host partition with offload_param) and copied into the fp32 views they overlap;
// synchronous. zp_read_working: the same range of the working partition widened to fp32 into host memory.
void zp_write_working(ZeroPart* P, int u, size_t offset, const float* src, size_t n, bool src_dev, cudaStream_t s);
void zp_read_working(ZeroPart* P, int u, size_t offset, float* host, size_t n);
// the CPU units' 16-bit host weights rounded again from their masters
void zp_round_host_weights(ZeroPart* P);
void zp_publish_views(ZeroPart* P, int unit, cudaStream_t s, ZpRing* ring);  // fp32 views from the master
// several ranks: the views' pieces other ranks own, broadcast on s (s_gather) once per weights version
void zp_views_sync(ZeroPart* P, int unit, cudaStream_t s);
// true when p lies in one of the engine's pageable host buffers
bool zp_host_pageable(const ZeroPart* P, const void* p);
// dst (GPU) <- src, and dst (host) <- src (GPU): through `ring` when the host side is pageable and not yet registered
// in the background, else the plain cudaMemcpyAsync(kind) on s. ring: the calling thread's (ring_main or ring_opt).
void zp_copy_to_dev(ZeroPart* P, ZpRing* ring, void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind,
                    cudaStream_t s);
void zp_copy_to_host(ZeroPart* P, ZpRing* ring, void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind,
                     cudaStream_t s);
// every D2H issued through the ring has landed in its destination (no-op without a ring)
void zp_ring_drain(ZpRing* ring);
// part_hostreg.c: the pageable buffers registered with CUDA in the background (T5TRAIN_PAGEABLE_REGISTER). mode: 1 on,
// 0 off (unset / empty: on; anything else exits 2; read only when some buffer the copies touch is pageable).
// start: at the end of zp_create; stop: first thing in zp_destroy
// (joins the worker); release: after the device and the rings are quiet, before host_buf_free (unregisters).
// zp_copy_to_dev / zp_copy_to_host ask P->hostreg which path each copy takes (host_register.h zero_hostreg_copy).
int zp_hostreg_mode(void);
void zp_hostreg_start(ZeroPart* P);
void zp_hostreg_stop(ZeroPart* P);
void zp_hostreg_release(ZeroPart* P);
void zp_hostreg_stats(const ZeroPart* P, ZeroStats* st);
// part_nvme.c (offload_optimizer nvme; every call a no-op when P->nvme is NULL): the CPU units' Adam m, v in a swap
// file under nvme_path (src/nvme/swap.h). The optimizer thread brackets its pass with step_begin / step_end and each
// CPU unit's step with unit_in (U->m, U->v point into a pool buffer holding the unit's state) / unit_out (written
// back); I/O errors end the run with their line. state_copy: a checkpoint's m (which 0) or v (1) elements
// [off, off + n) of unit u's partition to or from host, through the file.
int zp_nvme_create(ZeroPart* P, uint64_t file_bytes, size_t pool_bytes, char* err, size_t errlen);  // the estimate's
void zp_nvme_destroy(ZeroPart* P);
void zp_nvme_step_begin(ZeroPart* P);
void zp_nvme_unit_in(ZeroPart* P, int unit);
void zp_nvme_unit_out(ZeroPart* P, int unit);
void zp_nvme_step_end(ZeroPart* P);
void zp_nvme_stats(ZeroPart* P, ZeroStats* st);  // the nvme_* fields
void zp_nvme_state_copy(ZeroPart* P, int unit, int which, size_t off, size_t n, float* host, bool to_host);
// gather.c
void* zp_fetch(ZeroPart* P, int unit, cudaStream_t s);
void zp_release(ZeroPart* P, int unit, cudaStream_t s);
void zp_begin_pass(ZeroPart* P, cudaStream_t s);
bool zp_hold_begin(ZeroPart* P, cudaStream_t s);
void zp_hold_end(ZeroPart* P, cudaStream_t s);
void zp_wait_unit_updated(ZeroPart* P, int unit, cudaStream_t s);
// reduce.c
void* zp_grad(ZeroPart* P, int unit, cudaStream_t s);
void zp_grad_ready(ZeroPart* P, int unit, cudaStream_t s);
void zp_grad_norm(ZeroPart* P, float* d_norm2, int* d_overflow, cudaStream_t s);
// part_step.c (above part.c: zero.c calls zp_step_init after zp_create and zp_step_free before zp_destroy)
void zp_step_init(ZeroPart* P);
void zp_step_free(ZeroPart* P);
void zp_optimizer_step(ZeroPart* P, const ZeroStepArgs* a, cudaStream_t s);
void zp_optimizer_wait(ZeroPart* P);
// a skipped step: the shared host weights rounded again from the master (zero_optimizer_skip)
void zp_optimizer_skip(ZeroPart* P);
// Adafactor: the lr tensor `tensor` used in the last step, once that tensor's step is done
float zp_optimizer_ada_lr(ZeroPart* P, int tensor);
