/*
 * trainer_log.h: what the trainer prints and appends while it runs (issue 5).
 *
 *   - HF's header block ("***** Running training *****", transformers 4.x Trainer._inner_training_loop)
 *     and the eval header ("***** Running Evaluation *****");
 *   - a progress bar drawn exactly like HF's ProgressCallback (tqdm(total=max_steps, dynamic_ncols=True)):
 *     `  1%|▎     | 650/114024 [10:06<26:27:52,  1.19it/s]`, redrawn with '\r' at most every 0.1 s on a
 *     terminal; on a pipe/file, a plain line (no bar) at most every `plain_interval` seconds;
 *   - one step line per logging step (STYLE.md 32 plus throughput, memory and RSS), HF's dict-style log line
 *     (`{'loss': 1.2346, 'grad_norm': 0.81, 'learning_rate': 4.8e-05, 'epoch': 0.12}`), JSON lines appended to
 *     output_dir/trainer_log.jsonl and key:value lines to output_dir/main.log (llm.c logger: opened and
 *     closed on every write so a crash loses nothing; rank 0 only);
 *   - DeepSpeed's overflow line, passed through unchanged (src/train/loss_scaler.c formats it);
 *   - host RSS from /proc/self/status.
 *
 * Pure formatters write into a caller buffer and return the snprintf-style length (tests compare them
 * byte for byte with tqdm / Python). Writers take a FILE* so tests can capture. Times are passed in as
 * seconds (trainer_log_now()), never read inside, so the bar is testable without sleeping.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// Monotonic clock in seconds.
double trainer_log_now(void);

// ---------------------------------------------------------------------------------------------
// Python number formatting (what HF's print(dict) and json.dump produce)

// repr(float) of Python 3: shortest round-trip digits; fixed notation for 1e-4 <= |x| < 1e16 ("65536.0",
// "0.0001"), else "4.8e-05" / "1e+16"; "nan", "inf", "-inf". Returns the length.
int py_float_repr(char* buf, size_t cap, double x);
// round(x, ndigits) of Python 3 (correctly rounded, half-to-even on the exact binary value).
double py_round(double x, int ndigits);

// ---------------------------------------------------------------------------------------------
// HF header blocks

typedef struct {
    int64_t num_examples;                // len(train_dataset) after max_train_samples
    int64_t num_epochs;                  // math.ceil(num_train_epochs), or from max_steps
    int64_t per_device_batch_size;       // per_device_train_batch_size
    int64_t total_batch_size;            // per_device * world_size * gradient_accumulation_steps
    int64_t gradient_accumulation_steps;
    int64_t max_steps;                   // total optimization steps
    int64_t num_trainable_params;
} TrainHeader;

// "***** Running training *****" and the seven "  Key = value" lines (numbers with ',' thousands
// separators as HF's f"{x:,}", except Gradient Accumulation steps, as in HF).
void trainer_log_header(FILE* f, const TrainHeader* h);
// The resume lines HF prints after the header (transformers 4.x):
//   "  Continuing training from checkpoint, will skip to saved global_step" ...
void trainer_log_resume(FILE* f, int64_t epochs_trained, int64_t global_step, int64_t steps_trained_in_epoch);
// "***** Running Evaluation *****", "  Num examples = N", "  Batch size = B" (HF's evaluation_loop).
void trainer_log_eval_header(FILE* f, int64_t num_examples, int64_t batch_size);
// Writes n with ',' thousands separators (Python f"{n:,}"). Returns the length.
int trainer_log_format_thousands(char* buf, size_t cap, int64_t n);

// ---------------------------------------------------------------------------------------------
// progress bar (tqdm's format_meter, unit "it", no prefix, unicode bar)

// tqdm.format_interval: "MM:SS" or "H:MM:SS" (hours only when needed), negative with '-'.
int progress_format_interval(char* buf, size_t cap, double seconds);
// tqdm.format_meter(n, total, elapsed, ncols=ncols or None, rate=rate): rate < 0 means "not given"
// (then the average (n - initial)/elapsed, '?' when elapsed is 0). ncols <= 0: no terminal width known,
// a 10-character bar. Returns the length in bytes (the bar uses UTF-8 block characters).
int progress_format_meter(char* buf, size_t cap, int64_t n, int64_t total, double elapsed, double rate,
                          int64_t initial, int ncols);

typedef struct {
    FILE* f;
    bool tty;               // isatty(fileno(f)): '\r' redraws; otherwise plain lines
    bool active;            // a bar line is on screen (tty) and must be cleared before other output
    bool closed;
    int64_t total;          // max_steps
    int64_t n;              // steps done (global_step)
    int64_t initial;        // step the run started (resumed) from: the average rate excludes it
    double start_t;
    double last_print_t;
    int64_t last_print_n;
    double ema_dn, ema_dt;  // tqdm's EMA (smoothing 0.3) of steps and seconds between redraws
    int ema_calls;
    double mininterval;     // 0.1 s: at most ~10 redraws per second, as tqdm
    double plain_interval;  // seconds between plain lines when not a terminal (default 30)
    int ncols;              // terminal width at start (0 = unknown)
    int last_len;           // display width of the last drawn line (for clearing)
} ProgressBar;

// HF --disable_tqdm, process-wide: bars started from now on draw nothing (progress_write still prints its lines:
// HF's PrinterCallback prints the same log lines without the bar).
void progress_set_disabled(bool disabled);
// Starts a bar at step `initial` of `total`, drawing the empty bar once. ncols: 0 = ask the terminal.
void progress_init(ProgressBar* p, FILE* f, int64_t total, int64_t initial, double now, int ncols);
// Sets the step count to n (absolute); redraws when due.
void progress_update(ProgressBar* p, int64_t n, double now);
// Prints `line` (no trailing newline needed) above the bar: clears the bar, prints, redraws it (tqdm.write).
void progress_write(ProgressBar* p, const char* line);
// Final redraw and newline.
void progress_close(ProgressBar* p, double now);

// ---------------------------------------------------------------------------------------------
// per-logging-step record

typedef struct {
    int64_t step, max_steps;
    double epoch;            // fractional epoch, HF's state.epoch
    double loss;             // mean training loss since the last log (HF's tr_loss / steps)
    double grad_norm;        // global grad norm before clipping (NAN if not computed)
    double lr;
    double loss_scale;       // <= 0: no loss scaler (bf16/fp32): "scale" and "skipped" not printed
    int64_t skipped;         // overflow-skipped steps so far
    double step_ms;          // mean wall time per step over the logging window
    double tokens_per_s;     // source+target non-pad tokens per second
    double samples_per_s;
    double gpu_mem_alloc_gib, gpu_mem_peak_gib;  // < 0: unknown (not printed)
    double rss_gib;                              // < 0: unknown (not printed)
    // model FLOPs per second over the window (flops_t5_train_step, src/report/flops.h) and their share of the
    // GPU's dense 16-bit peak; mfu <= 0: the peak is not known (H100/H200 only), neither is printed
    double model_flops_per_s, mfu;
    bool tokens_seen_on;             // include_num_input_tokens_seen: print num_input_tokens_seen
    int64_t num_input_tokens_seen;   // HF's count so far, summed over the ranks
} StepLog;

// "step 120/3000 | loss 1.234567 | norm 0.8123 | lr 4.80e-05 | scale 65536 | skipped 3 | 412.3 ms |
//  18234 tok/s | 12.5 samples/s | mem 10.2/12.3 GiB | rss 3.1 GiB | mfu 41.2%" (mfu only when known)
int trainer_log_format_step(char* buf, size_t cap, const StepLog* s);
// HF 4.x print(logs): "{'loss': 1.2346, 'grad_norm': 0.81, 'learning_rate': 4.8e-05, 'epoch': 0.12}"
// (loss rounded to 4 digits, epoch to 2, as Trainer does; grad_norm omitted when NAN).
int trainer_log_format_hf_dict(char* buf, size_t cap, const StepLog* s);
// llm.c main.log line: "s:120 trl:1.2346 lr:4.8e-05 norm:0.81 scale:65536"
int trainer_log_format_main(char* buf, size_t cap, const StepLog* s);
// One JSON object (no newline): {"step":120,"epoch":0.12,"loss":1.2345678,...}; NaN/inf become null.
int trainer_log_format_json(char* buf, size_t cap, const StepLog* s);

// ---------------------------------------------------------------------------------------------
// the trainer's log: stdout (through the bar) + output_dir files, rank 0 only

typedef struct {
    FILE* out;               // stdout normally
    char* output_dir;        // NULL: no files
    int rank;                // everything is a no-op on rank != 0
    bool hf_dict;            // also print HF's dict line
    ProgressBar bar;
    bool bar_on;
} TrainerLog;

void trainer_log_init(TrainerLog* t, FILE* out, const char* output_dir, int rank);
void trainer_log_free(TrainerLog* t);
// An info line to stdout (above the progress bar if one is drawn), as HF's logger.info: rank 0 only, and only at
// log levels passive, debug and info (t5_log_info). Step, eval-metric and OVERFLOW lines print at every level.
void trainer_log_line(TrainerLog* t, const char* line);
// A line to stdout at every log level (DeepSpeed's print_dist: the wall_clock_breakdown lines). Rank 0 only.
void trainer_log_print(TrainerLog* t, const char* line);
// DeepSpeed's wall_clock_breakdown line (SynchronizedWallClockTimer.log on rank 0), times in ms in the order fwd, bwd,
// bwd_inner, bwd_allreduce, step: "[Rank 0] time (ms) | fwd_microstep: 1.23 | bwd_microstep: ... | step_microstep: ..."
// for one micro-batch (micro), else the update's sums "... | fwd: ... | bwd: ... | bwd_inner: ... | bwd_allreduce: ...
// | step: ...". Returns the length snprintf would write.
int trainer_log_format_wall_clock(char* buf, size_t cap, bool micro, const double ms[5]);
// Step line (+HF dict line) to stdout, JSON line to trainer_log.jsonl, key:value line to main.log.
void trainer_log_step(TrainerLog* t, const StepLog* s);
// Eval result: "eval step 500 | eval_loss 0.9877 | ..." to stdout, {"step":500,"eval_loss":..} to the
// jsonl and "s:500 eval_loss:0.9877" to main.log. keys/values: n pairs (e.g. eval_loss, eval_bleu).
void trainer_log_eval(TrainerLog* t, int64_t step, const char* const* keys, const double* values, int n);
// DeepSpeed's overflow line (loss_scaler_format_overflow) unchanged to stdout, and as
// {"step":N,"event":"overflow","message":"..."} / "s:N overflow:<scale after>" to the files.
void trainer_log_overflow(TrainerLog* t, int64_t step, const char* ds_line, double new_scale);

// An event's JSON object (one line, no newline) appended to trainer_log.jsonl. Rank 0 only.
void trainer_log_event(TrainerLog* t, const char* json_line);

// Appends one line (a '\n' is added) to output_dir/name, opening and closing the file (llm.c logger).
// Returns 0, or -1 with errno set (the caller warns once; a full disk must not stop training).
int trainer_log_append(const char* output_dir, const char* name, const char* line);

// ---------------------------------------------------------------------------------------------
// host memory

// Value of `key` ("VmRSS", "VmHWM") in a /proc/self/status text, in bytes; -1 if absent.
int64_t trainer_log_parse_status(const char* status_text, const char* key);
// Current resident set size of this process in bytes (VmRSS), -1 if unknown.
int64_t trainer_log_host_rss(void);
// Peak resident set size (VmHWM), -1 if unknown.
int64_t trainer_log_host_peak_rss(void);

#ifdef __cplusplus
}
#endif
