/*
 * results.c: HF's result and state JSON files (contract in results.h).
 *
 * Semantics transcribed from transformers: trainer_pt_utils.py save_metrics / log_metrics /
 * metrics_format / _secs2timedelta, trainer_utils.py speed_metrics, trainer_callback.py TrainerState
 * (+ TrainerControl.state()). JSON text follows Python's json module (indent, sort_keys, ensure_ascii,
 * float repr), so files compare byte for byte with HF's.
 */
#include "results.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "../base/common.h"
#include "../base/signals.h"
#include "../../model/params.h"
#include "trainer_log.h"

// ---------------------------------------------------------------------------------------------
// growable string

typedef struct {
    char* p;
    size_t n, cap;
} Str;

static void str_put(Str* s, const char* t, size_t len) {
    if (s->n + len + 1 > s->cap) {
        s->cap = T5_MAX(s->cap * 2, s->n + len + 64);
        s->p = (char*)realloc_check(s->p, s->cap);
    }
    memcpy(s->p + s->n, t, len);
    s->n += len;
    s->p[s->n] = 0;
}
static void str_puts(Str* s, const char* t) { str_put(s, t, strlen(t)); }

// Python json's ensure_ascii string encoding
static void put_json_string(Str* s, const char* t) {
    str_puts(s, "\"");
    const unsigned char* u = (const unsigned char*)t;
    char esc[16];
    while (*u) {
        unsigned c = *u;
        if (c == '"') str_puts(s, "\\\""), u++;
        else if (c == '\\') str_puts(s, "\\\\"), u++;
        else if (c == '\n') str_puts(s, "\\n"), u++;
        else if (c == '\r') str_puts(s, "\\r"), u++;
        else if (c == '\t') str_puts(s, "\\t"), u++;
        else if (c == '\b') str_puts(s, "\\b"), u++;
        else if (c == '\f') str_puts(s, "\\f"), u++;
        else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            str_puts(s, esc);
            u++;
        } else if (c < 0x80) {
            str_put(s, (const char*)u, 1);
            u++;
        } else {  // decode UTF-8 (jansson has validated it) and escape as \uXXXX (surrogate pairs above BMP)
            unsigned cp;
            int len;
            if ((c & 0xE0) == 0xC0) cp = c & 0x1F, len = 2;
            else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, len = 3;
            else cp = c & 0x07, len = 4;
            for (int i = 1; i < len && u[i]; i++) cp = (cp << 6) | (u[i] & 0x3F);
            u += len;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            str_puts(s, esc);
        }
    }
    str_puts(s, "\"");
}

static void put_newline_indent(Str* s, int indent, int level) {
    str_puts(s, "\n");
    for (int i = 0; i < indent * level; i++) str_puts(s, " ");
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(const char* const*)a, *(const char* const*)b); }

static void dump_value(Str* s, const json_t* v, int indent, bool sort, int level) {
    char num[64];
    switch (json_typeof(v)) {
        case JSON_NULL: str_puts(s, "null"); break;
        case JSON_TRUE: str_puts(s, "true"); break;
        case JSON_FALSE: str_puts(s, "false"); break;
        case JSON_INTEGER:
            snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
            str_puts(s, num);
            break;
        case JSON_REAL: {
            double x = json_real_value(v);
            if (isnan(x)) str_puts(s, "NaN");
            else if (isinf(x)) str_puts(s, x < 0 ? "-Infinity" : "Infinity");
            else {
                py_float_repr(num, sizeof num, x);
                str_puts(s, num);
            }
            break;
        }
        case JSON_STRING: put_json_string(s, json_string_value(v)); break;
        case JSON_ARRAY: {
            size_t n = json_array_size(v);
            if (n == 0) {
                str_puts(s, "[]");
                break;
            }
            str_puts(s, "[");
            for (size_t i = 0; i < n; i++) {
                if (i) str_puts(s, indent >= 0 ? "," : ", ");
                if (indent >= 0) put_newline_indent(s, indent, level + 1);
                dump_value(s, json_array_get(v, i), indent, sort, level + 1);
            }
            if (indent >= 0) put_newline_indent(s, indent, level);
            str_puts(s, "]");
            break;
        }
        case JSON_OBJECT: {
            size_t n = json_object_size(v);
            if (n == 0) {
                str_puts(s, "{}");
                break;
            }
            const char** keys = (const char**)malloc_check(n * sizeof(char*));
            size_t k = 0;
            const char* key;
            json_t* val;
            json_object_foreach((json_t*)v, key, val) keys[k++] = key;
            if (sort) qsort(keys, k, sizeof(char*), cmp_str);
            str_puts(s, "{");
            for (size_t i = 0; i < k; i++) {
                if (i) str_puts(s, indent >= 0 ? "," : ", ");
                if (indent >= 0) put_newline_indent(s, indent, level + 1);
                put_json_string(s, keys[i]);
                str_puts(s, ": ");
                dump_value(s, json_object_get(v, keys[i]), indent, sort, level + 1);
            }
            free(keys);
            if (indent >= 0) put_newline_indent(s, indent, level);
            str_puts(s, "}");
            break;
        }
    }
}

char* results_dumps(const json_t* v, int indent, bool sort_keys) {
    Str s = {0};
    str_puts(&s, "");
    dump_value(&s, v, indent, sort_keys, 0);
    return s.p;
}

// ---------------------------------------------------------------------------------------------
// atomic file write

int results_write_atomic(const char* path, const void* data, size_t len, char* err, size_t errcap) {
    size_t n = strlen(path) + 32;
    char* tmp = (char*)malloc_check(n);
    snprintf(tmp, n, "%s.tmp-%d", path, (int)getpid());
    signals_track_tmp(tmp);  // removed if SIGINT/SIGTERM stops the process before the rename
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errcap, "cannot create %s: %s", tmp, strerror(errno));
        signals_untrack_tmp(tmp);
        free(tmp);
        return -1;
    }
    const char* p = (const char*)data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(err, errcap, "writing %s failed: %s (disk full?)", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            signals_untrack_tmp(tmp);
            free(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        snprintf(err, errcap, "flushing %s to disk failed: %s", tmp, strerror(errno));
        unlink(tmp);
        signals_untrack_tmp(tmp);
        free(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errcap, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        signals_untrack_tmp(tmp);
        free(tmp);
        return -1;
    }
    signals_untrack_tmp(tmp);
    free(tmp);
    // make the rename durable
    char* d = strdup_check(path);
    int dfd = open(dirname(d), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(d);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// metrics

void results_set_real(json_t* obj, const char* key, double v) {
    json_object_set_new(obj, key, isfinite(v) ? json_real(v) : json_null());
}

void results_set_int(json_t* obj, const char* key, int64_t v) { json_object_set_new(obj, key, json_integer(v)); }

void results_speed_metrics(json_t* m, const char* split, double runtime, int64_t num_samples, int64_t num_steps,
                           int64_t num_tokens) {
    char key[128];
    snprintf(key, sizeof key, "%s_runtime", split);
    results_set_real(m, key, py_round(runtime, 4));
    if (runtime == 0) return;
    if (num_samples >= 0) {
        snprintf(key, sizeof key, "%s_samples_per_second", split);
        results_set_real(m, key, py_round((double)num_samples / runtime, 3));
    }
    if (num_steps >= 0) {
        snprintf(key, sizeof key, "%s_steps_per_second", split);
        results_set_real(m, key, py_round((double)num_steps / runtime, 3));
    }
    if (num_tokens >= 0) {
        snprintf(key, sizeof key, "%s_tokens_per_second", split);
        results_set_real(m, key, py_round((double)num_tokens / runtime, 3));
    }
}

void results_train_speed_metrics(json_t* m, double runtime, int64_t max_steps_arg, double num_train_epochs_arg,
                                 int64_t num_examples, int64_t total_train_batch_size, int64_t state_max_steps) {
    results_set_real(m, "train_runtime", py_round(runtime, 4));
    if (runtime == 0) return;
    const double samples = max_steps_arg > 0 ? (double)max_steps_arg * (double)total_train_batch_size
                                             : (double)num_examples * num_train_epochs_arg;
    results_set_real(m, "train_samples_per_second", py_round(samples / runtime, 3));
    results_set_real(m, "train_steps_per_second", py_round((double)state_max_steps / runtime, 3));
}

static int write_json_file(const char* path, const json_t* v, int indent, bool newline, char* err, size_t errcap) {
    char* text = results_dumps(v, indent, true);
    size_t len = strlen(text);
    if (newline) {
        text = (char*)realloc_check(text, len + 2);
        text[len++] = '\n';
        text[len] = 0;
    }
    int rc = results_write_atomic(path, text, len, err, errcap);
    free(text);
    return rc;
}

int results_save_metrics(const char* output_dir, const char* split, const json_t* metrics, bool combined,
                         char* err, size_t errcap) {
    if (!json_is_object(metrics)) {
        snprintf(err, errcap, "save_metrics(%s): metrics must be a JSON object", split);
        return -1;
    }
    char name[128];
    snprintf(name, sizeof name, "%s_results.json", split);
    char* path = t5_path_join(output_dir, name);
    int rc = write_json_file(path, metrics, 4, false, err, errcap);
    free(path);
    if (rc || !combined) return rc;

    path = t5_path_join(output_dir, "all_results.json");
    json_t* all = NULL;
    if (t5_path_exists(path)) {
        json_error_t je;
        all = json_load_file(path, JSON_DECODE_ANY, &je);
        if (!all || !json_is_object(all)) {
            if (all)
                snprintf(err, errcap, "%s: expected a JSON object", path);
            else
                snprintf(err, errcap, "%s:%d:%d: %s", path, je.line, je.column, je.text);
            json_decref(all);
            free(path);
            return -1;
        }
    } else {
        all = json_object();
    }
    json_object_update(all, (json_t*)metrics);
    rc = write_json_file(path, all, 4, false, err, errcap);
    json_decref(all);
    free(path);
    return rc;
}

// datetime.timedelta(seconds=int(secs)) + ".cc" (trainer_pt_utils._secs2timedelta)
static void secs2timedelta(char* buf, size_t cap, double secs) {
    int msec = (int)(fabs(secs - (double)(long long)secs) * 100);
    long long s = (long long)secs;
    long long days = s >= 0 ? s / 86400 : -((-s + 86399) / 86400);
    long long rem = s - days * 86400;
    char d[48] = "";
    if (days) snprintf(d, sizeof d, "%lld day%s, ", days, (days == 1 || days == -1) ? "" : "s");
    snprintf(buf, cap, "%s%lld:%02lld:%02lld.%02d", d, rem / 3600, (rem / 60) % 60, rem % 60, msec);
}

void results_log_metrics(FILE* f, const char* split, const json_t* metrics) {
    if (!t5_log_info()) return;  // HF's log_metrics: logger.info
    fprintf(f, "***** %s metrics *****\n", split);
    size_t n = json_object_size(metrics);
    if (n == 0) return;
    const char** keys = (const char**)malloc_check(n * sizeof(char*));
    char(*vals)[96] = malloc_check(n * sizeof *vals);
    size_t k = 0;
    const char* key;
    json_t* v;
    json_object_foreach((json_t*)metrics, key, v) keys[k++] = key;
    qsort(keys, k, sizeof(char*), cmp_str);
    int kw = 0, vw = 0;
    for (size_t i = 0; i < k; i++) {
        v = json_object_get(metrics, keys[i]);
        char* out = vals[i];
        if (strstr(keys[i], "_mem_") && json_is_integer(v))
            snprintf(out, 96, "%lldMB", (long long)(json_integer_value(v) >> 20));
        else if (strstr(keys[i], "_runtime") && json_is_number(v))
            secs2timedelta(out, 96, json_number_value(v));
        else if (strcmp(keys[i], "total_flos") == 0 && json_is_number(v))
            snprintf(out, 96, "%lldGF", (long long)json_number_value(v) >> 30);
        else if (json_is_real(v))
            py_float_repr(out, 96, py_round(json_real_value(v), 4));
        else if (json_is_integer(v))
            snprintf(out, 96, "%lld", (long long)json_integer_value(v));
        else if (json_is_string(v))
            snprintf(out, 96, "%s", json_string_value(v));
        else if (json_is_null(v))
            snprintf(out, 96, "None");
        else if (json_is_boolean(v))
            snprintf(out, 96, "%s", json_is_true(v) ? "True" : "False");
        else
            snprintf(out, 96, "...");
        kw = T5_MAX(kw, (int)strlen(keys[i]));
        vw = T5_MAX(vw, (int)strlen(out));
    }
    for (size_t i = 0; i < k; i++) fprintf(f, "  %-*s = %*s\n", kw, keys[i], vw, vals[i]);
    free(vals);
    free(keys);
}

// ---------------------------------------------------------------------------------------------
// trainer_state.json

void trainer_state_init(TrainerState* s) {
    memset(s, 0, sizeof *s);
    s->logging_steps = s->eval_steps = s->save_steps = 500;
    s->log_history = json_array();
}

void trainer_state_free(TrainerState* s) {
    json_decref(s->log_history);
    s->log_history = NULL;
}

void trainer_state_append_log(TrainerState* s, json_t* entry) {
    json_object_set_new(entry, "step", json_integer(s->global_step));
    json_array_append_new(s->log_history, entry);
}

json_t* trainer_state_to_json(const TrainerState* s) {
    json_t* o = json_object();
    if (s->has_best) {
        results_set_int(o, "best_global_step", s->best_global_step);
        results_set_real(o, "best_metric", s->best_metric);
        json_object_set_new(o, "best_model_checkpoint", json_string(s->best_model_checkpoint));
    } else {
        json_object_set_new(o, "best_global_step", json_null());
        json_object_set_new(o, "best_metric", json_null());
        json_object_set_new(o, "best_model_checkpoint", json_null());
    }
    results_set_real(o, "epoch", s->epoch);
    results_set_int(o, "eval_steps", s->eval_steps);
    results_set_int(o, "global_step", s->global_step);
    json_object_set_new(o, "is_hyper_param_search", json_false());
    json_object_set_new(o, "is_local_process_zero", json_true());
    json_object_set_new(o, "is_world_process_zero", json_true());
    json_object_set(o, "log_history", s->log_history ? s->log_history : json_array());
    results_set_int(o, "logging_steps", s->logging_steps);
    results_set_int(o, "max_steps", s->max_steps);
    results_set_int(o, "num_input_tokens_seen", s->num_input_tokens_seen);
    results_set_int(o, "num_train_epochs", s->num_train_epochs);
    results_set_int(o, "save_steps", s->save_steps);
    json_t* args = json_object();
    json_object_set_new(args, "should_training_stop", json_boolean(s->should_training_stop));
    json_object_set_new(args, "should_epoch_stop", json_boolean(s->should_epoch_stop));
    json_object_set_new(args, "should_save", json_boolean(s->should_save));
    json_object_set_new(args, "should_evaluate", json_boolean(s->should_evaluate));
    json_object_set_new(args, "should_log", json_boolean(s->should_log));
    json_t* ctl = json_object();
    json_object_set_new(ctl, "args", args);
    json_object_set_new(ctl, "attributes", json_object());
    json_t* cbs = json_object();
    json_object_set_new(cbs, "TrainerControl", ctl);
    json_object_set_new(o, "stateful_callbacks", cbs);
    results_set_real(o, "total_flos", s->total_flos);
    json_object_set_new(o, "train_batch_size", s->train_batch_size > 0 ? json_integer(s->train_batch_size) : json_null());
    json_object_set_new(o, "trial_name", json_null());
    json_object_set_new(o, "trial_params", json_null());
    return o;
}

int trainer_state_save(const TrainerState* s, const char* path, char* err, size_t errcap) {
    json_t* o = trainer_state_to_json(s);
    int rc = write_json_file(path, o, 2, true, err, errcap);
    json_decref(o);
    return rc;
}

static bool get_int(json_t* o, const char* key, int64_t* out, const char* path, char* err, size_t errcap) {
    json_t* v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))) {
        *out = (int64_t)json_real_value(v);
        return true;
    }
    snprintf(err, errcap, "%s: \"%s\" must be an integer", path, key);
    return false;
}

static bool get_real(json_t* o, const char* key, double* out, const char* path, char* err, size_t errcap) {
    json_t* v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return true;
    }
    snprintf(err, errcap, "%s: \"%s\" must be a number", path, key);
    return false;
}

int trainer_state_load(TrainerState* s, const char* path, char* err, size_t errcap) {
    json_error_t je;
    json_t* o = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!o) {
        snprintf(err, errcap, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        return -1;
    }
    if (!json_is_object(o)) {
        snprintf(err, errcap, "%s: expected a JSON object (a trainer_state.json)", path);
        json_decref(o);
        return -1;
    }
    TrainerState t;
    trainer_state_init(&t);
    bool ok = get_real(o, "epoch", &t.epoch, path, err, errcap) &&
              get_int(o, "global_step", &t.global_step, path, err, errcap) &&
              get_int(o, "max_steps", &t.max_steps, path, err, errcap) &&
              get_int(o, "logging_steps", &t.logging_steps, path, err, errcap) &&
              get_int(o, "eval_steps", &t.eval_steps, path, err, errcap) &&
              get_int(o, "save_steps", &t.save_steps, path, err, errcap) &&
              get_int(o, "train_batch_size", &t.train_batch_size, path, err, errcap) &&
              get_int(o, "num_train_epochs", &t.num_train_epochs, path, err, errcap) &&
              get_int(o, "num_input_tokens_seen", &t.num_input_tokens_seen, path, err, errcap) &&
              get_real(o, "total_flos", &t.total_flos, path, err, errcap);
    const json_t* bm = json_object_get(o, "best_metric");
    const json_t* bc = json_object_get(o, "best_model_checkpoint");
    if (ok && bm && json_is_number(bm) && bc && json_is_string(bc)) {  // HF's files may lack best_global_step
        t.has_best = true;
        t.best_metric = json_number_value(bm);
        snprintf(t.best_model_checkpoint, sizeof t.best_model_checkpoint, "%s", json_string_value(bc));
        const json_t* bs = json_object_get(o, "best_global_step");
        const char* dash = strrchr(t.best_model_checkpoint, '-');
        t.best_global_step = bs && json_is_integer(bs) ? json_integer_value(bs) : dash ? atoll(dash + 1) : -1;
    }
    json_t* lh = json_object_get(o, "log_history");
    if (ok && lh && !json_is_array(lh)) {
        snprintf(err, errcap, "%s: \"log_history\" must be a list", path);
        ok = false;
    }
    if (!ok) {
        trainer_state_free(&t);
        json_decref(o);
        return -1;
    }
    if (lh) {
        json_decref(t.log_history);
        t.log_history = json_incref(lh);
    }
    json_t* args = json_object_get(json_object_get(json_object_get(o, "stateful_callbacks"), "TrainerControl"), "args");
    if (json_is_object(args)) {
        t.should_training_stop = json_is_true(json_object_get(args, "should_training_stop"));
        t.should_epoch_stop = json_is_true(json_object_get(args, "should_epoch_stop"));
        t.should_save = json_is_true(json_object_get(args, "should_save"));
        t.should_evaluate = json_is_true(json_object_get(args, "should_evaluate"));
        t.should_log = json_is_true(json_object_get(args, "should_log"));
    }
    json_decref(o);
    trainer_state_free(s);
    *s = t;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// total_flos (HF's estimate)

int64_t results_hf_nonembedding_params(const T5Config* cfg) {
    // one table per distinct config (the trainer asks once per micro-batch)
    static T5Config last;
    static int64_t last_count = -1;
    if (last_count >= 0 && memcmp(&last, cfg, sizeof last) == 0) return last_count;
    ParamTable t;
    char err[256];
    if (params_build(&t, cfg, err, sizeof err) != 0) return -1;
    int64_t n = 0;
    for (int i = 0; i < t.num_params; i++) {
        const char* name = t.params[i].name;
        size_t len = strlen(name);
        static const char RB[] = "relative_attention_bias.weight";
        bool embedding = strcmp(name, "shared.weight") == 0 || strstr(name, "embed_tokens.weight") != NULL ||
                         (len >= sizeof RB - 1 && strcmp(name + len - (sizeof RB - 1), RB) == 0);
        if (!embedding) n += (int64_t)t.params[i].numel;
    }
    params_free(&t);
    memcpy(&last, cfg, sizeof last);
    last_count = n;
    return n;
}

double results_hf_floating_point_ops(const T5Config* cfg, int64_t input_ids_numel) {
    int64_t p = results_hf_nonembedding_params(cfg);
    return p < 0 ? 0.0 : 6.0 * (double)input_ids_numel * (double)p;
}
