/*
 * test_data_parallel.c: data parallel batches (issue 16 item 2). With W ranks of micro-batch B, the rows
 * the ranks take for micro-batch m together are the rows one rank with micro-batch W x B takes for its
 * micro-batch m: the same samples per update for any W, shuffled or not, with group_by_length, over
 * epochs, with drop_last. The one difference is HF's: without drop_last, when W x B does not divide the
 * data set, the last round of W batches is completed from the start of the order (accelerate's
 * BatchSamplerShard with even_batches), so the last micro-batch of an epoch also holds those first
 * (total - N) samples once more. And rank r's micro-batch m is exactly micro-batch mW + r of one rank of
 * micro-batch B (test_rank_batches_are_one_ranks): W ranks x accumulation G read the micro-batches of one rank x
 * accumulation WG (docs/training_results.md section 6, finding 14).
 */
#include "t5test.h"

#include "../data/dataloader.h"
#include "../data/dataset.h"
#include "../src/base/common.h"

static int cmp64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return (x > y) - (x < y);
}

// every micro-batch of one epoch of one loader: rows[m] (sorted), n[m]
typedef struct {
    int64_t nb;
    int64_t* rows[512];
    int n[512];
} Epoch;

static void collect(const Dataset* ds, DataOptions o, int rank, int W, int B, int64_t epoch, Epoch* e, bool append) {
    o.rank = rank;
    o.world_size = W;
    o.train_batch_size = B;
    char err[512];
    DataLoader* dl = dataloader_open(ds, &o, true, err, sizeof err);
    if (!dl) fail_msg("%s", err);
    dataloader_set_epoch(dl, epoch);
    Batch b;
    memset(&b, 0, sizeof b);
    int64_t m = 0;
    while (dataloader_next_batch(dl, &b)) {
        assert_true(m < 512);
        if (!append) {
            e->rows[m] = NULL;
            e->n[m] = 0;
        }
        e->rows[m] = (int64_t*)realloc(e->rows[m], (size_t)(e->n[m] + b.B) * sizeof(int64_t));
        for (int i = 0; i < b.B; i++) e->rows[m][e->n[m]++] = b.example_index[i];
        m++;
    }
    if (append) assert_int_equal(m, e->nb);  // every rank runs as many micro-batches as the reference
    e->nb = m;
    for (int64_t k = 0; k < m; k++) qsort(e->rows[k], (size_t)e->n[k], sizeof(int64_t), cmp64);
    batch_free(&b);
    dataloader_close(dl);
}

static void free_epoch(Epoch* e) {
    for (int64_t k = 0; k < e->nb; k++) free(e->rows[k]);
}

// W ranks x B against 1 rank x W*B
static void compare(const Dataset* ds, DataOptions o, int W, int B, int64_t epoch) {
    const int64_t N = dataset_size(ds);
    Epoch ref, all;
    memset(&ref, 0, sizeof ref);
    memset(&all, 0, sizeof all);
    collect(ds, o, 0, 1, W * B, epoch, &ref, false);
    // the reference's epoch order, for the wrap-around padding
    o.rank = 0, o.world_size = 1, o.train_batch_size = W * B;
    char err[256];
    DataLoader* dl = dataloader_open(ds, &o, true, err, sizeof err);
    dataloader_set_epoch(dl, epoch);
    int64_t n_order;
    const int64_t* order = dataloader_rank_indices(dl, &n_order);
    assert_int_equal(n_order, N);
    all.nb = ref.nb;
    for (int r = 0; r < W; r++) collect(ds, o, r, W, B, epoch, &all, r > 0);
    const int64_t total = W > 1 ? CEIL_DIV(N, (int64_t)W * B) * W * B : N, pad = o.drop_last ? 0 : total - N;
    for (int64_t m = 0; m < ref.nb; m++) {
        bool last = m == ref.nb - 1;
        if (!last || pad == 0) {
            if (all.n[m] != ref.n[m] || memcmp(all.rows[m], ref.rows[m], (size_t)ref.n[m] * sizeof(int64_t)))
                fail_msg("W %d B %d epoch %lld drop_last %d group %d shuffle %d: micro-batch %lld differs (%d rows on W "
                         "ranks, %d on one)",
                         W, B, (long long)epoch, o.drop_last, o.group_by_length, o.shuffle, (long long)m, all.n[m], ref.n[m]);
            continue;
        }
        // the last one: the reference's rows plus order[0 .. pad) again
        int64_t want[1024];
        int nw = 0;
        for (int i = 0; i < ref.n[m]; i++) want[nw++] = ref.rows[m][i];
        for (int64_t i = 0; i < pad; i++) want[nw++] = order[i % N];
        qsort(want, (size_t)nw, sizeof(int64_t), cmp64);
        assert_int_equal(all.n[m], nw);
        assert_memory_equal(all.rows[m], want, (size_t)nw * sizeof(int64_t));
    }
    dataloader_close(dl);
    free_epoch(&ref);
    free_epoch(&all);
}

// the first n pairs of the WMT16 validation set as a training split (prefix `pre`), opened with the T5 tokenizer
static Dataset* open_first_pairs(int n, const char* pre, const char* model, DataOptions* o) {
    const char* langs[2] = {"en", "ro"};
    for (int k = 0; k < 2; k++) {
        char* src = t5_path_join(t5test_data_dir(), k ? "wmt16-ro-en/validation.ro" : "wmt16-ro-en/validation.en");
        char out[1024];
        assert_int_equal(t5test_run(out, sizeof out, "head -n %d %s > %s.%s", n, src, pre, langs[k]), 0);
        free(src);
    }
    data_options_default(o);
    o->split_file[DATA_SPLIT_TRAIN] = pre;
    o->tokenizer_path = model;
    o->no_cache = true;
    o->quiet = true;
    o->num_threads = 2;
    char err[512];
    Dataset* ds = dataset_open(o, DATA_SPLIT_TRAIN, NULL, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    return ds;
}

static void test_same_samples_per_update(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* model = t5_path_join(t5test_data_dir(), "t5-spiece/spiece.model");
    const int sizes[2] = {96, 103};  // 96: every W divides it; 103: W = 2, 4 pad
    for (int s = 0; s < 2; s++) {
        char name[32];
        snprintf(name, sizeof name, "dp%d", sizes[s]);
        char* pre = t5_path_join(t5test_tmpdir(), name);
        DataOptions o;
        Dataset* ds = open_first_pairs(sizes[s], pre, model, &o);
        assert_int_equal(dataset_size(ds), sizes[s]);
        for (int variant = 0; variant < 4; variant++) {
            o.shuffle = variant != 1;
            o.group_by_length = variant == 2;
            o.drop_last = variant == 3;
            const int Ws[3] = {1, 2, 4};
            for (int wi = 0; wi < 3; wi++)
                for (int B = 1; B <= 3; B++)
                    for (int64_t epoch = 0; epoch < 2; epoch++) compare(ds, o, Ws[wi], B, epoch);
        }
        dataset_close(ds);
        free(pre);
    }
    free(model);
}

// the next micro-batch's rows (sorted) of the W ranks of micro-batch B after `skip` micro-batches each, or, with
// `from`, of a loader restored from that state rescaled to (rank, W, B)
static int next_rows(const Dataset* ds, DataOptions o, int W, int B, int skip, const DataLoaderState* from,
                     int64_t* rows, DataLoaderState* st_out) {
    int n = 0;
    for (int r = 0; r < W; r++) {
        o.rank = r, o.world_size = W, o.train_batch_size = B;
        char err[512];
        DataLoader* dl = dataloader_open(ds, &o, true, err, sizeof err);
        if (!dl) fail_msg("%s", err);
        Batch b;
        memset(&b, 0, sizeof b);
        if (from) {
            DataLoaderState st = *from;
            if (dataloader_state_rescale(&st, r, W, B, err, sizeof err)) fail_msg("%s", err);
            if (dataloader_state_restore(dl, &st, err, sizeof err)) fail_msg("%s", err);
        } else {
            dataloader_set_epoch(dl, 1);
            for (int k = 0; k < skip; k++) assert_true(dataloader_next_batch(dl, &b));
            if (r == 0 && st_out) dataloader_state_save(dl, st_out);
        }
        assert_true(dataloader_next_batch(dl, &b));
        for (int i = 0; i < b.B; i++) rows[n++] = b.example_index[i];
        batch_free(&b);
        dataloader_close(dl);
    }
    qsort(rows, (size_t)n, sizeof(int64_t), cmp64);
    return n;
}

// resume on another number of ranks: 2 x 2 after 3 micro-batches goes on as 1 x 4 and 4 x 1 would (same rows next),
// 1 x 4 after 3 goes on as 2 x 2; a position that is not a whole global batch, or group_by_length with another global
// batch, is refused
static void test_position_across_worlds(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* model = t5_path_join(t5test_data_dir(), "t5-spiece/spiece.model");
    char* pre = t5_path_join(t5test_tmpdir(), "dpr96");
    DataOptions o;
    Dataset* ds = open_first_pairs(96, pre, model, &o);
    o.shuffle = true;
    char err[512];
    const int cases[3][4] = {{2, 2, 1, 4}, {2, 2, 4, 1}, {1, 4, 2, 2}};  // saved W x B -> resumed W x B
    for (int c = 0; c < 3; c++) {
        int64_t want[16], got[16];
        DataLoaderState st;
        // the uninterrupted run on the new shape: 3 global batches of 4 rows consumed, the 4th next
        int nw = next_rows(ds, o, cases[c][2], cases[c][3], 3, NULL, want, NULL);
        (void)next_rows(ds, o, cases[c][0], cases[c][1], 3, NULL, got, &st);
        int ng = next_rows(ds, o, cases[c][2], cases[c][3], 0, &st, got, NULL);
        assert_int_equal(ng, nw);
        assert_memory_equal(got, want, (size_t)nw * sizeof(int64_t));
    }
    DataLoaderState st;
    int64_t rows[16];
    (void)next_rows(ds, o, 2, 2, 3, NULL, rows, &st);  // 12 rows in
    DataLoaderState x = st;
    assert_int_equal(dataloader_state_rescale(&x, 0, 1, 8, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a whole number of global batches"));
    x = st;
    x.flags |= 4;
    assert_int_equal(dataloader_state_rescale(&x, 0, 1, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "group_by_length"));
    dataset_close(ds);
    free(pre);
    free(model);
}

// rank r's micro-batch m (in its order) is one rank's micro-batch mW + r of the same B, row for row, except in the
// last round of an epoch that the wrap-around completes: W ranks x accumulation G read one rank x accumulation WG's
// micro-batches, each whole (HF Trainer's sharding)
static void test_rank_batches_are_one_ranks(void** state) {
    (void)state;
    T5_REQUIRE_DATA();
    char* model = t5_path_join(t5test_data_dir(), "t5-spiece/spiece.model");
    char* pre = t5_path_join(t5test_tmpdir(), "dpb103");
    DataOptions o;
    Dataset* ds = open_first_pairs(103, pre, model, &o);
    o.shuffle = true;
    for (int W = 2; W <= 4; W++)
        for (int B = 1; B <= 5; B += 2) {
            Batch one, b;
            memset(&one, 0, sizeof one);
            memset(&b, 0, sizeof b);
            char err[512];
            o.rank = 0, o.world_size = 1, o.train_batch_size = B;
            DataLoader* ref = dataloader_open(ds, &o, true, err, sizeof err);
            if (!ref) fail_msg("%s", err);
            dataloader_set_epoch(ref, 1);
            const int64_t full = 103 / ((int64_t)W * B);  // rounds before the one the wrap-around completes
            int64_t rows[1024][8];
            int nrows[1024];
            int64_t nb1 = 0;
            while (dataloader_next_batch(ref, &one)) {
                assert_true(nb1 < 1024 && one.B <= 8);
                for (int i = 0; i < one.B; i++) rows[nb1][i] = one.example_index[i];
                nrows[nb1++] = one.B;
            }
            for (int r = 0; r < W; r++) {
                o.rank = r, o.world_size = W;
                DataLoader* dl = dataloader_open(ds, &o, true, err, sizeof err);
                if (!dl) fail_msg("%s", err);
                dataloader_set_epoch(dl, 1);
                for (int64_t m = 0; dataloader_next_batch(dl, &b); m++) {
                    assert_int_equal(b.B, B);  // every batch full
                    if (m >= full) continue;
                    const int64_t k = m * W + r;
                    assert_int_equal(nrows[k], B);
                    assert_memory_equal(b.example_index, rows[k], (size_t)B * sizeof(int64_t));
                }
                dataloader_close(dl);
            }
            batch_free(&one);
            batch_free(&b);
            dataloader_close(ref);
        }
    dataset_close(ds);
    free(pre);
    free(model);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_samples_per_update),
        cmocka_unit_test(test_rank_batches_are_one_ranks),
        cmocka_unit_test(test_position_across_worlds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
