/*
 * config_resolve.c: "auto" resolution, null fallbacks, derived values and cross-key checks of the run
 * configuration (see config.h), and what this build implements. "auto" resolution copies the HF Trainer's
 * DeepSpeed integration (transformers integrations/deepspeed.py, HfTrainerDeepSpeedConfig):
 *   fill_match: "auto" -> the training argument's value; an explicit value that differs is a
 *               mismatch, and all mismatches are reported together as one error;
 *   fill_only:  "auto" -> value, never a mismatch (warmup_min_lr, the d_model-based sizes).
 * Keys absent from the DeepSpeed JSON keep DeepSpeed's defaults, as with HF + DeepSpeed.
 */
#include "autotune.h"
#include "config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include "../base/common.h"
#include "../launch/comms_log.h"
#include "../report/report_to.h"
#include "../zero/zenflow_sched.h"

// ----------------------------------------------------------------------------
// resolution ("auto", null fallbacks, cross-key rules)

typedef struct {
    RunConfig* c;
    char text[1536];
    int count;
} Mismatches;

static void mismatch_add(Mismatches* m, const char* ds_key, const char* ds_val, const char* hf_key,
                         const char* hf_val) {
    size_t l = strlen(m->text);
    snprintf(m->text + l, sizeof m->text - l, "%sds %s=%s vs hf %s=%s", m->count ? "; " : "", ds_key, ds_val, hf_key,
             hf_val);
    m->count++;
}

static bool explicit_src(int s) { return s == CONFIG_SRC_FILE || s == CONFIG_SRC_CLI; }

// HF fill_match / fill_only for one key; `hf` is the value as JSON. Consumes hf.
static void fill(Mismatches* m, const char* key, json_t* hf, const char* hf_key, bool must_match) {
    RunConfig* c = m->c;
    int ki = config_key_index(key);
    const ConfigKey* k = &CONFIG_KEYS[ki];
    if (c->src[ki] == CONFIG_SRC_AUTO) {
        char err[256];
        if (config_set_json(c, ki, hf, CONFIG_SRC_RESOLVED, key, err, sizeof err) != 0) {
            // the training argument itself is outside DeepSpeed's range: report it as a mismatch
            mismatch_add(m, key + DS_PREFIX_LEN, "auto", hf_key, err);
        }
    } else if (must_match && explicit_src(c->src[ki])) {
        json_t* cur = NULL;
        const void* p = field_cptr(c, k);
        switch (k->kind) {
            case CONFIG_BOOL: cur = json_boolean(*(const bool*)p); break;
            case CONFIG_INT: cur = json_integer(*(const int64_t*)p); break;
            case CONFIG_FLOAT: cur = json_real(*(const double*)p); break;
            case CONFIG_BETAS: cur = json_pack("[ff]", ((const double*)p)[0], ((const double*)p)[1]); break;
            default: break;
        }
        bool same = cur && json_equal(cur, hf);
        if (cur && !same && json_is_number(cur) && json_is_number(hf))
            same = json_number_value(cur) == json_number_value(hf);
        if (cur && !same && json_is_array(cur))
            same = json_number_value(json_array_get(cur, 0)) == json_number_value(json_array_get(hf, 0)) &&
                   json_number_value(json_array_get(cur, 1)) == json_number_value(json_array_get(hf, 1));
        if (cur && !same) {
            char a[96], b[96];
            json_brief(cur, a, sizeof a);
            json_brief(hf, b, sizeof b);
            mismatch_add(m, key + DS_PREFIX_LEN, a, hf_key, b);
        }
        json_decref(cur);
    }
    json_decref(hf);
}

static void derive_int(RunConfig* c, const char* key, int64_t v) {
    int ki = config_key_index(key);
    int64_t* p = field_ptr(c, &CONFIG_KEYS[ki]);
    if (c->src[ki] != CONFIG_SRC_DEFAULT && *p >= 0) return;
    *(int64_t*)field_ptr(c, &CONFIG_KEYS[ki]) = v;
    c->src[ki] = CONFIG_SRC_DERIVED;
}

// Known training-set sizes of the datasets t5train reads (HF datasets' split sizes).
static int64_t known_train_size(const RunConfig* c) {
    if (c->train_file[0]) return -1;
    if (strcmp(c->dataset_name, "wmt16") == 0 && strcmp(c->dataset_config_name, "ro-en") == 0) return 610320;
    return -1;
}

static void find_model(RunConfig* c) {
    const char* name = c->config_name[0] ? c->config_name : c->model_name_or_path;
    char jerr[512];
    c->model_found = false;
    if (t5_config_preset(name, &c->model)) {
        c->model_found = true;
        return;
    }
    char* cfg = t5_is_dir(name) ? t5_path_join(name, "config.json") : strdup_check(name);
    if (t5_is_file(cfg)) {
        if (t5_config_load_json(cfg, &c->model, jerr, sizeof jerr) == 0) c->model_found = true;
        else add_note(c, "model config not read (%.100s)", jerr);
    } else {
        add_note(c, "model '%.60s' not found yet (no preset, no config.json): d_model autos wait for the loader",
                 name);
    }
    free(cfg);
}

static void compute_training_steps(RunConfig* c) {
    int64_t size = known_train_size(c);
    if (size > 0) c->train_samples = c->max_train_samples > 0 ? T5_MIN(size, c->max_train_samples) : size;
    if (c->max_steps > 0) {
        c->num_training_steps = c->max_steps;
        return;
    }
    if (c->train_samples <= 0) return;
    // HF (accelerate's BatchSamplerShard): batches per rank = ceil(N / (W B)), or floor(N / (W B)) with
    // dataloader_drop_last (data/dataloader.h; the nested roundings below are the same numbers); updates per
    // epoch = ceil(batches / accumulation).
    int64_t per_rank = CEIL_DIV(c->train_samples, (int64_t)c->world_size);
    int64_t bs = c->per_device_train_batch_size;
    int64_t batches = c->dataloader_drop_last ? per_rank / bs : CEIL_DIV(per_rank, bs);
    int64_t ga = c->gradient_accumulation_steps;
    int64_t updates = T5_MAX(batches / ga + (batches % ga > 0), (int64_t)1);
    c->num_training_steps = (int64_t)ceil(c->num_train_epochs * (double)updates);
}

// HF's trainer_config_process: the DeepSpeed values HF fills from its own arguments ("auto") or checks against them.
static void ds_fill_from_trainer(Mismatches* m, RunConfig* c) {
    DsConfig* ds = &c->ds;
    const int64_t train_batch = (int64_t)c->world_size * c->per_device_train_batch_size * c->gradient_accumulation_steps;
    fill(m, "deepspeed.train_micro_batch_size_per_gpu", json_integer(c->per_device_train_batch_size),
         "per_device_train_batch_size", true);
    fill(m, "deepspeed.gradient_accumulation_steps", json_integer(c->gradient_accumulation_steps),
         "gradient_accumulation_steps", true);
    fill(m, "deepspeed.train_batch_size", json_integer(train_batch), "train_batch_size (calculated)", true);
    fill(m, "deepspeed.gradient_clipping", json_real(c->max_grad_norm), "max_grad_norm", true);
    if (ds->optimizer.present) {
        fill(m, "deepspeed.optimizer.params.lr", json_real(c->learning_rate), "learning_rate", true);
        fill(m, "deepspeed.optimizer.params.betas", json_pack("[ff]", c->adam_beta1, c->adam_beta2),
             "adam_beta1+adam_beta2", true);
        fill(m, "deepspeed.optimizer.params.eps", json_real(c->adam_epsilon), "adam_epsilon", true);
        fill(m, "deepspeed.optimizer.params.weight_decay", json_real(c->weight_decay), "weight_decay", true);
    }
    if (ds->scheduler.present) {
        fill(m, "deepspeed.scheduler.params.warmup_min_lr", json_integer(0), "", false);
        fill(m, "deepspeed.scheduler.params.warmup_max_lr", json_real(c->learning_rate), "learning_rate", true);
    }
    if (c->save_on_each_node) {
        ds->checkpoint.present = true;
        ds->checkpoint.use_node_local_storage = true;
        c->src[config_key_index("deepspeed.checkpoint.use_node_local_storage")] = CONFIG_SRC_DERIVED;
    }
    bool fp16 = c->fp16 || c->fp16_full_eval, bf16 = c->bf16 || c->bf16_full_eval;
    fill(m, "deepspeed.fp16.enabled", json_boolean(fp16), "fp16|fp16_full_eval+fp16_backend(amp)", true);
    fill(m, "deepspeed.amp.enabled", json_false(), "fp16+fp16_backend(apex)", true);
    fill(m, "deepspeed.amp.opt_level", json_string("O1"), "fp16_opt_level", false);
    fill(m, "deepspeed.bf16.enabled", json_boolean(bf16), "bf16|bf16_full_eval", true);
}

// HF's trainer_config_finalize: the d_model-based sizes ("stage": "auto" first: the planner picks the plan later).
static void ds_fill_model_sizes(Mismatches* m, RunConfig* c) {
    DsZero* z = &c->ds.zero_optimization;
    // "stage": "auto" (issue 17): the planner picks the plan at run time (run.c); meanwhile stage 3, so that the
    // stage 3 sizes resolve and any offload section passes the cross-key checks
    if (c->src[config_key_index("deepspeed.zero_optimization.stage")] == CONFIG_SRC_AUTO ||
        strcmp(c->zero_plan, "auto") == 0) {
        z->stage = 3;
        snprintf(c->zero_plan, sizeof c->zero_plan, "auto");
    }
    const char* hkeys[] = {"deepspeed.zero_optimization.reduce_bucket_size",
                           "deepspeed.zero_optimization.stage3_prefetch_bucket_size",
                           "deepspeed.zero_optimization.stage3_param_persistence_threshold"};
    bool any_auto = false;
    for (int i = 0; i < 3; i++) any_auto |= c->src[config_key_index(hkeys[i])] == CONFIG_SRC_AUTO;
    if (any_auto && c->model_found) {
        int64_t d = c->model.d_model;
        fill(m, hkeys[0], json_integer(d * d), "", false);
        if (z->stage == 3) {
            // HF writes 0.9 * d^2 as a float (943718.4 for d_model 1024); DeepSpeed's field is an
            // int, so the value that takes effect is the truncation, as int(0.9 * d^2) in newer HF.
            fill(m, hkeys[1], json_integer((json_int_t)(0.9 * (double)(d * d))), "", false);
            fill(m, hkeys[2], json_integer(10 * d), "", false);
        }
    }
    if (any_auto && !c->model_found)
        add_note(c, "zero_optimization d_model autos unresolved until the model '%.60s' is loaded",
                 c->model_name_or_path);
    if (z->stage < 3 && (c->src[config_key_index(hkeys[1])] == CONFIG_SRC_AUTO ||
                         c->src[config_key_index(hkeys[2])] == CONFIG_SRC_AUTO))
        add_note(c, "stage3_* \"auto\" keys are not used below ZeRO stage 3 (left unresolved, as HF does)");
}

// The scheduler's total and warm-up steps from the Trainer's (or a note that the training set decides them).
static void ds_fill_scheduler_steps(Mismatches* m, RunConfig* c) {
    if (!c->ds.scheduler.present) return;
    int kt = config_key_index("deepspeed.scheduler.params.total_num_steps");
    int kw = config_key_index("deepspeed.scheduler.params.warmup_num_steps");
    if (c->num_training_steps > 0)
        fill(m, CONFIG_KEYS[kt].key, json_integer(c->num_training_steps), "num_training_steps (calculated)",
             true);
    else if (c->src[kt] == CONFIG_SRC_AUTO)
        add_note(c, "scheduler total_num_steps unresolved until the training set size is known");
    int64_t warm = -1;
    if (c->warmup_steps > 0) warm = c->warmup_steps;
    else if (c->warmup_ratio == 0) warm = 0;
    else if (c->num_training_steps > 0) warm = (int64_t)ceil((double)c->num_training_steps * c->warmup_ratio);
    if (warm >= 0) fill(m, CONFIG_KEYS[kw].key, json_integer(warm), "warmup_steps", true);
    else if (c->src[kw] == CONFIG_SRC_AUTO)
        add_note(c, "scheduler warmup_num_steps unresolved until the training set size is known");
}

// The batch keys the Trainer's batching decides when the JSON has none, and DeepSpeed's batch product.
static int ds_check_batch(RunConfig* c, char* err, size_t n) {
    DsConfig* ds = &c->ds;
    const int64_t train_batch = (int64_t)c->world_size * c->per_device_train_batch_size * c->gradient_accumulation_steps;
    derive_int(c, "deepspeed.train_micro_batch_size_per_gpu", c->per_device_train_batch_size);
    derive_int(c, "deepspeed.gradient_accumulation_steps", c->gradient_accumulation_steps);
    derive_int(c, "deepspeed.train_batch_size", train_batch);
    if (ds->train_batch_size != ds->train_micro_batch_size_per_gpu * ds->gradient_accumulation_steps * c->world_size)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: train_batch_size %lld != train_micro_batch_size_per_gpu %lld x "
                    "gradient_accumulation_steps %lld x world size %d",
                    (long long)ds->train_batch_size, (long long)ds->train_micro_batch_size_per_gpu,
                    (long long)ds->gradient_accumulation_steps, c->world_size);
    return 0;
}

// fp16 / bf16 from the flags when the JSON has no section, and the precision keys' cross-checks.
static int ds_check_precision(RunConfig* c, char* err, size_t n) {
    DsConfig* ds = &c->ds;
    const DsZero* z = &ds->zero_optimization;
    if (!ds->fp16.present && c->fp16) {
        // no fp16 section: DeepSpeed alone would train in fp32; t5train follows the --fp16 flag
        ds->fp16.enabled = true;
        c->src[config_key_index("deepspeed.fp16.enabled")] = CONFIG_SRC_DERIVED;
        add_note(c, "the DeepSpeed config has no fp16 section: fp16 on from --fp16 with DeepSpeed's scaler defaults");
    }
    if (!ds->bf16.present && c->bf16) {
        ds->bf16.enabled = true;
        c->src[config_key_index("deepspeed.bf16.enabled")] = CONFIG_SRC_DERIVED;
    }
    if (ds->fp16.enabled && ds->bf16.enabled)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: fp16.enabled and bf16.enabled are both true (DeepSpeed: bf16 and fp16 modes cannot be "
                    "simultaneously enabled)");
    if (ds->amp.enabled && z->stage > 0)
        return t5_errf(err, n, T5_EXIT_USAGE, "deepspeed: amp.enabled cannot be combined with ZeRO (stage %lld)",
                    (long long)z->stage);
    {
        // gradient buffers: the model dtype (DeepSpeed ZeRO's default) or fp32, never a third dtype
        const int g = ds->data_types.grad_accum_dtype;
        const int run = ds->fp16.enabled ? COMM_DTYPE_FP16 : ds->bf16.enabled ? COMM_DTYPE_BF16 : COMM_DTYPE_FP32;
        static const char* const gname[] = {"null", "fp16", "bf16", "fp32"};
        if (g != COMM_DTYPE_DEFAULT && g != COMM_DTYPE_FP32 && g != run)
            return t5_errf(err, n, T5_EXIT_USAGE,
                           "deepspeed: data_types.grad_accum_dtype \"%s\" does not fit a %s run (use \"%s\", the "
                           "default, or \"fp32\")",
                           gname[g], gname[run], gname[run]);
    }
    return 0;
}

// zero_optimization's derived default (overlap_comm) and cross-key checks (offloads, nvme, the optimizer block).
static int ds_check_zero(RunConfig* c, char* err, size_t n) {
    DsConfig* ds = &c->ds;
    DsZero* z = &ds->zero_optimization;
    int ko = config_key_index("deepspeed.zero_optimization.overlap_comm");
    if (c->src[ko] == CONFIG_SRC_DEFAULT) {
        z->overlap_comm = z->stage == 3;  // DeepSpeed's default
        c->src[ko] = CONFIG_SRC_DERIVED;
    }
    if (z->offload_optimizer.device == OFFLOAD_NVME && !z->offload_optimizer.nvme_path[0])
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: zero_optimization.offload_optimizer.device is \"nvme\" but nvme_path is not set");
    if (c->ds.aio.block_size % 4096)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "deepspeed: aio.block_size %lld is not a multiple of 4096 (O_DIRECT requests are whole blocks)",
                       (long long)c->ds.aio.block_size);
    if (z->offload_param.device == OFFLOAD_NVME && !z->offload_param.nvme_path[0])
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: zero_optimization.offload_param.device is \"nvme\" but nvme_path is not set");
    if (z->offload_param.device != OFFLOAD_NONE && z->stage != 3)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: zero_optimization.offload_param needs stage 3 (stage is %lld)", (long long)z->stage);
    if (z->offload_optimizer.device != OFFLOAD_NONE && z->stage == 0)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is 0)");
    if (ds->optimizer.present && ds->optimizer.type == DS_OPTIM_ADAFACTOR)
        // DeepSpeed builds any type it does not know as getattr(torch.optim, type): torch.optim.Adafactor (torch
        // >= 2.5), a different algorithm from transformers' (no beta1, relative_step, scale_parameter,
        // clip_threshold; beta2_decay, d, eps (None, 1e-3)), and with ZeRO only with zero_allow_untested_optimizer
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: optimizer type \"Adafactor\" would be torch.optim.Adafactor in DeepSpeed (PyTorch's "
                    "variant, not transformers' Adafactor), which t5train does not implement; remove the `optimizer` "
                    "block from the DeepSpeed config and pass --optim adafactor (transformers' Adafactor, as the HF "
                    "Trainer builds it; options: --adafactor_beta1, --adafactor_relative_step, ...)");
    if (ds->optimizer.present && (c->adafactor || c->optim == OPTIM_ADAFACTOR))
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "--adafactor was passed, but also found `optimizer` configured in the DeepSpeed config. Only one "
                    "optimizer can be configured.");
    return 0;
}

int config_comms_ops(const DsCommsLogger* cl, unsigned* ops, char* err, size_t n) {
    *ops = cl->prof_all ? (1u << COMMS_NUM_OPS) - 1 : 0;
    for (const char* p = cl->prof_ops; *p;) {
        const size_t l = strcspn(p, ",");
        char name[CONFIG_STR_LEN];
        snprintf(name, sizeof name, "%.*s", (int)l, p);
        const int op = comms_op_from_name(name);
        if (op < 0) {
            char list[256];
            comms_op_list(list, sizeof list);
            return t5_errf(err, n, T5_EXIT_USAGE,
                           "deepspeed.comms_logger.prof_ops: \"%s\" is not a collective t5train issues; its ops are %s",
                           name, list);
        }
        *ops |= 1u << op;
        p += l + (p[l] == ',');
    }
    return 0;
}

// DeepSpeed's comms_logger: prof_ops checked whatever `enabled` (a typo is a typo); notes for what times nothing
static int check_comms_logger(RunConfig* c, char* err, size_t n) {
    const DsCommsLogger* cl = &c->ds.comms_logger;
    unsigned ops;
    int rc = config_comms_ops(cl, &ops, err, n);
    if (rc || !cl->enabled) return rc;
    if (!ops)
        add_note(c, "deepspeed.comms_logger: prof_all is false and prof_ops is empty: no collective is timed");
    else if (c->world_size == 1)
        add_note(c, "deepspeed.comms_logger: one rank issues no collectives: the summary table will be empty");
    return 0;
}

// zero_optimization.zenflow as src/zero's options ("auto" intervals: ZENFLOW_AUTO)
ZenflowOpts config_zenflow_opts(const DsZenflow* z) {
    ZenflowOpts o = zenflow_opts_default();
    o.topk_ratio = z->topk_ratio;
    o.select_strategy = z->select_strategy;  // the table's "auto|step|epoch" is ZenflowSelectStrategy's order
    o.select_interval = z->select_interval == CONFIG_INT_AUTO ? ZENFLOW_AUTO : z->select_interval;
    o.update_interval = z->update_interval == CONFIG_INT_AUTO ? ZENFLOW_AUTO : z->update_interval;
    o.overlap_step = z->overlap_step;
    o.offload = z->offload;
    o.auto_ratio = z->auto_ratio;
    o.full_warm_up_rounds = z->full_warm_up_rounds;
    o.pt_reserved_cores_perc = z->pt_reserved_cores_perc;
    return o;
}

// ZenFlow's section: DeepSpeed's checks (zenflow_sched.h zenflow_opts_check) and where it runs: ZeRO stage 1-3 with
// offload_optimizer device cpu (zenflow_stage_1_and_2.py: "Zenflow must be used with cpu offload"), offload with
// overlap_comm (its assert), and no gradient accumulation of its own (DeepSpeed replaces gradient_accumulation_steps
// by update_interval)
static int ds_check_zenflow(RunConfig* c, char* err, size_t n) {
    const DsZero* z = &c->ds.zero_optimization;
    if (!z->zenflow.present) return 0;
    const ZenflowOpts o = config_zenflow_opts(&z->zenflow);
    int rc = zenflow_opts_check(&o, err, n);
    if (rc) return rc;
    const bool stage_auto = c->src[config_key_index("deepspeed.zero_optimization.stage")] == CONFIG_SRC_AUTO;
    // stage 3 with nvme: DeepSpeed's stage 3 ZenFlow runs with a swapped optimizer; t5train refuses it as not
    // implemented yet (config_check_implemented)
    const bool nvme3 = z->stage == 3 && z->offload_optimizer.device == OFFLOAD_NVME;
    if (!stage_auto && !nvme3 && (z->stage == 0 || z->offload_optimizer.device != OFFLOAD_CPU))
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "deepspeed: zero_optimization.zenflow needs ZeRO stage 1, 2 or 3 with offload_optimizer device "
                       "\"cpu\" (stage is %lld, offload_optimizer device %s)",
                       (long long)z->stage,
                       z->offload_optimizer.device == OFFLOAD_NVME ? "nvme"
                       : z->offload_optimizer.device == OFFLOAD_CPU ? "cpu" : "none");
    if (o.offload && !z->overlap_comm)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "deepspeed: zero_optimization.zenflow.offload true needs zero_optimization.overlap_comm true "
                       "(DeepSpeed: \"offload selective optimizer should be used with overlap_comm\")");
    if (c->gradient_accumulation_steps > 1)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "deepspeed: zero_optimization.zenflow replaces gradient accumulation by its update_interval "
                       "(DeepSpeed overwrites gradient_accumulation_steps with it); set gradient_accumulation_steps 1 "
                       "(it is %lld)",
                       (long long)c->gradient_accumulation_steps);
    return 0;
}

static int resolve_deepspeed(RunConfig* c, char* err, size_t n) {
    Mismatches m = {.c = c};
    DsConfig* ds = &c->ds;
    ds_fill_from_trainer(&m, c);
    // DeepSpeed's autotuning: the planner's automatic plan (src/cli/autotune.h)
    int arc = autotune_resolve(c, err, n);
    if (arc) return arc;
    if (ds->flops_profiler.enabled && c->gradient_checkpointing && ds->flops_profiler.recompute_fwd_factor == 0)
        add_note(c, "deepspeed.flops_profiler: gradient_checkpointing recomputes each forward in the backward; "
                    "recompute_fwd_factor 1 counts it in the bwd and iter FLOPS lines (DeepSpeed's advice)");
    ds_fill_model_sizes(&m, c);
    ds_fill_scheduler_steps(&m, c);
    if (m.count)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "the DeepSpeed config mismatches the training arguments: %s (the easiest fix is to set these "
                    "DeepSpeed values to \"auto\")",
                    m.text);
    int rc = ds_check_batch(c, err, n);
    if (!rc) rc = check_comms_logger(c, err, n);
    if (!rc) rc = ds_check_precision(c, err, n);
    if (!rc) rc = ds_check_zero(c, err, n);
    if (!rc) rc = ds_check_zenflow(c, err, n);
    return rc;
}

// The adafactor_* keys: only with optim adafactor (and no DeepSpeed optimizer); HF's constructor checks. A key at
// its default value is fine anywhere (the resolved config, t5train_config.json, lists every key).
static int check_adafactor_options(RunConfig* c, char* err, size_t n) {
    const bool ds_opt = c->has_deepspeed && c->ds.optimizer.present;
    if (c->optim != OPTIM_ADAFACTOR || ds_opt) {
        const char* set = c->adafactor_scale_parameter ? "adafactor_scale_parameter"
                          : c->adafactor_relative_step ? "adafactor_relative_step"
                          : c->adafactor_warmup_init   ? "adafactor_warmup_init"
                          : !isnan(c->adafactor_beta1) ? "adafactor_beta1"
                          : c->adafactor_clip_threshold != 1.0 ? "adafactor_clip_threshold"
                          : c->adafactor_decay_rate != -0.8    ? "adafactor_decay_rate"
                          : c->adafactor_eps1 != 1e-30         ? "adafactor_eps1"
                          : c->adafactor_eps2 != 1e-3          ? "adafactor_eps2"
                                                               : NULL;
        if (set)
            return t5_errf(err, n, T5_EXIT_USAGE,
                           "%s is set but the optimizer is %s: the adafactor_* keys are options of --optim adafactor",
                           set, ds_opt ? "the DeepSpeed config's" : "not Adafactor");
        return 0;
    }
    if (c->adafactor_warmup_init && !c->adafactor_relative_step)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "adafactor_warmup_init true requires adafactor_relative_step true (transformers' Adafactor: "
                       "`warmup_init=True` requires `relative_step=True`)");
    if (c->adafactor_relative_step)
        add_note(c, "adafactor_relative_step: Adafactor's own step size min(%s, 1/sqrt(step)) replaces learning_rate "
                    "and the LR schedule (transformers' Adafactor(lr=None, relative_step=True))",
                 c->adafactor_warmup_init ? "1e-6*step" : "1e-2");
    return 0;
}

// TrainingArguments._validate_args: with the steps strategy a value is non-zero, and above 1 a whole number (below 1
// it is a ratio of the total steps, turned into steps by the trainer once it knows them: trainer_interval_steps)
static int check_interval_steps(const RunConfig* c, char* err, size_t n) {
    const struct { const char* key; int strategy; double v; } k[] = {
        {"logging_steps", c->logging_strategy, c->logging_steps},
        {"eval_steps", c->evaluation_strategy, c->eval_steps},
        {"save_steps", c->save_strategy, c->save_steps},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(k); i++) {
        if (k[i].strategy != STRATEGY_STEPS || isnan(k[i].v)) continue;  // (eval_steps null: logging_steps's)
        if (k[i].v == 0)
            return t5_errf(err, n, T5_EXIT_USAGE, "%s strategy steps requires a non-zero --%s", k[i].key, k[i].key);
        if (k[i].v > 1 && k[i].v != floor(k[i].v))
            return t5_errf(err, n, T5_EXIT_USAGE, "--%s must be an integer if bigger than 1: %g", k[i].key, k[i].v);
    }
    return 0;
}

int config_resolve(RunConfig* c, char* err, size_t n) {
    c->num_notes = 0;
    config_foreign_notes(c);
    if (c->world_size < 1) c->world_size = 1;
    const int kdt = config_key_index("do_train"), kde = config_key_index("do_eval"),
              kdp = config_key_index("do_predict");
    if (!c->do_train && !c->do_eval && !c->do_predict && c->src[kdt] == CONFIG_SRC_DEFAULT &&
        c->src[kde] == CONFIG_SRC_DEFAULT && c->src[kdp] == CONFIG_SRC_DEFAULT) {
        c->do_train = true;  // the short form `t5train --model t5-3b --dataset wmt16-ro-en` trains
        c->src[kdt] = CONFIG_SRC_DERIVED;
        add_note(c, "none of do_train/do_eval/do_predict given: do_train implied");
    }
    if (c->zero_plan[0] && strcmp(c->zero_plan, "auto") != 0)
        return t5_errf(err, n, T5_EXIT_USAGE, "zero_plan \"%s\": the one value is \"auto\" (the memory planner)",
                       c->zero_plan);
    if (!c->model_name_or_path[0])
        return t5_errf(err, n, T5_EXIT_USAGE, "model_name_or_path is required (--model_name_or_path NAME|DIR or --model)");
    if (!c->output_dir[0]) return t5_errf(err, n, T5_EXIT_USAGE, "output_dir must not be empty");
    if (c->fp16 && c->bf16)
        return t5_errf(err, n, T5_EXIT_USAGE, "fp16 and bf16 are both true (at most one of them can be on)");
    if (!c->dataset_name[0] && !c->train_file[0] && !c->validation_file[0] && !c->test_file[0])
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "no data: give --dataset_name (e.g. wmt16 with --dataset_config_name ro-en) or "
                    "--train_file/--validation_file/--test_file");
    if (c->do_train && !c->dataset_name[0] && !c->train_file[0])
        return t5_errf(err, n, T5_EXIT_USAGE, "do_train needs --dataset_name or --train_file");
    if (!c->source_lang[0] || !c->target_lang[0])
        return t5_errf(err, n, T5_EXIT_USAGE, "source_lang and target_lang are required (e.g. --source_lang en --target_lang ro)");
    if (!c->source_prefix_set) {
        // T5 was pre-trained with task prefixes; HF's translation example passes
        // "translate English to Romanian: " for en->ro. We make that the default for T5 models
        // (an explicit "" turns it off) instead of HF's warning.
        static const char* const LANG_NAMES[][2] = {{"en", "English"}, {"ro", "Romanian"}, {"de", "German"},
                                                      {"fr", "French"}};
        const char *sn = NULL, *tn = NULL;
        for (size_t i = 0; i < T5_ARRAY_LEN(LANG_NAMES); i++) {
            if (!strcmp(c->source_lang, LANG_NAMES[i][0])) sn = LANG_NAMES[i][1];
            if (!strcmp(c->target_lang, LANG_NAMES[i][0])) tn = LANG_NAMES[i][1];
        }
        if (sn && tn) {
            snprintf(c->source_prefix, sizeof c->source_prefix, "translate %s to %s: ", sn, tn);
            c->source_prefix_set = true;
            c->src[config_key_index("source_prefix")] = CONFIG_SRC_DERIVED;
        }
    }
    if (c->evaluation_strategy != STRATEGY_NO && !c->do_eval) {
        c->do_eval = true;  // HF: an evaluation strategy turns do_eval on
        c->src[kde] = CONFIG_SRC_DERIVED;
    }
    if (c->adafactor && c->optim != OPTIM_ADAFACTOR) {
        c->optim = OPTIM_ADAFACTOR;
        c->src[config_key_index("optim")] = CONFIG_SRC_DERIVED;
    }
    if (check_adafactor_options(c, err, n)) return -1;
    // null fallbacks (run_translation / TrainingArguments)
    derive_int(c, "val_max_target_length", c->max_target_length);
    if (c->val_max_target_length < 0) c->val_max_target_length = c->max_target_length;
    if (c->generation_max_length < 0) {
        c->generation_max_length = c->val_max_target_length;
        c->src[config_key_index("generation_max_length")] = CONFIG_SRC_DERIVED;
    }
    if (c->num_beams < 0) {
        c->num_beams = c->generation_num_beams > 0 ? c->generation_num_beams : 1;
        c->src[config_key_index("num_beams")] = CONFIG_SRC_DERIVED;
    }
    // TrainingArguments.__post_init__: eval_steps null or 0 under the steps strategy takes logging_steps, which must
    // then be non-zero; the checks of _validate_args come after
    if ((isnan(c->eval_steps) || c->eval_steps == 0) && c->evaluation_strategy == STRATEGY_STEPS) {
        if (!(c->logging_steps > 0))
            return t5_errf(err, n, T5_EXIT_USAGE,
                           "evaluation strategy steps requires either non-zero --eval_steps or --logging_steps");
        c->eval_steps = c->logging_steps;
        c->src[config_key_index("eval_steps")] = CONFIG_SRC_DERIVED;
    }
    int rc_steps = check_interval_steps(c, err, n);
    if (rc_steps) return rc_steps;
    if (c->data_seed < 0) {
        c->data_seed = c->seed;
        c->src[config_key_index("data_seed")] = CONFIG_SRC_DERIVED;
    }
    const DsMonitor* tb = &c->ds.tensorboard;
    if (c->has_deepspeed && tb->enabled && !c->logging_dir[0]) {  // DeepSpeed's monitor folder: output_path/job_name
        char* dir = tb->output_path[0] ? t5_path_join(tb->output_path, tb->job_name) : strdup_check(tb->job_name);
        bool fits = strlen(dir) < sizeof c->logging_dir;
        if (fits) snprintf(c->logging_dir, sizeof c->logging_dir, "%s", dir);
        free(dir);
        if (!fits)
            return t5_errf(err, n, T5_EXIT_USAGE, "deepspeed.tensorboard: output_path/job_name is longer than %zu bytes",
                           sizeof c->logging_dir - 1);
        c->src[config_key_index("logging_dir")] = CONFIG_SRC_DERIVED;
    }
    if (!c->logging_dir[0]) {  // HF 4.x default_logdir(): output_dir/runs/<date>_<host>
        report_default_logging_dir(c->logging_dir, sizeof c->logging_dir, c->output_dir, time(NULL));
        c->src[config_key_index("logging_dir")] = CONFIG_SRC_DERIVED;
    }
    {  // report_to: "all" becomes what this build has; unknown names are an error (src/report/report_to.h)
        unsigned mask;
        char rerr[512];
        if (report_to_parse(c->report_to, &mask, rerr, sizeof rerr)) return t5_errf(err, n, T5_EXIT_USAGE, "%s", rerr);
        if (c->has_deepspeed && tb->enabled && !(mask & REPORT_TENSORBOARD)) {
            mask |= REPORT_TENSORBOARD;
            add_note(c, "deepspeed.tensorboard: TensorBoard events in %s, with HF's tags (report_to gains tensorboard)",
                     c->logging_dir);
        }
        if (c->has_deepspeed && c->ds.csv_monitor.enabled && !(mask & REPORT_CSV)) {
            mask |= REPORT_CSV;
            add_note(c, "deepspeed.csv_monitor: output_dir/log_history.csv, HF's keys as columns (DeepSpeed writes one "
                        "file per metric under output_path/job_name)");
        }
        char norm[sizeof c->report_to];
        report_to_format(norm, sizeof norm, mask);
        if (strcmp(norm, c->report_to) != 0) {
            snprintf(c->report_to, sizeof c->report_to, "%s", norm);
            c->src[config_key_index("report_to")] = CONFIG_SRC_DERIVED;
        }
    }
    if (c->warmup_steps > 0 && c->warmup_ratio > 0)
        add_note(c, "both warmup_steps and warmup_ratio given: warmup_steps wins (as HF)");

    find_model(c);
    if (c->do_train && c->max_steps <= 0 && !(c->num_train_epochs > 0))
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "do_train with max_steps %lld and num_train_epochs %g trains nothing (give --max_steps N or "
                       "--num_train_epochs N, N > 0)", (long long)c->max_steps, c->num_train_epochs);
    if (c->do_train) compute_training_steps(c);
    if (c->has_deepspeed) {
        int rc = resolve_deepspeed(c, err, n);
        if (rc) return rc;
    }
    // "auto" micro-batch / checkpointing: the memory planner's (issue 17), nothing else decides them
    const char* planned[] = {"per_device_train_batch_size", "gradient_checkpointing"};
    for (int i = 0; i < 2; i++)
        if (c->src[config_key_index(planned[i])] == CONFIG_SRC_AUTO && strcmp(c->zero_plan, "auto") != 0)
            return t5_errf(err, n, T5_EXIT_USAGE,
                           "%s \"auto\" needs the memory planner: add --zero_plan auto (or \"stage\": \"auto\" in "
                           "zero_optimization), or give a value", planned[i]);
    c->resolved = true;
    return 0;
}

int config_check_output_dir(const RunConfig* c, char* err, size_t n) {
    if (t5_path_exists(c->output_dir) && !t5_is_dir(c->output_dir))
        return t5_errf(err, n, T5_EXIT_USAGE, "output_dir %s exists and is not a directory", c->output_dir);
    if (!c->do_train || c->overwrite_output_dir || !t5_is_dir(c->output_dir)) return 0;
    DIR* d = opendir(c->output_dir);
    if (!d) return t5_errf(err, n, T5_EXIT_USAGE, "cannot read output_dir %s: %s", c->output_dir, strerror(errno));
    bool empty = true;
    struct dirent* e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            empty = false;
            break;
        }
    closedir(d);
    if (!empty)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "Output directory (%s) already exists and is not empty. Use --overwrite_output_dir to overcome.",
                    c->output_dir);
    return 0;
}

// ----------------------------------------------------------------------------
// what this build implements: THE place later issues flip on as their engines land

static const struct {
    bool train;           // trainer loop (forward/backward/optimizer)
    bool eval;            // eval loss + generation + BLEU
    bool predict;         // predictions file
    int max_zero_stage;   // highest ZeRO stage the engine runs (-1: no engine)
    bool offload_cpu;     // offload_optimizer / offload_param device cpu
    bool offload_nvme_optimizer;  // offload_optimizer device nvme (src/nvme/, src/zero/part_nvme.c)
    bool offload_nvme_param;
    bool resume;          // resume_from_checkpoint
} T5_BUILD_FEATURES = {
    .train = true,         // src/train/trainer.c (single GPU, ZeRO stage 0)
    .eval = true,          // eval loss, + generation and BLEU with predict_with_generate (src/eval/evaluate.c)
    .predict = true,       // test split: predict_results.json, generated_predictions.txt
    .max_zero_stage = 3,
    .offload_cpu = true,
    .offload_nvme_optimizer = true,  // Adam m, v of the offloaded units in a swap file (docs/zero.md "NVMe")
    .offload_nvme_param = false,
    .resume = true,        // checkpoint-<step> dirs written by src/train/trainer.c
};

double config_clip_norm(const RunConfig* c) { return c->has_deepspeed ? c->ds.gradient_clipping : c->max_grad_norm; }

int config_check_implemented(const RunConfig* c, char* err, size_t n) {
    char list[1024] = "";
    int count = 0;
#define MISSING(...)                                                                          \
    do {                                                                                      \
        size_t l_ = strlen(list);                                                             \
        if (l_ + 2 < sizeof list) {                                                           \
            snprintf(list + l_, sizeof list - l_, "%s", count ? ", " : "");                   \
            l_ = strlen(list);                                                                \
            snprintf(list + l_, sizeof list - l_, __VA_ARGS__);                               \
        }                                                                                     \
        count++;                                                                              \
    } while (0)
    if (c->do_train && !T5_BUILD_FEATURES.train) MISSING("training (do_train)");
    if (c->do_eval && !T5_BUILD_FEATURES.eval) MISSING("evaluation (do_eval)");
    if (c->do_predict && !T5_BUILD_FEATURES.predict) MISSING("prediction (do_predict)");
    const DsZero* z = &c->ds.zero_optimization;
    if (c->has_deepspeed && z->stage > T5_BUILD_FEATURES.max_zero_stage)
        MISSING("ZeRO stage %lld (deepspeed.zero_optimization.stage)", (long long)z->stage);
    int devs[2] = {z->offload_optimizer.device, z->offload_param.device};
    const char* what[2] = {"offload_optimizer", "offload_param"};
    for (int i = 0; i < 2; i++) {
        if (!c->has_deepspeed) break;
        if (devs[i] == OFFLOAD_CPU && !T5_BUILD_FEATURES.offload_cpu) MISSING("%s device cpu", what[i]);
        const bool nvme_ok = i == 0 ? T5_BUILD_FEATURES.offload_nvme_optimizer : T5_BUILD_FEATURES.offload_nvme_param;
        // offload_param while training in 16 bits with both offloads and no accumulation (the 14-byte layout,
        // docs/zero.md): the 16-bit partitions' host buffer is also where the offloaded gradients land, so that
        // buffer on disk would free no host memory; the reason goes with the refusal there
        const bool shared = i == 1 && c->do_train && (c->fp16 || c->bf16) && c->gradient_accumulation_steps <= 1 &&
                            z->offload_optimizer.device != OFFLOAD_NONE;
        if (devs[i] == OFFLOAD_NVME && !nvme_ok)
            MISSING("%s device nvme%s", what[i],
                    shared ? " (in this run the 16-bit parameters' host buffer also takes the offloaded gradients, so on "
                             "disk it would save no host memory; use device cpu)"
                           : "");
    }
    if (c->has_deepspeed && z->offload_optimizer.device == OFFLOAD_NVME && c->optim == OPTIM_ADAFACTOR &&
        !c->ds.optimizer.present)
        MISSING("offload_optimizer device nvme with Adafactor (its state stays in host memory: use device cpu)");
    if (c->has_deepspeed && c->ds.aio.use_gds)
        MISSING("aio.use_gds true (GPUDirect Storage: no cuFile here; the NVMe optimizer state is read into host memory "
                "for the CPU step, which is where it is used)");
    // zero_optimization keys whose other value the engine does not have (docs/zero.md, "Every key")
    if (c->has_deepspeed && z->stage > 0) {
        if (z->elastic_checkpoint) MISSING("zero_optimization.elastic_checkpoint true (checkpoints are whole tensors)");
        if (!z->load_from_fp32_weights)
            MISSING("zero_optimization.load_from_fp32_weights false (resume always restores the fp32 master)");
        if (z->round_robin_gradients) MISSING("zero_optimization.round_robin_gradients true");
    }
    // DeepSpeed's gradient averaging knobs. One rank reduces nothing: any value is a no-op there. Several ranks,
    // stage 0 (DeepSpeed's engine.allreduce_bucket): prescale_gradients true divides by the world size, then sums
    // (the factor unused): t5train's order (zero_dp_allreduce_mean); false divides by the factor, sums, then scales
    // by factor / world: t5train's order when the factor is the world size, the default 1.0 the same mean rounded
    // in another place (docs/multi_gpu.md); other factors are not built. ZeRO stages 1-3: DeepSpeed asserts both
    // away ("not yet supported with reduce scatter enabled").
    if (c->has_deepspeed && c->world_size > 1) {
        const double f = c->ds.gradient_predivide_factor;
        const bool zero = z->stage > 0;
        if (zero && c->ds.prescale_gradients)
            MISSING("prescale_gradients true at ZeRO stage %d on %d ranks (DeepSpeed refuses it there too)",
                    (int)z->stage, c->world_size);
        else if (f != 1.0 && (zero || (!c->ds.prescale_gradients && f != (double)c->world_size)))
            MISSING("gradient_predivide_factor %g on %d ranks (%s)", f, c->world_size,
                    zero ? "DeepSpeed refuses it at ZeRO stages 1-3 too"
                         : "stage 0 divides by the world size before the all-reduce; 1.0 or the world size only");
    }
    if (c->has_deepspeed && c->ds.optimizer.present && c->ds.optimizer.type != DS_OPTIM_ADAM &&
        c->ds.optimizer.type != DS_OPTIM_ADAMW) {
        char name[64];
        enum_choice(&CONFIG_KEYS[config_key_index("deepspeed.optimizer.type")], c->ds.optimizer.type, name,
                    sizeof name);
        MISSING("optimizer type %s (only Adam/AdamW)", name);
    }
    if ((!c->has_deepspeed || !c->ds.optimizer.present) && c->optim != OPTIM_ADAMW_TORCH &&
        c->optim != OPTIM_ADAMW_HF && c->optim != OPTIM_ADAMW_TORCH_FUSED) {
        char name[64];
        enum_choice(&CONFIG_KEYS[config_key_index("optim")], c->optim, name, sizeof name);
        if (c->optim == OPTIM_ADAFACTOR) {
            // every stage and any number of ranks: stage 0 the trainer's fused GPU Adafactor (cuda/adafactor.cu),
            // stages 1-3 the engine's (src/zero/step_adafactor.c: the same plan on the GPU units, cpu_adafactor on
            // the offloaded ones; a tensor cut across ranks has its row/column sums all-reduced: ada_split.h)
        } else {
            MISSING("optim %s (only AdamW and Adafactor)", name);
        }
    }
    if (c->has_deepspeed && c->ds.scheduler.present && c->ds.scheduler.type != DS_SCHED_WARMUP_LR &&
        c->ds.scheduler.type != DS_SCHED_WARMUP_DECAY_LR)
        MISSING("DeepSpeed scheduler other than WarmupLR/WarmupDecayLR");
    if (c->resume_from_checkpoint[0] && !T5_BUILD_FEATURES.resume) MISSING("resume_from_checkpoint");
    // ZenFlow in the engine (src/zero/zenflow.c; docs/zero.md "ZenFlow in the engine"): one rank, stages 1-3 with
    // offload_optimizer cpu and no offload_param, AdamW, numeric update_interval (checkpoints and resume: zenflow.c)
    if (c->has_deepspeed && z->zenflow.present) {
        const DsZenflow* zf = &z->zenflow;
        const char* k = "zero_optimization.zenflow";
        if (zf->update_interval == CONFIG_INT_AUTO)
            MISSING("%s.update_interval \"auto\" (give a number of micro-steps)", k);
        if (zf->overlap_step) MISSING("%s.overlap_step true (the CPU update in a worker)", k);
        if (zf->offload) MISSING("%s.offload true (the selective optimizer's state in host memory)", k);
        if (c->world_size > 1) MISSING("%s with several ranks (world size %d)", k, c->world_size);
        if (z->offload_param.device != OFFLOAD_NONE) MISSING("%s with offload_param (ZeRO stage 3)", k);
        if (z->offload_optimizer.device == OFFLOAD_NVME) MISSING("%s with offload_optimizer device nvme", k);
        if (z->offload_optimizer.ratio < 1.0) MISSING("%s with offload_optimizer.ratio below 1", k);
        if (c->optim == OPTIM_ADAFACTOR && !c->ds.optimizer.present) MISSING("%s with Adafactor", k);
    }
#undef MISSING
    if (count) return t5_errf(err, n, T5_EXIT_USAGE, "not implemented yet: %s", list);
    return 0;
}
