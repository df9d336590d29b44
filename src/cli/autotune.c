/*
 * autotune.c: DeepSpeed's autotuning section onto the memory planner (what and why: autotune.h).
 */
#include "autotune.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "../base/common.h"

enum { METRIC_THROUGHPUT = 0, METRIC_LATENCY, METRIC_FLOPS };  // the table's "throughput|latency|flops"

int autotune_bounds(const RunConfig* c, int* lo, int* hi, char* err, size_t n) {
    const DsAutotuning* at = &c->ds.autotuning;
    const int64_t per = (c->gradient_accumulation_steps > 0 ? c->gradient_accumulation_steps : 1) *
                        (int64_t)(c->world_size > 0 ? c->world_size : 1);  // global batch per micro-batch row
    int64_t h = at->max_train_micro_batch_size_per_gpu, l = at->min_train_micro_batch_size_per_gpu;
    if (at->max_train_batch_size > 0 && at->max_train_batch_size / per < h) h = at->max_train_batch_size / per;
    if ((at->min_train_batch_size + per - 1) / per > l) l = (at->min_train_batch_size + per - 1) / per;
    if (h < 1)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "deepspeed.autotuning.max_train_batch_size %lld is below gradient_accumulation_steps x world "
                       "size = %lld (the global batch of one row per GPU)",
                       (long long)at->max_train_batch_size, (long long)per);
    if (l > h)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "deepspeed.autotuning: no micro-batch lies within the bounds (min %lld, max %lld per GPU, from "
                       "min/max_train_micro_batch_size_per_gpu and min/max_train_batch_size with gradient_accumulation_steps "
                       "x world size = %lld)",
                       (long long)l, (long long)h, (long long)per);
    *lo = (int)l;
    *hi = (int)h;
    return 0;
}

int autotune_resolve(RunConfig* c, char* err, size_t n) {
    if (!c->has_deepspeed || !c->ds.autotuning.enabled) return 0;
    const DsAutotuning* at = &c->ds.autotuning;
    if (at->metric == METRIC_LATENCY)
        return t5_errf(err, n, T5_EXIT_USAGE,
                       "deepspeed.autotuning.metric \"latency\": not implemented: t5train's planner ranks plans by "
                       "predicted samples/s (\"throughput\", or \"flops\", the same ranking at a fixed shape)");
    if (!c->do_train)
        return t5_errf(err, n, T5_EXIT_USAGE, "deepspeed.autotuning.enabled needs do_train (it plans the training batch)");
    int lo, hi;
    int rc = autotune_bounds(c, &lo, &hi, err, n);
    if (rc) return rc;
    if (strcmp(c->zero_plan, "auto") != 0) {
        snprintf(c->zero_plan, sizeof c->zero_plan, "auto");
        c->src[config_key_index("zero_plan")] = CONFIG_SRC_DERIVED;
    }
    add_note(c, "deepspeed.autotuning: the memory planner predicts the plan (ZeRO stage, offloads, micro-batch in "
                "%d..%d) instead of running trials; the run trains with it and writes %s/ds_config_optimal.json",
             lo, hi, at->results_dir);
    return 0;
}

void autotune_search(const RunConfig* raw, PlanSearch* s) {
    if (!raw->has_deepspeed || !raw->ds.autotuning.enabled) return;
    int lo = 1, hi = PLANNER_AUTO_MAX_BATCH;
    char err[512];
    if (autotune_bounds(raw, &lo, &hi, err, sizeof err)) return;  // config_resolve has refused it already
    s->batch_auto = true;
    s->min_batch = lo;
    s->max_batch = hi;
}

// writes text to dir/name (a temporary name, then renamed); 0 or -1
static int write_text(const char* dir, const char* name, const char* text) {
    char* path = t5_path_join(dir, name);
    char* tmp = malloc_check(strlen(path) + 32);
    sprintf(tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "w");
    int rc = f && fputs(text, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0) rc = -1;
    if (rc == 0 && rename(tmp, path) != 0) rc = -1;
    if (rc) remove(tmp);
    free(tmp);
    free(path);
    return rc;
}

int autotune_write_results(const RunConfig* c, const ZeroOptions* zo, int batch, bool ckpt, double samples_s,
                           int argc, char** argv, char* err, size_t n) {
    const DsAutotuning* at = &c->ds.autotuning;
    const char* dir = at->results_dir;
    if (t5_mkdir_p(dir) != 0)
        return t5_errf(err, n, T5_EXIT_FAILURE, "deepspeed.autotuning.results_dir %s: %s", dir, strerror(errno));
    // ds_config_optimal.json: the run's DeepSpeed config as resolved, with the plan's values, without autotuning
    json_t* root = config_to_json(c);
    json_t* ds = json_incref(json_object_get(root, "deepspeed"));
    json_decref(root);
    if (!json_is_object(ds)) {
        json_decref(ds);
        ds = json_object();
    }
    json_object_del(ds, "autotuning");
    const int64_t gas = c->gradient_accumulation_steps > 0 ? c->gradient_accumulation_steps : 1;
    json_object_set_new(ds, "train_micro_batch_size_per_gpu", json_integer(batch));
    json_object_set_new(ds, "gradient_accumulation_steps", json_integer(gas));
    json_object_set_new(ds, "train_batch_size", json_integer((json_int_t)batch * gas * c->world_size));
    json_t* z = json_object_get(ds, "zero_optimization");
    if (!json_is_object(z)) {
        z = json_object();
        json_object_set_new(ds, "zero_optimization", z);
    }
    json_object_set_new(z, "stage", json_integer(zo->stage));
    json_t* oo = json_object();
    json_object_set_new(oo, "device", json_string(zo->stage > 0 && zo->offload_optimizer ? "cpu" : "none"));
    if (zo->stage > 0 && zo->offload_optimizer) {
        json_object_set_new(oo, "pin_memory", json_boolean(zo->optimizer_pin_memory));
        json_object_set_new(oo, "ratio", json_real(zo->ratio));
    }
    json_object_set_new(z, "offload_optimizer", oo);
    json_t* op = json_object();
    json_object_set_new(op, "device", json_string(zo->offload_param ? "cpu" : "none"));
    if (zo->offload_param) json_object_set_new(op, "pin_memory", json_boolean(zo->param_pin_memory));
    json_object_set_new(z, "offload_param", op);
    char* text = json_dumps(ds, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    json_decref(ds);
    int rc = text ? write_text(dir, "ds_config_optimal.json", text) : -1;
    free(text);
    // cmd_optimal.txt: this command with the optimal config and batch (later flags win)
    char* optimal = t5_path_join(dir, "ds_config_optimal.json");
    size_t cap = 256 + strlen(optimal);
    for (int i = 0; i < argc; i++) cap += strlen(argv[i]) + 1;
    char* cmd = malloc_check(cap);
    size_t k = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--deepspeed") && i + 1 < argc) {  // replaced below
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--deepspeed=", 12)) continue;
        k += (size_t)snprintf(cmd + k, cap - k, "%s%s", k ? " " : "", argv[i]);
    }
    snprintf(cmd + k, cap - k, " --deepspeed %s --per_device_train_batch_size %d%s\n", optimal, batch,
             ckpt ? " --gradient_checkpointing" : "");
    if (rc == 0) rc = write_text(dir, "cmd_optimal.txt", cmd);
    free(cmd);
    free(optimal);
    // summary.txt: DeepSpeed's table, one row (the planner's choice; no experiments ran)
    char name[96], sum[1024];
    snprintf(name, sizeof name, "z%d_gas%lld_tmbspg%d%s%s", zo->stage, (long long)gas, batch,
             zo->stage > 0 && zo->offload_optimizer ? "_offload_optimizer" : "", zo->offload_param ? "_offload_param" : "");
    snprintf(sum, sizeof sum,
             "| tuning_space | num_experiments | best_metric_val | best_exp_name |\n"
             "|:-------------|----------------:|----------------:|:--------------|\n"
             "| global       | 0 | %.2f | %s |\n\n"
             "Predicted by t5train's memory planner (best_metric_val: predicted samples/s per GPU, metric %s); no "
             "experiments were run.\n",
             samples_s, name, at->metric == METRIC_FLOPS ? "flops (ranked as throughput)" : "throughput");
    if (rc == 0) rc = write_text(dir, "summary.txt", sum);
    if (rc)
        return t5_errf(err, n, T5_EXIT_FAILURE, "deepspeed.autotuning.results_dir %s: cannot write its files: %s", dir,
                       strerror(errno));
    printf("autotuning: %s is the optimal setup predicted by the memory planner (%.2f samples/s per GPU); wrote "
           "%s/ds_config_optimal.json, cmd_optimal.txt and summary.txt\n",
           name, samples_s, dir);
    return 0;
}
