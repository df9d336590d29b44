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

void run_fetch_dataset(const RunConfig* c, const DataOptions* o) {
    if (!is_wmt16_ro_en(o)) return;
    const char* sl = o->source_lang ? o->source_lang : "";
    const char* tl = o->target_lang ? o->target_lang : "";
    bool langs = (!strcmp(sl, "en") && !strcmp(tl, "ro")) || (!strcmp(sl, "ro") && !strcmp(tl, "en"));
    if (!langs) return;  // dataset.c names the mismatch
    const bool used[3] = {c->do_train, c->do_eval, c->do_predict};
    char err[4096];
    int missing = 0;
    const char* first = NULL;
    for (int s = 0; s < 3; s++) {
        if (!used[s] || o->split_file[s]) continue;
        char *sp = NULL, *tp = NULL, fmt = 0;
        if (dataset_resolve_files(o, (DataSplit)s, &sp, &tp, &fmt, err, sizeof err) != 0) {
            missing++;
            if (!first) first = data_split_name((DataSplit)s);
        }
        free(sp);
        free(tp);
    }
    if (!missing) return;
    if (env_true("HF_DATASETS_OFFLINE") || env_true("HF_HUB_OFFLINE")) return;  // dataset.c: "not found" + where
    char dir[4096];
    if (c->data_dir[0]) {
        snprintf(dir, sizeof dir, "%s", c->data_dir);
    } else if (wmt16_default_data_dir(dir, sizeof dir, err, sizeof err) != 0) {
        t5_die(T5_EXIT_USAGE, "%s", err);
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
}
