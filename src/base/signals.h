/*
 * signals.h: SIGINT/SIGTERM end a run cleanly (DESIGN.md invariant 6).
 *
 * The handler only sets a flag (async-signal-safe) and writes one notice with write(2); the trainer polls
 * signals_stop_requested() after each optimizer step (with several ranks it all-reduces the flag with MAX so
 * every rank stops at the same step), prints signals_format_stop_message(), saves checkpoint-<step> and
 * exits 0. A second SIGINT (Ctrl-C twice) exits at once with status 130, without saving; a repeated
 * SIGTERM is ignored (the save is already under way; SLURM follows with SIGKILL after its grace period).
 *
 * Outside the training loop (reading the config, loading the model, tokenizing, the final evaluation and
 * save; every subcommand) main() installs the immediate handler: a SIGINT or SIGTERM stops the process at
 * once. Every file t5train writes goes to a temporary name that is renamed when complete, so what was
 * already saved stays whole; the handler removes the temporary files still being written (registered with
 * signals_track_tmp), prints one line and exits with 128 + the signal number (130, 143), so no
 * "*.tmp.<pid>" is left behind (issue 14 item 5). The trainer's flag handler replaces it during the loop and
 * signals_uninstall puts it back.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Installs the SIGINT and SIGTERM handlers (sigaction, SA_RESTART) and clears the flag.
void signals_install(void);
// Installs the immediate handler described above (main() does, for every command).
void signals_install_immediate(void);
// A temporary file being written: removed by an immediate stop until untracked (after its rename or
// removal). Thread-safe; at most SIGNALS_MAX_TMP at once (beyond that a file is not tracked: never fails).
#define SIGNALS_MAX_TMP 64
void signals_track_tmp(const char* path);
void signals_untrack_tmp(const char* path);
// What this run created while it prepares (output_dir when it did not exist, its t5train_config.json): an
// immediate stop before the training loop removes them (the directory only if empty), so a run stopped while
// loading or tokenizing leaves nothing behind. signals_install (the training loop begins) forgets them.
void signals_track_setup(const char* path, bool is_dir);
// Restores the previous handlers.
void signals_uninstall(void);
// True once SIGINT or SIGTERM was received (or signals_request_stop was called).
bool signals_stop_requested(void);
// The signal that asked to stop (SIGINT / SIGTERM), 0 if none.
int signals_stop_signal(void);
// Sets the flag by hand: another rank was signalled (after the all-reduce), or a test.
void signals_request_stop(int sig);
// "SIGINT", "SIGTERM", "signal N"
const char* signals_name(int sig);
// "received SIGINT: finishing step N, saving checkpoint-N, then exiting"
int signals_format_stop_message(char* buf, size_t cap, int sig, int64_t step);

#ifdef __cplusplus
}
#endif
