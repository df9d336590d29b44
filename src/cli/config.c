/*
 * config.c: loading, validating, resolving and printing the run configuration (see config.h).
 *
 * One code path for every value: JSON files, DeepSpeed files and command-line flags are all
 * turned into jansson values and go through config_set_json(), which checks the type and range
 * the table (config_table.c) gives for the key. Unknown keys at any depth are errors that name
 * the path and the closest valid key. "auto" resolution copies the HF Trainer's DeepSpeed
 * integration (transformers integrations/deepspeed.py, HfTrainerDeepSpeedConfig):
 *   fill_match: "auto" -> the training argument's value; an explicit value that differs is a
 *               mismatch, and all mismatches are reported together as one error;
 *   fill_only:  "auto" -> value, never a mismatch (warmup_min_lr, the d_model-based sizes).
 * Keys absent from the DeepSpeed JSON keep DeepSpeed's defaults, as with HF + DeepSpeed.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "../base/common.h"

#define DS_PREFIX "deepspeed."
#define DS_PREFIX_LEN 10

// ----------------------------------------------------------------------------
// small helpers

static void* field_ptr(RunConfig* c, const ConfigKey* k) { return (char*)c + k->offset; }
static const void* field_cptr(const RunConfig* c, const ConfigKey* k) { return (const char*)c + k->offset; }

static bool is_ds_key(const ConfigKey* k) { return strncmp(k->key, DS_PREFIX, DS_PREFIX_LEN) == 0; }

static void add_note(RunConfig* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(RunConfig* c, const char* fmt, ...) {
    if (c->num_notes >= (int)T5_ARRAY_LEN(c->notes)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->notes[c->num_notes++], CONFIG_NOTE_LEN, fmt, ap);
    va_end(ap);
}

int config_edit_distance(const char* a, const char* b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127) return 1000;
    int prev[128], cur[128];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = T5_MIN(sub, T5_MIN(del, ins));
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

int config_key_index(const char* key) {
    for (int i = 0; i < CONFIG_NUM_KEYS; i++)
        if (strcmp(CONFIG_KEYS[i].key, key) == 0) return i;
    for (int i = 0; i < CONFIG_NUM_ALIASES; i++)
        if (strcmp(CONFIG_ALIASES[i].alias, key) == 0) return config_key_index(CONFIG_ALIASES[i].key);
    return -1;
}

int config_key_source(const RunConfig* c, const char* key) {
    int ki = config_key_index(key);
    return ki < 0 ? -1 : c->src[ki];
}

// the last path component of a dotted key
static const char* key_leaf(const char* key) {
    const char* d = strrchr(key, '.');
    return d ? d + 1 : key;
}

// length of the parent part of a dotted key ("a.b.c" -> 3 for "a.b"), 0 for top level
static size_t key_parent_len(const char* key) {
    const char* d = strrchr(key, '.');
    return d ? (size_t)(d - key) : 0;
}

static const char* kind_name(const ConfigKey* k) {
    switch (k->kind) {
        case CONFIG_BOOL: return "true or false";
        case CONFIG_INT: return "an integer";
        case CONFIG_FLOAT: return "a number";
        case CONFIG_STR: return "a string";
        case CONFIG_ENUM: return "a string";
        case CONFIG_BETAS: return "a list of two numbers";
        case CONFIG_SECTION: return "an object";
        case CONFIG_DEEPSPEED: return "a file path or an object";
    }
    return "?";
}

// the shortest text that reads back as the same double (Python's repr: 5e-05, 0.001, 1.0)
static void fmt_shortest(double v, char* buf, size_t n) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eni")) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, ".0");
    }
}

// a short text of a JSON value for messages
static void json_brief(const json_t* v, char* buf, size_t n) {
    if (json_is_real(v)) {
        fmt_shortest(json_real_value(v), buf, n);
        return;
    }
    if (json_is_array(v) && json_array_size(v) == 2 && json_is_number(json_array_get(v, 0)) &&
        json_is_number(json_array_get(v, 1))) {
        char a[40], b[40];
        json_brief(json_array_get(v, 0), a, sizeof a);
        json_brief(json_array_get(v, 1), b, sizeof b);
        snprintf(buf, n, "[%s, %s]", a, b);
        return;
    }
    char* s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(buf, n, "?");
        return;
    }
    if (strlen(s) > 60) strcpy(s + 57, "...");
    snprintf(buf, n, "%s", s);
    free(s);
}

static void fmt_num(double v, char* buf, size_t n) {
    if (v >= 9.0e18) snprintf(buf, n, "inf");
    else snprintf(buf, n, "%.10g", v);
}

static void range_text(const ConfigKey* k, char* buf, size_t n) {
    char lo[40], hi[40];
    fmt_num(k->lo, lo, sizeof lo);
    fmt_num(k->hi, hi, sizeof hi);
    if (k->hi >= 9.0e18) snprintf(buf, n, ">= %s", lo);
    else snprintf(buf, n, "%s..%s", lo, hi);
}

// the i-th choice of an enum ("a|b|c") into buf
static bool enum_choice(const ConfigKey* k, int idx, char* buf, size_t n) {
    const char* p = k->choices;
    for (int i = 0; p; i++) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (i == idx) {
            snprintf(buf, n, "%.*s", (int)len, p);
            return true;
        }
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

static int enum_lookup(const ConfigKey* k, const char* s) {
    char buf[64];
    for (int i = 0; enum_choice(k, i, buf, sizeof buf); i++) {
        if ((k->flags & CONFIG_F_NOCASE) ? strcasecmp(buf, s) == 0 : strcmp(buf, s) == 0) return i;
    }
    return -1;
}

static void enum_list(const ConfigKey* k, char* buf, size_t n) {
    buf[0] = 0;
    char one[64];
    for (int i = 0; enum_choice(k, i, one, sizeof one); i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", i ? ", " : "", one);
    }
}

// ----------------------------------------------------------------------------
// setting one value

// Sets key ki from JSON value v. `where` names the key for messages ("file.json: a.b" or
// "command line: --flag"). Returns 0 or T5_EXIT_USAGE.
static int config_set_json(RunConfig* c, int ki, const json_t* v, ConfigSource src, const char* where, char* err,
                           size_t n) {
    const ConfigKey* k = &CONFIG_KEYS[ki];
    void* p = field_ptr(c, k);
    char got[96];
    json_brief(v, got, sizeof got);

    if (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0 && k->kind != CONFIG_STR &&
        k->kind != CONFIG_DEEPSPEED) {
        if (!(k->flags & CONFIG_F_AUTO))
            return t5_errf(err, n, T5_EXIT_USAGE,
                        "%s: \"auto\" is not allowed here (only the DeepSpeed keys the HF Trainer fills accept it; "
                        "expected %s)",
                        where, kind_name(k));
        c->src[ki] = CONFIG_SRC_AUTO;
        return 0;
    }
    if (k->kind == CONFIG_STR && json_is_string(v) && strcmp(json_string_value(v), "auto") == 0 &&
        (k->flags & CONFIG_F_AUTO)) {
        c->src[ki] = CONFIG_SRC_AUTO;
        return 0;
    }
    if (json_is_null(v)) {
        if (!(k->flags & CONFIG_F_NULL))
            return t5_errf(err, n, T5_EXIT_USAGE, "%s: null is not allowed (expected %s)", where, kind_name(k));
        switch (k->kind) {
            case CONFIG_INT: *(int64_t*)p = -1; break;
            case CONFIG_FLOAT: *(double*)p = NAN; break;
            case CONFIG_STR:
            case CONFIG_DEEPSPEED: ((char*)p)[0] = 0; break;
            case CONFIG_ENUM: *(int*)p = 0; break;
            case CONFIG_BOOL: *(bool*)p = false; src = CONFIG_SRC_DEFAULT; break;  // null bool: the default rule
            default: break;
        }
        if (k->offset == offsetof(RunConfig, source_prefix)) c->source_prefix_set = false;
        c->src[ki] = (uint8_t)src;
        return 0;
    }
    char range[160];
    switch (k->kind) {
        case CONFIG_BOOL:
            if (!json_is_boolean(v))
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected true or false, got %s", where, got);
            *(bool*)p = json_is_true(v);
            break;
        case CONFIG_INT: {
            if (!json_is_number(v)) return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected an integer, got %s", where, got);
            double d = json_number_value(v);
            int64_t x;
            if (json_is_integer(v)) {
                x = (int64_t)json_integer_value(v);
                d = (double)x;
            } else {
                if (!isfinite(d) || fabs(d) > 9.2e18)
                    return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s is not a valid integer", where, got);
                if (d != floor(d) && !(k->flags & CONFIG_F_TRUNCATE))
                    return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected an integer, got %s", where, got);
                x = (int64_t)d;  // DeepSpeed sizes: pydantic int() truncates toward zero
                d = (double)x;
            }
            if (d < k->lo || d > k->hi) {
                range_text(k, range, sizeof range);
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s is out of range (allowed %s)", where, got, range);
            }
            *(int64_t*)p = x;
            break;
        }
        case CONFIG_FLOAT: {
            if (!json_is_number(v)) return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected a number, got %s", where, got);
            double d = json_number_value(v);
            if (!isfinite(d) || d < k->lo || d > k->hi) {
                range_text(k, range, sizeof range);
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s is out of range (allowed %s)", where, got, range);
            }
            *(double*)p = d;
            break;
        }
        case CONFIG_STR:
        case CONFIG_DEEPSPEED: {
            if (!json_is_string(v)) return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected a string, got %s", where, got);
            const char* s = json_string_value(v);
            if (strlen(s) >= k->len)
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: value is too long (%zu characters, at most %zu)", where,
                            strlen(s), k->len - 1);
            memcpy(p, s, strlen(s) + 1);
            if (k->offset == offsetof(RunConfig, source_prefix)) c->source_prefix_set = true;
            break;
        }
        case CONFIG_ENUM: {
            char list[256];
            enum_list(k, list, sizeof list);
            if (!json_is_string(v))
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected one of %s, got %s", where, list, got);
            int idx = enum_lookup(k, json_string_value(v));
            if (idx < 0 || (idx == 0 && (k->flags & CONFIG_F_NULL) && strcmp(json_string_value(v), "null") == 0))
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s is not one of %s", where, got, list);
            *(int*)p = idx;
            break;
        }
        case CONFIG_BETAS: {
            if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(json_array_get(v, 0)) ||
                !json_is_number(json_array_get(v, 1)))
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected a list of two numbers [beta1, beta2], got %s", where,
                            got);
            double b[2] = {json_number_value(json_array_get(v, 0)), json_number_value(json_array_get(v, 1))};
            for (int i = 0; i < 2; i++)
                if (!(b[i] >= k->lo && b[i] <= k->hi))
                    return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s is out of range (each beta must be in [0, 1))", where,
                                got);
            memcpy(p, b, sizeof b);
            break;
        }
        case CONFIG_SECTION:
            if (!json_is_object(v)) return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected an object, got %s", where, got);
            *(bool*)p = true;
            break;
    }
    c->src[ki] = (uint8_t)src;
    return 0;
}

static void config_set_default(RunConfig* c, int ki) {
    const ConfigKey* k = &CONFIG_KEYS[ki];
    if (k->kind == CONFIG_SECTION) {
        *(bool*)field_ptr(c, k) = false;
        c->src[ki] = CONFIG_SRC_DEFAULT;
        return;
    }
    json_error_t jerr;
    json_t* v = json_loads(k->def, JSON_DECODE_ANY, &jerr);
    char err[256];
    if (!v || config_set_json(c, ki, v, CONFIG_SRC_DEFAULT, k->key, err, sizeof err) != 0) {
        // a broken default is a bug in config_table.c, caught by the tests
        fprintf(stderr, "t5train: internal error: bad default for %s: %s\n", k->key, v ? err : jerr.text);
        abort();
    }
    json_decref(v);
    c->src[ki] = CONFIG_SRC_DEFAULT;
}

static void config_reset_deepspeed(RunConfig* c) {
    for (int i = 0; i < CONFIG_NUM_KEYS; i++)
        if (is_ds_key(&CONFIG_KEYS[i])) config_set_default(c, i);
    c->has_deepspeed = false;
    c->deepspeed[0] = 0;
}

void config_init(RunConfig* c) {
    memset(c, 0, sizeof *c);
    if (CONFIG_NUM_KEYS > CONFIG_MAX_KEYS) {
        fprintf(stderr, "t5train: internal error: CONFIG_MAX_KEYS (%d) < table size (%d)\n", CONFIG_MAX_KEYS,
                CONFIG_NUM_KEYS);
        abort();
    }
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) config_set_default(c, i);
    c->world_size = 1;
    c->num_training_steps = -1;
    c->train_samples = -1;
}

// ----------------------------------------------------------------------------
// walking JSON objects

// "did you mean": the closest key among the siblings of `full` (same parent), or "" if none is close
static void closest_sibling(const char* full, char* out, size_t n) {
    size_t plen = key_parent_len(full);
    const char* leaf = key_leaf(full);
    int best = INT_MAX;
    out[0] = 0;
    for (int pass = 0; pass < 2; pass++) {
        int count = pass == 0 ? CONFIG_NUM_KEYS : CONFIG_NUM_ALIASES;
        for (int i = 0; i < count; i++) {
            const char* key = pass == 0 ? CONFIG_KEYS[i].key : CONFIG_ALIASES[i].alias;
            if (key_parent_len(key) != plen || strncmp(key, full, plen) != 0) continue;
            int d = config_edit_distance(leaf, key_leaf(key));
            if (d < best) {
                best = d;
                snprintf(out, n, "%s", key_leaf(key));
            }
        }
    }
    int limit = T5_MAX(2, (int)strlen(leaf) / 3);
    if (best > limit) out[0] = 0;
}

// a key with this leaf name elsewhere in the schema (e.g. offload_optimizer at the top level)
static const char* same_leaf_elsewhere(const char* full) {
    const char* leaf = key_leaf(full);
    for (int i = 0; i < CONFIG_NUM_KEYS; i++)
        if (strcmp(key_leaf(CONFIG_KEYS[i].key), leaf) == 0 && strcmp(CONFIG_KEYS[i].key, full) != 0)
            return CONFIG_KEYS[i].key;
    return NULL;
}

static int unknown_key_error(const char* file, const char* full, size_t strip, char* err, size_t n) {
    char best[128];
    closest_sibling(full, best, sizeof best);
    const char* shown = full + strip;
    if (best[0]) return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s: unknown key (did you mean %s?)", file, shown, best);
    const char* other = same_leaf_elsewhere(full);
    if (other && strlen(other) >= strip && strncmp(other, full, strip) == 0) {
        char parent[256];
        snprintf(parent, sizeof parent, "%.*s", (int)key_parent_len(other + strip), other + strip);
        return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s: unknown key here (it belongs under %s)", file, shown,
                    parent[0] ? parent : "the top level");
    }
    return t5_errf(err, n, T5_EXIT_USAGE, "%s: %s: unknown key (see t5train --help or docs/config.md)", file, shown);
}

static int load_json(const char* path, const char* what, json_t** out, char* err, size_t n);
static int apply_object(RunConfig* c, const json_t* obj, const char* prefix, size_t strip, const char* file,
                        const char* dir, char* err, size_t n);

static int load_deepspeed_path(RunConfig* c, const char* path, char* err, size_t n) {
    json_t* root = NULL;
    int rc = load_json(path, "DeepSpeed config file", &root, err, n);
    if (rc) return rc;
    config_reset_deepspeed(c);
    c->has_deepspeed = true;
    if (strlen(path) >= sizeof c->deepspeed) {
        json_decref(root);
        return t5_errf(err, n, T5_EXIT_USAGE, "DeepSpeed config path too long: %s", path);
    }
    snprintf(c->deepspeed, sizeof c->deepspeed, "%s", path);
    int dk = config_key_index("deepspeed");
    c->src[dk] = CONFIG_SRC_FILE;
    rc = apply_object(c, root, DS_PREFIX, DS_PREFIX_LEN, path, NULL, err, n);
    json_decref(root);
    return rc;
}

// Applies every key of obj; prefix is the table path of obj ("" or "deepspeed." or ...), strip the
// number of prefix characters not shown in messages (the "deepspeed." of a separate DeepSpeed file).
static int apply_object(RunConfig* c, const json_t* obj, const char* prefix, size_t strip, const char* file,
                        const char* dir, char* err, size_t n) {
    const char* name;
    json_t* v;
    json_object_foreach((json_t*)obj, name, v) {
        char full[512];
        snprintf(full, sizeof full, "%s%s", prefix, name);
        char where[1024];
        snprintf(where, sizeof where, "%s: %s", file, full + strip);
        int ki = config_key_index(full);
        if (ki < 0) return unknown_key_error(file, full, strip, err, n);
        const ConfigKey* k = &CONFIG_KEYS[ki];
        if (k->kind == CONFIG_DEEPSPEED) {
            if (json_is_string(v)) {
                const char* p = json_string_value(v);
                char* path = (p[0] == '/' || !dir) ? strdup_check(p) : t5_path_join(dir, p);
                int rc = load_deepspeed_path(c, path, err, n);
                free(path);
                if (rc) return rc;
            } else if (json_is_object(v)) {
                config_reset_deepspeed(c);
                c->has_deepspeed = true;
                c->src[ki] = CONFIG_SRC_FILE;
                int rc = apply_object(c, v, DS_PREFIX, 0, file, dir, err, n);
                if (rc) return rc;
            } else if (json_is_null(v)) {
                config_reset_deepspeed(c);
            } else {
                char got[96];
                json_brief(v, got, sizeof got);
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected a DeepSpeed JSON file path or an object, got %s",
                            where, got);
            }
            continue;
        }
        int rc = config_set_json(c, ki, v, CONFIG_SRC_FILE, where, err, n);
        if (rc) return rc;
        if (k->kind == CONFIG_SECTION) {
            char sub[520];
            snprintf(sub, sizeof sub, "%s.", k->key);
            rc = apply_object(c, v, sub, strip, file, dir, err, n);
            if (rc) return rc;
        }
    }
    return 0;
}

static int load_json(const char* path, const char* what, json_t** out, char* err, size_t n) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return t5_errf(err, n, T5_EXIT_USAGE, "%s not found: %s", what, path);
        return t5_errf(err, n, T5_EXIT_USAGE, "cannot read %s %s: %s", what, path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) return t5_errf(err, n, T5_EXIT_USAGE, "cannot read %s %s: it is a directory", what, path);
    FILE* f = fopen(path, "rb");
    if (!f) return t5_errf(err, n, T5_EXIT_USAGE, "cannot read %s %s: %s", what, path, strerror(errno));
    json_error_t jerr;
    json_t* root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!root)
        return t5_errf(err, n, T5_EXIT_USAGE, "%s:%d:%d: invalid JSON: %s", path, jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected a JSON object ({...}) at the top level", path);
    }
    *out = root;
    return 0;
}

static char* dir_of(const char* path) {
    const char* slash = strrchr(path, '/');
    if (!slash) return strdup_check(".");
    if (slash == path) return strdup_check("/");
    char* d = strdup_check(path);
    d[slash - path] = 0;
    return d;
}

int config_load_file(RunConfig* c, const char* path, char* err, size_t errlen) {
    json_t* root = NULL;
    int rc = load_json(path, "config file", &root, err, errlen);
    if (rc) return rc;
    char* dir = dir_of(path);
    snprintf(c->config_path, sizeof c->config_path, "%s", path);
    rc = apply_object(c, root, "", 0, path, dir, err, errlen);
    free(dir);
    json_decref(root);
    return rc;
}

int config_load_deepspeed_file(RunConfig* c, const char* path, char* err, size_t errlen) {
    return load_deepspeed_path(c, path, err, errlen);
}

int config_load_string(RunConfig* c, const char* text, const char* name, char* err, size_t errlen) {
    json_error_t jerr;
    json_t* root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return t5_errf(err, errlen, T5_EXIT_USAGE, "%s:%d:%d: invalid JSON: %s", name, jerr.line, jerr.column,
                    jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return t5_errf(err, errlen, T5_EXIT_USAGE, "%s: expected a JSON object ({...}) at the top level", name);
    }
    int rc = apply_object(c, root, "", 0, name, ".", err, errlen);
    json_decref(root);
    return rc;
}

// ----------------------------------------------------------------------------
// command line

static int parse_bool_word(const char* s) {
    static const char* yes[] = {"true", "t", "yes", "y", "1"};
    static const char* no[] = {"false", "f", "no", "n", "0"};
    for (size_t i = 0; i < T5_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) return 1;
        if (strcasecmp(s, no[i]) == 0) return 0;
    }
    return -1;
}

typedef enum { FLAG_KEY = 0, FLAG_CONFIG, FLAG_DRY_RUN, FLAG_HELP, FLAG_DATASET } FlagKind;

typedef struct {
    FlagKind kind;
    int ki;              // FLAG_KEY: key index
    char name[128];      // normalized, without dashes
    const char* value;   // NULL for a bare boolean flag
    bool negated;        // --no_<bool>
} ParsedFlag;

static int closest_flag(const char* name, char* out, size_t n) {
    int best = INT_MAX;
    out[0] = 0;
    static const char* extra[] = {"config", "dry_run", "print_config", "help", "dataset"};
    for (int i = 0; i < CONFIG_NUM_KEYS + CONFIG_NUM_ALIASES + (int)T5_ARRAY_LEN(extra); i++) {
        const char* key = i < CONFIG_NUM_KEYS ? CONFIG_KEYS[i].key
                          : i < CONFIG_NUM_KEYS + CONFIG_NUM_ALIASES ? CONFIG_ALIASES[i - CONFIG_NUM_KEYS].alias
                                                                     : extra[i - CONFIG_NUM_KEYS - CONFIG_NUM_ALIASES];
        if (strchr(key, '.')) continue;
        int d = config_edit_distance(name, key);
        if (d < best) {
            best = d;
            snprintf(out, n, "%s", key);
        }
    }
    if (best > T5_MAX(2, (int)strlen(name) / 3)) out[0] = 0;
    return best;
}

// Splits argv into flags. Returns 0 or T5_EXIT_USAGE.
static int tokenize_args(int argc, char** argv, ParsedFlag* flags, int* nflags, char* err, size_t n) {
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        ParsedFlag* f = &flags[nf];
        memset(f, 0, sizeof *f);
        if (a[0] != '-') {
            size_t l = strlen(a);
            if (l > 5 && strcmp(a + l - 5, ".json") == 0) {  // HF: a lone .json argument is the config
                f->kind = FLAG_CONFIG;
                f->value = a;
                snprintf(f->name, sizeof f->name, "config");
                nf++;
                continue;
            }
            return t5_errf(err, n, T5_EXIT_USAGE, "unexpected argument '%s' (flags are --key VALUE; see --help)", a);
        }
        if (strcmp(a, "-h") == 0) {
            f->kind = FLAG_HELP;
            nf++;
            continue;
        }
        if (a[1] != '-' || !a[2])
            return t5_errf(err, n, T5_EXIT_USAGE, "unknown flag %s (flags are --key VALUE; see --help)", a);
        const char* body = a + 2;
        const char* eq = strchr(body, '=');
        size_t len = eq ? (size_t)(eq - body) : strlen(body);
        if (len >= sizeof f->name) return t5_errf(err, n, T5_EXIT_USAGE, "unknown flag %.60s...", a);
        memcpy(f->name, body, len);
        f->name[len] = 0;
        for (char* p = f->name; *p; p++)
            if (*p == '-') *p = '_';
        if (eq) f->value = eq + 1;

        bool is_bool = false;
        if (strcmp(f->name, "help") == 0) {
            f->kind = FLAG_HELP;
            is_bool = true;
        } else if (strcmp(f->name, "dry_run") == 0 || strcmp(f->name, "print_config") == 0) {
            f->kind = FLAG_DRY_RUN;
            is_bool = true;
        } else if (strcmp(f->name, "config") == 0) {
            f->kind = FLAG_CONFIG;
        } else if (strcmp(f->name, "dataset") == 0) {
            f->kind = FLAG_DATASET;
        } else {
            int ki = strchr(f->name, '.') ? -1 : config_key_index(f->name);
            if (ki < 0 && strncmp(f->name, "no_", 3) == 0) {
                int k2 = config_key_index(f->name + 3);
                if (k2 >= 0 && CONFIG_KEYS[k2].kind == CONFIG_BOOL && !strchr(CONFIG_KEYS[k2].key, '.')) {
                    ki = k2;
                    f->negated = true;
                }
            }
            if (ki < 0) {
                char best[128];
                closest_flag(f->name, best, sizeof best);
                if (best[0])
                    return t5_errf(err, n, T5_EXIT_USAGE, "unknown flag --%s (did you mean --%s?)", f->name, best);
                return t5_errf(err, n, T5_EXIT_USAGE, "unknown flag --%s (see t5train --help)", f->name);
            }
            f->kind = FLAG_KEY;
            f->ki = ki;
            is_bool = CONFIG_KEYS[ki].kind == CONFIG_BOOL;
            if (f->negated && eq)
                return t5_errf(err, n, T5_EXIT_USAGE, "--%s takes no value", f->name);
        }
        if (!eq) {
            if (is_bool) {
                // HF: `--fp16` alone is true; `--fp16 false` is accepted too
                if (!f->negated && i + 1 < argc && parse_bool_word(argv[i + 1]) >= 0) f->value = argv[++i];
            } else {
                if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] == '-'))
                    return t5_errf(err, n, T5_EXIT_USAGE, "--%s: missing value", f->name);
                f->value = argv[++i];
            }
        }
        nf++;
    }
    *nflags = nf;
    return 0;
}

// turns a command-line string into the JSON value the key's type wants (checks come after)
static json_t* cli_value_to_json(const ConfigKey* k, const char* s, const char* flag, char* err, size_t n, int* rc) {
    *rc = 0;
    if ((k->flags & CONFIG_F_NULL) && (strcmp(s, "null") == 0 || strcmp(s, "None") == 0)) return json_null();
    if (strcmp(s, "auto") == 0 && k->kind != CONFIG_STR && k->kind != CONFIG_DEEPSPEED) return json_string("auto");
    switch (k->kind) {
        case CONFIG_BOOL: {
            int b = parse_bool_word(s);
            if (b < 0) {
                *rc = t5_errf(err, n, T5_EXIT_USAGE, "command line: --%s: expected true or false, got '%s'", flag, s);
                return NULL;
            }
            return json_boolean(b);
        }
        case CONFIG_INT:
        case CONFIG_FLOAT: {
            char* end;
            errno = 0;
            double d = strtod(s, &end);
            if (!s[0] || *end || errno) {
                *rc = t5_errf(err, n, T5_EXIT_USAGE, "command line: --%s: expected %s, got '%s'", flag, kind_name(k), s);
                return NULL;
            }
            if (k->kind == CONFIG_INT && d == floor(d) && fabs(d) < 9.2e18) return json_integer((json_int_t)d);
            return json_real(d);
        }
        default: return json_string(s);
    }
}

int config_parse_args(RunConfig* c, int argc, char** argv, char* err, size_t errlen) {
    ParsedFlag* flags = calloc_check((size_t)(argc > 0 ? argc : 1), sizeof(ParsedFlag));
    int nf = 0, rc = tokenize_args(argc, argv, flags, &nf, err, errlen);
    if (rc) goto done;
    const int dk = config_key_index("deepspeed");
    // pass 1: --help, the config file, then the DeepSpeed file (a later one replaces an earlier one)
    for (int i = 0; i < nf; i++)
        if (flags[i].kind == FLAG_HELP) {
            c->help = true;
            goto done;
        }
    for (int i = 0; i < nf; i++)
        if (flags[i].kind == FLAG_CONFIG && (rc = config_load_file(c, flags[i].value, err, errlen))) goto done;
    for (int i = 0; i < nf; i++)
        if (flags[i].kind == FLAG_KEY && flags[i].ki == dk) {
            const char* v = flags[i].value;
            if (strcmp(v, "null") == 0 || strcmp(v, "None") == 0 || !v[0]) {
                config_reset_deepspeed(c);
                c->src[dk] = CONFIG_SRC_CLI;
                continue;
            }
            if ((rc = load_deepspeed_path(c, v, err, errlen))) goto done;
            c->src[dk] = CONFIG_SRC_CLI;
        }
    // pass 2: every other flag, in order
    for (int i = 0; i < nf; i++) {
        ParsedFlag* f = &flags[i];
        char where[200];
        snprintf(where, sizeof where, "command line: --%s", f->name);
        if (f->kind == FLAG_DRY_RUN) {
            int b = f->value ? parse_bool_word(f->value) : 1;
            if (b < 0) {
                rc = t5_errf(err, errlen, T5_EXIT_USAGE, "%s: expected true or false, got '%s'", where, f->value);
                goto done;
            }
            c->dry_run = b;
        } else if (f->kind == FLAG_DATASET) {
            // short form: --dataset wmt16-ro-en = --dataset_name wmt16 --dataset_config_name ro-en (en -> ro)
            const char* v = f->value;
            size_t l = strlen(v);
            bool pair = l > 6 && v[l - 3] == '-' && v[l - 6] == '-' && isalpha((unsigned char)v[l - 1]) &&
                        isalpha((unsigned char)v[l - 4]);
            json_t* name = pair ? json_stringn(v, l - 6) : json_string(v);
            rc = config_set_json(c, config_key_index("dataset_name"), name, CONFIG_SRC_CLI, where, err, errlen);
            json_decref(name);
            if (rc) goto done;
            if (pair) {
                json_t* cfg = json_string(v + l - 5);
                rc = config_set_json(c, config_key_index("dataset_config_name"), cfg, CONFIG_SRC_CLI, where, err,
                                     errlen);
                json_decref(cfg);
                if (rc) goto done;
                if (strcmp(v + l - 5, "ro-en") == 0) {  // DESIGN.md: English -> Romanian
                    int ks = config_key_index("source_lang"), kt = config_key_index("target_lang");
                    if (c->src[ks] == CONFIG_SRC_DEFAULT && c->src[kt] == CONFIG_SRC_DEFAULT) {
                        snprintf(c->source_lang, sizeof c->source_lang, "en");
                        snprintf(c->target_lang, sizeof c->target_lang, "ro");
                        c->src[ks] = c->src[kt] = CONFIG_SRC_DERIVED;
                    }
                }
            }
        } else if (f->kind == FLAG_KEY && f->ki != dk) {
            const ConfigKey* k = &CONFIG_KEYS[f->ki];
            json_t* v;
            if (k->kind == CONFIG_BOOL && !f->value) v = json_boolean(!f->negated);
            else if ((v = cli_value_to_json(k, f->value, f->name, err, errlen, &rc)) == NULL) goto done;
            rc = config_set_json(c, f->ki, v, CONFIG_SRC_CLI, where, err, errlen);
            json_decref(v);
            if (rc) goto done;
        }
    }
done:
    free(flags);
    return rc;
}

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
    // HF: DistributedSampler pads to a multiple of the world size; the DataLoader keeps the last
    // partial batch unless dataloader_drop_last; updates per epoch = ceil(batches / accumulation).
    int64_t per_rank = CEIL_DIV(c->train_samples, (int64_t)c->world_size);
    int64_t bs = c->per_device_train_batch_size;
    int64_t batches = c->dataloader_drop_last ? per_rank / bs : CEIL_DIV(per_rank, bs);
    int64_t ga = c->gradient_accumulation_steps;
    int64_t updates = T5_MAX(batches / ga + (batches % ga > 0), (int64_t)1);
    c->num_training_steps = (int64_t)ceil(c->num_train_epochs * (double)updates);
}

static int resolve_deepspeed(RunConfig* c, char* err, size_t n) {
    Mismatches m = {.c = c};
    DsConfig* ds = &c->ds;
    const int64_t train_batch = (int64_t)c->world_size * c->per_device_train_batch_size * c->gradient_accumulation_steps;

    // trainer_config_process
    fill(&m, "deepspeed.train_micro_batch_size_per_gpu", json_integer(c->per_device_train_batch_size),
         "per_device_train_batch_size", true);
    fill(&m, "deepspeed.gradient_accumulation_steps", json_integer(c->gradient_accumulation_steps),
         "gradient_accumulation_steps", true);
    fill(&m, "deepspeed.train_batch_size", json_integer(train_batch), "train_batch_size (calculated)", true);
    fill(&m, "deepspeed.gradient_clipping", json_real(c->max_grad_norm), "max_grad_norm", true);
    if (ds->optimizer.present) {
        fill(&m, "deepspeed.optimizer.params.lr", json_real(c->learning_rate), "learning_rate", true);
        fill(&m, "deepspeed.optimizer.params.betas", json_pack("[ff]", c->adam_beta1, c->adam_beta2),
             "adam_beta1+adam_beta2", true);
        fill(&m, "deepspeed.optimizer.params.eps", json_real(c->adam_epsilon), "adam_epsilon", true);
        fill(&m, "deepspeed.optimizer.params.weight_decay", json_real(c->weight_decay), "weight_decay", true);
    }
    if (ds->scheduler.present) {
        fill(&m, "deepspeed.scheduler.params.warmup_min_lr", json_integer(0), "", false);
        fill(&m, "deepspeed.scheduler.params.warmup_max_lr", json_real(c->learning_rate), "learning_rate", true);
    }
    if (c->save_on_each_node) {
        ds->checkpoint.present = true;
        ds->checkpoint.use_node_local_storage = true;
        c->src[config_key_index("deepspeed.checkpoint.use_node_local_storage")] = CONFIG_SRC_DERIVED;
    }
    bool fp16 = c->fp16 || c->fp16_full_eval, bf16 = c->bf16 || c->bf16_full_eval;
    fill(&m, "deepspeed.fp16.enabled", json_boolean(fp16), "fp16|fp16_full_eval+fp16_backend(amp)", true);
    fill(&m, "deepspeed.amp.enabled", json_false(), "fp16+fp16_backend(apex)", true);
    fill(&m, "deepspeed.amp.opt_level", json_string("O1"), "fp16_opt_level", false);
    fill(&m, "deepspeed.bf16.enabled", json_boolean(bf16), "bf16|bf16_full_eval", true);

    // trainer_config_finalize: the d_model-based sizes
    DsZero* z = &ds->zero_optimization;
    const char* hkeys[] = {"deepspeed.zero_optimization.reduce_bucket_size",
                           "deepspeed.zero_optimization.stage3_prefetch_bucket_size",
                           "deepspeed.zero_optimization.stage3_param_persistence_threshold"};
    bool any_auto = false;
    for (int i = 0; i < 3; i++) any_auto |= c->src[config_key_index(hkeys[i])] == CONFIG_SRC_AUTO;
    if (any_auto && c->model_found) {
        int64_t d = c->model.d_model;
        fill(&m, hkeys[0], json_integer(d * d), "", false);
        if (z->stage == 3) {
            // HF writes 0.9 * d^2 as a float (943718.4 for d_model 1024); DeepSpeed's field is an
            // int, so the value that takes effect is the truncation, as int(0.9 * d^2) in newer HF.
            fill(&m, hkeys[1], json_integer((json_int_t)(0.9 * (double)(d * d))), "", false);
            fill(&m, hkeys[2], json_integer(10 * d), "", false);
        }
    }
    if (any_auto && !c->model_found)
        add_note(c, "zero_optimization d_model autos unresolved until the model '%.60s' is loaded",
                 c->model_name_or_path);
    if (z->stage < 3 && (c->src[config_key_index(hkeys[1])] == CONFIG_SRC_AUTO ||
                         c->src[config_key_index(hkeys[2])] == CONFIG_SRC_AUTO))
        add_note(c, "stage3_* \"auto\" keys are not used below ZeRO stage 3 (left unresolved, as HF does)");

    // scheduler steps
    if (ds->scheduler.present) {
        int kt = config_key_index("deepspeed.scheduler.params.total_num_steps");
        int kw = config_key_index("deepspeed.scheduler.params.warmup_num_steps");
        if (c->num_training_steps > 0)
            fill(&m, CONFIG_KEYS[kt].key, json_integer(c->num_training_steps), "num_training_steps (calculated)",
                 true);
        else if (c->src[kt] == CONFIG_SRC_AUTO)
            add_note(c, "scheduler total_num_steps unresolved until the training set size is known");
        int64_t warm = -1;
        if (c->warmup_steps > 0) warm = c->warmup_steps;
        else if (c->warmup_ratio == 0) warm = 0;
        else if (c->num_training_steps > 0) warm = (int64_t)ceil((double)c->num_training_steps * c->warmup_ratio);
        if (warm >= 0) fill(&m, CONFIG_KEYS[kw].key, json_integer(warm), "warmup_steps", true);
        else if (c->src[kw] == CONFIG_SRC_AUTO)
            add_note(c, "scheduler warmup_num_steps unresolved until the training set size is known");
    }
    if (m.count)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "the DeepSpeed config mismatches the training arguments: %s (the easiest fix is to set these "
                    "DeepSpeed values to \"auto\")",
                    m.text);

    // keys absent from the DeepSpeed JSON that the Trainer's own batching decides
    derive_int(c, "deepspeed.train_micro_batch_size_per_gpu", c->per_device_train_batch_size);
    derive_int(c, "deepspeed.gradient_accumulation_steps", c->gradient_accumulation_steps);
    derive_int(c, "deepspeed.train_batch_size", train_batch);
    if (ds->train_batch_size != ds->train_micro_batch_size_per_gpu * ds->gradient_accumulation_steps * c->world_size)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: train_batch_size %lld != train_micro_batch_size_per_gpu %lld x "
                    "gradient_accumulation_steps %lld x world size %d",
                    (long long)ds->train_batch_size, (long long)ds->train_micro_batch_size_per_gpu,
                    (long long)ds->gradient_accumulation_steps, c->world_size);

    // precision
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

    // ZeRO
    int ko = config_key_index("deepspeed.zero_optimization.overlap_comm");
    if (c->src[ko] == CONFIG_SRC_DEFAULT) {
        z->overlap_comm = z->stage == 3;  // DeepSpeed's default
        c->src[ko] = CONFIG_SRC_DERIVED;
    }
    if (z->offload_optimizer.device == OFFLOAD_NVME && !z->offload_optimizer.nvme_path[0])
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: zero_optimization.offload_optimizer.device is \"nvme\" but nvme_path is not set");
    if (z->offload_param.device == OFFLOAD_NVME && !z->offload_param.nvme_path[0])
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: zero_optimization.offload_param.device is \"nvme\" but nvme_path is not set");
    if (z->offload_param.device != OFFLOAD_NONE && z->stage != 3)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: zero_optimization.offload_param needs stage 3 (stage is %lld)", (long long)z->stage);
    if (z->offload_optimizer.device != OFFLOAD_NONE && z->stage == 0)
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "deepspeed: zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is 0)");
    if (ds->optimizer.present && (c->adafactor || c->optim == OPTIM_ADAFACTOR))
        return t5_errf(err, n, T5_EXIT_USAGE,
                    "--adafactor was passed, but also found `optimizer` configured in the DeepSpeed config. Only one "
                    "optimizer can be configured.");
    return 0;
}

int config_resolve(RunConfig* c, char* err, size_t n) {
    c->num_notes = 0;
    if (c->world_size < 1) c->world_size = 1;
    const int kdt = config_key_index("do_train"), kde = config_key_index("do_eval"),
              kdp = config_key_index("do_predict");
    if (!c->do_train && !c->do_eval && !c->do_predict && c->src[kdt] == CONFIG_SRC_DEFAULT &&
        c->src[kde] == CONFIG_SRC_DEFAULT && c->src[kdp] == CONFIG_SRC_DEFAULT) {
        c->do_train = true;  // the short form `t5train --model t5-3b --dataset wmt16-ro-en` trains
        c->src[kdt] = CONFIG_SRC_DERIVED;
        add_note(c, "none of do_train/do_eval/do_predict given: do_train implied");
    }
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
    if (c->eval_steps < 0 && c->evaluation_strategy == STRATEGY_STEPS) {
        c->eval_steps = c->logging_steps;
        c->src[config_key_index("eval_steps")] = CONFIG_SRC_DERIVED;
    }
    if (c->data_seed < 0) {
        c->data_seed = c->seed;
        c->src[config_key_index("data_seed")] = CONFIG_SRC_DERIVED;
    }
    if (!c->logging_dir[0]) {
        snprintf(c->logging_dir, sizeof c->logging_dir, "%s", c->output_dir);
        c->src[config_key_index("logging_dir")] = CONFIG_SRC_DERIVED;
    }
    if (c->warmup_steps > 0 && c->warmup_ratio > 0)
        add_note(c, "both warmup_steps and warmup_ratio given: warmup_steps wins (as HF)");

    find_model(c);
    if (c->do_train) compute_training_steps(c);
    if (c->has_deepspeed) {
        int rc = resolve_deepspeed(c, err, n);
        if (rc) return rc;
    }
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
    bool offload_nvme;
    bool resume;          // resume_from_checkpoint
} T5_BUILD_FEATURES = {
    .train = true,         // src/train/trainer.c (single GPU, ZeRO stage 0)
    .eval = true,          // eval loss, + generation and BLEU with predict_with_generate (src/eval/evaluate.c)
    .predict = true,       // test split: predict_results.json, generated_predictions.txt
    .max_zero_stage = 0,
    .offload_cpu = false,
    .offload_nvme = false,
    .resume = true,        // checkpoint-<step> dirs written by src/train/trainer.c
};

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
        if (devs[i] == OFFLOAD_NVME && !T5_BUILD_FEATURES.offload_nvme) MISSING("%s device nvme", what[i]);
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
        MISSING("optim %s (only AdamW)", name);
    }
    if (c->has_deepspeed && c->ds.scheduler.present && c->ds.scheduler.type != DS_SCHED_WARMUP_LR &&
        c->ds.scheduler.type != DS_SCHED_WARMUP_DECAY_LR)
        MISSING("DeepSpeed scheduler other than WarmupLR/WarmupDecayLR");
    if (c->resume_from_checkpoint[0] && !T5_BUILD_FEATURES.resume) MISSING("resume_from_checkpoint");
    if (c->report_to[0] && strcmp(c->report_to, "none") != 0) MISSING("report_to %s", c->report_to);
#undef MISSING
    if (count) return t5_errf(err, n, T5_EXIT_FAILURE, "not implemented yet: %s", list);
    return 0;
}

// ----------------------------------------------------------------------------
// printing and writing

void config_format_value(const RunConfig* c, int ki, char* buf, size_t len) {
    const ConfigKey* k = &CONFIG_KEYS[ki];
    const void* p = field_cptr(c, k);
    if (c->src[ki] == CONFIG_SRC_AUTO) {
        snprintf(buf, len, "auto (unresolved)");
        return;
    }
    switch (k->kind) {
        case CONFIG_BOOL: snprintf(buf, len, "%s", *(const bool*)p ? "true" : "false"); break;
        case CONFIG_INT: {
            int64_t v = *(const int64_t*)p;
            if (v < 0 && (k->flags & CONFIG_F_NULL)) snprintf(buf, len, "null");
            else snprintf(buf, len, "%lld", (long long)v);
            break;
        }
        case CONFIG_FLOAT: {
            double v = *(const double*)p;
            if (isnan(v)) snprintf(buf, len, "null");
            else snprintf(buf, len, "%.10g", v);
            break;
        }
        case CONFIG_STR:
        case CONFIG_DEEPSPEED: {
            const char* s = (const char*)p;
            bool is_null = !s[0] && (k->flags & CONFIG_F_NULL);
            if (k->offset == offsetof(RunConfig, source_prefix)) is_null = !c->source_prefix_set;
            if (is_null) snprintf(buf, len, "null");
            else snprintf(buf, len, "\"%s\"", s);
            break;
        }
        case CONFIG_ENUM: {
            int v = *(const int*)p;
            if (v == 0 && (k->flags & CONFIG_F_NULL)) snprintf(buf, len, "null");
            else enum_choice(k, v, buf, len);
            break;
        }
        case CONFIG_BETAS: snprintf(buf, len, "[%.10g, %.10g]", ((const double*)p)[0], ((const double*)p)[1]); break;
        case CONFIG_SECTION: snprintf(buf, len, "%s", *(const bool*)p ? "{...}" : "absent"); break;
    }
    if (c->src[ki] == CONFIG_SRC_RESOLVED) {
        size_t l = strlen(buf);
        snprintf(buf + l, len - l, " (auto)");
    }
}

// is this DeepSpeed key inside a section that is absent from the config?
static bool in_absent_section(const RunConfig* c, const char* key) {
    char parent[512];
    snprintf(parent, sizeof parent, "%s", key);
    for (;;) {
        char* d = strrchr(parent, '.');
        if (!d) return false;
        *d = 0;
        int pi = config_key_index(parent);
        if (pi >= 0 && CONFIG_KEYS[pi].kind == CONFIG_SECTION && !*(const bool*)field_cptr(c, &CONFIG_KEYS[pi]))
            return true;
    }
}

static void table_rule(FILE* f, int w1, int w2) {
    fputc('+', f);
    for (int i = 0; i < w1 + 2; i++) fputc('-', f);
    fputc('+', f);
    for (int i = 0; i < w2 + 2; i++) fputc('-', f);
    fputs("+\n", f);
}

void config_print_table(const RunConfig* c, FILE* f) {
    const int w1 = 70, w2 = 50;
    char val[CONFIG_STR_LEN + 64];
    table_rule(f, w1, w2);
    fprintf(f, "| %-*s | %-*s |\n", w1, "Parameter", w2, "Value");
    table_rule(f, w1, w2);
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
        const ConfigKey* k = &CONFIG_KEYS[i];
        if (is_ds_key(k)) continue;
        if (k->kind == CONFIG_DEEPSPEED) {
            snprintf(val, sizeof val, "%s", !c->has_deepspeed ? "null (no DeepSpeed: ZeRO off)"
                                            : c->deepspeed[0] ? c->deepspeed : "(inline)");
        } else {
            config_format_value(c, i, val, sizeof val);
        }
        fprintf(f, "| %-*s | %-*s |\n", w1, k->key, w2, val);
    }
    table_rule(f, w1, w2);
    fprintf(f, "| %-*s | %-*d |\n", w1, "world_size", w2, c->world_size);
    if (c->model_found) {
        snprintf(val, sizeof val, "%s: D=%d F=%d H=%d Dk=%d L=%d/%d", c->model.name, c->model.d_model, c->model.d_ff,
                 c->model.num_heads, c->model.d_kv, c->model.num_layers, c->model.num_decoder_layers);
        fprintf(f, "| %-*s | %-*s |\n", w1, "model", w2, val);
        snprintf(val, sizeof val, "%zu", t5_config_num_params(&c->model));
        fprintf(f, "| %-*s | %-*s |\n", w1, "num_parameters", w2, val);
    } else {
        fprintf(f, "| %-*s | %-*s |\n", w1, "model", w2, "(not found yet)");
    }
    if (c->train_samples > 0) snprintf(val, sizeof val, "%lld", (long long)c->train_samples);
    else snprintf(val, sizeof val, "(known once the data is read)");
    fprintf(f, "| %-*s | %-*s |\n", w1, "train_samples", w2, val);
    if (c->num_training_steps > 0) snprintf(val, sizeof val, "%lld", (long long)c->num_training_steps);
    else snprintf(val, sizeof val, "(known once the data is read)");
    fprintf(f, "| %-*s | %-*s |\n", w1, "num_training_steps", w2, val);
    if (c->has_deepspeed) {
        table_rule(f, w1, w2);
        for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
            const ConfigKey* k = &CONFIG_KEYS[i];
            if (!is_ds_key(k) || k->kind == CONFIG_SECTION || in_absent_section(c, k->key)) continue;
            config_format_value(c, i, val, sizeof val);
            fprintf(f, "| %-*s | %-*s |\n", w1, k->key, w2, val);
        }
    }
    table_rule(f, w1, w2);
    for (int i = 0; i < c->num_notes; i++) fprintf(f, "note: %s\n", c->notes[i]);
}

void config_print_help(FILE* f) {
    fprintf(f,
            "usage: t5train [--config FILE.json] [--deepspeed DS.json] [--key VALUE | --key=VALUE]...\n"
            "\n"
            "Fine-tunes T5 on translation. A JSON config (--config) holds any of the keys below, plus a\n"
            "\"deepspeed\" section (inline or a path); flags override the file. Booleans: --fp16 alone is true,\n"
            "--fp16 false and --no_fp16 turn them off. Dashes and underscores are the same in flag names.\n"
            "\n"
            "  --config FILE                        job config JSON (a lone FILE.json argument works too)\n"
            "  --dry_run, --print_config            validate, print the resolved config, exit 0; creates nothing\n"
            "  --dataset NAME[-xx-yy]               short form: wmt16-ro-en = --dataset_name wmt16\n"
            "                                       --dataset_config_name ro-en (and en -> ro)\n"
            "  --help, -h                           this text\n"
            "\n");
    char val[128], type[320];
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
        const ConfigKey* k = &CONFIG_KEYS[i];
        if (is_ds_key(k)) continue;
        switch (k->kind) {
            case CONFIG_BOOL: snprintf(type, sizeof type, "[BOOL]"); break;
            case CONFIG_INT: snprintf(type, sizeof type, "INT"); break;
            case CONFIG_FLOAT: snprintf(type, sizeof type, "FLOAT"); break;
            case CONFIG_ENUM: {
                char list[280];
                enum_list(k, list, sizeof list);
                for (char* p = list; *p; p++)
                    if (*p == ',') *p = '|';
                // "a| b| c" -> "a|b|c"
                char* w = list;
                for (char* r = list; *r; r++)
                    if (*r != ' ') *w++ = *r;
                *w = 0;
                snprintf(type, sizeof type, "{%s}", list);
                break;
            }
            default: snprintf(type, sizeof type, "STR"); break;
        }
        snprintf(val, sizeof val, "%s", k->def);
        char flag[400];
        snprintf(flag, sizeof flag, "--%s %s", k->key, type);
        if (strlen(flag) > 36) fprintf(f, "  %s\n  %-36s %s (default: %s)\n", flag, "", k->help, val);
        else fprintf(f, "  %-36s %s (default: %s)\n", flag, k->help, val);
    }
    fprintf(f, "\nAliases:");
    for (int i = 0; i < CONFIG_NUM_ALIASES; i++)
        if (!strchr(CONFIG_ALIASES[i].alias, '.')) fprintf(f, " --%s = --%s;", CONFIG_ALIASES[i].alias, CONFIG_ALIASES[i].key);
    fprintf(f, "\n\nDeepSpeed config keys (in the deepspeed JSON; \"auto\" where marked):\n");
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
        const ConfigKey* k = &CONFIG_KEYS[i];
        if (!is_ds_key(k) || k->kind == CONFIG_SECTION) continue;
        fprintf(f, "  %-64s default %s%s\n", k->key + DS_PREFIX_LEN, k->def, (k->flags & CONFIG_F_AUTO) ? ", auto ok" : "");
    }
}

static json_t* value_to_json(const RunConfig* c, int ki) {
    const ConfigKey* k = &CONFIG_KEYS[ki];
    const void* p = field_cptr(c, k);
    if (c->src[ki] == CONFIG_SRC_AUTO) return json_string("auto");
    switch (k->kind) {
        case CONFIG_BOOL: return json_boolean(*(const bool*)p);
        case CONFIG_INT: {
            int64_t v = *(const int64_t*)p;
            return (v < 0 && (k->flags & CONFIG_F_NULL)) ? json_null() : json_integer(v);
        }
        case CONFIG_FLOAT: {
            double v = *(const double*)p;
            return isnan(v) ? json_null() : json_real(v);
        }
        case CONFIG_STR: {
            const char* s = (const char*)p;
            bool is_null = !s[0] && (k->flags & CONFIG_F_NULL);
            if (k->offset == offsetof(RunConfig, source_prefix)) is_null = !c->source_prefix_set;
            return is_null ? json_null() : json_string(s);
        }
        case CONFIG_ENUM: {
            int v = *(const int*)p;
            if (v == 0 && (k->flags & CONFIG_F_NULL)) return json_null();
            char buf[64];
            enum_choice(k, v, buf, sizeof buf);
            return json_string(buf);
        }
        case CONFIG_BETAS: return json_pack("[ff]", ((const double*)p)[0], ((const double*)p)[1]);
        default: return json_null();
    }
}

// root[a][b][c] = v for the dotted path "a.b.c", creating objects on the way
static void json_set_path(json_t* root, const char* path, json_t* v) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    json_t* o = root;
    char* s = buf;
    for (char* d; (d = strchr(s, '.')); s = d + 1) {
        *d = 0;
        json_t* next = json_object_get(o, s);
        if (!next) {
            next = json_object();
            json_object_set_new(o, s, next);
        }
        o = next;
    }
    if (v) json_object_set_new(o, s, v);
    else if (!json_object_get(o, s)) json_object_set_new(o, s, json_object());
}

int config_write_json(const RunConfig* c, const char* path, char* err, size_t n) {
    json_t* root = json_object();
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
        const ConfigKey* k = &CONFIG_KEYS[i];
        if (k->kind == CONFIG_DEEPSPEED) continue;
        if (!is_ds_key(k)) {
            json_object_set_new(root, k->key, value_to_json(c, i));
            continue;
        }
        if (!c->has_deepspeed || in_absent_section(c, k->key)) continue;
        if (k->kind == CONFIG_SECTION) {
            if (*(const bool*)field_cptr(c, k)) json_set_path(root, k->key, NULL);
        } else if (c->src[i] != CONFIG_SRC_DEFAULT) {
            json_set_path(root, k->key, value_to_json(c, i));
        }
    }
    if (!c->has_deepspeed) json_object_set_new(root, "deepspeed", json_null());
    else if (!json_object_get(root, "deepspeed")) json_object_set_new(root, "deepspeed", json_object());
    char* tmp = malloc_check(strlen(path) + 8);
    sprintf(tmp, "%s.tmp", path);
    int rc = json_dump_file(root, tmp, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    json_decref(root);
    if (rc != 0 || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        free(tmp);
        return t5_errf(err, n, T5_EXIT_FAILURE, "cannot write %s: %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}
