/*
 * test_model_lookup.c: --model resolution on a fake HuggingFace cache in a temp dir: both repo-folder
 * spellings (models--t5-3b, models--google-t5--t5-3b), refs/main preferred over a newer snapshot, the
 * newest snapshot when refs/main is absent, local directories, sharded weights, the tokenizer, and the
 * error messages (every place looked at, the download hint, the pytorch_model.bin conversion hint).
 */
#include <unistd.h>

#include "t5test.h"

#include "../model/model_lookup.h"
#include "../src/base/common.h"

static char hub[512], home[512];

static void mk(const char* rel, const char* text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", hub, rel);
    char* slash = strrchr(p, '/');
    *slash = 0;
    assert_int_equal(t5_mkdir_p(p), 0);
    *slash = '/';
    t5test_write_file(p, text);
}

static int setup(void** state) {
    (void)state;
    snprintf(hub, sizeof hub, "%s/cache/hub", t5test_tmpdir());
    snprintf(home, sizeof home, "%s/home", t5test_tmpdir());
    t5_mkdir_p(hub);
    t5_mkdir_p(home);
    // only our fake cache is visible
    setenv("HF_HUB_CACHE", hub, 1);
    unsetenv("HUGGINGFACE_HUB_CACHE");
    unsetenv("HF_HOME");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", home, 1);
    // layout 1: the old name, models--t5-3b, with refs/main
    mk("models--t5-3b/refs/main", "abc123\n");
    mk("models--t5-3b/snapshots/abc123/config.json", "{}");
    mk("models--t5-3b/snapshots/abc123/model.safetensors", "x");
    mk("models--t5-3b/snapshots/abc123/spiece.model", "x");
    // layout 2: the new org name, with refs/main naming the OLDER snapshot (it must win)
    mk("models--google-t5--t5-small/refs/main", "old");
    mk("models--google-t5--t5-small/snapshots/old/config.json", "{}");
    mk("models--google-t5--t5-small/snapshots/old/model.safetensors", "x");
    mk("models--google-t5--t5-small/snapshots/new/config.json", "{}");
    mk("models--google-t5--t5-small/snapshots/new/model.safetensors", "x");
    // no refs/main: the newest snapshot with a config.json; sharded weights; tokenizer.json only
    mk("models--google--flan-t5-xl/snapshots/r1/config.json", "{}");
    mk("models--google--flan-t5-xl/snapshots/r1/model.safetensors", "x");
    mk("models--google--flan-t5-xl/snapshots/r2/config.json", "{}");
    mk("models--google--flan-t5-xl/snapshots/r2/model.safetensors.index.json", "{}");
    mk("models--google--flan-t5-xl/snapshots/r2/model-00001-of-00002.safetensors", "x");
    mk("models--google--flan-t5-xl/snapshots/r2/tokenizer.json", "{}");
    mk("models--google--flan-t5-xl/snapshots/r3-incomplete/.keep", "");
    char cmd[4096], out[256];
    // make r2 the newest, r3 newer still but without config.json
    snprintf(cmd, sizeof cmd,
             "touch -d '2020-01-01' %s/models--google--flan-t5-xl/snapshots/r1 && "
             "touch -d '2021-01-01' %s/models--google--flan-t5-xl/snapshots/r2 && "
             "touch -d '2022-01-01' %s/models--google--flan-t5-xl/snapshots/r3-incomplete && "
             "touch -d '2020-01-01' %s/models--google-t5--t5-small/snapshots/old",
             hub, hub, hub, hub);
    assert_int_equal(t5test_run(out, sizeof out, "%s", cmd), 0);
    // PyTorch-only checkpoint
    mk("models--t5-base/refs/main", "p1");
    mk("models--t5-base/snapshots/p1/config.json", "{}");
    mk("models--t5-base/snapshots/p1/pytorch_model.bin", "x");
    // config without weights
    mk("models--t5-large/snapshots/c1/config.json", "{}");
    return 0;
}

static void test_old_name_layout(void** state) {
    (void)state;
    ModelLocation l;
    char err[MODEL_LOOKUP_ERRLEN];
    if (model_lookup("t5-3b", MODEL_NEED_WEIGHTS, &l, err, sizeof err) != 0) fail_msg("%s", err);
    assert_contains(l.dir, "models--t5-3b/snapshots/abc123");
    assert_int_equal(l.weights, MODEL_WEIGHTS_SAFETENSORS);
    assert_contains(l.weights_path, "abc123/model.safetensors");
    assert_contains(l.config_path, "abc123/config.json");
    assert_int_equal(l.tokenizer, MODEL_TOKENIZER_SPIECE);
    assert_true(l.from_cache);
    // the org-prefixed name finds the same folder
    if (model_lookup("google-t5/t5-3b", MODEL_NEED_WEIGHTS, &l, err, sizeof err) != 0) fail_msg("%s", err);
    assert_contains(l.dir, "models--t5-3b/snapshots/abc123");
}

static void test_new_name_layout_refs_main(void** state) {
    (void)state;
    ModelLocation l;
    char err[MODEL_LOOKUP_ERRLEN];
    if (model_lookup("t5-small", MODEL_NEED_WEIGHTS, &l, err, sizeof err) != 0) fail_msg("%s", err);
    assert_contains(l.dir, "models--google-t5--t5-small/snapshots/old");  // refs/main, not the newest
    assert_int_equal(l.tokenizer, MODEL_TOKENIZER_NONE);
    if (model_lookup("google-t5/t5-small", MODEL_NEED_WEIGHTS, &l, err, sizeof err) != 0) fail_msg("%s", err);
    assert_contains(l.dir, "models--google-t5--t5-small/snapshots/old");
}

static void test_newest_snapshot_and_sharded(void** state) {
    (void)state;
    ModelLocation l;
    char err[MODEL_LOOKUP_ERRLEN];
    if (model_lookup("google/flan-t5-xl", MODEL_NEED_WEIGHTS, &l, err, sizeof err) != 0) fail_msg("%s", err);
    assert_contains(l.dir, "snapshots/r2");
    assert_int_equal(l.weights, MODEL_WEIGHTS_SAFETENSORS_SHARDED);
    assert_contains(l.weights_path, "model.safetensors.index.json");
    assert_int_equal(l.tokenizer, MODEL_TOKENIZER_JSON);
    if (model_lookup("flan-t5-xl", MODEL_NEED_WEIGHTS, &l, err, sizeof err) != 0) fail_msg("%s", err);
    assert_contains(l.dir, "snapshots/r2");
}

static void test_tokenizer_lookup(void** state) {
    (void)state;
    char path[MODEL_LOOKUP_PATHLEN], err[MODEL_LOOKUP_ERRLEN];
    assert_int_equal(model_lookup_tokenizer("t5-3b", path, sizeof path, err, sizeof err), 0);
    assert_contains(path, "abc123/spiece.model");
    assert_int_equal(model_lookup_tokenizer("t5-small", path, sizeof path, err, sizeof err), -1);
    assert_contains(err, "no spiece.model or tokenizer.json");
}

static void test_local_directory(void** state) {
    (void)state;
    ModelLocation l;
    char err[MODEL_LOOKUP_ERRLEN], dir[4200];
    snprintf(dir, sizeof dir, "%s/test/fixtures/t5/tiny_v11", t5test_repo_dir());
    if (model_lookup(dir, MODEL_NEED_WEIGHTS, &l, err, sizeof err) != 0) fail_msg("%s", err);
    assert_string_equal(l.dir, dir);
    assert_int_equal(l.weights, MODEL_WEIGHTS_SAFETENSORS);
    assert_false(l.from_cache);
    // a local directory that lacks weights is an error about that directory (no silent cache fallback)
    char empty[600];
    snprintf(empty, sizeof empty, "%s/t5-3b", t5test_tmpdir());
    t5_mkdir_p(empty);
    char cfg[700];
    snprintf(cfg, sizeof cfg, "%s/config.json", empty);
    t5test_write_file(cfg, "{}");
    assert_int_equal(model_lookup(empty, MODEL_NEED_WEIGHTS, &l, err, sizeof err), -1);
    assert_contains(err, empty);
    assert_contains(err, "config.json but no model.safetensors");
    // a file is not a model directory
    assert_int_equal(model_lookup(cfg, MODEL_NEED_WEIGHTS, &l, err, sizeof err), -1);
    assert_contains(err, "is a file");
}

static void test_not_found_lists_places(void** state) {
    (void)state;
    ModelLocation l;
    char err[MODEL_LOOKUP_ERRLEN];
    assert_int_equal(model_lookup("t5-11b", MODEL_NEED_WEIGHTS, &l, err, sizeof err), -1);
    assert_contains(err, "model 't5-11b' not found");
    char want[1024];
    snprintf(want, sizeof want, "%s/models--t5-11b: not there", hub);
    assert_contains(err, want);
    snprintf(want, sizeof want, "%s/models--google-t5--t5-11b: not there", hub);
    assert_contains(err, want);
    snprintf(want, sizeof want, "%s/.cache/huggingface/hub: cache folder does not exist", home);
    assert_contains(err, want);
    assert_contains(err, "scripts/download_model.sh t5-11b");
    // a repo that has config.json but no weights says so
    assert_int_equal(model_lookup("t5-large", MODEL_NEED_WEIGHTS, &l, err, sizeof err), -1);
    assert_contains(err, "snapshots/c1: config.json but no model.safetensors");
    // the roots that exist
    char** roots = model_lookup_cache_roots();
    assert_non_null(roots[0]);
    assert_string_equal(roots[0], hub);
    assert_null(roots[1]);
    model_lookup_free_list(roots);
}

static void test_pytorch_bin_only(void** state) {
    (void)state;
    ModelLocation l;
    char err[MODEL_LOOKUP_ERRLEN];
    assert_int_equal(model_lookup("t5-base", MODEL_NEED_WEIGHTS, &l, err, sizeof err), -1);
    assert_contains(err, "only PyTorch weights (pytorch_model.bin)");
    assert_contains(err, "python3 scripts/convert_bin_to_safetensors.py");
    assert_contains(err, "models--t5-base/snapshots/p1");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_old_name_layout),         cmocka_unit_test(test_new_name_layout_refs_main),
        cmocka_unit_test(test_newest_snapshot_and_sharded), cmocka_unit_test(test_tokenizer_lookup),
        cmocka_unit_test(test_local_directory),         cmocka_unit_test(test_not_found_lists_places),
        cmocka_unit_test(test_pytorch_bin_only),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
