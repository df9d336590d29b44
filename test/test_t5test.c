/*
 * test_t5test.c: the test harness's own helpers (test/t5test.c), on the CPU:
 *   - t5test_run keeps a long output's head and its tail around a marker, so a failed run's last line (its error) is
 *     in the failure message even after several ranks' config tables filled the buffer;
 *   - short output is kept whole; t5test_tail starts at a line.
 */
#include "t5test.h"

#include "../src/base/common.h"

static char g_text[4096];

static void test_run_short_output_whole(void** state) {
    (void)state;
    int rc = t5test_run(g_text, sizeof g_text, "printf 'a\\nb\\n'; exit 3");
    assert_int_equal(rc, 3);
    assert_string_equal(g_text, "a\nb\n");
}

// 20,000 lines of "line N" (about 200 kB) into 4 kB: the first lines, the marker, the last line
static void test_run_long_output_head_and_tail(void** state) {
    (void)state;
    int rc = t5test_run(g_text, sizeof g_text, "seq -f 'line %%g' 1 20000; echo 'error: the last line'; exit 1");
    assert_int_equal(rc, 1);
    assert_true(strlen(g_text) < sizeof g_text);
    assert_true(strncmp(g_text, "line 1\nline 2\n", 14) == 0);
    assert_non_null(strstr(g_text, "bytes of output cut ...]"));
    const char* end = g_text + strlen(g_text) - strlen("error: the last line\n");
    assert_string_equal(end, "error: the last line\n");
    assert_non_null(strstr(g_text, "line 19999\nline 20000\n"));
    // the tail helper gives the error line, from a line start
    const char* t = t5test_tail(g_text, 40);
    assert_true(strstr(t, "error: the last line") != NULL);
    assert_true(t == g_text || t[-1] == '\n');
}

// exactly the buffer's size less one: no marker
static void test_run_exact_fit(void** state) {
    (void)state;
    t5test_run(g_text, 11, "printf '0123456789'");
    assert_string_equal(g_text, "0123456789");
    t5test_run(g_text, 11, "printf '0123456789A'");
    assert_null(strstr(g_text, "0123456789A"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_short_output_whole),
        cmocka_unit_test(test_run_long_output_head_and_tail),
        cmocka_unit_test(test_run_exact_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
