/*
 * test_download_wmt16.c: WMT16 ro-en prepared from its sources, served by the loopback server: synthetic
 * copies of the three archives (test/make_wmt16_fixtures.py: same member names, the builder's corner cases)
 * give exactly the splits HF's builder rules give (compared as JSON); a second run downloads nothing; an
 * interrupted archive transfer resumes; a wrong checksum and a missing file are clear errors; the real
 * sources table holds the builder's recorded URLs and checksums.
 */
#include "download_util.h"

#include "../src/base/common.h"
#include "../src/download/dynlib.h"
#include "../src/download/wmt16_sources.h"

static HubServer srv;
static char served[512], mirror[256];
static Wmt16Source sources[WMT16_NSRC];
static char names[WMT16_NSRC][64], shas[WMT16_NSRC][65];

static int setup(void** state) {
    (void)state;
    snprintf(served, sizeof served, "%s/served", t5test_tmpdir());
    dl_mkdirs(served);
    char out[4096];
    if (t5test_run(out, sizeof out, "python3 %s/test/make_wmt16_fixtures.py %s", t5test_repo_dir(), served) != 0)
        fail_msg("fixtures: %s", out);
    char p[600];
    snprintf(p, sizeof p, "%s/sums.txt", served);
    FILE* f = fopen(p, "r");
    assert_non_null(f);
    for (int i = 0; i < WMT16_NSRC; i++) {
        long long size = 0;
        assert_int_equal(fscanf(f, "%63s %64s %lld", names[i], shas[i], &size), 3);
        sources[i].name = names[i];
        sources[i].url = "unused: the mirror is set";
        sources[i].sha256 = shas[i];
        sources[i].size = size;
    }
    fclose(f);
    hub_server_start(&srv, served);
    snprintf(mirror, sizeof mirror, "%s/files", srv.endpoint);
    setenv("T5TRAIN_HTTP_RETRY_BASE_S", "0.01", 1);
    return 0;
}

static int teardown(void** state) {
    (void)state;
    hub_server_stop(&srv);
    return 0;
}

static int prepare(const char* dir, const Wmt16Source* src, char* err) {
    Wmt16Options o;
    memset(&o, 0, sizeof o);
    o.sources = src;
    o.mirror = mirror;
    o.quiet = true;
    return wmt16_prepare(dir, &o, err, 4096);
}

static void compare_splits(const char* data_dir) {
    char out[8192];
    int rc = t5test_run(out, sizeof out,
                        "python3 -c 'import json,sys\n"
                        "for s in (\"train\",\"validation\",\"test\"):\n"
                        "    a=[json.loads(l) for l in open(\"%s/wmt16-ro-en/\"+s+\".jsonl\")]\n"
                        "    b=[json.loads(l) for l in open(\"%s/expected/\"+s+\".jsonl\")]\n"
                        "    if a!=b: print(s, a, b); sys.exit(1)\n'",
                        data_dir, served);
    if (rc != 0) fail_msg("the prepared splits differ from the builder's rules:\n%s", out);
}

static void test_prepare_matches_builder_rules(void** state) {
    (void)state;
    char dir[600], err[4096];
    snprintf(dir, sizeof dir, "%s/data1", t5test_tmpdir());
    hub_server_faults(&srv, "[]");
    hub_server_clear_log(&srv);
    if (prepare(dir, sources, err) != 0) fail_msg("%s", err);
    compare_splits(dir);
    assert_int_equal(hub_server_wait_count(&srv, "GET /files/", NULL, 3), 3);
    // again: the archives are reused, nothing is fetched
    hub_server_clear_log(&srv);
    if (prepare(dir, sources, err) != 0) fail_msg("%s", err);
    usleep(200000);
    assert_int_equal(hub_server_count(&srv, NULL, NULL), 0);
    compare_splits(dir);
}

static void test_interrupted_archive_resumes(void** state) {
    (void)state;
    char dir[600], err[4096];
    snprintf(dir, sizeof dir, "%s/data2", t5test_tmpdir());
    hub_server_faults(&srv, "[{\"match\": \"dev.zip\", \"method\": \"GET\", \"truncate\": 300}]");
    hub_server_clear_log(&srv);
    if (prepare(dir, sources, err) != 0) fail_msg("%s", err);
    compare_splits(dir);
    assert_int_equal(hub_server_wait_count(&srv, "GET /files/dev.zip", NULL, 2), 2);
    assert_int_equal(hub_server_last_bytes(&srv, "GET /files/dev.zip"), sources[WMT16_SRC_DEV].size - 300);
    hub_server_faults(&srv, "[]");
}

static void test_wrong_checksum_and_missing(void** state) {
    (void)state;
    char dir[600], err[4096], p[700];
    snprintf(dir, sizeof dir, "%s/data3", t5test_tmpdir());
    hub_server_faults(&srv, "[]");
    Wmt16Source bad[WMT16_NSRC];
    memcpy(bad, sources, sizeof bad);
    bad[WMT16_SRC_SETIMES].sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    assert_int_equal(prepare(dir, bad, err), -1);
    assert_contains(err, "en-ro.tmx.gz");
    assert_contains(err, "does not match the recorded");
    snprintf(p, sizeof p, "%s/downloads/en-ro.tmx.gz", dir);
    assert_false(t5_path_exists(p));
    snprintf(p, sizeof p, "%s/wmt16-ro-en/train.jsonl", dir);
    assert_false(t5_path_exists(p));
    memcpy(bad, sources, sizeof bad);
    bad[WMT16_SRC_DEV].name = "no-such.zip";
    snprintf(dir, sizeof dir, "%s/data4", t5test_tmpdir());
    assert_int_equal(prepare(dir, bad, err), -1);
    assert_contains(err, "HTTP 404");
}

static void test_recorded_sources(void** state) {
    (void)state;
    // the builder's URLs and checksums (HF datasets' wmt16 dataset_infos.json, config ro-en)
    assert_string_equal(WMT16_RO_EN_SOURCES[WMT16_SRC_EUROPARL].sha256,
                        "387e570a6812948e30c64885e64a1d3735a66b7c0bc424fcff1208ef11110149");
    assert_int_equal(WMT16_RO_EN_SOURCES[WMT16_SRC_SETIMES].size, 23458958);
    assert_contains(WMT16_RO_EN_SOURCES[WMT16_SRC_DEV].url, "wmt19/resolve/main-zip/translation-task/dev.zip");
}

static void test_no_libs(void** state) {
    (void)state;
    print_message("built without the libcurl / libarchive headers: download tests skipped\n");
    skip();
}

int main(void) {
    if (!dynlib_have_curl() || !dynlib_have_archive()) {
        const struct CMUnitTest none[] = {cmocka_unit_test(test_no_libs)};
        return cmocka_run_group_tests(none, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_sources),
        cmocka_unit_test(test_prepare_matches_builder_rules),
        cmocka_unit_test(test_interrupted_archive_resumes),
        cmocka_unit_test(test_wrong_checksum_and_missing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
