/*
 * engine_internal.h: the Engine of engine.h, shared by engine.c (the update) and engine_state.c (its checkpoint
 * blobs); internal to src/zero/.
 */
#pragma once
#include "cpu_adam.h"
#include "engine.h"
#include "step0.h"

// the checkpoint's "scheduler" blob: the updates applied (= the LR schedule's step) and Adam's step state (the
// running beta powers, so the bias corrections after a resume are bit-identical to an uninterrupted run)
typedef struct {
    int64_t applied_steps;
    CpuAdam adam;
} EngineSched;

struct Engine {
    EngineOptions o;             // o.zero.tensors / trace / grad_trace: t5_model_zero_describe's, owned
    ZeroEngine* Z;               // the parameters (model/zero.h)
    bool part;                   // stages 1-3: the partitioned engine holds master, m, v and steps them
    Step0* s0;                   // stage 0's optimizer (EngineOptions.train)
    bool ada;                    // Adafactor (else AdamW)
    bool zf;                     // ZenFlow (EngineOptions.zenflow): zenflow.h's state hangs on the partition
    size_t numel;                // flat numel (units padded to 8)
    size_t state_n;              // Adam's m (and v) floats this rank holds: its partition (= numel at one rank)
    size_t ada_floats;           // Adafactor's state floats of this rank (its "adafactor" blob; recut.h's layout)
    size_t ada_whole_floats;     // ... of the whole model (stage 0, one rank)
    int n_micro;                 // micro-batches of the update under way
    double last_lr;              // the lr of the last engine_step (EngineStats.lr)
    LossScaler scaler;           // zero without a loss scaler (the "scaler" blob all the same)
    EngineSched sch;
    float* d_norm2;              // (1) the squared global norm of the (scaled) gradient
    int* d_overflow;             // (1) non-finite flag
    float* d_inv_scale;          // (1) 1/combined (global_norm_clip_scale)
    float* d_norm;               // (1)
    float* h_norm2;              // pinned (1)
    int* h_overflow;             // pinned (1)
    float* h_inv_scale;          // pinned (1): 1/combined for the engine's CPU optimizer
};

// Adafactor's state floats of this rank's blob (engine_state.c): its slices at stages 1-3, the whole model at stage 0
size_t engine_ada_rank_floats(const Engine* E);
