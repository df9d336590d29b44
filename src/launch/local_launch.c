/*
 * local_launch.c: N ranks of one command on this host (local_launch.h has the contract).
 */
#include "local_launch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../base/common.h"
#include "launch_env.h"
#include "rendezvous.h"

#define MAX_PROCS 1024

static volatile sig_atomic_t g_nkids;
static pid_t g_kids[MAX_PROCS];
static volatile sig_atomic_t g_signalled;

// to each rank's process group (a rank's own children too)
static void forward(int sig) {
    g_signalled = sig;
    for (int i = 0; i < g_nkids; i++)
        if (g_kids[i] > 0) kill(-g_kids[i], sig);
}

// a free port for the rendezvous, already listening (*fd): rank 0 inherits the socket (T5TRAIN_RDV_FD,
// rendezvous.c) instead of binding the port again later, so no other program can take it in between (a port
// picked, closed and bound again by rank 0 can be lost to any socket opened meanwhile on the host)
static int pick_listener(int* fd_out, char* err, size_t errlen) {
    *fd_out = rdv_listen(0, err, errlen);
    if (*fd_out < 0) return -1;
    const int port = rdv_socket_port(*fd_out);
    if (port <= 0) {
        t5_set_err(err, errlen, "the listening socket has no port: %s", strerror(errno));
        close(*fd_out);
        *fd_out = -1;
    }
    return port;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int code_of(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1; }

static void describe(char* out, size_t cap, int st) {
    if (WIFSIGNALED(st))
        snprintf(out, cap, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(st));
}

int local_launch(const LocalLaunchOptions* o, char* const argv[], char* err, size_t errlen) {
    int n = o->nprocs;
    if (n < 1 || n > MAX_PROCS) return t5_set_err(err, errlen, "--num_gpus %d: give 1 .. %d", n, MAX_PROCS);
    if (!argv || !argv[0]) return t5_set_err(err, errlen, "--num_gpus: no command to run");
    int lfd = -1;  // the rendezvous socket when the port is ours to pick: rank 0 inherits it
    char why[256] = "";
    int port = o->master_port > 0 ? o->master_port : pick_listener(&lfd, why, sizeof why);
    if (port <= 0) return t5_set_err(err, errlen, "--num_gpus: cannot find a free TCP port for the rendezvous: %s", why);
    char run_id[64];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(run_id, sizeof run_id, "t5train-%d-%lld-%ld", (int)getpid(), (long long)ts.tv_sec, ts.tv_nsec);
    if (!o->quiet)
        fprintf(stderr, "t5train: starting %d ranks on this host (MASTER_ADDR=127.0.0.1 MASTER_PORT=%d): %s ...\n", n,
                port, argv[0]);

    struct sigaction sa = {0}, old_int, old_term, old_hup;
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    g_signalled = 0;
    g_nkids = 0;
    pid_t parent = getpid();
    // signals wait while a rank is forked: the child first puts back the default actions, so a SIGTERM sent
    // at once reaches the rank and never the launcher's handler copied into it
    sigset_t block, saved;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    for (int r = 0; r < n; r++) {
        sigprocmask(SIG_BLOCK, &block, &saved);
        pid_t pid = fork();
        if (pid > 0) {
            setpgid(pid, pid);  // also here: the group exists before any signal is forwarded to it
            g_kids[r] = pid;
            g_nkids = r + 1;
            sigprocmask(SIG_SETMASK, &saved, NULL);
            continue;
        }
        if (pid < 0) {
            int e = errno;
            sigprocmask(SIG_SETMASK, &saved, NULL);
            forward(SIGTERM);
            while (wait(NULL) > 0) {}
            g_nkids = 0;
            sigaction(SIGINT, &old_int, NULL);
            sigaction(SIGTERM, &old_term, NULL);
            sigaction(SIGHUP, &old_hup, NULL);
            if (lfd >= 0) close(lfd);
            return t5_set_err(err, errlen, "--num_gpus: cannot start rank %d: %s", r, strerror(e));
        }
        if (pid == 0) {
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(1);  // the launcher died before prctl
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            sigprocmask(SIG_SETMASK, &saved, NULL);
            char v[32];
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%d", n);
            setenv("WORLD_SIZE", v, 1);
            setenv("LOCAL_WORLD_SIZE", v, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
            setenv("T5TRAIN_RUN_ID", run_id, 1);
            unsetenv("TORCHELASTIC_RUN_ID");
            unsetenv("T5TRAIN_RDV_FD");
            // kept across exec for rank 0 only, and only when it has a rendezvous to hold (one rank has none:
            // its socket would stay open, unused, in it and every program it starts)
            if (r == 0 && n > 1 && lfd >= 0 && fcntl(lfd, F_SETFD, 0) == 0) {
                snprintf(v, sizeof v, "%d", lfd);
                setenv("T5TRAIN_RDV_FD", v, 1);
            }
            execvp(argv[0], argv);
            fprintf(stderr, "t5train: error: rank %d: cannot run %s: %s\n", r, argv[0], strerror(errno));
            _exit(127);
        }
    }

    if (lfd >= 0) close(lfd);  // rank 0 holds it now
    int result = 0, failed_rank = -1, left = n;
    double kill_at = 0;
    double grace = o->grace_s > 0 ? o->grace_s : 30;
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, kill_at > 0 ? WNOHANG : 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) break;
        if (pid == 0) {  // waiting for the others to stop after a failure
            if (now_s() >= kill_at) {
                for (int i = 0; i < n; i++)
                    if (g_kids[i] > 0) kill(-g_kids[i], SIGKILL);
                kill_at = now_s() + 3600;
            }
            usleep(20 * 1000);
            continue;
        }
        int r = -1;
        for (int i = 0; i < n; i++)
            if (g_kids[i] == pid) r = i;
        if (r < 0) continue;
        g_kids[r] = 0;
        left--;
        bool bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (bad && failed_rank < 0) {
            failed_rank = r;
            result = code_of(st);
            // after a forwarded SIGINT/SIGTERM every rank was told already: they end their own way (a second
            // signal could cut a checkpoint short); otherwise the others are stopped
            if (left > 0 && !g_signalled) {
                char how[96];
                describe(how, sizeof how, st);
                fprintf(stderr, "t5train: error: rank %d %s; stopping the other %d rank%s\n", r, how, left,
                        left > 1 ? "s" : "");
                forward(SIGTERM);
                kill_at = now_s() + grace;
            }
        }
    }
    g_nkids = 0;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    return result;
}

static int flag_value(int argc, char** argv, int* i, const char* name, const char** val) {
    size_t n = strlen(name);
    if (strcmp(argv[*i], name) == 0) {
        if (*i + 1 >= argc) return -1;
        *val = argv[++*i];
        return 1;
    }
    if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=') {
        *val = argv[*i] + n + 1;
        return 1;
    }
    return 0;
}

int local_launch_take_flags(int argc, char** argv, LocalLaunchOptions* o, char* err, size_t errlen) {
    memset(o, 0, sizeof *o);
    int out = 0;
    for (int i = 0; i < argc; i++) {
        const char* v = NULL;
        int f;
        long x;
        if ((f = flag_value(argc, argv, &i, "--num_gpus", &v))) {
            if (f < 0 || launch_parse_int(v, 1, MAX_PROCS, &x))
                return t5_set_err(err, errlen, "--num_gpus needs a number of ranks, 1 .. %d (got %s)", MAX_PROCS,
                                  v ? v : "nothing");
            o->nprocs = (int)x;
        } else if ((f = flag_value(argc, argv, &i, "--master_port", &v))) {
            if (f < 0 || launch_parse_int(v, 1, 65535, &x))
                return t5_set_err(err, errlen, "--master_port needs a TCP port, 1 .. 65535 (got %s)", v ? v : "nothing");
            o->master_port = (int)x;
        } else {
            argv[out++] = argv[i];
        }
    }
    if (o->master_port && !o->nprocs)
        return t5_set_err(err, errlen, "--master_port is the port of the ranks --num_gpus starts: give --num_gpus too");
    argv[out] = NULL;
    return out;
}
