/*
 * test_gpu_t5_graph.c: T5ModelOptions.cuda_graph (t5_model_forward_backward captured in a CUDA graph) gives
 * bit-identical loss and gradients to the eager forward + backward, step after step with new dropout seeds
 * (the seed is read from device memory by the replayed kernels), across shape changes (one graph per shape,
 * cached graphs replayed again), in fp32, fp16 and bf16, for the v1.0 (ReLU, tied) and v1.1 (gated-GELU,
 * untied) tiny fixtures (test/fixtures/t5). Also the engine contract after a replay (every unit released and
 * grad_ready once) and that a replay with another seed gives other gradients (the seed is not baked in).
 */
#include <math.h>

#include "t5test.h"

#include "../src/base/check.h"
#include "../cuda/elementwise.cuh"
#include "../model/params.h"
#include "../model/t5.h"
#include "../model/t5_config.h"
#include "../model/t5_weights.h"
#include "../src/base/common.h"
#include "../model/zero.h"

typedef struct {
    T5Config cfg;
    ParamTable t;
    ZeroEngine* Z;
    T5Model* M;
    cudaStream_t s;
} Run;

static char* fixture_path(const char* rel) {
    char* d = t5_path_join(t5test_repo_dir(), "test/fixtures/t5");
    char* p = t5_path_join(d, rel);
    free(d);
    return p;
}

static void run_open(Run* r, const char* model, DType dt, bool graph, float dropout, const T5Batch* b) {
    memset(r, 0, sizeof *r);
    char err[4096];
    char* dir = fixture_path(model);
    char* cfgp = t5_path_join(dir, "config.json");
    char* wp = t5_path_join(dir, "model.safetensors");
    if (t5_config_load_json(cfgp, &r->cfg, err, sizeof err)) fail_msg("%s", err);
    if (params_build(&r->t, &r->cfg, err, sizeof err)) fail_msg("%s", err);
    CUDA_CHECK(cudaStreamCreateWithFlags(&r->s, cudaStreamNonBlocking));
    size_t* numel = malloc(sizeof(size_t) * r->t.num_units);
    const char** names = malloc(sizeof(char*) * r->t.num_units);
    for (int u = 0; u < r->t.num_units; u++) {
        numel[u] = r->t.units[u].numel;
        names[u] = r->t.units[u].name;
    }
    r->Z = zero_create(0, dt, r->t.num_units, numel, names, err, sizeof err);
    if (!r->Z) fail_msg("%s", err);
    free(numel);
    free(names);
    if (t5_weights_load(r->Z, &r->t, wp, r->s, err, sizeof err)) fail_msg("%s", err);
    T5ModelOptions opt = {.max_B = b->B, .max_Ts = b->Ts, .max_Tt = b->Tt, .dtype = dt, .dropout_rate = dropout,
                          .cuda_graph = graph};
    r->M = t5_model_create(&r->t, r->Z, &opt, err, sizeof err);
    if (!r->M) fail_msg("%s", err);
    t5_model_set_train(r->M, dropout > 0);
    free(dir);
    free(cfgp);
    free(wp);
}

static void run_close(Run* r) {
    t5_model_destroy(r->M);
    zero_destroy(r->Z);
    params_free(&r->t);
    CUDA_CHECK(cudaStreamDestroy(r->s));
}

static void set_batch(Run* r, const T5Batch* b) {
    char err[1024];
    if (t5_model_set_batch(r->M, b, r->s, err, sizeof err)) fail_msg("%s", err);
}

// one step: eager (forward + backward) or through t5_model_forward_backward; returns the loss, *grads malloc'd
static float step(Run* r, bool fused, uint64_t seed, float** grads) {
    // NaN first: a graph replay must write every gradient as the eager backward does
    fill(zero_flat_grad(r->Z), zero_grad_dtype(r->Z), zero_flat_numel(r->Z), NAN, r->s);
    zero_begin_grads(r->Z, r->s);
    if (fused) {
        t5_model_forward_backward(r->M, 1.0f, seed, r->s);
    } else {
        t5_model_forward(r->M, true, 1.0f, seed, r->s);
        t5_model_backward(r->M, r->s);
    }
    float loss = t5_model_loss(r->M, r->s);
    assert_true(zero_all_released(r->Z));
    assert_int_equal(zero_num_grads_ready(r->Z), r->t.num_units);
    size_t n = zero_flat_numel(r->Z);
    *grads = malloc(n * sizeof(float));
    zero_grads_to_host_f32(r->Z, *grads, r->s);
    return loss;
}

// bitwise comparison of two gradient vectors; prints the first difference
static size_t count_diff(const float* a, const float* b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (d == 0) print_message("# first difference at %zu: %.9g vs %.9g\n", i, a[i], b[i]);
            d++;
        }
    return d;
}

static void check_graph(const char* model, DType dt) {
    char err[1024];
    char* bp = fixture_path("batch.json");
    T5Batch full;
    if (t5_batch_load_json(bp, &full, err, sizeof err)) fail_msg("%s", err);
    free(bp);
    full.decoder_input_ids = NULL;  // shift-right of the labels
    // a second shape: the first B-1 rows (or the first row's first Tt-1 labels when B == 1)
    T5Batch part = full;
    if (full.B > 1) part.B = full.B - 1;
    assert_true(full.B > 1);

    Run e, g;
    run_open(&e, model, dt, false, 0.1f, &full);
    run_open(&g, model, dt, true, 0.1f, &full);
    const size_t n = zero_flat_numel(e.Z);
    const T5Batch* seq[] = {&full, &full, &full, &part, &part, &full, &part};
    const uint64_t seeds[] = {11, 12, 13, 14, 15, 16, 17};
    for (int i = 0; i < 7; i++) {
        set_batch(&e, seq[i]);
        set_batch(&g, seq[i]);
        float *ge, *gg;
        float le = step(&e, false, seeds[i], &ge);
        float lg = step(&g, true, seeds[i], &gg);
        size_t d = count_diff(ge, gg, n);
        print_message("# %s %s step %d (B %d): loss eager %.9g graph %.9g, %zu of %zu gradients differ, graphs %d\n",
                      model, dtype_name(dt), i, seq[i]->B, le, lg, d, n, t5_model_num_graphs(g.M));
        assert_true(isfinite(le));
        assert_memory_equal(&le, &lg, sizeof(float));
        assert_int_equal(d, 0);
        free(ge);
        free(gg);
    }
    // shapes seen: full (eager, capture, replay x2), part (eager, capture, replay)
    assert_int_equal(t5_model_num_graphs(g.M), 2);

    // the seed reaches the replayed kernels: another seed, other gradients; the same seed, the same ones
    set_batch(&g, &full);
    float *g1, *g2, *g3;
    float l1 = step(&g, true, 100, &g1);
    float l2 = step(&g, true, 101, &g2);
    float l3 = step(&g, true, 100, &g3);
    assert_true(count_diff(g1, g2, n) > 0);
    assert_true(l1 != l2);
    assert_memory_equal(&l1, &l3, sizeof(float));
    assert_int_equal(count_diff(g1, g3, n), 0);
    free(g1);
    free(g2);
    free(g3);
    run_close(&e);
    run_close(&g);
    t5_batch_free(&full);
}

static void test_graph_v10_fp32(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    check_graph("tiny_v10", DT_F32);
}
static void test_graph_v10_bf16(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    check_graph("tiny_v10", DT_BF16);
}
static void test_graph_v11_fp16(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    check_graph("tiny_v11", DT_F16);
}
static void test_graph_v11_bf16(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    check_graph("tiny_v11", DT_BF16);
}

// without cuda_graph, t5_model_forward_backward is the eager pair and captures nothing
static void test_no_graph_option(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    char err[1024];
    char* bp = fixture_path("batch.json");
    T5Batch full;
    if (t5_batch_load_json(bp, &full, err, sizeof err)) fail_msg("%s", err);
    free(bp);
    full.decoder_input_ids = NULL;
    Run e;
    run_open(&e, "tiny_v10", DT_F32, false, 0.1f, &full);
    set_batch(&e, &full);
    float *ga, *gb;
    float la = step(&e, false, 5, &ga);
    float lb = step(&e, true, 5, &gb);
    assert_memory_equal(&la, &lb, sizeof(float));
    assert_int_equal(count_diff(ga, gb, zero_flat_numel(e.Z)), 0);
    assert_int_equal(t5_model_num_graphs(e.M), 0);
    free(ga);
    free(gb);
    run_close(&e);
    t5_batch_free(&full);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_v10_fp32), cmocka_unit_test(test_graph_v10_bf16),
        cmocka_unit_test(test_graph_v11_fp16), cmocka_unit_test(test_graph_v11_bf16),
        cmocka_unit_test(test_no_graph_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
