/*
 * model_lookup.c: find a T5 checkpoint directory from --model (see model_lookup.h for the order).
 */
#include "model_lookup.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/base/common.h"

// growing text buffer for the "looked in" list
typedef struct {
    char* s;
    size_t len, cap;
} Text;

static void text_add(Text* t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(Text* t, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (t->len + (size_t)n + 1 > t->cap) {
        t->cap = (t->len + (size_t)n + 1) * 2;
        t->s = realloc_check(t->s, t->cap);
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

static bool file_in(const char* dir, const char* name, char* out, size_t outlen) {
    char* p = t5_path_join(dir, name);
    bool ok = t5_is_file(p);
    if (ok && out) snprintf(out, outlen, "%s", p);
    free(p);
    return ok;
}

// Fills loc from dir; returns a short reason (static string) when dir does not qualify for `need`, else NULL.
static const char* probe_dir(const char* dir, int need, ModelLocation* loc) {
    ModelLocation l;
    memset(&l, 0, sizeof l);
    snprintf(l.dir, sizeof l.dir, "%s", dir);
    bool has_config = file_in(dir, "config.json", l.config_path, sizeof l.config_path);
    // model.safetensors before the index, as transformers checks them (and as safetensors_open(dir) does)
    if (file_in(dir, "model.safetensors", l.weights_path, sizeof l.weights_path))
        l.weights = MODEL_WEIGHTS_SAFETENSORS;
    else if (file_in(dir, "model.safetensors.index.json", l.weights_path, sizeof l.weights_path))
        l.weights = MODEL_WEIGHTS_SAFETENSORS_SHARDED;
    else if (file_in(dir, "pytorch_model.bin.index.json", l.weights_path, sizeof l.weights_path) ||
             file_in(dir, "pytorch_model.bin", l.weights_path, sizeof l.weights_path))
        l.weights = MODEL_WEIGHTS_PYTORCH_BIN;
    if (file_in(dir, "spiece.model", l.tokenizer_path, sizeof l.tokenizer_path))
        l.tokenizer = MODEL_TOKENIZER_SPIECE;
    else if (file_in(dir, "tokenizer.json", l.tokenizer_path, sizeof l.tokenizer_path))
        l.tokenizer = MODEL_TOKENIZER_JSON;
    *loc = l;
    if (need & MODEL_NEED_WEIGHTS) {
        if (!has_config && l.weights == MODEL_WEIGHTS_NONE) return "no config.json and no weights";
        if (!has_config) return "no config.json";
        if (l.weights == MODEL_WEIGHTS_NONE) return "config.json but no model.safetensors";
    }
    if ((need & MODEL_NEED_TOKENIZER) && l.tokenizer == MODEL_TOKENIZER_NONE)
        return "no spiece.model or tokenizer.json";
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// HF cache roots and repo folders

static void list_add_unique(char*** list, int* n, const char* s) {
    for (int i = 0; i < *n; i++)
        if (strcmp((*list)[i], s) == 0) return;
    *list = realloc_check(*list, (size_t)(*n + 2) * sizeof(char*));
    (*list)[(*n)++] = strdup_check(s);
    (*list)[*n] = NULL;
}

// every candidate root, existing or not, in search order
static char** cache_roots_all(void) {
    char** list = calloc_check(1, sizeof(char*));
    int n = 0;
    const char* e;
    char buf[MODEL_LOOKUP_PATHLEN];
    if ((e = getenv("HF_HUB_CACHE")) && *e) list_add_unique(&list, &n, e);
    if ((e = getenv("HUGGINGFACE_HUB_CACHE")) && *e) list_add_unique(&list, &n, e);
    if ((e = getenv("HF_HOME")) && *e) {
        snprintf(buf, sizeof buf, "%s/hub", e);
        list_add_unique(&list, &n, buf);
    }
    if ((e = getenv("XDG_CACHE_HOME")) && *e) {
        snprintf(buf, sizeof buf, "%s/huggingface/hub", e);
        list_add_unique(&list, &n, buf);
    }
    if ((e = getenv("HOME")) && *e) {
        snprintf(buf, sizeof buf, "%s/.cache/huggingface/hub", e);
        list_add_unique(&list, &n, buf);
    }
    return list;
}

void model_lookup_free_list(char** list) {
    if (!list) return;
    for (char** p = list; *p; p++) free(*p);
    free(list);
}

char** model_lookup_cache_roots(void) {
    char** all = cache_roots_all();
    char** list = calloc_check(1, sizeof(char*));
    int n = 0;
    for (char** p = all; *p; p++)
        if (t5_is_dir(*p)) list_add_unique(&list, &n, *p);
    model_lookup_free_list(all);
    return list;
}

// hub repo ids to try for `model`: "t5-3b" <-> "google-t5/t5-3b" are the same repo (the hub redirects)
static char** repo_ids(const char* model) {
    char** list = calloc_check(1, sizeof(char*));
    int n = 0;
    char buf[512];
    list_add_unique(&list, &n, model);
    if (!strchr(model, '/') && strncmp(model, "t5-", 3) == 0) {
        snprintf(buf, sizeof buf, "google-t5/%s", model);
        list_add_unique(&list, &n, buf);
    } else if (strncmp(model, "google-t5/", 10) == 0) {
        list_add_unique(&list, &n, model + 10);
    } else if (!strchr(model, '/') && (strncmp(model, "flan-t5-", 8) == 0 || strncmp(model, "t5-v1_1-", 8) == 0)) {
        snprintf(buf, sizeof buf, "google/%s", model);
        list_add_unique(&list, &n, buf);
    }
    return list;
}

// "google/flan-t5-xl" -> "models--google--flan-t5-xl"
static void repo_folder(const char* id, char* out, size_t len) {
    size_t n = (size_t)snprintf(out, len, "models--");
    for (const char* p = id; *p && n + 3 < len; p++) {
        if (*p == '/') {
            out[n++] = '-';
            out[n++] = '-';
        } else {
            out[n++] = *p;
        }
    }
    out[n] = 0;
}

// the snapshot folder of a repo folder: refs/main's revision if that snapshot exists, else the most
// recently modified snapshot with a config.json (or any, for tokenizer-only needs). Returns false if none.
static bool pick_snapshot(const char* repo_dir, char* out, size_t len, Text* why) {
    char path[MODEL_LOOKUP_PATHLEN];
    if (snprintf(path, sizeof path, "%s/refs/main", repo_dir) >= (int)sizeof path) return false;
    size_t rl = 0;
    char* ref = t5_read_file(path, &rl);
    if (ref) {
        char* s = ref;
        while (rl && (s[rl - 1] == '\n' || s[rl - 1] == '\r' || s[rl - 1] == ' ')) s[--rl] = 0;
        bool fits = snprintf(out, len, "%s/snapshots/%s", repo_dir, s) < (int)len;
        free(ref);
        if (fits && t5_is_dir(out)) return true;
        text_add(why, "    %s: refs/main names a snapshot that is not there\n", out);
    }
    if (snprintf(path, sizeof path, "%s/snapshots", repo_dir) >= (int)sizeof path) return false;
    DIR* d = opendir(path);
    if (!d) return false;
    struct dirent* de;
    double best = -1;
    bool best_cfg = false, found = false;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char sub[MODEL_LOOKUP_PATHLEN];
        if (snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) >= (int)sizeof sub) continue;
        struct stat sb;
        if (stat(sub, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        bool cfg = file_in(sub, "config.json", NULL, 0);
        double t = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
        // a snapshot with config.json beats one without; then the newest
        if (!found || (cfg && !best_cfg) || (cfg == best_cfg && t > best)) {
            snprintf(out, len, "%s", sub);
            best = t;
            best_cfg = cfg;
            found = true;
        }
    }
    closedir(d);
    return found;
}

static const char* hint_text(const char* model) {
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "  to download it (needs internet):  bash scripts/download_model.sh %s\n"
             "  or pass a local directory holding config.json + model.safetensors: --model /path/to/dir",
             model);
    return buf;
}

static int pytorch_bin_error(const ModelLocation* l, char* err, size_t errlen) {
    return t5_set_err(err, errlen,
                  "%s has only PyTorch weights (%s), which t5train does not read.\n"
                  "HINT: convert them once to safetensors (needs torch + safetensors):\n"
                  "  python3 scripts/convert_bin_to_safetensors.py %s",
                  l->dir, strrchr(l->weights_path, '/') ? strrchr(l->weights_path, '/') + 1 : l->weights_path,
                  l->dir);
}

int model_lookup(const char* model, int need, ModelLocation* loc, char* err, size_t errlen) {
    if (!model || !*model) return t5_set_err(err, errlen, "no model given (--model NAME_OR_DIR)");
    if (need == 0) need = MODEL_NEED_WEIGHTS;
    ModelLocation l;
    // 1. a local directory is taken as is
    if (t5_is_dir(model)) {
        const char* why = probe_dir(model, need, &l);
        if ((need & MODEL_NEED_WEIGHTS) && l.weights == MODEL_WEIGHTS_PYTORCH_BIN) return pytorch_bin_error(&l, err, errlen);
        if (why)
            return t5_set_err(err, errlen, "model directory %s is not usable: %s.\nHINT: it needs config.json and "
                          "model.safetensors (or model.safetensors.index.json + shards), as save_pretrained writes them",
                          model, why);
        *loc = l;
        return 0;
    }
    if (t5_path_exists(model))
        return t5_set_err(err, errlen, "--model %s is a file, not a directory; give the directory that holds it", model);
    // 2. the HF hub cache
    Text tried = {0};
    char** roots = cache_roots_all();
    char** ids = repo_ids(model);
    bool first_bin = false;
    ModelLocation bin_loc;
    memset(&bin_loc, 0, sizeof bin_loc);
    int rc = -1;
    text_add(&tried, "    %s: not a local directory\n", model);
    for (char** r = roots; *r && rc != 0; r++) {
        if (!t5_is_dir(*r)) {
            text_add(&tried, "    %s: cache folder does not exist\n", *r);
            continue;
        }
        for (char** id = ids; *id && rc != 0; id++) {
            char folder[512], repo_dir[MODEL_LOOKUP_PATHLEN], snap[MODEL_LOOKUP_PATHLEN];
            repo_folder(*id, folder, sizeof folder);
            snprintf(repo_dir, sizeof repo_dir, "%s/%s", *r, folder);
            if (!t5_is_dir(repo_dir)) {
                text_add(&tried, "    %s: not there\n", repo_dir);
                continue;
            }
            if (!pick_snapshot(repo_dir, snap, sizeof snap, &tried)) {
                text_add(&tried, "    %s: no snapshots\n", repo_dir);
                continue;
            }
            const char* why = probe_dir(snap, need, &l);
            if ((need & MODEL_NEED_WEIGHTS) && l.weights == MODEL_WEIGHTS_PYTORCH_BIN) {
                if (!first_bin) bin_loc = l;
                first_bin = true;
                text_add(&tried, "    %s: only pytorch_model.bin\n", snap);
                continue;
            }
            if (why) {
                text_add(&tried, "    %s: %s\n", snap, why);
                continue;
            }
            l.from_cache = true;
            *loc = l;
            rc = 0;
        }
    }
    if (rc != 0) {
        if (first_bin) {
            pytorch_bin_error(&bin_loc, err, errlen);
        } else {
            t5_set_err(err, errlen,
                   "model '%s' not found: it is not a local directory and not in the HuggingFace cache.\n"
                   "Looked in:\n%sHINT:\n%s",
                   model, tried.s ? tried.s : "", hint_text(model));
        }
    }
    free(tried.s);
    model_lookup_free_list(roots);
    model_lookup_free_list(ids);
    return rc;
}

int model_lookup_tokenizer(const char* model, char* path, size_t pathlen, char* err, size_t errlen) {
    ModelLocation l;
    if (model_lookup(model, MODEL_NEED_TOKENIZER, &l, err, errlen) != 0) return -1;
    snprintf(path, pathlen, "%s", l.tokenizer_path);
    return 0;
}
