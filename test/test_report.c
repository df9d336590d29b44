/*
 * test_report.c: --report_to (src/report/report_to, tb_writer, tb_record, csv_log) and the model FLOPs
 * (src/report/flops). The TensorBoard files are checked three ways: the framing and both CRCs by the C reader
 * (always), the events decoded with protobuf-c (when built with it), and the whole file read back by the
 * `tensorboard` Python package's EventAccumulator (skipped, saying why, when the package is missing).
 */
#include "t5test.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <unistd.h>

#include "../model/params.h"
#include "../model/t5_config.h"
#include "../src/base/common.h"
#include "../src/report/flops.h"
#include "../src/report/report_to.h"
#include "../src/report/tb_record.h"
#include "../src/report/tb_writer.h"
#ifdef T5_HAVE_PROTOBUF_C
#include "../src/report/tb_event.pb-c.h"
#endif

// ---------------------------------------------------------------------------------------------
// framing

static void test_crc32c_vectors(void** state) {
    (void)state;
    assert_int_equal(tb_crc32c(0, "123456789", 9), 0xE3069283u);  // the CRC-32C check value
    assert_int_equal(tb_crc32c(0, "", 0), 0u);
    // split computation continues the same CRC
    assert_int_equal(tb_crc32c(tb_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    // masked: rotate right 15, + 0xa282ead8
    uint32_t c = 0xE3069283u;
    assert_int_equal(tb_masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

static void write_bytes(const char* path, const unsigned char* p, size_t n) {
    FILE* f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static int read_one(const char* path, char* err, size_t cap, size_t* n_out) {
    FILE* f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char* d;
    size_t n;
    int rc = tb_record_read(f, &d, &n, 1 << 20, err, cap);
    if (rc == 1) free(d);
    if (n_out) *n_out = n;
    fclose(f);
    return rc;
}

static void test_record_roundtrip_and_corruption(void** state) {
    (void)state;
    const char* msg = "hello event";
    size_t n = strlen(msg);
    unsigned char buf[64];
    tb_record_frame(buf, msg, n);
    assert_int_equal(buf[0], n);  // little-endian length
    for (int i = 1; i < 8; i++) assert_int_equal(buf[i], 0);
    char* p = t5_path_join(t5test_tmpdir(), "rec.bin");
    char err[256];
    size_t got;
    write_bytes(p, buf, n + TB_RECORD_OVERHEAD);
    assert_int_equal(read_one(p, err, sizeof err, &got), 1);
    assert_int_equal(got, n);

    unsigned char bad[64];
    memcpy(bad, buf, sizeof buf);
    bad[12 + 3] ^= 1;  // a data byte
    write_bytes(p, bad, n + TB_RECORD_OVERHEAD);
    assert_int_equal(read_one(p, err, sizeof err, NULL), -1);
    assert_contains(err, "data CRC mismatch");

    memcpy(bad, buf, sizeof buf);
    bad[0] ^= 2;  // the length
    write_bytes(p, bad, n + TB_RECORD_OVERHEAD);
    assert_int_equal(read_one(p, err, sizeof err, NULL), -1);
    assert_contains(err, "length CRC mismatch");

    write_bytes(p, buf, n + TB_RECORD_OVERHEAD - 2);  // cut inside the data CRC
    assert_int_equal(read_one(p, err, sizeof err, NULL), -1);
    assert_contains(err, "truncated record");

    write_bytes(p, buf, 0);
    assert_int_equal(read_one(p, err, sizeof err, NULL), 0);  // clean end
    free(p);
}

// ---------------------------------------------------------------------------------------------
// event files

static char* find_event_file(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return NULL;
    struct dirent* e;
    char* found = NULL;
    int count = 0;
    while ((e = readdir(d))) {
        if (strstr(e->d_name, "events.out.tfevents.")) {
            free(found);
            found = t5_path_join(dir, e->d_name);
            count++;
        }
    }
    closedir(d);
    if (count != 1) {
        free(found);
        return NULL;
    }
    return found;
}

// writes the events the Python test reads back: args text, train/loss at 3 steps, eval/loss at step 2
static char* write_sample_events(const char* logdir) {
    char err[512];
    TbWriter* w = tb_writer_open(logdir, 1700000000.25, err, sizeof err);
    if (!w) fail_msg("tb_writer_open: %s", err);
    assert_int_equal(tb_writer_text(w, "args", "{\"lr\": 0.001}", 0, 1700000000.5, err, sizeof err), 0);
    const double loss[3] = {2.5, 1.25, 0.75};
    for (int i = 0; i < 3; i++)
        assert_int_equal(tb_writer_scalar(w, "train/loss", loss[i], i + 1, 1700000001.0 + i, err, sizeof err), 0);
    assert_int_equal(tb_writer_scalar(w, "eval/loss", 0.0, 2, 1700000005.0, err, sizeof err), 0);
    char* path = strdup(tb_writer_path(w));
    tb_writer_close(w);
    return path;
}

static void test_event_file_framing_and_content(void** state) {
    (void)state;
    if (!tb_writer_available()) {
        print_message("built without protobuf-c (libprotobuf-c-dev): no event writer to test; skipping\n");
        skip();
    }
    char* logdir = t5_path_join(t5test_tmpdir(), "tb_c/runs/x");
    char* path = write_sample_events(logdir);
    assert_string_equal(path, find_event_file(logdir));
    assert_contains(path, "events.out.tfevents.1700000000.");
    FILE* f = fopen(path, "rb");
    assert_non_null(f);
    char err[256];
    unsigned char* d;
    size_t n;
    int records = 0;
    int rc;
    while ((rc = tb_record_read(f, &d, &n, 1 << 20, err, sizeof err)) == 1) {
#ifdef T5_HAVE_PROTOBUF_C
        T5tb__Event* ev = t5tb__event__unpack(NULL, n, d);
        assert_non_null(ev);
        if (records == 0) {
            assert_int_equal(ev->what_case, T5TB__EVENT__WHAT_FILE_VERSION);
            assert_string_equal(ev->file_version, "brain.Event:2");
            assert_true(ev->wall_time == 1700000000.25);
        } else if (records == 1) {
            assert_int_equal(ev->what_case, T5TB__EVENT__WHAT_SUMMARY);
            assert_string_equal(ev->summary->value[0]->tag, "args");
            assert_string_equal(ev->summary->value[0]->metadata->plugin_data->plugin_name, "text");
            assert_int_equal(ev->summary->value[0]->tensor->dtype, 7);
        } else if (records <= 4) {
            const float want[3] = {2.5f, 1.25f, 0.75f};
            assert_int_equal(ev->step, records - 1);
            assert_string_equal(ev->summary->value[0]->tag, "train/loss");
            assert_int_equal(ev->summary->value[0]->value_case, T5TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
            assert_true(ev->summary->value[0]->simple_value == want[records - 2]);
        } else {
            assert_string_equal(ev->summary->value[0]->tag, "eval/loss");
            assert_true(ev->summary->value[0]->simple_value == 0.0f);  // a zero is written (oneof), not dropped
        }
        t5tb__event__free_unpacked(ev, NULL);
#endif
        free(d);
        records++;
    }
    if (rc < 0) fail_msg("%s: %s", path, err);
    assert_int_equal(records, 6);
    fclose(f);
    free(path);
    free(logdir);
}

static void test_event_file_read_by_tensorboard(void** state) {
    (void)state;
    if (!tb_writer_available()) {
        print_message("built without protobuf-c: no event writer; skipping\n");
        skip();
    }
    char out[8192];
    if (t5test_run(out, sizeof out, "python3 -c 'import tensorboard' 2>&1") != 0) {
        print_message("the tensorboard Python package is not installed (pip install tensorboard): skipping the "
                      "read-back by TensorBoard's own event reader; the C reader checked the framing\n");
        skip();
    }
    char* logdir = t5_path_join(t5test_tmpdir(), "tb_py");
    char* path = write_sample_events(logdir);
    free(path);
    const char* py =
        "import sys\n"
        "from tensorboard.backend.event_processing import event_accumulator as ea\n"
        "acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})\n"
        "acc.Reload()\n"
        "tags = acc.Tags()\n"
        "print('scalars', sorted(tags['scalars']))\n"
        "for t in sorted(tags['scalars']):\n"
        "    for e in acc.Scalars(t): print(t, e.step, repr(e.value), repr(e.wall_time))\n"
        "print('tensors', sorted(tags['tensors']))\n"
        "for e in acc.Tensors('args'): print('args', e.step, e.tensor_proto.string_val[0].decode())\n";
    char* script = t5_path_join(t5test_tmpdir(), "read_tb.py");
    t5test_write_file(script, py);
    int rc = t5test_run(out, sizeof out, "python3 %s %s 2>&1", script, logdir);
    if (rc != 0) fail_msg("tensorboard's reader failed (%d):\n%s", rc, out);
    assert_contains(out, "scalars ['eval/loss', 'train/loss']");
    assert_contains(out, "train/loss 1 2.5 1700000001.0\n");
    assert_contains(out, "train/loss 2 1.25 1700000002.0\n");
    assert_contains(out, "train/loss 3 0.75 1700000003.0\n");
    assert_contains(out, "eval/loss 2 0.0 1700000005.0\n");
    assert_contains(out, "tensors ['args']");
    assert_contains(out, "args 0 {\"lr\": 0.001}");
    free(script);
    free(logdir);
}

// ---------------------------------------------------------------------------------------------
// flag, tags, logging_dir

static void test_report_to_parse(void** state) {
    (void)state;
    unsigned m;
    char err[512];
    char buf[64];
    assert_int_equal(report_to_parse("none", &m, err, sizeof err), 0);
    assert_int_equal(m, 0u);
    assert_int_equal(report_to_parse("", &m, err, sizeof err), 0);
    assert_int_equal(m, 0u);
    assert_int_equal(report_to_parse("csv", &m, err, sizeof err), 0);
    assert_int_equal(m, (unsigned)REPORT_CSV);
    assert_int_equal(report_to_parse("all", &m, err, sizeof err), 0);
    assert_int_equal(m, REPORT_CSV | (tb_writer_available() ? (unsigned)REPORT_TENSORBOARD : 0u));
    if (tb_writer_available()) {
        assert_int_equal(report_to_parse("tensorboard, csv", &m, err, sizeof err), 0);
        assert_int_equal(m, (unsigned)(REPORT_CSV | REPORT_TENSORBOARD));
        report_to_format(buf, sizeof buf, m);
        assert_string_equal(buf, "csv,tensorboard");
    } else {
        assert_int_equal(report_to_parse("tensorboard", &m, err, sizeof err), -1);
        assert_contains(err, "protobuf-c");
    }
    report_to_format(buf, sizeof buf, 0);
    assert_string_equal(buf, "none");
    assert_int_equal(report_to_parse("wandb", &m, err, sizeof err), -1);
    assert_contains(err, "not implemented yet: report_to wandb");
    assert_int_equal(report_to_parse("tensorbord", &m, err, sizeof err), -1);
    assert_contains(err, "not a known integration: report_to tensorbord");
    assert_int_equal(report_to_parse("none,csv", &m, err, sizeof err), -1);
    assert_contains(err, "cannot be combined");
}

static void test_tags_and_logging_dir(void** state) {
    (void)state;
    char b[256];
    report_tb_tag(b, sizeof b, "eval_loss");
    assert_string_equal(b, "eval/loss");
    report_tb_tag(b, sizeof b, "test_bleu");
    assert_string_equal(b, "test/bleu");
    report_tb_tag(b, sizeof b, "loss");
    assert_string_equal(b, "train/loss");
    report_tb_tag(b, sizeof b, "train_runtime");
    assert_string_equal(b, "train/train_runtime");
    setenv("TZ", "UTC", 1);
    tzset();
    report_default_logging_dir(b, sizeof b, "out", (time_t)1700000000);  // 2023-11-14 22:13:20 UTC
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char want[512];
    snprintf(want, sizeof want, "out/runs/Nov14_22-13-20_%s", host);
    assert_string_equal(b, want);
}

// ---------------------------------------------------------------------------------------------
// csv and the reporter

static void test_csv_log(void** state) {
    (void)state;
    char* p = t5_path_join(t5test_tmpdir(), "log.csv");
    char err[256];
    json_t* hist = json_loads("[{\"loss\": 2.5, \"grad_norm\": 1.0, \"learning_rate\": 5e-05, \"epoch\": 0.5, "
                              "\"step\": 1}]", JSON_PRESERVE_ORDER, NULL);
    assert_non_null(hist);
    CsvLog c;
    assert_int_equal(csv_log_open(&c, p, hist, err, sizeof err), 0);
    json_t* r = json_loads("{\"loss\": 1.25, \"grad_norm\": 0.1, \"learning_rate\": 2.5e-05, \"epoch\": 1.0, "
                           "\"step\": 2}", JSON_PRESERVE_ORDER, NULL);
    assert_int_equal(csv_log_append(&c, r, err, sizeof err), 0);  // same keys: appended
    json_decref(r);
    r = json_loads("{\"eval_loss\": 0.987654321, \"eval_bleu\": 27.1, \"note\": \"a,b\", \"epoch\": 1.0, "
                   "\"step\": 2}", JSON_PRESERVE_ORDER, NULL);
    assert_int_equal(csv_log_append(&c, r, err, sizeof err), 0);  // new keys: rewritten with a wider header
    json_decref(r);
    csv_log_close(&c);
    char* text = t5_read_file(p, NULL);
    assert_string_equal(text,
                        "step,loss,grad_norm,learning_rate,epoch,eval_loss,eval_bleu,note\n"
                        "1,2.5,1.0,5e-05,0.5,,,\n"
                        "2,1.25,0.1,2.5e-05,1.0,,,\n"
                        "2,,,,1.0,0.987654321,27.1,\"a,b\"\n");
    free(text);
    json_decref(hist);
    free(p);
}

static void test_reporter_writes_both(void** state) {
    (void)state;
    char* out = t5_path_join(t5test_tmpdir(), "rep_out");
    char* logdir = t5_path_join(out, "runs/r1");
    t5_mkdir_p(out);
    char* cfgp = t5_path_join(out, "t5train_config.json");
    t5test_write_file(cfgp, "{\"learning_rate\": 0.001}");
    unsigned mask;
    char err[512];
    assert_int_equal(report_to_parse("all", &mask, err, sizeof err), 0);
    Reporter r;
    if (reporter_open(&r, mask, logdir, out, NULL, err, sizeof err)) fail_msg("reporter_open: %s", err);
    json_t* e = json_loads("{\"loss\": 2.0, \"learning_rate\": 1e-4, \"epoch\": 0.5, \"step\": 10}", 0, NULL);
    reporter_log(&r, e);
    json_decref(e);
    e = json_loads("{\"eval_loss\": 1.5, \"epoch\": 0.5, \"step\": 10}", 0, NULL);
    reporter_log(&r, e);
    json_decref(e);
    assert_int_equal(r.mask, mask);  // nothing failed
    reporter_close(&r);
    char* csvp = t5_path_join(out, "log_history.csv");
    char* text = t5_read_file(csvp, NULL);
    assert_non_null(text);
    assert_contains(text, "step,");
    assert_contains(text, "eval_loss");
    free(text);
    if (mask & REPORT_TENSORBOARD) {
        char* ev = find_event_file(logdir);
        if (!ev) fail_msg("no single event file in %s", logdir);
        FILE* f = fopen(ev, "rb");
        unsigned char* d;
        size_t n;
        int records = 0, rc;
        while ((rc = tb_record_read(f, &d, &n, 1 << 20, err, sizeof err)) == 1) free(d), records++;
        fclose(f);
        assert_int_equal(rc, 0);
        assert_int_equal(records, 1 + 1 + 3 + 2);  // version, args, loss/lr/epoch, eval loss/epoch (no "step")
        free(ev);
    }
    free(csvp);
    free(cfgp);
    free(logdir);
    free(out);
}

// ---------------------------------------------------------------------------------------------
// model FLOPs

static void test_flops_by_hand(void** state) {
    (void)state;
    // a tiny config, the formula of flops.h written out by hand for B=2, S=3, T=5:
    // D=4, H=2, Dk=3 (I=6), F=8, relu (G=1), 1 encoder + 2 decoder layers, V=10
    T5Config c;
    memset(&c, 0, sizeof c);
    c.d_model = 4, c.num_heads = 2, c.d_kv = 3, c.d_ff = 8, c.num_layers = 1, c.num_decoder_layers = 2;
    c.vocab_size = 10, c.feed_forward = T5_FF_RELU;
    // encoder: 2*3*4*6*4 = 576; 2*3*3*6*2 = 216; 2*3*4*8*2 = 384              -> 1176
    // decoder: 2*5*4*6*4 = 960; 2*5*5*6*2 = 600; 2*5*4*6*2 = 480; 2*3*4*6*2 = 288;
    //          2*5*3*6*2 = 360; 2*5*4*8*2 = 640                                 -> 3328 per layer, 6656
    // head: 2*5*4*10 = 400;  per example 1176 + 6656 + 400 = 8232, B = 2 -> 16464
    assert_true(flops_t5_forward(&c, 2, 3, 5) == 16464.0);
    assert_true(flops_t5_train_step(&c, 2, 3, 5) == 3 * 16464.0);
    c.feed_forward = T5_FF_GATED_GELU;  // one more D x F GEMM per layer: + 2*3*4*8 + 2 * (2*5*4*8) = 192 + 640
    assert_true(flops_t5_forward(&c, 2, 3, 5) == 16464.0 + 2 * (192 + 640));
    assert_true(flops_t5_forward(&c, 0, 3, 5) == 0.0);
}

// Cross-check with the parameter table: with S == T, the projection and FF GEMMs are 2 x tokens x (their
// weights), so forward = 2 * S * (every matrix of the model but the embeddings, relative biases and norms)
// + 2 * S * D * V (lm_head) + the attention score/value terms, counted separately here.
static void test_flops_against_param_table(void** state) {
    (void)state;
    const char* presets[] = {"t5-small", "google/t5-v1_1-small", "t5-base"};
    for (int k = 0; k < 3; k++) {
        T5Config c;
        assert_true(t5_config_preset(presets[k], &c));
        ParamTable t;
        char err[256];
        assert_int_equal(params_build(&t, &c, err, sizeof err), 0);
        double mat = 0;
        for (int i = 0; i < t.num_params; i++) {
            const char* n = t.params[i].name;
            if (strstr(n, "layer_norm") || strstr(n, "relative_attention_bias") || strstr(n, "shared") ||
                strstr(n, "embed_tokens") || strstr(n, "lm_head"))
                continue;
            mat += (double)t.params[i].numel;
        }
        params_free(&t);
        const double S = 64, I = (double)c.num_heads * c.d_kv;
        const int Ld = c.num_decoder_layers > 0 ? c.num_decoder_layers : c.num_layers;
        const double attn = c.num_layers * (4 * S * S * I) + Ld * (4 * S * S * I + 4 * S * S * I);
        const double want = 2 * S * mat + 2 * S * c.d_model * (double)c.vocab_size + attn;
        double got = flops_t5_forward(&c, 1, 64, 64);
        if (fabs(got - want) > 1e-9 * want) fail_msg("%s: flops %.6e, parameter table says %.6e", presets[k], got, want);
    }
}

static void test_device_peak(void** state) {
    (void)state;
    assert_true(flops_device_peak_16bit("NVIDIA H100 80GB HBM3") == 989e12);
    assert_true(flops_device_peak_16bit("NVIDIA H200") == 989e12);
    assert_true(flops_device_peak_16bit("NVIDIA H100 PCIe") == 756e12);
    assert_true(flops_device_peak_16bit("NVIDIA GeForce RTX 4090") == 0.0);
    assert_true(flops_device_peak_16bit(NULL) == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_record_roundtrip_and_corruption),
        cmocka_unit_test(test_event_file_framing_and_content),
        cmocka_unit_test(test_event_file_read_by_tensorboard),
        cmocka_unit_test(test_report_to_parse),
        cmocka_unit_test(test_tags_and_logging_dir),
        cmocka_unit_test(test_csv_log),
        cmocka_unit_test(test_reporter_writes_both),
        cmocka_unit_test(test_flops_by_hand),
        cmocka_unit_test(test_flops_against_param_table),
        cmocka_unit_test(test_device_peak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
