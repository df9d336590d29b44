/*
 * test_env_cmd.c: `t5train --version` and `t5train env` (src/cli/version.c, src/cli/env_cmd.c): the items a
 * bug report needs are there, with or without a GPU; secrets are never printed; the folders' free space is
 * read from the nearest existing parent; bad arguments exit 2 with one line.
 */
#include <jansson.h>
#include <math.h>
#include <sys/statvfs.h>

#include "t5test.h"

static char out[1 << 16];

static json_t* env_json(const char* extra_env, const char* args) {
    int rc = t5test_run(out, sizeof out, "%s '%s' env --json %s 2>/dev/null", extra_env, t5test_bin(), args);
    assert_int_equal(rc, 0);
    json_error_t e;
    json_t* o = json_loads(out, 0, &e);
    if (!o) fail_msg("env --json is not JSON (%s): %.300s", e.text, out);
    return o;
}

static const char* str(json_t* o, const char* key) {
    const char* s = json_string_value(json_object_get(o, key));
    if (!s) fail_msg("env --json has no string '%s'", key);
    return s;
}

static void test_version(void** state) {
    (void)state;
    assert_int_equal(t5test_run(out, sizeof out, "'%s' --version", t5test_bin()), 0);
    // one line per component, the name then dots then the value
    const char* want[] = {"t5train ....", "built for ....", "CUDA runtime ....", "CUDA driver ....", "cuBLASLt ....",
                          "NCCL ....", "MPI ...."};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(out, want[i])) fail_msg("--version lacks '%s':\n%s", want[i], out);
    assert_non_null(strstr(out, "0.1.0 (git "));
    assert_non_null(strstr(out, "(built with "));  // cuBLASLt and NCCL: found at run time beside the headers'
    assert_null(strstr(out, "unknown flag"));
}

static void test_env_items(void** state) {
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/out/not/yet", t5test_tmpdir());
    char args[1200];
    snprintf(args, sizeof args, "--output_dir '%s' --data_dir '%s'", dir, t5test_tmpdir());
    json_t* o = env_json("", args);
    const char* keys[] = {"t5train", "built for", "CUDA runtime", "CUDA driver", "cuBLASLt", "NCCL", "MPI", "GPUs",
                          "CPU", "host memory", "locked-memory limit", "HF hub cache", "data folder", "token cache",
                          "output_dir", "libcurl", "libarchive", "HF_HOME", "HF_TOKEN", "T5TRAIN_DATA"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) (void)str(o, keys[i]);
    // a folder not made yet: its nearest existing parent's file system, said so
    const char* od = str(o, "output_dir");
    assert_non_null(strstr(od, dir));
    assert_non_null(strstr(od, "(not there yet)"));
    // an existing folder: the free space statvfs gives (to the 0.1 GiB printed, allowing for other writers)
    const char* dd = str(o, "data folder");
    assert_null(strstr(dd, "not there yet"));
    struct statvfs s;
    assert_int_equal(statvfs(t5test_tmpdir(), &s), 0);
    double want_gib = (double)s.f_bavail * s.f_frsize / (1024.0 * 1024.0 * 1024.0), got = -1;
    const char* colon = strrchr(dd, ':');
    assert_non_null(colon);
    assert_int_equal(sscanf(colon + 1, " %lf GiB free", &got), 1);
    assert_true(fabs(got - want_gib) < 0.5);
    // with a GPU its line says whether this binary runs on it; without one, that there is none
    if (t5test_have_gpu()) {
        assert_non_null(strstr(str(o, "GPU 0"), "sm_"));
    } else {
        assert_true(strncmp(str(o, "GPUs"), "none (", 6) == 0);
        assert_null(json_object_get(o, "GPU 0"));
    }
    json_decref(o);
}

static void test_env_secrets_and_variables(void** state) {
    (void)state;
    json_t* o = env_json("HF_TOKEN=hf_dont_print_me NCCL_DEBUG=INFO HF_ENDPOINT=http://127.0.0.1:9", "");
    assert_string_equal(str(o, "HF_TOKEN"), "(set, not shown)");
    assert_null(strstr(out, "hf_dont_print_me"));
    assert_string_equal(str(o, "NCCL_DEBUG"), "INFO");
    assert_string_equal(str(o, "HF_ENDPOINT"), "http://127.0.0.1:9");
    json_decref(o);
    // the text form carries the same, one "name .... value" line each
    assert_int_equal(t5test_run(out, sizeof out, "HF_TOKEN=hf_dont_print_me '%s' env", t5test_bin()), 0);
    assert_non_null(strstr(out, "HF_TOKEN ...."));
    assert_null(strstr(out, "hf_dont_print_me"));
}

static void test_env_bad_arguments(void** state) {
    (void)state;
    const char* bad[] = {"--bogus", "--output_dir", "--cache_dir ''", "extra"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = t5test_run(out, sizeof out, "'%s' env %s", t5test_bin(), bad[i]);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(out, "t5train: error: env: "));
        assert_null(strchr(strchr(out, '\n') ? strchr(out, '\n') + 1 : out, '\n'));  // one line
    }
    assert_int_equal(t5test_run(out, sizeof out, "'%s' env --help", t5test_bin()), 0);
    assert_non_null(strstr(out, "usage: t5train env"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_env_items),
        cmocka_unit_test(test_env_secrets_and_variables),
        cmocka_unit_test(test_env_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
