/*
 * download_util.h: helpers shared by the test_download_*.c programs (static, one copy per program):
 * start / stop the loopback Hub server (test/hub_server.py), count its logged requests, write fixture
 * files and fault rules.
 */
#pragma once
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "t5test.h"

typedef struct {
    pid_t pid;
    int port;
    char root[512];    // served folder (paths below are derived from it)
    char log[512];     // request log
    char faults[512];  // fault rules (JSON list)
    char record[512];  // push calls, JSON lines (hub_server.py --record)
    char endpoint[128];
} HubServer;

static __attribute__((unused)) void dl_mkdirs(const char* path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char* p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

// writes n bytes of deterministic pseudo-random data (seeded) to root/rel, creating folders
static __attribute__((unused)) void dl_write_bytes(const char* root, const char* rel, size_t n, unsigned seed) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    char* slash = strrchr(p, '/');
    *slash = 0;
    dl_mkdirs(p);
    *slash = '/';
    FILE* f = fopen(p, "wb");
    if (!f) fail_msg("cannot write %s", p);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        fputc((int)(x & 0xff), f);
    }
    fclose(f);
}

static __attribute__((unused)) void dl_write_text(const char* root, const char* rel, const char* text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    char* slash = strrchr(p, '/');
    *slash = 0;
    dl_mkdirs(p);
    *slash = '/';
    t5test_write_file(p, text);
}

// starts python3 test/hub_server.py on a free port with these further arguments (NULL-terminated list, or NULL);
// fails the test when it does not come up in 10 s
static __attribute__((unused)) void hub_server_start_ex(HubServer* s, const char* root, const char* const* extra) {
    memset(s, 0, sizeof *s);
    snprintf(s->root, sizeof s->root, "%s", root);
    snprintf(s->log, sizeof s->log, "%.500s.log", root);
    snprintf(s->faults, sizeof s->faults, "%.490s.faults.json", root);
    snprintf(s->record, sizeof s->record, "%.490s.record.jsonl", root);
    char portfile[600], script[600];
    snprintf(portfile, sizeof portfile, "%s.port", root);
    snprintf(script, sizeof script, "%s/test/hub_server.py", t5test_repo_dir());
    unlink(portfile);
    pid_t pid = fork();
    if (pid == 0) {
        const char* argv[32] = {"python3", script, "--root", root, "--port-file", portfile, "--log", s->log,
                                "--faults", s->faults, "--record", s->record};
        int n = 12;
        for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
        argv[n] = NULL;
        execvp("python3", (char* const*)argv);
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < 200; i++) {
        FILE* f = fopen(portfile, "r");
        if (f) {
            if (fscanf(f, "%d", &s->port) != 1) s->port = 0;
            fclose(f);
            if (s->port > 0) break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (s->port <= 0) fail_msg("the loopback Hub server did not start (python3 %s)", script);
    snprintf(s->endpoint, sizeof s->endpoint, "http://127.0.0.1:%d", s->port);
}

static __attribute__((unused)) void hub_server_start(HubServer* s, const char* root) {
    hub_server_start_ex(s, root, NULL);
}

// The process talks to this server only, with no token and no HF cache of the user's: HF_ENDPOINT, short retries,
// the token and offline variables unset, HOME in the test's folder (no token file there).
static __attribute__((unused)) void hub_server_env(const HubServer* s) {
    setenv("HF_ENDPOINT", s->endpoint, 1);
    setenv("T5TRAIN_HTTP_RETRY_BASE_S", "0.01", 1);
    static const char* const unset[] = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
                                        "TRANSFORMERS_OFFLINE", "HF_HOME"};
    for (size_t i = 0; i < sizeof unset / sizeof *unset; i++) unsetenv(unset[i]);
    setenv("HOME", t5test_tmpdir(), 1);
}

static __attribute__((unused)) void hub_server_stop(HubServer* s) {
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

static __attribute__((unused)) void hub_server_faults(HubServer* s, const char* json) {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", s->faults);
    t5test_write_file(tmp, json);
    rename(tmp, s->faults);
    // the server re-reads the rules when the file's mtime changes: make it differ even within one tick
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

// the server logs a request after answering it: wait until the log has not grown for 150 ms (at most 2 s), so
// that the last request of the step before is not logged after the clear
static __attribute__((unused)) void hub_server_clear_log(HubServer* s) {
    off_t last = -1;
    int still = 0;
    for (int i = 0; i < 80 && still < 3; i++) {
        struct stat st;
        off_t now = stat(s->log, &st) == 0 ? st.st_size : 0;
        still = now == last ? still + 1 : 0;
        last = now;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    unlink(s->log);
}

// number of logged requests whose line contains every one of the given substrings (NULL-terminated)
static __attribute__((unused)) int hub_server_count(HubServer* s, const char* a, const char* b) {
    FILE* f = fopen(s->log, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if ((!a || strstr(line, a)) && (!b || strstr(line, b))) n++;
    fclose(f);
    return n;
}

// the server logs a request after answering it: poll (up to 2 s) until `want` lines match, return the count
static __attribute__((unused)) int hub_server_wait_count(HubServer* s, const char* a, const char* b, int want) {
    int n = 0;
    for (int i = 0; i < 40; i++) {
        n = hub_server_count(s, a, b);
        if (n == want) break;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return n;
}

// bytes sent by the last logged request containing `a`, -1 if none
static __attribute__((unused)) long hub_server_last_bytes(HubServer* s, const char* a) {
    FILE* f = fopen(s->log, "r");
    if (!f) return -1;
    char line[4096];
    long bytes = -1;
    while (fgets(line, sizeof line, f))
        if (strstr(line, a)) {
            char* sp = strrchr(line, ' ');
            bytes = sp ? atol(sp + 1) : -1;
        }
    fclose(f);
    return bytes;
}
