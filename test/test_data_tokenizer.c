/*
 * test_data_tokenizer.c: our T5 tokenizer against HF transformers' ids and decoded text
 * (test/fixtures/tokenizer, made by scripts/make_tokenizer_fixtures.py from the shared data),
 * the `t5train tokenize` command, and the tokenizer's errors.
 */
#include "t5test.h"

#include <jansson.h>

#include "../data/readers.h"
#include "../data/spm.h"
#include "../data/tokenizer.h"
#include "../src/base/common.h"

static char* fixture_path(const char* name) {
    char* dir = t5_path_join(t5test_repo_dir(), "test/fixtures/tokenizer");
    char* p = t5_path_join(dir, name);
    free(dir);
    return p;
}

static char* data_path(const char* rel) { return t5_path_join(t5test_data_dir(), rel); }

// Splits a file into lines (without \n); returns the count. Caller frees (*lines)[0]'s block via *block.
static int64_t read_lines(const char* path, char*** lines, char** block) {
    size_t len;
    char* buf = t5_read_file(path, &len);
    if (!buf) fail_msg("cannot read %s", path);
    int64_t n = 0, cap = 1024;
    char** v = malloc(cap * sizeof(char*));
    char* p = buf;
    while (p < buf + len) {
        char* nl = memchr(p, '\n', (size_t)(buf + len - p));
        if (!nl) nl = buf + len;
        *nl = 0;
        if (n == cap) v = realloc(v, (cap *= 2) * sizeof(char*));
        v[n++] = p;
        p = nl + 1;
    }
    *lines = v;
    *block = buf;
    return n;
}

static Tokenizer* open_t5(void) {
    char err[512];
    char* m = data_path("t5-spiece/spiece.model");
    Tokenizer* tok = tokenizer_open(m, err, sizeof err);
    if (!tok) fail_msg("%s", err);
    free(m);
    return tok;
}

// Encodes texts[i] and compares to the fixture's line i; returns mismatches (prints the first few).
static int64_t compare_ids(const Tokenizer* tok, char** texts, int64_t n, const char* prefix, int max_len, const char* fixture) {
    char** ref;
    char* block;
    char* fp = fixture_path(fixture);
    int64_t nref = read_lines(fp, &ref, &block);
    free(fp);
    assert_int_equal(nref, n);
    int32_t* buf = NULL;
    size_t cap = 0;
    int64_t bad = 0;
    char err[256], line[1 << 16];
    for (int64_t i = 0; i < n; i++) {
        int k = tokenizer_encode(tok, prefix, texts[i], strlen(texts[i]), max_len, &buf, &cap, err, sizeof err);
        assert_true(k > 0);
        size_t o = 0;
        line[0] = 0;
        for (int j = 0; j < k && o + 16 < sizeof line; j++) o += (size_t)snprintf(line + o, sizeof line - o, j ? " %d" : "%d", buf[j]);
        if (strcmp(line, ref[i])) {
            if (bad < 3) print_message("%s line %lld:\n  ours %s\n  HF   %s\n", fixture, (long long)i + 1, line, ref[i]);
            bad++;
        }
    }
    print_message("%s: %lld lines, %lld mismatches\n", fixture, (long long)n, (long long)bad);
    free(buf);
    free(ref);
    free(block);
    return bad;
}

static void test_validation_ids_match_hf(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    Tokenizer* tok = open_t5();
    TextPairs tp;
    char err[512];
    char* en = data_path("wmt16-ro-en/validation.en");
    char* ro = data_path("wmt16-ro-en/validation.ro");
    assert_int_equal(text_pairs_read_parallel(en, ro, &tp, err, sizeof err), 0);
    assert_int_equal(tp.n, 1999);
    int64_t bad = 0;
    for (int L = 0; L < 2; L++) {
        int M = L ? 16 : 128;
        char f[64];
        snprintf(f, sizeof f, "val.enro.src.%d.ids", M);
        bad += compare_ids(tok, tp.src, tp.n, "translate English to Romanian: ", M, f);
        snprintf(f, sizeof f, "val.enro.tgt.%d.ids", M);
        bad += compare_ids(tok, tp.tgt, tp.n, NULL, M, f);
        snprintf(f, sizeof f, "val.roen.src.%d.ids", M);
        bad += compare_ids(tok, tp.tgt, tp.n, "translate Romanian to English: ", M, f);
        snprintf(f, sizeof f, "val.roen.tgt.%d.ids", M);
        bad += compare_ids(tok, tp.src, tp.n, "", M, f);
    }
    assert_int_equal(bad, 0);
    text_pairs_free(&tp);
    free(en);
    free(ro);
    tokenizer_close(tok);
}

static void test_extra_corpora_ids_match_hf(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    Tokenizer* tok = open_t5();
    char** list;
    char* lb;
    char* lp = fixture_path("extra.list");
    int64_t nl = read_lines(lp, &list, &lb);
    free(lp);
    assert_true(nl >= 12);
    int64_t bad = 0, total = 0;
    for (int64_t i = 0; i < nl; i++) {
        char rel[512], fix[512];
        assert_int_equal(sscanf(list[i], "%511s %511s", rel, fix), 2);
        char* dir = data_path("en-ro-extra");
        char* p = t5_path_join(dir, rel);
        char** lines;
        char* block;
        int64_t n = read_lines(p, &lines, &block);
        char** fl;
        char* fb;
        char* fp = fixture_path(fix);
        int64_t nf = read_lines(fp, &fl, &fb);
        assert_true(nf <= n);
        bad += compare_ids(tok, lines, nf, NULL, 0, fix);
        total += nf;
        free(fl); free(fb); free(fp); free(lines); free(block); free(p); free(dir);
    }
    print_message("extra corpora: %lld lines, %lld mismatches\n", (long long)total, (long long)bad);
    assert_int_equal(bad, 0);
    free(list);
    free(lb);
    tokenizer_close(tok);
}

static void test_hf_samples_match_hf(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    Tokenizer* tok = open_t5();
    const char* sets[][2] = {{"hf-fixtures/tests_samples/wmt16/sample.json", "hf.wmt16_sample"},
                             {"hf-fixtures/tests_samples/wmt_en_ro/train.json", "hf.wmt_en_ro_train"},
                             {"hf-fixtures/tests_samples/wmt_en_ro/val.json", "hf.wmt_en_ro_val"}};
    int64_t bad = 0;
    char err[512], f[128];
    for (size_t s = 0; s < 3; s++) {
        char* p = data_path(sets[s][0]);
        TextPairs tp;
        assert_int_equal(text_pairs_read_jsonl(p, "en", "ro", &tp, err, sizeof err), 0);
        snprintf(f, sizeof f, "%s.src.ids", sets[s][1]);
        bad += compare_ids(tok, tp.src, tp.n, "translate English to Romanian: ", 1024, f);
        snprintf(f, sizeof f, "%s.tgt.ids", sets[s][1]);
        bad += compare_ids(tok, tp.tgt, tp.n, NULL, 128, f);
        // decode of the label ids equals HF's batch_decode
        char** dec;
        char* db;
        char* dp;
        snprintf(f, sizeof f, "%s.tgt.dec", sets[s][1]);
        dp = fixture_path(f);
        int64_t nd = read_lines(dp, &dec, &db);
        assert_int_equal(nd, tp.n);
        int32_t* buf = NULL;
        size_t cap = 0;
        for (int64_t i = 0; i < tp.n; i++) {
            int k = tokenizer_encode(tok, NULL, tp.tgt[i], strlen(tp.tgt[i]), 128, &buf, &cap, err, sizeof err);
            char* text = tokenizer_decode(tok, buf, k, true);
            if (strcmp(text, dec[i])) { bad++; print_message("decode %s %lld:\n ours %s\n HF   %s\n", f, (long long)i, text, dec[i]); }
            free(text);
        }
        free(buf); free(dec); free(db); free(dp);
        text_pairs_free(&tp);
        free(p);
    }
    const char* legacy[] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        char rel[256];
        snprintf(rel, sizeof rel, "hf-fixtures/legacy_seq2seq_test_data/wmt_en_ro/%s.source", legacy[s]);
        char* p = data_path(rel);
        char** lines;
        char* block;
        int64_t n = read_lines(p, &lines, &block);
        snprintf(f, sizeof f, "hf.legacy_%s.source.ids", legacy[s]);
        bad += compare_ids(tok, lines, n, "translate English to Romanian: ", 1024, f);
        free(lines); free(block); free(p);
    }
    assert_int_equal(bad, 0);
    tokenizer_close(tok);
}

static void test_edge_cases_match_hf(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    Tokenizer* tok = open_t5();
    char** lines;
    char* block;
    char* p = fixture_path("edge.txt");
    int64_t n = read_lines(p, &lines, &block);
    assert_true(n >= 15);
    int64_t bad = compare_ids(tok, lines, n, NULL, 0, "edge.ids");
    bad += compare_ids(tok, lines, n, "translate English to Romanian: ", 8, "edge.prefix8.ids");
    assert_int_equal(bad, 0);
    free(lines); free(block); free(p);
    tokenizer_close(tok);
}

static void test_decode_matches_hf(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    Tokenizer* tok = open_t5();
    int64_t bad = 0;
    // ids -> text: the whole validation target side (ro and en), edge id sequences, and the
    // first lines again with clean_up_tokenization_spaces=True (older transformers); .clean.dec has
    // fewer lines than the .ids, and the edge .dec files are JSON strings (spaces at the ends)
    struct { const char* ids; const char* dec; bool clean; bool json; } sets[] = {
        {"val.enro.tgt.128.ids", "val.enro.tgt.128.dec", false, false},
        {"val.roen.tgt.128.ids", "val.roen.tgt.128.dec", false, false},
        {"val.enro.tgt.128.ids", "val.enro.tgt.128.clean.dec", true, false},
        {"val.roen.tgt.128.ids", "val.roen.tgt.128.clean.dec", true, false},
        {"decode_edge.ids", "decode_edge.dec", false, true},
        {"edge.ids", "edge.clean.dec", true, true},
    };
    for (size_t s = 0; s < T5_ARRAY_LEN(sets); s++) {
        char** ids; char* ib; char** dec; char* db;
        char* ip = fixture_path(sets[s].ids);
        char* dp = fixture_path(sets[s].dec);
        int64_t ni = read_lines(ip, &ids, &ib);
        int64_t n = read_lines(dp, &dec, &db);
        assert_true(n > 0 && n <= ni);
        if (!sets[s].clean) assert_int_equal(n, ni);
        int32_t v[4096];
        for (int64_t i = 0; i < n; i++) {
            int k = 0;
            char* q = ids[i];
            char* end;
            for (long x = strtol(q, &end, 10); end != q && k < 4096; x = strtol(q, &end, 10)) { v[k++] = (int32_t)x; q = end; }
            char* text = tokenizer_decode_ex(tok, v, k, true, sets[s].clean);
            const char* want = dec[i];
            json_t* js = NULL;
            if (sets[s].json) {
                js = json_loads(dec[i], JSON_DECODE_ANY, NULL);
                assert_non_null(js);
                want = json_string_value(js);
            }
            if (strcmp(text, want)) {
                if (bad < 3) print_message("%s line %lld:\n  ours \"%s\"\n  HF   \"%s\"\n", sets[s].dec, (long long)i + 1, text, want);
                bad++;
            }
            json_decref(js);
            free(text);
        }
        print_message("%s: %lld decodes compared\n", sets[s].dec, (long long)n);
        free(ids); free(ib); free(dec); free(db); free(ip); free(dp);
    }
    assert_int_equal(bad, 0);
    tokenizer_close(tok);
}

static void test_special_ids_and_truncation(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    Tokenizer* tok = open_t5();
    assert_int_equal(tokenizer_vocab_size(tok), 32100);
    assert_string_equal(tokenizer_id_to_piece(tok, 32099), "<extra_id_0>");
    assert_string_equal(tokenizer_id_to_piece(tok, 32000), "<extra_id_99>");
    assert_string_equal(tokenizer_id_to_piece(tok, 1), "</s>");
    assert_null(tokenizer_id_to_piece(tok, 32100));
    int32_t* buf = NULL;
    size_t cap = 0;
    char err[256];
    // truncation keeps </s> last: M=1 gives just </s>
    int k = tokenizer_encode(tok, NULL, "Studies have shown", 18, 1, &buf, &cap, err, sizeof err);
    assert_int_equal(k, 1);
    assert_int_equal(buf[0], 1);
    k = tokenizer_encode(tok, "translate English to Romanian: ", "Studies have shown that owning a dog is good for you", 52, 0, &buf, &cap, err, sizeof err);
    assert_true(k > 10);
    assert_int_equal(buf[k - 1], 1);
    // the empty text is just </s>
    k = tokenizer_encode(tok, NULL, "", 0, 128, &buf, &cap, err, sizeof err);
    assert_int_equal(k, 1);
    char pre[128];
    tokenizer_default_prefix("ro", "en", pre, sizeof pre);
    assert_string_equal(pre, "translate Romanian to English: ");
    free(buf);
    tokenizer_close(tok);
}

static void test_tokenizer_errors(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char err[512];
    const char* tmp = t5test_tmpdir();
    char* missing = t5_path_join(tmp, "nope/spiece.model");
    assert_null(tokenizer_open(missing, err, sizeof err));
    assert_contains(err, "not found");
    assert_contains(err, missing);
    char* txt = t5_path_join(tmp, "bogus.model");
    t5test_write_file(txt, "this is not a sentencepiece model\n");
    assert_null(tokenizer_open(txt, err, sizeof err));
    assert_contains(err, "not a valid SentencePiece model");
    assert_contains(err, txt);
    char* empty = t5_path_join(tmp, "empty.model");
    t5test_write_file(empty, "");
    assert_null(tokenizer_open(empty, err, sizeof err));
    assert_contains(err, empty);
    // a model dir with tokenizer.json only
    char* dir = t5_path_join(tmp, "model_json_only");
    t5_mkdir_p(dir);
    char* tj = t5_path_join(dir, "tokenizer.json");
    t5test_write_file(tj, "{}");
    assert_null(tokenizer_open(dir, err, sizeof err));
    assert_contains(err, "tokenizer.json but no spiece.model");
    // the HF toy model is SentencePiece but not T5's layout
    char* toy = data_path("hf-fixtures/test_sentencepiece.model");
    Tokenizer* t = tokenizer_open(toy, err, sizeof err);
    if (t) tokenizer_close(t);
    else assert_contains(err, "not a T5 one");
    // the spm bridge on its own
    SpmProcessor* sp = spm_load(txt, err, sizeof err);
    assert_null(sp);
    free(missing); free(txt); free(empty); free(dir); free(tj); free(toy);
}

static void test_tokenize_command(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    static char out[1 << 16];
    char* model = data_path("t5-spiece/spiece.model");
    int rc = t5test_run(out, sizeof out, "printf 'Studies have shown that owning a dog is good for you\\n' | %s tokenize --tokenizer %s --source_prefix ''",
                        t5test_bin(), model);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "6536 43 2008 24 293 53 3 9 1782 19 207 21 25 1\n");
    // target side: no prefix even though a default exists; --max_length keeps </s>
    rc = t5test_run(out, sizeof out, "printf 'Studies have shown\\n' | %s tokenize --tokenizer %s --target --max_length 3", t5test_bin(), model);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "6536 43 1\n");
    // default prefix is en->ro
    rc = t5test_run(out, sizeof out, "printf 'x\\n' | %s tokenize --tokenizer %s", t5test_bin(), model);
    assert_int_equal(rc, 0);
    char* a = strdup(out);
    rc = t5test_run(out, sizeof out, "printf 'translate English to Romanian: x\\n' | %s tokenize --tokenizer %s --source_prefix ''", t5test_bin(), model);
    assert_string_equal(a, out);
    free(a);
    // the edge fixture through the command, and decode
    char* edge = fixture_path("edge.txt");
    char* edge_ids = fixture_path("edge.ids");
    rc = t5test_run(out, sizeof out, "%s tokenize --tokenizer %s --source_prefix '' %s | cmp - %s && echo SAME", t5test_bin(), model, edge, edge_ids);
    assert_int_equal(rc, 0);
    assert_contains(out, "SAME");
    char* vi = fixture_path("val.enro.tgt.128.ids");
    char* vd = fixture_path("val.enro.tgt.128.dec");
    rc = t5test_run(out, sizeof out, "%s tokenize --tokenizer %s --decode %s | cmp - %s && echo SAME", t5test_bin(), model, vi, vd);
    assert_int_equal(rc, 0);
    assert_contains(out, "SAME");
    // errors: invalid UTF-8 names file and line; missing tokenizer; bad option
    char* bad = t5_path_join(t5test_tmpdir(), "bad_utf8.txt");
    t5test_write_file(bad, "fine\nalso fine\nbad \xC3\x28 byte\n");
    rc = t5test_run(out, sizeof out, "%s tokenize --tokenizer %s %s", t5test_bin(), model, bad);
    assert_int_equal(rc, 2);  // an input error
    assert_contains(out, "bad_utf8.txt:3: invalid UTF-8");
    rc = t5test_run(out, sizeof out, "%s tokenize --tokenizer /nonexistent/spiece.model </dev/null", t5test_bin());
    assert_int_equal(rc, 2);
    assert_contains(out, "tokenizer file not found: /nonexistent/spiece.model");
    rc = t5test_run(out, sizeof out, "%s tokenize --tokenizer %s --frobnicate", t5test_bin(), model);
    assert_int_equal(rc, 2);
    assert_contains(out, "--frobnicate");
    rc = t5test_run(out, sizeof out, "%s tokenize --help", t5test_bin());
    assert_int_equal(rc, 0);
    assert_contains(out, "--decode");
    rc = t5test_run(out, sizeof out, "printf '8774 3 5 296 3 6 34 3 31 7 1\\n' | %s tokenize --tokenizer %s --decode --clean_up_tokenization_spaces",
                    t5test_bin(), model);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "Hello. world, it's\n");
    free(model); free(edge); free(edge_ids); free(vi); free(vd); free(bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation_ids_match_hf),
        cmocka_unit_test(test_extra_corpora_ids_match_hf),
        cmocka_unit_test(test_hf_samples_match_hf),
        cmocka_unit_test(test_edge_cases_match_hf),
        cmocka_unit_test(test_decode_matches_hf),
        cmocka_unit_test(test_special_ids_and_truncation),
        cmocka_unit_test(test_tokenizer_errors),
        cmocka_unit_test(test_tokenize_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
