/*
 * trainer_push.c: the trainer's background pushes at saves (see trainer_push.h).
 */
#include "trainer_push.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "checkpoint.h"

static void report(TrainerLog* log, const PushOutcome* o) {
    if (o->ok) {
        // one line per commit, then how long the push ran beside the training
        char* copy = strdup_check(o->lines);
        char* save = NULL;
        for (char* s = strtok_r(copy, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) trainer_log_line(log, s);
        free(copy);
        char line[512];
        snprintf(line, sizeof line, "push_to_hub: \"%s\" pushed in the background in %.1f s", o->message, o->seconds);
        trainer_log_line(log, line);
    } else if (o->cancelled) {
        t5_warn("push_to_hub: the push \"%s\" was abandoned: %s is saved; push output_dir later with `t5train push`",
                o->message, o->ckpt_dir);
    } else {
        t5_warn("push_to_hub: the push \"%s\" failed: %s; %s is saved, training goes on and the next push sends "
                "everything", o->message, o->err, o->ckpt_dir);
    }
}

void trainer_push_poll(TrainerPush* p, TrainerLog* log) {
    PushOutcome o;
    if (p->w && push_worker_take(p->w, &o)) report(log, &o);
}

void trainer_push_after_save(TrainerPush* p, TrainerLog* log, const char* output_dir, const char* ckpt_dir,
                             const char* message) {
    static char err[2048];
    if (!p->args->enabled || p->args->strategy == HUB_STRATEGY_END) return;
    if (!p->w && !(p->w = push_worker_create(p->args, err, sizeof err))) {
        t5_warn("push_to_hub: %s; %s is saved, not pushed", err, ckpt_dir);
        return;
    }
    trainer_push_poll(p, log);
    char running[4096] = "the previous save";
    // (only this thread makes the pusher busy: once seen idle, it stays idle until the submit below)
    if (push_worker_running_ckpt(p->w, running, sizeof running) && p->args->always_push) {
        // --hub_always_push: no push skipped. HF queues it behind the running one without waiting; here the save
        // waits (out of the step timing), so that no queued job reads a checkpoint the rotation may delete
        char line[4400];
        snprintf(line, sizeof line, "push_to_hub: waiting for the push of %s to end (hub_always_push)", running);
        trainer_log_line(log, line);
        push_worker_wait(p->w);
        trainer_push_poll(p, log);
    }
    const int rc = push_worker_submit(p->w, output_dir, ckpt_dir, message, err, sizeof err);
    if (rc == PUSH_WORKER_SKIPPED) {
        char line[8400];
        snprintf(line, sizeof line, "push_to_hub: the push of %s is still running: \"%s\" is not pushed (as HF's "
                 "Trainer, the next push sends everything)", running, message);
        trainer_log_line(log, line);
    } else if (rc < 0) {
        t5_warn("push_to_hub: %s; %s is saved, training goes on and the next push sends everything", err, ckpt_dir);
    }
}

int64_t trainer_push_spared_step(TrainerPush* p) {
    char dir[4096];
    if (!p->w || !push_worker_running_ckpt(p->w, dir, sizeof dir)) return -1;
    const char* base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    const int64_t step = checkpoint_parse_name(base);
    if (step >= 0) p->spared = true;
    return step;
}

bool trainer_push_finish(TrainerPush* p, TrainerLog* log, bool abandon) {
    if (!p->w) return false;
    if (push_worker_busy(p->w)) {
        trainer_log_line(log, abandon ? "push_to_hub: stopping: the push in progress is abandoned (the Hub keeps its "
                                        "last complete commit; everything is saved in output_dir)"
                                      : "push_to_hub: waiting for the current checkpoint push to be finished, this "
                                        "might take a couple of minutes.");
        if (abandon) push_worker_cancel(p->w);
        push_worker_wait(p->w);
    }
    trainer_push_poll(p, log);
    PushWorkerStats s;
    push_worker_stats(p->w, &s);
    char line[512];
    snprintf(line, sizeof line, "push_to_hub: pushes at saves: %d started, %d done, %d failed, %d skipped while one "
             "was running; %.1f s of pushing in the background", s.queued, s.succeeded, s.failed, s.skipped,
             s.busy_s);
    trainer_log_line(log, line);
    push_worker_destroy(p->w);
    p->w = NULL;
    const bool spared = p->spared;
    p->spared = false;
    return spared;
}
