/*
 * push_to_hub.h: HF Trainer's --push_to_hub for a training run (transformers' Trainer.init_hf_repo, push_to_hub and
 * _push_from_checkpoint), over hub_push.h:
 *
 *   start     the repo is created (exist_ok; --hub_private_repo) as hub_model_id, else the output_dir's name under the
 *             token's user; its full id is what later pushes use. No token, offline or an unreachable Hub stop the
 *             run here, before anything is trained.
 *   each save (hub_strategy every_save, checkpoint, all_checkpoints; not end): the output_dir's files (less "_*" and
 *             "checkpoint-*") with the model files of the checkpoint just saved in their place (config.json,
 *             generation_config.json, model.safetensors or its index and shards, the tokenizer files), as HF copies
 *             them into output_dir first: one commit "Training in progress, step N" ("epoch N" with save_strategy
 *             epoch). checkpoint: the checkpoint folder too, as last-checkpoint/ (all_checkpoints: as checkpoint-N/),
 *             in a second commit "..., checkpoint".
 *             The trainer runs these in the background, as HF does (upload_folder(..., run_as_future=True)): it builds
 *             the job on its own thread (push_to_hub_save_job: the file lists, nothing copied) and hands it to its one
 *             pusher thread (push_worker.h), which only reads the files; a save that comes while a push still runs
 *             pushes nothing (HF's _push_from_checkpoint skips it; t5train says so in one line), the next push sends
 *             everything. A failed push is a warning; the run goes on. push_to_hub_save is the same push, synchronous.
 *   end       once every file is written: output_dir (less "_*", "checkpoint-*"), commit "End of training". A failure
 *             is an error after everything is saved, with the command that pushes the folder later (t5train push).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "push_files.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    HUB_STRATEGY_END = 0,
    HUB_STRATEGY_EVERY_SAVE,
    HUB_STRATEGY_CHECKPOINT,
    HUB_STRATEGY_ALL_CHECKPOINTS,
} HubStrategy;  // "end|every_save|checkpoint|all_checkpoints" (HF's HubStrategy)

typedef struct {
    bool enabled;          // --push_to_hub
    char repo_id[512];     // --hub_model_id ("": the output_dir's name); after push_to_hub_init: the Hub's full id
    char token[512];       // --hub_token ("": HF_TOKEN, else the token file)
    char revision[256];    // --hub_revision ("": main)
    bool private_repo;     // --hub_private_repo
    int strategy;          // HubStrategy
    bool always_push;      // --hub_always_push: a save whose previous push still runs waits for it (trainer_push.h)
} PushToHubArgs;

// The run's pre-flight (no request): the repo name it will use (p->repo_id filled from output_dir when empty), a
// token to send, not offline. 0 with one line in what, or -1 + one sentence in err.
int push_to_hub_check(PushToHubArgs* p, const char* output_dir, char* what, size_t whatlen, char* err, size_t errlen);
// The repo created (or found) at the start of the run; p->repo_id becomes its full id. 0, or -1 + err.
int push_to_hub_init(PushToHubArgs* p, const char* output_dir, char* err, size_t errlen);
// One save's push: output_dir's files with ckpt_dir's model files in their place (commit `message`), and for hub_strategy
// checkpoint / all_checkpoints the checkpoint folder (commit "<message>, checkpoint"). The lists are made when the job
// is (readdir + stat); each file is sent as it was then (its first `size` bytes: push_files.h).
typedef struct {
    PushList model;      // output_dir's files with the checkpoint's model files in their place
    PushList ckpt;       // the checkpoint's files under last-checkpoint/ or checkpoint-N/ (empty with every_save)
    char message[256];   // "Training in progress, step N"
    char ckpt_dir[4096]; // the checkpoint it reads
} PushSaveJob;
// 0 with *j to run and free, or -1 + err (a folder could not be listed; nothing to free).
int push_to_hub_save_job(const PushToHubArgs* p, const char* output_dir, const char* ckpt_dir, const char* message,
                         PushSaveJob* j, char* err, size_t errlen);
// Pushes j (its two commits in turn; the second is not tried when the first failed). cancel (NULL: none): once
// *cancel turns non-zero the push stops within about a second and fails ("cancelled"); a cancellable push is quiet
// (no progress bar). lines: the commits' report lines ('\n'-separated), for the caller to print. 0, or -1 + err.
int push_to_hub_run_job(const PushToHubArgs* p, PushSaveJob* j, const volatile int* cancel, char* lines,
                        size_t linelen, char* err, size_t errlen);
void push_to_hub_job_free(PushSaveJob* j);
// After checkpoint ckpt_dir was saved (every strategy but end); message is HF's "Training in progress, step N".
// The synchronous push (job made, run, its lines printed).
int push_to_hub_save(const PushToHubArgs* p, const char* output_dir, const char* ckpt_dir, const char* message,
                     char* err, size_t errlen);
// At the end of the run, every file written: output_dir, "End of training".
int push_to_hub_end(const PushToHubArgs* p, const char* output_dir, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
