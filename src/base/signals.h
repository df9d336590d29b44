/*
 * signals.h: SIGINT/SIGTERM end a run cleanly (DESIGN.md invariant 6).
 *
 * The handler only sets a flag (async-signal-safe) and writes one notice with write(2); the trainer polls
 * signals_stop_requested() after each optimizer step (with several ranks it all-reduces the flag with MAX so
 * every rank stops at the same step), prints signals_format_stop_message(), saves checkpoint-<step> and
 * exits 0. A second SIGINT (Ctrl-C twice) exits at once with status 130, without saving; a repeated
 * SIGTERM is ignored (the save is already under way; SLURM follows with SIGKILL after its grace period).
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
