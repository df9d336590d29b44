/*
 * test_data_readers.c: the JSON-lines, parallel-text and SGML readers, split lookup, and every
 * bad input of issue 3 item 7 (each a one-sentence error naming the file and line, or a
 * counted skip), through the library and through dataset_open.
 */
#include "t5test.h"

#include "../data/dataset.h"
#include "../data/readers.h"
#include "../src/base/common.h"

static char* tmp_file(const char* name, const char* text) {
    char* p = t5_path_join(t5test_tmpdir(), name);
    if (text) t5test_write_file(p, text);
    return p;
}

static void test_parallel_text_and_empty_lines(void** state) {
    (void)state;
    char* en = tmp_file("p.en", "Hello world\r\n\nThird line\n   \nFifth\n");
    char* ro = tmp_file("p.ro", "Salut lume\r\nnot empty\n\nA patra\nA cincea\n");
    TextPairs tp;
    char err[512];
    assert_int_equal(text_pairs_read_parallel(en, ro, &tp, err, sizeof err), 0);
    assert_int_equal(tp.n, 2);  // lines 2, 3, 4 have an empty side
    assert_string_equal(tp.src[0], "Hello world");  // \r stripped
    assert_string_equal(tp.tgt[0], "Salut lume");
    assert_string_equal(tp.src[1], "Fifth");
    assert_int_equal(tp.line[1], 5);
    assert_int_equal(tp.n_skipped_empty, 3);
    assert_int_equal(tp.first_skipped_line, 2);
    text_pairs_free(&tp);
    free(en); free(ro);
}

static void test_bad_parallel_inputs(void** state) {
    (void)state;
    TextPairs tp;
    char err[512];
    char* en = tmp_file("c.en", "a\nb\nc\n");
    char* ro = tmp_file("c.ro", "a\nb\n");
    assert_int_equal(text_pairs_read_parallel(en, ro, &tp, err, sizeof err), -1);
    assert_contains(err, "c.en has 3 lines but");
    assert_contains(err, "c.ro has 2");
    char* missing = t5_path_join(t5test_tmpdir(), "missing.ro");
    assert_int_equal(text_pairs_read_parallel(en, missing, &tp, err, sizeof err), -1);
    assert_contains(err, "file not found:");
    assert_contains(err, "missing.ro");
    char* bad = tmp_file("u.ro", "ok\nok\n\xff\xfe bad\n");
    char* en3 = tmp_file("u.en", "a\nb\nc\n");
    assert_int_equal(text_pairs_read_parallel(en3, bad, &tp, err, sizeof err), -1);
    assert_contains(err, "u.ro:3: invalid UTF-8");
    // overlong encoding and a surrogate are invalid too
    char* ov = tmp_file("o.ro", "a\n\xC0\xAF\nc\n");
    assert_int_equal(text_pairs_read_parallel(en3, ov, &tp, err, sizeof err), -1);
    assert_contains(err, "o.ro:2: invalid UTF-8");
    char* sur = tmp_file("s.ro", "a\nb\n\xED\xA0\x80\n");
    assert_int_equal(text_pairs_read_parallel(en3, sur, &tp, err, sizeof err), -1);
    assert_contains(err, "s.ro:3: invalid UTF-8");
    free(en); free(ro); free(missing); free(bad); free(en3); free(ov); free(sur);
}

static void test_jsonl(void** state) {
    (void)state;
    TextPairs tp;
    char err[512];
    char* j = tmp_file("d.jsonl",
                       "{\"translation\": {\"en\": \"Hi \\\"there\\\"\", \"ro\": \"Bun\\u0103\"}}\n"
                       "\n"
                       "{\"translation\": {\"ro\": \"doi\", \"en\": \"two\"}, \"id\": 7}\n"
                       "{\"translation\": {\"ro\": \"\", \"en\": \"three\"}}\n");
    assert_int_equal(text_pairs_read_jsonl(j, "en", "ro", &tp, err, sizeof err), 0);
    assert_int_equal(tp.n, 2);
    assert_string_equal(tp.src[0], "Hi \"there\"");
    assert_string_equal(tp.tgt[0], "Bun\xC4\x83");
    assert_int_equal(tp.line[1], 3);
    assert_int_equal(tp.n_skipped_empty, 1);
    text_pairs_free(&tp);
    // ro->en reads the same file the other way round
    assert_int_equal(text_pairs_read_jsonl(j, "ro", "en", &tp, err, sizeof err), 0);
    assert_string_equal(tp.src[1], "doi");
    text_pairs_free(&tp);
    char* nokey = tmp_file("k.jsonl", "{\"translation\": {\"en\": \"a\", \"ro\": \"b\"}}\n{\"translation\": {\"en\": \"a\", \"de\": \"b\"}}\n");
    assert_int_equal(text_pairs_read_jsonl(nokey, "en", "ro", &tp, err, sizeof err), -1);
    assert_contains(err, "k.jsonl:2:");
    assert_contains(err, "\"ro\"");
    char* notr = tmp_file("t.jsonl", "{\"en\": \"a\", \"ro\": \"b\"}\n");
    assert_int_equal(text_pairs_read_jsonl(notr, "en", "ro", &tp, err, sizeof err), -1);
    assert_contains(err, "t.jsonl:1:");
    assert_contains(err, "\"translation\"");
    char* badjson = tmp_file("b.jsonl", "{\"translation\": {\"en\": \"a\", \"ro\": \"b\"}}\n{\"translation\": {\"en\": \"a\", \n");
    assert_int_equal(text_pairs_read_jsonl(badjson, "en", "ro", &tp, err, sizeof err), -1);
    assert_contains(err, "b.jsonl:2: invalid JSON");
    char* notstr = tmp_file("n.jsonl", "{\"translation\": {\"en\": 5, \"ro\": \"b\"}}\n");
    assert_int_equal(text_pairs_read_jsonl(notstr, "en", "ro", &tp, err, sizeof err), -1);
    assert_contains(err, "n.jsonl:1:");
    free(j); free(nokey); free(notr); free(badjson); free(notstr);
}

static void test_hf_jsonl_fixture(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    TextPairs tp;
    char err[512];
    char* p = t5_path_join(t5test_data_dir(), "hf-fixtures/tests_samples/wmt16/sample.json");
    assert_int_equal(text_pairs_read_jsonl(p, "en", "ro", &tp, err, sizeof err), 0);
    assert_int_equal(tp.n, 10);
    assert_string_equal(tp.src[0], "Membership of Parliament: see Minutes");
    text_pairs_free(&tp);
    free(p);
}

static void test_sgml(void** state) {
    (void)state;
    TextPairs tp;
    char err[512];
    char* src = tmp_file("newsdev2016-enro-src.en.sgm",
                         "<srcset setid=\"newsdev2016\" srclang=\"any\">\n<doc sysid=\"ref\" docid=\"d1\" genre=\"news\" origlang=\"en\">\n"
                         "<p>\n<seg id=\"1\">Tom &amp; Jerry &lt;3 &quot;x&quot; &#259; &#x21B;</seg>\n<seg id=\"2\"> second  </seg>\n</p>\n</doc>\n"
                         "<doc docid=\"d2\">\n<seg id=\"1\">third</seg>\n</doc>\n</srcset>\n");
    char* ref = tmp_file("newsdev2016-enro-ref.ro.sgm",
                         "<refset setid=\"newsdev2016\" srclang=\"any\" trglang=\"ro\">\n<doc sysid=\"ref\" docid=\"d1\">\n"
                         "<seg id=\"1\">Tom &amp;amp; Jerry</seg>\n<seg id=\"2\">al doilea</seg>\n</doc>\n<doc docid=\"d2\">\n<seg id=\"1\">al treilea</seg>\n</doc>\n</refset>\n");
    assert_int_equal(text_pairs_read_sgml(src, ref, &tp, err, sizeof err), 0);
    assert_int_equal(tp.n, 3);
    assert_string_equal(tp.src[0], "Tom & Jerry <3 \"x\" \xC4\x83 \xC8\x9B");
    assert_string_equal(tp.tgt[0], "Tom &amp; Jerry");  // one level of unescaping only
    assert_string_equal(tp.src[1], "second");
    assert_string_equal(tp.tgt[2], "al treilea");
    text_pairs_free(&tp);
    // explicit split file: the -ref sibling is found by name, and the data reads through dataset_resolve_files
    DataOptions o;
    data_options_default(&o);
    o.split_file[DATA_SPLIT_VALIDATION] = src;
    char *sp, *tp2, fmt;
    assert_int_equal(dataset_resolve_files(&o, DATA_SPLIT_VALIDATION, &sp, &tp2, &fmt, err, sizeof err), 0);
    assert_int_equal(fmt, 's');
    assert_string_equal(tp2, ref);
    free(sp); free(tp2);
    char* ref2 = tmp_file("short-ref.ro.sgm", "<seg id=\"1\">unu</seg>\n");
    assert_int_equal(text_pairs_read_sgml(src, ref2, &tp, err, sizeof err), -1);
    assert_contains(err, "3 segments");
    assert_contains(err, "has 1");
    char* bad = tmp_file("bad.sgm", "<seg id=\"1\">never closed\n<seg id=\"2\">x</seg>\n");
    assert_int_equal(text_pairs_read_sgml(bad, ref2, &tp, err, sizeof err), -1);
    assert_contains(err, "bad.sgm:1:");
    free(src); free(ref); free(ref2); free(bad);
}

static void test_wmt16_lookup(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char err[2048];
    DataOptions o;
    data_options_default(&o);
    o.dataset_name = "wmt16";
    o.dataset_config = "ro-en";
    o.data_dir = "/nonexistent-data-dir";
    setenv("T5TRAIN_DATA", t5test_data_dir(), 1);
    char *sp, *tp, fmt;
    assert_int_equal(dataset_resolve_files(&o, DATA_SPLIT_VALIDATION, &sp, &tp, &fmt, err, sizeof err), 0);
    assert_int_equal(fmt, 't');
    assert_contains(sp, "wmt16-ro-en/validation.en");
    assert_contains(tp, "wmt16-ro-en/validation.ro");
    free(sp); free(tp);
    // the shared data has no train split: the error says exactly where it looked
    assert_int_equal(dataset_resolve_files(&o, DATA_SPLIT_TRAIN, &sp, &tp, &fmt, err, sizeof err), -1);
    assert_contains(err, "no train split of wmt16-ro-en found");
    assert_contains(err, "/nonexistent-data-dir/wmt16-ro-en/train.jsonl (data_dir)");
    char want[1024];
    snprintf(want, sizeof want, "%s/wmt16-ro-en/train.en + %s/wmt16-ro-en/train.ro", t5test_data_dir(), t5test_data_dir());
    assert_contains(err, want);
    assert_contains(err, ".cache/t5train/data/wmt16-ro-en/train.jsonl (default cache)");
    assert_contains(err, "prepare_wmt16.sh");
    // the direction must be one of the pair's
    o.source_lang = "en";
    o.target_lang = "de";
    assert_int_equal(dataset_resolve_files(&o, DATA_SPLIT_VALIDATION, &sp, &tp, &fmt, err, sizeof err), -1);
    assert_contains(err, "languages ro and en");
    // ro->en: the source file is the .ro one
    o.source_lang = "ro";
    o.target_lang = "en";
    o.dataset_name = "wmt16-ro-en";
    o.dataset_config = NULL;
    assert_int_equal(dataset_resolve_files(&o, DATA_SPLIT_VALIDATION, &sp, &tp, &fmt, err, sizeof err), 0);
    assert_contains(sp, "validation.ro");
    free(sp); free(tp);
    // explicit files: a missing one is named
    data_options_default(&o);
    o.split_file[DATA_SPLIT_TRAIN] = "/nonexistent/train.json";
    assert_int_equal(dataset_resolve_files(&o, DATA_SPLIT_TRAIN, &sp, &tp, &fmt, err, sizeof err), -1);
    assert_contains(err, "train_file not found: /nonexistent/train.json");
    // a prefix with .en/.ro siblings
    char* pref = t5_path_join(t5test_data_dir(), "wmt16-ro-en/validation");
    o.split_file[DATA_SPLIT_TRAIN] = pref;
    assert_int_equal(dataset_resolve_files(&o, DATA_SPLIT_TRAIN, &sp, &tp, &fmt, err, sizeof err), 0);
    assert_contains(tp, "validation.ro");
    free(sp); free(tp); free(pref);
}

static void test_dataset_open_bad_inputs(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char err[2048];
    DataOptions o;
    data_options_default(&o);
    char* model = t5_path_join(t5test_data_dir(), "t5-spiece/spiece.model");
    o.tokenizer_path = model;
    o.no_cache = true;
    o.quiet = true;
    // a 1 MB line is tokenized and truncated, </s> last, never a crash
    size_t big = 1 << 20;
    char* text = malloc(big + 64);
    for (size_t i = 0; i < big; i++) text[i] = "abcde fghij "[i % 12];
    memcpy(text + big, "\nsecond\n", 9);
    char* en = tmp_file("big.en", text);
    char* ro = tmp_file("big.ro", "unu\ndoi\n");
    free(text);
    o.split_file[DATA_SPLIT_TRAIN] = en;
    o.max_source_length = 64;
    Dataset* ds = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(dataset_size(ds), 2);
    const int32_t *s, *t;
    int ns, nt;
    dataset_get(ds, 0, &s, &ns, &t, &nt);
    assert_int_equal(ns, 64);
    assert_int_equal(s[63], 1);
    dataset_close(ds);
    // a missing spiece.model is named
    o.tokenizer_path = "/nonexistent/spiece.model";
    assert_null(dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err));
    assert_contains(err, "/nonexistent/spiece.model");
    // a file that is not a model
    o.tokenizer_path = ro;
    assert_null(dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err));
    assert_contains(err, "not a valid SentencePiece model");
    o.tokenizer_path = model;
    // a JSON-lines file without the language key, through dataset_open
    char* j = tmp_file("nokey.jsonl", "{\"translation\": {\"en\": \"a\", \"ro\": \"b\"}}\n{\"translation\": {\"en\": \"a\"}}\n");
    o.split_file[DATA_SPLIT_TRAIN] = j;
    assert_null(dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err));
    assert_contains(err, "nokey.jsonl:2:");
    // only empty pairs: a clear error
    char* e1 = tmp_file("empty.en", "\n\n");
    char* e2 = tmp_file("empty.ro", "x\ny\n");
    o.split_file[DATA_SPLIT_TRAIN] = e1;
    assert_null(dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err));
    assert_contains(err, "no usable train pairs (2 skipped as empty)");
    free(model); free(en); free(ro); free(j); free(e1); free(e2);
}

static void test_prepare_script_parses(void** state) {
    (void)state;
    char out[4096];
    int rc = t5test_run(out, sizeof out, "bash -n %s/scripts/prepare_wmt16.sh && echo PARSES", t5test_repo_dir());
    assert_int_equal(rc, 0);
    assert_contains(out, "PARSES");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parallel_text_and_empty_lines),
        cmocka_unit_test(test_bad_parallel_inputs),
        cmocka_unit_test(test_jsonl),
        cmocka_unit_test(test_hf_jsonl_fixture),
        cmocka_unit_test(test_sgml),
        cmocka_unit_test(test_wmt16_lookup),
        cmocka_unit_test(test_dataset_open_bad_inputs),
        cmocka_unit_test(test_prepare_script_parses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
