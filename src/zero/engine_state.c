/*
 * engine_state.c: the engine's checkpoint blobs (engine.h engine_state_save / engine_state_load), every optimizer
 * and stage, in the layouts the checkpoints have always had:
 *   adafactor_layout  EngineAdafactorLayout (Adafactor only)
 *   optimizer         AdamW's m then v, flat fp32 in unit order over this rank's partition (= stage 0's flat layout
 *                     at one rank, so a stage 0 checkpoint resumes under stage 3 and back)
 *   adafactor         Adafactor's state (step0.h layout; stages 1-3 keep the same)
 *   scaler            LossScaler
 *   scheduler         EngineSched
 *   zenflow, zenflow_tensors, zenflow_gacc   ZenFlow's (zenflow_state.h; zenflow.c writes and reads them)
 * Saved by another number of ranks, AdamW's m and v, and Adafactor's state, are re-cut into this rank's partition
 * (recut.h).
 */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "recut.h"
#include "zenflow.h"
#include "zenflow_state.h"

// the "adafactor_layout" blob: what the "adafactor" blob holds (HF's state["step"] is the scheduler blob's
// applied_steps: every tensor steps on every applied update)
typedef struct {
    int64_t floats;              // floats in the "adafactor" blob
    int32_t has_beta1;           // exp_avg present
    int32_t version;             // 1
} EngineAdafactorLayout;

#define ENGINE_ERR_LEN 8192

// the blobs' names in the checkpoint's state file (above: what each holds), as the sink and the source take them
static const char BLOB_ADAFACTOR_LAYOUT[] = "adafactor_layout";
static const char BLOB_OPTIMIZER[] = "optimizer";
static const char BLOB_ADAFACTOR[] = "adafactor";
static const char BLOB_SCALER[] = "scaler";
static const char BLOB_SCHEDULER[] = "scheduler";

// elements [off, off + n) of Adam's m (which 0) or v (which 1) of this rank, to or from host memory
static void adam_range(Engine* E, int which, size_t off, size_t n, float* host, bool to_host) {
    if (!E->part) step0_adam_io(E->s0, which, off, n, host, to_host);
    else if (to_host) zero_opt_state_read(E->Z, which, off, n, host);
    else zero_opt_state_write(E->Z, which, off, n, host);
}

// floats [e, e + cnt) of the optimizer's blob: AdamW's (m then v) or Adafactor's
static void blob_range(Engine* E, size_t e, size_t cnt, float* host, bool to_host) {
    if (E->ada) {
        if (!E->part) step0_adafactor_io(E->s0, e, cnt, host, to_host);
        else if (to_host) zero_adafactor_state_read(E->Z, e, cnt, host);
        else zero_adafactor_state_write(E->Z, e, cnt, host);
        return;
    }
    while (cnt > 0) {
        const int which = e < E->state_n ? 0 : 1;
        const size_t start = which ? e - E->state_n : e;
        const size_t take = T5_MIN(cnt, E->state_n - start);
        adam_range(E, which, start, take, host, to_host);
        host += take;
        e += take;
        cnt -= take;
    }
}

static int add_blob(const EngineStateSink* k, const char* b, const void* data, size_t n, char* err, size_t errlen) {
    return k->begin(k->ctx, b, err, errlen) || k->write(k->ctx, data, n, err, errlen) || k->end(k->ctx, err, errlen)
               ? -1
               : 0;
}

int engine_state_save(Engine* E, const EngineStateSink* k, char* err, size_t errlen) {
    if (!E->o.train)  // evaluation only: no optimizer state exists (model/zero.h no_optimizer_state)
        return t5_set_err(err, errlen, "internal: saving the optimizer state of an evaluation-only engine");
    const EngineAdafactorLayout lay = {.floats = (int64_t)E->ada_floats, .has_beta1 = E->o.zero.adafactor.has_beta1,
                                       .version = 1};
    // the optimizer's blob streamed through one bounded buffer: no full host copy of the state next to the engine's
    // own (t5-3b: 2 x 11.4 GB)
    bool ok = (!E->ada || add_blob(k, BLOB_ADAFACTOR_LAYOUT, &lay, sizeof lay, err, errlen) == 0) &&
              k->begin(k->ctx, E->ada ? BLOB_ADAFACTOR : BLOB_OPTIMIZER, err, errlen) == 0;
    const size_t total = E->ada ? E->ada_floats : 2 * E->state_n;
    const size_t chunk = T5_MIN(total, (size_t)1 << 24);  // 64 MiB of fp32
    float* buf = malloc_check(T5_MAX(chunk, (size_t)1) * sizeof(float));
    for (size_t off = 0; off < total && ok; off += chunk) {
        const size_t n = T5_MIN(chunk, total - off);
        blob_range(E, off, n, buf, true);
        ok = k->write(k->ctx, buf, n * sizeof(float), err, errlen) == 0;
    }
    free(buf);
    if (!ok || k->end(k->ctx, err, errlen) ||
        add_blob(k, BLOB_SCALER, &E->scaler, sizeof E->scaler, err, errlen) ||
        add_blob(k, BLOB_SCHEDULER, &E->sch, sizeof E->sch, err, errlen))
        return -1;
    // ZenFlow: the selective optimizer, the schedule, between update boundaries the accumulated gradient (zenflow.c)
    return E->zf ? zenflow_engine_state_save(E->Z, k, err, errlen) : 0;
}

// ---------------------------------------------------------------------------------------------
// loading

// a blob's consumer: the optimizer's blob, bytes [off, off + n)
static int blob_consume(void* ctx, const void* data, size_t off, size_t n) {
    Engine* E = ctx;
    if (off % sizeof(float) || n % sizeof(float)) return -1;
    blob_range(E, off / sizeof(float), n / sizeof(float), (float*)data, false);
    return 0;
}

// a small blob's consumer: into the buffer ctx
static int copy_consume(void* ctx, const void* data, size_t off, size_t n) {
    memcpy((char*)ctx + off, data, n);
    return 0;
}

// a small blob of this rank's file into dst (its size must be n)
static void read_small(const EngineStateSource* src, const char* b, void* dst, size_t n) {
    static char err[ENGINE_ERR_LEN];
    if (src->read(src->ctx, src->rank, b, n, copy_consume, dst, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s", err);
}

// a re-cut's destination: this rank's engine, the old and the new layout, the floats handed on (AdamW and Adafactor)
typedef struct {
    Engine* E;
    const ZeroLayout* Lold;
    const ZeroLayout* Lnew;
    size_t got;
} RecutCtx;

static void recut_put(void* ctx, int which, size_t off, const float* src, size_t n) {
    RecutCtx* r = ctx;
    adam_range(r->E, which, off, n, (float*)src, false);
    r->got += n;
}

static int recut_consume(void* ctx, const void* data, size_t off, size_t n) {
    RecutCtx* r = ctx;
    if (off % sizeof(float) || n % sizeof(float)) return -1;
    recut_chunk(r->Lold, r->Lnew, off / sizeof(float), data, n / sizeof(float), recut_put, r);
    return 0;
}

// the partition of `world` ranks as rank `rank` sees it (lo / hi: which elements it owns)
static void state_layout(const Engine* E, int world, int rank, ZeroLayout* L) {
    static char err[ENGINE_ERR_LEN];
    const ParamTable* T = E->o.T;
    size_t* numel = malloc_check((size_t)T->num_units * sizeof *numel);
    for (int u = 0; u < T->num_units; u++) numel[u] = T->units[u].numel;
    if (zero_layout_build(L, world, rank, T->num_units, numel, 1000000000, 0.0, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    free(numel);
}

// this rank's layout: its partition (stages 1-3) or the whole model (stage 0)
static void state_layout_here(const Engine* E, ZeroLayout* L) {
    state_layout(E, E->part ? T5_MAX(E->o.zero.world, 1) : 1, E->part ? E->o.zero.rank : 0, L);
}

size_t engine_ada_rank_floats(const Engine* E) {
    ZeroLayout L;
    state_layout_here(E, &L);
    const size_t f = recut_ada_blob_floats(E->o.zero.tensors, E->o.zero.num_tensors, &L, E->o.zero.adafactor.has_beta1);
    zero_layout_free(&L);
    return f;
}

static void ada_recut_put(void* ctx, int which, size_t off, const float* src, size_t n) {
    (void)which;
    RecutCtx* r = ctx;
    blob_range(r->E, off, n, (float*)src, false);
    r->got += n;
}

static int ada_recut_consume(void* ctx, const void* data, size_t off, size_t n) {
    RecutCtx* r = ctx;
    if (off % sizeof(float) || n % sizeof(float)) return -1;
    const ZeroOptions* z = &r->E->o.zero;
    recut_ada_chunk(z->tensors, z->num_tensors, z->adafactor.has_beta1, r->Lold, r->Lnew, off / sizeof(float), data,
                    n / sizeof(float), ada_recut_put, r);
    return 0;
}

// Adafactor saved by another number of ranks (or another stage's cut): this rank's blob from the old ranks' blobs.
// old_floats: the floats of the blob of the old rank src->rank; it equals the whole model's when the old run held
// every tensor whole (stage 0, or one rank; a partitioned blob of that size holds every tensor whole, the same floats)
static void load_recut_ada(Engine* E, const EngineStateSource* src, size_t old_floats) {
    static char err[ENGINE_ERR_LEN];
    const ZeroOptions* z = &E->o.zero;
    const bool b1 = z->adafactor.has_beta1;
    const int ow = old_floats == E->ada_whole_floats ? 1 : src->old_world;
    const int world = T5_MAX(z->world, 1);
    ZeroLayout Ln, Lo;
    state_layout_here(E, &Ln);
    RecutCtx rc = {.E = E, .Lnew = &Ln};
    for (int r = 0; r < ow; r++) {
        state_layout(E, ow, r, &Lo);
        rc.Lold = &Lo;
        const size_t nbytes = recut_ada_blob_floats(z->tensors, z->num_tensors, &Lo, b1) * sizeof(float);
        // one old rank whole: its file (src->rank's, the one whose layout blob said so)
        const int file = ow == 1 ? src->rank : r;
        if (recut_ada_rank_needed(z->tensors, z->num_tensors, b1, &Lo, r, &Ln) &&
            src->read(src->ctx, file, BLOB_ADAFACTOR, nbytes, ada_recut_consume, &rc, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "resume: %s (Adafactor state of rank %d of %d)", err, file, src->old_world);
        zero_layout_free(&Lo);
    }
    zero_layout_free(&Ln);
    if (rc.got != E->ada_floats)
        t5_die(T5_EXIT_FAILURE, "resume: %s: the Adafactor state re-cut from %d ranks gave %zu of %zu floats", src->dir,
               src->old_world, rc.got, E->ada_floats);
    printf("Resuming on %d rank%s from a checkpoint of %d: optimizer state re-cut (%zu floats on this rank)\n", world,
           world > 1 ? "s" : "", src->old_world, rc.got);
}

// Resume on another number of ranks: this rank's AdamW m and v from the old ranks' blobs that hold a piece of its
// partition (Adafactor: load_recut_ada above). The old layout: whole tensors when rank 0's blob holds the whole model (stage 0, or one rank), else
// old_world partitions; the new one: this rank's partition (stages 1-3) or the whole model (stage 0).
static void load_recut(Engine* E, const EngineStateSource* src) {
    static char err[ENGINE_ERR_LEN];
    const int old_world = src->old_world;
    const int64_t old_bytes = src->size(src->ctx, BLOB_OPTIMIZER);
    if (old_bytes < 0) t5_die(T5_EXIT_FAILURE, "resume: %s has no optimizer state", src->path);
    const size_t old_floats = (size_t)old_bytes / sizeof(float);
    const bool old_whole = old_floats == 2 * E->numel;
    const int ow = old_whole ? 1 : old_world;
    const int world = T5_MAX(E->o.zero.world, 1);
    const int nw = E->part ? world : 1, nr = E->part ? E->o.zero.rank : 0;
    const ParamTable* T = E->o.T;
    size_t* numel = malloc_check((size_t)T->num_units * sizeof *numel);
    for (int u = 0; u < T->num_units; u++) numel[u] = T->units[u].numel;
    ZeroLayout Ln, Lo;
    if (zero_layout_build(&Ln, nw, nr, T->num_units, numel, 1000000000, 0.0, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    if (Ln.part_total != E->state_n)
        t5_die(T5_EXIT_FAILURE, "internal: re-cut layout of %zu floats, this rank's optimizer state %zu", Ln.part_total,
               E->state_n);
    size_t owned = 0;
    for (int u = 0; u < T->num_units; u++) owned += Ln.hi[u] - Ln.lo[u];
    RecutCtx rc = {.E = E, .Lnew = &Ln};
    for (int r = 0; r < ow; r++) {
        if (zero_layout_build(&Lo, ow, r, T->num_units, numel, 1000000000, 0.0, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "resume: %s", err);
        rc.Lold = &Lo;
        if (recut_rank_needed(&Lo, r, &Ln) &&
            src->read(src->ctx, r, BLOB_OPTIMIZER, 2 * Lo.part_total * sizeof(float), recut_consume, &rc, err,
                      sizeof err))
            t5_die(T5_EXIT_FAILURE, "resume: %s (optimizer state of rank %d of %d)", err, r, old_world);
        zero_layout_free(&Lo);
    }
    zero_layout_free(&Ln);
    free(numel);
    if (rc.got != 2 * owned)
        t5_die(T5_EXIT_FAILURE, "resume: %s: the optimizer state re-cut from %d ranks gave %zu of %zu floats",
               src->dir, old_world, rc.got, 2 * owned);
    printf("Resuming on %d rank%s from a checkpoint of %d: optimizer state re-cut (%zu floats on this rank)\n", world,
           world > 1 ? "s" : "", old_world, rc.got);
}

void engine_state_load(Engine* E, const EngineStateSource* src) {
    static char err[ENGINE_ERR_LEN];
    if (!E->o.train)  // evaluation only: no optimizer state to load into (model/zero.h no_optimizer_state)
        t5_die(T5_EXIT_FAILURE, "internal: loading optimizer state into an evaluation-only engine (%s)", src->path);
    const bool has_beta1 = E->o.zero.adafactor.has_beta1;
    // ZenFlow's state first: a checkpoint of another zenflow config (or none) is refused before anything is read
    if (E->zf) zenflow_engine_state_load(E->Z, src);
    else if (src->size(src->ctx, ZENFLOW_BLOB_META) >= 0)
        t5_die(T5_EXIT_USAGE,
               "resume: %s was saved by a run with zero_optimization.zenflow, this run has none (its selective state "
               "and any gradient accumulated since its last update boundary would be dropped: resume with the same "
               "zenflow section, or start a new run from the checkpoint's weights with --model_name_or_path %s)",
               src->path, src->dir);
    if (E->ada) {
        EngineAdafactorLayout lay;
        read_small(src, BLOB_ADAFACTOR_LAYOUT, &lay, sizeof lay);
        if (lay.version != 1 || (bool)lay.has_beta1 != has_beta1)
            t5_die(T5_EXIT_USAGE,
                   "resume: %s holds Adafactor state %s beta1 (%lld floats, layout version %d), this run's Adafactor %s "
                   "(%zu floats): resume with the same adafactor_beta1 (null or a value)",
                   src->path, lay.has_beta1 ? "with" : "without", (long long)lay.floats, (int)lay.version,
                   has_beta1 ? "has beta1" : "has no beta1", E->ada_floats);
        // another number of ranks, or the same with another cut (stage 0's whole tensors against a partition)
        if (src->old_world != T5_MAX(E->o.zero.world, 1) || lay.floats != (int64_t)E->ada_floats)
            load_recut_ada(E, src, (size_t)lay.floats);
        else if (src->read(src->ctx, src->rank, BLOB_ADAFACTOR, E->ada_floats * sizeof(float), blob_consume, E,
                           err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    } else {
        // AdamW's blob streamed into the engine / the GPU state (no full host copy)
        const size_t blob_floats = 2 * E->state_n;
        const int64_t opt_bytes = src->size(src->ctx, BLOB_OPTIMIZER);
        if (src->old_world != T5_MAX(E->o.zero.world, 1) ||
            (opt_bytes >= 0 && (size_t)opt_bytes != blob_floats * sizeof(float)))
            load_recut(E, src);
        else if (src->read(src->ctx, src->rank, BLOB_OPTIMIZER, blob_floats * sizeof(float), blob_consume, E,
                           err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "resume: %s", err);
    }
    LossScaler sc;
    read_small(src, BLOB_SCALER, &sc, sizeof sc);
    read_small(src, BLOB_SCHEDULER, &E->sch, sizeof E->sch);
    if (E->o.use_scaler) E->scaler = sc;
}
