/*
 * push_cmd.c: `t5train push FOLDER --hub_model_id ID`: a folder to a Hub model repo (src/upload/), as the end of a
 * --push_to_hub run does: the repo created if needed (exist_ok), then one commit of the folder's files less "_*" and
 * "checkpoint-*" (HF's Trainer's ignore patterns; --all keeps them). What a failed --push_to_hub run tells the user to
 * run, once the network or the token is fixed: what the Hub holds already is not sent again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "../download/hub.h"
#include "../upload/hub_push.h"
#include "commands.h"

static void usage(FILE* f) {
    fprintf(f,
            "usage: t5train push FOLDER --hub_model_id NAME|ORG/NAME [--hub_token TOKEN] [--hub_private_repo]\n"
            "                    [--hub_revision BRANCH] [--commit_message TEXT] [--path_in_repo DIR] [--all]\n"
            "  token: --hub_token, else HF_TOKEN, else the token file of `hf auth login`; HF_ENDPOINT: the Hub\n"
            "  --all: also the checkpoint-* folders and _* files (left out by default, as HF's Trainer does)\n");
}

int push_main(int argc, char** argv) {
    const char *folder = NULL, *repo = NULL, *token = NULL, *revision = NULL, *prefix = NULL;
    const char* message = "Upload folder using t5train";
    bool private_repo = false, all = false;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return T5_EXIT_OK;
        } else if (!strcmp(a, "--hub_private_repo")) private_repo = true;
        else if (!strcmp(a, "--all")) all = true;
        else if (!strcmp(a, "--hub_model_id") && has_val) repo = argv[++i];
        else if (!strcmp(a, "--hub_token") && has_val) token = argv[++i];
        else if (!strcmp(a, "--hub_revision") && has_val) revision = argv[++i];
        else if (!strcmp(a, "--commit_message") && has_val) message = argv[++i];
        else if (!strcmp(a, "--path_in_repo") && has_val) prefix = argv[++i];
        else if (a[0] != '-' && !folder) folder = a;
        else {
            static const char* const WITH_VALUE[] = {"--hub_model_id", "--hub_token", "--hub_revision",
                                                     "--commit_message", "--path_in_repo", NULL};
            bool known = false;
            for (const char* const* w = WITH_VALUE; *w; w++) known = known || !strcmp(a, *w);
            usage(stderr);
            t5_die(T5_EXIT_USAGE, "push: %s '%s'", known ? "missing value for" : a[0] == '-' ? "unknown flag"
                                                                                          : "unexpected argument", a);
        }
    }
    if (!folder || !repo) {
        usage(stderr);
        t5_die(T5_EXIT_USAGE, "push: %s", !folder ? "the folder to push is missing" : "--hub_model_id is missing");
    }
    static const char* const TRAINER_IGNORE[] = {"_*", "checkpoint-*", NULL};
    char err[2048], id[512];
    HubPushOptions o = {.token = token, .revision = revision, .quiet = false};
    PushList l = {0};
    if (push_list_add_folder(&l, folder, prefix, all ? NULL : TRAINER_IGNORE, err, sizeof err))
        t5_die(T5_EXIT_USAGE, "push: %s", err);
    if (l.n == 0) t5_die(T5_EXIT_USAGE, "push: %s has no file to push", folder);
    // offline or no token: a configuration error (exit 2, as a run's --push_to_hub pre-flight), before any request
    if (hub_offline_from_env()) t5_die(T5_EXIT_USAGE, "push: HF_HUB_OFFLINE is set (unset it to push to the Hub)");
    char* tok = token && *token ? NULL : hub_token_read();
    if (!(token && *token) && !tok)
        t5_die(T5_EXIT_USAGE, "push: pushing to the Hub needs a token with write access: pass --hub_token, set "
               "HF_TOKEN, or log in once with `hf auth login` (it writes ~/.cache/huggingface/token)");
    free(tok);
    if (hub_push_create_repo(&o, repo, private_repo, id, sizeof id, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "push: %s", err);
    PushResult r;
    if (hub_push_files(&o, id, &l, message, &r, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "push: %s", err);
    push_list_free(&l);
    if (!r.committed)
        printf("push: %s: no file changed since the last commit (%d files on the Hub already): nothing committed\n", id,
               r.n_unchanged);
    else
        printf("push: %s: commit %s: %d regular + %d LFS files (%d LFS uploaded, %lld bytes; %d unchanged left out)\n",
               id, r.commit_oid, r.n_regular, r.n_lfs, r.n_lfs_uploaded, (long long)r.lfs_bytes_uploaded,
               r.n_unchanged);
    return T5_EXIT_OK;
}
