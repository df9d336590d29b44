/*
 * signals.c: stop flag set by SIGINT/SIGTERM (contract in signals.h).
 *
 * Only async-signal-safe calls in the handler: writes to volatile sig_atomic_t, write(2), _exit(2).
 */
#include "signals.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal = 0;
static volatile sig_atomic_t sigint_count = 0;
static struct sigaction old_int, old_term;
static bool installed = false;

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
