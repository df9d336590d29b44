/*
 * test_safetensors.c: src/base/safetensors.c on the checkpoints transformers wrote (test/fixtures/t5/), the
 * dtype conversions (exhaustive fp16 round trip, round-to-nearest-even edge cases), writer round trips
 * (single file, sharded + index, callbacks), and every error case with its message.
 */
#include <math.h>
#include <unistd.h>

#include "t5test.h"

#include "../model/t5_config.h"
#include "../src/base/common.h"
#include "../src/base/safetensors.h"

#define ERRLEN 1024

static const char* fixture(const char* rel) {
    static char buf[4][4200];
    static int k = 0;
    char* p = buf[k++ % 4];
    snprintf(p, 4200, "%s/test/fixtures/t5/%s", t5test_repo_dir(), rel);
    return p;
}

static const char* tmp(const char* name) {
    static char buf[8][512];
    static int k = 0;
    char* p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", t5test_tmpdir(), name);
    return p;
}

// checks name exists with the given 2-D (or 1-D when c == 0) shape and fp16 storage
static void expect_tensor(SafeTensors* st, const char* name, int64_t r, int64_t c) {
    const SafeTensorInfo* info;
    char err[ERRLEN];
    if (safetensors_info(st, name, &info, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(info->dtype, DT_F16);
    if (c == 0) {
        assert_int_equal(info->ndim, 1);
        assert_int_equal(info->shape[0], r);
    } else {
        assert_int_equal(info->ndim, 2);
        if (info->shape[0] != r || info->shape[1] != c)
            fail_msg("%s: shape [%lld, %lld], expected [%lld, %lld]", name, (long long)info->shape[0],
                     (long long)info->shape[1], (long long)r, (long long)c);
    }
}

// the T5 naming of HF checkpoints, checked against the config of the same folder
static void check_t5_checkpoint(const char* dir, int expect_count) {
    char err[ERRLEN], path[4300], name[256];
    T5Config cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(t5_config_load_json(path, &cfg, err, sizeof err), 0);
    SafeTensors* st;
    if (safetensors_open(&st, dir, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(safetensors_count(st), expect_count);
    assert_non_null(safetensors_metadata(st, "format"));
    assert_string_equal(safetensors_metadata(st, "format"), "pt");
    int D = cfg.d_model, I = cfg.num_heads * cfg.d_kv, F = cfg.d_ff, V = cfg.vocab_size;
    expect_tensor(st, "shared.weight", V, D);
    assert_int_equal(safetensors_has(st, "lm_head.weight"), !cfg.tie_word_embeddings);
    if (!cfg.tie_word_embeddings) expect_tensor(st, "lm_head.weight", V, D);
    const char* stacks[2] = {"encoder", "decoder"};
    for (int s = 0; s < 2; s++) {
        int L = s == 0 ? cfg.num_layers : cfg.num_decoder_layers;
        for (int l = 0; l < L; l++) {
            const char* attn[2] = {"0.SelfAttention", "1.EncDecAttention"};
            for (int a = 0; a < (s == 0 ? 1 : 2); a++) {
                const char* qkv[3] = {"q", "k", "v"};
                for (int j = 0; j < 3; j++) {
                    snprintf(name, sizeof name, "%s.block.%d.layer.%s.%s.weight", stacks[s], l, attn[a], qkv[j]);
                    expect_tensor(st, name, I, D);
                }
                snprintf(name, sizeof name, "%s.block.%d.layer.%s.o.weight", stacks[s], l, attn[a]);
                expect_tensor(st, name, D, I);
                snprintf(name, sizeof name, "%s.block.%d.layer.%d.layer_norm.weight", stacks[s], l, a);
                expect_tensor(st, name, D, 0);
                snprintf(name, sizeof name, "%s.block.%d.layer.%s.relative_attention_bias.weight", stacks[s], l,
                         attn[a]);
                if (l == 0 && a == 0) expect_tensor(st, name, cfg.relative_attention_num_buckets, cfg.num_heads);
                else assert_false(safetensors_has(st, name));
            }
            int ffl = s == 0 ? 1 : 2;
            if (cfg.feed_forward == T5_FF_RELU) {
                snprintf(name, sizeof name, "%s.block.%d.layer.%d.DenseReluDense.wi.weight", stacks[s], l, ffl);
                expect_tensor(st, name, F, D);
            } else {
                snprintf(name, sizeof name, "%s.block.%d.layer.%d.DenseReluDense.wi_0.weight", stacks[s], l, ffl);
                expect_tensor(st, name, F, D);
                snprintf(name, sizeof name, "%s.block.%d.layer.%d.DenseReluDense.wi_1.weight", stacks[s], l, ffl);
                expect_tensor(st, name, F, D);
            }
            snprintf(name, sizeof name, "%s.block.%d.layer.%d.DenseReluDense.wo.weight", stacks[s], l, ffl);
            expect_tensor(st, name, D, F);
            snprintf(name, sizeof name, "%s.block.%d.layer.%d.layer_norm.weight", stacks[s], l, ffl);
            expect_tensor(st, name, D, 0);
        }
        snprintf(name, sizeof name, "%s.block.%d.layer.0.layer_norm.weight", stacks[s], L);
        assert_false(safetensors_has(st, name));
        snprintf(name, sizeof name, "%s.final_layer_norm.weight", stacks[s]);
        expect_tensor(st, name, D, 0);
    }
    // every tensor was looked at through a T5 name: nothing unexpected, once all are read
    size_t maxn = (size_t)V * D;
    float* buf = malloc(maxn * sizeof(float));
    for (int i = 0; i < safetensors_count(st); i++) {
        const SafeTensorInfo* info;
        assert_int_equal(safetensors_info(st, safetensors_name(st, i), &info, err, sizeof err), 0);
        assert_int_equal(safetensors_read(st, info->name, buf, DT_F32, info->shape, info->ndim, err, sizeof err), 0);
        for (size_t j = 0; j < info->numel; j++) assert_true(isfinite(buf[j]));
    }
    char list[256];
    assert_int_equal(safetensors_unconsumed(st, list, sizeof list), 0);
    free(buf);
    safetensors_close(st);
}

static void test_fixture_checkpoints(void** state) {
    (void)state;
    check_t5_checkpoint(fixture("tiny_v10"), 47);  // tied: shared.weight only, no lm_head
    check_t5_checkpoint(fixture("tiny_v11"), 66);  // untied: + lm_head.weight
}

static void test_fixture_reference_file(void** state) {
    (void)state;
    char err[ERRLEN];
    SafeTensors* st;
    if (safetensors_open(&st, fixture("ref_tiny_v10.safetensors"), err, sizeof err) != 0) fail_msg("%s", err);
    const SafeTensorInfo* info;
    assert_int_equal(safetensors_info(st, "fp32.loss", &info, err, sizeof err), 0);
    assert_int_equal(info->ndim, 0);
    assert_int_equal(info->numel, 1);
    float loss;
    assert_int_equal(safetensors_read(st, "fp32.loss", &loss, DT_F32, NULL, 0, err, sizeof err), 0);
    assert_true(loss > 11.15f && loss < 11.16f);  // 11.1530476 (versions.json)
    assert_true(safetensors_has(st, "fp32.grad.shared.weight"));
    assert_true(safetensors_has(st, "fp16.grad_rows.shared.weight"));
    assert_non_null(safetensors_metadata(st, "grad_rows"));
    assert_string_equal(safetensors_metadata(st, "transformers"), "5.17.0");
    safetensors_close(st);
}

// ---------------------------------------------------------------------------------------------
// conversions

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_f16_conversion(void** state) {
    (void)state;
    // every half survives half -> float -> half (NaNs stay NaN)
    for (uint32_t h = 0; h < 65536; h++) {
        float f = safetensors_f16_to_f32((uint16_t)h);
        uint16_t back = safetensors_f32_to_f16(f);
        bool nan = ((h & 0x7c00) == 0x7c00) && (h & 0x3ff);
        if (nan) assert_true(isnan(f) && (back & 0x7c00) == 0x7c00 && (back & 0x3ff));
        else if (back != h) fail_msg("half 0x%04x -> %g -> 0x%04x", h, (double)f, back);
    }
    assert_int_equal(safetensors_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(safetensors_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(safetensors_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(safetensors_f32_to_f16(65519.0f), 0x7bff);   // below the midpoint
    assert_int_equal(safetensors_f32_to_f16(65520.0f), 0x7c00);   // midpoint to 65536: ties to even = inf
    assert_int_equal(safetensors_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(safetensors_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(safetensors_f32_to_f16(ldexpf(1, -24)), 0x0001);      // smallest subnormal
    assert_int_equal(safetensors_f32_to_f16(ldexpf(1, -25)), 0x0000);      // tie -> even (0)
    assert_int_equal(safetensors_f32_to_f16(ldexpf(3, -25)), 0x0002);      // tie -> even (2)
    assert_int_equal(safetensors_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);      // tie -> even
    assert_int_equal(safetensors_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02);      // tie -> even (up)
    assert_int_equal(safetensors_f32_to_f16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)), 0x3c01);  // above tie
    assert_true(isnan(safetensors_f16_to_f32(safetensors_f32_to_f16(NAN))));
    assert_true(safetensors_f16_to_f32(0x0001) == ldexpf(1, -24));
    assert_true(safetensors_f16_to_f32(0x8000) == 0.0f && signbit(safetensors_f16_to_f32(0x8000)));
}

static void test_bf16_conversion(void** state) {
    (void)state;
    assert_int_equal(safetensors_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(safetensors_f32_to_bf16(bits_f(0x3f808000)), 0x3f80);  // tie -> even (down)
    assert_int_equal(safetensors_f32_to_bf16(bits_f(0x3f818000)), 0x3f82);  // tie -> even (up)
    assert_int_equal(safetensors_f32_to_bf16(bits_f(0x3f808001)), 0x3f81);  // above tie
    assert_int_equal(safetensors_f32_to_bf16(bits_f(0x7f7fffff)), 0x7f80);  // FLT_MAX rounds to inf
    uint16_t n = safetensors_f32_to_bf16(NAN);
    assert_true(isnan(safetensors_bf16_to_f32(n)));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = safetensors_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) assert_int_equal(safetensors_f32_to_bf16(f), h);
    }
    // f16 -> bf16 goes through f32 with one rounding
    uint16_t src = 0x3c01;  // 1 + 2^-10
    uint16_t dst;
    safetensors_convert(&dst, DT_BF16, &src, DT_F16, 1);
    assert_int_equal(dst, 0x3f80);
}

// ---------------------------------------------------------------------------------------------
// writer round trips

static int produce_ramp(void* ctx, const char* name, size_t off, void* dst, size_t n, char* err, size_t errlen) {
    (void)ctx, (void)name, (void)err, (void)errlen;
    for (size_t i = 0; i < n; i++) ((uint8_t*)dst)[i] = (uint8_t)((off + i) * 7);
    return 0;
}

static int produce_fail(void* ctx, const char* name, size_t off, void* dst, size_t n, char* err, size_t errlen) {
    (void)ctx, (void)name, (void)off, (void)dst, (void)n;
    snprintf(err, errlen, "GPU gather failed");
    return -1;
}

static SafeTensorsWriter* sample_writer(float* a, uint16_t* b, uint16_t* c, float* s) {
    char err[ERRLEN];
    for (int i = 0; i < 6; i++) a[i] = 0.5f * (float)i - 1.0f;
    for (int i = 0; i < 4; i++) b[i] = safetensors_f32_to_f16((float)i + 0.25f);
    for (int i = 0; i < 3; i++) c[i] = safetensors_f32_to_bf16(-(float)i);
    *s = 3.5f;
    SafeTensorsWriter* w = safetensors_writer_new();
    int64_t sa[2] = {2, 3}, sb[1] = {4}, sc[3] = {1, 3, 1}, sz[2] = {0, 5}, sr[1] = {33};
    assert_int_equal(safetensors_writer_add(w, "a.weight", DT_F32, 2, sa, a, err, sizeof err), 0);
    assert_int_equal(safetensors_writer_add(w, "b", DT_F16, 1, sb, b, err, sizeof err), 0);
    assert_int_equal(safetensors_writer_add(w, "c", DT_BF16, 3, sc, c, err, sizeof err), 0);
    assert_int_equal(safetensors_writer_add(w, "scalar", DT_F32, 0, NULL, s, err, sizeof err), 0);
    assert_int_equal(safetensors_writer_add(w, "empty", DT_F16, 2, sz, NULL, err, sizeof err), 0);
    assert_int_equal(safetensors_writer_add_fn(w, "ramp", DT_F16, 1, sr, produce_ramp, NULL, err, sizeof err), 0);
    safetensors_writer_set_metadata(w, "step", "42");
    // duplicates are refused
    assert_int_equal(safetensors_writer_add(w, "b", DT_F16, 1, sb, b, err, sizeof err), -1);
    assert_contains(err, "tensor 'b' added twice");
    return w;
}

static void check_sample(SafeTensors* st, const float* a, const uint16_t* b, const uint16_t* c) {
    char err[ERRLEN];
    assert_int_equal(safetensors_count(st), 6);
    float fa[6];
    int64_t sa[2] = {2, 3};
    assert_int_equal(safetensors_read(st, "a.weight", fa, DT_F32, sa, 2, err, sizeof err), 0);
    assert_memory_equal(fa, a, sizeof fa);
    uint16_t hb[4];
    assert_int_equal(safetensors_read(st, "b", hb, DT_F16, NULL, -1, err, sizeof err), 0);
    assert_memory_equal(hb, b, sizeof hb);
    float fc[3];
    assert_int_equal(safetensors_read(st, "c", fc, DT_F32, NULL, -1, err, sizeof err), 0);
    for (int i = 0; i < 3; i++) assert_true(fc[i] == safetensors_bf16_to_f32(c[i]));
    float s;
    assert_int_equal(safetensors_read(st, "scalar", &s, DT_F32, NULL, 0, err, sizeof err), 0);
    assert_true(s == 3.5f);
    const SafeTensorInfo* info;
    assert_int_equal(safetensors_info(st, "empty", &info, err, sizeof err), 0);
    assert_int_equal(info->numel, 0);
    assert_int_equal(info->shape[1], 5);
    uint8_t r[66];
    assert_int_equal(safetensors_read(st, "ramp", r, DT_F16, NULL, -1, err, sizeof err), 0);
    for (int i = 0; i < 66; i++) assert_int_equal(r[i], (uint8_t)(i * 7));
    // a slice, converted: elements 2..4 of a.weight as bf16
    uint16_t sl[3];
    assert_int_equal(safetensors_read_slice(st, "a.weight", 2, 3, sl, DT_BF16, err, sizeof err), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(sl[i], safetensors_f32_to_bf16(a[2 + i]));
    assert_int_equal(safetensors_read_slice(st, "a.weight", 5, 2, sl, DT_BF16, err, sizeof err), -1);
    assert_contains(err, "out of range");
    assert_string_equal(safetensors_metadata(st, "step") ? safetensors_metadata(st, "step") : "?", "42");
}

static void test_write_read_single(void** state) {
    (void)state;
    float a[6], s;
    uint16_t b[4], c[3];
    char err[ERRLEN];
    SafeTensorsWriter* w = sample_writer(a, b, c, &s);
    const char* path = tmp("single.safetensors");
    assert_int_equal(safetensors_writer_write_file(w, path, err, sizeof err), 0);
    safetensors_writer_free(w);
    // header padded so the data starts 8-byte aligned; no temp file left
    size_t len;
    char* raw = t5_read_file(path, &len);
    uint64_t hl;
    memcpy(&hl, raw, 8);
    assert_int_equal((8 + hl) % 8, 0);
    assert_int_equal(raw[8], '{');
    assert_int_equal(len, 8 + hl + 24 + 8 + 6 + 4 + 0 + 66);
    free(raw);
    SafeTensors* st;
    if (safetensors_open(&st, path, err, sizeof err) != 0) fail_msg("%s", err);
    assert_string_equal(safetensors_metadata(st, "format"), "pt");
    check_sample(st, a, b, c);
    const void* p;
    assert_int_equal(safetensors_data(st, "a.weight", &p, err, sizeof err), 0);
    assert_memory_equal(p, a, sizeof(float) * 6);
    safetensors_close(st);
}

static void test_write_read_sharded(void** state) {
    (void)state;
    float a[6], s;
    uint16_t b[4], c[3];
    char err[ERRLEN];
    SafeTensorsWriter* w = sample_writer(a, b, c, &s);
    const char* dir = tmp("sharded");
    int ns = 0;
    // 30-byte shards: a (24) | b (8) + c (6) + scalar (4) + empty -> wait for ramp (66) alone
    assert_int_equal(safetensors_writer_write_dir(w, dir, 30, &ns, err, sizeof err), 0);
    assert_int_equal(ns, 3);
    char p[600];
    snprintf(p, sizeof p, "%s/model-00001-of-00003.safetensors", dir);
    assert_true(t5_is_file(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    char* idx = t5_read_file(p, NULL);
    assert_non_null(idx);
    assert_contains(idx, "\"total_size\": 108");
    assert_contains(idx, "\"ramp\": \"model-00003-of-00003.safetensors\"");
    free(idx);
    SafeTensors* st;
    if (safetensors_open(&st, dir, err, sizeof err) != 0) fail_msg("%s", err);
    check_sample(st, a, b, c);
    safetensors_close(st);
    // saving again unsharded into the same folder removes the index and the old shards
    assert_int_equal(safetensors_writer_write_dir(w, dir, 0, &ns, err, sizeof err), 0);
    assert_int_equal(ns, 1);
    assert_false(t5_path_exists(p));
    snprintf(p, sizeof p, "%s/model-00001-of-00003.safetensors", dir);
    assert_false(t5_path_exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_true(t5_is_file(p));
    if (safetensors_open(&st, dir, err, sizeof err) != 0) fail_msg("%s", err);
    check_sample(st, a, b, c);
    safetensors_close(st);
    // a failing producer: an error naming the tensor, and no file (or temp file) left behind
    int64_t one[1] = {1};
    assert_int_equal(safetensors_writer_add_fn(w, "late", DT_F32, 1, one, produce_fail, NULL, err, sizeof err), 0);
    const char* bad = tmp("fail.safetensors");
    assert_int_equal(safetensors_writer_write_file(w, bad, err, sizeof err), -1);
    assert_contains(err, "tensor 'late'");
    assert_contains(err, "GPU gather failed");
    assert_false(t5_path_exists(bad));
    char out[4096];
    t5test_run(out, sizeof out, "ls %s | grep -c tmp || true", t5test_tmpdir());
    assert_string_equal(out, "0\n");
    safetensors_writer_free(w);
}

// ---------------------------------------------------------------------------------------------
// errors

// writes an 8-byte length, the header text, then `data` bytes of 0x11
static const char* write_raw(const char* name, const char* header, size_t data, int64_t len_override) {
    const char* p = tmp(name);
    FILE* f = fopen(p, "wb");
    uint64_t hl = len_override >= 0 ? (uint64_t)len_override : strlen(header);
    fwrite(&hl, 8, 1, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data; i++) fputc(0x11, f);
    fclose(f);
    return p;
}

static void expect_open_error(const char* path, const char* needle, const char* needle2) {
    SafeTensors* st = (SafeTensors*)0x1;
    char err[ERRLEN] = "";
    assert_int_equal(safetensors_open(&st, path, err, sizeof err), -1);
    assert_null(st);
    assert_contains(err, needle);
    if (needle2) assert_contains(err, needle2);
    assert_contains(err, path);  // names the file
}

static void test_open_errors(void** state) {
    (void)state;
    const char* ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    // sanity: the well-formed one opens
    SafeTensors* st;
    char err[ERRLEN];
    assert_int_equal(safetensors_open(&st, write_raw("ok.st", ok, 16, -1), err, sizeof err), 0);
    safetensors_close(st);
    expect_open_error(write_raw("trunc.st", ok, 10, -1), "truncated", "'w'");
    expect_open_error(tmp("trunc.st"), "ends at data byte 16", NULL);
    const char* tiny = tmp("tiny.st");
    t5test_write_file(tiny, "abc");
    expect_open_error(tiny, "truncated", NULL);
    expect_open_error(write_raw("hlen.st", ok, 16, 5000), "truncated", "header length 5000");
    expect_open_error(write_raw("huge.st", ok, 16, (int64_t)1 << 40), "corrupt safetensors header", NULL);
    expect_open_error(write_raw("json.st", "{\"w\":{\"dtype\":", 0, -1), "corrupt safetensors header", "invalid JSON");
    expect_open_error(write_raw("arr.st", "[1,2]", 0, -1), "corrupt safetensors header", NULL);
    expect_open_error(write_raw("i64.st", "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, -1),
                      "tensor 'ids'", "unsupported dtype I64");
    expect_open_error(write_raw("size.st", "{\"w\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, -1),
                      "tensor 'w' data_offsets [0, 16] hold 16 bytes", "needs 8");
    expect_open_error(write_raw("ovl.st",
                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                                12, -1),
                      "overlap", "'a'");
    // the safetensors crate's rule: sorted by offsets, every tensor starts where the previous one ended, so
    // an empty tensor inside another is refused too (it is the first one out of place)
    expect_open_error(write_raw("ovl2.st",
                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                                "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                                16, -1),
                      "overlap", "'z'");
    // an empty tensor at the end of the data is fine
    assert_int_equal(safetensors_open(&st,
                                      write_raw("empty_end.st",
                                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                                "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}",
                                                8, -1),
                                      err, sizeof err),
                     0);
    safetensors_close(st);
    // a gap between tensors, a late first tensor, bytes after the last one, two names for one range
    expect_open_error(write_raw("gap.st",
                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                                12, -1),
                      "4 unused bytes before tensor 'b'", NULL);
    expect_open_error(write_raw("late.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1),
                      "unused bytes before tensor 'a'", NULL);
    expect_open_error(write_raw("tail.st", ok, 20, -1), "4 bytes after the last tensor", NULL);
    expect_open_error(write_raw("alias.st",
                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                                8, -1),
                      "overlap", NULL);
    // duplicate names (JSON would keep the last), an empty name, a shape whose size overflows 64 bits
    expect_open_error(write_raw("dup.st",
                                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                                8, -1),
                      "corrupt safetensors header", "duplicate");
    expect_open_error(write_raw("noname.st", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1),
                      "empty name", NULL);
    expect_open_error(write_raw("ovf.st",
                                "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,4]}}",
                                4, -1),
                      "tensor 'w'", "overflows");
    expect_open_error(write_raw("keys.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, -1), "tensor 'w' needs", NULL);
    expect_open_error(write_raw("neg.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, -1),
                      "invalid shape", NULL);
    expect_open_error(write_raw("meta.st", "{\"__metadata__\":{\"a\":1}}", 0, -1), "__metadata__", NULL);
    expect_open_error(tmp("does-not-exist.safetensors"), "cannot open", NULL);
    // a folder without weights
    char d[600];
    snprintf(d, sizeof d, "%s/emptydir", t5test_tmpdir());
    t5_mkdir_p(d);
    expect_open_error(d, "no model.safetensors", NULL);
}

static void test_index_errors(void** state) {
    (void)state;
    char d[600], p[700], err[ERRLEN];
    snprintf(d, sizeof d, "%s/idx", t5test_tmpdir());
    t5_mkdir_p(d);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    t5test_write_file(p, "{\"metadata\":{\"total_size\":16},\"weight_map\":{\"w\":\"model-00001-of-00002.safetensors\","
                         "\"x\":\"model-00002-of-00002.safetensors\"}}");
    expect_open_error(p, "missing shard", "model-00001-of-00002.safetensors");
    // both shards present, but the second lacks the tensor the index maps to it: found when used (lazily)
    char s1[700], s2[700];
    snprintf(s1, sizeof s1, "%s/model-00001-of-00002.safetensors", d);
    snprintf(s2, sizeof s2, "%s/model-00002-of-00002.safetensors", d);
    const char* a = write_raw("s1", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, -1);
    const char* b = write_raw("s2", "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1);
    assert_int_equal(rename(a, s1), 0);
    assert_int_equal(rename(b, s2), 0);
    SafeTensors* st;
    assert_int_equal(safetensors_open(&st, d, err, sizeof err), 0);
    assert_int_equal(safetensors_count(st), 2);
    assert_string_equal(safetensors_metadata(st, "total_size"), "16");
    float w[4];
    assert_int_equal(safetensors_read(st, "w", w, DT_F32, NULL, -1, err, sizeof err), 0);
    assert_int_equal(safetensors_read(st, "x", w, DT_F32, NULL, -1, err, sizeof err), -1);
    assert_contains(err, "missing tensor 'x'");
    assert_contains(err, "model-00002-of-00002.safetensors");
    safetensors_close(st);
    t5test_write_file(p, "{\"weight_map\": 3}");
    expect_open_error(p, "corrupt safetensors index", "weight_map");
    t5test_write_file(p, "{\"weight_map\": {\"w\": \"../etc/passwd\"}}");
    expect_open_error(p, "not a file name in this folder", NULL);
}

static void test_lookup_errors(void** state) {
    (void)state;
    float a[6], s;
    uint16_t b[4], c[3];
    char err[ERRLEN];
    SafeTensorsWriter* w = sample_writer(a, b, c, &s);
    const char* path = tmp("lk.safetensors");
    assert_int_equal(safetensors_writer_write_file(w, path, err, sizeof err), 0);
    safetensors_writer_free(w);
    SafeTensors* st;
    assert_int_equal(safetensors_open(&st, path, err, sizeof err), 0);
    float buf[64];
    // missing tensor
    assert_int_equal(safetensors_read(st, "nope.weight", buf, DT_F32, NULL, -1, err, sizeof err), -1);
    assert_contains(err, "missing tensor 'nope.weight'");
    assert_contains(err, path);
    // wrong shape
    int64_t want[2] = {3, 2};
    assert_int_equal(safetensors_read(st, "a.weight", buf, DT_F32, want, 2, err, sizeof err), -1);
    assert_contains(err, "tensor 'a.weight'");
    assert_contains(err, "has shape [2, 3], expected [3, 2]");
    assert_contains(err, path);
    // wrong dtype (for callers that need the exact stored type)
    assert_int_equal(safetensors_check_dtype(st, "b", DT_BF16, err, sizeof err), -1);
    assert_contains(err, "tensor 'b'");
    assert_contains(err, "has dtype F16, expected BF16");
    assert_int_equal(safetensors_check_dtype(st, "b", DT_F16, err, sizeof err), 0);
    // unexpected tensors: the ones never read
    assert_int_equal(safetensors_read(st, "b", buf, DT_F32, NULL, -1, err, sizeof err), 0);
    char list[256];
    assert_int_equal(safetensors_unconsumed(st, list, sizeof list), 5);
    assert_string_equal(list, "a.weight, c, scalar, empty, ramp");
    char small[16];
    assert_int_equal(safetensors_unconsumed(st, small, sizeof small), 5);
    assert_contains(small, "...");
    safetensors_close(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_checkpoints), cmocka_unit_test(test_fixture_reference_file),
        cmocka_unit_test(test_f16_conversion),      cmocka_unit_test(test_bf16_conversion),
        cmocka_unit_test(test_write_read_single),   cmocka_unit_test(test_write_read_sharded),
        cmocka_unit_test(test_open_errors),         cmocka_unit_test(test_index_errors),
        cmocka_unit_test(test_lookup_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
