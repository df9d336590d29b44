/*
 * planner.h: the memory planner of issue 17, pure arithmetic (no CUDA call, CPU-tested).
 *
 * For a model shape, a batch shape and the ZeRO knobs, one row per plan (stage 0..3, each offload, ratio
 * steps) with the GPU bytes per rank and the host bytes per node that the engine (src/zero/estimate.c: the
 * same sizes zp_create allocates), the model's activation arena (t5_model_activation_bytes_for) and the
 * fixed workspace need; whether it fits a machine; a predicted step time from measured rates (planner.c says
 * which); DeepSpeed's own estimator for the same model. `t5train estimate` prints the table; the automatic
 * plan (`"stage": "auto"`, `--zero_plan auto`) picks the fastest row that fits.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "../../model/t5_config.h"
#include "../../model/zero.h"

#define PLANNER_MAX_ROWS 128
// CUDA context + cuBLASLt handle: an allowance, not a measurement of this build (the workspace is counted apart)
#define PLANNER_CONTEXT_BYTES ((size_t)512 << 20)
// the host the process needs beside the engine's buffers (the engine's own check keeps the same 2 GiB)
#define PLANNER_HOST_MARGIN_BYTES ((size_t)2 << 30)

typedef struct {
    T5Config model;
    DType dtype;             // the run dtype (fp32, fp16, bf16)
    DType grad_dtype;        // gradients / grad_accum_dtype (dtype, or fp32)
    int batch;               // micro-batch per GPU (training's; the step time is for this batch)
    int arena_batch;         // the activations are sized for max(batch, arena_batch) (evaluation's batch; 0: none)
    int src_len, tgt_len;    // token lengths the activations are sized for
    bool gradient_checkpointing;
    bool forward_only;       // evaluation only: the activations of one block, no gradient buffers (t5.h)
    int grad_accum_steps;
    int gpus_per_node, num_nodes;
    ZeroOptions knobs;       // bucket sizes, sub_group_size, stage 3 limits, pin_memory (stage/offload/ratio ignored)
} PlanInput;

typedef struct {
    int stage;
    bool off_opt, off_param;
    double ratio;            // offload_optimizer.ratio (1 without offload_optimizer)
    // GPU per rank (bytes)
    size_t g_params;         // 16-bit weights resident + gathered at the stage 3 peak, fp32 views
    size_t g_grads;          // resident / accumulated / in-flight gradients
    size_t g_optim;          // fp32 master, Adam m, v on the GPU (+ ZenFlow's selective state)
    size_t g_comm;           // gradient staging, comm bucket, norm slots
    size_t g_act;            // the activation arena
    size_t g_work;           // cuBLASLt workspace, attention pointer arrays, CUDA context allowance
    size_t g_total;
    // host per node (bytes): the engine's buffers of every rank of the node
    size_t h_pinned, h_pageable, h_total;  // h_total includes the NVMe swap buffers (knobs.nvme_path)
    size_t h_register;       // of h_pageable, what the engine pins in the background while training (estimate.h)
    uint64_t nvme_file_bytes; // offload_optimizer nvme (knobs.nvme_path): the swap file of Adam m, v per rank
    size_t cpu_numel;        // optimizer elements stepped by the CPU (per rank)
    double h2d_bytes, d2h_bytes;  // PCIe traffic per optimizer step (per rank)
    double step_s;           // predicted seconds per optimizer step; < 0: no measured rate applies
    double ada_reduce_bytes; // Adafactor on several ranks: bytes of its fp64 all-reduces per step (estimate.h)
    bool fits;
    char why[200];           // why it does not fit (empty when it fits or was not checked)
} PlanRow;

// The table: stage 0; stages 1, 2: no offload, offload_optimizer ratio 0.25 / 0.5 / 0.75 / 1; stage 3: the same
// and offload_param with each ratio. ratio_step: the ratio grid (0.25 for the table; the automatic plan
// passes a finer one). Returns the number of rows, or -1 with a message.
int planner_table(const PlanInput* in, double ratio_step, PlanRow* rows, int cap, char* err, size_t errlen);
// One row for one plan (stage, offloads, ratio). Returns 0 or -1 with a message.
int planner_row(const PlanInput* in, int stage, bool off_opt, bool off_param, double ratio, PlanRow* r, char* err,
                size_t errlen);

// Marks each row fits or not: GPU total * (1 + margin) <= gpu_free (have_gpu false: no GPU known, nothing fits),
// host per node + PLANNER_HOST_MARGIN_BYTES <= host_avail.
void planner_fit(PlanRow* rows, int n, bool have_gpu, size_t gpu_free, size_t host_avail, double margin);
// The fastest row that fits (ties: less GPU memory); -1 when none fits.
int planner_choose(const PlanRow* rows, int n);
// "stage 3, offload_optimizer cpu (ratio 0.5), offload_param cpu" style name.
void planner_row_name(const PlanRow* r, char* buf, size_t len);

// DeepSpeed's estimator (deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs and
// stage_1_and_2.py estimate_zero2_model_states_mem_needs, additional_buffer_factor 1.5), for the same model:
// total_params counts the tied embedding once; largest_layer_params is the largest module's own parameters
// (the embedding / lm_head V x D, or a feed-forward matrix when larger).
typedef struct {
    const char* options;     // DeepSpeed's option string
    double cpu_bytes, gpu_bytes;
} DsEstimateRow;
size_t planner_ds_total_params(const T5Config* c);
size_t planner_ds_largest_layer(const T5Config* c);
// zero3: 6 rows in DeepSpeed's order (offload_param cpu/offload_optimizer cpu, zero_init 1 and 0; offload_param
// none/offload_optimizer cpu; none/none); zero2: 2 rows (offload_optimizer cpu; none). Returns the rows written.
int planner_ds_zero3(const T5Config* c, int gpus_per_node, int num_nodes, DsEstimateRow* out);
int planner_ds_zero2(const T5Config* c, int gpus_per_node, int num_nodes, DsEstimateRow* out);

// The predicted compute time of forward + backward + GPU optimizer for one micro-batch (seconds), from the two
// measured stage 0 step times (planner.c). Exposed for the tests.
double planner_compute_s(const PlanInput* in);

// Prints the table (and DeepSpeed's numbers) the way `t5train estimate` shows it.
void planner_print(FILE* f, const PlanInput* in, const PlanRow* rows, int n, bool have_gpu, size_t gpu_free,
                   size_t host_avail);

// The automatic plan: the rows over a 0.05 ratio grid fitted with `margin`; the index of the fastest that fits
// (-1: none; *nrows 0 and a message when the input is bad). With log: the choice and, for each faster plan
// family, why it was rejected.
int planner_auto_choose(const PlanInput* in, bool have_gpu, size_t gpu_free, size_t host_avail, double margin,
                        PlanRow* rows, int cap, int* nrows, FILE* log, char* err, size_t errlen);
// The automatic micro-batch and gradient checkpointing (issue 17 item 3): with batch_auto the micro-batch runs over
// 1..max_batch, with ckpt_auto gradient checkpointing over off and on; each (batch, checkpointing) gets the fastest
// plan that fits (planner_auto_choose) and the pick is the highest predicted samples/s (batch / s per step); ties:
// checkpointing off, then the larger batch. Memory grows with the batch, so for a plan the largest batch that
// fits is also its fastest in samples/s; checkpointing (x 4/3 compute) wins only where the same plan at the same
// batch does not fit without it. in->batch and in->gradient_checkpointing are the fixed values when not auto.
#define PLANNER_AUTO_MAX_BATCH 64
typedef struct {
    bool batch_auto, ckpt_auto;
    int max_batch;           // the cap of the micro-batch (<= 0: PLANNER_AUTO_MAX_BATCH)
    int min_batch;           // the least micro-batch searched (<= 1: 1; DeepSpeed autotuning's lower bound)
} PlanSearch;
typedef struct {
    int batch;
    bool ckpt;
    PlanRow row;             // the plan at (batch, ckpt)
    double samples_s;        // batch / row.step_s
} PlanPick;
// Returns 0 with *pick, 1 when nothing fits (pick->row: the smallest GPU need among the rows whose host part fits
// at batch 1, or the fixed batch), -1 with a message. With log: the choice, why the next larger batch and the plan
// without checkpointing were rejected, and the faster plan families rejected at the chosen batch.
int planner_auto_search(const PlanInput* in, const PlanSearch* s, bool have_gpu, size_t gpu_free, size_t host_avail,
                        double margin, PlanPick* pick, FILE* log, char* err, size_t errlen);
#define AUTO_MARGIN 0.05

// `"stage": "auto"` / `--zero_plan auto` for a run: in describes the run (knobs taken from zo); zo holds the run's
// zero_optimization knobs and receives the chosen stage, offloads and ratio; *pick the micro-batch and checkpointing.
// Asks CUDA for the free GPU memory and host_mem_available(); prints the choice; exits with a sentence when no
// plan fits.
void planner_auto_apply(PlanInput* in, const PlanSearch* s, ZeroOptions* zo, PlanPick* pick);
// The pick's stage, offloads and ratio into zo (pinned offload buffers: the measured rates are for pinned ones).
void planner_pick_apply(const PlanPick* pick, ZeroOptions* zo, FILE* log);

#include "config.h"
#include "../train/trainer.h"
// What the run leaves to the planner, from the config before config_resolve (raw): the micro-batch when
// per_device_train_batch_size is "auto", or when the DeepSpeed config's train_micro_batch_size_per_gpu is "auto"
// and per_device_train_batch_size was not given (with it, HF's "auto" takes it); gradient checkpointing when
// gradient_checkpointing is "auto".
void planner_search_from_config(const RunConfig* raw, PlanSearch* s);
// run.c: `"stage": "auto"` / `--zero_plan auto` applied to the run's TrainerArgs (its zero options). Returns true
// when it chose the micro-batch or gradient checkpointing: run.c then resolves the config again from raw with
// planner_pick_to_config, rebuilds the TrainerArgs and applies the pick's plan with planner_pick_apply.
bool planner_auto_run(const RunConfig* c, const RunConfig* raw, TrainerArgs* a, PlanSearch* search, PlanPick* pick);
void planner_pick_to_config(const PlanPick* pick, const PlanSearch* s, RunConfig* c);
// Out of memory explained (issue 17 item 4): "; the estimate for this job (plan, batch): X GiB GPU, Y GiB host; set
// <the keys that change>: predicted ... (or --zero_plan auto)" for a job whose allocation failed, against gpu_mem /
// host_mem (the whole GPU, the host available). The plan keeps the batch (checkpointing allowed), else the largest
// smaller batch. Returns 0, 1 when nothing fits (the sentence says so), -1 when buf is too short.
int planner_oom_sentence(const PlanInput* in, const ZeroOptions* cur, bool have_gpu, size_t gpu_mem, size_t host_mem,
                         char* buf, size_t len);
// The run as the planner sees it (the automatic plan, the fixed plan's check, the out-of-memory advice): the batches,
// the lengths the trainer sizes (TrainerArgs.plan_src_len / plan_tgt_len, else the caps), and with several ranks
// (a->zero.world) the whole world's partitions and this host's ranks (LOCAL_WORLD_SIZE or the launcher's equivalent,
// else this host's GPU count when it divides the world, else every rank).
void planner_input_from_args(const TrainerArgs* a, PlanInput* in);
// TrainerArgs.oom_advice (run.c sets it): planner_oom_sentence for the run, against this GPU and host.
void planner_oom_advice(const void* args, char* buf, size_t len);
// A fixed plan (not "auto") predicted not to fit, refused before anything is allocated or created (issue 17 item
// 4): 1 with the sentence in buf ("the ZeRO plan of this run is predicted not to fit this machine: GPU: X GiB
// needed, Y GiB free" + planner_oom_sentence's estimate and a plan that fits), 0 when it fits. gpu_free is what
// CUDA reports free once this process has its context (the row's context allowance is already spent: it is
// added back); host_avail as host_mem_available (the row's host part + 2 GiB for the process must fit).
int planner_fixed_plan_check(const PlanInput* in, const ZeroOptions* cur, size_t gpu_free, size_t gpu_total,
                             size_t host_avail, char* buf, size_t len);
// run.c, before output_dir is created: planner_fixed_plan_check for the run against this GPU and host; dies with
// the sentence (exit 1). No GPU visible: nothing checked (the trainer says so). T5TRAIN_SKIP_PLAN_CHECK=1 skips it
// (the run then fails at its first allocation that does not fit, with the same advice).
void planner_check_run(const TrainerArgs* a);
// HF --auto_find_batch_size with the estimate instead of out-of-memory retries: from the run's micro-batch down by
// accelerate's find_executable_batch_size steps (b = int(b x 0.9)) to the first at which planner_fixed_plan_check
// predicts the run's fixed plan to fit this GPU and host. Returns that micro-batch (the run's own when it fits or
// when no GPU is visible or T5TRAIN_SKIP_PLAN_CHECK=1), or 0 when none down to 1 fits. Prints one line when it
// changes the micro-batch. Several ranks each read their own GPU: ranks that pick differently are refused at the
// rendezvous (the config hash covers the batch).
int planner_find_batch(const TrainerArgs* a, FILE* log);
