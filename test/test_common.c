/*
 * test_common.c: the error contract of src/base/common.c and the command dispatch of main.c.
 */
#include "t5test.h"

#include "../src/base/common.h"

static void test_path_join(void** state) {
    (void)state;
    char* p = t5_path_join("a/b", "c.json");
    assert_string_equal(p, "a/b/c.json");
    free(p);
    p = t5_path_join("a/", "c");
    assert_string_equal(p, "a/c");
    free(p);
}

static void test_mkdir_p(void** state) {
    (void)state;
    char* d = t5_path_join(t5test_tmpdir(), "x/y/z");
    assert_int_equal(t5_mkdir_p(d), 0);
    assert_true(t5_is_dir(d));
    assert_int_equal(t5_mkdir_p(d), 0);  // idempotent
    free(d);
}

static void test_unknown_command(void** state) {
    (void)state;
    char out[4096];
    int rc = t5test_run(out, sizeof out, "%s frobnicate", t5test_bin());
    assert_int_equal(rc, 2);
    assert_contains(out, "unknown command 'frobnicate'");
}

static void test_help_lists_commands(void** state) {
    (void)state;
    char out[4096];
    int rc = t5test_run(out, sizeof out, "%s help", t5test_bin());
    assert_int_equal(rc, 0);
    assert_contains(out, "tokenize");
    assert_contains(out, "bleu");
    assert_contains(out, "dump-grads");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_join),
        cmocka_unit_test(test_mkdir_p),
        cmocka_unit_test(test_unknown_command),
        cmocka_unit_test(test_help_lists_commands),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
