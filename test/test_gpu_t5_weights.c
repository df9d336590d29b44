/*
 * test_gpu_t5_weights.c: model/t5_weights.c (checkpoint load errors, save/reload round trip, random init
 * statistics) and a t5-small-sized random model through forward/backward (finite values, checkpointing
 * bit-identical in bf16 with dropout, the engine contract).
 */
#include <math.h>

#include "t5test.h"

#include "../src/base/check.h"
#include "../model/params.h"
#include "../model/t5.h"
#include "../model/t5_config.h"
#include "../model/t5_weights.h"
#include "../src/base/common.h"
#include "../src/base/safetensors.h"
#include "../model/zero.h"

static char* fixture_path(const char* rel) {
    char* d = t5_path_join(t5test_repo_dir(), "test/fixtures/t5");
    char* p = t5_path_join(d, rel);
    free(d);
    return p;
}

static ZeroEngine* engine_for(const ParamTable* t, DType dt) {
    size_t* numel = malloc(sizeof(size_t) * t->num_units);
    const char** names = malloc(sizeof(char*) * t->num_units);
    for (int u = 0; u < t->num_units; u++) {
        numel[u] = t->units[u].numel;
        names[u] = t->units[u].name;
    }
    char err[512];
    ZeroEngine* Z = zero_create(0, dt, t->num_units, numel, names, err, sizeof err);
    if (!Z) fail_msg("%s", err);
    free(numel);
    free(names);
    return Z;
}

static void load_config(const char* model, T5Config* c, ParamTable* t) {
    char err[1024];
    char* dir = fixture_path(model);
    char* cp = t5_path_join(dir, "config.json");
    if (t5_config_load_json(cp, c, err, sizeof err)) fail_msg("%s", err);
    if (params_build(t, c, err, sizeof err)) fail_msg("%s", err);
    free(cp);
    free(dir);
}

// copies the fixture checkpoint of `model` into path, dropping `drop`, reshaping `reshape` to (1, numel) and
// adding `extra` (a copy of shared.weight under that name); any may be NULL
static void write_variant(const char* model, const char* path, const char* drop, const char* reshape,
                          const char* extra) {
    char err[1024];
    char* dir = fixture_path(model);
    char* wp = t5_path_join(dir, "model.safetensors");
    SafeTensors* st = NULL;
    if (safetensors_open(&st, wp, err, sizeof err)) fail_msg("%s", err);
    SafeTensorsWriter* w = safetensors_writer_new();
    int n = safetensors_count(st);
    for (int i = 0; i < n; i++) {
        const char* name = safetensors_name(st, i);
        if (drop && strcmp(name, drop) == 0) continue;
        const SafeTensorInfo* info;
        const void* data;
        if (safetensors_info(st, name, &info, err, sizeof err) || safetensors_data(st, name, &data, err, sizeof err))
            fail_msg("%s", err);
        int64_t shape[8];
        int nd = info->ndim;
        memcpy(shape, info->shape, sizeof(int64_t) * nd);
        if (reshape && strcmp(name, reshape) == 0) {
            nd = 2;
            shape[0] = 1;
            shape[1] = (int64_t)info->numel;
        }
        if (safetensors_writer_add(w, name, info->dtype, nd, shape, data, err, sizeof err)) fail_msg("%s", err);
        if (extra && strcmp(name, "shared.weight") == 0 &&
            safetensors_writer_add(w, extra, info->dtype, nd, shape, data, err, sizeof err))
            fail_msg("%s", err);
    }
    if (safetensors_writer_write_file(w, path, err, sizeof err)) fail_msg("%s", err);
    safetensors_writer_free(w);
    safetensors_close(st);
    free(wp);
    free(dir);
}

static int try_load(const char* model, const char* path, char* err, size_t errlen) {
    T5Config c;
    ParamTable t;
    load_config(model, &c, &t);
    ZeroEngine* Z = engine_for(&t, DT_F32);
    int rc = t5_weights_load(Z, &t, path, 0, err, errlen);
    zero_destroy(Z);
    params_free(&t);
    return rc;
}

static void test_load_errors(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    char err[2048];
    char* p = t5_path_join(t5test_tmpdir(), "variant.safetensors");
    const char* q = "decoder.block.1.layer.1.EncDecAttention.q.weight";

    write_variant("tiny_v11", p, q, NULL, NULL);
    assert_int_equal(try_load("tiny_v11", p, err, sizeof err), -1);
    print_message("# missing: %s\n", err);
    assert_contains(err, "missing tensor");
    assert_contains(err, q);
    assert_contains(err, p);

    write_variant("tiny_v11", p, NULL, q, NULL);
    assert_int_equal(try_load("tiny_v11", p, err, sizeof err), -1);
    print_message("# misshaped: %s\n", err);
    assert_contains(err, q);
    assert_contains(err, "shape");

    write_variant("tiny_v11", p, NULL, NULL, "encoder.block.7.layer.0.SelfAttention.q.weight");
    assert_int_equal(try_load("tiny_v11", p, err, sizeof err), -1);
    print_message("# unexpected: %s\n", err);
    assert_contains(err, "unexpected");
    assert_contains(err, "encoder.block.7.layer.0.SelfAttention.q.weight");

    // HF aliases of the shared embedding are accepted and ignored
    write_variant("tiny_v11", p, NULL, NULL, "encoder.embed_tokens.weight");
    if (try_load("tiny_v11", p, err, sizeof err)) fail_msg("alias rejected: %s", err);
    write_variant("tiny_v10", p, NULL, NULL, "lm_head.weight");  // tied: a stored lm_head equal to shared
    if (try_load("tiny_v10", p, err, sizeof err)) fail_msg("tied lm_head rejected: %s", err);
    // the untied model needs its lm_head
    write_variant("tiny_v11", p, "lm_head.weight", NULL, NULL);
    assert_int_equal(try_load("tiny_v11", p, err, sizeof err), -1);
    assert_contains(err, "lm_head.weight");
    free(p);
}

static void test_save_reload(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    char err[2048];
    T5Config c;
    ParamTable t;
    load_config("tiny_v11", &c, &t);
    char* dir = fixture_path("tiny_v11");
    char* wp = t5_path_join(dir, "model.safetensors");
    ZeroEngine* Z = engine_for(&t, DT_BF16);
    if (t5_weights_load(Z, &t, wp, 0, err, sizeof err)) fail_msg("%s", err);
    const DType dts[2] = {DT_F32, DT_F16};
    for (int k = 0; k < 2; k++) {
        char* out = t5_path_join(t5test_tmpdir(), k == 0 ? "saved32" : "saved16");
        if (t5_weights_save(Z, &t, out, dts[k], 0, 0, err, sizeof err)) fail_msg("%s", err);
        char* cfgp = t5_path_join(out, "config.json");
        T5Config c2;
        if (t5_config_load_json(cfgp, &c2, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(c2.num_decoder_layers, c.num_decoder_layers);
        assert_int_equal(c2.tie_word_embeddings, c.tie_word_embeddings);
        ZeroEngine* Z2 = engine_for(&t, DT_F32);
        if (t5_weights_load(Z2, &t, out, 0, err, sizeof err)) fail_msg("%s", err);
        // fixture weights are fp16-exact, so both round trips are bit-exact
        for (int i = 0; i < t.num_params; i++) {
            size_t n = t.params[i].numel;
            float* a = malloc(n * 4);
            float* b = malloc(n * 4);
            t5_weights_get_master(Z, &t, i, a);
            t5_weights_get_master(Z2, &t, i, b);
            if (memcmp(a, b, n * 4) != 0) fail_msg("%s differs after a %s round trip", t.params[i].name, dtype_name(dts[k]));
            free(a);
            free(b);
        }
        zero_destroy(Z2);
        free(cfgp);
        free(out);
    }
    // for the transformers round trip (scripts/check_hf_load.py on the device): keep a copy when asked
    const char* keep = getenv("T5TEST_SAVE_DIR");
    if (keep && t5_weights_save(Z, &t, keep, DT_F32, 0, 0, err, sizeof err)) fail_msg("%s", err);
    zero_destroy(Z);
    params_free(&t);
    free(wp);
    free(dir);
}

static void test_random_init(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5Config c;
    assert_true(t5_config_preset("t5-small", &c));
    ParamTable t;
    char err[512];
    assert_int_equal(params_build(&t, &c, err, sizeof err), 0);
    ZeroEngine* Z = engine_for(&t, DT_F16);
    assert_int_equal(t5_weights_init_random(Z, &t, 1234, 0, err, sizeof err), 0);
    struct {
        const char* name;
        double std;
    } checks[] = {
        {"shared.weight", 1.0},
        {"encoder.block.0.layer.0.SelfAttention.q.weight", 1.0 / sqrt(512.0 * 64)},
        {"encoder.block.0.layer.0.SelfAttention.k.weight", 1.0 / sqrt(512.0)},
        {"decoder.block.3.layer.1.EncDecAttention.o.weight", 1.0 / sqrt(8.0 * 64)},
        {"decoder.block.5.layer.2.DenseReluDense.wo.weight", 1.0 / sqrt(2048.0)},
        {"encoder.block.2.layer.1.DenseReluDense.wi.weight", 1.0 / sqrt(512.0)},
        {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 1.0 / sqrt(512.0)},
    };
    for (size_t k = 0; k < T5_ARRAY_LEN(checks); k++) {
        int i = params_find_name(&t, checks[k].name);
        assert_true(i >= 0);
        size_t n = t.params[i].numel;
        float* a = malloc(n * 4);
        t5_weights_get_master(Z, &t, i, a);
        double s = 0, s2 = 0;
        for (size_t j = 0; j < n; j++) {
            s += a[j];
            s2 += (double)a[j] * a[j];
        }
        double mean = s / n, sd = sqrt(s2 / n - mean * mean);
        double tol = 5.0 / sqrt((double)n) + 1e-3;  // a few standard errors of the estimate
        print_message("# init %-70s std %.5f expect %.5f mean %+.5f\n", checks[k].name, sd, checks[k].std, mean);
        assert_true(fabs(sd / checks[k].std - 1.0) < tol);
        assert_true(fabs(mean) < 5.0 * checks[k].std / sqrt((double)n) + 1e-6);
        free(a);
    }
    int ln = params_find_name(&t, "decoder.final_layer_norm.weight");
    float w[512];
    t5_weights_get_master(Z, &t, ln, w);
    for (int j = 0; j < 512; j++) assert_true(w[j] == 1.0f);
    // seeded: the same seed gives the same values, another seed others
    int q = params_find_name(&t, "encoder.block.0.layer.0.SelfAttention.q.weight");
    float a[64], b[64];
    float* full = malloc(t.params[q].numel * 4);
    t5_weights_get_master(Z, &t, q, full);
    memcpy(a, full, sizeof a);
    assert_int_equal(t5_weights_init_random(Z, &t, 1234, 0, err, sizeof err), 0);
    t5_weights_get_master(Z, &t, q, full);
    memcpy(b, full, sizeof b);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(t5_weights_init_random(Z, &t, 99, 0, err, sizeof err), 0);
    t5_weights_get_master(Z, &t, q, full);
    assert_memory_not_equal(a, full, sizeof a);
    free(full);
    zero_destroy(Z);
    params_free(&t);
}

// t5-small-sized model, random weights, awkward lengths: finite loss and gradients, checkpointing identical; an
// evaluation-only model (forward_only: one block's activations, no gradient buffers) gives the same eval logits and
// the same dropout loss. mode 0: full, 1: gradient checkpointing, 2: forward_only (no gradients: *grads_out NULL).
// *logits_out: the eval-mode logits (B*Tt*V X values, as bytes), *logit_bytes their size.
static void run_small(DType dt, int mode, const char* preset, float* loss_out, float** grads_out, size_t* n_out,
                      unsigned char** logits_out, size_t* logit_bytes) {
    const bool ckpt = mode == 1;
    T5Config c;
    assert_true(t5_config_preset(preset, &c));
    ParamTable t;
    char err[512];
    assert_int_equal(params_build(&t, &c, err, sizeof err), 0);
    ZeroEngine* Z = engine_for(&t, dt);
    assert_int_equal(t5_weights_init_random(Z, &t, 5, 0, err, sizeof err), 0);
    const int B = 4, Ts = 37, Tt = 21;
    int* ids = malloc(sizeof(int) * B * Ts);
    int* mask = malloc(sizeof(int) * B * Ts);
    int* lab = malloc(sizeof(int) * B * Tt);
    uint32_t r = 12345;
    for (int b = 0; b < B; b++) {
        int ls = Ts - 5 * b, lt = Tt - 4 * b;
        for (int i = 0; i < Ts; i++) {
            r = r * 1664525u + 1013904223u;
            ids[b * Ts + i] = i < ls ? (int)(2 + (r >> 8) % 32000) : 0;
            mask[b * Ts + i] = i < ls;
        }
        for (int i = 0; i < Tt; i++) {
            r = r * 1664525u + 1013904223u;
            lab[b * Tt + i] = i < lt ? (int)(2 + (r >> 8) % 32000) : -100;
        }
    }
    T5Batch batch = {.B = B, .Ts = Ts, .Tt = Tt, .input_ids = ids, .attention_mask = mask, .labels = lab};
    T5ModelOptions opt = {.max_B = B, .max_Ts = 40, .max_Tt = 24, .dtype = dt, .gradient_checkpointing = ckpt,
                          .forward_only = mode == 2, .dropout_rate = 0.1f};
    T5Model* M = t5_model_create(&t, Z, &opt, err, sizeof err);
    if (!M) fail_msg("%s", err);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    if (t5_model_set_batch(M, &batch, s, err, sizeof err)) fail_msg("%s", err);
    // evaluation: no dropout, logits kept
    t5_model_set_train(M, false);
    t5_model_forward(M, false, 1.0f, 5, s);
    *logit_bytes = (size_t)B * Tt * c.vocab_size * dtype_size(dt);
    *logits_out = malloc(*logit_bytes);
    CUDA_CHECK(cudaMemcpyAsync(*logits_out, t5_model_logits(M), *logit_bytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    t5_model_set_train(M, true);
    *grads_out = NULL;
    *n_out = 0;
    if (mode == 2) {  // the training-mode forward (dropout) without a backward: its loss only
        t5_model_forward(M, false, 1.0f, 77, s);
        *loss_out = t5_model_loss(M, s);
        assert_true(zero_all_released(Z));
    } else {
        zero_begin_grads(Z, s);
        t5_model_forward(M, true, 1.0f, 77, s);
        t5_model_backward(M, s);
        *loss_out = t5_model_loss(M, s);
        assert_true(zero_all_released(Z));
        assert_int_equal(zero_num_grads_ready(Z), t.num_units);
        *n_out = zero_flat_numel(Z);
        *grads_out = malloc(*n_out * 4);
        zero_grads_to_host_f32(Z, *grads_out, s);
    }
    print_message("# %s %s %s: loss %.6f, activations %.1f MiB\n", preset, dtype_name(dt),
                  mode == 0 ? "full" : mode == 1 ? "ckpt" : "forward_only", *loss_out,
                  t5_model_activation_bytes(M) / 1048576.0);
    CUDA_CHECK(cudaStreamDestroy(s));
    t5_model_destroy(M);
    zero_destroy(Z);
    params_free(&t);
    free(ids);
    free(mask);
    free(lab);
}

static void check_small(const char* preset, DType dt) {
    float l0, l1, l2;
    float *g0, *g1, *g2;
    size_t n0, n1, n2, b0, b1, b2;
    unsigned char *x0, *x1, *x2;
    run_small(dt, 0, preset, &l0, &g0, &n0, &x0, &b0);
    run_small(dt, 1, preset, &l1, &g1, &n1, &x1, &b1);
    run_small(dt, 2, preset, &l2, &g2, &n2, &x2, &b2);
    assert_memory_equal(x0, x1, b0);
    assert_memory_equal(x0, x2, b0);  // forward_only: the same eval logits to the bit
    assert_memory_equal(&l0, &l2, sizeof l0);  // and the same dropout loss
    free(x0);
    free(x1);
    free(x2);
    assert_true(isfinite(l0) && l0 > 0);
    size_t nonfinite = 0, nonzero = 0;
    for (size_t i = 0; i < n0; i++) {
        nonfinite += !isfinite(g0[i]);
        nonzero += g0[i] != 0.0f;
    }
    print_message("# %s %s: %zu non-finite, %zu of %zu gradient values non-zero\n", preset, dtype_name(dt), nonfinite,
                  nonzero, n0);
    assert_int_equal(nonfinite, 0);
    assert_true(nonzero > n0 / 2);
    assert_memory_equal(&l0, &l1, sizeof l0);
    assert_memory_equal(g0, g1, n0 * 4);
    free(g0);
    free(g1);
}

static void test_small_bf16(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    check_small("t5-small", DT_BF16);
}

static void test_v11_small_fp16(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    check_small("google/t5-v1_1-small", DT_F16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_errors), cmocka_unit_test(test_save_reload), cmocka_unit_test(test_random_init),
        cmocka_unit_test(test_small_bf16),  cmocka_unit_test(test_v11_small_fp16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
