/*
 * test_t5test.c: the test harness's own helpers (test/t5test.c), on the CPU:
 *   - t5test_run keeps a long output's head and its tail around a marker, so a failed run's last line (its error) is
 *     in the failure message even after several ranks' config tables filled the buffer;
 *   - short output is kept whole; t5test_tail starts at a line;
 *   - t5test_weights_compare (the GPU tests' final-weights check): bits that differ and the relative L2.
 */
#include "t5test.h"

#include <math.h>

#include "../src/base/common.h"
#include "../src/base/safetensors.h"

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

// DIR/model.safetensors with tensors "a" (2, 3) = w[0..6) fp32 and "b" (2) = w[6..8) bf16
static void write_weights(const char* dir, const float* w) {
    char err[512];
    if (t5_mkdir_p(dir)) fail_msg("cannot make %s", dir);
    uint16_t b16[2];
    safetensors_convert(b16, DT_BF16, w + 6, DT_F32, 2);
    SafeTensorsWriter* sw = safetensors_writer_new();
    const int64_t sa[2] = {2, 3}, sb[1] = {2};
    if (safetensors_writer_add(sw, "a", DT_F32, 2, sa, w, err, sizeof err) ||
        safetensors_writer_add(sw, "b", DT_BF16, 1, sb, b16, err, sizeof err))
        fail_msg("%s", err);
    char* p = t5_path_join(dir, "model.safetensors");
    if (safetensors_writer_write_file(sw, p, err, sizeof err)) fail_msg("%s", err);
    free(p);
    safetensors_writer_free(sw);
}

static void test_weights_compare(void** state) {
    (void)state;
    char a[600], b[600], c[600];
    snprintf(a, sizeof a, "%s/wc_a", t5test_tmpdir());
    snprintf(b, sizeof b, "%s/wc_b", t5test_tmpdir());
    snprintf(c, sizeof c, "%s/wc_c", t5test_tmpdir());
    const float w[8] = {1, 2, 3, 4, 5, 6, 0.5f, -2};
    float v[8];
    memcpy(v, w, sizeof v);
    write_weights(a, w);
    write_weights(b, w);
    double r = -1;
    assert_int_equal(t5test_weights_compare(a, b, &r), 0);
    assert_true(r == 0);
    v[1] = 2.5f;   // fp32 tensor: one element, by 0.5
    v[7] = -2.5f;  // bf16 tensor (exact in bf16): by 0.5
    write_weights(c, v);
    assert_int_equal(t5test_weights_compare(a, c, &r), 2);
    const double want = sqrt(0.5 / (91 + 0.25 + 4));  // ||d||^2 = 0.25 + 0.25, ||a||^2 = 1+4+9+16+25+36 + 0.25 + 4
    assert_true(fabs(r - want) < 1e-12);
    // a sign bit alone (0 against -0) differs in the bits, not in value: counted
    float z[8];
    memcpy(z, w, sizeof z);
    z[1] = 0.0f;
    write_weights(a, z);
    memcpy(v, z, sizeof v);
    v[1] = -0.0f;
    write_weights(c, v);
    assert_int_equal(t5test_weights_compare(a, c, NULL), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_short_output_whole),
        cmocka_unit_test(test_run_long_output_head_and_tail),
        cmocka_unit_test(test_run_exact_fit),
        cmocka_unit_test(test_weights_compare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
