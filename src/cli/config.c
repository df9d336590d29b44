/*
 * config.c: the run configuration's core (see config.h): key lookup and messages, setting one value
 * with its type and range checks, defaults, and printing / writing the resolved config. Loading JSON and
 * the command line: config_parse.c; "auto" resolution and cross-key checks: config_resolve.c.
 *
 * One code path for every value: JSON files, DeepSpeed files and command-line flags are all
 * turned into jansson values and go through config_set_json(), which checks the type and range
 * the table (config_table.c) gives for the key.
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
#include "../base/signals.h"

// ----------------------------------------------------------------------------
// small helpers

static bool is_ds_key(const ConfigKey* k) { return strncmp(k->key, DS_PREFIX, DS_PREFIX_LEN) == 0; }

void add_note(RunConfig* c, const char* fmt, ...) {
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

DType config_run_dtype(const RunConfig* c) {
    if (c->fp16 || (c->has_deepspeed && c->ds.fp16.enabled)) return DT_F16;
    if (c->bf16 || (c->has_deepspeed && c->ds.bf16.enabled)) return DT_BF16;
    return DT_F32;
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
const char* key_leaf(const char* key) {
    const char* d = strrchr(key, '.');
    return d ? d + 1 : key;
}

// length of the parent part of a dotted key ("a.b.c" -> 3 for "a.b"), 0 for top level
size_t key_parent_len(const char* key) {
    const char* d = strrchr(key, '.');
    return d ? (size_t)(d - key) : 0;
}

const char* kind_name(const ConfigKey* k) {
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
void json_brief(const json_t* v, char* buf, size_t n) {
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
bool enum_choice(const ConfigKey* k, int idx, char* buf, size_t n) {
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

// A CONFIG_F_LIST key from a JSON list of strings (or one string, "a,b" from a command line): joined by ',' into
// p (len bytes).
static int set_list(void* p, size_t len, const json_t* v, const char* where, const char* got, char* err, size_t n) {
    char buf[CONFIG_STR_LEN * 2] = "";
    size_t k = 0;
    if (json_is_string(v)) k = (size_t)snprintf(buf, sizeof buf, "%s", json_string_value(v));
    else if (!json_is_array(v))
        return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected a list of strings, got %s", where, got);
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v) && k < sizeof buf; i++) {
        const json_t* e = json_array_get(v, i);
        if (!json_is_string(e) || !json_string_value(e)[0] || strchr(json_string_value(e), ','))
            return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected a list of names, got %s", where, got);
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? "," : "", json_string_value(e));
    }
    if (k >= len) return t5_errf(err, n, T5_EXIT_USAGE, "%s: the list is too long (at most %zu characters)", where, len - 1);
    memcpy(p, buf, k + 1);
    return 0;
}

// Sets key ki from JSON value v. `where` names the key for messages ("file.json: a.b" or
// "command line: --flag"). Returns 0 or T5_EXIT_USAGE.
int config_set_json(RunConfig* c, int ki, const json_t* v, ConfigSource src, const char* where, char* err,
                    size_t n) {
    const ConfigKey* k = &CONFIG_KEYS[ki];
    void* p = field_ptr(c, k);
    char got[96];
    json_brief(v, got, sizeof got);

    const bool is_auto = json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
    if (is_auto && (k->flags & CONFIG_F_AUTOVALUE) && k->kind == CONFIG_INT) {  // DeepSpeed's own "auto" (ZenFlow)
        *(int64_t*)p = CONFIG_INT_AUTO;
        c->src[ki] = (uint8_t)src;
        return 0;
    }
    if (is_auto && !(k->flags & CONFIG_F_AUTOVALUE) && k->kind != CONFIG_STR && k->kind != CONFIG_DEEPSPEED) {
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
            if (!json_is_number(v))
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected an integer%s, got %s", where,
                               (k->flags & CONFIG_F_AUTOVALUE) ? " or \"auto\"" : "", got);
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
            if (k->flags & CONFIG_F_LIST) {
                int rc = set_list(p, k->len, v, where, got, err, n);
                if (rc) return rc;
                break;
            }
            if (!json_is_string(v)) return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected a string, got %s", where, got);
            const char* s = json_string_value(v);
            if (strlen(s) >= k->len)
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: value is too long (%zu characters, at most %zu)", where,
                            strlen(s), k->len - 1);
            memcpy(p, s, strlen(s) + 1);
            if ((k->flags & CONFIG_F_SECRET) && strcmp(s, CONFIG_SECRET_MASK) == 0) *(char*)p = 0;  // written masked
            if (k->offset == offsetof(RunConfig, source_prefix)) c->source_prefix_set = true;
            break;
        }
        case CONFIG_ENUM: {
            char list[256];
            enum_list(k, list, sizeof list);
            if ((k->flags & CONFIG_F_BOOLENUM) && json_is_boolean(v)) {
                *(int*)p = json_is_true(v) ? 1 : 0;
                break;
            }
            if (!json_is_string(v))
                return t5_errf(err, n, T5_EXIT_USAGE, "%s: expected one of %s, got %s", where, list, got);
            int idx = enum_lookup(k, json_string_value(v));
            if (idx < 0 && (k->flags & CONFIG_F_BOOLENUM)) {  // HF's str | bool: True is the 2nd choice, False the 1st
                const char* b = json_string_value(v);
                if (!strcmp(b, "true") || !strcmp(b, "True")) idx = 1;
                else if (!strcmp(b, "false") || !strcmp(b, "False")) idx = 0;
            }
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

void config_reset_deepspeed(RunConfig* c) {
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
// printing and writing

// a CONFIG_F_LIST value "a,b" as the list ["a", "b"]
static void format_list(const char* s, char* buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (const char* p = s; *p && k < len;) {
        const size_t l = strcspn(p, ",");
        k += (size_t)snprintf(buf + k, len - k, "%s\"%.*s\"", p == s ? "" : ", ", (int)l, p);
        p += l + (p[l] == ',');
    }
    if (k < len) snprintf(buf + k, len - k, "]");
}

static json_t* list_to_json(const char* s) {
    json_t* a = json_array();
    for (const char* p = s; *p;) {
        const size_t l = strcspn(p, ",");
        json_array_append_new(a, json_stringn(p, l));
        p += l + (p[l] == ',');
    }
    return a;
}

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
            if (v == CONFIG_INT_AUTO && (k->flags & CONFIG_F_AUTOVALUE)) snprintf(buf, len, "auto");
            else if (v < 0 && (k->flags & CONFIG_F_NULL)) snprintf(buf, len, "null");
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
            else if (k->flags & CONFIG_F_LIST) format_list(s, buf, len);
            else if (k->flags & CONFIG_F_SECRET) snprintf(buf, len, "\"%s\"", CONFIG_SECRET_MASK);
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
    fprintf(f, "\n\nHF flags without a t5train key (accepted: no effect here, with a note; refused: only the default is "
               "accepted):\n");
    for (int i = 0; i < CONFIG_NUM_FOREIGN; i++) {
        const ForeignKey* k = &CONFIG_FOREIGN_KEYS[i];
        if (strncmp(k->key, DS_PREFIX, DS_PREFIX_LEN) == 0) continue;
        fprintf(f, "  --%-36s %s: %s\n", k->key, k->action == FOREIGN_NOOP ? "accepted" : "refused", k->reason);
    }
    fprintf(f, "\nDeepSpeed config keys (in the deepspeed JSON; \"auto\" where marked):\n");
    for (int i = 0; i < CONFIG_NUM_KEYS; i++) {
        const ConfigKey* k = &CONFIG_KEYS[i];
        if (!is_ds_key(k) || k->kind == CONFIG_SECTION) continue;
        fprintf(f, "  %-64s default %s%s\n", k->key + DS_PREFIX_LEN, k->def, (k->flags & CONFIG_F_AUTO) ? ", auto ok" : "");
    }
    fprintf(f, "\nDeepSpeed keys without a t5train engine (accepted: no effect here; refused: only the default, or a "
               "section with \"enabled\": false, is accepted):\n");
    for (int i = 0; i < CONFIG_NUM_FOREIGN; i++) {
        const ForeignKey* k = &CONFIG_FOREIGN_KEYS[i];
        if (strncmp(k->key, DS_PREFIX, DS_PREFIX_LEN) != 0) continue;
        fprintf(f, "  %-50s %s: %s\n", k->key + DS_PREFIX_LEN, k->action == FOREIGN_NOOP ? "accepted" : "refused",
                k->reason);
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
            if (v == CONFIG_INT_AUTO && (k->flags & CONFIG_F_AUTOVALUE)) return json_string("auto");
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
            if (!is_null && (k->flags & CONFIG_F_SECRET)) return json_string(CONFIG_SECRET_MASK);
            if (k->flags & CONFIG_F_LIST) return list_to_json(s);
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

json_t* config_to_json(const RunConfig* c) {
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
    return root;
}

uint64_t config_hash(const RunConfig* c) {
    json_t* root = config_to_json(c);
    json_object_del(root, "local_rank");  // the one key launchers set per rank
    // a logging_dir t5train derived is each rank's own: HF's default folder holds the rank's clock (to the second)
    // and host name, and only rank 0 writes there. Hashed, ranks that read the clock on either side of a second
    // refused each other at the rendezvous (the intermittent multi-GPU exit 1 of sessions 3-5), and every
    // multi-node run without --logging_dir was refused.
    if (c->src[config_key_index("logging_dir")] == CONFIG_SRC_DERIVED) json_object_del(root, "logging_dir");
    char* text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(root);
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (const char* p = text ? text : ""; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    free(text);
    return h;
}

int config_write_json(const RunConfig* c, const char* path, char* err, size_t n) {
    json_t* root = config_to_json(c);
    // like every other file t5train writes: a per-process temporary name, fsync'ed, then renamed
    char* tmp = malloc_check(strlen(path) + 32);
    sprintf(tmp, "%s.tmp.%d", path, (int)getpid());
    signals_track_tmp(tmp);  // removed if SIGINT/SIGTERM stops the process before the rename
    int rc = -1;
    FILE* f = fopen(tmp, "wb");
    if (f) {
        rc = json_dumpf(root, f, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
        if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) rc = -1;
        if (fclose(f) != 0) rc = -1;
    }
    json_decref(root);
    if (rc != 0 || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        signals_untrack_tmp(tmp);
        free(tmp);
        return t5_errf(err, n, T5_EXIT_FAILURE, "cannot write %s: %s", path, strerror(e));
    }
    signals_untrack_tmp(tmp);
    free(tmp);
    return 0;
}
