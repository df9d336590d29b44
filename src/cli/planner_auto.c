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
#include "autotune.h"
#include "../base/common.h"
#include "../launch/launch_env.h"
#include "../zero/host_mem.h"

#define AUTO_RATIO_STEP 0.05

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
        char st[48] = "";  // an evaluation-only job has no step time (planner.c)
        if (rows[best].step_s >= 0) snprintf(st, sizeof st, ", %.3f s/step", rows[best].step_s);
        fprintf(log, "zero plan auto: %s: predicted %.1f GiB GPU of %.1f GiB free, %.1f GiB host of %.1f GiB "
                     "available%s\n",
                name, rows[best].g_total / 1073741824.0, gpu_free / 1073741824.0, rows[best].h_total / 1073741824.0,
                host_avail / 1073741824.0, st);
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
        char st[48] = "";
        if (r->step_s >= 0) snprintf(st, sizeof st, " (%.3f s/step)", r->step_s);
        fprintf(log, "zero plan auto: rejected %s%s: %s\n", name, st, r->why);
    }
    return best;
}

// ---- the micro-batch and gradient checkpointing (planner.h)

static double samples_s(const PlanRow* r, int batch) { return r->step_s > 0 ? batch / r->step_s : 0; }

// the fastest plan at (batch, ckpt); -1: none fits (rows[] hold the table either way)
static int best_at(const PlanInput* in, int batch, bool ckpt, bool have_gpu, size_t gpu_free, size_t host_avail,
                   double margin, PlanRow* rows, int* n, char* err, size_t errlen) {
    PlanInput x = *in;
    x.batch = batch;
    x.gradient_checkpointing = ckpt;
    *n = 0;
    int k = planner_auto_choose(&x, have_gpu, gpu_free, host_avail, margin, rows, 256, n, NULL, err, errlen);
    return k < 0 && *n == 0 ? -2 : k;
}

// is (a) better than (b): more samples/s; ties: checkpointing off, then the larger batch
static bool better(const PlanPick* a, const PlanPick* b) {
    if (b->batch == 0) return true;
    const double tol = 1e-9 * fmax(a->samples_s, b->samples_s);
    if (a->samples_s > b->samples_s + tol) return true;
    if (a->samples_s < b->samples_s - tol) return false;
    if (a->ckpt != b->ckpt) return !a->ckpt;
    return a->batch > b->batch;
}

// the same plan (stage, offloads, ratio) at another batch / checkpointing, fitted: why it does not fit
static void same_plan(const PlanInput* in, const PlanRow* p, int batch, bool ckpt, bool have_gpu, size_t gpu_free,
                      size_t host_avail, double margin, PlanRow* out) {
    PlanInput x = *in;
    x.batch = batch;
    x.gradient_checkpointing = ckpt;
    char err[256];
    if (planner_row(&x, p->stage, p->off_opt, p->off_param, p->ratio, out, err, sizeof err)) {
        snprintf(out->why, sizeof out->why, "%.190s", err);
        out->fits = false;
        return;
    }
    planner_fit(out, 1, have_gpu, gpu_free, host_avail, margin);
}

int planner_auto_search(const PlanInput* in, const PlanSearch* s, bool have_gpu, size_t gpu_free, size_t host_avail,
                        double margin, PlanPick* pick, FILE* log, char* err, size_t errlen) {
    static const int ladder[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112,
                                 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024};
    const int cap = s->batch_auto ? (s->max_batch > 0 ? s->max_batch : PLANNER_AUTO_MAX_BATCH) : in->batch;
    PlanRow* rows = malloc_check(256 * sizeof(PlanRow));
    memset(pick, 0, sizeof *pick);
    PlanPick best_off = {0};  // the best without checkpointing (for the explanation)
    int rc = 1;
    for (int ck = 0; ck < 2; ck++) {
        const bool ckpt = s->ckpt_auto ? ck == 1 : in->gradient_checkpointing;
        if (!s->ckpt_auto && ck == 1) break;
        PlanPick here = {0};
        int n = 0;
        // the ladder (every batch up to 8, then steps), then every batch between the best rung and the next one
        int last_fit = 0, next_after_best = 0;
        for (size_t li = 0; li < T5_ARRAY_LEN(ladder) + 1; li++) {
            int b = !s->batch_auto ? in->batch : li < T5_ARRAY_LEN(ladder) ? T5_MIN(ladder[li], cap) : cap;
            if (s->batch_auto && b < s->min_batch) b = T5_MIN(s->min_batch, cap);
            if (b <= last_fit) {
                if (!s->batch_auto) break;
                continue;
            }
            int k = best_at(in, b, ckpt, have_gpu, gpu_free, host_avail, margin, rows, &n, err, errlen);
            if (k == -2) goto out_err;
            if (k < 0) {
                if (here.batch == last_fit) next_after_best = b;
                break;  // memory grows with the batch: a larger one does not fit either
            }
            PlanPick c = {.batch = b, .ckpt = ckpt, .row = rows[k], .samples_s = samples_s(&rows[k], b)};
            if (here.batch == last_fit && here.batch > 0) next_after_best = b;
            if (better(&c, &here)) here = c;
            last_fit = b;
            if (!s->batch_auto || b >= cap) break;
        }
        if (s->batch_auto && here.batch > 0 && next_after_best > here.batch + 1) {
            const int lo = here.batch + 1;
            for (int b = lo; b < next_after_best; b++) {
                int k = best_at(in, b, ckpt, have_gpu, gpu_free, host_avail, margin, rows, &n, err, errlen);
                if (k == -2) goto out_err;
                if (k < 0) break;
                PlanPick c = {.batch = b, .ckpt = ckpt, .row = rows[k], .samples_s = samples_s(&rows[k], b)};
                if (better(&c, &here)) here = c;
            }
        }
        if (!ckpt) best_off = here;
        if (here.batch > 0 && better(&here, pick)) *pick = here;
    }
    if (pick->batch == 0) {
        // nothing fits: the smallest GPU need among the rows whose host part fits, at the smallest batch
        int n = 0;
        const int b = s->batch_auto ? T5_MAX(s->min_batch, 1) : in->batch;
        const bool ckpt = s->ckpt_auto || in->gradient_checkpointing;
        if (best_at(in, b, ckpt, have_gpu, gpu_free, host_avail, margin, rows, &n, err, errlen) == -2) goto out_err;
        int k = -1;
        for (int i = 0; i < n; i++)
            if (rows[i].h_total + PLANNER_HOST_MARGIN_BYTES <= host_avail && (k < 0 || rows[i].g_total < rows[k].g_total))
                k = i;
        if (k < 0) k = 0;
        pick->batch = b;
        pick->ckpt = ckpt;
        pick->row = rows[k];
        free(rows);
        return 1;
    }
    rc = 0;
    if (log) {
        char name[96];
        planner_row_name(&pick->row, name, sizeof name);
        const PlanRow* r = &pick->row;
        fprintf(log, "zero plan auto: micro-batch %d, gradient checkpointing %s: %s: predicted %.1f GiB GPU of %.1f "
                     "GiB free, %.1f GiB host of %.1f GiB available, %.3f s/step, %.1f samples/s\n",
                pick->batch, pick->ckpt ? "on" : "off", name, r->g_total / 1073741824.0, gpu_free / 1073741824.0,
                r->h_total / 1073741824.0, host_avail / 1073741824.0, r->step_s, pick->samples_s);
        if (s->batch_auto) {
            if (pick->batch >= cap) {
                fprintf(log, "zero plan auto: micro-batch %d is the cap (%d)\n", pick->batch, cap);
            } else {
                PlanRow nx;
                same_plan(in, r, pick->batch + 1, pick->ckpt, have_gpu, gpu_free, host_avail, margin, &nx);
                if (!nx.fits)
                    fprintf(log, "zero plan auto: rejected micro-batch %d with this plan: %s\n", pick->batch + 1, nx.why);
                else
                    fprintf(log, "zero plan auto: micro-batch %d fits only slower plans (fewer samples/s)\n",
                            pick->batch + 1);
            }
        }
        if (s->ckpt_auto && pick->ckpt) {
            PlanRow off;
            same_plan(in, r, pick->batch, false, have_gpu, gpu_free, host_avail, margin, &off);
            fprintf(log, "zero plan auto: rejected the same plan without gradient checkpointing (%.3f s/step): %s\n",
                    off.step_s, off.fits ? "fits, but slower" : off.why);
            if (best_off.batch > 0) {
                planner_row_name(&best_off.row, name, sizeof name);
                fprintf(log, "zero plan auto: the best without checkpointing: micro-batch %d, %s, %.1f samples/s "
                             "(fewer)\n", best_off.batch, name, best_off.samples_s);
            } else {
                fprintf(log, "zero plan auto: without checkpointing no plan fits at micro-batch %d\n",
                        s->batch_auto ? 1 : in->batch);
            }
        } else if (s->ckpt_auto) {
            fprintf(log, "zero plan auto: gradient checkpointing off: the fastest plan fits without it\n");
        }
        // the faster plan families rejected at the chosen batch
        PlanInput x = *in;
        x.batch = pick->batch;
        x.gradient_checkpointing = pick->ckpt;
        int n = 0;
        char e2[256];
        planner_auto_choose(&x, have_gpu, gpu_free, host_avail, margin, rows, 256, &n, log, e2, sizeof e2);
    }
    free(rows);
    return rc;
out_err:
    free(rows);
    return -1;
}

void planner_pick_apply(const PlanPick* pick, ZeroOptions* zo, FILE* log) {
    const PlanRow* r = &pick->row;
    zo->stage = r->stage;
    zo->offload_optimizer = r->off_opt;
    zo->ratio = r->off_opt ? r->ratio : 1.0;
    zo->offload_param = r->off_param;
    if (!r->off_opt) zo->nvme_path[0] = 0;  // offload_optimizer nvme's swap file only where the plan offloads
    if (r->off_opt && !zo->optimizer_pin_memory) {
        zo->optimizer_pin_memory = true;
        if (log) fprintf(log, "zero plan auto: offload_optimizer.pin_memory true (the measured rates are for pinned buffers)\n");
    }
    if (r->off_param) zo->param_pin_memory = zo->param_pin_memory || zo->optimizer_pin_memory;
    if (zo->stage == 3 && !zo->overlap_comm) zo->overlap_comm = true;  // DeepSpeed's stage 3 default
}

void planner_auto_apply(PlanInput* in, const PlanSearch* s, ZeroOptions* zo, PlanPick* pick) {
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
    int rc = planner_auto_search(in, s, have_gpu, gpu_free, host, AUTO_MARGIN, pick, stdout, err, sizeof err);
    if (rc < 0) t5_die(T5_EXIT_USAGE, "zero plan auto: %s", err);
    if (rc > 0) {
        char name[96];
        planner_row_name(&pick->row, name, sizeof name);
        t5_die_hint(T5_EXIT_FAILURE, "lower the batch or the lengths, add --gradient_checkpointing, or use a larger GPU",
                    "zero plan auto: no ZeRO plan fits this machine (%.1f GiB GPU free, %.1f GiB host available) at "
                    "micro-batch %d%s; the smallest that fits the host is %s at %.1f GiB of GPU",
                    gpu_free / 1073741824.0, host / 1073741824.0, pick->batch,
                    pick->ckpt ? " with gradient checkpointing" : "", name, pick->row.g_total / 1073741824.0);
    }
    planner_pick_apply(pick, zo, stdout);
    fflush(stdout);
}

// Several ranks as the planner sees them: the partitions of the whole world, and this host's ranks for its host
// memory: the launcher's local world size, else this host's GPU count when it divides the world, else every rank
// (the most host memory). Several nodes: no step time is predicted (planner.c).
static void plan_world(int world, PlanInput* in) {
    in->gpus_per_node = in->num_nodes = 1;
    if (world <= 1) return;
    LaunchEnv env;
    char err[512];
    int local = launch_env_parse(&env, NULL, err, sizeof err) == 0 ? env.local_world_size : -1;
    if (local < 1 || world % local) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) (void)cudaGetLastError();
        local = n > 0 && world % n == 0 ? n : world;
    }
    in->gpus_per_node = local;
    in->num_nodes = world / local;
}

// The run as the planner sees it: training's batch, and evaluation's for the arena when the run evaluates; the
// lengths the trainer will size the arena for (the data's longest examples, run.c), else the length caps (an upper
// bound)
void planner_input_from_args(const TrainerArgs* a, PlanInput* in) {
    memset(in, 0, sizeof *in);
    in->model = a->model;
    in->dtype = a->dtype;
    in->grad_dtype = a->grad_dtype;
    in->batch = a->do_train ? a->data.train_batch_size : 1;
    in->arena_batch = (a->do_eval || a->do_predict) ? a->data.eval_batch_size : 0;
    const DataOptions* o = &a->data;
    in->src_len = a->plan_src_len > 0 ? a->plan_src_len : (o->max_source_length + 7) / 8 * 8;
    in->tgt_len = a->plan_tgt_len > 0 ? a->plan_tgt_len : (T5_MAX(o->max_target_length, o->val_max_target_length) + 7) / 8 * 8;
    in->gradient_checkpointing = a->gradient_checkpointing;
    in->forward_only = !a->do_train;
    in->grad_accum_steps = (int)a->gradient_accumulation_steps;
    plan_world(a->zero.world, in);
    in->knobs = a->zero;
}

bool planner_auto_run(const RunConfig* c, const RunConfig* raw, TrainerArgs* a, PlanSearch* search, PlanPick* pick) {
    PlanInput in;
    planner_input_from_args(a, &in);
    PlanSearch s;
    planner_search_from_config(raw, &s);
    s.batch_auto = s.batch_auto && a->do_train;
    if (s.batch_auto && c->train_samples > 0 && c->train_samples < s.max_batch) s.max_batch = (int)c->train_samples;
    int ndev = 0;
    if (c->dry_run && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)) {
        (void)cudaGetLastError();
        printf("dry run: zero plan auto is chosen at start against the GPU's free memory (no GPU here)\n");
        memset(pick, 0, sizeof *pick);
        *search = s;
        return false;
    }
    planner_auto_apply(&in, &s, &a->zero, pick);
    *search = s;
    return s.batch_auto || s.ckpt_auto;
}

void planner_search_from_config(const RunConfig* raw, PlanSearch* s) {
    memset(s, 0, sizeof *s);
    const int pd = config_key_source(raw, "per_device_train_batch_size");
    s->batch_auto = pd == CONFIG_SRC_AUTO ||
                    (raw->has_deepspeed && pd == CONFIG_SRC_DEFAULT &&
                     config_key_source(raw, "deepspeed.train_micro_batch_size_per_gpu") == CONFIG_SRC_AUTO);
    s->ckpt_auto = config_key_source(raw, "gradient_checkpointing") == CONFIG_SRC_AUTO;
    s->max_batch = PLANNER_AUTO_MAX_BATCH;
    autotune_search(raw, s);  // DeepSpeed's autotuning: the micro-batch within its bounds
}

void planner_pick_to_config(const PlanPick* pick, const PlanSearch* s, RunConfig* c) {
    if (s->batch_auto) {
        c->per_device_train_batch_size = pick->batch;
        c->src[config_key_index("per_device_train_batch_size")] = CONFIG_SRC_DERIVED;
        if (c->has_deepspeed && c->ds.autotuning.enabled) {  // DeepSpeed's autotuner sets its batch keys too
            c->ds.train_micro_batch_size_per_gpu = pick->batch;
            c->ds.train_batch_size = (int64_t)pick->batch * c->gradient_accumulation_steps * c->world_size;
        }
    }
    if (s->ckpt_auto) {
        c->gradient_checkpointing = pick->ckpt;
        c->src[config_key_index("gradient_checkpointing")] = CONFIG_SRC_DERIVED;
    }
}

// ---- out of memory explained (issue 17 item 4)

int planner_oom_sentence(const PlanInput* in, const ZeroOptions* cur, bool have_gpu, size_t gpu_mem, size_t host_mem,
                         char* buf, size_t len) {
    char err[256], name[96];
    buf[0] = 0;
    PlanRow now;
    size_t l = 0;
    if (planner_row(in, cur->stage, cur->stage > 0 && cur->offload_optimizer, cur->offload_param, cur->ratio, &now, err,
                    sizeof err) == 0) {
        planner_row_name(&now, name, sizeof name);
        l += (size_t)snprintf(buf + l, len - l, "; the estimate for this job (%s, micro-batch %d%s): %.1f GiB GPU, "
                              "%.1f GiB host", name, in->batch, in->gradient_checkpointing ? ", gradient checkpointing" : "",
                              now.g_total / 1073741824.0, now.h_total / 1073741824.0);
    }
    if (l >= len) return -1;
    // a plan that fits: the same batch (checkpointing allowed), else a smaller batch
    PlanSearch s = {.batch_auto = false, .ckpt_auto = !in->gradient_checkpointing};
    PlanPick p;
    int rc = planner_auto_search(in, &s, have_gpu, gpu_mem, host_mem, AUTO_MARGIN, &p, NULL, err, sizeof err);
    if (rc == 1 && in->batch > 1) {
        s.batch_auto = true;
        s.ckpt_auto = true;
        s.max_batch = in->batch - 1;
        rc = planner_auto_search(in, &s, have_gpu, gpu_mem, host_mem, AUTO_MARGIN, &p, NULL, err, sizeof err);
    }
    if (rc != 0) {
        snprintf(buf + l, len - l, "; no plan is predicted to fit %.1f GiB of GPU and %.1f GiB of host memory "
                 "(t5train estimate shows every plan)", gpu_mem / 1073741824.0, host_mem / 1073741824.0);
        return 1;
    }
    // the config change: the keys that differ
    char change[512];
    size_t c = 0;
    const PlanRow* r = &p.row;
    if (r->stage != cur->stage) c += (size_t)snprintf(change + c, sizeof change - c, "%sstage %d", c ? ", " : "", r->stage);
    const bool cur_oo = cur->stage > 0 && cur->offload_optimizer;
    if (r->off_opt != cur_oo)
        c += (size_t)snprintf(change + c, sizeof change - c, "%soffload_optimizer.device %s", c ? ", " : "",
                              r->off_opt ? "cpu" : "none");
    if (r->off_opt && fabs(r->ratio - (cur_oo ? cur->ratio : 1.0)) > 1e-9)
        c += (size_t)snprintf(change + c, sizeof change - c, "%soffload_optimizer.ratio %.2f", c ? ", " : "", r->ratio);
    if (r->off_param != cur->offload_param)
        c += (size_t)snprintf(change + c, sizeof change - c, "%soffload_param.device %s", c ? ", " : "",
                              r->off_param ? "cpu" : "none");
    if (p.ckpt != in->gradient_checkpointing)
        c += (size_t)snprintf(change + c, sizeof change - c, "%sgradient_checkpointing true", c ? ", " : "");
    if (p.batch != in->batch)
        c += (size_t)snprintf(change + c, sizeof change - c, "%sper_device_train_batch_size %d", c ? ", " : "", p.batch);
    if (!c) snprintf(change, sizeof change, "the same plan (the estimate says it fits: something else holds memory)");
    snprintf(buf + l, len - l, "; set %s: predicted %.1f GiB of %.1f GiB GPU, %.1f GiB host (or --zero_plan auto)",
             change, r->g_total / 1073741824.0, gpu_mem / 1073741824.0, r->h_total / 1073741824.0);
    return 0;
}


void planner_oom_advice(const void* args, char* buf, size_t len) {
    const TrainerArgs* a = args;
    PlanInput in;
    planner_input_from_args(a, &in);
    // the whole GPU (what is free now is what this run left) and the host available now
    size_t fr = 0, tot = 0;
    const bool have_gpu = cudaMemGetInfo(&fr, &tot) == cudaSuccess;
    if (!have_gpu) (void)cudaGetLastError();
    planner_oom_sentence(&in, &a->zero, have_gpu, tot, host_mem_available(), buf, len);
}

// Whether the row of plan `cur` fits gpu_free (plus the CUDA context the free figure already lost) and host_avail;
// true too when the planner has no row for it (nothing predicted: the engine's own checks speak)
static bool fixed_plan_fits(const PlanInput* in, const ZeroOptions* cur, size_t gpu_free, size_t host_avail, PlanRow* r,
                            bool* gpu_ok, bool* host_ok) {
    char err[256];
    *gpu_ok = *host_ok = true;
    if (planner_row(in, cur->stage, cur->stage > 0 && cur->offload_optimizer, cur->offload_param, cur->ratio, r, err,
                    sizeof err) != 0)
        return true;
    *gpu_ok = r->g_total <= gpu_free + PLANNER_CONTEXT_BYTES;
    *host_ok = r->h_total + PLANNER_HOST_MARGIN_BYTES <= host_avail;
    return *gpu_ok && *host_ok;
}

int planner_fixed_plan_check(const PlanInput* in, const ZeroOptions* cur, size_t gpu_free, size_t gpu_total,
                             size_t host_avail, char* buf, size_t len) {
    buf[0] = 0;
    PlanRow r;
    bool gpu_ok, host_ok;
    if (fixed_plan_fits(in, cur, gpu_free, host_avail, &r, &gpu_ok, &host_ok)) return 0;
    size_t l = 0;
    l += (size_t)snprintf(buf + l, len - l, "the ZeRO plan of this run is predicted not to fit this machine:");
    if (!gpu_ok && l < len)
        l += (size_t)snprintf(buf + l, len - l, " GPU: %.1f GiB needed, %.1f GiB free", r.g_total / 1073741824.0,
                              (gpu_free + PLANNER_CONTEXT_BYTES) / 1073741824.0);
    if (!host_ok && l < len)
        l += (size_t)snprintf(buf + l, len - l, "%s host: %.1f GiB needed (+%.0f GiB for the process), %.1f GiB "
                              "available", gpu_ok ? "" : ";", r.h_total / 1073741824.0,
                              PLANNER_HOST_MARGIN_BYTES / 1073741824.0, host_avail / 1073741824.0);
    if (l < len) planner_oom_sentence(in, cur, true, gpu_total, host_avail, buf + l, len - l);
    return 1;
}

// The GPU memory a fixed plan is checked against (free and total of this rank's GPU); false when nothing is checked:
// T5TRAIN_SKIP_PLAN_CHECK=1, or no GPU visible
static bool plan_check_gpu(size_t* fr, size_t* tot) {
    const char* skip = getenv("T5TRAIN_SKIP_PLAN_CHECK");
    if (skip && !strcmp(skip, "1")) return false;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || cudaMemGetInfo(fr, tot) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

int planner_find_batch(const TrainerArgs* a, FILE* log) {
    PlanInput in;
    planner_input_from_args(a, &in);
    size_t fr = 0, tot = 0;
    if (!plan_check_gpu(&fr, &tot)) return in.batch;
    const size_t host = host_mem_available();
    const int first = in.batch;
    for (int b = first; b > 0; b = (int)(b * 0.9)) {
        in.batch = b;
        // the fit alone, without planner_fixed_plan_check's advice (its plan search took about a second per batch
        // on t5-3b: 31 s from 2048 down to 93 on an H200)
        PlanRow r;
        bool gpu_ok, host_ok;
        if (fixed_plan_fits(&in, &a->zero, fr, host, &r, &gpu_ok, &host_ok)) {
            if (b != first && log)
                fprintf(log, "auto_find_batch_size: per_device_train_batch_size %d -> %d (the largest of %d x 0.9^k "
                        "predicted to fit this GPU and host)\n", first, b, first);
            return b;
        }
    }
    return 0;
}

void planner_check_run(const TrainerArgs* a) {
    size_t fr = 0, tot = 0;
    if (!plan_check_gpu(&fr, &tot)) return;
    PlanInput in;
    planner_input_from_args(a, &in);
    static char buf[2048];
    if (planner_fixed_plan_check(&in, &a->zero, fr, tot, host_mem_available(), buf, sizeof buf))
        t5_die_hint(T5_EXIT_FAILURE, "T5TRAIN_SKIP_PLAN_CHECK=1 runs it anyway (it then stops at the first "
                    "allocation that does not fit)", "%s", buf);
}
