/*
 * test_label_smoothing.c: the fp64 reference of the label-smoothed cross-entropy (test/cross_entropy_ref.h,
 * which test_gpu_cross_entropy.c holds the CUDA kernel to) against
 *   - test/fixtures/label_smoothing/cases.txt, written by scripts/make_label_smoothing_fixtures.py: a float64
 *     numpy transcription of transformers' LabelSmoother for the loss, and central finite differences of that
 *     loss for the gradient (an independent derivation of the closed form used here);
 *   - values derived by hand: equal logits give loss log V for every epsilon and gradient (1-eps)(1/V - onehot)/n;
 *     eps = 0 is the plain cross-entropy; all rows ignored gives 0 (the kernel's convention; HF: 0/0).
 * Tolerances: loss 1e-12 relative (same float64 math, different summation order); gradient 1e-8 absolute against
 * finite differences with step 1e-5 (their truncation error is ~1e-11, rounding ~1e-11). A gradient without the
 * -eps/V term is off by >= eps/(V n) >= 2e-3 on every case, a loss without the smoothing term by >= 1e-2.
 */
#include "t5test.h"

#include <math.h>

#include "cross_entropy_ref.h"

static double* read_doubles(char* s, int n) {
    double* v = (double*)malloc((size_t)n * sizeof(double));
    char* end = s;
    for (int i = 0; i < n; i++) {
        v[i] = strtod(end, &end);
        assert_true(end != s);
    }
    return v;
}

static char* next_line(FILE* f, char* buf, size_t cap, const char* tag) {
    assert_non_null(fgets(buf, (int)cap, f));
    const size_t k = strlen(tag);
    if (strncmp(buf, tag, k) != 0 || buf[k] != ' ') fail_msg("fixture: expected '%s' line, got %.40s", tag, buf);
    return buf + k + 1;
}

static void test_fixture_cases(void** state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/test/fixtures/label_smoothing/cases.txt", t5test_repo_dir());
    FILE* f = fopen(path, "r");
    assert_non_null(f);
    static char buf[1 << 16];
    int ncases = 0;
    while (fgets(buf, sizeof buf, f)) {
        char name[64];
        int N, V;
        double eps;
        assert_int_equal(sscanf(buf, "case %63s %d %d %lf", name, &N, &V, &eps), 4);
        const size_t n = (size_t)N * V;
        double* x64 = read_doubles(next_line(f, buf, sizeof buf, "logits"), (int)n);
        float* x = (float*)malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)x64[i];
            assert_true((double)x[i] == x64[i]);  // the fixture's logits are float32 values
        }
        double* lab64 = read_doubles(next_line(f, buf, sizeof buf, "labels"), N);
        int* labels = (int*)malloc((size_t)N * sizeof(int));
        for (int i = 0; i < N; i++) labels[i] = (int)lab64[i];
        const double ref_loss = strtod(next_line(f, buf, sizeof buf, "loss"), NULL);
        double* ref_grad = read_doubles(next_line(f, buf, sizeof buf, "grad"), (int)n);
        double* grad = (double*)malloc(n * sizeof(double));
        double* losses = (double*)malloc((size_t)N * sizeof(double));
        const double loss = ce_ref_smoothed(x, labels, N, V, eps, 1.0, losses, grad);
        double gerr = 0.0;
        for (size_t i = 0; i < n; i++) gerr = fmax(gerr, fabs(grad[i] - ref_grad[i]));
        double lsum = 0.0;
        int count = 0;
        for (int i = 0; i < N; i++) {
            lsum += losses[i];
            count += labels[i] != -100;
            if (labels[i] == -100) assert_true(losses[i] == 0.0);
        }
        printf("# %s N%d V%d eps %g: loss %.15g (HF %.15g, rel %.1e), max |grad - fd| %.1e\n", name, N, V, eps, loss,
               ref_loss, fabs(loss - ref_loss) / fabs(ref_loss), gerr);
        assert_true(fabs(loss - ref_loss) <= 1e-12 * fabs(ref_loss));
        assert_true(fabs(lsum / count - loss) <= 1e-14 * fabs(loss));  // per-token losses average to the loss
        assert_true(gerr <= 1e-8);
        free(x64);
        free(x);
        free(lab64);
        free(labels);
        free(ref_grad);
        free(grad);
        free(losses);
        ncases++;
    }
    fclose(f);
    assert_int_equal(ncases, 4);
}

// equal logits: p = 1/V, so nll = log V and mean(-log p) = log V: loss log V whatever eps; gradient (1-eps)(1/V -
// onehot)/count, grad_scale times
static void test_hand_uniform(void** state) {
    (void)state;
    enum { N = 3, V = 5 };
    float x[N * V];
    for (int i = 0; i < N * V; i++) x[i] = 0.75f;
    const int labels[N] = {4, -100, 0};
    double g[N * V], l[N];
    const double eps_list[] = {0.0, 0.1, 0.5};
    for (int e = 0; e < 3; e++) {
        const double eps = eps_list[e];
        const double loss = ce_ref_smoothed(x, labels, N, V, eps, 8.0, l, g);
        assert_true(fabs(loss - log(5.0)) <= 1e-15);
        for (int n = 0; n < N; n++)
            for (int k = 0; k < V; k++) {
                const double want =
                    labels[n] == -100 ? 0.0 : 8.0 * (1.0 - eps) * (0.2 - (k == labels[n] ? 1.0 : 0.0)) / 2;
                assert_true(fabs(g[n * V + k] - want) <= 1e-15);
            }
    }
}

// one token, V = 2, logits (0, log 3): p = (1/4, 3/4), label 0, eps 0.2:
// nll = log 4; mean(-log p) = (log 4 + log 4/3) / 2; loss = 0.8 log 4 + 0.1 (log 4 + log 4/3)
// gradient = (1/4 - 0.8 - 0.1, 3/4 - 0.1) = (-0.65, 0.65)
static void test_hand_two_classes(void** state) {
    (void)state;
    const float x[2] = {0.0f, (float)log(3.0)};
    const int labels[1] = {0};
    double g[2];
    const double x1 = (double)x[1];  // log 3 rounded to float: p1 = e^x1 / (1 + e^x1)
    const double p0 = 1.0 / (1.0 + exp(x1)), p1 = 1.0 - p0;
    const double loss = ce_ref_smoothed(x, labels, 1, 2, 0.2, 1.0, NULL, g);
    const double want = 0.8 * -log(p0) + 0.2 * (-log(p0) - log(p1)) / 2;
    assert_true(fabs(loss - want) <= 1e-15);
    assert_true(fabs(loss - (0.8 * log(4.0) + 0.1 * (log(4.0) + log(4.0 / 3.0)))) <= 1e-7);  // x1 ~ log 3 in fp32
    assert_true(fabs(g[0] - (p0 - 0.9)) <= 1e-15 && fabs(g[1] - (p1 - 0.1)) <= 1e-15);
    assert_true(fabs(g[0] + 0.65) <= 1e-7 && fabs(g[1] - 0.65) <= 1e-7);
}

static void test_all_ignored(void** state) {
    (void)state;
    const float x[4] = {1, 2, 3, 4};
    const int labels[2] = {-100, -100};
    double g[4] = {1, 1, 1, 1}, l[2] = {1, 1};
    assert_true(ce_ref_smoothed(x, labels, 2, 2, 0.1, 1.0, l, g) == 0.0);
    for (int i = 0; i < 4; i++) assert_true(g[i] == 0.0);
    assert_true(l[0] == 0.0 && l[1] == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_cases),
        cmocka_unit_test(test_hand_uniform),
        cmocka_unit_test(test_hand_two_classes),
        cmocka_unit_test(test_all_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
