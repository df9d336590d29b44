/*
 * cpu_adafactor.h: transformers' Adafactor (transformers.optimization.Adafactor.step) on the CPU, one
 * parameter tensor per call: fp32 master updated in place, gradient fp32/fp16/bf16 times grad_scale (as
 * cpu_adam), optional fp16/bf16 working copy written from the new master in the same pass.
 *
 * HF's step for one parameter p with gradient g, state step t (1, 2, ...), everything fp32 tensors and
 * the group's values Python floats (double) that torch rounds to fp32 where they meet a tensor:
 *     RMS    = ||p||_2 / sqrt(numel(p))                         (p before the step)
 *     rel    = relative_step ? min(warmup_init ? 1e-6*t : 1e-2, 1/sqrt(t)) : lr        (double)
 *     lr     = scale_parameter ? max(eps2, RMS) * rel : rel    (fp32 RMS*rel when RMS > eps2, else double)
 *     b2t    = 1 - t^decay_rate                                  (double; 0 at t = 1)
 *     u      = g*g + eps1
 *     factored (2-D, HF: ndim >= 2):
 *         row = fma(mean_j u, 1-b2t, row*b2t)   (rows)        col = fma(mean_i u, 1-b2t, col*b2t)   (cols)
 *         u   = (rsqrt(row_i / mean(row)) * rsqrt(col_j)) * g
 *     unfactored (1-D):   v = fma(u, 1-b2t, v*b2t);  u = rsqrt(v) * g
 *     u     /= max(1, rms(u) / clip_threshold)
 *     u     *= lr
 *     beta1:   m = fma(u, 1-beta1, m*beta1);  u = m
 *     wd != 0: p = fma(p, -wd*lr, p)
 *     p      = p - u
 * rsqrt(x) is 1/sqrt(x) in fp32 (torch's CPU rsqrt); "fma(a, w, b)" is torch's vectorized add_(a, alpha=w)
 * (ATen's ufunc add is vec::fmadd(other, alpha, self)); mean = fp32 sum / count (torch's CPU mean).
 * The reductions (sums of p^2, u^2, the row/column sums of g^2+eps1, the sum of row) are accumulated in
 * double and rounded once to fp32; torch sums in fp32 (vectorised cascade), so these fp32 sums can differ
 * from torch's by a few ulp (test_cpu_adafactor.c measures it); everything else is the same IEEE op.
 *
 * Threading: OpenMP over a fixed partition (blocks of rows of a 2-D tensor, blocks of elements of a 1-D
 * one) that does not depend on the thread count; per-block partial sums are combined in block order, so
 * the result is bit-identical for any OMP_NUM_THREADS.
 *
 * A slice of a tensor (several ZeRO ranks hold parts of one tensor, cut anywhere: cpu_adafactor_slice_*): the same
 * arithmetic in three calls, the caller adding the ranks' partial sums in between (docs/optimizer.md, "Adafactor on
 * several ranks"); the blocks run over the rows (elements) the slice holds, so the sums are split differently from
 * one rank's and can differ from them by the rounding of an fp32 sum (test_zero_adafactor: split vs whole).
 *
 * Not here: ndim > 2 (HF factors the last two dims; T5 has none), the GPU kernels.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// The param group's options, as Python values (doubles; has_lr / has_beta1 false = None).
typedef struct {
    bool has_lr;
    double lr;              // external lr, used when relative_step is false
    double eps1, eps2;      // (1e-30, 1e-3)
    double clip_threshold;  // 1.0
    double decay_rate;      // -0.8
    bool has_beta1;
    double beta1;           // none by default
    double weight_decay;    // 0.0
    bool scale_parameter;   // true
    bool relative_step;     // true
    bool warmup_init;       // false
} CpuAdafactorOpts;

// HF's constructor defaults: lr None, eps (1e-30, 1e-3), clip 1, decay -0.8, beta1 None, wd 0,
// scale_parameter, relative_step, no warmup_init.
void cpu_adafactor_default_opts(CpuAdafactorOpts* o);
// HF's constructor checks (+ lr needed when relative_step is off): 0, or -1 with the message in err.
int cpu_adafactor_check_opts(const CpuAdafactorOpts* o, char* err, size_t errlen);

// One tensor's state. 2-D (rows, cols) row-major is factored (HF's _get_options: ndim >= 2);
// 1-D (n) is not: pass rows = 1, cols = n, factored = false (a 2-D tensor may also be stepped
// unfactored this way). Arrays are caller-owned, zero at step 1 (HF's state initialisation).
typedef struct {
    size_t rows, cols;
    bool factored;
    float* exp_avg_sq_row;  // (rows), factored only
    float* exp_avg_sq_col;  // (cols), factored only
    float* exp_avg_sq;      // (rows*cols), unfactored only
    float* exp_avg;         // (rows*cols), when beta1 is set; else unused
} CpuAdafactorState;

// Floats of state a tensor needs (what the arrays above hold).
size_t cpu_adafactor_state_floats(size_t rows, size_t cols, bool factored, bool has_beta1);
// The arrays of one tensor's state in the cpu_adafactor_state_floats floats at base, in the order every buffer
// and checkpoint holds them: row then column statistics (factored) or the second moment, then exp_avg (beta1).
CpuAdafactorState cpu_adafactor_state_at(float* base, size_t rows, size_t cols, bool factored, bool has_beta1);

// What a step used (HF's state["RMS"], the lr of _get_lr as fp32, rms of the unclipped update, divisor).
typedef struct {
    float param_rms;
    float lr;
    float update_rms;
    float clip_div;  // max(1, update_rms / clip_threshold)
} CpuAdafactorStepInfo;

// HF's _get_lr for state step t and parameter RMS (exposed for the trainer's logged lr and tests).
float cpu_adafactor_lr(const CpuAdafactorOpts* o, int64_t step, float param_rms);

// The step's scratch (row sums, per-block column partials, factors: about 8 bytes x (rows + cols x blocks)),
// kept between calls and grown as needed, so that an optimizer thread stepping tensor after tensor does not
// allocate (and fault in) megabytes per tensor. One per calling thread; {0} to start.
typedef struct {
    void* p;
    size_t bytes;
} CpuAdafactorScratch;
void cpu_adafactor_scratch_free(CpuAdafactorScratch* s);

// One Adafactor step of one tensor, step = HF's state["step"] after its increment (1, 2, ...).
// master: (rows*cols) fp32, in place. grad: (rows*cols) of grad_dtype, read as float(grad)*grad_scale.
// work: (rows*cols) of work_dtype (DT_F16/DT_BF16) written from the new master, or NULL (DT_F32 = none).
// scratch: kept by the caller, or NULL (this call's own). Returns 0, or -1 (nothing touched) when the shape is empty.
int cpu_adafactor_step(const CpuAdafactorOpts* o, int64_t step, CpuAdafactorState* s, float* master,
                       const void* grad, DType grad_dtype, float grad_scale, void* work, DType work_dtype,
                       CpuAdafactorStepInfo* info, CpuAdafactorScratch* scratch);

// ---- a slice of a tensor (several ZeRO ranks)
//
// The step of elements [first, first + count) of a rows x cols tensor (a vector: 1 x n, factored false) in three
// calls; between them the caller adds red1 (then red2) over every rank holding a slice of the tensor, in rank order,
// so every rank passes the same whole sums on:
//   sums:    red1 (cpu_adafactor_slice_red1_len doubles, =) = this slice's row sums of g^2+eps1 (0 for the rows it does
//            not touch), column sums, then sum p^2; a vector: [sum p^2], its v EMA done here and *red2 = sum u^2
//   factors: a matrix: from the whole red1, the row / column EMAs (every row and column: the statistics are
//            replicated on each rank holding a slice) and the factors (rows + cols floats the caller keeps for
//            apply); *red2 = this slice's sum u^2. A vector: nothing.
//   apply:   from the whole sum p^2 and sum u^2: lr, clipping, the update of the slice's elements (info as a step's)
typedef struct {
    size_t rows, cols;       // the whole tensor
    bool factored;
    size_t first, count;     // the slice (count >= 1)
    float* master;           // (count) the slice's fp32 master
    const void* grad;        // (count) grad_dtype, read as float(grad) * grad_scale
    DType grad_dtype;
    float grad_scale;
    void* work;              // (count) work_dtype, or NULL
    DType work_dtype;
    CpuAdafactorState state; // exp_avg_sq_row / _col whole (rows, cols); exp_avg_sq and exp_avg: (count)
} CpuAdafactorSlice;

size_t cpu_adafactor_slice_red1_len(const CpuAdafactorSlice* s);
void cpu_adafactor_slice_sums(const CpuAdafactorOpts* o, int64_t step, const CpuAdafactorSlice* s, double* red1,
                              double* red2, CpuAdafactorScratch* scratch);
void cpu_adafactor_slice_factors(const CpuAdafactorOpts* o, int64_t step, const CpuAdafactorSlice* s,
                                 const double* red1, float* factors, double* red2);
void cpu_adafactor_slice_apply(const CpuAdafactorOpts* o, int64_t step, const CpuAdafactorSlice* s, double psum,
                               double usum, const float* factors, CpuAdafactorStepInfo* info);

#ifdef __cplusplus
}
#endif
