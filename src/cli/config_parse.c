/*
 * config_parse.c: the run configuration from JSON files (--config, the DeepSpeed file or object) and the
 * command line (see config.h). Every value goes through config_set_json() (config.c); unknown keys at any
 * depth are errors naming the path and the closest valid key.
 */
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
#include <dirent.h>
#include <unistd.h>

#include "../base/common.h"

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
        if (ki < 0) {
            int fi = config_foreign_index(full);  // an HF / DeepSpeed key t5train has no key for (config_foreign.c)
            if (fi < 0) return unknown_key_error(file, full, strip, err, n);
            int rc = config_foreign_apply_json(c, fi, v, where, err, n);
            if (rc) return rc;
            continue;
        }
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

typedef enum { FLAG_KEY = 0, FLAG_CONFIG, FLAG_DRY_RUN, FLAG_HELP, FLAG_DATASET, FLAG_FOREIGN } FlagKind;

typedef struct {
    FlagKind kind;
    int ki;              // FLAG_KEY: key index; FLAG_FOREIGN: index in CONFIG_FOREIGN_KEYS
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
            int fi = ki < 0 && !f->negated && !strchr(f->name, '.') ? config_foreign_index(f->name) : -1;
            if (ki < 0 && fi < 0) {
                char best[128];
                closest_flag(f->name, best, sizeof best);
                if (best[0])
                    return t5_errf(err, n, T5_EXIT_USAGE, "unknown flag --%s (did you mean --%s?)", f->name, best);
                return t5_errf(err, n, T5_EXIT_USAGE, "unknown flag --%s (see t5train --help)", f->name);
            }
            f->kind = ki >= 0 ? FLAG_KEY : FLAG_FOREIGN;
            f->ki = ki >= 0 ? ki : fi;
            is_bool = ki >= 0 ? CONFIG_KEYS[ki].kind == CONFIG_BOOL : CONFIG_FOREIGN_KEYS[fi].kind == CONFIG_BOOL;
            if (f->negated && eq)
                return t5_errf(err, n, T5_EXIT_USAGE, "--%s takes no value", f->name);
        }
        if (!eq) {
            if (is_bool) {
                // HF: `--fp16` alone is true; `--fp16 false` is accepted too
                // and `--gradient_checkpointing auto` where the key takes "auto" (the memory planner, issue 17)
                if (!f->negated && i + 1 < argc &&
                    (parse_bool_word(argv[i + 1]) >= 0 ||
                     (f->kind == FLAG_KEY && (CONFIG_KEYS[f->ki].flags & CONFIG_F_AUTO) && strcmp(argv[i + 1], "auto") == 0)))
                    f->value = argv[++i];
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
            if (!isfinite(d)) {  // jansson has no NaN/inf (json_real would return NULL): an error, never a skip
                *rc = t5_errf(err, n, T5_EXIT_USAGE, "command line: --%s: expected a finite number, got '%s'", flag, s);
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
            const char* t = v;
            while (*t == ' ' || *t == '\t' || *t == '\n') t++;
            if (*t == '{') {  // an inline JSON object, as HF's --deepspeed accepts a dict
                json_error_t jerr;
                json_t* root = json_loads(v, JSON_REJECT_DUPLICATES, &jerr);
                if (!root) {
                    rc = t5_errf(err, errlen, T5_EXIT_USAGE, "command line: --deepspeed: invalid JSON at column %d: %s",
                                 jerr.column, jerr.text);
                    goto done;
                }
                config_reset_deepspeed(c);
                c->has_deepspeed = true;
                rc = apply_object(c, root, DS_PREFIX, DS_PREFIX_LEN, "command line: --deepspeed", NULL, err, errlen);
                json_decref(root);
                if (rc) goto done;
            } else if ((rc = load_deepspeed_path(c, v, err, errlen))) {
                goto done;
            }
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
            if (l == 0) {  // the short form names a dataset; an empty one is a typo, not "no dataset"
                rc = t5_errf(err, errlen, T5_EXIT_USAGE, "%s: --dataset needs a name, e.g. wmt16-ro-en", where);
                goto done;
            }
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
        } else if (f->kind == FLAG_FOREIGN) {
            if ((rc = config_foreign_apply(c, f->ki, f->value ? f->value : "true", where, err, errlen))) goto done;
        } else if (f->kind == FLAG_KEY && f->ki != dk) {
            const ConfigKey* k = &CONFIG_KEYS[f->ki];
            json_t* v;
            if (k->kind == CONFIG_BOOL && !f->value) v = json_boolean(!f->negated);
            else if ((v = cli_value_to_json(k, f->value, f->name, err, errlen, &rc)) == NULL) {
                // a value that cannot become JSON is an error: the rest of the line is never dropped
                if (!rc) rc = t5_errf(err, errlen, T5_EXIT_USAGE, "%s: invalid value '%s'", where, f->value);
                goto done;
            }
            rc = config_set_json(c, f->ki, v, CONFIG_SRC_CLI, where, err, errlen);
            json_decref(v);
            if (rc) goto done;
        }
    }
done:
    free(flags);
    return rc;
}
