/*
 * fetch_inputs.c: the model and the WMT16 ro-en splits downloaded when they are missing (see fetch_inputs.h).
 */
#include "fetch_inputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../model/model_lookup.h"
#include "../base/common.h"
#include "../download/hub.h"
#include "../download/wmt16_sources.h"

static bool env_true(const char* name) {
    const char* v = getenv(name);
    if (!v) return false;
    return !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on");
}

static bool model_pending;

bool run_model_pending(void) { return model_pending; }

void run_format_bytes(long long n, char* out, size_t len) {
    if (n < 0) {
        snprintf(out, len, "size unknown");
        return;
    }
    static const char* const units[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1000 && u < 4) v /= 1000, u++;
    if (u == 0) snprintf(out, len, "%lld B", n);
    else snprintf(out, len, "%.1f %s", v, units[u]);
}

// --dry_run: the Hub's answer for the files the cache lacks, printed; nothing written. The snapshot folder
// when the cache holds everything, else NULL (model_pending set).
static const char* model_dry_run(const char* name, const char* rev, const RunConfig* c, const char* lerr) {
    HubOptions ho;
    hub_options_default(&ho);
    ho.revision = rev;
    ho.cache_dir = c->cache_dir[0] ? c->cache_dir : NULL;
    ho.quiet = true;
    static HubDryRun d;
    ho.dry = &d;
    static char dir[MODEL_LOOKUP_PATHLEN];
    char herr[4096];
    if (hub_fetch_model(name, &ho, dir, sizeof dir, herr, sizeof herr) != 0) {
        const char* nl = strchr(lerr, '\n');
        if (lerr[0])
            t5_die(T5_EXIT_USAGE, "model '%s' not found in the HF cache, and the Hub does not offer it: %s%s", name,
                   herr, nl ? nl : "");
        t5_die(T5_EXIT_USAGE, "model '%s' (revision %s%s%s) cannot be downloaded: %s", name, rev,
               c->cache_dir[0] ? ", cache_dir " : "", c->cache_dir, herr);
    }
    char cj[MODEL_LOOKUP_PATHLEN + 16];
    snprintf(cj, sizeof cj, "%s/config.json", dir);
    if (d.n_files == 0 && !d.shards_unknown && t5_is_file(cj)) {
        if (t5_rank == 0) printf("dry run: model %s (revision %s) is in the cache: %s\n", name, rev, dir);
        return dir;
    }
    model_pending = true;
    if (t5_rank != 0) return NULL;
    char total[32];
    run_format_bytes(d.bytes, total, sizeof total);
    printf("dry run: would download %d file%s (%s%s) of model %s (revision %s, commit %s) into %s:\n", d.n_files,
           d.n_files == 1 ? "" : "s", total, d.shards_unknown ? " + the shards" : "", name, rev, d.commit, d.repo_dir);
    for (int i = 0; i < d.n_files; i++) {
        char sz[32];
        run_format_bytes(d.sizes[i], sz, sizeof sz);
        printf("dry run:   %s (%s)\n", d.files[i], sz);
    }
    if (d.shards_unknown)
        printf("dry run:   the shards that model.safetensors.index.json names (listed once it is downloaded)\n");
    if (d.n_cached) printf("dry run:   (%d file%s of it already in the cache)\n", d.n_cached, d.n_cached == 1 ? "" : "s");
    return NULL;
}

const char* run_model_source(const RunConfig* c) {
    const char* name = c->model_name_or_path;
    if (c->init == MODEL_INIT_RANDOM || !name[0] || t5_path_exists(name) || !hub_is_repo_id(name)) return name;
    const char* rev = c->model_revision[0] ? c->model_revision : "main";
    static char lerr[MODEL_LOOKUP_ERRLEN];
    lerr[0] = 0;
    if (!c->cache_dir[0] && !strcmp(rev, "main")) {
        // what transformers finds offline: any HF cache root, either repo-folder spelling
        static ModelLocation loc;
        if (model_lookup(name, MODEL_NEED_WEIGHTS, &loc, lerr, sizeof lerr) == 0) return name;
        // offline: the cache lookup's own message (every place it looked) is the whole story
        if (hub_offline_from_env()) t5_die(T5_EXIT_USAGE, "%s", lerr);
    }
    if (c->dry_run) {
        const char* snap = model_dry_run(name, rev, c, lerr);
        return snap ? snap : name;
    }
    HubOptions ho;
    hub_options_default(&ho);
    ho.revision = rev;
    ho.cache_dir = c->cache_dir[0] ? c->cache_dir : NULL;
    ho.quiet = t5_rank != 0;
    static char dir[MODEL_LOOKUP_PATHLEN];
    char herr[4096];
    if (hub_fetch_model(name, &ho, dir, sizeof dir, herr, sizeof herr) == 0) return dir;
    // the Hub's sentence first; the places the cache lookup tried after it
    const char* nl = strchr(lerr, '\n');
    if (lerr[0])
        t5_die(T5_EXIT_USAGE, "model '%s' not found in the HF cache, and not downloaded: %s%s", name, herr,
               nl ? nl : "");
    t5_die(T5_EXIT_USAGE, "model '%s' (revision %s%s%s) was not downloaded: %s", name, rev,
           c->cache_dir[0] ? ", cache_dir " : "", c->cache_dir, herr);
}

static bool is_wmt16_ro_en(const DataOptions* o) {
    if (!o->dataset_name) return false;
    if (!strcmp(o->dataset_name, "wmt16-ro-en")) return true;
    return !strcmp(o->dataset_name, "wmt16") && o->dataset_config && !strcmp(o->dataset_config, "ro-en");
}

// Test hook (with T5TRAIN_WMT16_MIRROR): T5TRAIN_WMT16_SOURCES=FILE, three lines "name sha256 size" (europarl,
// setimes, dev; test/make_wmt16_fixtures.py's sums.txt) in place of the builder's recorded files, so that the
// main job's download runs end to end against small synthetic archives. NULL: the recorded sources.
static const Wmt16Source* sources_from_env(void) {
    const char* path = getenv("T5TRAIN_WMT16_SOURCES");
    if (!path || !*path) return NULL;
    static Wmt16Source src[WMT16_NSRC];
    static char names[WMT16_NSRC][256], shas[WMT16_NSRC][65];
    FILE* f = fopen(path, "r");
    if (!f) t5_die(T5_EXIT_USAGE, "T5TRAIN_WMT16_SOURCES=%s cannot be read", path);
    for (int i = 0; i < WMT16_NSRC; i++) {
        long long size = -1;
        if (fscanf(f, "%255s %64s %lld", names[i], shas[i], &size) != 3 || strlen(shas[i]) != 64 || size < 0 ||
            strcmp(names[i], WMT16_RO_EN_SOURCES[i].name) != 0)
            t5_die(T5_EXIT_USAGE, "T5TRAIN_WMT16_SOURCES=%s: line %d is not \"%s <sha256> <size>\"", path, i + 1,
                   WMT16_RO_EN_SOURCES[i].name);
        src[i] = WMT16_RO_EN_SOURCES[i];
        src[i].name = names[i];
        src[i].sha256 = shas[i];
        src[i].size = size;
    }
    fclose(f);
    return src;
}

// --dry_run: the archives a run would fetch and the folder it would prepare; nothing written
static void dataset_dry_run(const char* dir) {
    if (t5_rank != 0) return;
    const Wmt16Source* src = sources_from_env();
    if (!src) src = WMT16_RO_EN_SOURCES;
    const char* mirror = getenv("T5TRAIN_WMT16_MIRROR");
    long long bytes = 0;
    int n = 0;
    for (int i = 0; i < WMT16_NSRC; i++) {
        char p[4600];
        snprintf(p, sizeof p, "%s/downloads/%s", dir, src[i].name);
        if (!t5_is_file(p)) bytes += src[i].size, n++;
    }
    char total[32];
    run_format_bytes(bytes, total, sizeof total);
    printf("dry run: would download %d of the %d WMT16 ro-en source archives (%s) into %s/downloads and prepare "
           "train, validation and test into %s/wmt16-ro-en:\n", n, WMT16_NSRC, total, dir, dir);
    for (int i = 0; i < WMT16_NSRC; i++) {
        char p[4600], sz[32];
        snprintf(p, sizeof p, "%s/downloads/%s", dir, src[i].name);
        run_format_bytes(src[i].size, sz, sizeof sz);
        if (mirror && *mirror)
            printf("dry run:   %s/%s (%s)%s\n", mirror, src[i].name, sz, t5_is_file(p) ? ", already downloaded" : "");
        else
            printf("dry run:   %s (%s)%s\n", src[i].url, sz, t5_is_file(p) ? ", already downloaded" : "");
    }
}

int run_fetch_dataset(const RunConfig* c, const DataOptions* o) {
    if (!is_wmt16_ro_en(o)) return 0;
    const char* sl = o->source_lang ? o->source_lang : "";
    const char* tl = o->target_lang ? o->target_lang : "";
    bool langs = (!strcmp(sl, "en") && !strcmp(tl, "ro")) || (!strcmp(sl, "ro") && !strcmp(tl, "en"));
    if (!langs) return 0;  // dataset.c names the mismatch
    const bool used[3] = {c->do_train, c->do_eval, c->do_predict};
    char err[4096];
    int missing = 0, mask = 0;
    const char* first = NULL;
    for (int s = 0; s < 3; s++) {
        if (!used[s] || o->split_file[s]) continue;
        char *sp = NULL, *tp = NULL, fmt = 0;
        if (dataset_resolve_files(o, (DataSplit)s, &sp, &tp, &fmt, err, sizeof err) != 0) {
            missing++;
            mask |= 1 << s;
            if (!first) first = data_split_name((DataSplit)s);
        }
        free(sp);
        free(tp);
    }
    if (!missing) return 0;
    if (env_true("HF_DATASETS_OFFLINE") || env_true("HF_HUB_OFFLINE")) return 0;  // dataset.c: "not found" + where
    char dir[4096];
    if (c->data_dir[0]) {
        snprintf(dir, sizeof dir, "%s", c->data_dir);
    } else if (wmt16_default_data_dir(dir, sizeof dir, err, sizeof err) != 0) {
        t5_die(T5_EXIT_USAGE, "%s", err);
    }
    if (c->dry_run) {
        dataset_dry_run(dir);
        return mask;
    }
    if (t5_rank == 0)
        fprintf(stderr, "wmt16 ro-en: no %s split on disk; downloading and preparing it from the WMT16 sources into "
                        "%s/wmt16-ro-en\n", first, dir);
    Wmt16Options wo = {.sources = sources_from_env(), .mirror = NULL, .quiet = t5_rank != 0};
    if (wmt16_prepare(dir, &wo, err, sizeof err) != 0)
        t5_die(T5_EXIT_FAILURE, "wmt16 ro-en (%s split) is not on disk and was not prepared: %s", first, err);
    // what dataset.c will read now (data_dir, $T5TRAIN_DATA, the default folder: the first holding the split)
    for (int s = 0; s < 3; s++) {
        if (!used[s] || o->split_file[s]) continue;
        char *sp = NULL, *tp = NULL, fmt = 0;
        if (dataset_resolve_files(o, (DataSplit)s, &sp, &tp, &fmt, err, sizeof err) != 0)
            t5_die(T5_EXIT_FAILURE, "wmt16 ro-en was prepared in %s but the %s split is still not found: %s", dir,
                   data_split_name((DataSplit)s), err);
        free(sp);
        free(tp);
    }
    return 0;
}
