/*
 * test_hub_push.c: --push_to_hub against the loopback Hub (test/hub_server.py, which speaks huggingface_hub's upload
 * protocol: repo creation, preupload, LFS batch / upload / multipart / verify, NDJSON commit; it was checked by hand
 * against huggingface_hub 1.33's own upload_folder). What arrives: the files byte for byte, LFS for the safetensors
 * (and the other .gitattributes patterns and files above the LFS threshold), multipart above its threshold, no token
 * sent to the storage URLs, the "_*" / "checkpoint-*" files left out, the private flag; a push whose commit fails
 * (LFS objects already uploaded) resumed without uploading them again; a push with nothing changed makes no commit;
 * hub_strategy every_save / checkpoint / all_checkpoints / end; the errors (no token, bad token, offline, unreachable,
 * unknown branch) as one sentence; `t5train push` and a run's --push_to_hub from the binary; the background pusher
 * (push_worker.h: a job runs while the caller goes on, a second one is skipped, wait, files that vanish under a push,
 * destroy and cancel while a job runs), made deterministic by the server's "hold" fault, not by timing.
 */
#include <jansson.h>

#include "download_util.h"

#include "../src/base/common.h"
#include "../src/download/sha256.h"
#include "../src/report/model_card.h"
#include "../src/upload/hub_push.h"
#include "../src/upload/push_to_hub.h"
#include "../src/upload/push_worker.h"
#include "../src/train/trainer_push.h"

#include <pthread.h>
#include <time.h>

static HubServer srv;
static char served[512];
#define TOKEN "secret-token"
#define BIG 3000000  // above the server's multipart threshold (1 MB): three parts

static int setup(void** state) {
    (void)state;
    snprintf(served, sizeof served, "%s/served", t5test_tmpdir());
    dl_mkdirs(served);
    static const char* const extra[] = {"--lfs-threshold", "2000000", "--multipart-threshold", "1000000", NULL};
    hub_server_start_ex(&srv, served, extra);
    hub_server_env(&srv);
    return 0;
}

static int teardown(void** state) {
    (void)state;
    hub_server_stop(&srv);
    return 0;
}

// the record's push calls, from line `from` on (JSON objects)
static json_t* record_load(int from) {
    json_t* a = json_array();
    FILE* f = fopen(srv.record, "r");
    if (!f) return a;
    char* line = NULL;
    size_t cap = 0;
    int i = 0;
    while (getline(&line, &cap, f) > 0)
        if (i++ >= from) {
            json_error_t je;
            json_t* o = json_loads(line, 0, &je);
            if (o) json_array_append_new(a, o);
        }
    free(line);
    fclose(f);
    return a;
}

static int record_lines(void) {
    json_t* a = record_load(0);
    int n = (int)json_array_size(a);
    json_decref(a);
    return n;
}

// calls in rec with this method whose path contains `sub`
static int count_calls(const json_t* rec, const char* method, const char* sub) {
    size_t i;
    const json_t* o;
    int n = 0;
    json_array_foreach(rec, i, o) {
        const char* m = json_string_value(json_object_get(o, "method"));
        const char* p = json_string_value(json_object_get(o, "path"));
        if (m && p && strcmp(m, method) == 0 && strstr(p, sub)) n++;
    }
    return n;
}

// the commits in rec (objects with "summary")
static const json_t* nth_commit(const json_t* rec, int k) {
    size_t i;
    const json_t* o;
    json_array_foreach(rec, i, o) if (json_object_get(o, "summary") && k-- == 0) return o;
    return NULL;
}

// the one commit in rec, with this summary (fails the test otherwise)
static const json_t* only_commit(const json_t* rec, const char* summary) {
    const json_t* c = nth_commit(rec, 0);
    if (!c || nth_commit(rec, 1)) fail_msg("want exactly one commit \"%s\"", summary);
    const char* s = json_string_value(json_object_get(c, "summary"));
    if (!s || strcmp(s, summary) != 0) fail_msg("commit \"%s\", want \"%s\"", s ? s : "", summary);
    return c;
}

// the key ("file" / "lfsFile") of path in a commit's operations, NULL when absent
static const char* op_key(const json_t* commit, const char* path) {
    size_t i;
    const json_t* o;
    json_array_foreach(json_object_get(commit, "ops"), i, o) {
        if (strcmp(json_string_value(json_object_get(o, "path")), path) == 0)
            return json_string_value(json_object_get(o, "key"));
    }
    return NULL;
}

static void assert_same_file(const char* a, const char* b) {
    char ha[65], hb[65];
    if (sha256_file_hex(a, ha) != 0) fail_msg("cannot read %s", a);
    if (sha256_file_hex(b, hb) != 0) fail_msg("%s did not arrive", b);
    if (strcmp(ha, hb) != 0) fail_msg("%s differs from %s", b, a);
}

// an output folder as a run leaves it
static void make_output(const char* out) {
    dl_write_text(out, "config.json", "{\"d_model\": 8}");
    dl_write_bytes(out, "model.safetensors", BIG, 7);
    dl_write_bytes(out, "spiece.model", 4000, 8);
    dl_write_text(out, "trainer_state.json", "{\"global_step\": 4}");
    dl_write_text(out, "all_results.json", "{\"train_loss\": 1.5}");
    dl_write_text(out, "empty.txt", "");
    dl_write_bytes(out, "runs/x/events.out.tfevents.1.host", 300, 9);
    dl_write_bytes(out, "big_log.txt", 2500000, 10);  // above the LFS threshold: LFS though text
    dl_write_text(out, "checkpoint-2/config.json", "{}");
    dl_write_text(out, "_private_notes.txt", "not pushed");
}

// the model card the trainer writes at the end of a run (src/report/model_card.h), as a regular (non-LFS) file
static void write_card(const char* out) {
    ModelCardArgs m;
    memset(&m, 0, sizeof m);
    snprintf(m.model_name, sizeof m.model_name, "run-one");
    snprintf(m.finetuned_from, sizeof m.finetuned_from, "t5-small");
    snprintf(m.optim, sizeof m.optim, "adamw_torch");
    snprintf(m.lr_scheduler_type, sizeof m.lr_scheduler_type, "linear");
    m.max_steps = -1;
    json_t* log = json_array();
    char err[1024];
    if (model_card_write(&m, log, out, err, sizeof err)) fail_msg("%s", err);
    json_decref(log);
}

static PushToHubArgs args_for(const char* repo, int strategy) {
    PushToHubArgs p;
    memset(&p, 0, sizeof p);
    p.enabled = true;
    snprintf(p.repo_id, sizeof p.repo_id, "%s", repo);
    snprintf(p.token, sizeof p.token, "%s", TOKEN);
    p.strategy = strategy;
    return p;
}

static void test_push_output_dir(void** state) {
    (void)state;
    char out[600], err[2048], p[1200], q[1200];
    snprintf(out, sizeof out, "%s/run-one", t5test_tmpdir());
    make_output(out);
    const int r0 = record_lines();
    PushToHubArgs a = args_for("", HUB_STRATEGY_END);  // hub_model_id null: the output_dir's name
    a.private_repo = true;
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(a.repo_id, "t5user/run-one");  // the Hub put it under the token's user
    write_card(out);  // the trainer writes README.md before its last push (HF's push_to_hub: create_model_card)
    if (push_to_hub_end(&a, out, err, sizeof err)) fail_msg("%s", err);
    json_t* rec = record_load(r0);
    // the create call: private, no namespace given
    const json_t* create = json_array_get(rec, 0);
    assert_string_equal(json_string_value(json_object_get(create, "path")), "/api/repos/create");
    assert_string_equal(json_string_value(json_object_get(json_object_get(create, "request"), "visibility")),
                        "private");
    assert_true(json_is_null(json_object_get(json_object_get(create, "request"), "organization")));
    // every pushed file arrived, byte for byte; "_*" and "checkpoint-*" did not
    const char* files[] = {"config.json", "model.safetensors", "spiece.model", "trainer_state.json",
                           "all_results.json", "empty.txt", "runs/x/events.out.tfevents.1.host", "big_log.txt",
                           "README.md"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        snprintf(q, sizeof q, "%s/t5user/run-one/%s", served, files[i]);
        assert_same_file(p, q);
    }
    snprintf(q, sizeof q, "%s/t5user/run-one/checkpoint-2", served);
    assert_false(t5_path_exists(q));
    snprintf(q, sizeof q, "%s/t5user/run-one/_private_notes.txt", served);
    assert_false(t5_path_exists(q));
    // one commit "End of training": LFS for the safetensors, the .model, the event file and the big text file
    const json_t* c = only_commit(rec, "End of training");
    assert_string_equal(op_key(c, "model.safetensors"), "lfsFile");
    assert_string_equal(op_key(c, "spiece.model"), "lfsFile");
    assert_string_equal(op_key(c, "runs/x/events.out.tfevents.1.host"), "lfsFile");
    assert_string_equal(op_key(c, "big_log.txt"), "lfsFile");
    assert_string_equal(op_key(c, "config.json"), "file");
    assert_string_equal(op_key(c, "empty.txt"), "file");
    assert_string_equal(op_key(c, "README.md"), "file");
    assert_null(op_key(c, "_private_notes.txt"));
    // the safetensors in 3 parts (multipart above 1 MB) + completion; the small LFS files in one PUT each; each one
    // verified; no token ever sent to the storage URLs (the server refuses one)
    assert_int_equal(count_calls(rec, "PUT", "/part/"), 3 + 3);  // model.safetensors and big_log.txt
    assert_int_equal(count_calls(rec, "POST", "/complete"), 2);
    assert_int_equal(count_calls(rec, "PUT", "/lfs-upload/") - count_calls(rec, "PUT", "/part/"), 2);
    assert_int_equal(count_calls(rec, "POST", "/lfs-verify/"), 4);
    size_t i;
    const json_t* o;
    json_array_foreach(rec, i, o) if (json_object_get(o, "status")) fail_msg("a call failed: %s",
                                                                              json_dumps(o, JSON_COMPACT));
    json_decref(rec);
    // the local folder is untouched
    snprintf(p, sizeof p, "%s/checkpoint-2/config.json", out);
    assert_true(t5_is_file(p));
}

static void test_push_resumed(void** state) {
    (void)state;
    char out[600], err[2048], p[1200], q[1200];
    snprintf(out, sizeof out, "%s/run-resume", t5test_tmpdir());
    make_output(out);
    PushToHubArgs a = args_for("org/resume", HUB_STRATEGY_END);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(a.repo_id, "org/resume");
    // the commit fails once the LFS objects are uploaded (a 4xx is not retried)
    hub_server_faults(&srv, "[{\"match\": \"/commit/\", \"method\": \"POST\", \"status\": 400}]");
    int r0 = record_lines();
    assert_int_not_equal(push_to_hub_end(&a, out, err, sizeof err), 0);
    assert_contains(err, "committing to org/resume");
    assert_contains(err, "HTTP 400");
    json_t* rec = record_load(r0);
    assert_int_equal(count_calls(rec, "PUT", "/lfs-upload/"), 3 + 3 + 2);
    json_decref(rec);
    snprintf(q, sizeof q, "%s/org/resume/model.safetensors", served);
    assert_false(t5_path_exists(q));  // nothing committed
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    assert_true(t5_is_file(p));  // nothing lost
    // pushed again: the Hub has every LFS object: none is sent again, the commit goes through
    hub_server_faults(&srv, "[]");
    r0 = record_lines();
    if (push_to_hub_end(&a, out, err, sizeof err)) fail_msg("%s", err);
    rec = record_load(r0);
    assert_int_equal(count_calls(rec, "PUT", "/lfs-upload/"), 0);
    assert_int_equal(count_calls(rec, "POST", "/lfs-verify/"), 0);
    assert_int_equal(count_calls(rec, "POST", "/objects/batch"), 1);
    const json_t* c = nth_commit(rec, 0);
    assert_non_null(c);
    assert_string_equal(op_key(c, "model.safetensors"), "lfsFile");
    json_decref(rec);
    assert_same_file(p, q);
    // once more, nothing changed: no upload, no commit (the files are the Hub's already)
    r0 = record_lines();
    if (push_to_hub_end(&a, out, err, sizeof err)) fail_msg("%s", err);
    rec = record_load(r0);
    assert_null(nth_commit(rec, 0));
    assert_int_equal(count_calls(rec, "POST", "/objects/batch"), 0);
    json_decref(rec);
    // one file changed: a commit of that file alone
    dl_write_text(out, "all_results.json", "{\"train_loss\": 1.25}");
    r0 = record_lines();
    if (push_to_hub_end(&a, out, err, sizeof err)) fail_msg("%s", err);
    rec = record_load(r0);
    c = nth_commit(rec, 0);
    assert_non_null(c);
    assert_int_equal(json_array_size(json_object_get(c, "ops")), 1);
    assert_string_equal(op_key(c, "all_results.json"), "file");
    json_decref(rec);
}

// a checkpoint as the trainer saves it, with a model different from output_dir's
static void make_checkpoint(const char* out, int step) {
    char rel[256];
    snprintf(rel, sizeof rel, "checkpoint-%d/model.safetensors", step);
    dl_write_bytes(out, rel, 500000, 100 + (unsigned)step);
    snprintf(rel, sizeof rel, "checkpoint-%d/config.json", step);
    dl_write_text(out, rel, "{\"d_model\": 8, \"step\": 1}");
    snprintf(rel, sizeof rel, "checkpoint-%d/t5train_state.bin", step);
    dl_write_bytes(out, rel, 20000, 200 + (unsigned)step);
    snprintf(rel, sizeof rel, "checkpoint-%d/trainer_state.json", step);
    dl_write_text(out, rel, "{}");
}

static void test_push_strategies(void** state) {
    (void)state;
    char out[600], err[2048], p[1200], q[1200];
    snprintf(out, sizeof out, "%s/run-strat", t5test_tmpdir());
    dl_write_text(out, "t5train_config.json", "{}");
    dl_write_text(out, "trainer_log.jsonl", "{\"step\": 2}\n");
    make_checkpoint(out, 2);
    char ckpt[700];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", out);
    // end: nothing at a save
    PushToHubArgs a = args_for("org/strat-end", HUB_STRATEGY_END);
    int r0 = record_lines();
    if (push_to_hub_save(&a, out, ckpt, "Training in progress, step 2", err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(record_lines(), r0);
    // every_save: output_dir's files with the checkpoint's model files at the root, one commit
    a = args_for("org/strat-every", HUB_STRATEGY_EVERY_SAVE);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    r0 = record_lines();
    if (push_to_hub_save(&a, out, ckpt, "Training in progress, step 2", err, sizeof err)) fail_msg("%s", err);
    json_t* rec = record_load(r0);
    const json_t* c = only_commit(rec, "Training in progress, step 2");
    assert_string_equal(op_key(c, "model.safetensors"), "lfsFile");
    assert_string_equal(op_key(c, "config.json"), "file");
    assert_string_equal(op_key(c, "trainer_log.jsonl"), "file");
    assert_null(op_key(c, "t5train_state.bin"));  // optimizer state stays in the checkpoint
    json_decref(rec);
    snprintf(p, sizeof p, "%s/model.safetensors", ckpt);
    snprintf(q, sizeof q, "%s/org/strat-every/model.safetensors", served);
    assert_same_file(p, q);
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    assert_false(t5_path_exists(p));  // nothing copied into output_dir
    // checkpoint: the same, then the checkpoint as last-checkpoint/ in a second commit
    a = args_for("org/strat-ckpt", HUB_STRATEGY_CHECKPOINT);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    r0 = record_lines();
    if (push_to_hub_save(&a, out, ckpt, "Training in progress, step 2", err, sizeof err)) fail_msg("%s", err);
    rec = record_load(r0);
    c = nth_commit(rec, 1);
    assert_non_null(c);
    assert_string_equal(json_string_value(json_object_get(c, "summary")), "Training in progress, step 2, checkpoint");
    assert_string_equal(op_key(c, "last-checkpoint/model.safetensors"), "lfsFile");
    assert_string_equal(op_key(c, "last-checkpoint/t5train_state.bin"), "lfsFile");
    assert_string_equal(op_key(c, "last-checkpoint/trainer_state.json"), "file");
    // model.safetensors is sent once (the second commit finds it in the repo's LFS storage), t5train_state.bin once
    assert_int_equal(count_calls(rec, "PUT", "/lfs-upload/"), 2);
    assert_int_equal(count_calls(rec, "POST", "/objects/batch"), 2);
    json_decref(rec);
    snprintf(p, sizeof p, "%s/t5train_state.bin", ckpt);
    snprintf(q, sizeof q, "%s/org/strat-ckpt/last-checkpoint/t5train_state.bin", served);
    assert_same_file(p, q);
    // all_checkpoints: as checkpoint-2/
    a = args_for("org/strat-all", HUB_STRATEGY_ALL_CHECKPOINTS);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    if (push_to_hub_save(&a, out, ckpt, "Training in progress, step 2", err, sizeof err)) fail_msg("%s", err);
    snprintf(q, sizeof q, "%s/org/strat-all/checkpoint-2/t5train_state.bin", served);
    assert_same_file(p, q);
}

static void test_push_errors(void** state) {
    (void)state;
    char out[600], err[2048];
    snprintf(out, sizeof out, "%s/run-err", t5test_tmpdir());
    dl_write_text(out, "config.json", "{}");
    // no token anywhere
    PushToHubArgs a = args_for("org/err", HUB_STRATEGY_END);
    a.token[0] = 0;
    int r0 = record_lines();
    assert_int_not_equal(push_to_hub_init(&a, out, err, sizeof err), 0);
    assert_contains(err, "needs a token");
    assert_contains(err, "--hub_token");
    assert_null(strchr(err, '\n'));
    assert_int_equal(record_lines(), r0);  // no request
    // the token file (HF_HOME/token), as huggingface_hub's login writes it: accepted
    char home[700];
    snprintf(home, sizeof home, "%s/hfhome", t5test_tmpdir());
    dl_write_text(home, "token", TOKEN "\n");
    setenv("HF_HOME", home, 1);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    unsetenv("HF_HOME");
    // a wrong token: the Hub's 401 in one sentence with the hint
    a = args_for("org/err", HUB_STRATEGY_END);
    snprintf(a.token, sizeof a.token, "hf_wrong");
    assert_int_not_equal(push_to_hub_init(&a, out, err, sizeof err), 0);
    assert_contains(err, "HTTP 401");
    assert_contains(err, "write access");
    assert_null(strstr(err, "hf_wrong"));  // the token is never printed
    // an unknown branch
    a = args_for("org/err", HUB_STRATEGY_END);
    snprintf(a.revision, sizeof a.revision, "nobranch");
    assert_int_not_equal(push_to_hub_end(&a, out, err, sizeof err), 0);
    assert_contains(err, "HTTP 404");
    assert_contains(err, "--hub_revision");
    // offline: refused without a request
    setenv("HF_HUB_OFFLINE", "1", 1);
    r0 = record_lines();
    a = args_for("org/err", HUB_STRATEGY_END);
    assert_int_not_equal(push_to_hub_end(&a, out, err, sizeof err), 0);
    assert_contains(err, "HF_HUB_OFFLINE");
    assert_int_equal(record_lines(), r0);
    unsetenv("HF_HUB_OFFLINE");
    // an unreachable Hub (nothing listens on the port): one sentence after the retries
    setenv("HF_ENDPOINT", "http://127.0.0.1:9", 1);
    assert_int_not_equal(push_to_hub_init(&a, out, err, sizeof err), 0);
    assert_contains(err, "cannot reach http://127.0.0.1:9/api/repos/create");
    setenv("HF_ENDPOINT", srv.endpoint, 1);
}

// a token that may not create repos (the Hub's 403 at create; a fine-grained token with write access to one repo):
// an existing repo is used, as huggingface_hub's create_repo(exist_ok=True) does; a missing one is the 403 error
static void test_push_create_refused(void** state) {
    (void)state;
    char out[600], err[2048];
    snprintf(out, sizeof out, "%s/run-scoped", t5test_tmpdir());
    dl_write_text(out, "config.json", "{}");
    PushToHubArgs a = args_for("org/scoped", HUB_STRATEGY_END);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    hub_server_faults(&srv, "[{\"match\": \"/api/repos/create\", \"method\": \"POST\", \"status\": 403, "
                            "\"times\": 2}]");
    a = args_for("org/scoped", HUB_STRATEGY_END);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(a.repo_id, "org/scoped");
    if (push_to_hub_end(&a, out, err, sizeof err)) fail_msg("%s", err);
    a = args_for("org/not-there", HUB_STRATEGY_END);
    assert_int_not_equal(push_to_hub_init(&a, out, err, sizeof err), 0);
    assert_contains(err, "HTTP 403");
    hub_server_faults(&srv, "[]");
}

// an endpoint with a path (a proxy serving the Hub under /mirror): the repo's id is what follows the endpoint in the
// answer's URL ("t5user/name", as huggingface_hub's RepoUrl strips the endpoint), not the whole path
static void test_push_endpoint_path(void** state) {
    (void)state;
    char out[600], err[2048], ep[600], q[1200];
    snprintf(out, sizeof out, "%s/run-mirror", t5test_tmpdir());
    dl_write_text(out, "config.json", "{\"mirror\": 1}");
    snprintf(ep, sizeof ep, "%s/mirror", srv.endpoint);
    setenv("HF_ENDPOINT", ep, 1);
    PushToHubArgs a = args_for("", HUB_STRATEGY_END);
    int rc = push_to_hub_init(&a, out, err, sizeof err);
    if (rc == 0) rc = push_to_hub_end(&a, out, err, sizeof err);
    setenv("HF_ENDPOINT", srv.endpoint, 1);
    if (rc) fail_msg("%s", err);
    assert_string_equal(a.repo_id, "t5user/run-mirror");
    // output_dir "<dir>/." is <dir> (pathlib's name), not "."
    char what[1024];
    snprintf(q, sizeof q, "%s/.", out);
    a = args_for("", HUB_STRATEGY_END);
    if (push_to_hub_check(&a, q, what, sizeof what, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(a.repo_id, "run-mirror");
    snprintf(q, sizeof q, "%s/t5user/run-mirror/config.json", served);
    assert_true(t5_is_file(q));
}

// two files with the same content (a copy, as output_dir's model beside checkpoint-N's under --all): the LFS object
// is uploaded once (a second multipart upload of it would PUT to an upload already completed), both paths committed
static void test_push_same_content(void** state) {
    (void)state;
    char dir[600], err[2048], id[512], p[1200], q[1200];
    snprintf(dir, sizeof dir, "%s/same-content", t5test_tmpdir());
    dl_write_bytes(dir, "model.safetensors", BIG, 21);
    dl_write_bytes(dir, "checkpoint-9/model.safetensors", BIG, 21);
    dl_write_bytes(dir, "a.bin", 4000, 22);
    dl_write_bytes(dir, "b.bin", 4000, 22);
    HubPushOptions o = {.token = TOKEN, .quiet = true};
    PushList l = {0};
    if (push_list_add_folder(&l, dir, NULL, NULL, err, sizeof err)) fail_msg("%s", err);
    const int r0 = record_lines();
    if (hub_push_create_repo(&o, "org/same", false, id, sizeof id, err, sizeof err)) fail_msg("%s", err);
    PushResult r;
    if (hub_push_files(&o, id, &l, "copies", &r, err, sizeof err)) fail_msg("%s", err);
    push_list_free(&l);
    json_t* rec = record_load(r0);
    assert_int_equal(count_calls(rec, "PUT", "/part/"), 3);
    assert_int_equal(count_calls(rec, "POST", "/complete"), 1);
    assert_int_equal(count_calls(rec, "PUT", "/lfs-upload/") - count_calls(rec, "PUT", "/part/"), 1);
    assert_int_equal(r.n_lfs, 4);
    assert_int_equal(r.n_lfs_uploaded, 2);
    const json_t* c = only_commit(rec, "copies");
    assert_string_equal(op_key(c, "checkpoint-9/model.safetensors"), "lfsFile");
    assert_string_equal(op_key(c, "b.bin"), "lfsFile");
    json_decref(rec);
    const char* files[] = {"model.safetensors", "checkpoint-9/model.safetensors", "a.bin", "b.bin"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        snprintf(q, sizeof q, "%s/org/same/%s", served, files[i]);
        assert_same_file(p, q);
    }
}

// `t5train push`: the folder as the end of a run pushes it; usage errors and a missing token as one line
static void test_push_command(void** state) {
    (void)state;
    static char out[1 << 16];
    char dir[600], q[1200];
    snprintf(dir, sizeof dir, "%s/cmd-out", t5test_tmpdir());
    make_output(dir);
    const char* env = "env -u HF_TOKEN -u HF_HOME -u HF_HUB_OFFLINE";
    int r0 = record_lines();
    int rc = t5test_run(out, sizeof out, "%s HOME=%s HF_ENDPOINT=%s '%s' push '%s' --hub_model_id org/cmd --hub_token %s "
                        "--commit_message 'first push' 2>&1", env, t5test_tmpdir(), srv.endpoint, t5test_bin(), dir,
                        TOKEN);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    assert_contains(out, "push: org/cmd: commit ");
    assert_null(strstr(out, TOKEN));
    json_t* rec = record_load(r0);
    const json_t* c = nth_commit(rec, 0);
    assert_non_null(c);
    assert_string_equal(json_string_value(json_object_get(c, "summary")), "first push");
    assert_string_equal(op_key(c, "model.safetensors"), "lfsFile");
    assert_null(op_key(c, "checkpoint-2/config.json"));
    json_decref(rec);
    snprintf(q, sizeof q, "%s/org/cmd/model.safetensors", served);
    assert_true(t5_is_file(q));
    // again: nothing changed
    rc = t5test_run(out, sizeof out, "%s HOME=%s HF_ENDPOINT=%s HF_TOKEN=%s '%s' push '%s' --hub_model_id org/cmd 2>&1",
                    env, t5test_tmpdir(), srv.endpoint, TOKEN, t5test_bin(), dir);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    assert_contains(out, "nothing committed");
    // --all: the checkpoint folder too
    rc = t5test_run(out, sizeof out, "%s HOME=%s HF_ENDPOINT=%s HF_TOKEN=%s '%s' push '%s' --hub_model_id org/cmd --all 2>&1",
                    env, t5test_tmpdir(), srv.endpoint, TOKEN, t5test_bin(), dir);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    snprintf(q, sizeof q, "%s/org/cmd/checkpoint-2/config.json", served);
    assert_true(t5_is_file(q));
    // errors: no repo, no token, an unknown flag: one "t5train: error:" line, non-zero exit
    rc = t5test_run(out, sizeof out, "%s HOME=%s '%s' push '%s' 2>&1", env, t5test_tmpdir(), t5test_bin(), dir);
    assert_int_equal(rc, 2);
    assert_contains(out, "t5train: error: push: --hub_model_id is missing");
    rc = t5test_run(out, sizeof out, "%s HOME=%s HF_ENDPOINT=%s '%s' push '%s' --hub_model_id org/cmd 2>&1", env,
                    t5test_tmpdir(), srv.endpoint, t5test_bin(), dir);
    assert_int_equal(rc, 2);  // a configuration error, as a run's pre-flight
    assert_contains(out, "t5train: error: push: pushing to the Hub needs a token");
    rc = t5test_run(out, sizeof out, "%s HOME=%s HF_ENDPOINT=%s HF_HUB_OFFLINE=1 '%s' push '%s' --hub_model_id org/cmd "
                    "--hub_token %s 2>&1", env, t5test_tmpdir(), srv.endpoint, t5test_bin(), dir, TOKEN);
    assert_int_equal(rc, 2);
    assert_contains(out, "t5train: error: push: HF_HUB_OFFLINE is set");
    rc = t5test_run(out, sizeof out, "%s HOME=%s '%s' push '%s' --hub_model_id x --bogus 2>&1", env, t5test_tmpdir(),
                    t5test_bin(), dir);
    assert_int_equal(rc, 2);
    assert_contains(out, "unknown flag '--bogus'");
}

// the main job's command line with --push_to_hub, against this Hub
static void run_base(char* base, size_t n, const char* endpoint, const char* env_extra) {
    const char* d = t5test_data_dir();
    snprintf(base, n,
             "env -u HF_TOKEN -u HF_HOME -u HF_HUB_OFFLINE %s HOME=%s HF_ENDPOINT=%s CUDA_VISIBLE_DEVICES=-1 "
             "T5TRAIN_HTTP_RETRY_BASE_S=0.01 "
             "%s --model_name_or_path %s/test/fixtures/t5/tiny_v10 --tokenizer_name %s/t5-spiece/spiece.model "
             "--train_file %s/wmt16-ro-en/validation.en --source_lang en --target_lang ro --max_train_samples 8 "
             "--output_dir %s/run-cli-out --overwrite_output_dir --do_train --max_steps 2 --push_to_hub "
             "--hub_private_repo",
             env_extra, t5test_tmpdir(), endpoint, t5test_bin(), t5test_repo_dir(), d, d, t5test_tmpdir());
}

// a run with --push_to_hub: the dry run checks for a token (no request); the real run creates the repo before
// anything else (here it then stops at the missing GPU: CUDA_VISIBLE_DEVICES=-1); the token is never printed
static void test_run_push_to_hub(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    static char out[1 << 17];
    char base[4096];
    run_base(base, sizeof base, srv.endpoint, "");
    int r0 = record_lines();
    int rc = t5test_run(out, sizeof out, "%s --dry_run 2>&1", base);
    assert_int_equal(rc, 2);
    assert_contains(out, "t5train: error: --push_to_hub needs a token with write access");
    rc = t5test_run(out, sizeof out, "%s --hub_token %s --hub_strategy checkpoint --dry_run 2>&1", base, TOKEN);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    assert_contains(out, "dry run: checked push_to_hub: repo run-cli-out on ");
    assert_contains(out, "hub_strategy checkpoint");
    assert_null(strstr(out, TOKEN));
    assert_contains(out, "<HUB_TOKEN>");
    assert_int_equal(record_lines(), r0);  // the dry run asked the Hub nothing
    // the real run: the repo is created first, then the run stops at the GPU; nothing pushed
    rc = t5test_run(out, sizeof out, "%s --hub_token %s --hub_model_id org/from-run 2>&1", base, TOKEN);
    assert_int_not_equal(rc, 0);
    assert_contains(out, "push_to_hub: repo org/from-run ready (private)");
    json_t* rec = record_load(r0);
    assert_int_equal(json_array_size(rec), 1);
    const json_t* create = json_array_get(rec, 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(create, "request"), "visibility")),
                        "private");
    json_decref(rec);
    // the resolved config written into output_dir holds the mask, not the token
    char p[1200];
    snprintf(p, sizeof p, "%s/run-cli-out/t5train_config.json", t5test_tmpdir());
    size_t n = 0;
    char* cfg = t5_read_file(p, &n);
    if (cfg) {
        assert_null(strstr(cfg, TOKEN));
        free(cfg);
    }
    // offline: refused before anything
    char offline[4096];
    run_base(offline, sizeof offline, srv.endpoint, "HF_HUB_OFFLINE=1");
    rc = t5test_run(out, sizeof out, "%s --hub_token %s 2>&1", offline, TOKEN);
    assert_int_equal(rc, 2);
    assert_contains(out, "t5train: error: --push_to_hub: HF_HUB_OFFLINE is set");
    // an unreachable Hub: one line, exit 1, before training (nothing listens on port 9)
    run_base(base, sizeof base, "http://127.0.0.1:9", "");
    rc = t5test_run(out, sizeof out, "%s --hub_token %s 2>&1", base, TOKEN);
    assert_int_equal(rc, 1);
    assert_contains(out, "t5train: error: push_to_hub: cannot reach http://127.0.0.1:9/api/repos/create");
    assert_null(strstr(out, "Running training"));
}


// ---- the background pusher (src/upload/push_worker.h). "Still running" is made deterministic by the server: a
// "hold" fault keeps the push's first call open until the test creates the gate file (the server creates
// <gate>.waiting once the call is held).

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// the next preupload call held until `gate` exists; gate is made unique per use
static void hold_preupload(char* gate, size_t len, const char* name) {
    snprintf(gate, len, "%s/gate-%s", t5test_tmpdir(), name);
    unlink(gate);
    char w[700], rules[1200];
    snprintf(w, sizeof w, "%s.waiting", gate);
    unlink(w);
    snprintf(rules, sizeof rules, "[{\"match\": \"/preupload/\", \"method\": \"POST\", \"hold\": \"%s\"}]", gate);
    hub_server_faults(&srv, rules);
}

// waits (at most 30 s) until the server holds the call
static void wait_held(const char* gate) {
    char w[700];
    snprintf(w, sizeof w, "%s.waiting", gate);
    const double t0 = mono_s();
    while (!t5_path_exists(w)) {
        if (mono_s() - t0 > 30) fail_msg("the push never reached the server's held call (%s)", w);
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void release(const char* gate) { t5test_write_file(gate, "go"); }

static int count_commits(const json_t* rec, const char* summary) {
    int n = 0;
    const json_t* c;
    for (int k = 0; (c = nth_commit(rec, k)); k++) {
        const char* s = json_string_value(json_object_get(c, "summary"));
        n += s && strcmp(s, summary) == 0;
    }
    return n;
}

// a job runs while the caller goes on; a second one while it runs is skipped and counted; wait; the next one runs
static void test_worker_background(void** state) {
    (void)state;
    char out[600], err[2048], ckpt2[700], ckpt4[700], gate[700];
    snprintf(out, sizeof out, "%s/run-bg", t5test_tmpdir());
    dl_write_text(out, "trainer_log.jsonl", "{\"step\": 2}\n");
    make_checkpoint(out, 2);
    make_checkpoint(out, 4);
    snprintf(ckpt2, sizeof ckpt2, "%s/checkpoint-2", out);
    snprintf(ckpt4, sizeof ckpt4, "%s/checkpoint-4", out);
    PushToHubArgs a = args_for("org/bg", HUB_STRATEGY_CHECKPOINT);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    PushWorker* w = push_worker_create(&a, err, sizeof err);
    if (!w) fail_msg("%s", err);
    assert_false(push_worker_busy(w));
    const int r0 = record_lines();
    hold_preupload(gate, sizeof gate, "bg");
    assert_int_equal(push_worker_submit(w, out, ckpt2, "Training in progress, step 2", err, sizeof err),
                     PUSH_WORKER_QUEUED);
    // the caller went on at once: the push is held in the server
    wait_held(gate);
    assert_true(push_worker_busy(w));
    char dir[4096];
    assert_true(push_worker_running_ckpt(w, dir, sizeof dir));
    assert_string_equal(dir, ckpt2);
    PushOutcome o;
    assert_false(push_worker_take(w, &o));
    // a save while it runs: skipped (HF's _push_from_checkpoint), nothing built or sent for it
    dl_write_text(out, "trainer_log.jsonl", "{\"step\": 2}\n{\"step\": 4}\n");  // appended meanwhile
    assert_int_equal(push_worker_submit(w, out, ckpt4, "Training in progress, step 4", err, sizeof err),
                     PUSH_WORKER_SKIPPED);
    PushWorkerStats st;
    push_worker_stats(w, &st);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.skipped, 1);
    release(gate);
    push_worker_wait(w);
    assert_false(push_worker_busy(w));
    assert_true(push_worker_take(w, &o));
    if (!o.ok) fail_msg("%s", o.err);
    assert_string_equal(o.message, "Training in progress, step 2");
    assert_contains(o.lines, "commit ");
    assert_contains(o.lines, "\"Training in progress, step 2, checkpoint\"");
    assert_false(push_worker_take(w, &o));  // once
    json_t* rec = record_load(r0);
    assert_int_equal(count_commits(rec, "Training in progress, step 2"), 1);
    assert_int_equal(count_commits(rec, "Training in progress, step 2, checkpoint"), 1);
    assert_int_equal(count_commits(rec, "Training in progress, step 4"), 0);
    // the log as it was when the job was made (its first bytes), though appended during the push
    const json_t* c = nth_commit(rec, 0);
    assert_string_equal(op_key(c, "trainer_log.jsonl"), "file");
    json_decref(rec);
    char q[1200];
    snprintf(q, sizeof q, "%s/org/bg/trainer_log.jsonl", served);
    char* got = t5_read_file(q, NULL);
    assert_non_null(got);
    assert_string_equal(got, "{\"step\": 2}\n");
    free(got);
    // the next save's push sends everything
    hub_server_faults(&srv, "[]");
    assert_int_equal(push_worker_submit(w, out, ckpt4, "Training in progress, step 4", err, sizeof err),
                     PUSH_WORKER_QUEUED);
    push_worker_wait(w);
    assert_true(push_worker_take(w, &o));
    if (!o.ok) fail_msg("%s", o.err);
    snprintf(q, sizeof q, "%s/org/bg/trainer_log.jsonl", served);
    got = t5_read_file(q, NULL);
    assert_string_equal(got, "{\"step\": 2}\n{\"step\": 4}\n");
    free(got);
    char p[1200];
    snprintf(p, sizeof p, "%s/t5train_state.bin", ckpt4);
    snprintf(q, sizeof q, "%s/org/bg/last-checkpoint/t5train_state.bin", served);
    assert_same_file(p, q);
    push_worker_stats(w, &st);
    assert_int_equal(st.queued, 2);
    assert_int_equal(st.succeeded, 2);
    assert_int_equal(st.failed, 0);
    assert_int_equal(st.skipped, 1);
    assert_true(st.busy_s > 0);
    push_worker_destroy(w);
}

// the checkpoint a push reads vanishes under it (a rotation the trainer did not spare it from): the push fails with
// one sentence the caller logs, nothing crashes, and the next push goes through
static void test_worker_files_vanish(void** state) {
    (void)state;
    char out[600], err[2048], ckpt6[700], ckpt8[700], gate[700];
    snprintf(out, sizeof out, "%s/run-vanish", t5test_tmpdir());
    dl_write_text(out, "t5train_config.json", "{}");
    make_checkpoint(out, 6);
    snprintf(ckpt6, sizeof ckpt6, "%s/checkpoint-6", out);
    snprintf(ckpt8, sizeof ckpt8, "%s/checkpoint-8", out);
    PushToHubArgs a = args_for("org/vanish", HUB_STRATEGY_EVERY_SAVE);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    PushWorker* w = push_worker_create(&a, err, sizeof err);
    if (!w) fail_msg("%s", err);
    const int r0 = record_lines();
    hold_preupload(gate, sizeof gate, "vanish");
    assert_int_equal(push_worker_submit(w, out, ckpt6, "Training in progress, step 6", err, sizeof err),
                     PUSH_WORKER_QUEUED);
    wait_held(gate);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ckpt6);
    assert_int_equal(system(cmd), 0);
    release(gate);
    push_worker_wait(w);
    PushOutcome o;
    assert_true(push_worker_take(w, &o));
    assert_false(o.ok);
    assert_contains(o.err, "cannot read ");
    assert_contains(o.err, "checkpoint-6/model.safetensors");
    assert_null(strchr(o.err, '\n'));
    assert_string_equal(o.ckpt_dir, ckpt6);
    json_t* rec = record_load(r0);
    assert_null(nth_commit(rec, 0));  // nothing committed
    json_decref(rec);
    hub_server_faults(&srv, "[]");
    make_checkpoint(out, 8);
    assert_int_equal(push_worker_submit(w, out, ckpt8, "Training in progress, step 8", err, sizeof err),
                     PUSH_WORKER_QUEUED);
    push_worker_wait(w);
    assert_true(push_worker_take(w, &o));
    if (!o.ok) fail_msg("%s", o.err);
    PushWorkerStats st;
    push_worker_stats(w, &st);
    assert_int_equal(st.failed, 1);
    assert_int_equal(st.succeeded, 1);
    push_worker_destroy(w);
    char p[1200], q[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", ckpt8);
    snprintf(q, sizeof q, "%s/org/vanish/model.safetensors", served);
    assert_same_file(p, q);
}

static void* release_later(void* gate) {
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    release(gate);
    return NULL;
}

// destroy while a job runs: it waits for the job, then joins; cancel first: the job is abandoned within about a
// second (a held call aborted), nothing committed, and destroy joins at once after
static void test_worker_destroy_running(void** state) {
    (void)state;
    char out[600], err[2048], ckpt[700], gate[700];
    snprintf(out, sizeof out, "%s/run-destroy", t5test_tmpdir());
    dl_write_text(out, "t5train_config.json", "{}");
    make_checkpoint(out, 2);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", out);
    PushToHubArgs a = args_for("org/destroy", HUB_STRATEGY_EVERY_SAVE);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    // destroy waits for the running job: it completes (released by another thread while destroy waits)
    PushWorker* w = push_worker_create(&a, err, sizeof err);
    if (!w) fail_msg("%s", err);
    int r0 = record_lines();
    hold_preupload(gate, sizeof gate, "destroy1");
    assert_int_equal(push_worker_submit(w, out, ckpt, "Training in progress, step 2", err, sizeof err),
                     PUSH_WORKER_QUEUED);
    wait_held(gate);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_later, gate), 0);
    push_worker_destroy(w);
    pthread_join(th, NULL);
    json_t* rec = record_load(r0);
    assert_int_equal(count_commits(rec, "Training in progress, step 2"), 1);
    json_decref(rec);
    // cancel, then destroy: abandoned promptly, no commit
    w = push_worker_create(&a, err, sizeof err);
    if (!w) fail_msg("%s", err);
    dl_write_text(out, "t5train_config.json", "{\"changed\": true}");  // so that a commit would be made
    r0 = record_lines();
    hold_preupload(gate, sizeof gate, "destroy2");
    assert_int_equal(push_worker_submit(w, out, ckpt, "Training in progress, step 3", err, sizeof err),
                     PUSH_WORKER_QUEUED);
    wait_held(gate);
    const double t0 = mono_s();
    push_worker_cancel(w);
    push_worker_wait(w);
    const double dt = mono_s() - t0;
    if (dt > 10) fail_msg("the cancelled push took %.1f s to end", dt);
    PushOutcome o;
    assert_true(push_worker_take(w, &o));
    assert_false(o.ok);
    assert_contains(o.err, "cancelled");
    push_worker_destroy(w);
    release(gate);  // the server's held call ends (its client is gone)
    rec = record_load(r0);
    assert_int_equal(count_commits(rec, "Training in progress, step 3"), 0);
    json_decref(rec);
}


// the trainer's side (src/train/trainer_push.h): a save while a push runs is skipped and the running push's
// checkpoint is spared from rotation; the end waits for the push; a stop abandons it promptly; --hub_always_push makes
// the save wait and push
static void test_trainer_push(void** state) {
    (void)state;
    char out[600], ckpt2[700], ckpt4[700], gate[700];
    snprintf(out, sizeof out, "%s/run-trainer", t5test_tmpdir());
    dl_write_text(out, "t5train_config.json", "{}");
    make_checkpoint(out, 2);
    make_checkpoint(out, 4);
    snprintf(ckpt2, sizeof ckpt2, "%s/checkpoint-2", out);
    snprintf(ckpt4, sizeof ckpt4, "%s/checkpoint-4", out);
    char err[2048];
    PushToHubArgs a = args_for("org/trainer", HUB_STRATEGY_EVERY_SAVE);
    if (push_to_hub_init(&a, out, err, sizeof err)) fail_msg("%s", err);
    TrainerLog log;
    trainer_log_init(&log, stdout, out, 0);
    TrainerPush tp = {.args = &a};
    assert_int_equal(trainer_push_spared_step(&tp), -1);  // no push yet
    int r0 = record_lines();
    hold_preupload(gate, sizeof gate, "trainer1");
    trainer_push_after_save(&tp, &log, out, ckpt2, "Training in progress, step 2");
    wait_held(gate);
    assert_int_equal(trainer_push_spared_step(&tp), 2);
    trainer_push_after_save(&tp, &log, out, ckpt4, "Training in progress, step 4");  // skipped, one line
    PushWorkerStats st;
    push_worker_stats(tp.w, &st);
    assert_int_equal(st.skipped, 1);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_later, gate), 0);
    assert_true(trainer_push_finish(&tp, &log, false));  // waited; a rotation spared a checkpoint meanwhile
    pthread_join(th, NULL);
    assert_null(tp.w);
    json_t* rec = record_load(r0);
    assert_int_equal(count_commits(rec, "Training in progress, step 2"), 1);
    assert_int_equal(count_commits(rec, "Training in progress, step 4"), 0);
    json_decref(rec);
    // a stop request: the running push is abandoned within about a second, nothing committed
    dl_write_text(out, "t5train_config.json", "{\"stop\": 1}");
    r0 = record_lines();
    hold_preupload(gate, sizeof gate, "trainer2");
    trainer_push_after_save(&tp, &log, out, ckpt4, "Training in progress, step 4");
    wait_held(gate);
    const double t0 = mono_s();
    assert_false(trainer_push_finish(&tp, &log, true));
    if (mono_s() - t0 > 10) fail_msg("the abandoned push took %.1f s", mono_s() - t0);
    release(gate);
    rec = record_load(r0);
    assert_null(nth_commit(rec, 0));
    json_decref(rec);
    // --hub_always_push: the step-4 save waits for the step-2 push, then pushes
    a.always_push = true;
    dl_write_text(out, "t5train_config.json", "{\"always\": 1}");
    r0 = record_lines();
    hold_preupload(gate, sizeof gate, "trainer3");
    trainer_push_after_save(&tp, &log, out, ckpt2, "Training in progress, step 2");
    wait_held(gate);
    assert_int_equal(pthread_create(&th, NULL, release_later, gate), 0);
    trainer_push_after_save(&tp, &log, out, ckpt4, "Training in progress, step 4");
    pthread_join(th, NULL);
    trainer_push_finish(&tp, &log, false);
    rec = record_load(r0);
    assert_int_equal(count_commits(rec, "Training in progress, step 2"), 1);
    assert_int_equal(count_commits(rec, "Training in progress, step 4"), 1);
    json_decref(rec);
    hub_server_faults(&srv, "[]");
    trainer_log_free(&log);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_output_dir),
        cmocka_unit_test(test_push_resumed),
        cmocka_unit_test(test_push_strategies),
        cmocka_unit_test(test_push_errors),
        cmocka_unit_test(test_push_same_content),
        cmocka_unit_test(test_push_create_refused),
        cmocka_unit_test(test_push_endpoint_path),
        cmocka_unit_test(test_push_command),
        cmocka_unit_test(test_run_push_to_hub),
        cmocka_unit_test(test_worker_background),
        cmocka_unit_test(test_worker_files_vanish),
        cmocka_unit_test(test_worker_destroy_running),
        cmocka_unit_test(test_trainer_push),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
