/*
 * test_gpu_hf_checkpoints.c: t5train reads every kind of T5 checkpoint transformers writes (issue 14 item 1)
 * to the logits and gradients transformers computes from it.
 *
 * The checkpoints and their references are made on a machine with torch + transformers 5.x:
 *     python3 scripts/make_hf_checkpoint_cases.py --out DIR
 * (v10: tied + scaled; v11: own lm_head.weight, unscaled; tied_unscaled: T5Config(tie_word_embeddings=False)
 * as 5.x saves it, tied without lm_head.weight and unscaled; sharded: the v11 model in shards + index).
 * This test runs `t5train dump-grads --dtype fp32 --dropout 0` on each folder and compares with
 * ref_<case>.safetensors: loss relative error <= 1e-5, logits and every gradient relative L2 error <= 1e-4
 * (test_gpu_t5_parity's fp32 tolerances), the same parameter names as transformers' named_parameters().
 * Skipped without a GPU, or when T5TRAIN_HF_CASES does not name such a folder.
 */
#include "t5test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/base/common.h"
#include "../src/base/safetensors.h"

static const char* cases_dir(void) {
    const char* d = getenv("T5TRAIN_HF_CASES");
    if (!d || !*d) return NULL;
    char* p = t5_path_join(d, "batch.json");
    bool ok = t5_is_file(p);
    free(p);
    return ok ? d : NULL;
}

static float* read_all(SafeTensors* st, const char* name, size_t* n) {
    const SafeTensorInfo* info = NULL;
    char err[512];
    if (safetensors_info(st, name, &info, err, sizeof err)) return NULL;
    float* v = malloc_check(info->numel * sizeof(float) + 1);
    if (safetensors_read(st, name, v, DT_F32, NULL, -1, err, sizeof err)) fail_msg("%s", err);
    *n = info->numel;
    return v;
}

static double rel_l2(const float* a, const float* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0) return sqrt(num) <= 1e-6 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

static void check_case(const char* name) {
    T5_REQUIRE_GPU();
    const char* dir = cases_dir();
    if (!dir) {
        print_message("T5TRAIN_HF_CASES does not name a folder made by scripts/make_hf_checkpoint_cases.py\n");
        skip();
    }
    char model[1024], batch[1024], refp[1024], out[1024], text[16384];
    snprintf(model, sizeof model, "%s/%s", dir, name);
    snprintf(batch, sizeof batch, "%s/batch.json", dir);
    snprintf(refp, sizeof refp, "%s/ref_%s.safetensors", dir, name);
    snprintf(out, sizeof out, "%s/hf_%s.safetensors", t5test_tmpdir(), name);
    int rc = t5test_run(text, sizeof text, "%s dump-grads --model %s --batch %s --out %s --dtype fp32 --dropout 0",
                        t5test_bin(), model, batch, out);
    if (rc != 0) fail_msg("%s: dump-grads exited %d:\n%s", name, rc, text);
    char err[1024];
    SafeTensors *ref = NULL, *got = NULL;
    if (safetensors_open(&ref, refp, err, sizeof err) || safetensors_open(&got, out, err, sizeof err))
        fail_msg("%s", err);
    size_t n1, n2;
    float* lr = read_all(ref, "fp32.loss", &n1);
    float* lg = read_all(got, "loss", &n2);
    double loss_rel = fabs((double)lg[0] - lr[0]) / fabs((double)lr[0]);
    float* xr = read_all(ref, "fp32.logits", &n1);
    float* xg = read_all(got, "logits", &n2);
    assert_int_equal(n1, n2);
    double logits_rel = rel_l2(xg, xr, n1);
    print_message("%s: loss %.9g vs transformers %.9g (rel %.2e), logits rel L2 %.2e\n", name, lg[0], lr[0], loss_rel,
                  logits_rel);
    if (loss_rel > 1e-5) fail_msg("%s: loss relative error %.3g > 1e-5", name, loss_rel);
    if (logits_rel > 1e-4) fail_msg("%s: logits relative L2 error %.3g > 1e-4", name, logits_rel);
    // every gradient transformers has, under the same name, and nothing else
    int nref = 0;
    double worst = 0;
    const char* worst_name = "";
    for (int i = 0; i < safetensors_count(ref); i++) {
        const char* rn = safetensors_name(ref, i);
        if (strncmp(rn, "fp32.grad.", 10) != 0) continue;
        nref++;
        const char* pn = rn + 10;
        if (!safetensors_has(got, pn)) fail_msg("%s: t5train has no gradient for '%s'", name, pn);
        float* gr = read_all(ref, rn, &n1);
        float* gg = read_all(got, pn, &n2);
        assert_int_equal(n1, n2);
        double e = rel_l2(gg, gr, n1);
        if (e > worst) worst = e, worst_name = pn;
        free(gr);
        free(gg);
    }
    int ngot = safetensors_count(got) - 2;  // loss, logits
    if (ngot != nref) fail_msg("%s: t5train has %d gradients, transformers %d", name, ngot, nref);
    print_message("%s: %d gradients, worst %s rel L2 %.2e\n", name, nref, worst_name, worst);
    if (worst > 1e-4) fail_msg("%s: gradient '%s' relative L2 error %.3g > 1e-4", name, worst_name, worst);
    free(lr), free(lg), free(xr), free(xg);
    safetensors_close(ref);
    safetensors_close(got);
}

static void test_v10_tied_scaled(void** s) { (void)s; check_case("v10"); }
static void test_v11_untied(void** s) { (void)s; check_case("v11"); }
static void test_5x_tied_unscaled(void** s) { (void)s; check_case("tied_unscaled"); }
static void test_sharded(void** s) { (void)s; check_case("sharded"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v10_tied_scaled),
        cmocka_unit_test(test_v11_untied),
        cmocka_unit_test(test_5x_tied_unscaled),
        cmocka_unit_test(test_sharded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
