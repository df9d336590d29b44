/*
 * trainer.c: the training loop over the ZeRO engine (src/zero/engine.h), which owns the parameters, the optimizer,
 * gradient accumulation, clipping and the loss scaler at every stage. See trainer.h for the step semantics, the
 * checkpoint layout and the resume / signal contract.
 *
 * Sections: pure loop arithmetic | checkpoint blobs (src/train/checkpoint.h holds the directory protocol) | the run
 * (setup, eval, step, loop, end). Signals: src/base/signals.h.
 */
#include "trainer.h"
#include "../launch/comm.h"

#include <cuda_runtime.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/check.h"
#include "../../data/dataloader.h"
#include "../../data/tokenizer.h"
#include "../../model/params.h"
#include "../../model/t5.h"
#include "../../model/t5_weights.h"
#include "checkpoint.h"
#include "trainer_push.h"
#include "best_model.h"
#include "../base/common.h"
#include "lr_schedule.h"
#include "../report/results.h"
#include "../eval/evaluate.h"
#include "../eval/shard.h"
#include "../base/safetensors.h"
#include "../base/signals.h"
#include "../report/trainer_log.h"
#include "../report/report_to.h"
#include "../report/flops.h"
#include "../zero/engine.h"
#include "../zero/host_mem.h"

#define TRAINER_ERR_LEN 8192

// ----------------------------------------------------------------------------
// pure loop arithmetic

void trainer_args_default(TrainerArgs* a) {
    memset(a, 0, sizeof *a);
    data_options_default(&a->data);
    generate_options_default(&a->gen);
    a->eval_sort_by_length = true;  // the eval_sort_by_length key's default
    a->dtype = DT_F32;
    loss_scaler_config_default(&a->scaler);
    zero_options_default(&a->zero);  // the engine's plan: DeepSpeed's defaults (AdamW betas 0.9, 0.999, eps 1e-8: HF's)
    a->gradient_accumulation_steps = 1;
    a->max_steps = -1;
    a->num_train_epochs = 3;
    a->lr = 5e-5;
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

int64_t trainer_interval_steps(double v, int64_t total_steps) {
    return v < 1 ? (int64_t)ceil((double)total_steps * v) : (int64_t)v;
}

bool trainer_step_due(TrainerInterval strategy, int64_t step, int64_t interval) {
    return strategy == TRAINER_INTERVAL_STEPS && interval > 0 && step > 0 && step % interval == 0;
}

int trainer_resume_counts_check(int64_t global_step, int64_t skipped_steps, int64_t applied_steps, char* err,
                                size_t errlen) {
    if (global_step < 0 || skipped_steps < 0 || skipped_steps > global_step) {
        snprintf(err, errlen, "the trainer's counters are impossible (global_step %lld, skipped %lld)",
                 (long long)global_step, (long long)skipped_steps);
        return -1;
    }
    if (global_step - skipped_steps != applied_steps) {
        snprintf(err, errlen,
                 "the trainer's counters say %lld updates were applied (global_step %lld - skipped %lld) but the "
                 "optimizer state has %lld: its files come from different points of a run (start from an intact "
                 "checkpoint)",
                 (long long)(global_step - skipped_steps), (long long)global_step, (long long)skipped_steps,
                 (long long)applied_steps);
        return -1;
    }
    return 0;
}


// ----------------------------------------------------------------------------
// what a checkpoint carries besides the weights (src/train/checkpoint.h blobs in t5train_state.bin; the engine's
// blobs, optimizer state, scaler and scheduler, come under the names it gives them: src/zero/engine_state.c)

#define CKPT_TAG_TRAINER "trainer"

// blob "trainer": the loop's counters
typedef struct {
    int64_t flat_numel;          // parameters in the engine's flat layout (EngineStats.numel)
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
    Engine* E;                   // the ZeRO engine: parameters, optimizer, accumulation, clipping, loss scaler
    T5Model* M;
    size_t n;                    // parameters in the engine's flat layout (the checkpoint's "trainer" blob checks it)
    float* h_loss;               // pinned (gas) micro-batch losses
    double loss_scale;           // the loss scaler's scale after the last update (0 without one), for the log
    double t_start0, t_data, t_engine, t_weights;  // start-up milestones (s after process start)
    double t_train0;             // the training loop's start (trainer_log_now), for train_runtime
    double prof_h2d, prof_d2h;   // engine copy counters at the last profile line
    cudaEvent_t prof_ev[4];      // T5TRAIN_ZERO_PROFILE: forward start, forward end, backward end, gradients handed on
    cudaEvent_t* wcb_ev;         // wall_clock_breakdown: per micro-batch i, [4i..4i+3] forward start, forward end,
                                 // backward end, gradients handed on; then the norm's end and the step's end
    FlopsProfiler* fprof;        // DeepSpeed's flops_profiler (rank 0, when enabled); fprof_now: this update is profiled
    bool fprof_now;
    CommsLogger* comms;          // DeepSpeed's comms_logger (when enabled): the collectives' timings
    bool zero_profile;           // T5TRAIN_ZERO_PROFILE=1 at stages 1-3: one JSON line per step with the engine's breakdown
    double first_step_s;         // seconds from process start to the end of the first step (0: not yet)
    LRSchedule sched;
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
    TrainerRngState rng;
    DataLoaderState data_state;  // position restored from a checkpoint (magic 0: fresh run)
    int64_t total_steps, upe, nb;
    int64_t logging_steps, eval_steps, save_steps;  // the args' (ratios turned into steps: trainer_interval_steps)
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
    TrainerPush push;            // --push_to_hub at saves, in the background (rank 0; trainer_push.h)
    // several ranks (a->zero.world > 1): rank 0 logs and writes the run's files (HF's main process); every rank
    // writes its own optimizer state; the logged loss is the mean over the ranks
    int rank, world;
    LaunchComm* comm;            // several ranks: the run's communicator (src/launch/comm.h); NULL or one rank: none
    bool main;                   // rank 0: logs and reports
    bool writer;                 // writes the run's shared files: rank 0, or with save_on_each_node the local rank 0
                                 // of every node (HF's should_save; nodes without a shared file system)
    float* d_losses;             // (gas) several ranks: the micro-batch losses, all-reduced
    int64_t step_input_tokens;   // include_num_input_tokens_seen: this rank's count in the current update
    int64_t input_tokens0;       // hf.num_input_tokens_seen when this session's training began (HF's initial count)
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

// The engine's plan: the run's zero_optimization knobs and optimizer (src/cli filled them) with the dtypes and the
// accumulation steps, clipping, the fp16 loss scaler; the optimizer's state too when training
static EngineOptions engine_options(const Trainer* t) {
    const TrainerArgs* a = t->a;
    ZeroOptions zo = a->zero;
    zo.working_dtype = a->dtype;
    zo.grad_dtype = a->grad_dtype;
    zo.accum_dtype = a->grad_dtype;
    zo.grad_accum_steps = (int)T5_MAX(a->gradient_accumulation_steps, (int64_t)1);
    EngineOptions eo = {.zero = zo, .T = &t->T, .clip = a->clip, .use_scaler = a->dtype == DT_F16,
                        .scaler = a->scaler, .train = a->do_train, .profile = t->zero_profile};
    if (a->do_train && a->zenflow) {  // micro-steps per epoch: the trainer's updates per epoch (accumulation 1)
        eo.zenflow = true;
        eo.zenflow_opts = a->zenflow_opts;
        eo.zenflow_steps_per_epoch = t->train_dl ? trainer_updates_per_epoch(dataloader_num_batches(t->train_dl), 1) : 0;
    }
    return eo;
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
    t->zero_profile = a->zero.stage > 0 && getenv("T5TRAIN_ZERO_PROFILE") && atoi(getenv("T5TRAIN_ZERO_PROFILE")) > 0;
    const EngineOptions eo = engine_options(t);
    const int rc = engine_create(&t->E, &eo, err, sizeof err);
    if (rc == T5_EXIT_USAGE) t5_die(rc, "%s", err);
    if (rc) die_alloc(a, err);
    EngineStats es;
    engine_stats(t->E, false, t->s, &es);
    t->n = es.numel;
    if (t->world > 1) CUDA_CHECK(cudaMalloc((void**)&t->d_losses, T5_MAX(a->gradient_accumulation_steps, 1) * sizeof(float)));
    if (t->zero_profile)
        for (int k = 0; k < 4; k++) CUDA_CHECK(cudaEventCreate(&t->prof_ev[k]));
    if (a->wall_clock_breakdown) {
        const int64_t nev = 4 * T5_MAX(a->gradient_accumulation_steps, (int64_t)1) + 2;
        t->wcb_ev = (cudaEvent_t*)malloc_check((size_t)nev * sizeof(cudaEvent_t));
        for (int64_t k = 0; k < nev; k++) CUDA_CHECK(cudaEventCreate(&t->wcb_ev[k]));
    }
    t->fprof = flops_profiler_create(&a->flops_profiler, &a->model, a->dtype, a->tf32, t->world, t->rank);
    t->t_engine = process_age_s();
    if (engine_load_weights(t->E, a->init_random ? NULL : a->weights_path, a->seed, t->s, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "%s", err);
    t->t_weights = process_age_s();

    // the largest batch this run feeds the model: training's, and evaluation's only when it evaluates
    int maxB = (int)T5_MAX(a->do_train ? a->data.train_batch_size : 1,
                           (a->do_eval || a->do_predict) ? a->data.eval_batch_size : 1);
    int maxTs = 0, maxTt = 0;
    activation_lengths(t, &maxTs, &maxTt);
    T5ModelOptions mo = {.max_B = maxB, .max_Ts = maxTs, .max_Tt = maxTt,
                         .dtype = a->dtype, .dropout_rate = a->dropout_rate,
                         .label_smoothing = (float)a->label_smoothing_factor,
                         .gradient_checkpointing = a->gradient_checkpointing,
                         .forward_only = !a->do_train};  // evaluation only: no backward runs (one block's acts)
    t->M = t5_model_create(&t->T, engine_params(t->E), &mo, err, sizeof err);
    if (!t->M) die_alloc(a, err);
    t5_model_set_train(t->M, true);

    if (!a->do_train) return;
    CUDA_CHECK(cudaMallocHost((void**)&t->h_loss, (size_t)T5_MAX(a->gradient_accumulation_steps, 1) * sizeof(float)));
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
    // several ranks: training is sharded (a->data's rank and world size); evaluation and prediction read one GPU's
    // batches (a loader of one rank) and take their share of them (src/eval/shard.h, run_eval_split)
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

// Where a loss pass's time went (the line run_eval_split prints): this rank's forwards, its wait in the all-gather,
// and the slowest and fastest rank's forwards.
typedef struct {
    double forward_s, gather_s, forward_min_s, forward_max_s;
    double first_s;  // this rank's first step alone (waited for): what the first use of the kernels costs
} LossPassTimes;

// The loss pass over a split, sharded over the ranks (src/eval/shard.h): this rank's batches of one GPU's batching
// (dl: one rank's loader), dealt by cost (several ranks; one rank: input order), its per-step mean losses
// all-gathered, and the mean reduced as one GPU does (HF
// evaluation_loop: each batch's mean loss weighted by its number of examples, in batch order). A padding step runs
// the split's last batch and drops its loss: every rank runs the same forwards, so the same ZeRO-3 gathers.
// Each step's loss is copied on the stream into a device array and read back once at the end, so the host builds
// batch k + 1 (the loader; set_model_batch's checks up to its first wait) while the GPU runs forward k.
// *steps: the steps every rank ran (HF's eval steps on N GPUs: ceil(examples / (batch x N))).
// Each of one GPU's batches' cost for the dealing: rows x (longest source + longest target), each capped by its
// max length (the collator's padded widths, pad_to_multiple_of aside); with pad_to_max_length all equal.
static void loss_pass_costs(const Dataset* ds, const EvalShard* sh, const DataOptions* o, int64_t* cost) {
    // the evaluation loader's caps (data/dataloader.c: val_max_target_length when set, else max_target_length)
    const int cap_s = o->max_source_length,
              cap_t = o->val_max_target_length > 0 ? o->val_max_target_length : o->max_target_length;
    for (int64_t i = 0; i < sh->n_batches; i++) {
        int64_t first, count;
        eval_shard_examples(sh, i, &first, &count);
        int ws = 0, wt = 0;
        for (int64_t e = first; e < first + count; e++) {
            const int32_t *src, *tgt;
            int ns, nt;
            dataset_get(ds, e, &src, &ns, &tgt, &nt);
            ws = T5_MAX(ws, T5_MIN(ns, cap_s));
            wt = T5_MAX(wt, T5_MIN(nt, cap_t));
        }
        if (o->pad_to_max_length) ws = cap_s, wt = cap_t;
        cost[i] = count * (int64_t)(ws + wt);
    }
}

static double eval_loss_sharded(Trainer* t, const Dataset* ds, DataLoader* dl, int64_t nex, int64_t* steps,
                                LossPassTimes* tm) {
    EvalShard sh;
    eval_shard_plan(&sh, nex, t->a->data.eval_batch_size, t->world);
    // the batches dealt to the ranks by cost (src/eval/shard.h): the ranks' shares of the work even, each batch one
    // GPU's, the loss summed in input order
    int64_t* cost = malloc_check((size_t)T5_MAX(sh.n_batches, (int64_t)1) * sizeof(int64_t));
    int64_t* at = malloc_check((size_t)T5_MAX(sh.steps * sh.world, (int64_t)1) * sizeof(int64_t));
    loss_pass_costs(ds, &sh, &t->a->data, cost);
    if (eval_shard_deal_by_cost(&sh, cost, at)) t5_die(T5_EXIT_FAILURE, "out of memory dealing %lld evaluation batches",
                                                       (long long)sh.n_batches);
    free(cost);
    const size_t ns = (size_t)T5_MAX(sh.steps, (int64_t)1);
    float* mine = calloc_check(ns, sizeof(float));
    float* all = calloc_check((size_t)T5_MAX(sh.steps * sh.world, (int64_t)1), sizeof(float));
    float* d_step_loss = NULL;  // (steps) each step's mean loss, on the device until the pass ends
    CUDA_CHECK(cudaMalloc((void**)&d_step_loss, ns * sizeof(float)));
    const double t0 = trainer_log_now();
    for (int64_t k = 0; k < sh.steps; k++) {
        const int64_t i = at[(int64_t)t->rank * sh.steps + k], b = i >= 0 ? i : sh.n_batches - 1;
        int64_t first, count;
        eval_shard_examples(&sh, b, &first, &count);
        if (dataloader_seek(dl, b) || !dataloader_next_batch(dl, &t->batch) || t->batch.B != count ||
            t->batch.example_index[0] != first)
            t5_die(T5_EXIT_FAILURE, "internal: the evaluation data loader did not give batch %lld", (long long)b);
        set_model_batch(t, &t->batch);  // waits for forward k - 1 before it overwrites the batch on the device
        t5_model_forward(t->M, false, 1.0f, 0, t->s);
        CUDA_CHECK(cudaMemcpyAsync(d_step_loss + k, t5_model_loss_device(t->M), sizeof(float), cudaMemcpyDeviceToDevice,
                                   t->s));
        if (k == 0) {  // the first step alone (one wait): lazy module loads and first-use set-ups land here
            CUDA_CHECK(cudaStreamSynchronize(t->s));
            tm->first_s = trainer_log_now() - t0;
        }
    }
    if (sh.steps > 0)
        CUDA_CHECK(cudaMemcpyAsync(mine, d_step_loss, (size_t)sh.steps * sizeof(float), cudaMemcpyDeviceToHost, t->s));
    CUDA_CHECK(cudaStreamSynchronize(t->s));
    CUDA_CHECK(cudaFree(d_step_loss));
    for (int64_t k = 0; k < sh.steps; k++)
        if (at[(int64_t)t->rank * sh.steps + k] < 0) mine[k] = 0.0f;  // a padding step's loss is dropped
    const double t1 = trainer_log_now();
    comm_all_gather_host_f32(sh.world > 1 ? t->comm : NULL, mine, (size_t)sh.steps, all, t->s);
    const double t2 = trainer_log_now();
    const double loss = eval_shard_loss_at(&sh, at, all);
    tm->forward_s = tm->forward_min_s = tm->forward_max_s = t1 - t0;
    tm->gather_s = t2 - t1;
    if (sh.world > 1) {  // every rank's forward time, for the line (one float each)
        float f = (float)(t1 - t0), *fs = calloc_check((size_t)sh.world, sizeof(float));
        comm_all_gather_host_f32(t->comm, &f, 1, fs, t->s);
        for (int r = 0; r < sh.world; r++) {
            tm->forward_min_s = r ? T5_MIN(tm->forward_min_s, (double)fs[r]) : fs[r];
            tm->forward_max_s = r ? T5_MAX(tm->forward_max_s, (double)fs[r]) : fs[r];
        }
        free(fs);
    }
    free(mine);
    free(all);
    free(at);
    *steps = sh.steps;
    return loss;
}

// Loss over a whole split (eval_loss_sharded), then, with predict_with_generate, generation + corpus BLEU as
// run_translation's compute_metrics (src/eval/evaluate_generate.c, sharded alike when the parameters allow it).
// prefix "eval" or "predict"; with keep the predictions are written to output_dir/generated_predictions.txt (by
// rank 0). Returns the metrics object (new reference).
static json_t* run_eval_split(Trainer* t, Dataset* ds, DataLoader* dl, const char* prefix, double epoch, bool keep) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    double t0 = trainer_log_now();
    int64_t nex = dataset_size(ds);
    trainer_log_eval_header(stdout, nex, a->data.eval_batch_size);
    t5_model_set_train(t->M, false);
    // stage 3: keep every unit gathered for the whole evaluation when it fits (the evaluation's unit order is
    // not training's); otherwise each forward fetches on demand
    const bool held = engine_eval_begin(t->E, t->s);
    int64_t nbatches = 0;
    const double t_loss = trainer_log_now();
    LossPassTimes lt = {0};
    const double loss = eval_loss_sharded(t, ds, dl, nex, &nbatches, &lt);
    // where the runtime goes (stage 3's gather of the held units before it; generation's share below): info lines
    if (t->main && t5_log_info()) {
        printf("%s loss pass (this rank): %.3f s, %lld steps over %lld examples on %d rank(s) (forwards %.3f s, the "
               "first step %.3f s; all-gather %.3f s; the ranks' forwards %.3f-%.3f s); %.3f s before it\n",
               prefix, trainer_log_now() - t_loss, (long long)nbatches, (long long)nex, t->world, lt.forward_s,
               lt.first_s, lt.gather_s, lt.forward_min_s, lt.forward_max_s, t_loss - t0);
        fflush(stdout);
    }
    char key[64];
    snprintf(key, sizeof key, "%s_loss", prefix);
    json_t* m = json_object();
    results_set_real(m, key, loss);
    const char* keys[3] = {key, NULL, NULL};
    double vals[3] = {loss, 0, 0};
    int nkeys = 1;
    char kb[64], kg[64];
    if (a->predict_with_generate) {
        // sharded over the ranks: freely when no fetch issues a collective (held: stages 0-2 always, their units
        // refreshed by the loss pass; stage 3 when every unit fits), otherwise (ZeRO-3 gathering on demand) in
        // lockstep: every rank steps until no rank has a row left, so that the ranks' gathers stay in step
        EvalGenConfig gc = {.gen = a->gen, .prefix = prefix, .keep_predictions = keep, .progress = false,
                            .no_cuda_graphs = !held, .comm = t->comm, .shard = held, .lockstep = !held,
                            .sort_by_length = a->eval_sort_by_length};
        EvalGenResult r;
        if (evaluate_generate(engine_params(t->E), &t->T, t->tok, ds, &a->data, &gc, t->s, &r, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "%s generation: %s", prefix, err);
        evaluate_add_metrics(m, &r);
        if (t->main && r.sorted) {  // how much padding the sorted batches saved (test_gpu_multi_eval reads this line)
            char line[256];
            evaluate_sort_line(&r, line, sizeof line);
            printf("%s\n", line);
            fflush(stdout);
        }
        if (t->main && t5_log_info()) {  // where the runtime went
            char line[512];
            evaluate_time_line(&r, line, sizeof line);
            printf("%s\n", line);
            fflush(stdout);
        }
        if (t->main && t->world > 1 && t5_log_info()) {  // how the ranks shared it (test_gpu_multi_eval reads it)
            char line[1024];
            evaluate_shard_line(&r, line, sizeof line);
            printf("%s\n", line);
            fflush(stdout);
        }
        char ks[64];  // <prefix>_samples: run_translation adds it to the results files only, never to the logged dict
        snprintf(ks, sizeof ks, "%s_samples", prefix);
        json_object_del(m, ks);
        // every rank holds the predictions; run_translation writes them on the world's process zero only
        if (keep && t->main && evaluate_write_predictions(a->output_dir, &r, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "%s", err);
        snprintf(kb, sizeof kb, "%s_bleu", prefix);
        snprintf(kg, sizeof kg, "%s_gen_len", prefix);
        keys[nkeys] = kb, vals[nkeys++] = r.bleu;
        keys[nkeys] = kg, vals[nkeys++] = r.gen_len;
        evaluate_result_free(&r);
    }
    engine_eval_end(t->E, held, t->s);
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

// Several ranks: rank 0's value of a host decision on every rank (a collective; one rank: v itself)
static int from_rank0(Trainer* t, int v) { return comm_from_rank0(t->comm, v, t->s); }

// A save that failed (a full disk, ...) stops the run. The complete checkpoints stay as they are (a new checkpoint
// is complete only once its .tmp- folder is renamed: tmp_dir, removed here to give the space back); the message
// names the newest one to resume from.
static void die_save_failed(Trainer* t, const char* what, const char* tmp_dir, const char* err) {
    if (tmp_dir && t->writer) checkpoint_remove_tree(tmp_dir);
    char kept[4400] = "no complete checkpoint of this run is in output_dir";
    char* last = t->last_saved_step >= 0 ? checkpoint_dir_path(t->a->output_dir, t->last_saved_step) : NULL;
    if (last && t5_path_exists(last))  // (a resume from a checkpoint in another folder: none here)
        snprintf(kept, sizeof kept, "the last complete checkpoint, %s, is kept (--resume_from_checkpoint last resumes "
                 "from it)", last);
    free(last);
    t5_die(T5_EXIT_FAILURE, "saving %s: %s; %s", what, err, kept);
}

// The model's weights as model.safetensors (+ config.json) in dtype into dir: rank 0 writes; with several ranks at
// stages 1-3 every rank first joins the gather of the fp32 masters. tmp_dir: a checkpoint's folder being written.
static void save_weights(Trainer* t, const char* dir, const char* what, DType dtype, const char* tmp_dir) {
    static char err[TRAINER_ERR_LEN];
    if (engine_save_weights(t->E, dir, t->writer, dtype, t->s, err, sizeof err)) die_save_failed(t, what, tmp_dir, err);
}

// the engine's blobs into this rank's state file under their names (EngineStateSink over a CheckpointStateWriter)
static int sink_begin(void* ctx, const char* name, char* err, size_t errlen) {
    return checkpoint_state_blob_begin(ctx, name, err, errlen);
}
static int sink_write(void* ctx, const void* data, size_t n, char* err, size_t errlen) {
    return checkpoint_state_blob_write(ctx, data, n, err, errlen);
}
static int sink_end(void* ctx, char* err, size_t errlen) { return checkpoint_state_blob_end(ctx, err, errlen); }

// HF's _push_from_checkpoint, in the background (trainer_push.h): a failed push is a warning, the run goes on
static void push_after_save(Trainer* t, const char* ckpt_dir) {
    char msg[128];
    if (t->a->save_strategy == TRAINER_INTERVAL_EPOCH)
        snprintf(msg, sizeof msg, "Training in progress, epoch %d", (int)t->hf.epoch);
    else
        snprintf(msg, sizeof msg, "Training in progress, step %lld", (long long)t->st.global_step);
    trainer_push_after_save(&t->push, &t->log, t->a->output_dir, ckpt_dir, msg);
}

// save_total_limit: the oldest complete checkpoints go, never the one just saved (step), the best, nor the one a
// background push still reads (it goes at a later rotation: trainer_push.h)
static void rotate_checkpoints(Trainer* t, int64_t step) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    if (a->save_total_limit <= 0 || !t->writer) return;
    const int64_t spare = t->main ? trainer_push_spared_step(&t->push) : -1;
    if (checkpoint_rotate_sparing(a->output_dir, (int)a->save_total_limit, step,
                                  t->best.has_best ? t->best.best_step : -1, spare, stdout, err, sizeof err) < 0)
        t5_warn("%s", err);
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
    save_weights(t, w.tmp_dir, what, DT_F32, w.tmp_dir);  // resume needs the fp32 master
    if (t->writer) {
        copy_tokenizer_files(a, w.tmp_dir);
        char* p = t5_path_join(w.tmp_dir, "trainer_state.json");
        t->hf.global_step = step;
        if (trainer_state_save(&t->hf, p, err, sizeof err)) die_save_failed(t, what, w.tmp_dir, err);
        free(p);
    }
    CUDA_CHECK(cudaStreamSynchronize(t->s));
    DataLoaderState ds;
    dataloader_state_save(t->train_dl, &ds);
    t->st.flat_numel = (int64_t)t->n;
    t->st.dtype = (int32_t)a->dtype;
    t->st.optimizer = (int32_t)a->optimizer;
    CheckpointStateWriter* sw = checkpoint_state_create(w.tmp_dir, step, t->rank, t->world, err, sizeof err);
    // the engine's blobs (optimizer, scaler, scheduler) between the trainer's counters and the data position
    const EngineStateSink sink = {.ctx = sw, .begin = sink_begin, .write = sink_write, .end = sink_end};
    bool ok = sw && checkpoint_state_add(sw, CKPT_TAG_TRAINER, &t->st, sizeof t->st, err, sizeof err) == 0 &&
              engine_state_save(t->E, &sink, err, sizeof err) == 0;
    if (!ok || checkpoint_state_add(sw, CKPT_TAG_DATA, &ds, sizeof ds, err, sizeof err) ||
        checkpoint_state_add(sw, CKPT_TAG_RNG, &t->rng, sizeof t->rng, err, sizeof err) ||
        checkpoint_state_finish(sw, err, sizeof err))
        die_save_failed(t, what, w.tmp_dir, err);
    // several ranks: every rank's files are written before rank 0 completes the checkpoint, and it is in place
    // before any rank goes on (a resume never sees half of it)
    comm_barrier_on(t->comm, t->s);
    // (a commit that failed after its marker leaves a complete leftover that a resume uses: not removed)
    if (t->writer && checkpoint_commit(&w, err, sizeof err)) die_save_failed(t, what, NULL, err);
    comm_barrier_on(t->comm, t->s);
    char line[4200];
    snprintf(line, sizeof line, "Saving model checkpoint to %s (%.1f s)", w.final_dir, trainer_log_now() - t0);
    trainer_log_line(&t->log, line);
    t->last_saved_step = step;
    rotate_checkpoints(t, step);
    // --push_to_hub with hub_strategy every_save / checkpoint / all_checkpoints (not the save a stop request makes)
    if (a->push.enabled && t->main && !signals_stop_requested()) push_after_save(t, w.final_dir);
    checkpoint_writer_free(&w);
}

static void state_read_check(CheckpointState* cs, const char* tag, void* dst, size_t n) {
    static char err[TRAINER_ERR_LEN];
    if (checkpoint_state_read(cs, tag, dst, n, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s", err);
}

// the checkpoint the engine reads its blobs from (EngineStateSource): this rank's file, open; another old rank's
// file is opened for the read (a re-cut)
typedef struct {
    const char* dir;
    int old_world;
    int rank;                    // the old rank of cs
    CheckpointState* cs;
} ResumeFiles;

static int64_t source_size(void* ctx, const char* name) {
    ResumeFiles* f = ctx;
    const CheckpointBlobInfo* bi = checkpoint_state_find(f->cs, name);
    return bi ? bi->nbytes : -1;
}

static int source_read(void* ctx, int r, const char* name, size_t nbytes,
                       int (*consume)(void* cctx, const void* data, size_t off, size_t n), void* cctx, char* err,
                       size_t errlen) {
    ResumeFiles* f = ctx;
    if (r == f->rank)
        return checkpoint_state_read_stream(f->cs, name, nbytes, (size_t)1 << 26, consume, cctx, err, errlen);
    char fn[64];
    checkpoint_state_filename(fn, sizeof fn, r, f->old_world);
    char* p = t5_path_join(f->dir, fn);
    CheckpointState cs;
    if (checkpoint_state_open(&cs, p, err, errlen)) t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    const int rc = checkpoint_state_read_stream(&cs, name, nbytes, (size_t)1 << 26, consume, cctx, err, errlen);
    checkpoint_state_close(&cs);
    free(p);
    return rc;
}

static void load_checkpoint(Trainer* t, const char* dir) {
    static char err[TRAINER_ERR_LEN];
    if (engine_load_weights(t->E, dir, 0, t->s, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    // saved by another number of ranks: this rank takes old rank 0's counters, scaler, schedule, data position and
    // RNG, and its optimizer partition re-cut from the old ranks' files (src/zero/recut.h)
    int old_world = t->world;
    if (checkpoint_world_size(dir, &old_world, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "resume: %s: %s", dir, err);
    char fn[64];
    const int file_rank = old_world == t->world ? t->rank : 0;
    checkpoint_state_filename(fn, sizeof fn, file_rank, old_world);
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
    // the engine's blobs: optimizer state (streamed, no full host copy; re-cut from the old ranks' files when they
    // were another number), loss scaler, Adam's step state
    ResumeFiles rf = {.dir = dir, .old_world = old_world, .rank = file_rank, .cs = &cs};
    const EngineStateSource src = {.ctx = &rf, .old_world = old_world, .rank = file_rank, .dir = dir, .path = p,
                                   .size = source_size, .read = source_read};
    engine_state_load(t->E, &src);
    EngineStats es;
    engine_stats(t->E, false, t->s, &es);
    if (trainer_resume_counts_check(c.global_step, c.skipped_steps, es.applied_steps, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s: %s", dir, err);
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

// include_num_input_tokens_seen: the update's count, summed over the ranks (HF gathers it), into HF's state (saved in
// trainer_state.json, so a resume continues it); off, the state keeps HF's 0
static void count_input_tokens(Trainer* t) {
    if (!t->a->num_input_tokens) return;
    int64_t n = t->step_input_tokens;
    t->step_input_tokens = 0;
    if (t->world > 1) n = comm_host_i32(t->comm, (int)n, ncclSum, t->s);  // one update's tokens: far below 2^31
    t->hf.num_input_tokens_seen += n;
}

static void hf_log_entry(Trainer* t, json_t* e) {
    // HF's Trainer.log adds num_input_tokens_seen to every entry while it is tracked
    if (t->a->num_input_tokens && !json_object_get(e, "num_input_tokens_seen"))
        results_set_int(e, "num_input_tokens_seen", t->hf.num_input_tokens_seen);
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

// One micro-batch of an update: the batch, forward with dlogits scaled by the engine's grad_scale, backward, its loss
// to the host (several ranks: to d_losses, all-reduced after the norm), the counters.
static void micro_batch(Trainer* t, int64_t i, int64_t n_micro, json_t* dump_step) {
    const TrainerArgs* a = t->a;
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
    const float grad_scale = engine_micro_begin(t->E, (int)i, (int)n_micro, t->s);
    // several ranks: each rank's dropout differs (its own stream of micro-batches); one rank: as before
    const uint64_t ctr = (uint64_t)t->rng.micro_counter * (uint64_t)t->world + (uint64_t)t->rank;
    uint64_t seed = splitmix64(a->seed ^ splitmix64(ctr));
    const bool prof = t->zero_profile;
    cudaEvent_t* wcb = t->wcb_ev ? t->wcb_ev + 4 * i : NULL;
    if (prof && i == 0) CUDA_CHECK(cudaEventRecord(t->prof_ev[0], t->s));
    if (wcb) CUDA_CHECK(cudaEventRecord(wcb[0], t->s));
    const bool fp = t->fprof_now && i == 0;
    if (fp) flops_profiler_forward_begin(t->fprof, t->M, b->B, b->Ts, b->Tt, t->s);
    t5_model_forward(t->M, true, grad_scale, seed, t->s);
    if (fp) flops_profiler_forward_end(t->fprof, t->M);
    if (prof && i == n_micro - 1) CUDA_CHECK(cudaEventRecord(t->prof_ev[1], t->s));
    if (wcb) CUDA_CHECK(cudaEventRecord(wcb[1], t->s));
    t5_model_backward(t->M, t->s);
    if (prof && i == n_micro - 1) CUDA_CHECK(cudaEventRecord(t->prof_ev[2], t->s));
    if (wcb) CUDA_CHECK(cudaEventRecord(wcb[2], t->s));
    if (t->world > 1)
        CUDA_CHECK(cudaMemcpyAsync(t->d_losses + i, t5_model_loss_device(t->M), sizeof(float),
                                   cudaMemcpyDeviceToDevice, t->s));
    else
        CUDA_CHECK(cudaMemcpyAsync(t->h_loss + i, t5_model_loss_device(t->M), sizeof(float), cudaMemcpyDeviceToHost,
                                   t->s));
    engine_micro_end(t->E, (int)i, t->s);
    if (wcb) CUDA_CHECK(cudaEventRecord(wcb[3], t->s));
    if (fp) flops_profiler_backward_end(t->fprof, t->s);
    t->rng.micro_counter++;
    t->st.tokens_seen += b->n_src_tokens + b->n_tgt_tokens;
    // HF's include_num_input_tokens_seen: input_ids.numel() (padding included) or attention_mask.sum()
    if (a->num_input_tokens) t->step_input_tokens += a->num_input_tokens == 1 ? (int64_t)b->B * b->Ts : b->n_src_tokens;
    t->hf.total_flos += results_hf_floating_point_ops(&a->model, (int64_t)b->B * b->Ts);  // HF: per micro-batch
    t->win_model_flops += flops_t5_train_step(&a->model, b->B, b->Ts, b->Tt);           // the MFU's numerator
    t->st.samples_seen += b->B;
}

// T5TRAIN_ZERO_PROFILE (stages 1-3): the step's breakdown (machine-readable): forward + backward + gradient offload up
// to the norm on the host clock (this includes any wait for the previous step's CPU AdamW, whose time is reported
// beside it); the same span on the compute stream's events: the forward of the last micro-batch (with the earlier
// micro-batches when accumulating; it waits for each unit's new weights from the CPU AdamW and their H2D), its
// backward (H2D of the units gathered again, gradients bucketed as they come), and the tail of the gradients' D2H
// after the backward; copies so far (the engine's counters when the norm reached the host)
static void print_profile(Trainer* t, double t_step0, const EngineStepResult* r) {
    float ms[3];
    for (int k = 0; k < 3; k++) CUDA_CHECK(cudaEventElapsedTime(&ms[k], t->prof_ev[k], t->prof_ev[k + 1]));
    printf("{\"zero_step\": %lld, \"fwd_bwd_s\": %.4f, \"fwd_s\": %.4f, \"bwd_s\": %.4f, \"grad_tail_s\": "
           "%.4f, \"prev_cpu_adam_s\": %.4f, \"h2d_gib\": %.3f, \"d2h_gib\": %.3f}\n",
           (long long)t->st.global_step + 1, r->synced_s - t_step0, ms[0] / 1e3, ms[1] / 1e3, ms[2] / 1e3,
           r->cpu_optimizer_s, (r->h2d_bytes - t->prof_h2d) / (1 << 30), (r->d2h_bytes - t->prof_d2h) / (1 << 30));
    t->prof_h2d = r->h2d_bytes;
    t->prof_d2h = r->d2h_bytes;
}

// DeepSpeed's wall_clock_breakdown lines for the update just stepped (the events of micro_batch and train_step):
// fwd = the forward; bwd_inner = the backward; bwd_allreduce = handing the gradients to the engine (its reductions as
// far as the compute stream waits for them; the last micro-batch's includes the norm's wait for every reduction);
// bwd = both; step = the engine's step (clipping, scaler, optimizer, on the last micro-batch, as DeepSpeed's)
static void print_wall_clock(Trainer* t, int64_t n_micro) {
    cudaEvent_t* e = t->wcb_ev;
    CUDA_CHECK(cudaEventRecord(e[4 * n_micro + 1], t->s));
    CUDA_CHECK(cudaEventSynchronize(e[4 * n_micro + 1]));
    double sum[5] = {0, 0, 0, 0, 0};
    char line[512];
    for (int64_t i = 0; i < n_micro; i++) {
        float f, b, r, x = 0, st = 0;
        CUDA_CHECK(cudaEventElapsedTime(&f, e[4 * i], e[4 * i + 1]));
        CUDA_CHECK(cudaEventElapsedTime(&b, e[4 * i + 1], e[4 * i + 2]));
        CUDA_CHECK(cudaEventElapsedTime(&r, e[4 * i + 2], e[4 * i + 3]));
        if (i == n_micro - 1) {
            CUDA_CHECK(cudaEventElapsedTime(&x, e[4 * i + 3], e[4 * n_micro]));
            CUDA_CHECK(cudaEventElapsedTime(&st, e[4 * n_micro], e[4 * n_micro + 1]));
        }
        const double ms[5] = {f, (double)b + r + x, b, (double)r + x, st};
        for (int k = 0; k < 5; k++) sum[k] += ms[k];
        trainer_log_format_wall_clock(line, sizeof line, true, ms);
        trainer_log_print(&t->log, line);
    }
    trainer_log_format_wall_clock(line, sizeof line, false, sum);
    trainer_log_print(&t->log, line);
}

// One optimizer update: its micro-batches, the engine's norm, the loss mean, the engine's step (clipping, the loss
// scaler, the update or the overflow skip). Returns the mean loss of the micro-batches; *norm_out the unscaled global
// norm (NAN when skipped).
static double train_step(Trainer* t, int64_t n_micro, double* norm_out, bool* skipped) {
    const TrainerArgs* a = t->a;
    const double t_step0 = trainer_log_now();
    json_t* dump_step = (t->dump && t->st.global_step < a->dump_batches_steps) ? json_array() : NULL;
    t->fprof_now = flops_profiler_due(t->fprof, t->st.global_step);
    for (int64_t i = 0; i < n_micro; i++) micro_batch(t, i, n_micro, dump_step);
    if (dump_step) json_array_append_new(t->dump, dump_step);
    if (t->fprof_now) flops_profiler_step_begin(t->fprof, t->s);  // the norm is part of DeepSpeed's optimizer step
    engine_grad_norm(t->E, a->inject_inf_step > 0 && t->st.global_step + 1 == a->inject_inf_step, t->s);
    if (t->zero_profile) CUDA_CHECK(cudaEventRecord(t->prof_ev[3], t->s));
    if (t->wcb_ev) CUDA_CHECK(cudaEventRecord(t->wcb_ev[4 * n_micro], t->s));
    if (t->world > 1) {  // the logged loss: the mean over the ranks (after the norm's wait for every reduction)
        comm_all_reduce_sum_f32(t->comm, t->d_losses, (size_t)n_micro, t->s);
        CUDA_CHECK(cudaMemcpyAsync(t->h_loss, t->d_losses, (size_t)n_micro * sizeof(float), cudaMemcpyDeviceToHost,
                                   t->s));
    }
    // lr of this update = the schedule at the updates applied before it (every update not skipped)
    const double lr = lr_schedule_get(&t->sched, t->st.global_step - t->st.skipped_steps);
    const EngineStepResult r = engine_step(t->E, lr, t->s);
    if (t->fprof_now) {
        static char ferr[1024];
        if (flops_profiler_step_end(t->fprof, t->st.global_step, t->s, ferr, sizeof ferr)) t5_warn("%s", ferr);
        t->fprof_now = false;
    }
    if (t->zero_profile) print_profile(t, t_step0, &r);
    if (t->wcb_ev) print_wall_clock(t, n_micro);
    double loss = 0;
    for (int64_t i = 0; i < n_micro; i++) loss += t->h_loss[i];
    loss /= (double)n_micro * (double)t->world;
    if (r.diverged)
        t5_die_hint(T5_EXIT_FAILURE, "lower the learning rate, or check the data; the last checkpoint is intact",
                    "the gradient is not finite at step %lld (loss %g, %s): training diverged",
                    (long long)t->st.global_step + 1, loss, dtype_name(a->dtype));
    if (r.overflow_line[0]) trainer_log_overflow(&t->log, t->st.global_step + 1, r.overflow_line, r.loss_scale);
    t->loss_scale = r.loss_scale;
    *skipped = r.skipped;
    if (r.skipped) t->st.skipped_steps++;
    *norm_out = r.norm;
    t->st.global_step++;
    return loss;
}

static void write_final(Trainer* t, json_t* train_metrics, json_t* eval_metrics, json_t* predict_metrics) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    // the final model: fp32, or with DeepSpeed's stage3_gather_16bit_weights_on_model_save the run's 16-bit dtype
    const DType final_dt = a->save_16bit_model && a->dtype != DT_F32 ? a->dtype : DT_F32;
    if (train_metrics) save_weights(t, a->output_dir, "the final model", final_dt, NULL);
    if (!t->writer) return;  // several ranks: rank 0 (save_on_each_node: each node's local rank 0) writes the files
    if (train_metrics) {
        copy_tokenizer_files(a, a->output_dir);
        char line[4200];
        snprintf(line, sizeof line, "Saving model checkpoint to %s", a->output_dir);
        trainer_log_line(&t->log, line);
        snprintf(line, sizeof line, "the model's weights are %s%s", dtype_name(final_dt),
                 final_dt != DT_F32 ? " (stage3_gather_16bit_weights_on_model_save)" : "");
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

// run_translation's last act: trainer.create_model_card(**kwargs), or trainer.push_to_hub(**kwargs), which writes the
// same card before its upload. HF's state then holds the final evaluate()'s entry after what trainer_state.json saved
// (its save_state came before the evaluation), so the entry joins the log history only now. Rank 0 only (HF's
// is_world_process_zero); a failure is a warning, every other file stays. eval_log is stolen.
static void write_model_card(Trainer* t, json_t* eval_log) {
    if (eval_log) json_array_append_new(t->hf.log_history, eval_log);
    if (!t->main) return;
    static char err[TRAINER_ERR_LEN];
    t5_mkdir_p(t->a->output_dir);  // an evaluation-only run may not have made it (the write then says why)
    if (model_card_write(&t->a->card, t->hf.log_history, t->a->output_dir, err, sizeof err)) t5_warn("%s", err);
}

// ----------------------------------------------------------------------------
// trainer_run, step by step

// The run's ranks, logs and HF state; data, the engine, weights and the model; the start-up line.
static void run_setup(Trainer* t, const TrainerArgs* a) {
    t->a = a;
    t->last_saved_step = -1;
    t->world = T5_MAX(a->zero.world, 1);
    t->rank = a->zero.rank;
    t->comm = a->zero.comm;
    t->main = t->rank == 0;
    t->writer = a->save_on_each_node && t->comm ? comm_local_rank(t->comm) == 0 : t->main;
    t->push.args = &a->push;
    trainer_log_init(&t->log, stdout, a->output_dir, t->rank);
    trainer_state_init(&t->hf);
    t->comms = comms_logger_start(&a->comms_logger, t->world, &t->log);  // before the engine's first collectives
    const double t_data0 = process_age_s();
    data_setup(t);
    t->t_data = process_age_s();
    t->t_start0 = t_data0;
    model_setup(t);
    char line[256];
    snprintf(line, sizeof line,
             "start-up (s after process start): data ready %.1f, engine ready %.1f, weights ready %.1f, model "
             "ready %.1f",
             t->t_data, t->t_engine, t->t_weights, process_age_s());
    trainer_log_line(&t->log, line);
}

// The LR schedule over the run's total_steps (HF's names, or DeepSpeed's WarmupLR / WarmupDecayLR).
static void schedule_setup(Trainer* t) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
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
}

// Leftover checkpoint folders settled (rank 0), then --resume_from_checkpoint: the same checkpoint on every rank.
static void resume_setup(Trainer* t) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    t->st.flat_numel = (int64_t)t->n;
    t->st.dtype = (int32_t)a->dtype;
    t->rng.seed = a->seed;
    if (t->writer) checkpoint_remove_stale(a->output_dir, stderr);
    comm_barrier_on(t->comm, t->s);  // several ranks: nothing is read before rank 0 settled the leftovers
    if (!a->resume_from_checkpoint[0]) return;
    char* dir = checkpoint_resolve_resume(a->resume_from_checkpoint, a->output_dir, stderr, err, sizeof err);
    if (!dir) t5_die(T5_EXIT_FAILURE, "%s", err);
    if (t5_log_info()) printf("Resuming from %s\n", dir);
    // several ranks (save_on_each_node: each node resolves "last" in its own folder): the same step everywhere
    const int64_t rs = checkpoint_parse_name(strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir);
    if (t->world > 1 && from_rank0(t, (int)rs) != (int)rs)
        t5_die(T5_EXIT_FAILURE, "resume: rank %d resolved %s, rank 0 another checkpoint (each node must hold the "
                                "same checkpoints)", t->rank, dir);
    load_checkpoint(t, dir);
    free(dir);
}

// Everything before the first update: schedule, resume, best-model state, HF's state fields, reporters, the header.
static void train_setup(Trainer* t, int64_t gas) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    t->nb = dataloader_num_batches(t->train_dl);
    t->upe = trainer_updates_per_epoch(t->nb, gas);
    t->total_steps = trainer_total_steps(a->max_steps, a->num_train_epochs, t->upe);
    const int64_t num_epochs = trainer_num_epochs(a->max_steps, a->num_train_epochs, t->upe);
    schedule_setup(t);
    resume_setup(t);
    if (best_model_init(&t->best, a->metric_for_best_model, a->greater_is_better, a->early_stopping_patience,
                        a->early_stopping_threshold, err, sizeof err))
        t5_die(T5_EXIT_USAGE, "%s", err);
    if (t->hf.has_best) {  // resumed: the best so far, from the checkpoint's trainer_state.json (as HF's state)
        t->best.has_best = true;
        t->best.best_metric = t->hf.best_metric;
        t->best.best_step = t->hf.best_global_step;
    }
    t->hf.max_steps = t->total_steps;
    t->hf.logging_steps = t->logging_steps = trainer_interval_steps(a->logging_steps, t->total_steps);
    t->hf.eval_steps = t->eval_steps = trainer_interval_steps(a->eval_steps, t->total_steps);
    t->hf.save_steps = t->save_steps = trainer_interval_steps(a->save_steps, t->total_steps);
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
}

// The logging window: what the next step line averages over
typedef struct {
    double t0;
    int64_t tokens, samples, steps_timed;
} LogWindow;

// The step line and HF's log entry of update `step` (the window's mean loss, its speed), then a new window.
static void log_update(Trainer* t, LogWindow* w, int64_t step, double epoch_f, double norm, double now) {
    EngineStats es;
    engine_stats(t->E, false, t->s, &es);
    const double lr = es.lr;  // the last update's (Adafactor's relative_step: what it used)
    double dt = now - w->t0;
    StepLog sl = {.step = step, .max_steps = t->total_steps, .epoch = epoch_f,
                  .loss = t->st.win_loss_sum / (double)t->st.win_steps, .grad_norm = norm, .lr = lr,
                  .loss_scale = t->loss_scale, .skipped = t->st.skipped_steps,
                  .step_ms = 1000.0 * dt / (double)T5_MAX(w->steps_timed, (int64_t)1),
                  // several ranks: every rank takes the same rows per step (rank 0's tokens x W: an
                  // estimate); the MFU stays per GPU
                  .tokens_per_s = dt > 0 ? (double)w->tokens * t->world / dt : 0,
                  .samples_per_s = dt > 0 ? (double)w->samples * t->world / dt : 0,
                  .gpu_mem_alloc_gib = gpu_mem_used_gib(t), .gpu_mem_peak_gib = t->peak_mem_gib,
                  .rss_gib = (double)trainer_log_host_rss() / (1024.0 * 1024 * 1024),
                  .model_flops_per_s = dt > 0 ? t->win_model_flops / dt : 0,
                  .mfu = dt > 0 && t->peak_flops > 0 ? t->win_model_flops / dt / t->peak_flops : 0,
                  .tokens_seen_on = t->a->num_input_tokens != 0,
                  .num_input_tokens_seen = t->hf.num_input_tokens_seen};
    t->win_model_flops = 0;
    trainer_log_step(&t->log, &sl);
    json_t* e = json_object();
    results_set_real(e, "loss", py_round(sl.loss, 4));
    if (!isnan(norm)) results_set_real(e, "grad_norm", norm);
    results_set_real(e, "learning_rate", lr);
    results_set_real(e, "epoch", epoch_f);
    if (t->a->num_input_tokens) {  // HF's log(logs, start_time): the count, then speed_metrics("train", ..., num_tokens)
        const int64_t seen = t->hf.num_input_tokens_seen;
        const double rt = now - t->t_train0;
        results_set_int(e, "num_input_tokens_seen", seen);
        results_set_real(e, "train_runtime", py_round(rt, 4));
        if (rt > 0) results_set_real(e, "train_tokens_per_second", py_round((double)(seen - t->input_tokens0) / rt, 3));
    }
    hf_log_entry(t, e);
    t->st.win_loss_sum = 0;
    t->st.win_steps = 0;
    t->st.last_logged_step = step;
    w->t0 = trainer_log_now();
    w->tokens = w->samples = w->steps_timed = 0;
}

// After update `step`: evaluation, the stop request, the checkpoint. Returns true when training ends here (*stopped:
// by a signal or T5TRAIN_STOP_AFTER_STEPS; else early stopping).
static bool after_update(Trainer* t, int64_t step, double epoch_f, bool epoch_end, bool* stopped) {
    const TrainerArgs* a = t->a;
    bool do_eval = t->eval_dl && (trainer_step_due(a->eval_strategy, step, t->eval_steps) ||
                                  (a->eval_strategy == TRAINER_INTERVAL_EPOCH && epoch_end));
    bool early_stop = false;
    if (do_eval) {
        json_t* m = run_eval(t, epoch_f);
        hf_log_entry(t, json_deep_copy(m));
        note_best(t, m, step, &early_stop);
        json_decref(m);
    }
    if (t->main) trainer_push_poll(&t->push, &t->log);  // a background push that ended: its lines or its warning
    bool stop_now = signals_stop_requested() || (a->stop_after_steps > 0 && step >= a->stop_after_steps);
    // several ranks: a signal may reach the ranks at different steps; every rank stops after the same one
    if (t->world > 1) stop_now = !comm_agree(t->comm, !stop_now, t->s);
    if (signals_stop_requested()) {
        char msg[256];
        signals_format_stop_message(msg, sizeof msg, signals_stop_signal(), step);
        trainer_log_line(&t->log, msg);
    }
    bool do_save = trainer_step_due(a->save_strategy, step, t->save_steps) ||
                   (a->save_strategy == TRAINER_INTERVAL_EPOCH && epoch_end) ||
                   (a->save_strategy != TRAINER_INTERVAL_NO && step >= t->total_steps) || stop_now;
    if (do_save) save_checkpoint(t);
    *stopped = stop_now;
    return stop_now || early_stop;  // early stop: HF's control.should_training_stop, after this step's save
}

// The updates from the resumed position to total_steps. Returns true when a stop request ended them.
static bool train_loop(Trainer* t, int64_t gas) {
    const TrainerArgs* a = t->a;
    int64_t epoch = t->data_state.magic ? t->data_state.epoch : 0;
    int64_t bie = t->data_state.magic ? t->data_state.batch_in_epoch : 0;
    if (a->resume_from_checkpoint[0]) trainer_log_resume(stdout, epoch, t->st.global_step, CEIL_DIV(bie, gas));
    signals_install();
    t->t_train0 = trainer_log_now();
    t->input_tokens0 = t->hf.num_input_tokens_seen;
    progress_init(&t->log.bar, stdout, t->total_steps, t->st.global_step, t->t_train0, 0);
    t->log.bar_on = true;
    LogWindow w = {.t0 = t->t_train0};
    bool stopped = false;
    while (t->st.global_step < t->total_steps) {
        if (bie >= t->nb) {
            epoch++;
            bie = 0;
            dataloader_set_epoch(t->train_dl, epoch);
        }
        int64_t n_micro = T5_MIN(gas, t->nb - bie);
        int64_t tok0 = t->st.tokens_seen, smp0 = t->st.samples_seen;
        double norm;
        bool skipped;
        double loss = train_step(t, n_micro, &norm, &skipped);
        comms_logger_poll(t->comms);  // the timings already complete, no wait
        if (t->first_step_s == 0) {
            CUDA_CHECK(cudaStreamSynchronize(t->s));
            t->first_step_s = process_age_s();
            char line[256];
            snprintf(line, sizeof line, "time to first step: %.1f s after process start (host RSS peak %.2f GiB)",
                     t->first_step_s, (double)host_mem_peak_rss() / (1 << 30));
            trainer_log_line(&t->log, line);
        }
        bie += n_micro;
        w.tokens += t->st.tokens_seen - tok0;
        w.samples += t->st.samples_seen - smp0;
        w.steps_timed++;
        t->st.total_loss_sum += loss;
        t->st.win_loss_sum += loss;
        t->st.win_steps++;
        const int64_t step = t->st.global_step;
        const double epoch_f = (double)epoch + (double)bie / (double)t->nb;
        t->hf.epoch = epoch_f;
        t->hf.global_step = step;  // log_history entries carry it (HF's state.global_step)
        count_input_tokens(t);
        if (t->dump && step >= a->dump_batches_steps) write_dump(t);
        double now = trainer_log_now();
        progress_update(&t->log.bar, step, now);

        bool epoch_end = bie >= t->nb;
        bool do_log = trainer_step_due(a->logging_strategy, step, t->logging_steps) ||
                      (a->logging_first_step && step == 1) ||
                      (a->logging_strategy == TRAINER_INTERVAL_EPOCH && epoch_end);
        if (do_log) log_update(t, &w, step, epoch_f, norm, now);
        double pause0 = trainer_log_now();  // eval and save time is kept out of the step timing
        const bool end = after_update(t, step, epoch_f, epoch_end, &stopped);
        w.t0 += trainer_log_now() - pause0;
        if (end) break;
    }
    progress_close(&t->log.bar, trainer_log_now());
    t->log.bar_on = false;
    return stopped;
}

// The engine's end-of-training line (stages 1-3): gathers, trace mismatches, copies, the CPU optimizer's last time,
// the run-time buffers.
static void log_engine_end(Trainer* t) {
    EngineStats es;
    engine_stats(t->E, true, t->s, &es);
    if (es.line[0]) trainer_log_line(&t->log, es.line);
}

// The end of the training loop (rank 0): the background push at the last save waited for (HF's _finish_current_push
// at the end of train()), or abandoned on a stop request, before anything else is written into or deleted from
// output_dir (the best model's load, save_total_limit 1's deletions, the final model, README.md, the results); a
// checkpoint the push kept from its rotation goes now.
static void push_finish(Trainer* t, bool abandon) {
    if (t->main && trainer_push_finish(&t->push, &t->log, abandon)) rotate_checkpoints(t, t->last_saved_step);
}

// Training completed: the best model loaded back (load_best_model_at_end), the other checkpoints gone with
// save_total_limit 1, HF's train metrics. Returns them (new reference).
static json_t* train_finish(Trainer* t, int64_t gas) {
    const TrainerArgs* a = t->a;
    static char err[TRAINER_ERR_LEN];
    double runtime = trainer_log_now() - t->t_train0;
    if (t5_log_info()) printf("\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n\n");
    if (a->load_best_model_at_end && t->hf.has_best) {
        // HF _load_best_model: the best checkpoint's weights, before the final save and the final evaluation
        char score[64];
        py_float_repr(score, sizeof score, t->hf.best_metric);
        if (t5_log_info()) printf("Loading best model from %s (score: %s).\n", t->hf.best_model_checkpoint, score);
        fflush(stdout);
        if (engine_load_weights(t->E, t->hf.best_model_checkpoint, 0, t->s, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "loading the best model: %s", err);
    }
    // HF train(): with save_total_limit 1 and a best checkpoint, every other checkpoint goes at the end
    if (a->save_total_limit == 1 && t->best.has_best && t->writer) {
        if (checkpoint_keep_only(a->output_dir, t->best.best_step, stdout, err, sizeof err) < 0) t5_warn("%s", err);
        t->last_saved_step = t->best.best_step;  // the one left (die_save_failed names it)
    }
    json_t* train_metrics = json_object();
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
    return train_metrics;
}

// The run's logs and reporters, at its end (process exit releases the GPU and the engine's host memory: the handles
// are not reused)
static void run_close(Trainer* t) {
    comms_logger_end(t->comms, t->st.global_step);  // a run without training: its collectives at its end
    t->comms = NULL;
    trainer_log_free(&t->log);
    flops_profiler_destroy(t->fprof);
    reporter_close(&t->rep);
    trainer_state_free(&t->hf);
}

int trainer_run(const TrainerArgs* a) {
    static Trainer tr;
    Trainer* t = &tr;
    memset(t, 0, sizeof *t);
    run_setup(t, a);
    json_t* train_metrics = NULL;
    json_t* eval_metrics = NULL;
    json_t* eval_log = NULL;  // the final evaluation's log entry (the card's results)
    if (a->do_train) {
        const int64_t gas = T5_MAX(a->gradient_accumulation_steps, (int64_t)1);
        train_setup(t, gas);
        const bool stopped = train_loop(t, gas);
        push_finish(t, stopped);  // a stop request abandons the push: the process exits promptly
        if (a->zero.stage > 0) log_engine_end(t);
        comms_logger_end(t->comms, t->st.global_step);  // DeepSpeed's log_summary at the end of training
        t->comms = NULL;
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
            run_close(t);
            return T5_EXIT_OK;
        }
        train_metrics = train_finish(t, gas);
    }
    if (a->do_eval) {
        report_start(t);
        eval_metrics = run_eval(t, t->hf.epoch);
        json_t* e = json_deep_copy(eval_metrics);  // HF's evaluate() logs it (after trainer_state.json is saved)
        if (a->num_input_tokens) results_set_int(e, "num_input_tokens_seen", t->hf.num_input_tokens_seen);
        json_object_set_new(e, "step", json_integer(t->st.global_step));
        reporter_log(&t->rep, e);
        eval_log = e;
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
    write_model_card(t, eval_log);
    // --push_to_hub: run_translation's trainer.push_to_hub() ("End of training"), once every file is written; a failure
    // leaves them all in place and says how to push them later
    int rc = T5_EXIT_OK;
    static char err[TRAINER_ERR_LEN];
    if (a->push.enabled && t->main && push_to_hub_end(&a->push, a->output_dir, err, sizeof err)) {
        fprintf(stderr, "t5train: error: push_to_hub: %s. Everything is saved in %s; push it later with: t5train push "
                "%s --hub_model_id %s\n", err, a->output_dir, a->output_dir, a->push.repo_id);
        t5_error_reported = 1;
        rc = T5_EXIT_FAILURE;
    }
    run_close(t);
    return rc;
}
