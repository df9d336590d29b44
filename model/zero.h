/*
 * zero.h: the parameter engine (DESIGN.md invariant 1). The model never owns parameters: it asks
 * the engine for a unit's working weights before using them and hands the unit back afterwards,
 * and tells the engine when a unit's gradient is complete. With stage 0 (this file's only
 * engine, src/zero/zero.c) every unit is resident, so these calls are bookkeeping; stages 1-3 (src/zero/part*.c,
 * zero_create_opts) partition the optimizer state (1), also the gradients (2) and also the 16-bit parameters
 * (3: gathered on fetch, freed on release, prefetched along T5's static unit order), optionally with the
 * optimizer state and the parameters in host memory (offload), behind the same interface.
 *
 * A unit (see model/params.h) is one contiguous flat range of `numel` elements. Per unit the
 * engine holds:
 *   working (numel) X      the weights the kernels read (X = the run dtype: fp32, fp16 or bf16);
 *                          in fp32 runs the working buffer IS the master buffer (no copy);
 *   master  (numel) fp32   the optimizer's copy (on the GPU for stage 0);
 *   grad    (numel) G      gradients, G = the run dtype by default (DeepSpeed's grad_accum_dtype default:
 *                          fp16/bf16 gradients, fp32 accumulation inside every kernel, one rounding per
 *                          element), or fp32 (zero_create_ex). Every backward WRITES each gradient (its
 *                          first contribution uses =, later ones +=), so a step needs no clearing pass;
 *                          gradient accumulation over micro-batches is stage 0's optimizer's (src/zero/step0.c, an fp32 sum).
 * All units' buffers of one kind are carved from one allocation, unit after unit, so the
 * optimizer and the gradient norm can see them as one flat vector (zero_flat_*).
 *
 * Call contract (checked on every call, it is cheap; a violation is a bug and aborts with the unit
 * named): fetch -> use -> release, strictly paired, no fetch of a unit already fetched; zero_grad
 * and grad_ready only between zero_begin_grads and the next zero_begin_grads, grad_ready once per
 * unit per step. Stream ordering: everything is ordered on the stream passed in; no host sync.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ZeroEngine ZeroEngine;

// Creates the stage 0 engine for `num_units` units of unit_numel[u] elements each (every size a multiple
// of 8 elements), unit_name[u] for messages (copied). Memory starts zeroed. stage must be 0 here (the other
// stages: zero_create_opts). Gradients in grad_dtype: working_dtype or DT_F32. Returns NULL with err set when
// the stage or the dtype pair is unsupported or GPU memory is short (the message names the bytes asked for).
ZeroEngine* zero_create_ex(int stage, DType working_dtype, DType grad_dtype, int num_units, const size_t* unit_numel,
                           const char* const* unit_name, char* err, size_t errlen);
// zero_create_ex with grad_dtype = working_dtype.
ZeroEngine* zero_create(int stage, DType working_dtype, int num_units, const size_t* unit_numel,
                        const char* const* unit_name, char* err, size_t errlen);

// One parameter tensor as the engine needs to know it (from the model's ParamTable).
typedef struct {
    int unit;
    size_t offset, numel;  // element range inside the unit
    bool decay;            // gets weight decay
    bool fp32_view;        // the model reads it in fp32 (norm weights, relative-bias tables, the embedding):
                           // the engine keeps an fp32 copy resident on the GPU (zero_fp32_tensor)
    int64_t rows, cols;    // 2-D shape (row-major, rows * cols = numel): Adafactor factors its second moment
                           // (HF: ndim >= 2); 0, 0: a vector (1-D). Only Adafactor reads it.
} ZeroTensor;

// The optimizer the engine steps (ZeroOptions.optimizer; the values of the trainer's TrainerOptimizer).
enum { ZERO_OPTIM_ADAMW = 0, ZERO_OPTIM_ADAFACTOR = 1 };

// transformers' Adafactor param group (Adafactor(...) arguments as Python values; src/zero/cpu_adafactor.h has the
// arithmetic). lr comes with each step (ZeroStepArgs.lr64).
typedef struct {
    double eps1, eps2;       // (1e-30, 1e-3)
    double clip_threshold;   // 1.0
    double decay_rate;       // -0.8
    bool has_beta1;          // false: beta1 None (no first moment)
    double beta1;
    double weight_decay;     // of the tensors with ZeroTensor.decay (the others: 0)
    bool scale_parameter, relative_step, warmup_init;
} ZeroAdafactor;

// Every DeepSpeed zero_optimization knob the engine honours (docs/zero.md says what each does here).
typedef struct {
    int stage;                       // 0..3
    int world, rank;                 // data-parallel group (1, 0: one GPU; collectives are local copies)
    struct LaunchComm* comm;         // world > 1: the run's NCCL communicator (src/launch/comm.h); the engine issues
                                     // its collectives on it (src/zero/coll.h)
    DType working_dtype;             // X: fp32, fp16, bf16
    DType grad_dtype;                // G: gradients the backward writes (X or fp32)
    DType comm_dtype;                // communication_data_type (DeepSpeed default: X)
    // several ranks without a loss scaler (fp32, bf16): each rank's backward is already scaled by 1 / world (the
    // engine folds it into the seed gradient, as one GPU's accumulation folds 1 / micro-batches), so the gradient
    // reduction sums without pre-dividing: each rank runs the backward one GPU runs for the same micro-batch, bit for
    // bit. fp16 keeps DeepSpeed's order (the loss scale alone in the backward, pre-divided in the reduction), where
    // the scale's overflow checks are DeepSpeed's. Set by the engine (engine_create).
    bool world_in_backward;
    DType accum_dtype;               // data_types.grad_accum_dtype (DeepSpeed default: X)
    bool offload_optimizer;          // offload_optimizer.device cpu: fp32 master, m, v (and grads) in host memory
    bool optimizer_pin_memory;       // offload_optimizer.pin_memory
    double ratio;                    // offload_optimizer.ratio: fraction of the optimizer state on the host
    int buffer_count;                // offload_optimizer.buffer_count (pinned staging buffers when not pinned)
    // offload_optimizer.device nvme (ZeRO-Infinity, docs/zero.md "NVMe"): offload_optimizer is true as with cpu, and
    // the CPU-stepped units' Adam m, v live in a swap file under nvme_path (src/nvme/), moved through buffer_count
    // host buffers; "": in host memory. The aio_* fields are DeepSpeed's aio section.
    char nvme_path[1024];
    bool nvme_pipeline_read, nvme_pipeline_write;  // offload_optimizer.pipeline_read / pipeline_write (false)
    int64_t aio_block_size;          // 1048576
    int aio_queue_depth;             // 8
    int aio_threads;                 // intra_op_parallelism (thread_count), 1
    bool aio_single_submit;          // false
    bool aio_overlap_events;         // true
    bool offload_param;              // offload_param.device cpu (stage 3): 16-bit partitions in host memory
    bool param_pin_memory;           // offload_param.pin_memory
    int64_t sub_group_size;          // optimizer step granularity (elements)
    int64_t reduce_bucket_size;      // gradient bucket (elements)
    int64_t allgather_bucket_size;   // stage 1/2 parameter all-gather bucket (elements)
    int64_t prefetch_bucket_size;    // stage3_prefetch_bucket_size
    int64_t max_live_parameters;     // stage3_max_live_parameters
    int64_t max_reuse_distance;      // stage3_max_reuse_distance
    int64_t persistence_threshold;   // stage3_param_persistence_threshold
    bool overlap_comm;               // gradient reduction / offload on its own stream, overlapping the backward
    int grad_accum_steps;            // the run's gradient_accumulation_steps (default 1). At 1, with offload_param
                                     // and the accumulation dtype the working dtype, an offloaded unit's gradient
                                     // lands in the host buffer of its own 16-bit weights (zero_host_grads_share_weights)
    // the tensors (every parameter), and stage 3's static unit order of one forward + backward
    const ZeroTensor* tensors;
    int num_tensors;
    const int* trace;
    int trace_len;
    // the order the backward takes and gives back its per-unit gradient buffers (stages 2/3): u + 1 when the unit's
    // gradient is first asked for, -(u + 1) at its grad_ready (model/t5.c t5_model_grad_trace); for the estimate
    // (optional: without it the estimate counts unit 0 and two of the largest other units)
    const int* grad_trace;
    int grad_trace_len;
    // Adam hyper-parameters fixed for the run (lr and the step count come with each step)
    float beta1, beta2, eps, weight_decay;
    bool adamw_mode;
    // the optimizer (default AdamW, the fields above); ZERO_OPTIM_ADAFACTOR: transformers' Adafactor per tensor
    // (docs/zero.md "Adafactor in the engine"), factored state for the tensors with rows/cols
    int optimizer;
    ZeroAdafactor adafactor;
    // zero_optimization.zenflow (src/zero/zenflow.h; one rank, stages 1-3, every unit's optimizer on the CPU): the
    // estimate counts its selective state (ZeroMemEstimate.gpu_zenflow); the engine sets accum_dtype fp32
    bool zenflow;
    double zenflow_topk_ratio;
    // Evaluation only (stages 1-3; engine_create sets it from !EngineOptions.train): the working partitions and
    // what the forward needs (stage 3 gathers, the fp32 views); no optimizer state (Adam m, v, Adafactor's),
    // no gradient buffers (accumulated partitions, stage 1's resident gradients, buckets, norm slots, the
    // gradients in flight) and, with a 16-bit working dtype, no fp32 master: a load writes the working partitions
    // and the views directly (zero_master_write / zero_master_write_dev), zero_master_read reads them back, and
    // every gradient, optimizer, optimizer-state or master-gather call is an internal error. In fp32 the master
    // stays (it is the working copy the load fills and publishes). Stage 0 ignores it (everything resident).
    bool no_optimizer_state;
} ZeroOptions;

void zero_options_default(ZeroOptions* o);  // DeepSpeed's defaults, stage 0, one rank

// Any stage. Allocates and (for host buffers) pins everything up front, in bounded time; the error of a plan
// that does not fit names the buffer, the bytes asked, the bytes free and what to change.
ZeroEngine* zero_create_opts(const ZeroOptions* o, int num_units, const size_t* unit_numel,
                             const char* const* unit_name, char* err, size_t errlen);
int zero_stage(const ZeroEngine* Z);
// True when the partitioned engine runs the optimizer (stages 1-3); stage 0's is src/zero/step0.c, over the flat buffers.
bool zero_owns_optimizer(const ZeroEngine* Z);
void zero_destroy(ZeroEngine* Z);

DType zero_working_dtype(const ZeroEngine* Z);
DType zero_grad_dtype(const ZeroEngine* Z);
int zero_num_units(const ZeroEngine* Z);
size_t zero_unit_numel(const ZeroEngine* Z, int unit);

// Device pointer to the unit's working weights (numel) X, valid until zero_release.
void* zero_fetch(ZeroEngine* Z, int unit, cudaStream_t stream);
void zero_release(ZeroEngine* Z, int unit, cudaStream_t stream);
// Device fp32 copy of the tensor at `offset` of `unit`, for the ops HF autocast runs on fp32 parameters (RMSNorm
// weights, relative-bias tables, the embedding lookup): a ZeroTensor with fp32_view, or any tensor at stage 0 (the
// master itself).
// The pointer never changes during the engine's life; its contents follow every optimizer step.
const float* zero_fp32_tensor(ZeroEngine* Z, int unit, size_t offset);
// Gradient buffer (numel) of the unit, dtype zero_grad_dtype: its contents are undefined at the start of
// a step; the backward's first contribution to each element writes it (=), later ones add (+=).
void* zero_grad(ZeroEngine* Z, int unit);
// The unit's gradient is complete for this step (stage 3: reduce-scatter starts here).
void zero_grad_ready(ZeroEngine* Z, int unit, cudaStream_t stream);
// Starts a new step's gradient bookkeeping. Clears nothing: the backward writes every gradient.
void zero_begin_grads(ZeroEngine* Z, cudaStream_t stream);
// Stages 1-3: this backward is micro-batch `micro` of `n_micro` of one optimizer step (call before
// zero_begin_grads; default 0 of 1). Micro-batch 0 writes the accumulated partition gradient (=), later ones
// add (+=); the last one also takes the squared norm on the GPU.
void zero_set_micro_step(ZeroEngine* Z, int micro, int n_micro);
// True when every unit is released and (if any grad was produced) every unit was grad_ready.
bool zero_all_released(const ZeroEngine* Z);
int zero_num_grads_ready(const ZeroEngine* Z);

// fp32 master of a unit (numel), device memory for stage 0. Stages 1-3: this rank's part of the unit
// (zero_unit_owned), in device or host memory (copy with cudaMemcpyDefault).
float* zero_master(ZeroEngine* Z, int unit);
// Copies n fp32 values between host memory (pageable or pinned) and the master of `unit` at element `offset`
// of the unit (inside this rank's owned range), wherever the master lives. Synchronous.
void zero_master_write(ZeroEngine* Z, int unit, size_t offset, const float* host, size_t n);
void zero_master_read(ZeroEngine* Z, int unit, size_t offset, float* host, size_t n);
// zero_master_write from device memory (`dev`: n fp32 values), ordered on `stream`; the caller synchronises before it
// frees or rewrites `dev`. Without a master (ZeroOptions.no_optimizer_state, 16-bit): rounds into the working
// partition and fills the fp32 views, as zero_sync_working would from a master holding these values.
void zero_master_write_dev(ZeroEngine* Z, int unit, size_t offset, const float* dev, size_t n, cudaStream_t stream);
// False for an evaluation-only engine without an fp32 master (ZeroOptions.no_optimizer_state with a 16-bit working
// dtype): zero_master_read then returns the working weights widened to fp32, zero_master is an internal error.
bool zero_has_master(const ZeroEngine* Z);
// This rank's owned element range [lo, hi) of the unit (stage 0 and one rank: [0, numel)).
void zero_unit_owned(const ZeroEngine* Z, int unit, size_t* lo, size_t* hi);
// Working := round(master) for every unit (after loading or an optimizer step). No-op in fp32 at stage 0.
void zero_sync_working(ZeroEngine* Z, cudaStream_t stream);

// ---- stages 1-3: the engine's optimizer step (src/zero/engine.c keeps the loss scaler, the trainer the schedule)

// After the last micro-batch's backward: the squared global norm of the accumulated (scaled) gradient and the
// non-finite flag, on the device, in stream order (all-reduced over the ranks).
void zero_grad_norm(ZeroEngine* Z, float* d_norm2, int* d_overflow, cudaStream_t stream);
typedef struct {
    float lr;
    int64_t step;           // Adam step being taken: 1, 2, ...
    float bias_correction1, bias_correction2;  // as CpuAdam after cpu_adam_begin_step
    const float* d_inv_scale;  // device 1/combined (global_norm_clip_scale)
    float inv_scale;           // the same value on the host (for the CPU optimizer)
    double lr64;               // Adafactor: the schedule's lr as the double it is (HF's Python float; unused with
                               // relative_step); AdamW reads lr
} ZeroStepArgs;
// AdamW on every partition: the GPU part on `stream`, the CPU part on the engine's optimizer thread, each
// sub-group's updated 16-bit weights sent back as soon as it is done; the next fetches wait for their unit.
// Returns at once.
void zero_optimizer_step(ZeroEngine* Z, const ZeroStepArgs* a, cudaStream_t stream);
// Waits for the CPU part of the last step (and its copies) to finish.
void zero_optimizer_wait(ZeroEngine* Z);
// The step is skipped (overflow): instead of zero_optimizer_step. Restores what the gradient path wrote over
// (the 16-bit host weights whose buffer the offloaded gradients shared: rounded again from the fp32 master).
// Synchronous; a no-op when nothing is shared.
void zero_optimizer_skip(ZeroEngine* Z, cudaStream_t stream);
// Optimizer state of this rank as flat fp32 in unit order, partition sizes (= stage 0's flat layout at one
// rank): elements [offset, offset + n) of it. which: 0 = m, 1 = v. Synchronous; bounded memory (no full copy).
size_t zero_partition_numel(const ZeroEngine* Z);
void zero_opt_state_read(ZeroEngine* Z, int which, size_t offset, size_t n, float* host_out);
void zero_opt_state_write(ZeroEngine* Z, int which, size_t offset, size_t n, const float* host_in);
// Adafactor (stages 1-3): its state as flat fp32 in stage 0's checkpoint layout (blob "adafactor"): per
// tensor in ZeroOptions.tensors order, exp_avg_sq_row (rows) + exp_avg_sq_col (cols) for a matrix or exp_avg_sq
// (numel) for a vector, then exp_avg (numel) with beta1. Floats [offset, offset + n); synchronous, bounded memory.
size_t zero_adafactor_state_floats(const ZeroEngine* Z);
void zero_adafactor_state_read(ZeroEngine* Z, size_t offset, size_t n, float* host_out);
void zero_adafactor_state_write(ZeroEngine* Z, size_t offset, size_t n, const float* host_in);
// Adafactor: the lr tensor `tensor` (ZeroOptions.tensors index) used in the last step (HF's _get_lr, fp32; what
// HF's AdafactorSchedule logs for tensor 0). Waits for that tensor's step.
float zero_adafactor_last_lr(ZeroEngine* Z, int tensor);
// Stage 3: gathers every unit once and keeps them until zero_hold_end (evaluation and generation, where the
// unit order differs from training's). Returns false (nothing held) when they do not fit in GPU memory.
bool zero_hold_begin(ZeroEngine* Z, cudaStream_t stream);
void zero_hold_end(ZeroEngine* Z, cudaStream_t stream);
// Statistics of the engine (times in seconds, bytes), for logs and benchmarks.
typedef struct {
    double init_s;            // create + pin
    double cpu_adam_s;        // last step's CPU optimizer time
    double h2d_bytes, d2h_bytes;  // copies since the last zero_stats_reset
    double staged_bytes;      // of those, the bytes that went through the pinned staging ring (pageable host buffers)
    double direct_bytes;      // and the bytes of pageable host buffers copied directly once their chunk was registered
                              // in the background (T5TRAIN_PAGEABLE_REGISTER=1; src/zero/host_register.h)
    int64_t gathers, prefetches, releases, trace_mismatches;
    int64_t grad_order_mismatches;  // backward passes whose gradient order left ZeroOptions.grad_trace (stages 2/3)
    size_t host_bytes, host_pinned_bytes, gpu_bytes;  // the engine's own allocations
    bool host_grads_share_weights;   // zero_host_grads_share_weights held for this engine
    uint64_t nvme_file_bytes;        // offload_optimizer nvme: the swap file of Adam m, v (0: none)
    size_t nvme_pool_bytes;          // its host buffers (in host_bytes)
    double nvme_read_bytes, nvme_written_bytes;  // swapped in / out since the engine was created
    size_t unit_buf_gathered, unit_buf_grads;  // run-time unit buffers made (src/zero/bufcache.h; the estimate's
                                               // gathered peak and gradients in flight)
    size_t pool_used_high, pool_reserved_high;  // the stream-ordered pool's high-water marks (stages 2/3: gathered
                                                // units and gradients in flight), since the engine was created
    // pageable host buffers registered with CUDA in the background (pin_memory false; src/zero/part_hostreg.c,
    // T5TRAIN_PAGEABLE_REGISTER=1, default off): their copies leave the staging ring for the direct DMA chunk by chunk
    bool host_register_on;           // the registration worker was started
    size_t host_register_total;      // bytes it registers when it completes (16-bit weights, gradients, fp32 master)
    size_t host_registered_bytes;    // registered so far
    int host_register_phase;         // src/zero/host_register.h ZeroRegPhase: 1 running, 2 done, 3 failed, 4 stopped
    double host_register_s;          // phase 2-4: seconds from the worker's start (the engine's buffers allocated)
                                     // to its end; -1 while running
} ZeroStats;
void zero_stats(const ZeroEngine* Z, ZeroStats* out);
void zero_stats_reset(ZeroEngine* Z);

// The flat views: all units back to back, unit u starting at zero_unit_offset(u).
size_t zero_unit_offset(const ZeroEngine* Z, int unit);
size_t zero_flat_numel(const ZeroEngine* Z);
float* zero_flat_master(ZeroEngine* Z);
void* zero_flat_grad(ZeroEngine* Z);  // (flat_numel) zero_grad_dtype
// Copies every gradient to host memory as fp32 (out: flat_numel floats), converting in bounded device
// chunks. Synchronises the stream.
void zero_grads_to_host_f32(ZeroEngine* Z, float* out, cudaStream_t stream);

// ---- several ranks (ZeroOptions.world > 1); the trainer's own collectives (barrier, agree, rank 0's value, the loss
// sum) are src/launch/comm.h's
// stage 0: buf (n, dt; the gradient stage 0's optimizer reads, src/zero/step0.c) := the mean over the ranks (pre-divided, summed)
void zero_dp_allreduce_mean(ZeroEngine* Z, void* buf, DType dt, size_t n, cudaStream_t stream);
// Saving with several ranks at stages 1-3: every rank calls it (a collective); on the ranks with keep, zero_master_read
// then reads any range of any unit (a host copy of the whole fp32 model) until zero_gather_masters_free.
void zero_gather_masters(ZeroEngine* Z, bool keep, cudaStream_t stream);
void zero_gather_masters_free(ZeroEngine* Z);

#ifdef __cplusplus
}
#endif
