/*
 * push_to_hub.c: the training run's pushes (see push_to_hub.h).
 */
#include "push_to_hub.h"

#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/common.h"
#include "../download/http.h"
#include "../download/hub.h"
#include "hub_push.h"

// HF's Trainer: upload_folder(..., ignore_patterns=["_*", "checkpoint-*"]) for the output folder
static const char* const OUTPUT_IGNORE[] = {"_*", "checkpoint-*", NULL};
// the model files HF copies from the checkpoint into output_dir before a push at a save
static const char* const MODEL_FILES[] = {"config.json", "generation_config.json", "model.safetensors",
                                          "model.safetensors.index.json", "spiece.model", "tokenizer.json",
                                          "tokenizer_config.json", "special_tokens_map.json", NULL};

static const char* const STRATEGY_NAMES[] = {"end", "every_save", "checkpoint", "all_checkpoints"};

static void options(const PushToHubArgs* p, HubPushOptions* o) {
    memset(o, 0, sizeof *o);
    o->quiet = !t5_log_info();
    o->token = p->token;
    o->revision = p->revision[0] ? p->revision : NULL;
}

// HF: Path(output_dir).absolute().name (the folder need not exist yet; no symlink is resolved)
static void default_repo(PushToHubArgs* p, const char* output_dir) {
    if (p->repo_id[0]) return;
    char cwd[4096] = "";
    if (output_dir[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    size_t n = strlen(cwd) + strlen(output_dir) + 2;
    char* abs = malloc_check(n);
    snprintf(abs, n, "%s%s%s", cwd, cwd[0] ? "/" : "", output_dir);
    n = strlen(abs);
    // pathlib drops "." components: "out/." and "." (the cwd) are named as out and the cwd
    while (n > 1 && (abs[n - 1] == '/' || (abs[n - 1] == '.' && abs[n - 2] == '/'))) abs[--n] = 0;
    snprintf(p->repo_id, sizeof p->repo_id, "%s", basename(abs));
    free(abs);
}

int push_to_hub_check(PushToHubArgs* p, const char* output_dir, char* what, size_t whatlen, char* err, size_t errlen) {
    default_repo(p, output_dir);
    if (hub_offline_from_env())
        return t5_set_err(err, errlen, "--push_to_hub: HF_HUB_OFFLINE is set; unset it to push, or drop --push_to_hub");
    char* tok = p->token[0] ? NULL : hub_token_read();
    if (!p->token[0] && !tok)
        return t5_set_err(err, errlen, "--push_to_hub needs a token with write access: pass --hub_token, set HF_TOKEN, "
                          "or log in once with `hf auth login` (it writes ~/.cache/huggingface/token)");
    free(tok);
    char ep[1024];
    hub_endpoint(NULL, ep, sizeof ep);
    snprintf(what, whatlen, "push_to_hub: repo %s on %s (created when the run starts), hub_strategy %s, token from %s",
             p->repo_id, ep, STRATEGY_NAMES[p->strategy], p->token[0] ? "--hub_token" : "HF_TOKEN / the token file");
    return 0;
}

int push_to_hub_init(PushToHubArgs* p, const char* output_dir, char* err, size_t errlen) {
    default_repo(p, output_dir);
    HubPushOptions o;
    options(p, &o);
    char id[512];
    if (hub_push_create_repo(&o, p->repo_id, p->private_repo, id, sizeof id, err, errlen)) return -1;
    snprintf(p->repo_id, sizeof p->repo_id, "%s", id);
    if (t5_log_info()) {
        printf("push_to_hub: repo %s ready%s; hub_strategy %s\n", p->repo_id, p->private_repo ? " (private)" : "",
               STRATEGY_NAMES[p->strategy]);
        fflush(stdout);
    }
    return 0;
}

// the line of one push (what it committed, or that nothing changed)
static void report_line(const char* repo_id, const char* message, const PushResult* r, char* line, size_t len) {
    char b[32];
    if (!r->committed)
        snprintf(line, len, "push_to_hub: %s: no file changed since the last commit (%d files on the Hub already): "
                 "nothing committed", repo_id, r->n_unchanged);
    else
        snprintf(line, len, "push_to_hub: %s: commit %.12s \"%s\": %d regular + %d LFS files (%d LFS uploaded, %s; "
                 "%d unchanged left out)", repo_id, r->commit_oid, message, r->n_regular, r->n_lfs, r->n_lfs_uploaded,
                 http_format_bytes((double)r->lfs_bytes_uploaded, b, sizeof b), r->n_unchanged);
}

// one commit of l; its line appended to lines (when given)
static int push_list(const PushToHubArgs* p, PushList* l, const char* message, const volatile int* cancel,
                     char* lines, size_t linelen, char* err, size_t errlen) {
    HubPushOptions o;
    options(p, &o);
    o.cancel = cancel;
    if (cancel) o.quiet = true;  // a background push prints no progress bar over the training's
    PushResult r;
    if (hub_push_files(&o, p->repo_id, l, message, &r, err, errlen)) return -1;
    if (lines && linelen) {
        const size_t used = strlen(lines);
        if (used && used + 1 < linelen) lines[used] = '\n', lines[used + 1] = 0;
        const size_t at = strlen(lines);
        if (at < linelen) report_line(p->repo_id, message, &r, lines + at, linelen - at);
    }
    return 0;
}

// the checkpoint's model files in place of output_dir's: the index's shards with it
static int add_model_files(PushList* l, const char* ckpt_dir, char* err, size_t errlen) {
    for (const char* const* m = MODEL_FILES; *m; m++) {
        char* src = t5_path_join(ckpt_dir, *m);
        int rc = t5_is_file(src) ? push_list_add(l, src, *m, err, errlen) : 0;
        free(src);
        if (rc) return -1;
    }
    char* idx = t5_path_join(ckpt_dir, "model.safetensors.index.json");
    json_error_t je;
    json_t* j = t5_is_file(idx) ? json_load_file(idx, 0, &je) : NULL;
    free(idx);
    const json_t* wm = j ? json_object_get(j, "weight_map") : NULL;
    const char* k;
    const json_t* v;
    int rc = 0;
    json_object_foreach((json_t*)wm, k, v) {
        if (rc || !json_is_string(v)) continue;
        char* src = t5_path_join(ckpt_dir, json_string_value(v));
        rc = push_list_add(l, src, json_string_value(v), err, errlen);
        free(src);
    }
    json_decref(j);
    return rc;
}

int push_to_hub_save_job(const PushToHubArgs* p, const char* output_dir, const char* ckpt_dir, const char* message,
                         PushSaveJob* j, char* err, size_t errlen) {
    memset(j, 0, sizeof *j);
    snprintf(j->message, sizeof j->message, "%s", message);
    snprintf(j->ckpt_dir, sizeof j->ckpt_dir, "%s", ckpt_dir);
    int rc = push_list_add_folder(&j->model, output_dir, NULL, OUTPUT_IGNORE, err, errlen);
    if (rc == 0) rc = add_model_files(&j->model, ckpt_dir, err, errlen);
    if (rc == 0 && (p->strategy == HUB_STRATEGY_CHECKPOINT || p->strategy == HUB_STRATEGY_ALL_CHECKPOINTS)) {
        // the checkpoint itself: last-checkpoint/ (HF resumes from it), or checkpoint-N/ with all_checkpoints
        char* copy = strdup_check(ckpt_dir);
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%s", p->strategy == HUB_STRATEGY_CHECKPOINT ? "last-checkpoint" : basename(copy));
        free(copy);
        rc = push_list_add_folder(&j->ckpt, ckpt_dir, prefix, NULL, err, errlen);
    }
    if (rc) push_to_hub_job_free(j);
    return rc;
}

int push_to_hub_run_job(const PushToHubArgs* p, PushSaveJob* j, const volatile int* cancel, char* lines,
                        size_t linelen, char* err, size_t errlen) {
    if (lines && linelen) lines[0] = 0;
    if (push_list(p, &j->model, j->message, cancel, lines, linelen, err, errlen)) return -1;
    if (j->ckpt.n == 0) return 0;
    char msg2[600];
    snprintf(msg2, sizeof msg2, "%s, checkpoint", j->message);
    return push_list(p, &j->ckpt, msg2, cancel, lines, linelen, err, errlen);
}

void push_to_hub_job_free(PushSaveJob* j) {
    push_list_free(&j->model);
    push_list_free(&j->ckpt);
}

int push_to_hub_save(const PushToHubArgs* p, const char* output_dir, const char* ckpt_dir, const char* message,
                     char* err, size_t errlen) {
    if (!p->enabled || p->strategy == HUB_STRATEGY_END) return 0;
    PushSaveJob j;
    if (push_to_hub_save_job(p, output_dir, ckpt_dir, message, &j, err, errlen)) return -1;
    char lines[2048];
    int rc = push_to_hub_run_job(p, &j, NULL, lines, sizeof lines, err, errlen);
    push_to_hub_job_free(&j);
    if (t5_log_info() && lines[0]) {
        printf("%s\n", lines);
        fflush(stdout);
    }
    return rc;
}

int push_to_hub_end(const PushToHubArgs* p, const char* output_dir, char* err, size_t errlen) {
    if (!p->enabled) return 0;
    PushList l = {0};
    char line[1024] = "";
    int rc = push_list_add_folder(&l, output_dir, NULL, OUTPUT_IGNORE, err, errlen);
    if (rc == 0) rc = push_list(p, &l, "End of training", NULL, line, sizeof line, err, errlen);
    push_list_free(&l);
    if (t5_log_info() && line[0]) {
        printf("%s\n", line);
        fflush(stdout);
    }
    return rc;
}
