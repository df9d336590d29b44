/*
 * disk_check.c: the bytes a run's saves need against the free space of output_dir's filesystem (disk_check.h).
 */
#include "disk_check.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "../../model/params.h"
#include "../../model/t5.h"
#include "../base/common.h"
#include "../train/checkpoint.h"
#include "../zero/recut.h"

void disk_save_bytes(const SavePlan* p, SaveBytes* b) {
    memset(b, 0, sizeof *b);
    const uint64_t weights = p->params * 4;  // the checkpoint's model.safetensors: fp32
    const uint64_t opt_floats = p->adafactor_floats ? p->adafactor_floats : 2 * p->params;
    const uint64_t state = (p->state_partitioned ? 1 : (uint64_t)(p->world_size > 0 ? p->world_size : 1)) *
                           opt_floats * 4;
    b->final_model = p->final_model ? p->params * (uint64_t)p->final_bytes_per_param + SAVE_SMALL_BYTES : 0;
    b->checkpoint = p->checkpoints ? weights + state + SAVE_SMALL_BYTES : 0;
    if (!p->checkpoints) {
        b->need = b->final_model;
        b->final_at_peak = b->final_model > 0;
        return;
    }
    // the peak: while a save writes, before rotating, min(L + 1, on disk + K) checkpoints are present (K: the
    // checkpoints this run writes, L: save_total_limit, either unbounded); beside the final model min(L, on disk + K)
    // On a resume the checkpoints on the disk are the run's first ones (K less them, at least the last one is new); a
    // save writes one before it rotates even when more than L are there
    const int64_t inf = INT64_MAX / 4, on_disk = p->existing_checkpoints;
    const int64_t L = p->save_total_limit > 0 ? p->save_total_limit : inf;
    const int64_t K = p->planned_checkpoints < 0 ? inf : on_disk > 0 ? T5_MAX(p->planned_checkpoints - on_disk, 1)
                                                                     : p->planned_checkpoints;
    b->unbounded = L == inf && K == inf;
    int64_t n1 = K > 0 ? T5_MAX(T5_MIN(L + 1, on_disk + K) - on_disk, 1) : 0;
    int64_t n2 = T5_MAX(T5_MIN(L, on_disk + K) - on_disk, 0);
    if (b->unbounded) n1 = n2 = 1;  // one new checkpoint counted, the warning says more follow
    const uint64_t peak1 = (uint64_t)n1 * b->checkpoint;
    const uint64_t peak2 = (uint64_t)n2 * b->checkpoint + b->final_model;
    b->final_at_peak = b->final_model > 0 && peak2 >= peak1;
    b->need = b->final_at_peak ? peak2 : peak1;
    b->new_checkpoints = (int)(b->final_at_peak ? n2 : n1);
}

int disk_free_bytes(const char* path, uint64_t* free_bytes, char* where, size_t wcap, char* err, size_t errcap) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path[0] ? path : ".");
    struct stat st;
    while (stat(dir, &st) != 0) {  // output_dir is created later: its nearest existing ancestor's filesystem
        if (errno != ENOENT && errno != ENOTDIR)
            return t5_errf(err, errcap, -1, "cannot read %s: %s", dir, strerror(errno));
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", dir);
        const char* up = dirname(tmp);
        if (strcmp(up, dir) == 0) return t5_errf(err, errcap, -1, "no existing folder above %s", path);
        snprintf(dir, sizeof dir, "%s", up);
    }
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0) return t5_errf(err, errcap, -1, "cannot read the free space of %s: %s", dir, strerror(errno));
    *free_bytes = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    snprintf(where, wcap, "%s", dir);
    return 0;
}

int disk_count_checkpoints(const char* output_dir) {
    DIR* d = opendir(output_dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent* e; (e = readdir(d));) n += checkpoint_parse_name(e->d_name) >= 0;
    closedir(d);
    return n;
}

int disk_check_saves(const SaveBytes* b, uint64_t free_bytes, const char* where, bool* warn, char* err,
                     size_t errcap) {
    *warn = b->need > 0 && b->unbounded;
    if (b->need <= free_bytes) return 0;
    char what[256];
    if (b->new_checkpoints > 0 && b->final_at_peak)
        snprintf(what, sizeof what, "%d checkpoint%s of %.2f GB and the final model of %.2f GB", b->new_checkpoints,
                 b->new_checkpoints > 1 ? "s" : "", (double)b->checkpoint / 1e9, (double)b->final_model / 1e9);
    else if (b->new_checkpoints > 0)
        snprintf(what, sizeof what, "%d checkpoint%s of %.2f GB", b->new_checkpoints, b->new_checkpoints > 1 ? "s" : "",
                 (double)b->checkpoint / 1e9);
    else
        snprintf(what, sizeof what, "the final model of %.2f GB", (double)b->final_model / 1e9);
    return t5_errf(err, errcap, T5_EXIT_USAGE,
                   "not enough disk space for this run's saves: output_dir's filesystem (%s) has %.2f GB free, the "
                   "saves need %.2f GB (%s at the peak)%s",
                   where, (double)free_bytes / 1e9, (double)b->need / 1e9, what,
                   b->new_checkpoints > 2 ? ": free space there, or keep fewer checkpoints (save_total_limit)" : "");
}

// Adafactor's state floats in one checkpoint's state files: a matrix keeps its row and column factors, a vector v,
// beta1 exp_avg; stages 1-3 on several ranks: the ranks' blobs (recut.h's layout: a rank holding a slice of a matrix
// keeps its whole factors), added up
static uint64_t adafactor_state_floats(const TrainerArgs* a, const ParamTable* T, int world_size) {
    const bool b1 = a->zero.adafactor.has_beta1;
    uint64_t total = 0;
    if (a->zero.stage < 1 || world_size <= 1) {
        for (int i = 0; i < T->num_params; i++) {
            const ParamDesc* d = &T->params[i];
            total += (d->ndim == 2 ? (uint64_t)(d->shape[0] + d->shape[1]) : d->numel) + (b1 ? d->numel : 0);
        }
        return total;
    }
    ZeroOptions zo;
    zero_options_default(&zo);
    t5_model_zero_describe(T, &zo);
    size_t* numel = malloc_check((size_t)T->num_units * sizeof *numel);
    for (int u = 0; u < T->num_units; u++) numel[u] = T->units[u].numel;
    char err[256];
    for (int r = 0; r < world_size; r++) {
        ZeroLayout L;
        if (zero_layout_build(&L, world_size, r, T->num_units, numel, 1000000000, 0.0, err, sizeof err)) break;
        total += recut_ada_blob_floats(zo.tensors, zo.num_tensors, &L, b1);
        zero_layout_free(&L);
    }
    free(numel);
    t5_model_zero_free(&zo);
    return total;
}

void disk_save_plan(const TrainerArgs* a, int world_size, SavePlan* p) {
    memset(p, 0, sizeof *p);
    ParamTable T;
    char err[256];
    if (params_build(&T, &a->model, err, sizeof err) == 0) {
        p->params = T.total_numel;
        if (a->optimizer == TRAINER_OPTIM_ADAFACTOR) p->adafactor_floats = adafactor_state_floats(a, &T, world_size);
        params_free(&T);
    }
    p->world_size = world_size;
    p->state_partitioned = a->zero.stage >= 1;
    p->final_bytes_per_param = a->save_16bit_model && a->dtype != DT_F32 ? 2 : 4;  // trainer.c write_final
    p->final_model = a->do_train;
    p->checkpoints = a->do_train && a->save_strategy != TRAINER_INTERVAL_NO;
    // HF: with load_best_model_at_end a limit of 1 keeps 2 (the best is never rotated away)
    p->save_total_limit = a->save_total_limit == 1 && a->load_best_model_at_end ? 2 : a->save_total_limit;
    // every save_steps and one at the last step (HF's DefaultFlowCallback, the trainer's after_update); by epoch, or
    // epochs of a size not known yet: unbounded unless the limit bounds them
    p->planned_checkpoints = -1;
    const int64_t every = trainer_interval_steps(a->save_steps, a->max_steps);
    if (p->checkpoints && a->save_strategy == TRAINER_INTERVAL_STEPS && a->max_steps > 0 && every > 0)
        p->planned_checkpoints = (a->max_steps + every - 1) / every;
    p->existing_checkpoints = disk_count_checkpoints(a->output_dir);
}
