/*
 * push_worker.c: the background pusher (see push_worker.h). One job slot: the worker sleeps on `cv` until a job
 * is put there or it is told to quit; the caller waits on the same condition for the job's end.
 */
#include "push_worker.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/common.h"

struct PushWorker {
    PushToHubArgs args;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool has_job;            // job is set: the worker runs it (busy from submit until its end)
    bool quit;
    volatile int cancel;     // read by the transfers and hashes of the running job
    PushSaveJob job;
    bool has_outcome;        // a finished job's outcome not taken yet
    PushOutcome outcome;
    PushWorkerStats stats;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// one job, outside the lock (the caller only reads has_job / the outcome under it)
static void run_one(PushWorker* w) {
    PushOutcome o;
    memset(&o, 0, sizeof o);
    snprintf(o.message, sizeof o.message, "%s", w->job.message);
    snprintf(o.ckpt_dir, sizeof o.ckpt_dir, "%s", w->job.ckpt_dir);
    const double t0 = now_s();
    o.ok = push_to_hub_run_job(&w->args, &w->job, &w->cancel, o.lines, sizeof o.lines, o.err, sizeof o.err) == 0;
    o.seconds = now_s() - t0;
    o.cancelled = !o.ok && w->cancel;
    push_to_hub_job_free(&w->job);
    pthread_mutex_lock(&w->mu);
    w->outcome = o;
    w->has_outcome = true;
    w->stats.busy_s += o.seconds;
    if (o.ok) w->stats.succeeded++;
    else w->stats.failed++;
    w->has_job = false;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void* worker_main(void* arg) {
    PushWorker* w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->has_job && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->has_job) break;  // quit, nothing left to push
        pthread_mutex_unlock(&w->mu);
        run_one(w);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

PushWorker* push_worker_create(const PushToHubArgs* p, char* err, size_t errlen) {
    PushWorker* w = calloc_check(1, sizeof *w);
    w->args = *p;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    // the thread starts with these blocked (it inherits the mask): SIGINT / SIGTERM reach the training thread's
    // handler, SIGPIPE of a closed connection becomes EPIPE
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    const int rc = pthread_create(&w->thread, NULL, worker_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        t5_set_err(err, errlen, "cannot start the background pusher thread: %s", strerror(rc));
        return NULL;
    }
    return w;
}

int push_worker_submit(PushWorker* w, const char* output_dir, const char* ckpt_dir, const char* message, char* err,
                       size_t errlen) {
    pthread_mutex_lock(&w->mu);
    const bool busy = w->has_job;
    if (busy) w->stats.skipped++;
    pthread_mutex_unlock(&w->mu);
    if (busy) return PUSH_WORKER_SKIPPED;
    // built here, on the caller's thread (only the caller sets has_job: the slot stays free meanwhile)
    PushSaveJob j;
    if (push_to_hub_save_job(&w->args, output_dir, ckpt_dir, message, &j, err, errlen)) return -1;
    pthread_mutex_lock(&w->mu);
    w->job = j;
    w->cancel = 0;
    w->has_job = true;
    w->stats.queued++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return PUSH_WORKER_QUEUED;
}

bool push_worker_busy(PushWorker* w) {
    pthread_mutex_lock(&w->mu);
    const bool b = w->has_job;
    pthread_mutex_unlock(&w->mu);
    return b;
}

bool push_worker_running_ckpt(PushWorker* w, char* dir, size_t len) {
    pthread_mutex_lock(&w->mu);
    const bool b = w->has_job;
    if (b) snprintf(dir, len, "%s", w->job.ckpt_dir);  // (job.ckpt_dir is not touched until the job ends)
    pthread_mutex_unlock(&w->mu);
    return b;
}

bool push_worker_take(PushWorker* w, PushOutcome* o) {
    pthread_mutex_lock(&w->mu);
    const bool got = w->has_outcome;
    if (got) *o = w->outcome;
    w->has_outcome = false;
    pthread_mutex_unlock(&w->mu);
    return got;
}

void push_worker_wait(PushWorker* w) {
    pthread_mutex_lock(&w->mu);
    while (w->has_job) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

void push_worker_cancel(PushWorker* w) {
    pthread_mutex_lock(&w->mu);
    if (w->has_job) w->cancel = 1;
    pthread_mutex_unlock(&w->mu);
}

void push_worker_stats(PushWorker* w, PushWorkerStats* s) {
    pthread_mutex_lock(&w->mu);
    *s = w->stats;
    pthread_mutex_unlock(&w->mu);
}

void push_worker_destroy(PushWorker* w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);  // the running job ends first (the worker leaves its loop only when idle)
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
