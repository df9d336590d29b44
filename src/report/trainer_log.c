/*
 * trainer_log.c: the trainer's console lines, progress bar and log files (contract in trainer_log.h).
 *
 * Reference semantics, checked byte for byte by test/test_trainer_log.c against fixtures made by
 * scripts/make_trainer_log_fixtures.py with the real implementations:
 *   - tqdm std.py format_interval / format_meter / Bar / EMA / update (mininterval 0.1, smoothing 0.3);
 *   - Python float repr and round (HF prints logs with print(dict));
 *   - transformers 4.x Trainer: the "***** Running training *****" block and round(loss, 4),
 *     round(epoch, 2) in the logged dict.
 */
#include "trainer_log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "../base/common.h"

double trainer_log_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// snprintf that keeps appending into buf at *k (bounded), so formatters can chain safely.
__attribute__((format(printf, 4, 5))) static void appendf(char* buf, size_t cap, size_t* k, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*k < cap ? buf + *k : NULL, *k < cap ? cap - *k : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *k += (size_t)n;
}

// ---------------------------------------------------------------------------------------------
// Python number formatting

int py_float_repr(char* buf, size_t cap, double x) {
    if (isnan(x)) return snprintf(buf, cap, "nan");
    if (isinf(x)) return snprintf(buf, cap, x < 0 ? "-inf" : "inf");
    if (x == 0) return snprintf(buf, cap, signbit(x) ? "-0.0" : "0.0");
    // shortest %.Ne that reads back to the same double (Python's repr picks the shortest round-trip
    // digit string; the correctly rounded N-digit candidate is the one %.*e gives)
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    bool neg = tmp[0] == '-';
    const char* p = tmp + neg;
    char dig[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (isdigit((unsigned char)*p)) dig[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    char out[400];
    size_t k = 0;
    if (neg) out[k++] = '-';
    if (e < -4 || e >= 16) {
        out[k++] = dig[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = dig[i];
        }
        k += (size_t)snprintf(out + k, sizeof out - k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (e >= 0) {
        for (int i = 0; i <= e; i++) out[k++] = i < nd ? dig[i] : '0';
        out[k++] = '.';
        if (nd > e + 1) {
            for (int i = e + 1; i < nd; i++) out[k++] = dig[i];
        } else {
            out[k++] = '0';
        }
    } else {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -e - 1; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = dig[i];
    }
    out[k] = 0;
    return snprintf(buf, cap, "%s", out);
}

double py_round(double x, int ndigits) {
    if (!isfinite(x)) return x;
    // glibc printf is exact on the binary value and rounds half to even, like Python's round()
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%.*f", ndigits, x);
    return strtod(tmp, NULL);
}

// ---------------------------------------------------------------------------------------------
// HF header blocks

int trainer_log_format_thousands(char* buf, size_t cap, int64_t n) {
    char digits[32];
    uint64_t u = n < 0 ? (uint64_t)(-(n + 1)) + 1 : (uint64_t)n;
    int nd = snprintf(digits, sizeof digits, "%llu", (unsigned long long)u);
    char out[48];
    size_t k = 0;
    if (n < 0) out[k++] = '-';
    for (int i = 0; i < nd; i++) {
        if (i > 0 && (nd - i) % 3 == 0) out[k++] = ',';
        out[k++] = digits[i];
    }
    out[k] = 0;
    return snprintf(buf, cap, "%s", out);
}

void trainer_log_header(FILE* f, const TrainHeader* h) {
    if (!t5_log_info()) return;  // HF's logger.info
    char a[48];
    fprintf(f, "***** Running training *****\n");
    trainer_log_format_thousands(a, sizeof a, h->num_examples);
    fprintf(f, "  Num examples = %s\n", a);
    trainer_log_format_thousands(a, sizeof a, h->num_epochs);
    fprintf(f, "  Num Epochs = %s\n", a);
    trainer_log_format_thousands(a, sizeof a, h->per_device_batch_size);
    fprintf(f, "  Instantaneous batch size per device = %s\n", a);
    trainer_log_format_thousands(a, sizeof a, h->total_batch_size);
    fprintf(f, "  Total train batch size (w. parallel, distributed & accumulation) = %s\n", a);
    fprintf(f, "  Gradient Accumulation steps = %lld\n", (long long)h->gradient_accumulation_steps);
    trainer_log_format_thousands(a, sizeof a, h->max_steps);
    fprintf(f, "  Total optimization steps = %s\n", a);
    trainer_log_format_thousands(a, sizeof a, h->num_trainable_params);
    fprintf(f, "  Number of trainable parameters = %s\n", a);
}

void trainer_log_resume(FILE* f, int64_t epochs_trained, int64_t global_step, int64_t steps_trained_in_epoch) {
    if (!t5_log_info()) return;
    fprintf(f, "  Continuing training from checkpoint, will skip to saved global_step\n");
    fprintf(f, "  Continuing training from epoch %lld\n", (long long)epochs_trained);
    fprintf(f, "  Continuing training from global step %lld\n", (long long)global_step);
    fprintf(f, "  Will skip the first %lld epochs then the first %lld batches in the first epoch.\n",
            (long long)epochs_trained, (long long)steps_trained_in_epoch);
}

void trainer_log_eval_header(FILE* f, int64_t num_examples, int64_t batch_size) {
    if (!t5_log_info()) return;
    fprintf(f, "***** Running Evaluation *****\n");
    fprintf(f, "  Num examples = %lld\n", (long long)num_examples);
    fprintf(f, "  Batch size = %lld\n", (long long)batch_size);
}

// ---------------------------------------------------------------------------------------------
// progress bar

int progress_format_interval(char* buf, size_t cap, double t) {
    const char* sign = t < 0 ? "-" : "";
    long long s = (long long)fabs((double)(long long)t);  // abs(int(t)): truncation toward zero
    long long mins = s / 60, sec = s % 60, h = mins / 60, m = mins % 60;
    if (h) return snprintf(buf, cap, "%s%lld:%02lld:%02lld", sign, h, m, sec);
    return snprintf(buf, cap, "%s%02lld:%02lld", sign, m, sec);
}

// tqdm's Bar.UTF charset: " " then U+258F .. U+2588 (1/8 .. 8/8 blocks)
static const char* const BAR_UTF[9] = {" ", "\u258f", "\u258e", "\u258d", "\u258c", "\u258b", "\u258a", "\u2589", "\u2588"};

// number of code points (every character here is one column wide)
static int disp_len(const char* s) {
    int n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) n++;
    return n;
}

int progress_format_meter(char* buf, size_t cap, int64_t n, int64_t total, double elapsed, double rate,
                          int64_t initial, int ncols) {
    if (total && (double)n >= (double)total + 0.5) total = 0;  // tqdm drops a total that was exceeded
    char el[32], rem[32], rfmt[48];
    progress_format_interval(el, sizeof el, elapsed);
    bool have_rate = rate >= 0;
    if (!have_rate && elapsed != 0) {
        rate = (double)(n - initial) / elapsed;
        have_rate = true;
    }
    bool rate_true = have_rate && rate != 0;  // Python: `if rate`
    double inv = rate_true ? 1.0 / rate : 0;
    if (rate_true && inv > 1)
        snprintf(rfmt, sizeof rfmt, "%5.2fs/it", inv);
    else if (rate_true)
        snprintf(rfmt, sizeof rfmt, "%5.2fit/s", rate);
    else
        snprintf(rfmt, sizeof rfmt, "?it/s");

    char res[1024];
    size_t k = 0;
    if (!total) {
        appendf(res, sizeof res, &k, "%lldit [%s, %s]", (long long)n, el, rfmt);
    } else {
        double remaining = rate_true ? (double)(total - n) / rate : 0;
        if (rate_true)
            progress_format_interval(rem, sizeof rem, remaining);
        else
            snprintf(rem, sizeof rem, "?");
        char rbar[256], lbar[32];
        snprintf(rbar, sizeof rbar, "| %lld/%lld [%s<%s, %s]", (long long)n, (long long)total, el, rem, rfmt);
        double frac = (double)n / (double)total;
        snprintf(lbar, sizeof lbar, "%3.0f%%|", frac * 100);
        int nobar = disp_len(lbar) + disp_len(rbar);
        int width = ncols > 0 ? T5_MAX(1, ncols - nobar) : 10;
        if (frac < 0) frac = 0;
        if (frac > 1) frac = 1;
        long long units = (long long)(frac * width * 8);
        long long full = units / 8, part = units % 8;
        appendf(res, sizeof res, &k, "%s", lbar);
        for (long long i = 0; i < full && k < sizeof res - 8; i++) appendf(res, sizeof res, &k, "%s", BAR_UTF[8]);
        if (full < width) {
            appendf(res, sizeof res, &k, "%s", BAR_UTF[part]);
            for (long long i = 0; i < width - full - 1 && k < sizeof res - 8; i++) appendf(res, sizeof res, &k, " ");
        }
        appendf(res, sizeof res, &k, "%s", rbar);
    }
    if (k >= sizeof res) k = sizeof res - 1;
    res[k] = 0;
    if (ncols > 0 && disp_len(res) > ncols) {  // tqdm's disp_trim: cut to ncols columns
        int cols = 0;
        size_t i = 0;
        for (; res[i]; i++) {
            if (((unsigned char)res[i] & 0xC0) != 0x80) {
                if (cols == ncols) break;
                cols++;
            }
        }
        res[i] = 0;
    }
    return snprintf(buf, cap, "%s", res);
}

static int terminal_cols(FILE* f) {
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char* c = getenv("COLUMNS");
    return c ? atoi(c) : 0;
}

static void progress_draw(ProgressBar* p, double now) {
    char line[1024];
    double rate = p->ema_dt > 0 ? p->ema_dn / p->ema_dt : -1;  // both EMAs share the bias correction
    progress_format_meter(line, sizeof line, p->n, p->total, now - p->start_t, rate, p->initial,
                          p->tty ? p->ncols : 0);
    int len = disp_len(line);
    if (p->tty) {
        fprintf(p->f, "\r%s", line);
        for (int i = len; i < p->last_len; i++) fputc(' ', p->f);
        p->active = true;
    } else {
        fprintf(p->f, "%s\n", line);
    }
    p->last_len = len;
    fflush(p->f);
}

static bool progress_disabled;  // progress_set_disabled

void progress_set_disabled(bool disabled) { progress_disabled = disabled; }

void progress_init(ProgressBar* p, FILE* f, int64_t total, int64_t initial, double now, int ncols) {
    memset(p, 0, sizeof *p);
    if (progress_disabled) {  // a closed bar: updates and close do nothing, progress_write prints plain lines
        p->f = f;
        p->closed = true;
        return;
    }
    p->f = f;
    p->tty = isatty(fileno(f));
    p->total = total;
    p->n = p->initial = p->last_print_n = initial;
    p->start_t = p->last_print_t = now;
    p->mininterval = 0.1;
    p->plain_interval = 30.0;
    p->ncols = ncols > 0 ? ncols : (p->tty ? terminal_cols(f) : 0);
    progress_draw(p, now);
}

void progress_update(ProgressBar* p, int64_t n, double now) {
    if (p->closed) return;
    p->n = n;
    double dt = now - p->last_print_t;
    if (dt < (p->tty ? p->mininterval : p->plain_interval)) return;
    int64_t dn = n - p->last_print_n;
    if (dt > 0 && dn > 0) {  // tqdm EMA, smoothing 0.3
        p->ema_dn = 0.3 * (double)dn + 0.7 * p->ema_dn;
        p->ema_dt = 0.3 * dt + 0.7 * p->ema_dt;
        p->ema_calls++;
    }
    progress_draw(p, now);
    p->last_print_n = n;
    p->last_print_t = now;
}

void progress_write(ProgressBar* p, const char* line) {
    if (p->tty && p->active && !p->closed) {
        fputc('\r', p->f);
        for (int i = 0; i < p->last_len; i++) fputc(' ', p->f);
        fputc('\r', p->f);
    }
    fprintf(p->f, "%s\n", line);
    if (p->tty && p->active && !p->closed) {
        char bar[1024];
        double rate = p->ema_dt > 0 ? p->ema_dn / p->ema_dt : -1;
        progress_format_meter(bar, sizeof bar, p->n, p->total, p->last_print_t - p->start_t, rate, p->initial,
                              p->ncols);
        fprintf(p->f, "%s", bar);
        p->last_len = disp_len(bar);
    }
    fflush(p->f);
}

void progress_close(ProgressBar* p, double now) {
    if (p->closed) return;
    double dt = now - p->last_print_t;
    int64_t dn = p->n - p->last_print_n;
    if (dt > 0 && dn > 0) {
        p->ema_dn = 0.3 * (double)dn + 0.7 * p->ema_dn;
        p->ema_dt = 0.3 * dt + 0.7 * p->ema_dt;
        p->ema_calls++;
    }
    if (p->tty || dn > 0) progress_draw(p, now);
    if (p->tty) fputc('\n', p->f);
    fflush(p->f);
    p->active = false;
    p->closed = true;
}

// ---------------------------------------------------------------------------------------------
// step records

int trainer_log_format_step(char* buf, size_t cap, const StepLog* s) {
    size_t k = 0;
    if (cap) buf[0] = 0;
    appendf(buf, cap, &k, "step %lld/%lld | loss %.6f | norm %.4f | lr %.2e", (long long)s->step,
            (long long)s->max_steps, s->loss, s->grad_norm, s->lr);
    if (s->loss_scale > 0) appendf(buf, cap, &k, " | scale %.0f | skipped %lld", s->loss_scale, (long long)s->skipped);
    appendf(buf, cap, &k, " | %.1f ms | %.0f tok/s | %.1f samples/s", s->step_ms, s->tokens_per_s, s->samples_per_s);
    if (s->gpu_mem_alloc_gib >= 0)
        appendf(buf, cap, &k, " | mem %.1f/%.1f GiB", s->gpu_mem_alloc_gib, s->gpu_mem_peak_gib);
    if (s->rss_gib >= 0) appendf(buf, cap, &k, " | rss %.1f GiB", s->rss_gib);
    if (s->mfu > 0) appendf(buf, cap, &k, " | mfu %.1f%%", 100.0 * s->mfu);
    if (s->tokens_seen_on) appendf(buf, cap, &k, " | tokens seen %lld", (long long)s->num_input_tokens_seen);
    return (int)k;
}

int trainer_log_format_hf_dict(char* buf, size_t cap, const StepLog* s) {
    char l[64], g[64], r[64], e[64];
    py_float_repr(l, sizeof l, py_round(s->loss, 4));
    py_float_repr(g, sizeof g, s->grad_norm);
    py_float_repr(r, sizeof r, s->lr);
    py_float_repr(e, sizeof e, py_round(s->epoch, 2));
    int k;
    if (isnan(s->grad_norm)) k = snprintf(buf, cap, "{'loss': %s, 'learning_rate': %s, 'epoch': %s}", l, r, e);
    else k = snprintf(buf, cap, "{'loss': %s, 'grad_norm': %s, 'learning_rate': %s, 'epoch': %s}", l, g, r, e);
    if (s->tokens_seen_on && k > 0 && (size_t)k < cap)  // HF's Trainer.log adds it after the epoch
        k += snprintf(buf + k - 1, cap - (size_t)k + 1, ", 'num_input_tokens_seen': %lld}",
                      (long long)s->num_input_tokens_seen) - 1;
    return k;
}

int trainer_log_format_main(char* buf, size_t cap, const StepLog* s) {
    size_t k = 0;
    if (cap) buf[0] = 0;
    appendf(buf, cap, &k, "s:%lld trl:%.4f lr:%.3g norm:%.4g", (long long)s->step, s->loss, s->lr, s->grad_norm);
    if (s->loss_scale > 0) appendf(buf, cap, &k, " scale:%.0f", s->loss_scale);
    if (s->tokens_seen_on) appendf(buf, cap, &k, " nits:%lld", (long long)s->num_input_tokens_seen);
    return (int)k;
}

// a JSON number (shortest repr, as Python's json) or null for NaN/inf
static void json_num(char* buf, size_t cap, size_t* k, const char* key, double v, bool first) {
    char num[64];
    if (isfinite(v))
        py_float_repr(num, sizeof num, v);
    else
        snprintf(num, sizeof num, "null");
    appendf(buf, cap, k, "%s\"%s\":%s", first ? "" : ",", key, num);
}

int trainer_log_format_json(char* buf, size_t cap, const StepLog* s) {
    size_t k = 0;
    if (cap) buf[0] = 0;
    appendf(buf, cap, &k, "{\"step\":%lld,\"max_steps\":%lld", (long long)s->step, (long long)s->max_steps);
    json_num(buf, cap, &k, "epoch", s->epoch, false);
    json_num(buf, cap, &k, "loss", s->loss, false);
    json_num(buf, cap, &k, "grad_norm", s->grad_norm, false);
    json_num(buf, cap, &k, "learning_rate", s->lr, false);
    json_num(buf, cap, &k, "loss_scale", s->loss_scale > 0 ? s->loss_scale : NAN, false);
    appendf(buf, cap, &k, ",\"skipped\":%lld", (long long)s->skipped);
    json_num(buf, cap, &k, "step_ms", s->step_ms, false);
    json_num(buf, cap, &k, "tokens_per_s", s->tokens_per_s, false);
    json_num(buf, cap, &k, "samples_per_s", s->samples_per_s, false);
    json_num(buf, cap, &k, "gpu_mem_alloc_gib", s->gpu_mem_alloc_gib >= 0 ? s->gpu_mem_alloc_gib : NAN, false);
    json_num(buf, cap, &k, "gpu_mem_peak_gib", s->gpu_mem_peak_gib >= 0 ? s->gpu_mem_peak_gib : NAN, false);
    json_num(buf, cap, &k, "rss_gib", s->rss_gib >= 0 ? s->rss_gib : NAN, false);
    if (s->mfu > 0) {
        json_num(buf, cap, &k, "model_tflops_per_s", s->model_flops_per_s / 1e12, false);
        json_num(buf, cap, &k, "mfu", s->mfu, false);
    }
    if (s->tokens_seen_on) appendf(buf, cap, &k, ",\"num_input_tokens_seen\":%lld", (long long)s->num_input_tokens_seen);
    appendf(buf, cap, &k, "}");
    return (int)k;
}

// ---------------------------------------------------------------------------------------------
// files and the TrainerLog

int trainer_log_append(const char* output_dir, const char* name, const char* line) {
    char* path = t5_path_join(output_dir, name);
    FILE* f = fopen(path, "a");
    free(path);
    if (!f) return -1;
    int rc = fprintf(f, "%s\n", line) < 0 ? -1 : 0;
    if (fclose(f) != 0) rc = -1;
    return rc;
}

void trainer_log_init(TrainerLog* t, FILE* out, const char* output_dir, int rank) {
    memset(t, 0, sizeof *t);
    t->out = out;
    t->output_dir = output_dir ? strdup_check(output_dir) : NULL;
    t->rank = rank;
    t->hf_dict = true;
}

void trainer_log_free(TrainerLog* t) {
    free(t->output_dir);
    t->output_dir = NULL;
}

static void append_or_warn(TrainerLog* t, const char* name, const char* line) {
    if (!t->output_dir) return;
    static bool warned = false;  // one warning per process: a full disk must not stop training
    if (trainer_log_append(t->output_dir, name, line) != 0 && !warned) {
        warned = true;
        t5_warn("cannot append to %s/%s: %s (log lines are only printed from now on)", t->output_dir, name,
                strerror(errno));
    }
}

// a line on the console, above the progress bar
static void emit(TrainerLog* t, const char* line) {
    if (t->rank != 0) return;
    if (t->bar_on)
        progress_write(&t->bar, line);
    else {
        fprintf(t->out, "%s\n", line);
        fflush(t->out);
    }
}

void trainer_log_line(TrainerLog* t, const char* line) {
    if (t5_log_info()) emit(t, line);
}

void trainer_log_print(TrainerLog* t, const char* line) { emit(t, line); }

int trainer_log_format_wall_clock(char* buf, size_t cap, bool micro, const double ms[5]) {
    static const char* const NAMES[5] = {"fwd", "bwd", "bwd_inner", "bwd_allreduce", "step"};
    size_t k = 0;
    if (cap) buf[0] = 0;
    appendf(buf, cap, &k, "[Rank 0] time (ms)");
    for (int i = 0; i < 5; i++) appendf(buf, cap, &k, " | %s%s: %.2f", NAMES[i], micro ? "_microstep" : "", ms[i]);
    return (int)k;
}

void trainer_log_step(TrainerLog* t, const StepLog* s) {
    if (t->rank != 0) return;
    char line[1024];
    trainer_log_format_step(line, sizeof line, s);
    emit(t, line);  // HF prints its log dicts through the progress callback, at every log level
    if (t->hf_dict) {
        trainer_log_format_hf_dict(line, sizeof line, s);
        emit(t, line);
    }
    trainer_log_format_json(line, sizeof line, s);
    append_or_warn(t, "trainer_log.jsonl", line);
    trainer_log_format_main(line, sizeof line, s);
    append_or_warn(t, "main.log", line);
}

void trainer_log_eval(TrainerLog* t, int64_t step, const char* const* keys, const double* values, int n) {
    if (t->rank != 0) return;
    char con[1024], js[1024], ml[1024];
    size_t kc = 0, kj = 0, km = 0;
    appendf(con, sizeof con, &kc, "eval step %lld", (long long)step);
    appendf(js, sizeof js, &kj, "{\"step\":%lld", (long long)step);
    appendf(ml, sizeof ml, &km, "s:%lld", (long long)step);
    for (int i = 0; i < n; i++) {
        appendf(con, sizeof con, &kc, " | %s %.4f", keys[i], values[i]);
        json_num(js, sizeof js, &kj, keys[i], values[i], false);
        appendf(ml, sizeof ml, &km, " %s:%.4f", keys[i], values[i]);
    }
    appendf(js, sizeof js, &kj, "}");
    emit(t, con);
    append_or_warn(t, "trainer_log.jsonl", js);
    append_or_warn(t, "main.log", ml);
}

// JSON string body escape (ASCII control characters and quotes; UTF-8 passes through)
static void json_escape(char* out, size_t cap, const char* s) {
    size_t k = 0;
    for (; *s && k + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[k++] = '\\';
            out[k++] = (char)c;
        } else if (c < 0x20) {
            k += (size_t)snprintf(out + k, cap - k, "\\u%04x", c);
        } else {
            out[k++] = (char)c;
        }
    }
    out[k] = 0;
}

void trainer_log_overflow(TrainerLog* t, int64_t step, const char* ds_line, double new_scale) {
    if (t->rank != 0) return;
    emit(t, ds_line);
    char esc[1024], js[1200], ml[128];
    json_escape(esc, sizeof esc, ds_line);
    snprintf(js, sizeof js, "{\"step\":%lld,\"event\":\"overflow\",\"message\":\"%s\"}", (long long)step, esc);
    append_or_warn(t, "trainer_log.jsonl", js);
    snprintf(ml, sizeof ml, "s:%lld overflow:%.0f", (long long)step, new_scale);
    append_or_warn(t, "main.log", ml);
}

void trainer_log_event(TrainerLog* t, const char* json_line) {
    if (t->rank == 0) append_or_warn(t, "trainer_log.jsonl", json_line);
}

// ---------------------------------------------------------------------------------------------
// host memory

int64_t trainer_log_parse_status(const char* text, const char* key) {
    size_t kl = strlen(key);
    for (const char* p = text; p && *p;) {
        if (strncmp(p, key, kl) == 0 && p[kl] == ':') {
            const char* q = p + kl + 1;
            while (*q == ' ' || *q == '\t') q++;
            char* end;
            long long v = strtoll(q, &end, 10);
            if (end == q) return -1;
            while (*end == ' ') end++;
            if (strncmp(end, "kB", 2) == 0) v *= 1024;
            return v;
        }
        p = strchr(p, '\n');
        if (p) p++;
    }
    return -1;
}

static int64_t status_value(const char* key) {
    char* text = t5_read_file("/proc/self/status", NULL);
    if (!text) return -1;
    int64_t v = trainer_log_parse_status(text, key);
    free(text);
    return v;
}

int64_t trainer_log_host_rss(void) { return status_value("VmRSS"); }
int64_t trainer_log_host_peak_rss(void) { return status_value("VmHWM"); }
