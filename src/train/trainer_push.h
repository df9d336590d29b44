/*
 * trainer_push.h: the trainer's side of --push_to_hub at saves (hub_strategy every_save / checkpoint /
 * all_checkpoints), in the background as HF's Trainer does it (src/upload/push_worker.h). Rank 0 only.
 *
 *   after a save   the job is built on the training thread and handed to the pusher, which is started on the first
 *                  save; while the previous push still runs, this save's push is skipped with one line (HF skips it
 *                  silently); the next push sends everything.
 *   each step      a push that ended is reported: its commit lines, or a warning (never fatal).
 *   rotation       the checkpoint a running push reads is spared by save_total_limit (trainer_push_spared_step);
 *                  the trainer rotates again once the push ended (a folder a push reads is never deleted under it).
 *   end            trainer_push_finish(wait): the pending push is waited for (HF's _finish_current_push, at the end of
 *                  train()), before the trainer loads the best model, deletes checkpoints (save_total_limit 1) and
 *                  writes the final model, README.md and results into output_dir, then pushes "End of training".
 *   stop           trainer_push_finish(abandon) on SIGINT / SIGTERM: the push is cancelled (it ends within about a
 *                  second; the repo keeps its last complete commit) and the process exits promptly; everything is
 *                  saved on disk, `t5train push` sends it later.
 * The step timing leaves the pushes out (they run beside the steps); the summary line gives their total time and the
 * pushes skipped.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "../report/trainer_log.h"
#include "../upload/push_worker.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const PushToHubArgs* args;  // the run's (enabled, strategy)
    PushWorker* w;              // started on the first push (NULL: none yet)
    bool spared;                // a rotation spared a checkpoint for a push: rotate again when it ended
} TrainerPush;

// After checkpoint ckpt_dir of `step` was saved; message is HF's "Training in progress, step N" / "epoch N".
void trainer_push_after_save(TrainerPush* p, TrainerLog* log, const char* output_dir, const char* ckpt_dir,
                             const char* message);
// Reports a push that ended (its lines, or a warning); cheap when none did.
void trainer_push_poll(TrainerPush* p, TrainerLog* log);
// The step of the checkpoint a running push reads (save_total_limit spares it), or -1; notes that it was asked.
int64_t trainer_push_spared_step(TrainerPush* p);
// Waits for (abandon: cancels) the pending push, reports it and the summary, stops the pusher. Returns true when a
// rotation spared a checkpoint meanwhile (the caller rotates again).
bool trainer_push_finish(TrainerPush* p, TrainerLog* log, bool abandon);

#ifdef __cplusplus
}
#endif
