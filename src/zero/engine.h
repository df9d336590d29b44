/*
 * engine.h: the trainer's door to the ZeRO engine, every stage (docs/zero.md "The engine API"). DeepSpeed's shape:
 * the training loop runs forward and backward on the model, and tells the engine where a micro-batch begins and
 * ends and when to step; the stage, the flat buffers and partitions, the optimizer (AdamW or Adafactor, on the GPU
 * or the CPU), gradient accumulation, clipping, the fp16 loss scaler and its overflow skip, and the optimizer's
 * state format stay behind this door.
 *
 * One optimizer update:
 *     for each micro-batch i of n:  g = engine_micro_begin(E, i, n)  forward (dlogits x g), backward
 *                                   engine_micro_end(E, i)
 *     engine_grad_norm(E)           the gradient's squared norm and overflow flag, on the device (the collectives of
 *                                   the reduction are issued here: the trainer's own, e.g. the loss mean, come after)
 *     engine_step(E, lr)            clip scale, the norm on the host, the loss scaler; the update applied or skipped
 * The model reaches the parameters through engine_params (model/zero.h: fetch, release, grad_ready). What the logs
 * print of the engine (the flat size, the applied updates, the learning rate used, its counters) is engine_stats'.
 *
 * Streams: every call orders its work on the stream passed in; engine_step synchronises it once (the norm).
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../model/params.h"
#include "../../model/zero.h"
#include "loss_scaler.h"
#include "zenflow_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Engine Engine;

typedef struct {
    ZeroOptions zero;          // stage, offloads, buckets, dtypes, the optimizer and its constants (model/zero.h);
                               // tensors and traces are filled from T by engine_create
    const ParamTable* T;       // the model's parameter table (kept: weights IO)
    double clip;               // max_grad_norm (<= 0: off)
    bool use_scaler;           // fp16: DeepSpeed's dynamic (or static) loss scaler
    LossScalerConfig scaler;
    bool train;                // training: the optimizer's state, plans and step state too (stage 0 allocates them in
                               // engine_create, stages 1-3 hold them in their partitions); false: evaluation only
    bool profile;              // T5TRAIN_ZERO_PROFILE: engine_step snapshots the engine's counters at the norm
    // zero_optimization.zenflow (training, one rank, stages 1-3 with offload_optimizer cpu, AdamW; src/zero/zenflow.h):
    // every micro-step a selective AdamW on the GPU, the CPU AdamW every update_interval micro-steps; the caller's
    // gradient accumulation must be 1 (n_micro 1 in engine_micro_begin)
    bool zenflow;
    ZenflowOpts zenflow_opts;
    int64_t zenflow_steps_per_epoch;  // micro-steps per epoch (select_strategy "epoch" / "auto"); <= 0: unknown
} EngineOptions;

// Where engine_state_save writes: blobs of the checkpoint's state file, each opened under the name the engine gives
// it ("optimizer", "scaler", ...: src/zero/engine_state.c), written in pieces, closed (each returns 0, or -1 with err
// set)
typedef struct {
    void* ctx;
    int (*begin)(void* ctx, const char* name, char* err, size_t errlen);
    int (*write)(void* ctx, const void* data, size_t n, char* err, size_t errlen);
    int (*end)(void* ctx, char* err, size_t errlen);
} EngineStateSink;

// Where engine_state_load reads: a checkpoint (dir) saved by old_world ranks; `rank` is the old rank whose file
// (path) this rank resumes from (its own with the same world size, else rank 0); both name it in messages
typedef struct {
    void* ctx;
    int old_world, rank;
    const char* dir;
    const char* path;
    // the size in bytes of the blob `name` of this rank's file (rank), or -1 when it has none
    int64_t (*size)(void* ctx, const char* name);
    // the blob `name` (nbytes, which must be its size) of old rank r's file in pieces: consume(cctx, data, byte
    // offset, n); returns 0, or -1 with err set
    int (*read)(void* ctx, int r, const char* name, size_t nbytes,
                int (*consume)(void* cctx, const void* data, size_t off, size_t n), void* cctx, char* err,
                size_t errlen);
} EngineStateSource;

// What one update did
typedef struct {
    double norm;               // the unscaled global gradient norm; NAN when the update was skipped
    bool skipped;              // overflow: no weight changed, no Adam step, the LR schedule does not advance
    bool diverged;             // overflow without a loss scaler (bf16 / fp32): nothing applied, the run must stop
    char overflow_line[512];   // DeepSpeed's OVERFLOW line to log ("" when none)
    double loss_scale;         // the loss scaler's scale after this update (0 without a loss scaler)
    double synced_s;           // CLOCK_MONOTONIC seconds when the norm reached the host
    // with EngineOptions.profile, the engine's counters when the norm reached the host (else 0)
    double cpu_optimizer_s;    // the CPU optimizer's time of its last update (stages 1-3 offloaded)
    double h2d_bytes, d2h_bytes;  // the engine's copies so far
} EngineStepResult;

// What the logs print of the engine
typedef struct {
    size_t numel;              // parameters in the flat layout (units padded to 8)
    int64_t applied_steps;     // the updates the optimizer applied (its step count; after engine_state_load the
                               // checkpoint's "scheduler" blob's)
    double lr;                 // the learning rate of the last update: engine_step's lr, or with Adafactor's
                               // relative_step what it used (transformers' AdafactorSchedule: tensor 0's, 0 before
                               // any applied update; with scale_parameter this waits for that update)
    char line[1024];           // stages 1-3 with settle: the engine's counters as one log line (gathers, trace
                               // mismatches, copies, the CPU optimizer's last time, the run-time buffers); "" at
                               // stage 0 or without settle
} EngineStats;

// The engine of the plan: parameters at o->zero.stage (zeroed; the weights come with engine_load_weights), the loss
// scaler, and with o->train the optimizer's state (every buffer up front, at every stage: the model's activations
// come after). Out of GPU memory for stage 0's optimizer state ends the run with the bytes asked and the config
// change that helps. Returns 0, or the exit status the error calls for (T5_EXIT_USAGE: a bad option;
// T5_EXIT_FAILURE: memory, with a message naming the bytes) with err set.
int engine_create(Engine** out, const EngineOptions* o, char* err, size_t errlen);
// The parameter interface the model calls (model/zero.h).
ZeroEngine* engine_params(Engine* E);
// Weights from a safetensors file / index / directory, or (path NULL) HF's random init with seed; every copy the
// model reads follows. Returns 0, or -1 with err set.
int engine_load_weights(Engine* E, const char* path, uint64_t seed, cudaStream_t s, char* err, size_t errlen);
// model.safetensors (+ shards) and config.json of the fp32 master into dir, as dtype (DT_F32, or a 16-bit type: the
// master rounded to it); every rank calls it (several ranks at stages 1-3 gather the partitions), the ranks with
// write write. ZenFlow: the selected columns come from the working weights (the weights the model runs with); the
// engine's master is left as it was. Returns 0, or -1 with err set.
int engine_save_weights(Engine* E, const char* dir, bool write, DType dtype, cudaStream_t s, char* err, size_t errlen);
// Micro-batch `micro` of `n_micro` of one update begins: returns the scale of its backward (loss scale / n_micro).
float engine_micro_begin(Engine* E, int micro, int n_micro, cudaStream_t s);
// Its backward is done: the gradient joins the update's accumulated gradient.
void engine_micro_end(Engine* E, int micro, cudaStream_t s);
// After the last micro-batch: the squared norm and the overflow flag on the device, in stream order; inject_inf (a
// test hook) makes this update overflow.
void engine_grad_norm(Engine* E, bool inject_inf, cudaStream_t s);
// The update with learning rate lr: see EngineStepResult. The CPU part of the optimizer may still run when it returns
// (the next fetches wait for their units). An overflow at the loss scaler's minimum scale ends the run (DeepSpeed).
EngineStepResult engine_step(Engine* E, double lr, cudaStream_t s);
// Evaluation: the optimizer settled and (stage 3) every unit gathered and held when they fit; returns whether they
// are held (false: each forward fetches on demand, no CUDA graphs in generation). engine_eval_end releases them.
// T5TRAIN_EVAL_NO_HOLD=1 (a test hook, the same on every rank): stage 3 does not hold.
bool engine_eval_begin(Engine* E, cudaStream_t s);
void engine_eval_end(Engine* E, bool held, cudaStream_t s);
// The optimizer, loss scaler and step state of this rank as named checkpoint blobs, streamed through bounded memory.
// Returns 0, or -1 with err set.
int engine_state_save(Engine* E, const EngineStateSink* sink, char* err, size_t errlen);
// The same from a checkpoint, re-cut when it was saved by another number of ranks (recut.h). A checkpoint that does
// not fit this run ends it with the reason.
void engine_state_load(Engine* E, const EngineStateSource* src);
// What the logs print (EngineStats); settle: wait for the optimizer's CPU part first (end of training: its last time).
void engine_stats(Engine* E, bool settle, cudaStream_t s, EngineStats* out);
void engine_destroy(Engine* E);

#ifdef __cplusplus
}
#endif
