/*
 * signals.c: stop flag set by SIGINT/SIGTERM (contract in signals.h).
 *
 * Only async-signal-safe calls in the handler: writes to volatile sig_atomic_t, write(2), _exit(2).
 */
#include "signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal = 0;
static volatile sig_atomic_t sigint_count = 0;
static struct sigaction old_int, old_term;
static bool installed = false;

static void forget_setup(void);

static void say(const char* msg) {
    ssize_t r = write(STDERR_FILENO, msg, strlen(msg));
    (void)r;
}

static void on_signal(int sig) {
    if (sig == SIGINT) {
        sigint_count++;
        if (sigint_count >= 2) {
            say("\nt5train: received SIGINT again: exiting now without saving a checkpoint\n");
            _exit(128 + SIGINT);
        }
    }
    if (stop_signal) return;  // already stopping (a repeated SIGTERM)
    stop_signal = sig;
    if (sig == SIGINT)
        say("\nt5train: received SIGINT: stopping after the current step and saving a checkpoint "
            "(press Ctrl-C again to exit at once without saving)\n");
    else
        say("\nt5train: received SIGTERM: stopping after the current step and saving a checkpoint\n");
}

void signals_install(void) {
    forget_setup();  // the training loop begins: what the run created is its output now
    stop_signal = 0;
    sigint_count = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // I/O in flight (a checkpoint write) is not interrupted
    sigaction(SIGINT, &sa, installed ? NULL : &old_int);
    sigaction(SIGTERM, &sa, installed ? NULL : &old_term);
    installed = true;
}

void signals_uninstall(void) {
    if (!installed) return;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    installed = false;
}

// ---- the immediate handler and the temporary files it removes
typedef struct {
    volatile sig_atomic_t used;
    char path[4096];
} TmpSlot;
static TmpSlot tmp_slots[SIGNALS_MAX_TMP];
// setup-phase creations: files first, then directories (deepest last registered first)
static TmpSlot setup_slots[8];
static volatile sig_atomic_t setup_is_dir[8];
static pthread_mutex_t tmp_lock = PTHREAD_MUTEX_INITIALIZER;

void signals_track_tmp(const char* path) {
    if (!path || strlen(path) >= sizeof tmp_slots[0].path) return;
    pthread_mutex_lock(&tmp_lock);
    for (int i = 0; i < SIGNALS_MAX_TMP; i++)
        if (!tmp_slots[i].used) {
            memcpy(tmp_slots[i].path, path, strlen(path) + 1);
            tmp_slots[i].used = 1;  // after the path: the handler never sees a half-written one
            break;
        }
    pthread_mutex_unlock(&tmp_lock);
}

void signals_untrack_tmp(const char* path) {
    if (!path) return;
    pthread_mutex_lock(&tmp_lock);
    for (int i = 0; i < SIGNALS_MAX_TMP; i++)
        if (tmp_slots[i].used && strcmp(tmp_slots[i].path, path) == 0) {
            tmp_slots[i].used = 0;
            break;
        }
    pthread_mutex_unlock(&tmp_lock);
}

void signals_track_setup(const char* path, bool is_dir) {
    if (!path || strlen(path) >= sizeof setup_slots[0].path) return;
    pthread_mutex_lock(&tmp_lock);
    for (int i = 0; i < 8; i++)
        if (!setup_slots[i].used) {
            memcpy(setup_slots[i].path, path, strlen(path) + 1);
            setup_is_dir[i] = is_dir;
            setup_slots[i].used = 1;
            break;
        }
    pthread_mutex_unlock(&tmp_lock);
}

static void forget_setup(void) {
    pthread_mutex_lock(&tmp_lock);
    for (int i = 0; i < 8; i++) setup_slots[i].used = 0;
    pthread_mutex_unlock(&tmp_lock);
}

static void on_signal_immediate(int sig) {
    // async-signal-safe only: unlink(2), rmdir(2), write(2), _exit(2)
    for (int i = 0; i < SIGNALS_MAX_TMP; i++)
        if (tmp_slots[i].used) unlink(tmp_slots[i].path);
    for (int i = 0; i < 8; i++)
        if (setup_slots[i].used && !setup_is_dir[i]) unlink(setup_slots[i].path);
    for (int i = 7; i >= 0; i--)
        if (setup_slots[i].used && setup_is_dir[i]) rmdir(setup_slots[i].path);  // only when empty
    say(sig == SIGINT ? "\nt5train: received SIGINT: stopped; files being written were removed, files already "
                        "saved are whole\n"
                      : "\nt5train: received SIGTERM: stopped; files being written were removed, files already "
                        "saved are whole\n");
    _exit(128 + sig);
}

void signals_install_immediate(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal_immediate;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

bool signals_stop_requested(void) { return stop_signal != 0; }
int signals_stop_signal(void) { return (int)stop_signal; }
void signals_request_stop(int sig) {
    if (!stop_signal) stop_signal = sig ? sig : SIGTERM;
}

const char* signals_name(int sig) {
    static char buf[32];
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGTERM) return "SIGTERM";
    snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}

int signals_format_stop_message(char* buf, size_t cap, int sig, int64_t step) {
    return snprintf(buf, cap, "received %s: finishing step %lld, saving checkpoint-%lld, then exiting",
                    signals_name(sig), (long long)step, (long long)step);
}
