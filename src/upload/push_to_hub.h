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
 *             HF pushes these in the background; here they are synchronous (the step timing leaves them out, as it
 *             leaves out the save). A failed push is a warning; the run goes on and the next push sends everything.
 *   end       once every file is written: output_dir (less "_*", "checkpoint-*"), commit "End of training". A failure
 *             is an error after everything is saved, with the command that pushes the folder later (t5train push).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
} PushToHubArgs;

// The run's pre-flight (no request): the repo name it will use (p->repo_id filled from output_dir when empty), a
// token to send, not offline. 0 with one line in what, or -1 + one sentence in err.
int push_to_hub_check(PushToHubArgs* p, const char* output_dir, char* what, size_t whatlen, char* err, size_t errlen);
// The repo created (or found) at the start of the run; p->repo_id becomes its full id. 0, or -1 + err.
int push_to_hub_init(PushToHubArgs* p, const char* output_dir, char* err, size_t errlen);
// After checkpoint ckpt_dir was saved (every strategy but end); message is HF's "Training in progress, step N".
int push_to_hub_save(const PushToHubArgs* p, const char* output_dir, const char* ckpt_dir, const char* message,
                     char* err, size_t errlen);
// At the end of the run, every file written: output_dir, "End of training".
int push_to_hub_end(const PushToHubArgs* p, const char* output_dir, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
