/*
 * planner_auto.c: the automatic plan (issue 17 item 3): `"zero_optimization": {"stage": "auto"}` or
 * `--zero_plan auto`. The planner's rows over a fine ratio grid, fitted against this GPU's free memory and the
 * host memory available with a safety margin; the fastest row that fits becomes the run's ZeroOptions, and the
 * faster rows are listed with the reason each was rejected.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"
#include "../base/common.h"
#include "../zero/host_mem.h"

#define AUTO_RATIO_STEP 0.05
#define AUTO_MARGIN 0.05

int planner_auto_choose(const PlanInput* in, bool have_gpu, size_t gpu_free, size_t host_avail, double margin,
                        PlanRow* rows, int cap, int* nrows, FILE* log, char* err, size_t errlen) {
    int n = planner_table(in, AUTO_RATIO_STEP, rows, cap, err, errlen);
    if (n < 0) return -1;
    *nrows = n;
    planner_fit(rows, n, have_gpu, gpu_free, host_avail, margin);
    const int best = planner_choose(rows, n);
    if (!log) return best;
    char name[96];
    if (best >= 0) {
        planner_row_name(&rows[best], name, sizeof name);
        fprintf(log, "zero plan auto: %s: predicted %.1f GiB GPU of %.1f GiB free, %.1f GiB host of %.1f GiB "
                     "available, %.3f s/step\n",
                name, rows[best].g_total / 1073741824.0, gpu_free / 1073741824.0, rows[best].h_total / 1073741824.0,
                host_avail / 1073741824.0, rows[best].step_s);
    }
    // the faster plans, each once per (stage, offloads) family: the fastest of the family that was rejected
    for (int i = 0; i < n; i++) {
        const PlanRow* r = &rows[i];
        if (r->fits || (best >= 0 && !(r->step_s >= 0 && r->step_s < rows[best].step_s - 1e-9))) continue;
        bool shown = false;
        for (int j = 0; j < i; j++)
            if (!rows[j].fits && rows[j].stage == r->stage && rows[j].off_opt == r->off_opt &&
                rows[j].off_param == r->off_param && (best < 0 || rows[j].step_s < rows[best].step_s - 1e-9))
                shown = true;
        if (shown && r->off_opt) continue;
        planner_row_name(r, name, sizeof name);
        fprintf(log, "zero plan auto: rejected %s (%.3f s/step): %s\n", name, r->step_s, r->why);
    }
    return best;
}

void planner_auto_apply(PlanInput* in, ZeroOptions* zo) {
    static PlanRow rows[256];
    char err[512];
    bool have_gpu = false;
    size_t gpu_free = 0, tot = 0;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 && cudaMemGetInfo(&gpu_free, &tot) == cudaSuccess)
        have_gpu = true;
    else
        (void)cudaGetLastError();
    if (!have_gpu)
        t5_die(T5_EXIT_FAILURE, "zero plan auto needs a CUDA GPU to plan against and none is usable (`t5train estimate "
                                "--gpu_mem GIB ...` shows the choice for a given GPU)");
    const size_t host = host_mem_available();
    in->knobs = *zo;
    int n = 0;
    int best = planner_auto_choose(in, have_gpu, gpu_free, host, AUTO_MARGIN, rows, 256, &n, stdout, err, sizeof err);
    if (best < -1 || (best < 0 && n == 0)) t5_die(T5_EXIT_USAGE, "zero plan auto: %s", err);
    if (best < 0) {
        // the smallest GPU need among the rows whose host part fits, for the sentence
        int k = -1;
        for (int i = 0; i < n; i++)
            if (rows[i].h_total + PLANNER_HOST_MARGIN_BYTES <= host && (k < 0 || rows[i].g_total < rows[k].g_total)) k = i;
        char name[96] = "none";
        if (k >= 0) planner_row_name(&rows[k], name, sizeof name);
        t5_die_hint(T5_EXIT_FAILURE, "lower the batch or the lengths, add --gradient_checkpointing, or use a larger GPU",
                    "zero plan auto: no ZeRO plan fits this machine (%.1f GiB GPU free, %.1f GiB host available); the "
                    "smallest that fits the host is %s at %.1f GiB of GPU", gpu_free / 1073741824.0,
                    host / 1073741824.0, name, k >= 0 ? rows[k].g_total / 1073741824.0 : 0.0);
    }
    const PlanRow* r = &rows[best];
    zo->stage = r->stage;
    zo->offload_optimizer = r->off_opt;
    zo->ratio = r->off_opt ? r->ratio : 1.0;
    zo->offload_param = r->off_param;
    if (r->off_opt && !zo->optimizer_pin_memory) {
        zo->optimizer_pin_memory = true;
        printf("zero plan auto: offload_optimizer.pin_memory true (the measured rates are for pinned buffers)\n");
    }
    if (r->off_param) zo->param_pin_memory = zo->param_pin_memory || zo->optimizer_pin_memory;
    if (zo->stage == 3 && !zo->overlap_comm) zo->overlap_comm = true;  // DeepSpeed's stage 3 default
    fflush(stdout);
}

void planner_auto_run(const RunConfig* c, TrainerArgs* a) {
    PlanInput in;
    memset(&in, 0, sizeof in);
    in.model = a->model;
    in.dtype = a->dtype;
    in.grad_dtype = a->grad_dtype;
    // the trainer's largest batch (training's, evaluation's only when it evaluates) and the length caps (the
    // trainer sizes the arena for the longest example within them: the caps are an upper bound)
    in.batch = (int)T5_MAX(a->do_train ? a->data.train_batch_size : 1,
                           (a->do_eval || a->do_predict) ? a->data.eval_batch_size : 1);
    const DataOptions* o = &a->data;
    in.src_len = (o->max_source_length + 7) / 8 * 8;
    in.tgt_len = (T5_MAX(o->max_target_length, o->val_max_target_length) + 7) / 8 * 8;
    in.gradient_checkpointing = a->gradient_checkpointing;
    in.grad_accum_steps = (int)a->gradient_accumulation_steps;
    in.gpus_per_node = 1;
    in.num_nodes = 1;
    int ndev = 0;
    if (c->dry_run && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)) {
        (void)cudaGetLastError();
        printf("dry run: zero plan auto is chosen at start against the GPU's free memory (no GPU here)\n");
        return;
    }
    planner_auto_apply(&in, &a->zero);
}
