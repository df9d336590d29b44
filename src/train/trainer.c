/*
 * trainer.c: the single-GPU training loop: ZeRO stage 0 with the trainer's own fused GPU AdamW, or stages 1-3
 * where the engine (src/zero/) accumulates, reduces, offloads and steps the optimizer. See trainer.h for the step semantics, the
 * checkpoint layout and the resume / signal contract.
 *
 * Sections: pure loop arithmetic | checkpoint blobs (src/train/checkpoint.h holds the directory protocol) | the run
 * (setup, eval, step, loop, end). Signals: src/base/signals.h.
 */
#include "trainer.h"
#include "../launch/comm.h"
#include "recut.h"

#include <cuda_runtime.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../cuda/adafactor.cuh"
#include "../../cuda/adamw.cuh"
#include "../base/check.h"
#include "../../cuda/elementwise.cuh"
#include "../../cuda/global_norm.cuh"
#include "../../data/dataloader.h"
#include "../../data/tokenizer.h"
#include "../../model/params.h"
#include "../../model/t5.h"
#include "../../model/t5_weights.h"
#include "checkpoint.h"
#include "best_model.h"
#include "../base/common.h"
#include "../zero/cpu_adam.h"
#include "lr_schedule.h"
#include "../report/results.h"
#include "../eval/evaluate.h"
#include "../base/safetensors.h"
#include "../base/signals.h"
#include "../report/trainer_log.h"
#include "../report/report_to.h"
#include "../report/flops.h"
#include "../../model/zero.h"
#include "../zero/host_mem.h"

#define TRAINER_ERR_LEN 8192

// ----------------------------------------------------------------------------
// pure loop arithmetic

void trainer_args_default(TrainerArgs* a) {
    memset(a, 0, sizeof *a);
    data_options_default(&a->data);
    generate_options_default(&a->gen);
    a->dtype = DT_F32;
    loss_scaler_config_default(&a->scaler);
    a->gradient_accumulation_steps = 1;
    a->max_steps = -1;
    a->num_train_epochs = 3;
    a->lr = 5e-5;
    a->beta1 = 0.9;
    a->beta2 = 0.999;
    a->eps = 1e-8;
    a->adamw_mode = true;
    a->clip = 1.0;
    snprintf(a->sched_name, sizeof a->sched_name, "linear");
    a->ds_warmup_max_lr = 1e-3;
    a->ds_warmup_num_steps = 1000;
    a->logging_strategy = a->save_strategy = TRAINER_INTERVAL_STEPS;
    a->eval_strategy = TRAINER_INTERVAL_NO;
    a->logging_steps = a->eval_steps = a->save_steps = 500;
    a->seed = 42;
    a->dropout_rate = 0.1f;
}

int64_t trainer_updates_per_epoch(int64_t num_batches, int64_t gas) {
    if (gas < 1) gas = 1;
    return T5_MAX(num_batches / gas + (num_batches % gas > 0), (int64_t)1);
}

int64_t trainer_total_steps(int64_t max_steps, double num_train_epochs, int64_t upe) {
    if (max_steps > 0) return max_steps;
    return (int64_t)ceil(num_train_epochs * (double)upe);
}

int64_t trainer_num_epochs(int64_t max_steps, double num_train_epochs, int64_t upe) {
    if (max_steps > 0) return max_steps / upe + (max_steps % upe > 0);
    return (int64_t)ceil(num_train_epochs);
}

int64_t trainer_micro_batches(int64_t num_batches, int64_t gas, int64_t step_in_epoch) {
    if (gas < 1) gas = 1;
    int64_t left = num_batches - step_in_epoch * gas;
    return left <= 0 ? 0 : T5_MIN(gas, left);
}

bool trainer_step_due(TrainerInterval strategy, int64_t step, int64_t interval) {
    return strategy == TRAINER_INTERVAL_STEPS && interval > 0 && step > 0 && step % interval == 0;
}


// ----------------------------------------------------------------------------
// what a checkpoint carries besides the weights (src/train/checkpoint.h blobs in t5train_state.bin)

#define CKPT_TAG_TRAINER "trainer"
#define CKPT_TAG_ADAFACTOR "adafactor"                // Adafactor's state (replaces the "optimizer" blob)
#define CKPT_TAG_ADAFACTOR_LAYOUT "adafactor_layout"  // what that blob holds

// blob "trainer": the loop's counters
typedef struct {
    int64_t flat_numel;          // parameters (AdamW's optimizer blob holds 2 x this many floats)
    int32_t dtype;               // DType of the run (a checkpoint resumes only with the same precision)
    int32_t optimizer;           // TrainerOptimizer (0 AdamW: checkpoints older than this field hold 0 here)
    int64_t global_step;         // updates done (overflow-skipped ones included, as HF + DeepSpeed)
    int64_t skipped_steps;       // overflow-skipped updates
    int64_t tokens_seen;         // source + target tokens
    int64_t samples_seen;
    double total_loss_sum;       // sum of per-update losses (train_loss at the end)
    double win_loss_sum;         // logging window: loss sum and updates since the last log line
    int64_t win_steps;
    int64_t last_logged_step;
} TrainerCounters;

// blob "scheduler": the LR schedule position and Adam's step state (running beta powers, so the bias
// corrections after a resume are bit-identical to an uninterrupted run)
typedef struct {
    int64_t applied_steps;       // updates applied = the LR schedule's step
    CpuAdam adam;
} TrainerSchedState;

// blob "adafactor_layout": the "adafactor" blob is, per tensor in parameter-table order, exp_avg_sq_row (rows) and
// exp_avg_sq_col (cols) for a matrix or exp_avg_sq (numel) for a vector, then exp_avg (numel) with beta1; fp32.
// HF's state["step"] is the scheduler blob's applied_steps (every tensor steps on every applied update).
typedef struct {
    int64_t floats;              // floats in the "adafactor" blob
    int32_t has_beta1;           // exp_avg present
    int32_t version;             // 1
} TrainerAdafactorLayout;

// blob "rng": dropout masks are keyed by (seed, micro-batch counter)
typedef struct {
    uint64_t seed;
    int64_t micro_counter;
} TrainerRngState;

// Copies a small file (tokenizer files). Returns 0 or -1.
static int copy_file(const char* src, const char* dst) {
    size_t len;
    char* data = t5_read_file(src, &len);
    if (!data) return -1;
    FILE* f = fopen(dst, "wb");
    int rc = -1;
    if (f) {
        rc = fwrite(data, 1, len, f) == len ? 0 : -1;
        if (fclose(f) != 0) rc = -1;
    }
    free(data);
    return rc;
}

// Tokenizer files next to a saved model (HF saves them with the model): spiece.model (+ tokenizer.json,
// tokenizer_config.json, special_tokens_map.json when the source directory has them).
static void copy_tokenizer_files(const TrainerArgs* a, const char* dst_dir) {
    static const char* names[] = {"spiece.model", "tokenizer.json", "tokenizer_config.json",
                                  "special_tokens_map.json"};
    for (size_t i = 0; i < T5_ARRAY_LEN(names); i++) {
        char* src = NULL;
        if (a->tokenizer_files_dir[0]) src = t5_path_join(a->tokenizer_files_dir, names[i]);
        else if (i == 0 && a->tokenizer_file[0]) src = strdup_check(a->tokenizer_file);
        if (src && t5_is_file(src)) {
            char* dst = t5_path_join(dst_dir, names[i]);
            if (copy_file(src, dst)) t5_warn("cannot copy %s to %s", src, dst);
            free(dst);
        }
        free(src);
    }
}

// ----------------------------------------------------------------------------
// the run

typedef struct {
    const TrainerArgs* a;
    cudaStream_t s;
    ParamTable T;
    ZeroEngine* Z;
    T5Model* M;
    size_t n;                    // flat numel
    float* d_m;                  // (n) fp32 Adam first moment
    float* d_v;                  // (n) fp32 Adam second moment
    float* d_acc;                // (n) fp32 accumulation buffer (gas > 1), else NULL
    void* opt_grad;              // (n) opt_grad_dtype: what the norm and AdamW read (d_acc, or the engine's grads)
    DType opt_grad_dtype;
    AdamWPlan* adam_plan;
    // Adafactor (a->optimizer): one device buffer with every tensor's state (TrainerAdafactorLayout's order)
    float* d_ada;                // (ada_floats) fp32
    size_t ada_floats;
    AdafactorPlan* ada_plan;
    AdafactorScalars* h_ada0;    // pinned (1): what tensor 0 used (the lr logged with relative_step + scale_parameter)
    GlobalNormPlan* norm_plan;
    float* d_norm2;              // (1)
    int* d_overflow;             // (1)
    float* d_inv_scale;          // (1)
    float* d_norm;               // (1)
    float* h_loss;               // pinned (gas) micro-batch losses
    float* h_norm2;              // pinned (1)
    float* h_inv_scale;          // pinned (1): 1/combined for the engine's CPU optimizer
    bool engine_opt;             // stages 1-3: the engine owns master, m, v and steps them
    double t_start0, t_data, t_engine, t_weights;  // start-up milestones (s after process start)
    double prof_h2d, prof_d2h;   // engine copy counters at the last profile line
    cudaEvent_t prof_ev[4];      // T5TRAIN_ZERO_PROFILE: forward start, forward end, backward end, gradients handed on
    bool zero_profile;           // T5TRAIN_ZERO_PROFILE=1: one JSON line per step with the engine's breakdown
    double first_step_s;         // seconds from process start to the end of the first step (0: not yet)
    int* h_overflow;             // pinned (1)
    LRSchedule sched;
    bool use_scaler;
    LossScaler scaler;
    // data
    Tokenizer* tok;
    Dataset* train_ds;
    Dataset* eval_ds;
    DataLoader* train_dl;
    DataLoader* eval_dl;
    Dataset* pred_ds;            // do_predict: the test split
    DataLoader* pred_dl;
    Batch batch;
    // counters (saved in checkpoints)
    TrainerCounters st;
    TrainerSchedState sch;       // LR position + Adam step state
    TrainerRngState rng;
    DataLoaderState data_state;  // position restored from a checkpoint (magic 0: fresh run)
    int64_t total_steps, upe, nb;
    // logging
    TrainerLog log;
    Reporter rep;                 // --report_to writers (src/report/report_to.h), opened by report_start
    bool rep_started;
    double peak_flops, win_model_flops;  // the GPU's dense 16-bit peak (0: unknown), model FLOPs of the log window
    TrainerState hf;
    BestModel best;               // best-model selection and early stopping (best_model.h)
    json_t* dump;                // --dump_batches: array of updates (arrays of micro-batches)
    double peak_mem_gib;
    int64_t last_saved_step;
    // several ranks (a->zero.world > 1): rank 0 logs and writes the run's files (HF's main process); every rank
    // writes its own optimizer state; the logged loss is the mean over the ranks
    int rank, world;
    bool main;                   // rank 0: logs and reports
    bool writer;                 // writes the run's shared files: rank 0, or with save_on_each_node the local rank 0
                                 // of every node (HF's should_save; nodes without a shared file system)
    size_t state_n;              // Adam's m (and v) floats this rank holds: its partition (= t->n at one rank)
    float* d_losses;             // (gas) several ranks: the micro-batch losses, all-reduced
} Trainer;

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static double gpu_mem_used_gib(Trainer* t) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return -1;
    double g = (double)(tot - fr) / (1024.0 * 1024 * 1024);
    if (g > t->peak_mem_gib) t->peak_mem_gib = g;
    return g;
}

// seconds since this process started (/proc/self/stat starttime against /proc/uptime); -1 if unknown
static double process_age_s(void) {
    FILE* f = fopen("/proc/self/stat", "r");
    if (!f) return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char* p = strrchr(buf, ')');
    if (!p) return -1;
    unsigned long long start = 0;
    int field = 2;
    for (char* tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " ")) {
        if (++field == 22) {
            start = strtoull(tok, NULL, 10);
            break;
        }
    }
    double up = -1;
    f = fopen("/proc/uptime", "r");
    if (!f) return -1;
    if (fscanf(f, "%lf", &up) != 1) up = -1;
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (up < 0 || hz <= 0) return -1;
    return up - (double)start / (double)hz;
}

static json_t* json_matrix(const int32_t* x, int rows, int cols) {
    json_t* m = json_array();
    for (int r = 0; r < rows; r++) {
        json_t* row = json_array();
        for (int c = 0; c < cols; c++) json_array_append_new(row, json_integer(x[(size_t)r * cols + c]));
        json_array_append_new(m, row);
    }
    return m;
}

// Activation buffers are sized for the longest example the run will see (issue 14 item 7,
// dataset_activation_lengths): HF's max_source_length default (1024) would otherwise size every buffer for sequences
// the data never has. The planner sized its plan the same way (run.c run_data_lengths).
static void activation_lengths(Trainer* t, int* Ts, int* Tt) {
    const DataOptions* o = &t->a->data;
    Dataset* dss[3] = {t->train_ds, t->eval_ds, t->pred_ds};
    dataset_activation_lengths(o, dss, 3, Ts, Tt);
    printf("activations sized for %d source and %d target tokens (the longest example; max %d / %d)\n", *Ts, *Tt,
           o->max_source_length, T5_MAX(o->max_target_length, o->val_max_target_length));
}

// an allocation failure at start (the engine's buffers, the activation arena): the message, and with
// a->oom_advice the estimate for this job and a plan predicted to fit (issue 17)
static void die_alloc(const TrainerArgs* a, const char* err) {
    static char advice[1024];
    advice[0] = 0;
    const bool oom = strstr(err, "out of GPU memory") || strstr(err, "not enough host memory");
    if (oom && a->oom_advice) a->oom_advice(a, advice, sizeof advice);
    t5_die(T5_EXIT_FAILURE, "%s%s", err, advice);
}

static void model_setup(Trainer* t) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    int dev = 0;
    cudaError_t ce = cudaGetDeviceCount(&dev);
    if (ce != cudaSuccess || dev == 0)
        t5_die(T5_EXIT_FAILURE, "training and evaluation need a CUDA GPU and none is usable (%s)",
               ce != cudaSuccess ? cudaGetErrorString(ce) : "no device found");
    CUDA_CHECK(cudaStreamCreate(&t->s));
    if (params_build(&t->T, &a->model, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "model %s: %s", a->model.name, err);
    size_t* numel = malloc_check((size_t)t->T.num_units * sizeof(size_t));
    const char** names = malloc_check((size_t)t->T.num_units * sizeof(char*));
    for (int u = 0; u < t->T.num_units; u++) {
        numel[u] = t->T.units[u].numel;
        names[u] = t->T.units[u].name;
    }
    ZeroOptions zo = a->zero;
    zo.working_dtype = a->dtype;
    zo.grad_dtype = a->grad_dtype;
    zo.accum_dtype = a->grad_dtype;
    zo.beta1 = (float)a->beta1;
    zo.beta2 = (float)a->beta2;
    zo.eps = (float)a->eps;
    zo.weight_decay = (float)a->weight_decay;
    zo.adamw_mode = a->adamw_mode;
    // the optimizer the engine steps at stages 1-3 (stage 0: the trainer's own, below)
    zo.optimizer = a->optimizer == TRAINER_OPTIM_ADAFACTOR ? ZERO_OPTIM_ADAFACTOR : ZERO_OPTIM_ADAMW;
    zo.adafactor = (ZeroAdafactor){.eps1 = a->adafactor.eps1, .eps2 = a->adafactor.eps2,
                                   .clip_threshold = a->adafactor.clip_threshold,
                                   .decay_rate = a->adafactor.decay_rate, .has_beta1 = a->adafactor.has_beta1,
                                   .beta1 = a->adafactor.beta1, .weight_decay = a->adafactor.weight_decay,
                                   .scale_parameter = a->adafactor.scale_parameter,
                                   .relative_step = a->adafactor.relative_step,
                                   .warmup_init = a->adafactor.warmup_init};
    zo.grad_accum_steps = (int)T5_MAX(a->gradient_accumulation_steps, (int64_t)1);
    t5_model_zero_describe(&t->T, &zo);
    t->Z = zero_create_opts(&zo, t->T.num_units, numel, names, err, sizeof err);
    t5_model_zero_free(&zo);
    free(numel);
    free(names);
    if (!t->Z) die_alloc(a, err);
    t->n = zero_flat_numel(t->Z);
    t->engine_opt = zero_owns_optimizer(t->Z);
    t->state_n = t->engine_opt ? zero_partition_numel(t->Z) : t->n;
    if (t->world > 1) CUDA_CHECK(cudaMalloc((void**)&t->d_losses, T5_MAX(a->gradient_accumulation_steps, 1) * sizeof(float)));
    t->zero_profile = getenv("T5TRAIN_ZERO_PROFILE") && atoi(getenv("T5TRAIN_ZERO_PROFILE")) > 0;
    if (t->zero_profile)
        for (int k = 0; k < 4; k++) CUDA_CHECK(cudaEventCreate(&t->prof_ev[k]));
    if (zo.stage > 0) {
        ZeroStats zs;
        zero_stats(t->Z, &zs);
        printf("ZeRO stage %d: optimizer state %s, 16-bit parameters %s; host %.2f GiB (%.2f GiB pinned), GPU %.2f "
               "GiB resident%s; allocated in %.1f s\n",
               zo.stage,
               !zo.offload_optimizer ? "on the GPU" : zo.ratio >= 1.0 ? "on the CPU" : "split CPU/GPU by ratio",
               zo.offload_param ? "offloaded to the CPU" : zo.stage == 3 ? "partitioned on the GPU" : "on the GPU",
               (double)zs.host_bytes / (1 << 30), (double)zs.host_pinned_bytes / (1 << 30),
               (double)zs.gpu_bytes / (1 << 30),
               zs.host_grads_share_weights ? "; offloaded gradients share the 16-bit weights' host buffer" : "",
               zs.init_s);
        fflush(stdout);
    }
    t->t_engine = process_age_s();
    if (a->init_random) {
        if (t5_weights_init_random(t->Z, &t->T, a->seed, t->s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
    } else {
        if (t5_weights_load(t->Z, &t->T, a->weights_path, t->s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
    }
    zero_sync_working(t->Z, t->s);
    t->t_weights = process_age_s();

    // the largest batch this run feeds the model: training's, and evaluation's only when it evaluates
    int maxB = (int)T5_MAX(a->do_train ? a->data.train_batch_size : 1,
                           (a->do_eval || a->do_predict) ? a->data.eval_batch_size : 1);
    int maxTs = 0, maxTt = 0;
    activation_lengths(t, &maxTs, &maxTt);
    T5ModelOptions mo = {.max_B = maxB, .max_Ts = maxTs, .max_Tt = maxTt,
                         .dtype = a->dtype, .dropout_rate = a->dropout_rate,
                         .label_smoothing = (float)a->label_smoothing_factor,
                         .gradient_checkpointing = a->gradient_checkpointing};
    t->M = t5_model_create(&t->T, t->Z, &mo, err, sizeof err);
    if (!t->M) die_alloc(a, err);
    t5_model_set_train(t->M, true);

    if (!a->do_train) return;
    CUDA_CHECK(cudaMalloc((void**)&t->d_norm2, sizeof(float)));
    CUDA_CHECK(cudaMalloc((void**)&t->d_overflow, sizeof(int)));
    CUDA_CHECK(cudaMalloc((void**)&t->d_inv_scale, sizeof(float)));
    CUDA_CHECK(cudaMalloc((void**)&t->d_norm, sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&t->h_loss, (size_t)T5_MAX(a->gradient_accumulation_steps, 1) * sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&t->h_norm2, sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&t->h_overflow, sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void**)&t->h_inv_scale, sizeof(float)));
    cpu_adam_init(&t->sch.adam, (float)a->beta1, (float)a->beta2, (float)a->eps, a->adamw_mode);
    const bool ada = a->optimizer == TRAINER_OPTIM_ADAFACTOR;
    // Adafactor's state: per tensor its factored (or full) second moment and exp_avg with beta1, in parameter-table
    // order (the checkpoint's "adafactor" blob at every stage)
    for (int i = 0; ada && i < t->T.num_params; i++) {
        const ParamDesc* p = &t->T.params[i];
        t->ada_floats += cpu_adafactor_state_floats(p->ndim == 2 ? (size_t)p->shape[0] : 1,
                                                    p->ndim == 2 ? (size_t)p->shape[1] : p->numel, p->ndim == 2,
                                                    a->adafactor.has_beta1);
    }
    if (t->engine_opt && ada && zero_adafactor_state_floats(t->Z) != t->ada_floats)
        t5_die(T5_EXIT_FAILURE, "internal: the ZeRO engine's Adafactor state has %zu floats, the trainer's layout %zu",
               zero_adafactor_state_floats(t->Z), t->ada_floats);
    if (t->engine_opt) return;  // stages 1-3: the engine holds the optimizer state
    // optimizer state + plans: AdamW's m and v (2 floats per parameter), or Adafactor's factored state
    const size_t state_floats = ada ? t->ada_floats : 2 * t->n;
    if ((ada ? cudaMalloc((void**)&t->d_ada, T5_MAX(t->ada_floats, (size_t)1) * sizeof(float)) != cudaSuccess
             : (cudaMalloc((void**)&t->d_m, t->n * sizeof(float)) != cudaSuccess ||
                cudaMalloc((void**)&t->d_v, t->n * sizeof(float)) != cudaSuccess)) ||
        (a->gradient_accumulation_steps > 1 && cudaMalloc((void**)&t->d_acc, t->n * sizeof(float)) != cudaSuccess)) {
        (void)cudaGetLastError();
        t5_die_hint(T5_EXIT_FAILURE, "use ZeRO stage 1-3 with offload_optimizer (deepspeed.zero_optimization), or a smaller model",
                    "out of GPU memory allocating the %s state: %.2f GiB for %zu parameters", ada ? "Adafactor" : "Adam",
                    (double)(state_floats + (a->gradient_accumulation_steps > 1 ? t->n : 0)) * 4 / (1 << 30), t->n);
    }
    if (ada) CUDA_CHECK(cudaMemset(t->d_ada, 0, T5_MAX(t->ada_floats, (size_t)1) * sizeof(float)));
    else CUDA_CHECK(cudaMemset(t->d_m, 0, t->n * sizeof(float)));
    if (!ada) CUDA_CHECK(cudaMemset(t->d_v, 0, t->n * sizeof(float)));
    AdamWTensor* at = calloc_check((size_t)t->T.num_params, sizeof(AdamWTensor));
    AdafactorTensor* ft = calloc_check((size_t)t->T.num_params, sizeof(AdafactorTensor));
    size_t ada_off = 0;
    float* master = zero_flat_master(t->Z);
    // what the optimizer reads: the engine's gradients, or with accumulation their fp32 sum
    t->opt_grad = a->gradient_accumulation_steps > 1 ? (void*)t->d_acc : zero_flat_grad(t->Z);
    t->opt_grad_dtype = a->gradient_accumulation_steps > 1 ? DT_F32 : zero_grad_dtype(t->Z);
    const size_t gsz = dtype_size(t->opt_grad_dtype);
    for (int i = 0; i < t->T.num_params; i++) {
        const ParamDesc* p = &t->T.params[i];
        size_t off = zero_unit_offset(t->Z, p->unit) + p->offset;
        at[i].master = master + off;
        at[i].m = ada ? NULL : t->d_m + off;
        at[i].v = ada ? NULL : t->d_v + off;
        at[i].grad = (const char*)t->opt_grad + off * gsz;
        at[i].n = (int64_t)p->numel;
        at[i].grad_dtype = t->opt_grad_dtype;
        at[i].work_dtype = a->dtype == DT_F32 ? DT_F16 : a->dtype;
        at[i].weight_decay = p->decay ? (float)a->weight_decay : 0.0f;
        if (a->dtype != DT_F32) {
            // stage 0: every unit is resident, so its working pointer is stable for the whole run
            char* w = zero_fetch(t->Z, p->unit, t->s);
            zero_release(t->Z, p->unit, t->s);
            at[i].work = w + p->offset * dtype_size(a->dtype);
        }
        if (ada) {
            // HF Adafactor factors every parameter with ndim >= 2 (T5: all but the layer norms)
            const bool fac = p->ndim == 2;
            const size_t rows = fac ? (size_t)p->shape[0] : 1, cols = fac ? (size_t)p->shape[1] : p->numel;
            ft[i] = (AdafactorTensor){.master = at[i].master, .grad = at[i].grad, .work = at[i].work,
                                      .rows = (int64_t)rows, .cols = (int64_t)cols, .factored = fac,
                                      .grad_dtype = at[i].grad_dtype, .work_dtype = at[i].work_dtype,
                                      .weight_decay = p->decay ? a->adafactor.weight_decay : 0.0};
            const CpuAdafactorState cs = cpu_adafactor_state_at(t->d_ada + ada_off, rows, cols, fac, a->adafactor.has_beta1);
            ft[i].exp_avg_sq_row = cs.exp_avg_sq_row;
            ft[i].exp_avg_sq_col = cs.exp_avg_sq_col;
            ft[i].exp_avg_sq = cs.exp_avg_sq;
            ft[i].exp_avg = cs.exp_avg;
            ada_off += cpu_adafactor_state_floats(rows, cols, fac, a->adafactor.has_beta1);
        }
    }
    if (ada) {
        t->ada_plan = adafactor_plan_create(ft, t->T.num_params);
        CUDA_CHECK(cudaMallocHost((void**)&t->h_ada0, sizeof(AdafactorScalars)));
        printf("Adafactor (%s): optimizer state %.2f MiB on the GPU (%.3f bytes per parameter; AdamW: 8) + %.2f MiB "
               "scratch\n", a->adafactor.has_beta1 ? "with beta1" : "beta1 None", (double)t->ada_floats * 4 / (1 << 20),
               (double)t->ada_floats * 4 / (double)t->n, (double)adafactor_plan_scratch_bytes(t->ada_plan) / (1 << 20));
    } else {
        t->adam_plan = adamw_plan_create(at, t->T.num_params);
    }
    free(at);
    free(ft);
    GradBuffer gb = {.ptr = t->opt_grad, .n = (int64_t)t->n, .dtype = t->opt_grad_dtype};
    t->norm_plan = global_norm_plan_create(&gb, 1);
}

void trainer_splits_used(const TrainerArgs* a, bool used[3]) {
    used[0] = a->do_train;
    used[1] = a->do_eval || a->eval_strategy != TRAINER_INTERVAL_NO;
    used[2] = a->do_predict;
}

// A split that cannot be read or tokenized, or is empty, is an input error (exit 2), as when run.c meets it first
static void data_setup(Trainer* t) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    // several ranks: training is sharded (a->data's rank and world size); evaluation and prediction run the whole
    // split on every rank (the same forward calls, so the same collectives, on every rank; rank 0 writes)
    DataOptions eval_data = a->data;
    eval_data.rank = 0;
    eval_data.world_size = 1;
    t->tok = tokenizer_open(a->data.tokenizer_path, err, sizeof err);
    if (!t->tok) t5_die(T5_EXIT_FAILURE, "%s", err);
    bool used[3];
    trainer_splits_used(a, used);
    if (used[DATA_SPLIT_TRAIN]) {
        t->train_ds = dataset_open(&a->data, DATA_SPLIT_TRAIN, t->tok, err, sizeof err);
        if (!t->train_ds) t5_die(T5_EXIT_USAGE, "training data: %s", err);
        if (dataset_size(t->train_ds) == 0)
            t5_die(T5_EXIT_USAGE, "the training set %s is empty", dataset_source_path(t->train_ds));
        t->train_dl = dataloader_open(t->train_ds, &a->data, true, err, sizeof err);
        if (!t->train_dl) t5_die(T5_EXIT_FAILURE, "training data: %s", err);
    }
    if (used[DATA_SPLIT_VALIDATION]) {
        t->eval_ds = dataset_open(&a->data, DATA_SPLIT_VALIDATION, t->tok, err, sizeof err);
        if (!t->eval_ds) t5_die(T5_EXIT_USAGE, "evaluation data: %s", err);
        if (dataset_size(t->eval_ds) == 0)
            t5_die(T5_EXIT_USAGE, "the evaluation set %s is empty", dataset_source_path(t->eval_ds));
        t->eval_dl = dataloader_open(t->eval_ds, &eval_data, false, err, sizeof err);
        if (!t->eval_dl) t5_die(T5_EXIT_FAILURE, "evaluation data: %s", err);
    }
    if (used[DATA_SPLIT_TEST]) {
        t->pred_ds = dataset_open(&a->data, DATA_SPLIT_TEST, t->tok, err, sizeof err);
        if (!t->pred_ds) t5_die(T5_EXIT_USAGE, "prediction data: %s", err);
        if (dataset_size(t->pred_ds) == 0)
            t5_die(T5_EXIT_USAGE, "the prediction set %s is empty", dataset_source_path(t->pred_ds));
        t->pred_dl = dataloader_open(t->pred_ds, &eval_data, false, err, sizeof err);
        if (!t->pred_dl) t5_die(T5_EXIT_FAILURE, "prediction data: %s", err);
    }
}

static void set_model_batch(Trainer* t, const Batch* b) {
    static char err[1024];
    T5Batch tb = {.B = b->B, .Ts = b->Ts, .Tt = b->Tt, .input_ids = (const int*)b->input_ids,
                  .attention_mask = (const int*)b->attention_mask, .labels = (const int*)b->labels,
                  .decoder_input_ids = (const int*)b->decoder_input_ids};
    if (t5_model_set_batch(t->M, &tb, t->s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "bad batch: %s", err);
}

// Loss over a whole split (HF evaluation_loop: each batch's mean loss weighted by its number of examples),
// then, with predict_with_generate, generation + corpus BLEU as run_translation's compute_metrics
// (src/eval/evaluate.c). prefix "eval" or "predict"; with keep the predictions are written to
// output_dir/generated_predictions.txt. Returns the metrics object (new reference).
static json_t* run_eval_split(Trainer* t, Dataset* ds, DataLoader* dl, const char* prefix, double epoch, bool keep) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    double t0 = trainer_log_now();
    int64_t nex = dataset_size(ds);
    trainer_log_eval_header(stdout, nex, a->data.eval_batch_size);
    t5_model_set_train(t->M, false);
    // stage 3: keep every unit gathered for the whole evaluation when it fits (the evaluation's unit order is
    // not training's); otherwise each forward fetches on demand
    zero_optimizer_wait(t->Z);
    const bool held = zero_hold_begin(t->Z, t->s);
    dataloader_set_epoch(dl, 0);
    double sum = 0;
    int64_t rows = 0, nbatches = 0;
    while (dataloader_next_batch(dl, &t->batch)) {
        set_model_batch(t, &t->batch);
        t5_model_forward(t->M, false, 1.0f, 0, t->s);
        float l = t5_model_loss(t->M, t->s);
        int real = 0;
        for (int r = 0; r < t->batch.B; r++) real += t->batch.example_index[r] >= 0;
        sum += (double)l * real;
        rows += real;
        nbatches++;
    }
    double loss = rows ? sum / (double)rows : NAN;
    char key[64];
    snprintf(key, sizeof key, "%s_loss", prefix);
    json_t* m = json_object();
    results_set_real(m, key, loss);
    const char* keys[3] = {key, NULL, NULL};
    double vals[3] = {loss, 0, 0};
    int nkeys = 1;
    char kb[64], kg[64];
    if (a->predict_with_generate) {
        EvalGenConfig gc = {.gen = a->gen, .prefix = prefix, .keep_predictions = keep, .progress = false,
                            .no_cuda_graphs = !held};
        EvalGenResult r;
        if (evaluate_generate(t->Z, &t->T, t->tok, ds, &a->data, &gc, t->s, &r, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "%s generation: %s", prefix, err);
        evaluate_add_metrics(m, &r);
        char ks[64];  // <prefix>_samples: run_translation adds it to the results files only, never to the logged dict
        snprintf(ks, sizeof ks, "%s_samples", prefix);
        json_object_del(m, ks);
        if (keep && t->writer && evaluate_write_predictions(a->output_dir, &r, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "%s", err);
        snprintf(kb, sizeof kb, "%s_bleu", prefix);
        snprintf(kg, sizeof kg, "%s_gen_len", prefix);
        keys[nkeys] = kb, vals[nkeys++] = r.bleu;
        keys[nkeys] = kg, vals[nkeys++] = r.gen_len;
        evaluate_result_free(&r);
    }
    if (held) zero_hold_end(t->Z, t->s);
    t5_model_set_train(t->M, true);
    // HF's <prefix>_runtime covers the loss pass and the generation together
    results_speed_metrics(m, prefix, trainer_log_now() - t0, nex, nbatches, -1);
    if (a->do_train && strcmp(prefix, "predict") != 0) results_set_real(m, "epoch", epoch);  // predict() does not log
    trainer_log_eval(&t->log, t->st.global_step, keys, vals, nkeys);
    return m;
}

static json_t* run_eval(Trainer* t, double epoch) {
    return run_eval_split(t, t->eval_ds, t->eval_dl, "eval", epoch, false);
}

// elements [off, off + n) of Adam's m (which 0) or v (which 1), flat fp32 in unit order, to or from host memory:
// the engine's partitions (stages 1-3) or the trainer's GPU buffers (stage 0)
static void opt_state_range(Trainer* t, int which, size_t off, size_t n, float* host, bool to_host) {
    if (t->engine_opt) {
        if (to_host) zero_opt_state_read(t->Z, which, off, n, host);
        else zero_opt_state_write(t->Z, which, off, n, host);
        return;
    }
    float* d = (which == 0 ? t->d_m : t->d_v) + off;
    if (to_host) CUDA_CHECK(cudaMemcpy(host, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    else CUDA_CHECK(cudaMemcpy(d, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

// floats [e, e + cnt) of the optimizer's checkpoint blob to or from host memory: AdamW's "optimizer" blob (m then v)
// or Adafactor's "adafactor" blob (its device buffer as is)
static void opt_blob_range(Trainer* t, size_t e, size_t cnt, float* host, bool to_host) {
    if (t->a->optimizer == TRAINER_OPTIM_ADAFACTOR && t->engine_opt) {  // the engine's, in the same layout
        if (to_host) zero_adafactor_state_read(t->Z, e, cnt, host);
        else zero_adafactor_state_write(t->Z, e, cnt, host);
        return;
    }
    if (t->a->optimizer == TRAINER_OPTIM_ADAFACTOR) {
        if (to_host) CUDA_CHECK(cudaMemcpy(host, t->d_ada + e, cnt * sizeof(float), cudaMemcpyDeviceToHost));
        else CUDA_CHECK(cudaMemcpy(t->d_ada + e, host, cnt * sizeof(float), cudaMemcpyHostToDevice));
        return;
    }
    while (cnt > 0) {
        const int which = e < t->state_n ? 0 : 1;
        const size_t start = which ? e - t->state_n : e;
        const size_t take = T5_MIN(cnt, t->state_n - start);
        opt_state_range(t, which, start, take, host, to_host);
        host += take;
        e += take;
        cnt -= take;
    }
}

// checkpoint_state_read_stream's consumer for the optimizer's blob: bytes [off, off + n)
static int opt_state_consume(void* ctx, const void* data, size_t off, size_t n) {
    Trainer* t = ctx;
    if (off % sizeof(float) || n % sizeof(float)) return -1;
    opt_blob_range(t, off / sizeof(float), n / sizeof(float), (float*)data, false);
    return 0;
}

// Several ranks: rank 0's value of a host decision on every rank (a collective; one rank: v itself)
static int from_rank0(Trainer* t, int v) { return comm_from_rank0(t->a->zero.comm, v, t->s); }

// The model's weights as model.safetensors (+ config.json) into dir: rank 0 writes; with several ranks at stages 1-3
// every rank first joins the gather of the fp32 masters.
static void save_weights(Trainer* t, const char* dir, const char* what) {
    static char err[TRAINER_ERR_LEN];
    zero_gather_masters(t->Z, t->writer, t->s);
    if (t->writer && t5_weights_save(t->Z, &t->T, dir, DT_F32, SAFETENSORS_DEFAULT_SHARD_BYTES, t->s, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "saving %s: %s", what, err);
    zero_gather_masters_free(t->Z);
}

static void save_checkpoint(Trainer* t) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    const int64_t step = t->st.global_step;
    if (t->last_saved_step == step) return;
    double t0 = trainer_log_now();
    CheckpointWriter w;
    if (checkpoint_begin(&w, a->output_dir, step, t->world, from_rank0(t, (int)getpid()), err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "%s", err);
    char what[64];
    snprintf(what, sizeof what, "checkpoint-%lld", (long long)step);
    save_weights(t, w.tmp_dir, what);
    if (t->writer) {
        copy_tokenizer_files(a, w.tmp_dir);
        char* p = t5_path_join(w.tmp_dir, "trainer_state.json");
        t->hf.global_step = step;
        if (trainer_state_save(&t->hf, p, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
        free(p);
    }
    CUDA_CHECK(cudaStreamSynchronize(t->s));
    DataLoaderState ds;
    dataloader_state_save(t->train_dl, &ds);
    t->st.flat_numel = (int64_t)t->n;
    t->st.dtype = (int32_t)a->dtype;
    t->st.optimizer = (int32_t)a->optimizer;
    const bool ada = a->optimizer == TRAINER_OPTIM_ADAFACTOR;
    const TrainerAdafactorLayout lay = {.floats = (int64_t)t->ada_floats, .has_beta1 = a->adafactor.has_beta1,
                                        .version = 1};
    CheckpointStateWriter* sw = checkpoint_state_create(w.tmp_dir, step, t->rank, t->world, err, sizeof err);
    // the optimizer's blob streamed through one bounded buffer: AdamW's "optimizer" (m then v, flat fp32: no full
    // host copy of the state next to the engine's own, t5-3b: 2 x 11.4 GB) or Adafactor's "adafactor"
    bool ok = sw && checkpoint_state_add(sw, CKPT_TAG_TRAINER, &t->st, sizeof t->st, err, sizeof err) == 0 &&
              (!ada || checkpoint_state_add(sw, CKPT_TAG_ADAFACTOR_LAYOUT, &lay, sizeof lay, err, sizeof err) == 0) &&
              checkpoint_state_blob_begin(sw, ada ? CKPT_TAG_ADAFACTOR : CKPT_TAG_OPTIMIZER, err, sizeof err) == 0;
    const size_t total = ada ? t->ada_floats : 2 * t->state_n;
    const size_t chunk = T5_MIN(total, (size_t)1 << 24);  // 64 MiB of fp32
    float* buf = malloc_check(T5_MAX(chunk, (size_t)1) * sizeof(float));
    for (size_t off = 0; off < total && ok; off += chunk) {
        const size_t n = T5_MIN(chunk, total - off);
        opt_blob_range(t, off, n, buf, true);
        ok = checkpoint_state_blob_write(sw, buf, n * sizeof(float), err, sizeof err) == 0;
    }
    free(buf);
    if (!ok || checkpoint_state_blob_end(sw, err, sizeof err) ||
        checkpoint_state_add(sw, CKPT_TAG_SCALER, &t->scaler, sizeof t->scaler, err, sizeof err) ||
        checkpoint_state_add(sw, CKPT_TAG_SCHEDULER, &t->sch, sizeof t->sch, err, sizeof err) ||
        checkpoint_state_add(sw, CKPT_TAG_DATA, &ds, sizeof ds, err, sizeof err) ||
        checkpoint_state_add(sw, CKPT_TAG_RNG, &t->rng, sizeof t->rng, err, sizeof err) ||
        checkpoint_state_finish(sw, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "saving checkpoint-%lld: %s", (long long)step, err);
    // several ranks: every rank's files are written before rank 0 completes the checkpoint, and it is in place
    // before any rank goes on (a resume never sees half of it)
    comm_barrier_on(t->a->zero.comm, t->s);
    if (t->writer && checkpoint_commit(&w, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
    comm_barrier_on(t->a->zero.comm, t->s);
    char line[4200];
    snprintf(line, sizeof line, "Saving model checkpoint to %s (%.1f s)", w.final_dir, trainer_log_now() - t0);
    trainer_log_line(&t->log, line);
    t->last_saved_step = step;
    if (a->save_total_limit > 0 && t->writer &&
        checkpoint_rotate(a->output_dir, (int)a->save_total_limit, step, t->best.has_best ? t->best.best_step : -1,
                          stdout, err, sizeof err) < 0)
        t5_warn("%s", err);
    checkpoint_writer_free(&w);
}

static void state_read_check(CheckpointState* cs, const char* tag, void* dst, size_t n) {
    static char err[TRAINER_ERR_LEN];
    if (checkpoint_state_read(cs, tag, dst, n, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s", err);
}

typedef struct {
    Trainer* t;
    const ZeroLayout* Lold;
    const ZeroLayout* Lnew;
    size_t got;
} RecutCtx;

static void recut_put(void* ctx, int which, size_t off, const float* src, size_t n) {
    RecutCtx* r = ctx;
    opt_state_range(r->t, which, off, n, (float*)src, false);
    r->got += n;
}

static int recut_consume(void* ctx, const void* data, size_t off, size_t n) {
    RecutCtx* r = ctx;
    if (off % sizeof(float) || n % sizeof(float)) return -1;
    recut_chunk(r->Lold, r->Lnew, off / sizeof(float), data, n / sizeof(float), recut_put, r);
    return 0;
}

// Resume on another number of ranks: this rank's AdamW m and v from the old ranks' blobs that hold a piece of its
// partition. The old layout: whole tensors when rank 0's blob holds the whole model (stage 0, or one rank), else
// old_world partitions; the new one: this rank's partition (stages 1-3) or the whole model (stage 0).
static void load_opt_recut(Trainer* t, const char* dir, CheckpointState* cs0, int old_world, size_t blob_floats) {
    static char err[TRAINER_ERR_LEN];
    if (t->a->optimizer == TRAINER_OPTIM_ADAFACTOR) {
        // Adafactor runs with whole tensors only on several ranks (stage 0): the blob is the same at any N
        if (checkpoint_state_read_stream(cs0, CKPT_TAG_ADAFACTOR, blob_floats * sizeof(float), (size_t)1 << 26,
                                         opt_state_consume, t, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "resume: %s (Adafactor state saved by %d ranks)", err, old_world);
        return;
    }
    const CheckpointBlobInfo* bi = checkpoint_state_find(cs0, CKPT_TAG_OPTIMIZER);
    if (!bi) t5_die(T5_EXIT_FAILURE, "resume: %s has no optimizer state", cs0->path);
    const size_t old_floats = (size_t)bi->nbytes / sizeof(float);
    const bool old_whole = old_floats == 2 * t->n;
    const int ow = old_whole ? 1 : old_world;
    const int nw = t->engine_opt ? t->world : 1, nr = t->engine_opt ? t->rank : 0;
    size_t* numel = malloc_check((size_t)t->T.num_units * sizeof *numel);
    for (int u = 0; u < t->T.num_units; u++) numel[u] = t->T.units[u].numel;
    ZeroLayout Ln, Lo;
    if (zero_layout_build(&Ln, nw, nr, t->T.num_units, numel, 1000000000, 0.0, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    if (Ln.part_total != t->state_n)
        t5_die(T5_EXIT_FAILURE, "internal: re-cut layout of %zu floats, this rank's optimizer state %zu", Ln.part_total,
               t->state_n);
    size_t owned = 0;
    for (int u = 0; u < t->T.num_units; u++) owned += Ln.hi[u] - Ln.lo[u];
    RecutCtx rc = {.t = t, .Lnew = &Ln};
    for (int r = 0; r < ow; r++) {
        if (zero_layout_build(&Lo, ow, r, t->T.num_units, numel, 1000000000, 0.0, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "resume: %s", err);
        if (recut_rank_needed(&Lo, r, &Ln)) {
            char fn[64];
            checkpoint_state_filename(fn, sizeof fn, r, old_world);
            char* p = t5_path_join(dir, fn);
            CheckpointState cs;
            if (checkpoint_state_open(&cs, p, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s", err);
            rc.Lold = &Lo;
            if (checkpoint_state_read_stream(&cs, CKPT_TAG_OPTIMIZER, 2 * Lo.part_total * sizeof(float), (size_t)1 << 26,
                                             recut_consume, &rc, err, sizeof err))
                t5_die(T5_EXIT_FAILURE, "resume: %s (optimizer state of rank %d of %d)", err, r, old_world);
            checkpoint_state_close(&cs);
            free(p);
        }
        zero_layout_free(&Lo);
    }
    zero_layout_free(&Ln);
    free(numel);
    if (rc.got != 2 * owned)
        t5_die(T5_EXIT_FAILURE, "resume: %s: the optimizer state re-cut from %d ranks gave %zu of %zu floats", dir,
               old_world, rc.got, 2 * owned);
    printf("Resuming on %d rank%s from a checkpoint of %d: optimizer state re-cut (%zu floats on this rank)\n", t->world,
           t->world > 1 ? "s" : "", old_world, rc.got);
}

static void load_checkpoint(Trainer* t, const char* dir) {
    static char err[TRAINER_ERR_LEN];
    if (t5_weights_load(t->Z, &t->T, dir, t->s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    zero_sync_working(t->Z, t->s);
    // saved by another number of ranks: this rank takes old rank 0's counters, scaler, schedule, data position and
    // RNG, and its optimizer partition re-cut from the old ranks' files (recut.h)
    int old_world = t->world;
    if (checkpoint_world_size(dir, &old_world, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s: %s", dir, err);
    char fn[64];
    checkpoint_state_filename(fn, sizeof fn, old_world == t->world ? t->rank : 0, old_world);
    char* p = t5_path_join(dir, fn);
    CheckpointState cs;
    if (checkpoint_state_open(&cs, p, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    TrainerCounters c;
    state_read_check(&cs, CKPT_TAG_TRAINER, &c, sizeof c);
    if ((size_t)c.flat_numel != t->n)
        t5_die(T5_EXIT_FAILURE, "resume: %s holds %lld parameters, this model has %zu (a different model?)", p,
               (long long)c.flat_numel, t->n);
    if (c.dtype != (int32_t)t->a->dtype)
        t5_die(T5_EXIT_USAGE, "resume: %s was saved by a %s run, this run is %s (use the same precision flag)", p,
               dtype_name((DType)c.dtype), dtype_name(t->a->dtype));
    static const char* const OPT_NAMES[] = {"AdamW", "Adafactor"};
    const TrainerOptimizer opt = t->a->optimizer;
    if (c.optimizer != (int32_t)opt)
        t5_die(T5_EXIT_USAGE,
               "resume: %s was saved by a run with the %s optimizer, this run uses %s (an optimizer's state cannot be "
               "carried over to another: resume with the checkpoint's optimizer, or start a new run from the "
               "checkpoint's weights with --model_name_or_path %s)",
               p, c.optimizer >= 0 && c.optimizer < 2 ? OPT_NAMES[c.optimizer] : "unknown",
               OPT_NAMES[opt], dir);
    size_t blob_floats = 2 * t->state_n;
    if (opt == TRAINER_OPTIM_ADAFACTOR) {
        TrainerAdafactorLayout lay;
        state_read_check(&cs, CKPT_TAG_ADAFACTOR_LAYOUT, &lay, sizeof lay);
        if (lay.version != 1 || (bool)lay.has_beta1 != t->a->adafactor.has_beta1 || lay.floats != (int64_t)t->ada_floats)
            t5_die(T5_EXIT_USAGE,
                   "resume: %s holds Adafactor state %s beta1 (%lld floats, layout version %d), this run's Adafactor %s "
                   "(%zu floats): resume with the same adafactor_beta1 (null or a value)",
                   p, lay.has_beta1 ? "with" : "without", (long long)lay.floats, (int)lay.version,
                   t->a->adafactor.has_beta1 ? "has beta1" : "has no beta1", t->ada_floats);
        blob_floats = t->ada_floats;
    }
    // the optimizer's blob streamed into the engine / the GPU state (no full host copy)
    const CheckpointBlobInfo* obi = checkpoint_state_find(&cs, CKPT_TAG_OPTIMIZER);
    if (old_world != t->world || (opt != TRAINER_OPTIM_ADAFACTOR && obi && (size_t)obi->nbytes != blob_floats * sizeof(float))) {
        load_opt_recut(t, dir, &cs, old_world, blob_floats);
    } else if (checkpoint_state_read_stream(&cs, opt == TRAINER_OPTIM_ADAFACTOR ? CKPT_TAG_ADAFACTOR : CKPT_TAG_OPTIMIZER,
                                     blob_floats * sizeof(float), (size_t)1 << 26, opt_state_consume, t, err,
                                     sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    LossScaler sc;
    state_read_check(&cs, CKPT_TAG_SCALER, &sc, sizeof sc);
    state_read_check(&cs, CKPT_TAG_SCHEDULER, &t->sch, sizeof t->sch);
    state_read_check(&cs, CKPT_TAG_DATA, &t->data_state, sizeof t->data_state);
    state_read_check(&cs, CKPT_TAG_RNG, &t->rng, sizeof t->rng);
    checkpoint_state_close(&cs);
    if (t->data_state.world_size != t->world &&
        (int64_t)t->data_state.world_size * t->data_state.batch_size != (int64_t)t->world * t->a->data.train_batch_size)
        t5_die(T5_EXIT_USAGE,
               "resume: %s was saved by %d ranks x micro-batch %d; this run is %d x %d: resuming on another number of GPUs "
               "keeps the global batch (set --per_device_train_batch_size %s, and the same gradient_accumulation_steps)",
               dir, t->data_state.world_size, t->data_state.batch_size, t->world, t->a->data.train_batch_size,
               (t->data_state.world_size * t->data_state.batch_size) % t->world == 0 ? "to the saved global batch / GPUs"
                                                                                   : "so that the global batch is the same");
    if ((t->data_state.world_size != t->world || t->data_state.batch_size != t->a->data.train_batch_size) &&
        dataloader_state_rescale(&t->data_state, t->rank, t->world, t->a->data.train_batch_size, err, sizeof err))
        t5_die(T5_EXIT_USAGE, "resume: %s saved by %d ranks x %d: %s", dir, old_world, t->data_state.batch_size, err);
    if (dataloader_state_restore(t->train_dl, &t->data_state, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    t->st = c;
    if (t->use_scaler) t->scaler = sc;
    free(p);
    p = t5_path_join(dir, "trainer_state.json");
    if (t5_is_file(p)) {
        trainer_state_free(&t->hf);
        trainer_state_init(&t->hf);
        if (trainer_state_load(&t->hf, p, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    }
    free(p);
    t->last_saved_step = c.global_step;
}

static void hf_log_entry(Trainer* t, json_t* e) {
    trainer_state_append_log(&t->hf, e);
    reporter_log(&t->rep, e);  // HF's callbacks' on_log
}

// --report_to writers (after a resume has loaded log_history) and the GPU's peak for the MFU, once
static void report_start(Trainer* t) {
    if (t->rep_started) return;
    t->rep_started = true;
    unsigned mask;
    static char e[1024];
    if (report_to_parse(t->a->report_to, &mask, e, sizeof e)) t5_die(T5_EXIT_FAILURE, "%s", e);
    if (!t->main) mask = 0;  // several ranks: rank 0's writers only
    if (reporter_open(&t->rep, mask, t->a->logging_dir, t->a->output_dir, t->hf.log_history, e, sizeof e))
        t5_die(T5_EXIT_FAILURE, "%s", e);
    struct cudaDeviceProp prop;
    int dev = 0;
    if ((t->a->dtype == DT_F16 || t->a->dtype == DT_BF16) && cudaGetDevice(&dev) == cudaSuccess &&
        cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        t->peak_flops = flops_device_peak_16bit(prop.name);
}

// After an evaluation: HF's EarlyStoppingCallback.on_evaluate, then _determine_best_metric (best_model.c); the
// checkpoint saved right after carries the best in its trainer_state.json.
static void note_best(Trainer* t, const json_t* m, int64_t step, bool* early_stop) {
    static char err[1024];
    int r = best_model_observe(&t->best, m, step, early_stop, err, sizeof err);
    if (r < 0) t5_die(T5_EXIT_USAGE, "%s", err);
    // several ranks: every rank evaluated the same split with the same weights; rank 0's verdicts are taken
    // everywhere all the same, so that no rank leaves the loop or keeps another best alone
    if (t->world > 1) {
        const int both = from_rank0(t, (r == 1 ? 1 : 0) | (*early_stop ? 2 : 0));
        if ((both & 1) && r != 1) {  // rank 0 saw a new best here: this step is the best
            t->best.has_best = true;
            t->best.best_step = step;
        }
        r = both & 1;
        *early_stop = (both & 2) != 0;
    }
    if (r == 1) {
        t->hf.has_best = true;
        t->hf.best_metric = t->best.best_metric;
        t->hf.best_global_step = step;
        snprintf(t->hf.best_model_checkpoint, sizeof t->hf.best_model_checkpoint, "%s/checkpoint-%lld",
                 t->a->output_dir, (long long)step);
    }
    if (*early_stop) {
        char line[512];
        snprintf(line, sizeof line, "Early stopping at step %lld: %s did not improve for %lld evaluations", (long long)step,
                 t->best.key, (long long)t->best.patience_counter);
        trainer_log_line(&t->log, line);
    }
}

static void write_dump(Trainer* t) {
    if (!t->dump) return;
    if (!t->main) {  // several ranks: rank 0 writes its own batches
        json_decref(t->dump);
        t->dump = NULL;
        return;
    }
    if (json_dump_file(t->dump, t->a->dump_batches, JSON_COMPACT) != 0)
        t5_die(T5_EXIT_FAILURE, "cannot write --dump_batches file %s", t->a->dump_batches);
    json_decref(t->dump);
    t->dump = NULL;
}

// One optimizer update: its micro-batches, the norm/overflow pass, the scaler and AdamW.
// Returns the mean loss of the micro-batches; *norm_out the unscaled global norm (NAN when skipped).
static double train_step(Trainer* t, int64_t n_micro, double* norm_out, bool* skipped, double* lr_out) {
    const TrainerArgs* a = t->a;
    const double t_step0 = trainer_log_now();
    float loss_scale = t->use_scaler ? (float)t->scaler.cur_scale : 1.0f;
    float grad_scale = loss_scale / (float)n_micro;
    json_t* dump_step = (t->dump && t->st.global_step < a->dump_batches_steps) ? json_array() : NULL;
    for (int64_t i = 0; i < n_micro; i++) {
        if (!dataloader_next_batch(t->train_dl, &t->batch))
            t5_die(T5_EXIT_FAILURE, "internal: the data loader ended inside an epoch");
        const Batch* b = &t->batch;
        if (dump_step) {
            json_t* o = json_object();
            json_object_set_new(o, "input_ids", json_matrix(b->input_ids, b->B, b->Ts));
            json_object_set_new(o, "attention_mask", json_matrix(b->attention_mask, b->B, b->Ts));
            json_object_set_new(o, "labels", json_matrix(b->labels, b->B, b->Tt));
            json_array_append_new(dump_step, o);
        }
        set_model_batch(t, b);
        zero_set_micro_step(t->Z, (int)i, (int)n_micro);
        zero_begin_grads(t->Z, t->s);
        // several ranks: each rank's dropout differs (its own stream of micro-batches); one rank: as before
        const uint64_t ctr = (uint64_t)t->rng.micro_counter * (uint64_t)t->world + (uint64_t)t->rank;
        uint64_t seed = splitmix64(a->seed ^ splitmix64(ctr));
        const bool prof = t->engine_opt && t->zero_profile;
        if (prof && i == 0) CUDA_CHECK(cudaEventRecord(t->prof_ev[0], t->s));
        t5_model_forward(t->M, true, grad_scale, seed, t->s);
        if (prof && i == n_micro - 1) CUDA_CHECK(cudaEventRecord(t->prof_ev[1], t->s));
        t5_model_backward(t->M, t->s);
        if (prof && i == n_micro - 1) CUDA_CHECK(cudaEventRecord(t->prof_ev[2], t->s));
        if (t->world > 1)
            CUDA_CHECK(cudaMemcpyAsync(t->d_losses + i, t5_model_loss_device(t->M), sizeof(float),
                                       cudaMemcpyDeviceToDevice, t->s));
        else
            CUDA_CHECK(cudaMemcpyAsync(t->h_loss + i, t5_model_loss_device(t->M), sizeof(float),
                                       cudaMemcpyDeviceToHost, t->s));
        if (t->d_acc) {
            // torch semantics in fp32: grad = g_0, then grad += g_i (each g_i complete for its micro-batch)
            if (i == 0) cast(t->d_acc, DT_F32, zero_flat_grad(t->Z), zero_grad_dtype(t->Z), t->n, t->s);
            else add_inplace(t->d_acc, zero_flat_grad(t->Z), zero_grad_dtype(t->Z), t->n, t->s);
        }
        t->rng.micro_counter++;
        t->st.tokens_seen += b->n_src_tokens + b->n_tgt_tokens;
        t->hf.total_flos += results_hf_floating_point_ops(&a->model, (int64_t)b->B * b->Ts);  // HF: per micro-batch
        t->win_model_flops += flops_t5_train_step(&a->model, b->B, b->Ts, b->Tt);           // the MFU's numerator
        t->st.samples_seen += b->B;
    }
    if (dump_step) json_array_append_new(t->dump, dump_step);
    if (t->engine_opt) {
        // stages 1-3: the engine accumulated the partitions and took their squared norm on the GPU
        zero_grad_norm(t->Z, t->d_norm2, t->d_overflow, t->s);
        if (t->zero_profile) CUDA_CHECK(cudaEventRecord(t->prof_ev[3], t->s));
        if (a->inject_inf_step > 0 && t->st.global_step + 1 == a->inject_inf_step)
            CUDA_CHECK(cudaMemsetAsync(t->d_overflow, 1, sizeof(int), t->s));
    } else {
        if (n_micro > 1 && !t->d_acc)
            t5_die(T5_EXIT_FAILURE, "internal: %lld micro-batches without an accumulation buffer", (long long)n_micro);
        // several ranks: the data-parallel gradient, the mean over the ranks (every rank then steps alike)
        zero_dp_allreduce_mean(t->Z, t->opt_grad, t->opt_grad_dtype, t->n, t->s);
        if (a->inject_inf_step > 0 && t->st.global_step + 1 == a->inject_inf_step)
            fill(t->opt_grad, t->opt_grad_dtype, 1, INFINITY, t->s);
        global_norm_compute(t->norm_plan, t->d_norm2, t->d_overflow, t->s);
    }
    if (t->world > 1) {  // the logged loss: the mean over the ranks (after the norm's wait for every reduction)
        comm_all_reduce_sum_f32(t->a->zero.comm, t->d_losses, (size_t)n_micro, t->s);
        CUDA_CHECK(cudaMemcpyAsync(t->h_loss, t->d_losses, (size_t)n_micro * sizeof(float), cudaMemcpyDeviceToHost,
                                   t->s));
    }
    global_norm_clip_scale(t->d_norm2, t->d_overflow, loss_scale, (float)a->clip, t->d_inv_scale, t->d_norm, t->s);
    CUDA_CHECK(cudaMemcpyAsync(t->h_norm2, t->d_norm2, sizeof(float), cudaMemcpyDeviceToHost, t->s));
    CUDA_CHECK(cudaMemcpyAsync(t->h_overflow, t->d_overflow, sizeof(int), cudaMemcpyDeviceToHost, t->s));
    CUDA_CHECK(cudaMemcpyAsync(t->h_inv_scale, t->d_inv_scale, sizeof(float), cudaMemcpyDeviceToHost, t->s));
    CUDA_CHECK(cudaStreamSynchronize(t->s));
    if (t->engine_opt && t->zero_profile) {
        // the step's breakdown (machine-readable): forward + backward + gradient offload up to the norm on the host
        // clock (this includes any wait for the previous step's CPU AdamW, whose time is reported beside it); the
        // same span on the compute stream's events: the forward of the last micro-batch (with the earlier
        // micro-batches when accumulating; it waits for each unit's new weights from the CPU AdamW and their H2D),
        // its backward (H2D of the units gathered again, gradients bucketed as they come), and the tail of the
        // gradients' D2H after the backward; copies so far
        ZeroStats zs;
        zero_stats(t->Z, &zs);
        float ms[3];
        for (int k = 0; k < 3; k++) CUDA_CHECK(cudaEventElapsedTime(&ms[k], t->prof_ev[k], t->prof_ev[k + 1]));
        printf("{\"zero_step\": %lld, \"fwd_bwd_s\": %.4f, \"fwd_s\": %.4f, \"bwd_s\": %.4f, \"grad_tail_s\": "
               "%.4f, \"prev_cpu_adam_s\": %.4f, \"h2d_gib\": %.3f, \"d2h_gib\": %.3f}\n",
               (long long)t->st.global_step + 1, trainer_log_now() - t_step0, ms[0] / 1e3, ms[1] / 1e3, ms[2] / 1e3,
               zs.cpu_adam_s, (zs.h2d_bytes - t->prof_h2d) / (1 << 30), (zs.d2h_bytes - t->prof_d2h) / (1 << 30));
        t->prof_h2d = zs.h2d_bytes;
        t->prof_d2h = zs.d2h_bytes;
    }
    double loss = 0;
    for (int64_t i = 0; i < n_micro; i++) loss += t->h_loss[i];
    loss /= (double)n_micro * (double)t->world;
    float norm = sqrtf(*t->h_norm2);
    bool overflow = *t->h_overflow != 0 || !isfinite(norm);
    *lr_out = lr_schedule_get(&t->sched, t->sch.applied_steps);
    *skipped = false;
    if (t->use_scaler) {
        LossScalerUpdate u = loss_scaler_update(&t->scaler, overflow);
        if (u.event == LOSS_SCALER_AT_MIN) t5_die(T5_EXIT_FAILURE, "%s", LOSS_SCALER_MIN_SCALE_MSG);
        char line[512];
        if (loss_scaler_format_overflow(line, sizeof line, &u, 0))
            trainer_log_overflow(&t->log, t->st.global_step + 1, line, u.new_scale);
    } else if (overflow) {
        t5_die_hint(T5_EXIT_FAILURE, "lower the learning rate, or check the data; the last checkpoint is intact",
                    "the gradient is not finite at step %lld (loss %g, %s): training diverged",
                    (long long)t->st.global_step + 1, loss, dtype_name(a->dtype));
    }
    if (overflow) {
        if (t->engine_opt) zero_optimizer_skip(t->Z, t->s);
        *skipped = true;
        t->st.skipped_steps++;
        *norm_out = NAN;
    } else {
        t->sch.applied_steps++;
        cpu_adam_begin_step(&t->sch.adam, t->sch.applied_steps, (float)a->beta1, (float)a->beta2);
        AdamWStepArgs sa = {.lr = (float)*lr_out, .beta1 = (float)a->beta1, .beta2 = (float)a->beta2,
                            .eps = (float)a->eps, .bias_correction1 = t->sch.adam.bias_correction1,
                            .bias_correction2 = t->sch.adam.bias_correction2, .adamw_mode = a->adamw_mode};
        if (t->engine_opt) {
            ZeroStepArgs za = {.lr = (float)*lr_out, .step = t->sch.applied_steps,
                               .bias_correction1 = t->sch.adam.bias_correction1,
                               .bias_correction2 = t->sch.adam.bias_correction2, .d_inv_scale = t->d_inv_scale,
                               .inv_scale = *t->h_inv_scale, .lr64 = *lr_out};
            zero_optimizer_step(t->Z, &za, t->s);
        } else if (a->optimizer == TRAINER_OPTIM_ADAFACTOR) {
            // transformers' Adafactor with HF's state["step"] = the applied updates (a skipped one does not count)
            const CpuAdafactorOpts* o = &a->adafactor;
            AdafactorStepArgs fa = {.step = t->sch.applied_steps, .lr = *lr_out, .eps1 = o->eps1, .eps2 = o->eps2,
                                    .clip_threshold = o->clip_threshold, .decay_rate = o->decay_rate,
                                    .has_beta1 = o->has_beta1, .beta1 = o->beta1,
                                    .scale_parameter = o->scale_parameter, .relative_step = o->relative_step,
                                    .warmup_init = o->warmup_init};
            adafactor_step(t->ada_plan, &fa, t->d_inv_scale, NULL, t->s);
        } else {
            adamw_step(t->adam_plan, &sa, t->d_inv_scale, NULL, t->s);
        }
        *norm_out = (double)norm / (double)loss_scale;
    }
    t->st.global_step++;
    return loss;
}

// The lr logged with Adafactor's relative_step, as HF's AdafactorSchedule: tensor 0's _get_lr at the last applied
// step (with scale_parameter: what its step used, read back from the GPU plan or the engine, which waits for that
// step; without: the relative step itself), 0 before any applied step. Asked only when a line is logged, so
// the steps in between do not wait for the optimizer; a skipped step changes neither input.
static double adafactor_logged_lr(Trainer* t) {
    const CpuAdafactorOpts* o = &t->a->adafactor;
    if (t->sch.applied_steps == 0) return 0.0;
    if (!o->scale_parameter) {
        const AdafactorStepArgs fa = {.step = t->sch.applied_steps, .relative_step = true, .warmup_init = o->warmup_init};
        return adafactor_rel_step(&fa);
    }
    if (t->engine_opt) return (double)zero_adafactor_last_lr(t->Z, 0);
    CUDA_CHECK(cudaMemcpyAsync(t->h_ada0, adafactor_plan_scalars(t->ada_plan), sizeof(AdafactorScalars),
                               cudaMemcpyDeviceToHost, t->s));
    CUDA_CHECK(cudaStreamSynchronize(t->s));
    return t->h_ada0->lr;
}

static void write_final(Trainer* t, json_t* train_metrics, json_t* eval_metrics, json_t* predict_metrics) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    if (train_metrics) save_weights(t, a->output_dir, "the final model");
    if (!t->writer) return;  // several ranks: rank 0 (save_on_each_node: each node's local rank 0) writes the files
    if (train_metrics) {
        copy_tokenizer_files(a, a->output_dir);
        char line[4200];
        snprintf(line, sizeof line, "Saving model checkpoint to %s", a->output_dir);
        trainer_log_line(&t->log, line);
        results_log_metrics(stdout, "train", train_metrics);
        if (results_save_metrics(a->output_dir, "train", train_metrics, true, err, sizeof err)) t5_warn("%s", err);
        char* p = t5_path_join(a->output_dir, "trainer_state.json");
        t->hf.global_step = t->st.global_step;
        if (trainer_state_save(&t->hf, p, err, sizeof err)) t5_warn("%s", err);
        free(p);
    }
    if (eval_metrics) {
        results_log_metrics(stdout, "eval", eval_metrics);
        if (results_save_metrics(a->output_dir, "eval", eval_metrics, true, err, sizeof err)) t5_warn("%s", err);
    }
    if (predict_metrics) {
        results_log_metrics(stdout, "predict", predict_metrics);
        if (results_save_metrics(a->output_dir, "predict", predict_metrics, true, err, sizeof err))
            t5_warn("%s", err);
    }
}

int trainer_run(const TrainerArgs* a) {
    static Trainer tr;
    Trainer* t = &tr;
    memset(t, 0, sizeof *t);
    t->a = a;
    t->last_saved_step = -1;
    t->world = T5_MAX(a->zero.world, 1);
    t->rank = a->zero.rank;
    t->main = t->rank == 0;
    t->writer = a->save_on_each_node && a->zero.comm ? comm_local_rank(a->zero.comm) == 0 : t->main;
    static char err[TRAINER_ERR_LEN];
    trainer_log_init(&t->log, stdout, a->output_dir, t->rank);
    trainer_state_init(&t->hf);

    const double t_data0 = process_age_s();
    data_setup(t);
    t->t_data = process_age_s();
    t->t_start0 = t_data0;
    model_setup(t);
    {
        char line[256];
        snprintf(line, sizeof line,
                 "start-up (s after process start): data ready %.1f, engine ready %.1f, weights ready %.1f, model "
                 "ready %.1f",
                 t->t_data, t->t_engine, t->t_weights, process_age_s());
        trainer_log_line(&t->log, line);
    }

    t->use_scaler = a->dtype == DT_F16;
    if (t->use_scaler && loss_scaler_init(&t->scaler, &a->scaler, err, sizeof err))
        t5_die(T5_EXIT_USAGE, "deepspeed.fp16: %s", err);

    json_t* train_metrics = NULL;
    json_t* eval_metrics = NULL;
    if (a->do_train) {
        const int64_t gas = T5_MAX(a->gradient_accumulation_steps, (int64_t)1);
        t->nb = dataloader_num_batches(t->train_dl);
        t->upe = trainer_updates_per_epoch(t->nb, gas);
        t->total_steps = trainer_total_steps(a->max_steps, a->num_train_epochs, t->upe);
        int64_t num_epochs = trainer_num_epochs(a->max_steps, a->num_train_epochs, t->upe);

        LRScheduleType type;
        if (lr_schedule_type_from_name(a->sched_name, &type))
            t5_die(T5_EXIT_FAILURE, "not implemented yet: lr scheduler %s", a->sched_name);
        LRScheduleParams sp;
        lr_schedule_params_default(&sp, type);
        sp.lr = a->lr;
        sp.num_training_steps = t->total_steps;
        sp.num_warmup_steps = hf_get_warmup_steps(a->warmup_steps, a->warmup_ratio, t->total_steps);
        if (type == LR_SCHED_DS_WARMUP_LR || type == LR_SCHED_DS_WARMUP_DECAY_LR) {
            sp.warmup_min_lr = a->ds_warmup_min_lr;
            sp.warmup_max_lr = a->ds_warmup_max_lr;
            sp.warmup_num_steps = a->ds_warmup_num_steps >= 0 ? a->ds_warmup_num_steps : sp.num_warmup_steps;
            sp.warmup_type = a->ds_warmup_type ? LR_WARMUP_LINEAR : LR_WARMUP_LOG;
            if (a->ds_total_num_steps > 0) sp.num_training_steps = a->ds_total_num_steps;
        }
        if (lr_schedule_init(&t->sched, type, &sp, err, sizeof err)) t5_die(T5_EXIT_USAGE, "lr schedule: %s", err);

        t->st.flat_numel = (int64_t)t->n;
        t->st.dtype = (int32_t)a->dtype;
        t->rng.seed = a->seed;
        if (t->writer) checkpoint_remove_stale(a->output_dir, stderr);
        comm_barrier_on(t->a->zero.comm, t->s);  // several ranks: nothing is read before rank 0 settled the leftovers
        if (a->resume_from_checkpoint[0]) {
            char* dir = checkpoint_resolve_resume(a->resume_from_checkpoint, a->output_dir, stderr, err, sizeof err);
            if (!dir) t5_die(T5_EXIT_FAILURE, "%s", err);
            printf("Resuming from %s\n", dir);
            // several ranks (save_on_each_node: each node resolves "last" in its own folder): the same step everywhere
            const int64_t rs = checkpoint_parse_name(strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir);
            if (t->world > 1 && from_rank0(t, (int)rs) != (int)rs)
                t5_die(T5_EXIT_FAILURE, "resume: rank %d resolved %s, rank 0 another checkpoint (each node must hold the "
                                        "same checkpoints)", t->rank, dir);
            load_checkpoint(t, dir);
            free(dir);
        }
        if (best_model_init(&t->best, a->metric_for_best_model, a->greater_is_better, a->early_stopping_patience,
                            a->early_stopping_threshold, err, sizeof err))
            t5_die(T5_EXIT_USAGE, "%s", err);
        if (t->hf.has_best) {  // resumed: the best so far, from the checkpoint's trainer_state.json (as HF's state)
            t->best.has_best = true;
            t->best.best_metric = t->hf.best_metric;
            t->best.best_step = t->hf.best_global_step;
        }
        t->hf.max_steps = t->total_steps;
        t->hf.logging_steps = a->logging_steps;
        t->hf.eval_steps = a->eval_steps;
        t->hf.save_steps = a->save_steps;
        t->hf.train_batch_size = a->data.train_batch_size;
        t->hf.num_train_epochs = num_epochs;
        if (a->dump_batches[0]) t->dump = json_array();

        report_start(t);
        TrainHeader th = {.num_examples = dataset_size(t->train_ds), .num_epochs = num_epochs,
                          .per_device_batch_size = a->data.train_batch_size,
                          .total_batch_size = a->data.train_batch_size * gas * t->world,
                          .gradient_accumulation_steps = gas, .max_steps = t->total_steps,
                          .num_trainable_params = (int64_t)t5_config_num_params(&a->model)};
        trainer_log_header(stdout, &th);
        int64_t epoch = t->data_state.magic ? t->data_state.epoch : 0;
        int64_t bie = t->data_state.magic ? t->data_state.batch_in_epoch : 0;
        if (a->resume_from_checkpoint[0])
            trainer_log_resume(stdout, epoch, t->st.global_step, CEIL_DIV(bie, gas));

        signals_install();
        double t_start = trainer_log_now();
        progress_init(&t->log.bar, stdout, t->total_steps, t->st.global_step, t_start, 0);
        t->log.bar_on = true;
        double win_t0 = t_start;
        int64_t win_tokens = 0, win_samples = 0, win_steps_timed = 0;
        bool stopped = false;
        while (t->st.global_step < t->total_steps) {
            if (bie >= t->nb) {
                epoch++;
                bie = 0;
                dataloader_set_epoch(t->train_dl, epoch);
            }
            int64_t n_micro = T5_MIN(gas, t->nb - bie);
            int64_t tok0 = t->st.tokens_seen, smp0 = t->st.samples_seen;
            double norm, lr;
            bool skipped;
            double loss = train_step(t, n_micro, &norm, &skipped, &lr);
            if (t->first_step_s == 0) {
                CUDA_CHECK(cudaStreamSynchronize(t->s));
                t->first_step_s = process_age_s();
                char line[256];
                snprintf(line, sizeof line, "time to first step: %.1f s after process start (host RSS peak %.2f GiB)",
                         t->first_step_s, (double)host_mem_peak_rss() / (1 << 30));
                trainer_log_line(&t->log, line);
            }
            bie += n_micro;
            win_tokens += t->st.tokens_seen - tok0;
            win_samples += t->st.samples_seen - smp0;
            win_steps_timed++;
            t->st.total_loss_sum += loss;
            t->st.win_loss_sum += loss;
            t->st.win_steps++;
            const int64_t step = t->st.global_step;
            const double epoch_f = (double)epoch + (double)bie / (double)t->nb;
            t->hf.epoch = epoch_f;
            t->hf.global_step = step;  // log_history entries carry it (HF's state.global_step)
            t->hf.num_input_tokens_seen = t->st.tokens_seen;
            if (t->dump && step >= a->dump_batches_steps) write_dump(t);
            double now = trainer_log_now();
            progress_update(&t->log.bar, step, now);

            bool epoch_end = bie >= t->nb;
            bool do_log = trainer_step_due(a->logging_strategy, step, a->logging_steps) ||
                          (a->logging_first_step && step == 1) ||
                          (a->logging_strategy == TRAINER_INTERVAL_EPOCH && epoch_end);
            if (do_log) {
                if (a->optimizer == TRAINER_OPTIM_ADAFACTOR && a->adafactor.relative_step) lr = adafactor_logged_lr(t);
                double dt = now - win_t0;
                StepLog sl = {.step = step, .max_steps = t->total_steps, .epoch = epoch_f,
                              .loss = t->st.win_loss_sum / (double)t->st.win_steps, .grad_norm = norm, .lr = lr,
                              .loss_scale = t->use_scaler ? t->scaler.cur_scale : 0, .skipped = t->st.skipped_steps,
                              .step_ms = 1000.0 * dt / (double)T5_MAX(win_steps_timed, (int64_t)1),
                              // several ranks: every rank takes the same rows per step (rank 0's tokens x W: an
                              // estimate); the MFU stays per GPU
                              .tokens_per_s = dt > 0 ? (double)win_tokens * t->world / dt : 0,
                              .samples_per_s = dt > 0 ? (double)win_samples * t->world / dt : 0,
                              .gpu_mem_alloc_gib = gpu_mem_used_gib(t), .gpu_mem_peak_gib = t->peak_mem_gib,
                              .rss_gib = (double)trainer_log_host_rss() / (1024.0 * 1024 * 1024),
                              .model_flops_per_s = dt > 0 ? t->win_model_flops / dt : 0,
                              .mfu = dt > 0 && t->peak_flops > 0 ? t->win_model_flops / dt / t->peak_flops : 0};
                t->win_model_flops = 0;
                trainer_log_step(&t->log, &sl);
                json_t* e = json_object();
                results_set_real(e, "loss", py_round(sl.loss, 4));
                if (!isnan(norm)) results_set_real(e, "grad_norm", norm);
                results_set_real(e, "learning_rate", lr);
                results_set_real(e, "epoch", epoch_f);
                hf_log_entry(t, e);
                t->st.win_loss_sum = 0;
                t->st.win_steps = 0;
                t->st.last_logged_step = step;
                win_t0 = trainer_log_now();
                win_tokens = win_samples = win_steps_timed = 0;
            }
            bool do_eval = t->eval_dl && (trainer_step_due(a->eval_strategy, step, a->eval_steps) ||
                                          (a->eval_strategy == TRAINER_INTERVAL_EPOCH && epoch_end));
            double pause0 = trainer_log_now();  // eval and save time is kept out of the step timing
            bool early_stop = false;
            if (do_eval) {
                json_t* m = run_eval(t, epoch_f);
                hf_log_entry(t, json_deep_copy(m));
                note_best(t, m, step, &early_stop);
                json_decref(m);
            }
            bool stop_now = signals_stop_requested() || (a->stop_after_steps > 0 && step >= a->stop_after_steps);
            // several ranks: a signal may reach the ranks at different steps; every rank stops after the same one
            if (t->world > 1) stop_now = !comm_agree(t->a->zero.comm, !stop_now, t->s);
            if (signals_stop_requested()) {
                char msg[256];
                signals_format_stop_message(msg, sizeof msg, signals_stop_signal(), step);
                trainer_log_line(&t->log, msg);
            }
            bool do_save = trainer_step_due(a->save_strategy, step, a->save_steps) ||
                           (a->save_strategy == TRAINER_INTERVAL_EPOCH && epoch_end) ||
                           (a->save_strategy != TRAINER_INTERVAL_NO && step >= t->total_steps) || stop_now;
            if (do_save) save_checkpoint(t);
            win_t0 += trainer_log_now() - pause0;
            if (stop_now) {
                stopped = true;
                break;
            }
            if (early_stop) break;  // HF: control.should_training_stop, after this step's save
        }
        progress_close(&t->log.bar, trainer_log_now());
        t->log.bar_on = false;
        if (t->engine_opt) {
            zero_optimizer_wait(t->Z);
            ZeroStats zs;
            zero_stats(t->Z, &zs);
            char line[640], staged[96] = "";
            // pageable host buffers (pin_memory false): the bytes copied through the engine's pinned staging ring
            if (zs.staged_bytes > 0)
                snprintf(staged, sizeof staged, " (%.2f GiB through the pinned staging ring)",
                         zs.staged_bytes / (1 << 30));
            snprintf(line, sizeof line,
                     "ZeRO engine: %lld gathers (%lld prefetched), %lld releases, trace mismatches %lld, gradient "
                     "order mismatches %lld; H2D %.2f GiB, "
                     "D2H %.2f GiB%s; last CPU AdamW %.3f s; unit buffers %.2f GiB gathered + %.2f GiB gradients; "
                     "stream-ordered pool high water %.2f GiB used, %.2f GiB reserved",
                     (long long)zs.gathers, (long long)zs.prefetches, (long long)zs.releases,
                     (long long)zs.trace_mismatches, (long long)zs.grad_order_mismatches, zs.h2d_bytes / (1 << 30), zs.d2h_bytes / (1 << 30), staged,
                     zs.cpu_adam_s, (double)zs.unit_buf_gathered / (1 << 30), (double)zs.unit_buf_grads / (1 << 30),
                     (double)zs.pool_used_high / (1 << 30), (double)zs.pool_reserved_high / (1 << 30));
            trainer_log_line(&t->log, line);
        }
        int stop_sig = signals_stop_signal();
        signals_uninstall();
        write_dump(t);
        if (stopped) {
            const char* why = stop_sig ? signals_name(stop_sig) : "T5TRAIN_STOP_AFTER_STEPS";
            printf("t5train: received %s: stopped after step %lld/%lld and saved %s/checkpoint-%lld; resume with "
                   "--resume_from_checkpoint last\n",
                   why, (long long)t->st.global_step, (long long)t->total_steps, a->output_dir,
                   (long long)t->st.global_step);
            fflush(stdout);
            trainer_log_free(&t->log);
            reporter_close(&t->rep);
            trainer_state_free(&t->hf);
            return T5_EXIT_OK;
        }
        double runtime = trainer_log_now() - t_start;
        printf("\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n\n");
        if (a->load_best_model_at_end && t->hf.has_best) {
            // HF _load_best_model: the best checkpoint's weights, before the final save and the final evaluation
            char score[64];
            py_float_repr(score, sizeof score, t->hf.best_metric);
            printf("Loading best model from %s (score: %s).\n", t->hf.best_model_checkpoint, score);
            fflush(stdout);
            zero_optimizer_wait(t->Z);
            if (t5_weights_load(t->Z, &t->T, t->hf.best_model_checkpoint, t->s, err, sizeof err))
                t5_die(T5_EXIT_FAILURE, "loading the best model: %s", err);
            zero_sync_working(t->Z, t->s);
        }
        // HF train(): with save_total_limit 1 and a best checkpoint, every other checkpoint goes at the end
        if (a->save_total_limit == 1 && t->best.has_best && t->writer &&
            checkpoint_keep_only(a->output_dir, t->best.best_step, stdout, err, sizeof err) < 0)
            t5_warn("%s", err);
        train_metrics = json_object();
        results_set_real(train_metrics, "epoch", t->hf.epoch);
        results_set_real(train_metrics, "train_loss",
                         t->st.global_step ? t->st.total_loss_sum / (double)t->st.global_step : NAN);
        results_train_speed_metrics(train_metrics, runtime, a->max_steps, a->num_train_epochs, dataset_size(t->train_ds),
                                    a->data.train_batch_size * gas * t->world, t->total_steps);  // HF's counts
        results_set_int(train_metrics, "train_samples", dataset_size(t->train_ds));
        results_set_real(train_metrics, "total_flos", t->hf.total_flos);
        json_t* e = json_deep_copy(train_metrics);
        json_object_del(e, "train_samples");
        hf_log_entry(t, e);
    }
    if (a->do_eval) {
        report_start(t);
        eval_metrics = run_eval(t, t->hf.epoch);
        json_t* e = json_deep_copy(eval_metrics);  // HF's evaluate() logs it (after trainer_state.json is saved)
        json_object_set_new(e, "step", json_integer(t->st.global_step));
        reporter_log(&t->rep, e);
        json_decref(e);
        results_set_int(eval_metrics, "eval_samples", dataset_size(t->eval_ds));
    }
    json_t* predict_metrics = NULL;
    if (a->do_predict) {
        predict_metrics = run_eval_split(t, t->pred_ds, t->pred_dl, "predict", t->hf.epoch, true);
        results_set_int(predict_metrics, "predict_samples", dataset_size(t->pred_ds));
    }
    write_final(t, train_metrics, eval_metrics, predict_metrics);
    json_decref(train_metrics);
    json_decref(eval_metrics);
    json_decref(predict_metrics);
    trainer_log_free(&t->log);
    reporter_close(&t->rep);
    trainer_state_free(&t->hf);
    // process exit releases the GPU; the handles are not reused
    return T5_EXIT_OK;
}
