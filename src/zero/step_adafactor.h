/*
 * step_adafactor.h: transformers' Adafactor as the partitioned engine's optimizer (ZeroOptions.optimizer
 * ZERO_OPTIM_ADAFACTOR), internal to src/zero/. docs/zero.md "Adafactor in the engine" has the whole picture.
 *
 * Per tensor (a ZeroTensor: rows x cols factored, or a vector), stepped exactly as stage 0's Adafactor (step0.c):
 *   GPU-stepped units: one fused plan (cuda/adafactor.cu) over every tensor of those units, on the compute stream,
 *     the 16-bit weights written straight into the unit's GPU partition / resident copy (as the fused AdamW);
 *   CPU-stepped units (offload_optimizer, the `ratio` split): the engine's optimizer thread runs
 *     cpu_adafactor_step (src/zero/cpu_adafactor.c) tensor by tensor, unit by unit, and publishes each unit's 16-bit
 *     weights as the CPU AdamW does.
 * State: per tensor in ZeroOptions.tensors order exp_avg_sq_row + exp_avg_sq_col (a matrix) or exp_avg_sq (a vector),
 * then exp_avg with beta1: stage 0's layout. It lives in the buffers Adam's m would use (P->d_m for the GPU
 * units, P->h_m for the CPU units; v is empty), sized by src/zero/estimate.c.
 *
 * Several ranks: a rank holds a slice of a tensor when the unit's partition cuts it (ada_split.h). Its state: the
 * whole row and column statistics of a matrix (replicated: every rank holding a slice updates them from the same
 * all-reduced sums), v and exp_avg of its own elements. The GPU plan forms partial sums over the slice, and
 * zp_ada_gpu_step all-reduces the shared tensors' sums between the plan's phases (two fp64 all-reduces per step,
 * whatever the number of tensors or sub-groups). The CPU-stepped tensors cut across ranks (offload_optimizer) are
 * stepped as slices (cpu_adafactor_slice_*): zp_ada_cpu_sums forms their partial sums on the main thread and reduces
 * them through the GPU (two more fp64 all-reduces), the optimizer thread applies them unit by unit as before.
 */
#pragma once
#include "part.h"

// After zp_create carved the units' buffers (before its GPU byte check): the tensor table, the state pointers in
// P->d_m / P->h_m, and the GPU plan (whose scratch it adds to P->gpu_bytes). Returns 0, or -1 with a message.
int zp_ada_create(ZeroPart* P, const ZeroOptions* o, char* err, size_t errlen);
void zp_ada_destroy(ZeroPart* P);
// The device buffer through which the CPU-stepped cut tensors' sums are all-reduced (zp_step_init; counted in
// P->gpu_bytes by zp_ada_create). No-op without such tensors.
void zp_ada_device_init(ZeroPart* P);
// The GPU units' step on stream s (the fused plan over their masters; zp_optimizer_step then publishes them as
// after AdamW). Returns false (nothing done) without GPU-stepped tensors.
bool zp_ada_gpu_step(ZeroPart* P, const ZeroStepArgs* a, cudaStream_t s);
// Several ranks with offload_optimizer: the partial sums of the CPU-stepped tensors cut across ranks (every rank calls
// it, after zp_ada_gpu_step and before the optimizer thread takes the step): on this thread, synchronously (it waits for
// the gradients on the host), two fp64 all-reduces on s. No-op when no CPU-stepped tensor is cut.
void zp_ada_cpu_sums(ZeroPart* P, const ZeroStepArgs* a, cudaStream_t s);
// Its parts (no CUDA call; test_zero_adafactor adds the ranks' buffers on the host): phase 1 the slices' sums into the
// host buffer 1 (row / column sums, sum p^2) and 2 (a vector's sum u^2), phase 2 (buffer 1 reduced) the EMAs, factors
// and a matrix's sum u^2 into buffer 2, phase 3 (buffer 2 reduced) the whole sums kept for zp_ada_cpu_unit.
void zp_ada_cpu_phase(ZeroPart* P, const ZeroStepArgs* a, int phase);
// The host buffer `which` (1, 2) of the shared sums and its doubles (0: no CPU-stepped tensor is cut).
double* zp_ada_cpu_sums_buffer(ZeroPart* P, int which, size_t* n);
// One CPU unit's step (the optimizer thread): every tensor of unit u, its 16-bit host weights written in the same
// pass. The caller publishes the unit.
void zp_ada_cpu_unit(ZeroPart* P, int u, const ZeroStepArgs* a);
// The state in the checkpoint layout (model/zero.h zero_adafactor_state_*); the caller waited for the optimizer
// thread (zp_optimizer_wait), the GPU units' kernels are waited for here.
size_t zp_ada_state_floats(const ZeroPart* P);
void zp_ada_state_io(ZeroPart* P, size_t offset, size_t n, float* host, bool to_host);
// The unit of tensor i (ZeroOptions.tensors order).
int zp_ada_tensor_unit(const ZeroPart* P, int tensor);
// The lr tensor i used in the last step: a GPU tensor waits for the plan's stream; a CPU tensor's step must be done
// (zp_optimizer_ada_lr waits for its unit); 0 for a tensor of which this rank holds nothing.
float zp_ada_last_lr(ZeroPart* P, int tensor);
