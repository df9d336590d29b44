/*
 * report_to.c: --report_to / --logging_dir and the writers behind them (contract in report_to.h).
 */
#include "report_to.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "../base/common.h"

static double wall_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

int report_to_parse(const char* value, unsigned* mask, char* err, size_t errcap) {
    *mask = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", value ? value : "");
    bool none = false, any = false;
    char* save = NULL;
    for (char* tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        any = true;
        if (strcmp(tok, "none") == 0) none = true;
        else if (strcmp(tok, "csv") == 0) *mask |= REPORT_CSV;
        else if (strcmp(tok, "tensorboard") == 0) {
            if (!tb_writer_available()) {
                snprintf(err, errcap,
                         "report_to tensorboard: this t5train was built without protobuf-c, so it cannot write "
                         "TensorBoard event files (run scripts/install_deps.sh, rebuild; or use --report_to csv)");
                return -1;
            }
            *mask |= REPORT_TENSORBOARD;
        } else if (strcmp(tok, "all") == 0) {
            *mask |= REPORT_CSV | (tb_writer_available() ? REPORT_TENSORBOARD : 0u);
        } else {
            // HF's other integrations (transformers integrations/integration_utils.py) are known names that
            // t5train does not have; anything else is not an integration at all
            static const char* HF_OTHERS[] = {"azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive",
                                              "flyte", "mlflow", "neptune", "ray", "swanlab", "trackio", "wandb"};
            bool known = false;
            for (size_t i = 0; i < sizeof HF_OTHERS / sizeof HF_OTHERS[0]; i++) known |= strcmp(tok, HF_OTHERS[i]) == 0;
            snprintf(err, errcap, "%s: report_to %s (t5train reports to none, csv, tensorboard or all, or a "
                     "comma-separated list of csv and tensorboard)",
                     known ? "not implemented yet" : "not a known integration", tok);
            return -1;
        }
    }
    if (none && *mask) {
        snprintf(err, errcap, "report_to \"%s\": \"none\" cannot be combined with other integrations", value);
        return -1;
    }
    (void)any;
    return 0;
}

void report_to_format(char* buf, size_t cap, unsigned mask) {
    snprintf(buf, cap, "%s%s%s", (mask & REPORT_CSV) ? "csv" : "",
             (mask & REPORT_CSV) && (mask & REPORT_TENSORBOARD) ? "," : "",
             (mask & REPORT_TENSORBOARD) ? "tensorboard" : "");
    if (!mask) snprintf(buf, cap, "none");
}

void report_default_logging_dir(char* buf, size_t cap, const char* output_dir, time_t now) {
    struct tm tm;
    localtime_r(&now, &tm);
    static const char* MON[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};  // %b in the C locale, as Python's
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    snprintf(buf, cap, "%s/runs/%s%02d_%02d-%02d-%02d_%s", output_dir, MON[tm.tm_mon], tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, host);
}

void report_tb_tag(char* buf, size_t cap, const char* key) {
    if (strncmp(key, "eval_", 5) == 0) snprintf(buf, cap, "eval/%s", key + 5);
    else if (strncmp(key, "test_", 5) == 0) snprintf(buf, cap, "test/%s", key + 5);
    else snprintf(buf, cap, "train/%s", key);
}

int reporter_open(Reporter* r, unsigned mask, const char* logging_dir, const char* output_dir,
                  const json_t* history, char* err, size_t errcap) {
    memset(r, 0, sizeof *r);
    if (mask & REPORT_TENSORBOARD) {
        double now = wall_now();
        r->tb = tb_writer_open(logging_dir, now, err, errcap);
        if (!r->tb) return -1;
        // HF's TensorBoardCallback.on_train_begin: add_text("args", args.to_json_string())
        char* p = t5_path_join(output_dir, "t5train_config.json");
        json_error_t je;
        json_t* cfg = t5_path_exists(p) ? json_load_file(p, 0, &je) : NULL;
        free(p);
        if (cfg) {
            char* text = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            int rc = text ? tb_writer_text(r->tb, "args", text, 0, now, err, errcap) : 0;
            free(text);
            json_decref(cfg);
            if (rc) {
                reporter_close(r);
                return -1;
            }
        }
        r->mask |= REPORT_TENSORBOARD;
    }
    if (mask & REPORT_CSV) {
        char* p = t5_path_join(output_dir, "log_history.csv");
        int rc = csv_log_open(&r->csv, p, history, err, errcap);
        free(p);
        if (rc) {
            csv_log_close(&r->csv);
            reporter_close(r);
            return -1;
        }
        r->csv_open = true;
        r->mask |= REPORT_CSV;
    }
    return 0;
}

void reporter_log(Reporter* r, const json_t* entry) {
    if (!r->mask || !json_is_object(entry)) return;
    char err[1024];
    if (r->mask & REPORT_TENSORBOARD) {
        json_t* st = json_object_get(entry, "step");
        int64_t step = json_is_integer(st) ? json_integer_value(st) : 0;
        double now = wall_now();
        const char* k;
        json_t* v;
        json_object_foreach((json_t*)entry, k, v) {
            if (strcmp(k, "step") == 0 || !json_is_number(v)) continue;  // HF: int and float values only
            char tag[256];
            report_tb_tag(tag, sizeof tag, k);
            if (tb_writer_scalar(r->tb, tag, json_number_value(v), step, now, err, sizeof err)) {
                t5_warn("report_to tensorboard: %s; no more TensorBoard events this run", err);
                tb_writer_close(r->tb);
                r->tb = NULL;
                r->mask &= ~(unsigned)REPORT_TENSORBOARD;
                break;
            }
        }
    }
    if (r->mask & REPORT_CSV) {
        if (csv_log_append(&r->csv, entry, err, sizeof err)) {
            t5_warn("report_to csv: %s; no more CSV rows this run", err);
            r->mask &= ~(unsigned)REPORT_CSV;
        }
    }
}

void reporter_close(Reporter* r) {
    tb_writer_close(r->tb);
    r->tb = NULL;
    if (r->csv_open) csv_log_close(&r->csv);
    r->csv_open = false;
    r->mask = 0;
}
