/*
 * test_download_hub.c: models from a loopback Hub (test/hub_server.py) into the HF cache layout:
 * fresh download (blobs by etag, snapshot links, refs/main), a second run without any request, sharded
 * weights, pytorch-only repos, unknown / private repos (401, token), 5xx retries, an interrupted transfer
 * resumed, a partial blob left by an earlier run resumed, a corrupted transfer caught by sha256, offline
 * mode with and without a cache, and two processes racing for one model (one downloads, one waits).
 */
#include "download_util.h"

#include "../src/base/common.h"
#include "../src/download/dynlib.h"
#include "../src/download/hub.h"
#include "../src/download/hub_cache.h"
#include "../src/download/sha256.h"

static HubServer srv;
static char served[512];
static char model_sha[65];
#define MODEL_BYTES 300000

static int setup(void** state) {
    (void)state;
    snprintf(served, sizeof served, "%s/served", t5test_tmpdir());
    dl_write_text(served, "org/tiny-t5/config.json", "{\"d_model\": 8}");
    dl_write_bytes(served, "org/tiny-t5/model.safetensors", MODEL_BYTES, 1);
    dl_write_bytes(served, "org/tiny-t5/spiece.model", 5000, 2);
    dl_write_text(served, "org/tiny-t5/generation_config.json", "{\"decoder_start_token_id\": 0}");
    dl_write_text(served, "org/sharded/config.json", "{}");
    dl_write_text(served, "org/sharded/model.safetensors.index.json",
                  "{\"metadata\": {}, \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
                  "\"b\": \"model-00002-of-00002.safetensors\", \"c\": \"model-00001-of-00002.safetensors\"}}");
    dl_write_bytes(served, "org/sharded/model-00001-of-00002.safetensors", 7000, 3);
    dl_write_bytes(served, "org/sharded/model-00002-of-00002.safetensors", 9000, 4);
    dl_write_text(served, "org/binonly/config.json", "{}");
    dl_write_bytes(served, "org/binonly/pytorch_model.bin", 1000, 5);
    dl_write_text(served, "private/tiny/config.json", "{}");
    dl_write_bytes(served, "private/tiny/model.safetensors", 1000, 6);
    char p[1024];
    snprintf(p, sizeof p, "%s/org/tiny-t5/model.safetensors", served);
    assert_int_equal(sha256_file_hex(p, model_sha), 0);
    hub_server_start(&srv, served);
    hub_server_env(&srv);
    return 0;
}

static int teardown(void** state) {
    (void)state;
    hub_server_stop(&srv);
    return 0;
}

// a fresh cache folder per test
static const char* fresh_cache(const char* name) {
    static char p[600];
    snprintf(p, sizeof p, "%s/cache-%s", t5test_tmpdir(), name);
    dl_mkdirs(p);
    setenv("HF_HUB_CACHE", p, 1);
    return p;
}

static int fetch(const char* repo, char* dir, char* err) {
    HubOptions o;
    hub_options_default(&o);
    o.quiet = true;
    return hub_fetch_model(repo, &o, dir, 4096, err, 4096);
}

static void test_fresh_download_layout(void** state) {
    (void)state;
    const char* cache = fresh_cache("fresh");
    hub_server_faults(&srv, "[]");
    hub_server_clear_log(&srv);
    char dir[4096], err[4096];
    if (fetch("org/tiny-t5", dir, err) != 0) fail_msg("%s", err);
    assert_contains(dir, "models--org--tiny-t5/snapshots/");
    char p[4200], link[1200];
    // the weights: a relative link to the blob named by the sha256 etag
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ssize_t n = readlink(p, link, sizeof link - 1);
    assert_true(n > 0);
    link[n] = 0;
    char want[200];
    snprintf(want, sizeof want, "../../blobs/%s", model_sha);
    assert_string_equal(link, want);
    char hex[65];
    assert_int_equal(sha256_file_hex(p, hex), 0);
    assert_string_equal(hex, model_sha);
    // refs/main names the snapshot
    char commit[128];
    snprintf(p, sizeof p, "%s/models--org--tiny-t5", cache);
    assert_int_equal(hub_cache_read_ref(p, "main", commit, sizeof commit), 0);
    assert_true(hub_is_commit(commit));
    assert_contains(dir, commit);
    // the files that exist were fetched; those that do not are marked .no_exist
    snprintf(p, sizeof p, "%s/spiece.model", dir);
    assert_true(t5_is_file(p));
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    assert_true(t5_is_file(p));
    snprintf(p, sizeof p, "%s/models--org--tiny-t5", cache);
    assert_true(hub_cache_is_missing(p, commit, "tokenizer.json"));
    assert_int_equal(hub_server_wait_count(&srv, "GET /lfs/", NULL, 2), 2);  // model + spiece
    // no partial files left
    assert_int_equal(t5test_run(NULL, 0, "ls %s/models--org--tiny-t5/blobs | grep -c incomplete", cache), 1);
    // a second run: complete in the cache, not a single request
    hub_server_clear_log(&srv);
    char dir2[4096];
    if (fetch("org/tiny-t5", dir2, err) != 0) fail_msg("%s", err);
    assert_string_equal(dir, dir2);
    usleep(200000);  // let a request, if any, reach the log
    assert_int_equal(hub_server_count(&srv, NULL, NULL), 0);
}

static void test_sharded(void** state) {
    (void)state;
    fresh_cache("sharded");
    hub_server_faults(&srv, "[]");
    char dir[4096], err[4096], p[4200];
    if (fetch("org/sharded", dir, err) != 0) fail_msg("%s", err);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    assert_true(t5_is_file(p));
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    assert_true(t5_is_file(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    assert_true(t5_is_file(p));
}

static void test_pytorch_only_and_unknown_repos(void** state) {
    (void)state;
    fresh_cache("errors");
    hub_server_faults(&srv, "[]");
    char dir[4096], err[4096];
    assert_int_equal(fetch("org/binonly", dir, err), -1);
    assert_contains(err, "only PyTorch weights");
    assert_contains(err, "convert_bin_to_safetensors.py");
    hub_server_clear_log(&srv);
    assert_int_equal(fetch("org/nope", dir, err), -1);
    assert_contains(err, "org/nope is not a model on the Hub");
    assert_contains(err, "HF_TOKEN");
    usleep(200000);
    assert_int_equal(hub_server_count(&srv, "GET /org/nope/", NULL), 0);  // 401 is not retried, nothing downloaded
    assert_int_equal(hub_server_wait_count(&srv, "HEAD /org/nope/", NULL, 1), 1);
    // private: 401 without the token, fine with it
    assert_int_equal(fetch("private/tiny", dir, err), -1);
    assert_contains(err, "private");
    setenv("HF_TOKEN", "secret-token", 1);
    int rc = fetch("private/tiny", dir, err);
    unsetenv("HF_TOKEN");
    if (rc != 0) fail_msg("%s", err);
    // a path-like name is not sent to the Hub
    assert_int_equal(fetch("./no/such/dir", dir, err), -1);
    assert_contains(err, "neither a local directory nor a Hub model name");
    // revision that does not exist
    HubOptions o;
    hub_options_default(&o);
    o.quiet = true;
    o.revision = "v9";
    assert_int_equal(hub_fetch_model("org/tiny-t5", &o, dir, sizeof dir, err, sizeof err), -1);
    assert_contains(err, "revision 'v9' of org/tiny-t5 does not exist");
}

static void test_5xx_retried(void** state) {
    (void)state;
    fresh_cache("retry");
    hub_server_clear_log(&srv);
    hub_server_faults(&srv, "[{\"match\": \"config.json\", \"method\": \"HEAD\", \"status\": 503, \"times\": 2},"
                            " {\"match\": \"/lfs/\", \"method\": \"GET\", \"status\": 500, \"times\": 1}]");
    char dir[4096], err[4096];
    if (fetch("org/tiny-t5", dir, err) != 0) fail_msg("%s", err);
    assert_int_equal(hub_server_wait_count(&srv, "config.json", " 503 ", 2), 2);
    assert_int_equal(hub_server_wait_count(&srv, "GET /lfs/", " 500 ", 1), 1);
    // a server that keeps failing: a clear error after the retries, nothing placed
    fresh_cache("retry2");
    hub_server_faults(&srv, "[{\"match\": \"config.json\", \"status\": 502, \"times\": 100}]");
    assert_int_equal(fetch("org/tiny-t5", dir, err), -1);
    assert_contains(err, "HTTP 502");
    hub_server_faults(&srv, "[]");
}

static void test_interrupted_transfer_resumes(void** state) {
    (void)state;
    fresh_cache("resume");
    hub_server_clear_log(&srv);
    char rule[256];
    snprintf(rule, sizeof rule, "[{\"match\": \"/lfs/%s\", \"method\": \"GET\", \"truncate\": 100000}]", model_sha);
    hub_server_faults(&srv, rule);
    char dir[4096], err[4096], p[4200], hex[65];
    if (fetch("org/tiny-t5", dir, err) != 0) fail_msg("%s", err);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(sha256_file_hex(p, hex), 0);
    assert_string_equal(hex, model_sha);
    char lfs[128];
    snprintf(lfs, sizeof lfs, "GET /lfs/%s", model_sha);
    assert_int_equal(hub_server_wait_count(&srv, lfs, NULL, 2), 2);
    assert_int_equal(hub_server_last_bytes(&srv, lfs), MODEL_BYTES - 100000);  // the rest only
    hub_server_faults(&srv, "[]");
}

static void test_partial_blob_from_earlier_run(void** state) {
    (void)state;
    const char* cache = fresh_cache("partial");
    hub_server_faults(&srv, "[]");
    // an earlier run died after 123456 bytes
    char rel[256];
    snprintf(rel, sizeof rel, "models--org--tiny-t5/blobs/%s.incomplete", model_sha);
    char src[1024], cmd[4096];
    snprintf(src, sizeof src, "%s/org/tiny-t5/model.safetensors", served);
    dl_mkdirs(cache);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/models--org--tiny-t5/blobs && head -c 123456 %s > %s/%s", cache, src, cache,
             rel);
    assert_int_equal(t5test_run(NULL, 0, "%s", cmd), 0);
    hub_server_clear_log(&srv);
    char dir[4096], err[4096];
    if (fetch("org/tiny-t5", dir, err) != 0) fail_msg("%s", err);
    char lfs[128];
    snprintf(lfs, sizeof lfs, "GET /lfs/%s", model_sha);
    assert_int_equal(hub_server_wait_count(&srv, lfs, NULL, 1), 1);
    assert_int_equal(hub_server_last_bytes(&srv, lfs), MODEL_BYTES - 123456);
}

static void test_wrong_checksum(void** state) {
    (void)state;
    const char* cache = fresh_cache("corrupt");
    char rule[256];
    // corrupted twice: an error, and nothing placed in blobs/
    snprintf(rule, sizeof rule, "[{\"match\": \"/lfs/%s\", \"method\": \"GET\", \"corrupt\": true, \"times\": 2}]",
             model_sha);
    hub_server_faults(&srv, rule);
    char dir[4096], err[4096], p[4200];
    assert_int_equal(fetch("org/tiny-t5", dir, err), -1);
    assert_contains(err, "sha256");
    snprintf(p, sizeof p, "%s/models--org--tiny-t5/blobs/%s", cache, model_sha);
    assert_false(t5_path_exists(p));
    // corrupted once: caught, fetched again, fine
    fresh_cache("corrupt1");
    snprintf(rule, sizeof rule, "[{\"match\": \"/lfs/%s\", \"method\": \"GET\", \"corrupt\": true, \"times\": 1}]",
             model_sha);
    hub_server_faults(&srv, rule);
    if (fetch("org/tiny-t5", dir, err) != 0) fail_msg("%s", err);
    hub_server_faults(&srv, "[]");
}

static void test_offline(void** state) {
    (void)state;
    fresh_cache("offline");
    hub_server_faults(&srv, "[]");
    char dir[4096], dir2[4096], err[4096];
    setenv("HF_HUB_OFFLINE", "1", 1);
    assert_int_equal(fetch("org/tiny-t5", dir, err), -1);
    assert_contains(err, "HF_HUB_OFFLINE is set and org/tiny-t5");
    unsetenv("HF_HUB_OFFLINE");
    if (fetch("org/tiny-t5", dir, err) != 0) fail_msg("%s", err);
    hub_server_clear_log(&srv);
    setenv("HF_HUB_OFFLINE", "1", 1);
    int rc = fetch("org/tiny-t5", dir2, err);
    unsetenv("HF_HUB_OFFLINE");
    if (rc != 0) fail_msg("%s", err);
    assert_string_equal(dir, dir2);
    usleep(200000);  // let a request, if any, reach the log
    assert_int_equal(hub_server_count(&srv, NULL, NULL), 0);
}

static void test_two_processes_race(void** state) {
    (void)state;
    fresh_cache("race");
    char rule[256];
    // slow transfer (5 chunks x 0.15 s) so that the two overlap
    snprintf(rule, sizeof rule, "[{\"match\": \"/lfs/%s\", \"method\": \"GET\", \"delay\": 0.15, \"times\": 5}]",
             model_sha);
    hub_server_faults(&srv, rule);
    hub_server_clear_log(&srv);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            char dir[4096], err[4096];
            int rc = fetch("org/tiny-t5", dir, err);
            if (rc != 0) fprintf(stderr, "child %d: %s\n", k, err);
            _exit(rc == 0 ? 0 : 1);
        }
    }
    for (int k = 0; k < 2; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    char lfs[128];
    snprintf(lfs, sizeof lfs, "GET /lfs/%s", model_sha);
    assert_int_equal(hub_server_wait_count(&srv, lfs, NULL, 1), 1);  // one downloaded, the other waited on the lock
    char dir[4096], err[4096], p[4200], hex[65];
    if (fetch("org/tiny-t5", dir, err) != 0) fail_msg("%s", err);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(sha256_file_hex(p, hex), 0);
    assert_string_equal(hex, model_sha);
    hub_server_faults(&srv, "[]");
}

static void test_repo_id_and_folder(void** state) {
    (void)state;
    char f[256];
    hub_cache_repo_folder("model", "google/flan-t5-xl", f, sizeof f);
    assert_string_equal(f, "models--google--flan-t5-xl");
    hub_cache_repo_folder("model", "t5-small", f, sizeof f);
    assert_string_equal(f, "models--t5-small");
    assert_true(hub_is_repo_id("t5-small"));
    assert_true(hub_is_repo_id("google-t5/t5-small"));
    assert_false(hub_is_repo_id("/abs/path"));
    assert_false(hub_is_repo_id("a/b/c"));
    assert_false(hub_is_repo_id("../x"));
    assert_false(hub_is_repo_id("org/"));
}

static void test_no_libcurl(void** state) {
    (void)state;
    print_message("built without the libcurl headers (T5_HAVE_CURL): download tests skipped\n");
    skip();
}

int main(void) {
    if (!dynlib_have_curl()) {
        const struct CMUnitTest none[] = {cmocka_unit_test(test_no_libcurl)};
        return cmocka_run_group_tests(none, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repo_id_and_folder),
        cmocka_unit_test(test_fresh_download_layout),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_pytorch_only_and_unknown_repos),
        cmocka_unit_test(test_5xx_retried),
        cmocka_unit_test(test_interrupted_transfer_resumes),
        cmocka_unit_test(test_partial_blob_from_earlier_run),
        cmocka_unit_test(test_wrong_checksum),
        cmocka_unit_test(test_offline),
        cmocka_unit_test(test_two_processes_race),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
