/*
 * test_download_main.c: the main job's download part, through the binary, against the loopback Hub
 * (test/hub_server.py) serving a tiny T5 ("t5-tiny": test/fixtures/t5/tiny_v10 + the real spiece.model) and
 * synthetic WMT16 ro-en archives (test/make_wmt16_fixtures.py):
 *   - from an empty HF cache and data folder, --dry_run lists what a run would download (the model's files with
 *     their sizes, the three WMT16 archives) after HEAD requests only, and writes nothing (no HF cache folder, no
 *     data folder, no output_dir; exit 0);
 *   - the README-style command line (--model_name_or_path, --dataset_name wmt16 --dataset_config ro-en,
 *     do_train/eval/predict), stopped at the GPU by CUDA_VISIBLE_DEVICES=-1, fetches the model into the HF cache
 *     layout and prepares the three splits; the dry run then checks them (exit 0);
 *   - run again (dry run, then a real run stopped at the GPU by CUDA_VISIBLE_DEVICES=-1): no request at all;
 *   - --model_revision <commit> and --cache_dir DIR; a revision the Hub does not have; HF_HUB_OFFLINE=1 with an
 *     empty cache: one error line, exit 2.
 * On a GPU machine the real run trains; this test stops it at the GPU so that it runs the same everywhere.
 */
#include "download_util.h"

#include "../src/base/common.h"
#include "../src/download/dynlib.h"

static HubServer srv;
static char served[512], env_base[4096];
static char text[1 << 17];

static int setup(void** state) {
    (void)state;
    if (!t5test_data_dir()) return 0;
    snprintf(served, sizeof served, "%s/served", t5test_tmpdir());
    char out[4096];
    int rc = t5test_run(out, sizeof out,
                        "mkdir -p '%s/t5-tiny' && cp '%s/test/fixtures/t5/tiny_v10/config.json' "
                        "'%s/test/fixtures/t5/tiny_v10/model.safetensors' '%s/t5-spiece/spiece.model' '%s/t5-tiny/' && "
                        "python3 '%s/test/make_wmt16_fixtures.py' '%s'",
                        served, t5test_repo_dir(), t5test_repo_dir(), t5test_data_dir(), served, t5test_repo_dir(),
                        served);
    if (rc != 0) fail_msg("fixtures: %s", out);
    hub_server_start(&srv, served);
    // no other cache, no shared data, the loopback Hub and WMT16 mirror, fast retries
    snprintf(env_base, sizeof env_base,
             "env -u T5TRAIN_DATA -u HF_HUB_CACHE -u HUGGINGFACE_HUB_CACHE -u XDG_CACHE_HOME -u HF_HUB_OFFLINE "
             "-u TRANSFORMERS_OFFLINE -u HF_DATASETS_OFFLINE -u HF_TOKEN HOME=%s/home HF_HOME=%s/home/hf "
             "T5TRAIN_CACHE=%s/tok HF_ENDPOINT=%s T5TRAIN_WMT16_MIRROR=%s/files "
             "T5TRAIN_WMT16_SOURCES=%s/sums.txt T5TRAIN_HTTP_RETRY_BASE_S=0.01",
             t5test_tmpdir(), t5test_tmpdir(), t5test_tmpdir(), srv.endpoint, srv.endpoint, served);
    return 0;
}

static int teardown(void** state) {
    (void)state;
    hub_server_stop(&srv);
    return 0;
}

// the main job's command line, with extra flags
static int run_job(const char* env_extra, const char* extra) {
    return t5test_run(text, sizeof text,
                      "cd '%s' && %s %s %s --model_name_or_path t5-tiny --dataset_name wmt16 --dataset_config ro-en "
                      "--source_lang en --target_lang ro --source_prefix 'translate English to Romanian: ' "
                      "--do_train --do_eval --do_predict --predict_with_generate --max_steps 2 "
                      "--per_device_train_batch_size 2 --output_dir %s/out --overwrite_output_dir %s 2>&1",
                      t5test_tmpdir(), env_base, env_extra, t5test_bin(), t5test_tmpdir(), extra);
}

static int requests(void) {
    // the server logs after answering: give the last line a moment
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return hub_server_count(&srv, NULL, NULL);
}

static void read_ref(char* commit, size_t n) {
    char p[700];
    snprintf(p, sizeof p, "%s/home/hf/hub/models--t5-tiny/refs/main", t5test_tmpdir());
    FILE* f = fopen(p, "r");
    if (!f) fail_msg("no refs/main in the HF cache (%s)", p);
    if (!fgets(commit, (int)n, f)) commit[0] = 0;
    fclose(f);
    commit[strcspn(commit, "\n")] = 0;
}

static void test_fresh_then_cached(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    hub_server_clear_log(&srv);
    // a dry run from the empty caches: what would be downloaded, HEAD requests only, nothing written
    int rc = run_job("", "--dry_run");
    if (rc != 0) fail_msg("dry run from empty caches: exit %d:\n%s", rc, text);
    assert_contains(text, "dry run: would download 3 files");
    assert_contains(text, "of model t5-tiny (revision main, commit ");
    assert_contains(text, "dry run:   config.json (");
    assert_contains(text, "dry run:   model.safetensors (");
    assert_contains(text, "dry run:   spiece.model (");
    assert_contains(text, "dry run: would download 3 of the 3 WMT16 ro-en source archives");
    assert_contains(text, "dry run: nothing was downloaded or created");
    assert_null(strstr(text, "fetching"));
    assert_int_equal(requests(), hub_server_count(&srv, "HEAD ", NULL));  // only HEAD requests
    assert_int_equal(hub_server_count(&srv, "GET ", NULL), 0);
    char p0[800];
    snprintf(p0, sizeof p0, "%s/home/hf", t5test_tmpdir());
    if (t5_path_exists(p0)) fail_msg("the dry run created %s", p0);
    snprintf(p0, sizeof p0, "%s/home/.cache/t5train", t5test_tmpdir());
    if (t5_path_exists(p0)) fail_msg("the dry run created %s", p0);
    snprintf(p0, sizeof p0, "%s/out", t5test_tmpdir());
    if (t5_path_exists(p0)) fail_msg("the dry run created %s", p0);

    // the real run downloads (stopped at the GPU once everything is there, so the same with or without one)
    hub_server_clear_log(&srv);
    rc = run_job("CUDA_VISIBLE_DEVICES=-1", "");
    if (rc == 0) fail_msg("the run did not stop at the GPU:\n%s", text);
    assert_contains(text, "fetching t5-tiny (revision main)");
    assert_contains(text, "wmt16 ro-en: no train split on disk");
    assert_contains(text, "wmt16-ro-en/train.jsonl");  // tokenized, then stopped at the GPU
    // what came over the wire: the model's files (config, weights, tokenizer) and the three archives
    assert_int_equal(hub_server_count(&srv, "GET /lfs/", NULL), 2);
    assert_int_equal(hub_server_count(&srv, "GET /t5-tiny/resolve/main/config.json", NULL), 1);
    assert_int_equal(hub_server_count(&srv, "GET /files/", NULL), 3);
    // the dry run now checks what is there
    rc = run_job("", "--dry_run");
    if (rc != 0) fail_msg("dry run after the download: exit %d:\n%s", rc, text);
    assert_contains(text, "dry run: every check passed");
    // the HF cache layout (what transformers reads) and the prepared splits where dataset.c looks
    char commit[128];
    read_ref(commit, sizeof commit);
    assert_int_equal((int)strlen(commit), 40);
    const char* files[] = {"config.json", "model.safetensors", "spiece.model"};
    for (size_t i = 0; i < T5_ARRAY_LEN(files); i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/home/hf/hub/models--t5-tiny/snapshots/%s/%s", t5test_tmpdir(), commit, files[i]);
        if (!t5_is_file(p)) fail_msg("missing %s", p);
        assert_contains(text, commit);  // the dry run checked the snapshot's files
    }
    const char* splits[] = {"train", "validation", "test"};
    for (size_t i = 0; i < T5_ARRAY_LEN(splits); i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/home/.cache/t5train/data/wmt16-ro-en/%s.jsonl", t5test_tmpdir(), splits[i]);
        if (!t5_is_file(p)) fail_msg("missing %s", p);
    }
    char out[800];
    snprintf(out, sizeof out, "%s/out", t5test_tmpdir());
    assert_false(t5_path_exists(out) && !t5_is_dir(out));  // the GPU-less run may leave only an output_dir

    // again: nothing is requested, the dry run passes from the caches
    hub_server_clear_log(&srv);
    rc = run_job("", "--dry_run");
    if (rc != 0) fail_msg("second run: exit %d:\n%s", rc, text);
    assert_null(strstr(text, "fetching"));
    assert_null(strstr(text, "downloading"));
    assert_int_equal(requests(), 0);

    // a real run again, stopped at the GPU: still no request
    hub_server_clear_log(&srv);
    rc = run_job("CUDA_VISIBLE_DEVICES=-1", "");
    if (rc == 0) fail_msg("the run did not stop at the GPU:\n%s", text);
    assert_contains(text, "t5train: error: ");
    assert_contains(text, "GPU");
    assert_int_equal(requests(), 0);

    // the same commit by id: the complete snapshot, no request
    char flag[256];
    snprintf(flag, sizeof flag, "--model_revision %s --dry_run", commit);
    rc = run_job("", flag);
    if (rc != 0) fail_msg("--model_revision %s: exit %d:\n%s", commit, rc, text);
    assert_int_equal(requests(), 0);
}

static void test_revision_cache_dir_offline(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    // --cache_dir: the model goes there (HF's cache_dir is the hub cache folder itself); --revision is the alias
    char flag[1024];
    snprintf(flag, sizeof flag, "--cache_dir %s/cd --revision main", t5test_tmpdir());
    hub_server_clear_log(&srv);
    int rc = run_job("CUDA_VISIBLE_DEVICES=-1", flag);  // stops at the GPU, after the download
    if (rc == 0) fail_msg("--cache_dir: the run did not stop at the GPU:\n%s", text);
    assert_contains(text, "GPU");
    char p[800];
    snprintf(p, sizeof p, "%s/cd/models--t5-tiny/refs/main", t5test_tmpdir());
    if (!t5_is_file(p)) fail_msg("nothing downloaded into --cache_dir: %s", text);
    assert_int_equal(hub_server_count(&srv, "GET /lfs/", NULL), 2);
    // a revision the Hub does not have: one error line, exit 2, nothing placed for it (a run and a dry run)
    rc = run_job("", "--model_revision no-such-branch");
    assert_int_equal(rc, 2);
    assert_contains(text, "t5train: error: model 't5-tiny' (revision no-such-branch) was not downloaded");
    assert_contains(text, "no-such-branch");
    rc = run_job("", "--model_revision no-such-branch --dry_run");
    assert_int_equal(rc, 2);
    assert_contains(text, "t5train: error: model 't5-tiny' (revision no-such-branch) cannot be downloaded");
    // offline with an empty cache: the lookup's message, exit 2, no request
    hub_server_clear_log(&srv);
    snprintf(flag, sizeof flag, "HF_HUB_OFFLINE=1 HF_HOME=%s/empty_hf", t5test_tmpdir());
    rc = run_job(flag, "--dry_run");
    assert_int_equal(rc, 2);
    assert_contains(text, "t5train: error: model 't5-tiny' not found");
    assert_int_equal(requests(), 0);
    // offline with the cache filled above: works, no request
    rc = run_job("HF_HUB_OFFLINE=1", "--dry_run");
    if (rc != 0) fail_msg("offline with a cache: exit %d:\n%s", rc, text);
    assert_int_equal(requests(), 0);
}

static void test_no_libs(void** state) {
    (void)state;
    print_message("built without libcurl / libarchive headers: main-job download test skipped\n");
    skip();
}

int main(void) {
    if (!dynlib_have_curl() || !dynlib_have_archive()) {
        const struct CMUnitTest none[] = {cmocka_unit_test(test_no_libs)};
        return cmocka_run_group_tests(none, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_then_cached),
        cmocka_unit_test(test_revision_cache_dir_offline),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
