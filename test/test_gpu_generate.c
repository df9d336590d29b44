/*
 * test_gpu_generate.c: model/generate.c against HF transformers `generate` (test/fixtures/generate, made by
 * scripts/make_generate_fixtures.py: 64 WMT16 validation sources tokenized with the real T5 tokenizer, in 8
 * padded batches; the random-weight tiny_v10 / tiny_v11 checkpoints of test/fixtures/t5 with the `</s>` row of
 * the output projection scaled by a power of two so that sequences end; max_length 32).
 *
 *   fp32 (TF32 off on HF's side): every case (greedy, beam 4, min_length, length_penalty 2 + early_stopping
 *        True, length_penalty 0.5 + "never" + min_length, beam 3 with a negative length penalty) must give the
 *        returned tensor exactly: same width, same token at every position (fill/pad included).
 *   bf16 (HF: the fp32 model under autocast bf16): at least 95% of the sequences identical up to their `</s>`;
 *        the rate is printed.
 * The reference is HF with eager attention (the numerics model/t5.c matches); the fixture also holds HF's default
 * SDPA attention for greedy and beam 4 in fp32 and bf16, whose agreement is printed for information.
 * Also: option errors (num_beams 0, no_repeat_ngram_size, max_length 1), the memory refusal with the KV-cache
 * numbers, and bad batches; lockstep generation (ZeRO inference) with another rank played by the agreement callback:
 * extra steps change no output.
 */
#include <jansson.h>
#include <math.h>

#include "t5test.h"

#include "../src/base/check.h"
#include "../cuda/elementwise.cuh"
#include "../model/generate.h"
#include "../model/params.h"
#include "../model/t5_config.h"
#include "../model/t5_weights.h"
#include "../src/base/common.h"
#include "../src/eval/evaluate.h"
#include "../model/zero.h"

static char* fixture_path(const char* dir, const char* rel) {
    char* d = t5_path_join(t5test_repo_dir(), dir);
    char* p = t5_path_join(d, rel);
    free(d);
    return p;
}

static json_t* load_json(const char* rel) {
    char* p = fixture_path("test/fixtures/generate", rel);
    json_error_t e;
    json_t* j = json_load_file(p, 0, &e);
    if (!j) fail_msg("%s: %s (line %d): run scripts/make_generate_fixtures.py", p, e.text, e.line);
    free(p);
    return j;
}

typedef struct {
    T5Config cfg;
    ParamTable t;
    ZeroEngine* Z;
    cudaStream_t s;
} Model;

static void model_open(Model* m, const char* name, DType dt, double eos_scale) {
    memset(m, 0, sizeof *m);
    char err[4096];
    char* dir = fixture_path("test/fixtures/t5", name);
    char* cfgp = t5_path_join(dir, "config.json");
    char* wp = t5_path_join(dir, "model.safetensors");
    if (t5_config_load_json(cfgp, &m->cfg, err, sizeof err)) fail_msg("%s", err);
    if (params_build(&m->t, &m->cfg, err, sizeof err)) fail_msg("%s", err);
    CUDA_CHECK(cudaStreamCreate(&m->s));
    size_t* numel = malloc(sizeof(size_t) * m->t.num_units);
    const char** names = malloc(sizeof(char*) * m->t.num_units);
    for (int u = 0; u < m->t.num_units; u++) {
        numel[u] = m->t.units[u].numel;
        names[u] = m->t.units[u].name;
    }
    m->Z = zero_create(0, dt, m->t.num_units, numel, names, err, sizeof err);
    if (!m->Z) fail_msg("%s", err);
    free(numel);
    free(names);
    if (t5_weights_load(m->Z, &m->t, wp, m->s, err, sizeof err)) fail_msg("%s", err);
    if (eos_scale != 1.0) {
        // the fixture's `</s>` boost: row eos of the output projection (shared when tied), an exact power of two
        int p = m->cfg.tie_word_embeddings ? params_find(&m->t, ROLE_EMBED, STACK_NONE, -1)
                                           : params_find(&m->t, ROLE_LM_HEAD, STACK_NONE, -1);
        assert_true(p >= 0);
        const ParamDesc* d = &m->t.params[p];
        float* row = zero_master(m->Z, d->unit) + d->offset + (size_t)m->cfg.eos_token_id * m->cfg.d_model;
        scale_inplace(row, DT_F32, (size_t)m->cfg.d_model, (float)eos_scale, m->s);
        zero_sync_working(m->Z, m->s);
        CUDA_CHECK(cudaStreamSynchronize(m->s));
    }
    free(dir);
    free(cfgp);
    free(wp);
}

static void model_close(Model* m) {
    zero_destroy(m->Z);
    params_free(&m->t);
    cudaStreamDestroy(m->s);
}

static int* json_rows(json_t* rows, int* B, int* T) {
    *B = (int)json_array_size(rows);
    *T = (int)json_array_size(json_array_get(rows, 0));
    int* a = malloc(sizeof(int) * (size_t)(*B) * (*T));
    for (int b = 0; b < *B; b++) {
        json_t* r = json_array_get(rows, (size_t)b);
        assert_int_equal((int)json_array_size(r), *T);
        for (int i = 0; i < *T; i++) a[(size_t)b * (*T) + i] = (int)json_integer_value(json_array_get(r, (size_t)i));
    }
    return a;
}

// tokens through the first </s> (column 0 excluded), or through width when there is none
static int seq_end(const int* row, int width, int eos) {
    for (int i = 1; i < width; i++)
        if (row[i] == eos) return i + 1;
    return width;
}

static void run_cases(const char* dtype_name_want) {
    json_t* bj = load_json("batches.json");
    json_t* gj = load_json("generate.json");
    json_t* batches = json_object_get(bj, "batches");
    const int ML = (int)json_integer_value(json_object_get(gj, "max_length"));
    json_t* cases = json_object_get(gj, "cases");
    json_t* models = json_object_get(gj, "models");
    print_message("reference: transformers %s, torch %s, %s\n",
                  json_string_value(json_object_get(json_object_get(gj, "versions"), "transformers")),
                  json_string_value(json_object_get(json_object_get(gj, "versions"), "torch")),
                  json_string_value(json_object_get(json_object_get(gj, "versions"), "gpu")));
    int n_cases = 0;
    int64_t total_seq = 0, total_same = 0, sdpa_seq = 0, sdpa_same = 0;
    bool all_ok = true;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t* c = json_array_get(cases, ci);
        const char* dts = json_string_value(json_object_get(c, "dtype"));
        if (strcmp(dts, dtype_name_want) != 0) continue;
        const char* name = json_string_value(json_object_get(c, "model"));
        const DType dt = strcmp(dts, "bf16") == 0 ? DT_BF16 : DT_F32;
        GenerateOptions o;
        generate_options_default(&o);
        o.max_length = ML;
        o.num_beams = (int)json_integer_value(json_object_get(c, "num_beams"));
        o.length_penalty = (float)json_number_value(json_object_get(c, "length_penalty"));
        o.min_length = (int)json_integer_value(json_object_get(c, "min_length"));
        json_t* es = json_object_get(c, "early_stopping");
        o.early_stopping = json_is_string(es) ? GEN_EARLY_STOP_NEVER
                           : json_is_true(es) ? GEN_EARLY_STOP_TRUE
                                              : GEN_EARLY_STOP_FALSE;
        double scale = json_number_value(json_object_get(json_object_get(models, name), "eos_scale"));
        Model m;
        model_open(&m, name, dt, scale);
        char err[4096];
        T5Generator* G = t5_generator_create(&m.t, m.Z, 8, 64, &o, err, sizeof err);
        if (!G) fail_msg("%s", err);
        int* out = malloc(sizeof(int) * 8 * ML);
        int n_seq = 0, n_same = 0, n_exact_batches = 0;
        json_t* seqs = json_object_get(c, "sequences");
        const char* attn = json_string_value(json_object_get(c, "attn"));
        const bool sdpa = attn && strcmp(attn, "sdpa") == 0;  // information only: our numerics follow eager
        for (size_t bi = 0; bi < json_array_size(batches); bi++) {
            json_t* b = json_array_get(batches, bi);
            int B, Ts, B2, Ts2, Br, W;
            int* ids = json_rows(json_object_get(b, "input_ids"), &B, &Ts);
            int* mask = json_rows(json_object_get(b, "attention_mask"), &B2, &Ts2);
            int* ref = json_rows(json_array_get(seqs, bi), &Br, &W);
            assert_int_equal(B, Br);
            int width = 0;
            if (t5_generate(G, ids, mask, B, Ts, out, &width, m.s, err, sizeof err)) fail_msg("%s", err);
            bool exact = width == W;
            for (int r = 0; r < B; r++) {
                const int* o_row = out + (size_t)r * ML;
                const int* r_row = ref + (size_t)r * W;
                int e1 = seq_end(o_row, width, m.cfg.eos_token_id), e2 = seq_end(r_row, W, m.cfg.eos_token_id);
                bool same = e1 == e2 && memcmp(o_row, r_row, sizeof(int) * (size_t)e1) == 0;
                n_seq++;
                n_same += same;
                for (int i = 0; i < T5_MIN(width, W); i++) exact = exact && o_row[i] == r_row[i];
                if (!same && ((dt == DT_F32 && !sdpa) || getenv("T5_GEN_DEBUG"))) {
                    char a[1024] = "", z[1024] = "";
                    for (int i = 0; i < width && i < 40; i++)
                        snprintf(a + strlen(a), sizeof a - strlen(a), " %d", o_row[i]);
                    for (int i = 0; i < W && i < 40; i++)
                        snprintf(z + strlen(z), sizeof z - strlen(z), " %d", r_row[i]);
                    print_message("  batch %zu row %d differs:\n    ours:%s\n    HF:  %s\n", bi, r, a, z);
                }
            }
            n_exact_batches += exact;
            free(ids);
            free(mask);
            free(ref);
        }
        const GenerateStats* st = t5_generator_stats(G);
        // the decoder steps replay CUDA graphs (unless T5TRAIN_GEN_GRAPHS=0): the equality above covers them
        const char* ge = getenv("T5TRAIN_GEN_GRAPHS");
        if (!(ge && strcmp(ge, "0") == 0)) assert_true(st->graph_steps > 0);
        print_message("%s %s %s beams %d lp %g es %d min_length %d: %d/%d sequences identical, %d/%zu batches exact "
                      "(steps %lld, graph steps %lld, rows %lld, tokens %lld)\n",
                      name, sdpa ? "HF-sdpa" : "HF-eager", dts, o.num_beams, o.length_penalty, (int)o.early_stopping, o.min_length, n_same, n_seq,
                      n_exact_batches, json_array_size(batches), (long long)st->steps, (long long)st->graph_steps,
                      (long long)st->decoder_rows,
                      (long long)st->tokens);
        if (sdpa) {
            sdpa_seq += n_seq;
            sdpa_same += n_same;
        } else if (dt == DT_F32) {
            if (n_exact_batches != (int)json_array_size(batches)) all_ok = false;
        } else {
            total_seq += n_seq;
            total_same += n_same;
        }
        n_cases++;
        free(out);
        t5_generator_destroy(G);
        model_close(&m);
    }
    assert_true(n_cases > 0);
    if (strcmp(dtype_name_want, "bf16") == 0) {
        assert_true(total_seq > 0);
        double rate = 100.0 * (double)total_same / (double)total_seq;
        print_message("bf16: %.1f%% of %lld sequences identical to HF generate with eager attention (required >= 95%%)\n",
                      rate, (long long)total_seq);
        if (sdpa_seq)
            print_message("bf16, information: %.1f%% of %lld sequences identical to HF generate with SDPA attention\n",
                          100.0 * (double)sdpa_same / (double)sdpa_seq, (long long)sdpa_seq);
        if (rate < 95.0) all_ok = false;
    }
    json_decref(bj);
    json_decref(gj);
    if (!all_ok) fail_msg("generation differs from HF (see above)");
}

static void test_generate_fp32_equals_hf(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    run_cases("fp32");
}

static void test_generate_bf16_close_to_hf(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    run_cases("bf16");
}

static void test_generate_bad_options(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    Model m;
    model_open(&m, "tiny_v10", DT_F32, 1.0);
    char err[4096];
    GenerateOptions o;
    generate_options_default(&o);
    o.max_length = 16;
    o.num_beams = 0;
    assert_null(t5_generator_create(&m.t, m.Z, 2, 8, &o, err, sizeof err));
    assert_contains(err, "num_beams = 0");
    o.num_beams = 2;
    o.no_repeat_ngram_size = 3;
    assert_null(t5_generator_create(&m.t, m.Z, 2, 8, &o, err, sizeof err));
    assert_contains(err, "not implemented yet: no_repeat_ngram_size");
    o.no_repeat_ngram_size = 0;
    o.max_length = 1;
    assert_null(t5_generator_create(&m.t, m.Z, 2, 8, &o, err, sizeof err));
    assert_contains(err, "max_length = 1");
    // a length whose KV cache cannot fit: refused with the numbers
    o.max_length = 400000000;
    o.num_beams = 4;
    assert_null(t5_generator_create(&m.t, m.Z, 64, 8, &o, err, sizeof err));
    print_message("refusal: %s\n", err);
    assert_contains(err, "KV caches");
    assert_contains(err, "GiB are free");
    // bad batches
    o.max_length = 8;
    T5Generator* G = t5_generator_create(&m.t, m.Z, 2, 4, &o, err, sizeof err);
    if (!G) fail_msg("%s", err);
    int out[2 * 8], w;
    int ids[2 * 4] = {5, 6, 7, 1, 9, 1, 0, 0};
    int mask[2 * 4] = {1, 1, 1, 1, 1, 1, 0, 0};
    assert_int_equal(t5_generate(G, ids, mask, 3, 4, out, &w, m.s, err, sizeof err), -1);
    assert_contains(err, "exceeds");
    int bad_ids[2 * 4] = {5, 6, 7, 1, 99999, 1, 0, 0};
    assert_int_equal(t5_generate(G, bad_ids, mask, 2, 4, out, &w, m.s, err, sizeof err), -1);
    assert_contains(err, "input_ids[1][0] = 99999");
    int empty_mask[2 * 4] = {1, 1, 1, 1, 0, 0, 0, 0};
    assert_int_equal(t5_generate(G, ids, empty_mask, 2, 4, out, &w, m.s, err, sizeof err), -1);
    assert_contains(err, "no token");
    assert_int_equal(t5_generate(G, ids, mask, 2, 4, out, &w, m.s, err, sizeof err), 0);
    assert_true(w >= 2 && w <= 8);
    assert_int_equal(out[0], 0);
    t5_generator_destroy(G);
    model_close(&m);
}

// CUDA graphs change nothing: bf16 (where any difference in the kernels run would show in the roundings), both
// models, greedy and beam 4 with min_length (ban on, then off: two graph keys), over the 8 fixture batches (varying
// Ts, compaction), each batch generated twice by the graph generator (capture, then replay across calls)
static void test_generate_graphs_equal_eager(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    json_t* bj = load_json("batches.json");
    json_t* batches = json_object_get(bj, "batches");
    const char* names[2] = {"tiny_v10", "tiny_v11"};
    for (int mi = 0; mi < 2; mi++)
        for (int nb = 1; nb <= 4; nb += 3) {
            Model m;
            model_open(&m, names[mi], DT_BF16, mi == 0 ? 8.0 : 4.0);
            char err[4096];
            GenerateOptions o;
            generate_options_default(&o);
            o.max_length = 40;
            o.min_length = 6;
            o.num_beams = nb;
            T5Generator* Ge = t5_generator_create(&m.t, m.Z, 8, 64, &o, err, sizeof err);
            T5Generator* Gg = t5_generator_create(&m.t, m.Z, 8, 64, &o, err, sizeof err);
            if (!Ge || !Gg) fail_msg("%s", err);
            t5_generator_set_cuda_graphs(Ge, false);
            t5_generator_set_cuda_graphs(Gg, true);
            int* oe = malloc(sizeof(int) * 8 * 40);
            int* og = malloc(sizeof(int) * 8 * 40);
            int n_batches = 0;
            for (size_t bi = 0; bi < json_array_size(batches); bi++) {
                json_t* b = json_array_get(batches, bi);
                int B, Ts, B2, Ts2, we = 0, wg = 0;
                int* ids = json_rows(json_object_get(b, "input_ids"), &B, &Ts);
                int* mask = json_rows(json_object_get(b, "attention_mask"), &B2, &Ts2);
                if (t5_generate(Ge, ids, mask, B, Ts, oe, &we, m.s, err, sizeof err)) fail_msg("%s", err);
                for (int rep = 0; rep < 2; rep++) {
                    memset(og, 0xff, sizeof(int) * 8 * 40);
                    if (t5_generate(Gg, ids, mask, B, Ts, og, &wg, m.s, err, sizeof err)) fail_msg("%s", err);
                    assert_int_equal(we, wg);
                    for (int r = 0; r < B; r++)
                        if (memcmp(oe + r * 40, og + r * 40, sizeof(int) * (size_t)we) != 0)
                            fail_msg("%s beams %d batch %zu row %d: graphs differ from eager", names[mi], nb, bi, r);
                }
                n_batches++;
                free(ids);
                free(mask);
            }
            const GenerateStats* se = t5_generator_stats(Ge);
            const GenerateStats* sg = t5_generator_stats(Gg);
            print_message("%s beams %d: %d batches identical; eager %lld steps (%lld tokens); graphs %lld steps, %lld "
                          "replayed, %lld graphs captured\n",
                          names[mi], nb, n_batches, (long long)se->steps, (long long)se->tokens, (long long)sg->steps,
                          (long long)sg->graph_steps, (long long)sg->graphs_captured);
            assert_int_equal(se->graph_steps, 0);
            assert_true(sg->graph_steps > 0);
            assert_int_equal(sg->tokens, 2 * se->tokens);
            free(oe);
            free(og);
            t5_generator_destroy(Ge);
            t5_generator_destroy(Gg);
            model_close(&m);
        }
    json_decref(bj);
}

// Lockstep (t5_generator_set_lockstep) on one GPU, another rank played by the agreement callback: it answers "some
// row elsewhere is not finished" (1) for the first `limit` checks of each batch, so this generator steps on after its
// own rows finished (up to max_length with a large limit). fp32, both models, greedy and 2 and 4 beams (device beam
// search), the 8 fixture batches: the outputs must equal a generator alone, token for token and width for width
// (finished rows stay finished; greedy's compaction at the fixed checks and to padding rows changes no row), with
// more decoder steps. An idle batch (a padding step's) runs to the same stop without error.
typedef struct {
    int calls, limit;
} FakeRank;

static int fake_agree(void* ctx, int vote) {
    FakeRank* f = ctx;
    const int other = f->calls++ < f->limit ? 1 : 0;
    return vote > other ? vote : other;
}

static void test_generate_lockstep_extra_steps(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    json_t* bj = load_json("batches.json");
    json_t* batches = json_object_get(bj, "batches");
    const char* names[2] = {"tiny_v10", "tiny_v11"};
    const int ML = 32;
    for (int mi = 0; mi < 2; mi++)
        for (int nb = 1; nb <= 4; nb *= 2) {
            Model m;
            model_open(&m, names[mi], DT_F32, mi == 0 ? 8.0 : 4.0);
            char err[4096];
            GenerateOptions o;
            generate_options_default(&o);
            o.max_length = ML;
            o.num_beams = nb;
            T5Generator* Ga = t5_generator_create(&m.t, m.Z, 8, 64, &o, err, sizeof err);
            T5Generator* Gl = t5_generator_create(&m.t, m.Z, 8, 64, &o, err, sizeof err);
            if (!Ga || !Gl) fail_msg("%s", err);
            t5_generator_set_cuda_graphs(Ga, false);
            t5_generator_set_cuda_graphs(Gl, false);
            FakeRank fr = {0, 0};
            t5_generator_set_lockstep(Gl, fake_agree, &fr);
            int* oa = malloc(sizeof(int) * 8 * ML);
            int* ol = malloc(sizeof(int) * 8 * ML);
            const int limits[] = {0, 2, 1000};
            for (size_t bi = 0; bi < json_array_size(batches); bi++) {
                json_t* b = json_array_get(batches, bi);
                int B, Ts, B2, Ts2, wa = 0, wl = 0;
                int* ids = json_rows(json_object_get(b, "input_ids"), &B, &Ts);
                int* mask = json_rows(json_object_get(b, "attention_mask"), &B2, &Ts2);
                if (t5_generate(Ga, ids, mask, B, Ts, oa, &wa, m.s, err, sizeof err)) fail_msg("%s", err);
                for (size_t li = 0; li < T5_ARRAY_LEN(limits); li++) {
                    fr = (FakeRank){0, limits[li]};
                    memset(ol, 0xff, sizeof(int) * 8 * ML);
                    const int64_t steps0 = t5_generator_stats(Gl)->steps;
                    if (t5_generate(Gl, ids, mask, B, Ts, ol, &wl, m.s, err, sizeof err)) fail_msg("%s", err);
                    // the other rank busy to the end: every step up to max_length ran
                    if (limits[li] == 1000 && t5_generator_stats(Gl)->steps - steps0 != ML - 1)
                        fail_msg("%s beams %d batch %zu: %lld decoder steps with the other rank busy, want %d",
                                 names[mi], nb, bi, (long long)(t5_generator_stats(Gl)->steps - steps0), ML - 1);
                    if (wa != wl)
                        fail_msg("%s beams %d batch %zu limit %d: width %d alone, %d in lockstep", names[mi], nb, bi,
                                 limits[li], wa, wl);
                    for (int r = 0; r < B; r++)
                        if (memcmp(oa + r * ML, ol + r * ML, sizeof(int) * (size_t)wa) != 0)
                            fail_msg("%s beams %d batch %zu limit %d row %d: lockstep's extra steps changed the row",
                                     names[mi], nb, bi, limits[li], r);
                    if (fr.calls == 0) fail_msg("%s beams %d: no agreement asked for", names[mi], nb);
                }
                // a padding step's batch: votes 0, steps on while the other rank is busy, stops with it
                t5_generator_set_lockstep_idle(Gl, true);
                fr = (FakeRank){0, 3};
                if (t5_generate(Gl, ids, mask, B, Ts, ol, &wl, m.s, err, sizeof err)) fail_msg("%s", err);
                assert_int_equal(fr.calls, 4);  // three answered 1, the fourth 0: the stop
                t5_generator_set_lockstep_idle(Gl, false);
                free(ids);
                free(mask);
            }
            const GenerateStats* sa = t5_generator_stats(Ga);
            const GenerateStats* sl = t5_generator_stats(Gl);
            print_message("%s beams %d: lockstep identical; alone %lld decoder steps, lockstep %lld steps / %lld "
                          "agreements (3 runs + 1 idle per batch)\n", names[mi], nb, (long long)sa->steps,
                          (long long)sl->steps, (long long)sl->agreements);
            assert_true(sl->agreements > 0);
            assert_int_equal(sa->agreements, 0);
            free(oa);
            free(ol);
            t5_generator_destroy(Ga);
            t5_generator_destroy(Gl);
            model_close(&m);
        }
    json_decref(bj);
}

// evaluate_generate end to end on 20 WMT16 validation examples (real tokenizer and data loader, tiny model):
// the counts, gen_len recomputed from t5_generate on the same batches, the same result from length-sorted batches,
// the predictions file, the empty-split error
static void test_evaluate_generate(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    T5_REQUIRE_DATA();
    Model m;
    model_open(&m, "tiny_v10", DT_F32, 8.0);
    char err[4096];
    char* spm = t5_path_join(t5test_data_dir(), "t5-spiece");
    Tokenizer* tok = tokenizer_open(spm, err, sizeof err);
    if (!tok) fail_msg("%s", err);
    DataOptions d;
    data_options_default(&d);
    d.dataset_name = "wmt16-ro-en";
    d.data_dir = t5test_data_dir();
    d.source_lang = "en";
    d.target_lang = "ro";
    d.tokenizer_path = spm;
    d.no_cache = true;
    d.quiet = true;
    d.eval_batch_size = 8;
    d.max_source_length = 64;
    d.max_samples[DATA_SPLIT_VALIDATION] = 20;
    Dataset* ds = dataset_open(&d, DATA_SPLIT_VALIDATION, tok, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    EvalGenConfig c = {.prefix = "predict", .keep_predictions = true};
    generate_options_default(&c.gen);
    c.gen.max_length = 24;
    c.gen.num_beams = 2;
    EvalGenResult r;
    if (evaluate_generate(m.Z, &m.t, tok, ds, &d, &c, m.s, &r, err, sizeof err)) fail_msg("%s", err);
    print_message("evaluate: %lld samples, %lld steps, bleu %.4f, gen_len %.4f, %.3f s\n", (long long)r.num_samples,
                  (long long)r.num_steps, r.bleu, r.gen_len, r.runtime);
    assert_int_equal(r.num_samples, 20);
    assert_int_equal(r.num_steps, 3);
    assert_true(r.bleu >= 0 && r.bleu <= 100);
    // gen_len again, straight from t5_generate on the data loader's batches
    T5Generator* G = t5_generator_create(&m.t, m.Z, 8, 64, &c.gen, err, sizeof err);
    DataLoader* dl = dataloader_open(ds, &d, false, err, sizeof err);
    assert_non_null(G);
    assert_non_null(dl);
    Batch b = {0};
    int64_t nonpad = 0, n = 0;
    int out[8 * 24], w;
    while (dataloader_next_batch(dl, &b)) {
        if (t5_generate(G, b.input_ids, b.attention_mask, b.B, b.Ts, out, &w, m.s, err, sizeof err))
            fail_msg("%s", err);
        for (int i = 0; i < b.B; i++) nonpad += evaluate_count_nonpad(out + i * 24, w, 0);
        n += b.B;
    }
    assert_int_equal(n, 20);
    assert_true(fabs(r.gen_len - evaluate_round4((double)nonpad / 20.0)) < 1e-12);
    // the same split in length-sorted batches (EvalGenConfig.sort_by_length): other batches and widths, the same
    // predictions in input order, the same BLEU, and gen_len still HF's input-order count (2 beams: the </s> fill
    // follows the input-order batches' widths); fp32, so each row's tokens are expected to be the unsorted run's
    EvalGenConfig cs = c;
    cs.sort_by_length = true;
    EvalGenResult rs;
    if (evaluate_generate(m.Z, &m.t, tok, ds, &d, &cs, m.s, &rs, err, sizeof err)) fail_msg("%s", err);
    print_message("sorted: bleu %.4f, gen_len %.4f, padded source positions %lld (input order %lld), %.3f s\n",
                  rs.bleu, rs.gen_len, (long long)rs.src_positions, (long long)rs.src_positions_input, rs.runtime);
    assert_true(rs.sorted && !r.sorted);
    assert_true(rs.src_positions <= rs.src_positions_input);
    assert_int_equal(r.src_positions, r.src_positions_input);
    assert_int_equal(rs.num_samples, 20);
    for (int64_t i = 0; i < 20; i++)
        if (strcmp(rs.predictions[i], r.predictions[i]) != 0)
            fail_msg("example %lld: sorted \"%s\", input order \"%s\"", (long long)i, rs.predictions[i],
                     r.predictions[i]);
    assert_true(rs.bleu == r.bleu);
    assert_true(rs.gen_len == r.gen_len);
    evaluate_result_free(&rs);
    batch_free(&b);
    dataloader_close(dl);
    t5_generator_destroy(G);
    assert_int_equal(evaluate_write_predictions(t5test_tmpdir(), &r, err, sizeof err), 0);
    char* p = t5_path_join(t5test_tmpdir(), "generated_predictions.txt");
    size_t len = 0;
    char* text = t5_read_file(p, &len);
    int lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    assert_int_equal(lines, 20);
    free(text);
    free(p);
    evaluate_result_free(&r);
    dataset_close(ds);
    // an empty split is an error, not a division by zero
    d.max_samples[DATA_SPLIT_VALIDATION] = 0;
    ds = dataset_open(&d, DATA_SPLIT_VALIDATION, tok, err, sizeof err);
    if (ds) {
        assert_int_equal(evaluate_generate(m.Z, &m.t, tok, ds, &d, &c, m.s, &r, err, sizeof err), -1);
        print_message("empty split: %s\n", err);
        assert_contains(err, "empty");
        dataset_close(ds);
    } else {
        print_message("empty split refused by dataset_open: %s\n", err);
    }
    tokenizer_close(tok);
    free(spm);
    model_close(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_fp32_equals_hf),
        cmocka_unit_test(test_generate_bf16_close_to_hf),
        cmocka_unit_test(test_generate_bad_options),
        cmocka_unit_test(test_generate_graphs_equal_eager),
        cmocka_unit_test(test_generate_lockstep_extra_steps),
        cmocka_unit_test(test_evaluate_generate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
