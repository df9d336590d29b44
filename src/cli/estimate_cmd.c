/*
 * estimate_cmd.c: `t5train estimate`: the memory planner's table (planner.h) for a model and a batch shape, or
 * for a full job config, marked against this machine's free GPU memory and available host memory.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "config.h"
#include "planner.h"
#include "../base/common.h"
#include "../report/flops_profile.h"
#include "../zero/host_mem.h"

static void estimate_usage(FILE* f) {
    fprintf(f,
            "usage: t5train estimate --model NAME|DIR [options]\n"
            "       t5train estimate --config JOB.json | --deepspeed DS.json --model_name_or_path NAME [run flags]\n"
            "Prints, for every ZeRO plan (stage 0..3, offload_optimizer with ratio 0.25/0.5/0.75/1, offload_param),\n"
            "the GPU memory per rank and host memory per node the engine allocates, whether it fits this machine,\n"
            "a predicted step time, and DeepSpeed's own estimator numbers for the same model.\n"
            "  --model NAME|DIR             a preset (t5-small ... t5-11b, google/t5-v1_1-*) or a directory with config.json\n"
            "  --num_gpus N                 GPUs per node (default 1)\n"
            "  --num_nodes N                nodes (default 1)\n"
            "  --batch N                    micro-batch per GPU (default: per_device_train_batch_size, 8)\n"
            "  --source_len N, --target_len N  tokens the activations are sized for (default: max_source_length,\n"
            "                               max_target_length)\n"
            "  --dtype fp32|fp16|bf16       run dtype (or --fp16 / --bf16)\n"
            "  --gradient_checkpointing     keep only block inputs\n"
            "  --gradient_accumulation_steps N\n"
            "  --gpu_mem GIB, --host_mem GIB  check against these instead of this machine's memory\n"
            "  --margin F                   GPU safety margin (default 0.05)\n"
            "  --flops_profile              print DeepSpeed's flops profiler text for one micro-batch of this shape\n"
            "                               instead (params and MACs; no latency without a run: docs/training.md)\n"
            "  any other run flag or key (--config, --deepspeed, --per_device_train_batch_size, ...) as for a run\n");
}

static int parse_int(const char* flag, const char* v, int lo, int* out) {
    char* end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > 1 << 24) t5_die(T5_EXIT_USAGE, "estimate: %s needs an integer >= %d, got '%s'", flag, lo, v ? v : "");
    *out = (int)x;
    return 0;
}

static double parse_pos(const char* flag, const char* v) {
    char* end;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || !(x >= 0) || !isfinite(x))
        t5_die(T5_EXIT_USAGE, "estimate: %s needs a number >= 0, got '%s'", flag, v ? v : "");
    return x;
}

// the zero_optimization knobs of a job (run.c does the same for a run)
static void knobs_from_config(const RunConfig* c, const T5Config* m, DType dtype, ZeroOptions* zo) {
    zero_options_default(zo);
    zo->comm_dtype = dtype;
    zo->reduce_bucket_size = (int64_t)m->d_model * m->d_model;
    zo->prefetch_bucket_size = (int64_t)(0.9 * (double)m->d_model * m->d_model);
    zo->persistence_threshold = 10 * (int64_t)m->d_model;
    // the deepspeed fields hold DeepSpeed's defaults when the job has no deepspeed section
    const DsZero* z = &c->ds.zero_optimization;
    zo->optimizer_pin_memory = z->offload_optimizer.pin_memory;
    zo->buffer_count = (int)z->offload_optimizer.buffer_count;  // the pinned staging ring's slots (pageable buffers)
    zo->param_pin_memory = z->offload_param.pin_memory;
    // offload_optimizer nvme: every offloaded row counts the swap buffers instead of Adam m, v (the file apart)
    if (c->has_deepspeed && z->offload_optimizer.device == OFFLOAD_NVME)
        snprintf(zo->nvme_path, sizeof zo->nvme_path, "%s", z->offload_optimizer.nvme_path);
    zo->sub_group_size = z->sub_group_size;
    const int src_auto = CONFIG_SRC_AUTO;
    if (config_key_source(c, "deepspeed.zero_optimization.reduce_bucket_size") != src_auto)
        zo->reduce_bucket_size = z->reduce_bucket_size;
    if (config_key_source(c, "deepspeed.zero_optimization.stage3_prefetch_bucket_size") != src_auto)
        zo->prefetch_bucket_size = z->stage3_prefetch_bucket_size;
    if (config_key_source(c, "deepspeed.zero_optimization.stage3_param_persistence_threshold") != src_auto)
        zo->persistence_threshold = z->stage3_param_persistence_threshold;
    zo->allgather_bucket_size = z->allgather_bucket_size;
    zo->max_live_parameters = z->stage3_max_live_parameters;
    zo->max_reuse_distance = z->stage3_max_reuse_distance;
    zo->overlap_comm = z->overlap_comm;
    const int cd = c->ds.communication_data_type;
    if (cd != COMM_DTYPE_DEFAULT) zo->comm_dtype = cd == COMM_DTYPE_FP32 ? DT_F32 : cd == COMM_DTYPE_FP16 ? DT_F16 : DT_BF16;
    // ZenFlow: its selective state on the GPU (estimate.c gpu_zenflow) and the fp32 host accumulation (planner.c)
    if (c->has_deepspeed && z->zenflow.present) {
        zo->zenflow = true;
        zo->zenflow_topk_ratio = z->zenflow.topk_ratio;
    }
    // the job's optimizer: Adafactor's state is far smaller than Adam's m, v (estimate.c sizes both)
    if (c->optim == OPTIM_ADAFACTOR && !(c->has_deepspeed && c->ds.optimizer.present)) {
        zo->optimizer = ZERO_OPTIM_ADAFACTOR;
        zo->adafactor.has_beta1 = !isnan(c->adafactor_beta1);
    }
}

int estimate_main(int argc, char** argv) {
    static RunConfig cfg;
    RunConfig* c = &cfg;
    char err[CONFIG_ERR_LEN];
    int gpn = 1, nodes = 1, batch = 0, src = 0, tgt = 0, gas = 0;
    double gpu_mem = -1, host_mem = -1, margin = 0.05;
    const char* dtype = NULL;
    bool profile = false;
    char** pass = calloc_check((size_t)argc + 1, sizeof(char*));
    int np = 0;
    pass[np++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            estimate_usage(stdout);
            free(pass);
            return T5_EXIT_OK;
        }
        if (strcmp(a, "--num_gpus") == 0) parse_int(a, v, 1, &gpn), i++;
        else if (strcmp(a, "--num_nodes") == 0) parse_int(a, v, 1, &nodes), i++;
        else if (strcmp(a, "--batch") == 0) parse_int(a, v, 1, &batch), i++;
        else if (strcmp(a, "--source_len") == 0) parse_int(a, v, 1, &src), i++;
        else if (strcmp(a, "--target_len") == 0) parse_int(a, v, 1, &tgt), i++;
        else if (strcmp(a, "--gpu_mem") == 0) gpu_mem = parse_pos(a, v), i++;
        else if (strcmp(a, "--host_mem") == 0) host_mem = parse_pos(a, v), i++;
        else if (strcmp(a, "--margin") == 0) margin = parse_pos(a, v), i++;
        else if (strcmp(a, "--flops_profile") == 0) profile = true;
        else if (strcmp(a, "--dtype") == 0) {
            if (!v || (strcmp(v, "fp32") && strcmp(v, "fp16") && strcmp(v, "bf16")))
                t5_die(T5_EXIT_USAGE, "estimate: --dtype needs fp32, fp16 or bf16, got '%s'", v ? v : "");
            dtype = v;
            i++;
        } else {
            pass[np++] = argv[i];
        }
    }
    config_init(c);
    int rc = config_parse_args(c, np, pass, err, sizeof err);
    free(pass);
    if (rc) t5_die(rc, "estimate: %s", err);
    if (!c->model_name_or_path[0]) t5_die(T5_EXIT_USAGE, "estimate: name a model (--model NAME|DIR)");
    // the estimate reads no data: a job without a dataset is still a shape to estimate
    if (!c->dataset_name[0] && !c->train_file[0] && !c->validation_file[0] && !c->test_file[0])
        snprintf(c->dataset_name, sizeof c->dataset_name, "wmt16");
    if (!c->source_lang[0]) snprintf(c->source_lang, sizeof c->source_lang, "en");
    if (!c->target_lang[0]) snprintf(c->target_lang, sizeof c->target_lang, "ro");
    static RunConfig raw;  // before "auto" is resolved: what the automatic plan may choose
    raw = *c;
    if ((rc = config_resolve(c, err, sizeof err))) t5_die(rc, "estimate: %s", err);
    if (!c->model_found)
        t5_die(T5_EXIT_USAGE, "estimate: model '%s' is neither a preset (%s) nor a directory with config.json",
               c->model_name_or_path, t5_config_preset_names());
    PlanInput in;
    memset(&in, 0, sizeof in);
    in.model = c->model;
    in.dtype = dtype ? (strcmp(dtype, "fp16") == 0 ? DT_F16 : strcmp(dtype, "bf16") == 0 ? DT_BF16 : DT_F32)
                     : config_run_dtype(c);
    in.grad_dtype = in.dtype;
    if (c->has_deepspeed && c->ds.data_types.grad_accum_dtype == COMM_DTYPE_FP32) in.grad_dtype = DT_F32;
    // a job that only evaluates (--do_eval / --do_predict without --do_train) is sized as its run sizes it: the
    // evaluation batch and one block's activations (forward_only); anything else is estimated as training
    const bool eval_only = !c->do_train && (c->do_eval || c->do_predict);
    int b = eval_only ? 1 : (int)c->per_device_train_batch_size;
    if ((c->do_eval || c->do_predict) && c->per_device_eval_batch_size > b) b = (int)c->per_device_eval_batch_size;
    in.batch = batch ? batch : b;
    in.src_len = src ? src : ((int)c->max_source_length + 7) / 8 * 8;  // rounded up to 8, as the run's buffers
    int t = (int)c->max_target_length;
    if ((c->do_eval || c->do_predict) && c->val_max_target_length > t) t = (int)c->val_max_target_length;
    in.tgt_len = tgt ? tgt : (t + 7) / 8 * 8;
    in.gradient_checkpointing = c->gradient_checkpointing;
    in.forward_only = eval_only;
    in.grad_accum_steps = gas ? gas : (int)c->gradient_accumulation_steps;
    in.gpus_per_node = gpn;
    in.num_nodes = nodes;
    knobs_from_config(c, &in.model, in.dtype, &in.knobs);
    if (profile) {  // the flops profiler's text for one micro-batch of this shape, with the job's section if any
        const DsFlopsProfiler* fp = &c->ds.flops_profiler;
        FlopsProfileInput pi = {.cfg = in.model, .B = in.batch, .S = in.src_len, .T = in.tgt_len,
                                .profile_step = fp->profile_step, .world_size = gpn * nodes, .bwd_ms = -1,
                                .step_ms = -1, .recompute_fwd_factor = fp->recompute_fwd_factor,
                                .module_depth = (int)fp->module_depth, .top_modules = (int)fp->top_modules,
                                .detailed = fp->detailed};
        if (flops_profile_write(stdout, &pi)) t5_die(T5_EXIT_USAGE, "estimate: no profile for this shape");
        return T5_EXIT_OK;
    }

    static PlanRow rows[PLANNER_MAX_ROWS];
    int n = planner_table(&in, 0.25, rows, PLANNER_MAX_ROWS, err, sizeof err);
    if (n < 0) t5_die(T5_EXIT_USAGE, "estimate: %s", err);
    bool have_gpu = false;
    size_t gpu_free = 0;
    if (gpu_mem >= 0) {
        have_gpu = gpu_mem > 0;
        gpu_free = (size_t)(gpu_mem * 1073741824.0);
    } else {
        int ndev = 0;
        size_t tot = 0;
        if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 && cudaMemGetInfo(&gpu_free, &tot) == cudaSuccess)
            have_gpu = true;
        else
            (void)cudaGetLastError();
    }
    size_t host_avail = host_mem >= 0 ? (size_t)(host_mem * 1073741824.0) : host_mem_available();
    planner_fit(rows, n, have_gpu, gpu_free, host_avail, margin);
    planner_print(stdout, &in, rows, n, have_gpu, gpu_free, host_avail);
    if ((!src || !tgt) && !c->pad_to_max_length)  // padded to the max lengths, a run sizes exactly these
        printf("\nnote: activations sized for %d + %d tokens, the max lengths; a run sizes them (and picks or checks "
               "its plan) for its data's longest example, at most these: --source_len / --target_len give those "
               "lengths here\n", in.src_len, in.tgt_len);
    int best = planner_choose(rows, n);
    char name[96];
    if (best >= 0) {
        planner_row_name(&rows[best], name, sizeof name);
        printf("\nfastest plan that fits: %s (%.1f GiB GPU, %.1f GiB host)\n", name,
               rows[best].g_total / 1073741824.0, rows[best].h_total / 1073741824.0);
    } else {
        printf("\nno plan fits %s\n", have_gpu ? "this machine" : "(no GPU to check against; --gpu_mem GIB to assume one)");
    }
    if (strcmp(c->zero_plan, "auto") == 0) {
        // the job's automatic plan on this (or the --gpu_mem / --host_mem) machine, as a run would choose it
        PlanSearch ps;
        planner_search_from_config(&raw, &ps);
        if (batch) ps.batch_auto = false;  // --batch fixes the micro-batch
        PlanInput ai = in;
        ai.batch = batch ? batch : (int)c->per_device_train_batch_size;
        ai.arena_batch = (c->do_eval || c->do_predict) ? (int)c->per_device_eval_batch_size : 0;
        PlanPick pick;
        printf("\n");
        rc = planner_auto_search(&ai, &ps, have_gpu, gpu_free, host_avail, margin, &pick, stdout, err, sizeof err);
        if (rc < 0) t5_die(T5_EXIT_USAGE, "estimate: %s", err);
        if (rc > 0)
            printf("zero plan auto: no ZeRO plan fits at micro-batch %d%s (a run stops here)\n", pick.batch,
                   pick.ckpt ? " with gradient checkpointing" : "");
    }
    return T5_EXIT_OK;
}
