/*
 * test_data_loader.c: the token cache (reuse, rebuild on a changed source, a truncated or
 * corrupt cache, read-only for a dry run) and batching (exact padding / labels / -100 / shift-right, sharding covers the
 * data once per epoch, a seek to any batch of the epoch, an eval order (length-sorted batches, each padded to its own
 * longest source), resume from a saved state, max_samples, drop_last, group_by_length) and the
 * activation lengths the trainer and the planner size for (the longest example, capped, rounded to 8).
 */
#include "t5test.h"

#include <sys/stat.h>
#include <unistd.h>

#include "../data/dataloader.h"
#include "../data/dataset.h"
#include "../src/base/common.h"
#include "../src/eval/shard.h"

static char* model_path(void) { return t5_path_join(t5test_data_dir(), "t5-spiece/spiece.model"); }

// Copies the first n lines of the shared validation split into dir/name.{en,ro}; returns the prefix.
static char* make_subset(const char* name, int n) {
    char* pre = t5_path_join(t5test_tmpdir(), name);
    const char* langs[2] = {"en", "ro"};
    for (int k = 0; k < 2; k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "wmt16-ro-en/validation.%s", langs[k]);
        char* src = t5_path_join(t5test_data_dir(), rel);
        char out[4096];
        int rc = t5test_run(out, sizeof out, "head -n %d %s > %s.%s", n, src, pre, langs[k]);
        assert_int_equal(rc, 0);
        free(src);
    }
    return pre;
}

static void options(DataOptions* o, const char* prefix, const char* model, const char* cache) {
    data_options_default(o);
    o->split_file[DATA_SPLIT_TRAIN] = prefix;
    o->split_file[DATA_SPLIT_VALIDATION] = prefix;
    o->tokenizer_path = model;
    o->cache_dir = cache;
    o->quiet = true;
    o->num_threads = 2;
}

static void assert_same_data(const Dataset* a, const Dataset* b) {
    assert_int_equal(dataset_size(a), dataset_size(b));
    for (int64_t i = 0; i < dataset_size(a); i++) {
        const int32_t *s1, *t1, *s2, *t2;
        int ns1, nt1, ns2, nt2;
        dataset_get(a, i, &s1, &ns1, &t1, &nt1);
        dataset_get(b, i, &s2, &ns2, &t2, &nt2);
        assert_int_equal(ns1, ns2);
        assert_int_equal(nt1, nt2);
        assert_memory_equal(s1, s2, ns1 * sizeof(int32_t));
        assert_memory_equal(t1, t2, nt1 * sizeof(int32_t));
        assert_int_equal(dataset_line(a, i), dataset_line(b, i));
    }
}

static void test_cache_reuse_and_rebuild(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* pre = make_subset("cache_sub", 300);
    char* model = model_path();
    char* cache = t5_path_join(t5test_tmpdir(), "cache");
    DataOptions o;
    options(&o, pre, model, cache);
    char err[1024];
    Dataset* mem;
    {
        DataOptions m = o;
        m.no_cache = true;
        mem = dataset_open(&m, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
        if (!mem) fail_msg("%s", err);
        assert_null(dataset_cache_path(mem));
    }
    {  // read-only (a dry run): no cache yet, so it tokenizes in memory and creates nothing, not even the folder
        DataOptions r = o;
        r.cache_read_only = true;
        Dataset* ro = dataset_open(&r, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
        if (!ro) fail_msg("%s", err);
        assert_false(dataset_from_cache(ro));
        assert_null(dataset_cache_path(ro));
        assert_false(t5_path_exists(cache));
        assert_same_data(ro, mem);
        dataset_close(ro);
    }
    Dataset* a = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    if (!a) fail_msg("%s", err);
    assert_false(dataset_from_cache(a));
    assert_non_null(dataset_cache_path(a));
    assert_true(t5_is_file(dataset_cache_path(a)));
    char* cpath = strdup(dataset_cache_path(a));
    Dataset* b = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    if (!b) fail_msg("%s", err);
    assert_true(dataset_from_cache(b));
    assert_string_equal(dataset_cache_path(b), cpath);
    assert_same_data(a, mem);
    assert_same_data(b, mem);
    dataset_close(b);
    {  // read-only with a valid cache: it is used
        DataOptions r = o;
        r.cache_read_only = true;
        b = dataset_open(&r, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
        if (!b) fail_msg("%s", err);
        assert_true(dataset_from_cache(b));
        assert_same_data(b, mem);
        dataset_close(b);
    }

    // truncated cache: detected and rebuilt
    struct stat st;
    assert_int_equal(stat(cpath, &st), 0);
    assert_int_equal(truncate(cpath, st.st_size / 2), 0);
    b = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_non_null(b);
    assert_false(dataset_from_cache(b));
    assert_same_data(b, mem);
    dataset_close(b);
    assert_int_equal(stat(cpath, &st), 0);
    b = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_true(dataset_from_cache(b));
    dataset_close(b);

    // one flipped byte in the ids: checksum catches it
    FILE* f = fopen(cpath, "r+b");
    assert_non_null(f);
    fseeko(f, st.st_size - 100, SEEK_SET);
    int c = fgetc(f);
    fseeko(f, st.st_size - 100, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    b = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_false(dataset_from_cache(b));
    assert_same_data(b, mem);
    dataset_close(b);

    // garbage file of the right name: rebuilt
    t5test_write_file(cpath, "garbage");
    b = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_false(dataset_from_cache(b));
    dataset_close(b);

    // a changed source file: the cache is stale and rebuilt with the new line
    char out[4096];
    sleep(0);
    assert_int_equal(t5test_run(out, sizeof out, "echo 'One more line.' >> %s.en && echo 'Inca o linie.' >> %s.ro", pre, pre), 0);
    b = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_non_null(b);
    assert_false(dataset_from_cache(b));
    assert_int_equal(dataset_size(b), 301);
    dataset_close(b);
    b = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_true(dataset_from_cache(b));
    assert_int_equal(dataset_size(b), 301);
    dataset_close(b);

    // the same file rewritten with equal size (only the mtime changes): rebuilt too
    assert_int_equal(t5test_run(out, sizeof out, "cp %s.en %s.tmp && touch -d '2001-01-01' %s.tmp && mv %s.tmp %s.en", pre, pre, pre, pre, pre), 0);
    b = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_false(dataset_from_cache(b));
    dataset_close(b);

    // different options (prefix, lengths) never reuse another's cache
    DataOptions p = o;
    p.source_prefix = "";
    b = dataset_open(&p, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_false(dataset_from_cache(b));
    const int32_t *s, *t;
    int ns, nt;
    dataset_get(b, 0, &s, &ns, &t, &nt);
    const int32_t *s0, *t0;
    int ns0, nt0;
    dataset_get(a, 0, &s0, &ns0, &t0, &nt0);
    assert_true(ns < ns0);  // no "translate English to Romanian: "
    dataset_close(b);
    // validation uses val_max_target_length
    p = o;
    p.val_max_target_length = 8;
    b = dataset_open(&p, DATA_SPLIT_VALIDATION, NULL, err, sizeof err);
    for (int64_t i = 0; i < dataset_size(b); i++) {
        dataset_get(b, i, &s, &ns, &t, &nt);
        assert_true(nt <= 8);
        assert_int_equal(t[nt - 1], 1);
    }
    dataset_close(b);
    dataset_close(a);
    dataset_close(mem);
    free(cpath); free(pre); free(model); free(cache);
}

static void test_max_samples(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* pre = make_subset("ms_sub", 200);
    char* model = model_path();
    DataOptions o;
    options(&o, pre, model, NULL);
    o.no_cache = true;
    char err[1024];
    Dataset* full = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    o.max_samples[DATA_SPLIT_TRAIN] = 50;
    Dataset* part = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_int_equal(dataset_size(full), 200);
    assert_int_equal(dataset_size(part), 50);
    for (int64_t i = 0; i < 50; i++) assert_int_equal(dataset_line(part, i), i + 1);  // the first N, before shuffling
    // max_samples for another split does not touch train
    o.max_samples[DATA_SPLIT_TRAIN] = -1;
    o.max_samples[DATA_SPLIT_VALIDATION] = 7;
    Dataset* v = dataset_open(&o, DATA_SPLIT_VALIDATION, NULL, err, sizeof err);
    assert_int_equal(dataset_size(v), 7);
    dataset_close(v);
    dataset_close(part);
    dataset_close(full);
    free(pre); free(model);
}

// dataset_activation_lengths: the longest source / target over the splits given, each capped by its max length,
// rounded up to 8; the caps with pad_to_max_length; max_samples counts (only the examples used)
static void expect_longest(Dataset* const* ds, int n, int cap_s, int cap_t, int* want_s, int* want_t) {
    int s = 1, t = 1;
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; ds[k] && i < dataset_size(ds[k]); i++) {
            const int32_t *a, *b;
            int na, nb;
            dataset_get(ds[k], i, &a, &na, &b, &nb);
            s = na > s ? na : s;
            t = nb > t ? nb : t;
        }
    s = s < cap_s ? s : cap_s;
    t = t < cap_t ? t : cap_t;
    *want_s = (s + 7) / 8 * 8;
    *want_t = (t + 7) / 8 * 8;
}

static void test_activation_lengths(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* pre = make_subset("al_sub", 300);
    char* model = model_path();
    DataOptions o;
    options(&o, pre, model, NULL);
    o.no_cache = true;
    char err[1024];
    Dataset* tr = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_non_null(tr);
    o.max_samples[DATA_SPLIT_VALIDATION] = 5;
    Dataset* va = dataset_open(&o, DATA_SPLIT_VALIDATION, NULL, err, sizeof err);
    assert_non_null(va);
    Dataset* both[3] = {tr, va, NULL};
    int s, t, ws, wt;
    dataset_activation_lengths(&o, both, 3, &s, &t);
    expect_longest(both, 2, 1024, 128, &ws, &wt);
    assert_int_equal(s, ws);
    assert_int_equal(t, wt);
    assert_true(s % 8 == 0 && t % 8 == 0);
    assert_true(s < 1024 && s > 8);  // newsdev2016's 300 first sources are far below HF's 1024
    // the first 5 only: never longer than all 300
    Dataset* five[1] = {va};
    int s5, t5;
    dataset_activation_lengths(&o, five, 1, &s5, &t5);
    expect_longest(five, 1, 1024, 128, &ws, &wt);
    assert_int_equal(s5, ws);
    assert_int_equal(t5, wt);
    assert_true(s5 <= s && t5 <= t);
    // caps below the longest: the cap, rounded up to 8 (the tokenizer truncated at the cap)
    o.max_source_length = 21;
    o.max_target_length = 13;
    o.val_max_target_length = 19;
    Dataset* cut = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    assert_non_null(cut);
    Dataset* one[1] = {cut};
    dataset_activation_lengths(&o, one, 1, &s, &t);
    assert_int_equal(s, 24);
    assert_int_equal(t, 16);  // training targets are cut at max_target_length
    Dataset* vcut = dataset_open(&o, DATA_SPLIT_VALIDATION, NULL, err, sizeof err);
    assert_non_null(vcut);
    Dataset* two[2] = {cut, vcut};
    dataset_activation_lengths(&o, two, 2, &s, &t);
    assert_int_equal(s, 24);
    assert_int_equal(t, 24);  // evaluation's at val_max_target_length
    // pad_to_max_length: the caps themselves
    o.pad_to_max_length = true;
    o.max_source_length = 100;
    o.max_target_length = 64;
    o.val_max_target_length = 0;
    dataset_activation_lengths(&o, five, 1, &s, &t);
    assert_int_equal(s, 104);
    assert_int_equal(t, 64);
    // nothing opened: the smallest arena (1 token, rounded)
    Dataset* none[2] = {NULL, NULL};
    o.pad_to_max_length = false;
    dataset_activation_lengths(&o, none, 2, &s, &t);
    assert_int_equal(s, 8);
    assert_int_equal(t, 8);
    dataset_close(vcut);
    dataset_close(cut);
    dataset_close(va);
    dataset_close(tr);
    free(pre); free(model);
}

static void test_collate_exact(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* pre = t5_path_join(t5test_tmpdir(), "tiny");
    char* en = NULL;
    asprintf(&en, "%s.en", pre);
    char* ro = NULL;
    asprintf(&ro, "%s.ro", pre);
    t5test_write_file(en, "Hello\nStudies have shown that owning a dog is good for you\nA cat.\n");
    t5test_write_file(ro, "Salut lume frumoasa\nDa\nO pisica.\n");
    char* model = model_path();
    DataOptions o;
    options(&o, pre, model, NULL);
    o.no_cache = true;
    o.source_prefix = "";
    o.eval_batch_size = 3;
    char err[1024];
    Dataset* ds = dataset_open(&o, DATA_SPLIT_VALIDATION, NULL, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    DataLoader* dl = dataloader_open(ds, &o, false, err, sizeof err);
    if (!dl) fail_msg("%s", err);
    assert_int_equal(dataloader_num_batches(dl), 1);
    Batch b;
    memset(&b, 0, sizeof b);
    assert_true(dataloader_next_batch(dl, &b));
    // HF ids (t5 spiece): "Hello" -> 8774 1; the dog sentence -> 6536 43 2008 24 293 53 3 9 1782 19 207 21 25 1
    assert_int_equal(b.B, 3);
    assert_int_equal(b.Ts, 14);
    const int32_t row1[14] = {6536, 43, 2008, 24, 293, 53, 3, 9, 1782, 19, 207, 21, 25, 1};
    assert_memory_equal(b.input_ids + 14, row1, sizeof row1);
    assert_int_equal(b.input_ids[0], 8774);
    assert_int_equal(b.input_ids[1], 1);
    for (int j = 2; j < 14; j++) {
        assert_int_equal(b.input_ids[j], 0);
        assert_int_equal(b.attention_mask[j], 0);
    }
    assert_int_equal(b.attention_mask[0], 1);
    assert_int_equal(b.attention_mask[1], 1);
    for (int j = 0; j < 14; j++) assert_int_equal(b.attention_mask[14 + j], 1);
    // labels padded with -100; decoder_input_ids = [0, labels[:-1]] with -100 -> 0
    for (int r = 0; r < 3; r++) {
        const int32_t *s, *t;
        int ns, nt;
        dataset_get(ds, r, &s, &ns, &t, &nt);
        assert_int_equal(b.example_index[r], r);
        for (int j = 0; j < b.Tt; j++) {
            int32_t lab = b.labels[r * b.Tt + j];
            assert_int_equal(lab, j < nt ? t[j] : -100);
            int32_t want = j == 0 ? 0 : (j - 1 < nt ? t[j - 1] : 0);
            assert_int_equal(b.decoder_input_ids[r * b.Tt + j], want);
        }
    }
    // "Da" -> [3, 21, 1]? whatever HF gives, its labels are the tokens then -100
    const int32_t *s1, *t1;
    int ns1, nt1;
    dataset_get(ds, 1, &s1, &ns1, &t1, &nt1);
    assert_int_equal(b.labels[1 * b.Tt + nt1], -100);
    assert_int_equal(b.labels[1 * b.Tt + nt1 - 1], 1);
    assert_false(dataloader_next_batch(dl, &b));  // end of epoch reported once
    dataloader_close(dl);

    // pad_to_multiple_of 8 (HF with --fp16) and pad_to_max_length
    o.pad_to_multiple_of = 8;
    dl = dataloader_open(ds, &o, false, err, sizeof err);
    assert_true(dataloader_next_batch(dl, &b));
    assert_int_equal(b.Ts, 16);
    assert_int_equal(b.Tt % 8, 0);
    assert_int_equal(b.labels[b.Tt - 1], -100);
    dataloader_close(dl);
    o.pad_to_multiple_of = 0;
    o.pad_to_max_length = true;
    o.max_source_length = 20;
    o.max_target_length = 12;
    dl = dataloader_open(ds, &o, false, err, sizeof err);
    assert_true(dataloader_next_batch(dl, &b));
    assert_int_equal(b.Ts, 20);
    assert_int_equal(b.Tt, 12);
    dataloader_close(dl);
    batch_free(&b);
    dataset_close(ds);
    free(pre); free(en); free(ro); free(model);
}

// The first 61 validation pairs as a file subset `name`, no cache, eval batches of 8: the dataset and its eval loader
// (o, pre and model stay valid for the caller, which frees pre and model)
static Dataset* open_subset61(const char* name, DataOptions* o, char** pre, char** model, DataLoader** dl) {
    *pre = make_subset(name, 61);
    *model = model_path();
    options(o, *pre, *model, NULL);
    o->no_cache = true;
    o->eval_batch_size = 8;
    char err[512];
    Dataset* ds = dataset_open(o, DATA_SPLIT_VALIDATION, NULL, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    *dl = dataloader_open(ds, o, false, err, sizeof err);
    if (!*dl) fail_msg("%s", err);
    return ds;
}

// dataloader_seek (sharded evaluation takes one GPU's batches out of order): batch i after a seek is the sequential
// pass's batch i (rows, padding, lengths), in any order and after the end of the epoch; a batch out of range is refused
static void test_seek_gives_sequential_batches(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    DataOptions o;
    char *pre, *model;
    DataLoader* dl;
    Dataset* ds = open_subset61("seek_sub", &o, &pre, &model, &dl);
    const int64_t nb = dataloader_num_batches(dl);
    assert_int_equal(nb, 8);  // 61 = 7 x 8 + 5
    Batch seq[8], b;
    memset(seq, 0, sizeof seq);
    memset(&b, 0, sizeof b);
    for (int64_t i = 0; i < nb; i++) assert_true(dataloader_next_batch(dl, &seq[i]));
    assert_false(dataloader_next_batch(dl, &b));  // the end of the epoch
    const int64_t order[] = {7, 0, 3, 3, 6, 1, 2, 5, 4, 7};
    for (size_t k = 0; k < T5_ARRAY_LEN(order); k++) {
        const int64_t i = order[k];
        assert_int_equal(dataloader_seek(dl, i), 0);
        assert_true(dataloader_next_batch(dl, &b));
        assert_int_equal(b.B, seq[i].B);
        assert_int_equal(b.Ts, seq[i].Ts);
        assert_int_equal(b.Tt, seq[i].Tt);
        assert_int_equal(b.B, i == 7 ? 5 : 8);
        assert_int_equal(b.example_index[0], i * 8);
        assert_memory_equal(b.example_index, seq[i].example_index, (size_t)b.B * sizeof(int64_t));
        assert_memory_equal(b.input_ids, seq[i].input_ids, (size_t)b.B * b.Ts * sizeof(int32_t));
        assert_memory_equal(b.attention_mask, seq[i].attention_mask, (size_t)b.B * b.Ts * sizeof(int32_t));
        assert_memory_equal(b.labels, seq[i].labels, (size_t)b.B * b.Tt * sizeof(int32_t));
    }
    assert_int_equal(dataloader_seek(dl, -1), -1);
    assert_int_equal(dataloader_seek(dl, nb), -1);
    for (int64_t i = 0; i < nb; i++) batch_free(&seq[i]);
    batch_free(&b);
    dataloader_close(dl);
    dataset_close(ds);
    free(pre);
    free(model);
}

// dataloader_set_order (generation's length-sorted batches, src/eval/shard.h): batch i holds order[i * B ..], padded
// to its own longest source (not the split's longest), the rows as the input-order pass collates them; a seek still
// works; NULL restores the input order; a non-permutation and a training loader are refused
static void test_set_order_sorted_batches(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    DataOptions o;
    char *pre, *model;
    DataLoader* dl;
    Dataset* ds = open_subset61("order_sub", &o, &pre, &model, &dl);
    const int64_t n = dataset_size(ds);
    assert_int_equal(n, 61);
    char err[512];
    // the input-order pass: each example's collated row (its source tokens, padded within its batch)
    Batch b;
    memset(&b, 0, sizeof b);
    int32_t lens[61];
    int max_len = 0;
    for (int64_t e = 0; e < n; e++) lens[e] = dataset_source_length(ds, e), max_len = T5_MAX(max_len, lens[e]);
    int64_t perm[61];
    assert_int_equal(eval_shard_order_by_length(lens, n, perm), 0);
    assert_int_equal(dataloader_set_order(dl, perm, err, sizeof err), 0);
    assert_int_equal(dataloader_num_batches(dl), 8);
    int64_t seen = 0, padded = 0;
    int widths[8];
    for (int64_t i = 0; i < 8; i++) {
        assert_true(dataloader_next_batch(dl, &b));
        assert_int_equal(b.B, i == 7 ? 5 : 8);
        int longest = 0;
        for (int r = 0; r < b.B; r++) {
            const int64_t e = b.example_index[r];
            assert_int_equal(e, perm[i * 8 + r]);
            longest = T5_MAX(longest, lens[e]);
            const int32_t *src, *tgt;
            int ns, nt;
            dataset_get(ds, e, &src, &ns, &tgt, &nt);
            assert_memory_equal(b.input_ids + (size_t)r * b.Ts, src, (size_t)ns * sizeof(int32_t));
            for (int j = ns; j < b.Ts; j++) assert_int_equal(b.input_ids[(size_t)r * b.Ts + j], 0);
            for (int j = 0; j < b.Ts; j++) assert_int_equal(b.attention_mask[(size_t)r * b.Ts + j], j < ns);
            seen++;
        }
        assert_int_equal(b.Ts, longest);  // its own longest: the sorted batches shrink
        widths[i] = b.Ts;
        padded += (int64_t)b.B * b.Ts;
        if (i > 0) assert_true(widths[i] <= widths[i - 1]);
    }
    assert_false(dataloader_next_batch(dl, &b));
    assert_int_equal(seen, n);
    assert_int_equal(widths[0], max_len);
    assert_int_equal(padded, eval_shard_padded_positions(lens, perm, n, 8, 0, 0));
    assert_true(padded <= eval_shard_padded_positions(lens, NULL, n, 8, 0, 0));
    assert_int_equal(dataloader_seek(dl, 3), 0);
    assert_true(dataloader_next_batch(dl, &b));
    assert_int_equal(b.example_index[0], perm[24]);
    // back to the input order
    assert_int_equal(dataloader_set_order(dl, NULL, err, sizeof err), 0);
    assert_true(dataloader_next_batch(dl, &b));
    for (int r = 0; r < b.B; r++) assert_int_equal(b.example_index[r], r);
    // refused: a repeated index, one out of range; a training loader
    int64_t bad[61];
    memcpy(bad, perm, sizeof bad);
    bad[5] = bad[6];
    assert_int_equal(dataloader_set_order(dl, bad, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a permutation"));
    bad[5] = 61;
    assert_int_equal(dataloader_set_order(dl, bad, err, sizeof err), -1);
    dataloader_close(dl);
    o.train_batch_size = 8;
    dl = dataloader_open(ds, &o, true, err, sizeof err);
    if (!dl) fail_msg("%s", err);
    assert_int_equal(dataloader_set_order(dl, perm, err, sizeof err), -1);
    dataloader_close(dl);
    batch_free(&b);
    dataset_close(ds);
    free(pre);
    free(model);
}

// Runs one epoch on every rank and counts how often each example appears.
static void count_epoch(const Dataset* ds, DataOptions o, int W, bool train, int64_t epoch, int* counts, int64_t* pads, int64_t* nb_out) {
    int64_t N = dataset_size(ds);
    memset(counts, 0, (size_t)N * sizeof(int));
    *pads = 0;
    int64_t nb0 = -1;
    for (int r = 0; r < W; r++) {
        o.rank = r;
        o.world_size = W;
        char err[512];
        DataLoader* dl = dataloader_open(ds, &o, train, err, sizeof err);
        if (!dl) fail_msg("%s", err);
        dataloader_set_epoch(dl, epoch);
        Batch b;
        memset(&b, 0, sizeof b);
        int64_t nb = 0;
        while (dataloader_next_batch(dl, &b)) {
            nb++;
            for (int i = 0; i < b.B; i++) {
                if (b.example_index[i] < 0) (*pads)++;
                else counts[b.example_index[i]]++;
            }
        }
        assert_int_equal(nb, dataloader_num_batches(dl));
        if (nb0 < 0) nb0 = nb;
        assert_int_equal(nb, nb0);  // every rank runs the same number of batches
        batch_free(&b);
        dataloader_close(dl);
    }
    *nb_out = nb0;
}

static void test_sharding_covers_once(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* pre = make_subset("shard_sub", 300);
    char* model = model_path();
    DataOptions o;
    options(&o, pre, model, NULL);
    o.no_cache = true;
    o.train_batch_size = 8;
    o.eval_batch_size = 8;
    char err[512];
    Dataset* ds = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    int64_t N = dataset_size(ds);
    int* counts = calloc((size_t)N, sizeof(int));
    int64_t pads, nb;
    // W x B divides N (3 x 4 = 12, 300): exactly once, in two different epochs
    o.train_batch_size = 4;
    for (int64_t e = 0; e < 2; e++) {
        count_epoch(ds, o, 3, true, e, counts, &pads, &nb);
        for (int64_t i = 0; i < N; i++) assert_int_equal(counts[i], 1);
        assert_int_equal(nb, 25);
    }
    o.train_batch_size = 8;
    // W x B does not divide N: train completes the last round of W batches from the start of the order
    // (accelerate's even_batches) -> all once, the order's first (rounds x W x B - N) again, every batch full
    const int Ws[2] = {4, 7}, rounds[2] = {10, 6};  // ceil(300 / 32), ceil(300 / 56)
    for (int w = 0; w < 2; w++) {
        count_epoch(ds, o, Ws[w], true, 0, counts, &pads, &nb);
        assert_int_equal(nb, rounds[w]);
        int64_t extra = 0;
        for (int64_t i = 0; i < N; i++) { assert_true(counts[i] >= 1 && counts[i] <= 2); extra += counts[i] - 1; }
        assert_int_equal(extra, (int64_t)rounds[w] * Ws[w] * 8 - 300);
    }
    // eval: each example once, the padding row marked -1
    count_epoch(ds, o, 7, false, 0, counts, &pads, &nb);
    for (int64_t i = 0; i < N; i++) assert_int_equal(counts[i], 1);
    assert_int_equal(pads, 1);
    // drop_last: 300 -> 37 full batches of 8 -> 5 complete rounds of 7
    o.drop_last = true;
    count_epoch(ds, o, 7, true, 0, counts, &pads, &nb);
    assert_int_equal(nb, 5);
    int64_t seen = 0;
    for (int64_t i = 0; i < N; i++) { assert_true(counts[i] <= 1); seen += counts[i]; }
    assert_int_equal(seen, 7 * 5 * 8);
    o.drop_last = false;
    // group_by_length: still once per epoch (W x B = 3 x 4 divides N), and the longest example is in the first batch
    o.group_by_length = true;
    o.train_batch_size = 4;
    count_epoch(ds, o, 3, true, 0, counts, &pads, &nb);
    for (int64_t i = 0; i < N; i++) assert_int_equal(counts[i], 1);
    o.train_batch_size = 8;
    int64_t longest = 0;
    for (int64_t i = 1; i < N; i++) if (dataset_source_length(ds, i) > dataset_source_length(ds, longest)) longest = i;
    o.rank = 0;
    o.world_size = 1;
    DataLoader* dl = dataloader_open(ds, &o, true, err, sizeof err);
    Batch b;
    memset(&b, 0, sizeof b);
    assert_true(dataloader_next_batch(dl, &b));
    assert_int_equal(dataset_source_length(ds, b.example_index[0]), dataset_source_length(ds, longest));
    dataloader_close(dl);
    batch_free(&b);
    free(counts);
    dataset_close(ds);
    free(pre); free(model);
}

static void test_shuffle_deterministic_and_resume(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* pre = make_subset("resume_sub", 100);
    char* model = model_path();
    DataOptions o;
    options(&o, pre, model, NULL);
    o.no_cache = true;
    o.train_batch_size = 4;
    o.world_size = 2;
    o.rank = 1;
    char err[512];
    Dataset* ds = dataset_open(&o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    DataLoader* a = dataloader_open(ds, &o, true, err, sizeof err);
    DataLoader* b = dataloader_open(ds, &o, true, err, sizeof err);
    int64_t na, nbb;
    const int64_t* ia = dataloader_rank_indices(a, &na);
    const int64_t* ib = dataloader_rank_indices(b, &nbb);
    assert_int_equal(na, 52);  // 13 full batches of 4: 2 x 13 x 4 = 104 positions, the order's first 4 again
    assert_memory_equal(ia, ib, (size_t)na * sizeof(int64_t));  // same seed, same order
    bool sorted = true;
    for (int64_t i = 1; i < na; i++) sorted &= ia[i] > ia[i - 1];
    assert_false(sorted);  // shuffled
    DataOptions o2 = o;
    o2.seed = 43;
    DataLoader* c = dataloader_open(ds, &o2, true, err, sizeof err);
    int64_t nc;
    const int64_t* ic = dataloader_rank_indices(c, &nc);
    assert_true(memcmp(ia, ic, (size_t)na * sizeof(int64_t)) != 0);
    dataloader_close(c);
    dataloader_close(b);

    // resume: 20 batches (past the end of epoch 0, which has 13), save, take the next two;
    // a fresh loader restored from the bytes gives the same two
    Batch x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    int taken = 0;
    while (taken < 20) if (dataloader_next_batch(a, &x)) taken++;
    assert_int_equal(dataloader_epoch(a), 1);
    DataLoaderState st;
    dataloader_state_save(a, &st);
    unsigned char bytes[sizeof st];
    memcpy(bytes, &st, sizeof st);
    DataLoader* r = dataloader_open(ds, &o, true, err, sizeof err);
    DataLoaderState st2;
    memcpy(&st2, bytes, sizeof st2);
    assert_int_equal(dataloader_state_restore(r, &st2, err, sizeof err), 0);
    for (int k = 0; k < 2; k++) {
        assert_true(dataloader_next_batch(a, &x));
        assert_true(dataloader_next_batch(r, &y));
        assert_int_equal(x.B, y.B);
        assert_int_equal(x.Ts, y.Ts);
        assert_int_equal(x.Tt, y.Tt);
        assert_memory_equal(x.example_index, y.example_index, x.B * sizeof(int64_t));
        assert_memory_equal(x.input_ids, y.input_ids, (size_t)x.B * x.Ts * sizeof(int32_t));
        assert_memory_equal(x.labels, y.labels, (size_t)x.B * x.Tt * sizeof(int32_t));
        assert_memory_equal(x.decoder_input_ids, y.decoder_input_ids, (size_t)x.B * x.Tt * sizeof(int32_t));
    }
    // a state saved exactly at an epoch end resumes at the next epoch's first batch
    dataloader_set_epoch(a, 3);
    while (dataloader_next_batch(a, &x)) {}
    dataloader_state_save(a, &st);
    assert_int_equal(st.epoch, 4);
    assert_int_equal(st.batch_in_epoch, 0);
    assert_int_equal(dataloader_state_restore(r, &st, err, sizeof err), 0);
    assert_true(dataloader_next_batch(a, &x));
    assert_true(dataloader_next_batch(r, &y));
    assert_memory_equal(x.example_index, y.example_index, x.B * sizeof(int64_t));
    // a state from another world size is refused with a reason
    st.world_size = 4;
    assert_int_equal(dataloader_state_restore(r, &st, err, sizeof err), -1);
    assert_contains(err, "does not match");
    batch_free(&x);
    batch_free(&y);
    dataloader_close(r);
    dataloader_close(a);
    dataset_close(ds);
    free(pre); free(model);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_reuse_and_rebuild),
        cmocka_unit_test(test_max_samples),
        cmocka_unit_test(test_activation_lengths),
        cmocka_unit_test(test_collate_exact),
        cmocka_unit_test(test_sharding_covers_once),
        cmocka_unit_test(test_seek_gives_sequential_batches),
        cmocka_unit_test(test_set_order_sorted_batches),
        cmocka_unit_test(test_shuffle_deterministic_and_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
