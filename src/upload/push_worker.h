/*
 * push_worker.h: the training run's one background pusher (HF's Trainer: upload_folder(..., run_as_future=True) and
 * its PushInProgress), a pthread owned by the trainer's rank 0.
 *
 *   submit   the caller (the training thread) builds the job (push_to_hub_save_job: the file lists, readdir + stat)
 *            and hands it over; it returns at once. While a job runs, a new one is skipped (HF's
 *            _push_from_checkpoint returns when push_in_progress is not done): PUSH_WORKER_SKIPPED, nothing built;
 *            the next push sends everything.
 *   take     a finished job's outcome, once: its report lines or its error (a failed push is the caller's warning,
 *            never fatal). The worker prints nothing itself: the caller logs on its own thread, between its lines.
 *   wait     until the running job ends (HF's _finish_current_push, before the end-of-training writes).
 *   cancel   the running job stops within about a second (its transfers aborted, its hashing stopped; the commit is
 *            its last request, so the repo keeps its last complete commit): a stop request abandons the push.
 *   destroy  waits for the running job (cancel first to abandon it), then joins the thread.
 *
 * Threads: libcurl gets a new easy handle per request (src/download/http.c) and was initialised once
 * (pthread_once, dynlib.h); the hash buffers are per thread. The worker blocks SIGINT / SIGTERM / SIGPIPE, so the
 * trainer's stop handler runs on the training thread and a closed connection is an error, not a signal.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "push_to_hub.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PushWorker PushWorker;

enum { PUSH_WORKER_QUEUED = 0, PUSH_WORKER_SKIPPED = 1 };

typedef struct {
    bool ok;
    bool cancelled;       // push_worker_cancel stopped it (then !ok)
    char message[256];    // the job's commit message ("Training in progress, step N")
    char ckpt_dir[4096];  // the checkpoint it pushed
    char lines[2048];     // ok: the commits' report lines ('\n'-separated)
    char err[2048];       // !ok: why it failed (one sentence)
    double seconds;       // how long it ran
} PushOutcome;

typedef struct {
    int queued, skipped, succeeded, failed;
    double busy_s;  // seconds the worker spent pushing
} PushWorkerStats;

// Starts the thread (p is copied). NULL + err when it cannot be started.
PushWorker* push_worker_create(const PushToHubArgs* p, char* err, size_t errlen);
// PUSH_WORKER_QUEUED, PUSH_WORKER_SKIPPED (a job still runs), or -1 + err (the job could not be built).
int push_worker_submit(PushWorker* w, const char* output_dir, const char* ckpt_dir, const char* message, char* err,
                       size_t errlen);
// A job runs (it becomes true only by submit; false by the worker when the job ends).
bool push_worker_busy(PushWorker* w);
// The checkpoint the running job reads into dir (false: none runs; it may end at any time after).
bool push_worker_running_ckpt(PushWorker* w, char* dir, size_t len);
// true once per finished job, with its outcome in *o.
bool push_worker_take(PushWorker* w, PushOutcome* o);
void push_worker_wait(PushWorker* w);
void push_worker_cancel(PushWorker* w);
void push_worker_stats(PushWorker* w, PushWorkerStats* s);
// Waits for the running job (push_worker_cancel first to abandon it), joins the thread, frees w (NULL: nothing).
void push_worker_destroy(PushWorker* w);

#ifdef __cplusplus
}
#endif
