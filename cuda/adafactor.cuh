/*
 * adafactor.cuh: fused multi-tensor Adafactor on the GPU with transformers' semantics
 * (transformers.optimization.Adafactor.step), see adafactor.cu. One call updates every tensor of a plan:
 * fp32 master in place, factored second moments (row and column statistics) for 2-D tensors, a full
 * second moment for 1-D ones, optional first moment (beta1), gradient of any dtype times *d_grad_scale,
 * optional fp16/bf16 working copy written in the same pass. The arithmetic is that of
 * src/zero/cpu_adafactor.{c,h} (the CPU reference, which documents every rounding): same IEEE fp32
 * operations, sums accumulated in fp64 and rounded once (in a different order than the CPU, so an fp32 sum
 * can differ from the CPU's by one rounding of an fp64 value, which is almost never).
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float* master;          // (rows*cols) fp32, updated in place
    const void* grad;       // (rows*cols) grad_dtype
    void* work;             // (rows*cols) work_dtype (DT_F16 / DT_BF16) written from the new master, or NULL
    float* exp_avg_sq_row;  // (rows) factored only
    float* exp_avg_sq_col;  // (cols) factored only
    float* exp_avg_sq;      // (rows*cols) unfactored only
    float* exp_avg;         // (rows*cols) when the step args have beta1, else unused (may be NULL)
    int64_t rows, cols;     // 2-D (rows, cols) row-major; a 1-D tensor of n: rows 1, cols n, factored false
    bool factored;          // HF: ndim >= 2
    DType grad_dtype;
    DType work_dtype;
    double weight_decay;    // this tensor's group (HF Trainer: 0 for the no-decay group)
    // Several ZeRO ranks: this rank's slice of the tensor, elements [first, first + count) of the row-major
    // (rows, cols) tensor (any boundaries, e.g. partial first and last rows). master, grad, work, exp_avg_sq and
    // exp_avg then point at element `first` (slice-sized); exp_avg_sq_row / _col stay whole (rows, cols: the
    // statistics are replicated on every rank holding a slice). count 0: the whole tensor (first must be 0).
    int64_t first, count;
} AdafactorTensor;

// Where each tensor's partial sums go in the plan's two fp64 reduce buffers (several ranks: the caller all-reduces a
// prefix of each between the phases of adafactor_step_begin / _middle / _end). Buffer 1, per tensor: a matrix's rows
// row sums of g^2+eps1, cols column sums, then sum p^2 (rows + cols + 1 doubles); a vector's sum p^2 (1). Buffer 2:
// sum u^2 (1 per tensor). NULL to adafactor_plan_create_reduce: consecutive slots in tensor order.
typedef struct {
    int64_t len1, len2;     // doubles of the two buffers
    const int64_t* off1;    // (count) each tensor's first slot in buffer 1
    const int64_t* off2;    // (count) its slot in buffer 2
} AdafactorReduce;

// The param group's options as Python values (HF's Adafactor(...) arguments) and the step.
typedef struct {
    int64_t step;           // HF state["step"] after its increment: 1, 2, ...
    double lr;              // external lr (used when relative_step is false)
    double eps1, eps2;      // (1e-30, 1e-3)
    double clip_threshold;  // 1.0
    double decay_rate;      // -0.8
    bool has_beta1;
    double beta1;
    bool scale_parameter, relative_step, warmup_init;
} AdafactorStepArgs;

// What one tensor's last step used (device array, one per tensor, see adafactor_plan_scalars).
typedef struct {
    float param_rms;   // HF state["RMS"] (p before the step)
    float lr;          // _get_lr as fp32
    float update_rms;  // rms of the unclipped update
    float clip_div;    // max(1, update_rms / clip_threshold)
    float wd_alpha;    // -weight_decay * lr (fp32 as torch forms it)
} AdafactorScalars;

typedef struct AdafactorPlan AdafactorPlan;

// Copies the tensor list and its work tables to the device and allocates the scratch (synchronous; once per
// set of buffers). Scratch: per 1024-row group of a matrix one fp64 column partial (about 8/1024 bytes per
// matrix element), row and column factors (fp32, rows + cols), two fp64 sums per chunk.
AdafactorPlan* adafactor_plan_create(const AdafactorTensor* tensors, int count);
// The same with the reduce buffers' slots given (red NULL: adafactor_plan_create's).
AdafactorPlan* adafactor_plan_create_reduce(const AdafactorTensor* tensors, int count, const AdafactorReduce* red);
void adafactor_plan_free(AdafactorPlan* plan);
// Device bytes of the plan's scratch (for the memory report).
size_t adafactor_plan_scratch_bytes(const AdafactorPlan* plan);
// The scratch bytes adafactor_plan_create_reduce allocates for these tensors, as arithmetic (reads rows, cols,
// factored, first, count; no CUDA call): src/zero/estimate.c sizes the engine's plan with it. red as there.
size_t adafactor_plan_scratch_bytes_for(const AdafactorTensor* tensors, int count, const AdafactorReduce* red);
// One Adafactor step of every tensor. d_grad_scale: device fp32 gradient multiplier (NULL for 1). d_skip:
// device int, every kernel is a no-op when *d_skip != 0 (NULL for never). No host synchronisation.
// = adafactor_step_begin, _middle, _end with nothing reduced between them (every tensor whole on this GPU).
void adafactor_step(const AdafactorPlan* plan, const AdafactorStepArgs* args, const float* d_grad_scale,
                    const int* d_skip, cudaStream_t stream);
// The step in three phases for tensors split over ranks (same arguments each time):
//   begin:  this rank's partial sums into the reduce buffers (buffer 1: row / column sums, sum p^2; buffer 2: a
//           vector's sum u^2); both buffers are cleared first, so a slot of a tensor this rank does not hold is 0
//   -- the caller all-reduces (SUM) buffer 1's shared slots: every rank then has the whole tensors' sums
//   middle: row and column EMAs (replicated), the factors, a matrix's partial sum u^2 into buffer 2
//   -- the caller all-reduces buffer 2's shared slots
//   end:    RMS, lr, clipping divisor, and the update of this rank's elements
void adafactor_step_begin(const AdafactorPlan* plan, const AdafactorStepArgs* args, const float* d_grad_scale,
                          const int* d_skip, cudaStream_t stream);
void adafactor_step_middle(const AdafactorPlan* plan, const AdafactorStepArgs* args, const float* d_grad_scale,
                           const int* d_skip, cudaStream_t stream);
void adafactor_step_end(const AdafactorPlan* plan, const AdafactorStepArgs* args, const float* d_grad_scale,
                        const int* d_skip, cudaStream_t stream);
// The plan's two fp64 reduce buffers (device; AdafactorReduce's len1 / len2 doubles).
double* adafactor_plan_reduce_buffer(const AdafactorPlan* plan, int which);
// Device array (count) of what the last step used per tensor.
const AdafactorScalars* adafactor_plan_scalars(const AdafactorPlan* plan);
// HF's relative step size rel (before the parameter scale) for args->step, in double as Python forms it.
double adafactor_rel_step(const AdafactorStepArgs* args);

#ifdef __cplusplus
}
#endif
