/*
 * step0.h: the optimizer of ZeRO stage 0 (every unit resident on the GPU, one flat buffer of each kind: zero.c),
 * internal to src/zero/; engine.c drives it. transformers' / DeepSpeed's arithmetic in fused GPU launches over the
 * flat buffers:
 *   AdamW      cuda/adamw.cu, one plan over every tensor: master, m, v (each (n) fp32) in place, the 16-bit working
 *              weights written in the same pass
 *   Adafactor  cuda/adafactor.cu, one plan over every tensor: its state in one buffer, per tensor in table order
 *              exp_avg_sq_row + exp_avg_sq_col (a matrix) or exp_avg_sq (a vector), then exp_avg with beta1 (the
 *              checkpoint's "adafactor" blob, the same layout stages 1-3 keep)
 *   accumulation  with gradient_accumulation_steps > 1 an fp32 sum of the micro-batches' gradients (torch
 *              semantics: = g_0, then += g_i); else the optimizer reads the engine's gradients directly
 *   the norm   the deterministic squared global norm + non-finite flag of what the optimizer reads (several ranks:
 *              after the data-parallel mean)
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../model/zero.h"

typedef struct Step0 Step0;

// The state (zeroed) and plans over Z's flat buffers for the tensors of o (o->tensors; Adam constants, Adafactor
// options, grad_accum_steps, working dtype); ada_floats: Adafactor's state floats (engine.c's layout). Out of GPU
// memory ends the run naming the bytes.
Step0* step0_create(ZeroEngine* Z, const ZeroOptions* o, size_t ada_floats);
void step0_destroy(Step0* S);
// After micro-batch `micro`'s backward: its gradient into the fp32 sum (= at 0, += after); nothing without one.
void step0_accumulate(Step0* S, ZeroEngine* Z, int micro, cudaStream_t s);
// After the last of n_micro: (several ranks) the mean over the ranks, then the squared norm and the flag on the device.
void step0_grad_norm(Step0* S, ZeroEngine* Z, int n_micro, bool inject_inf, float* d_norm2, int* d_overflow,
                     cudaStream_t s);
// The update on s (a->d_inv_scale: 1/combined on the device).
void step0_step(Step0* S, const ZeroOptions* o, const ZeroStepArgs* a, cudaStream_t s);
// The optimizer's state to or from host memory, synchronous: elements [off, off + n) of AdamW's m (which 0) or v
// (which 1); floats [off, off + n) of Adafactor's buffer (the checkpoint's "adafactor" blob).
void step0_adam_io(Step0* S, int which, size_t off, size_t n, float* host, bool to_host);
void step0_adafactor_io(Step0* S, size_t off, size_t n, float* host, bool to_host);
// Adafactor: the lr tensor 0 used in the last step (waits for s).
double step0_adafactor_lr(Step0* S, cudaStream_t s);
