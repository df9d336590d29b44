/*
 * test_hostile.c: the table-driven hostile-input test (issue 14, docs/reliability.md).
 *
 * Every case runs the real binary ($T5TRAIN_BIN) on one bad input (config, command line, data,
 * tokenizer, checkpoint, resume, output_dir, subcommands) and asserts, each as its own TAP line:
 *   - the exit code (2: usage / config / input error, 1: runtime failure, 0: the valid controls);
 *   - exactly one "t5train: error:" line on stderr for a failure, none for a success, no crash text
 *     (sanitizer reports, "Segmentation", "[... ERROR]" check macros, "Assertion") and no message
 *     quoting a source location ("file.c:123");
 *   - the pre-existing run directory R (a complete-looking run with a checkpoint) is byte-identical
 *     afterwards (names, kinds, sizes, modes and contents), and the scratch working directory is
 *     still empty (a dropped --dry_run would create ./trainer_output there);
 *   - an optional substring of the error line (the message names the culprit).
 * Cases are written as shell command lines with these variables:
 *   $T binary, $M a valid tiny model dir (v1.0 shape, t5 spiece.model), $D data dir, $R run dir,
 *   $F fixtures dir (the bad inputs), $B a valid base command line (train on $D into $R).
 * Generated cases add every flag of the key table with bad values of its type (nan, inf, words, ...).
 * make test builds and runs it (T5TRAIN_BIN is set by the Makefile to the binary of that build).
 * Output is TAP ("ok N - name" / "not ok N - name"), counted by test/run_tests.sh.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    char name[96];
    int code;            // expected exit code
    char cmd[1024];      // shell command line (variables above)
    char expect[160];    // substring the stderr must contain ("" = any)
    char skip[160];      // non-empty: not run, reported as "not ok N - name # SKIP <why>" (a known limit)
} HCase;

static HCase* cases;
static int ncases, capcases;
static char H[512];  // fixture root (tmp)
static char W[600];  // scratch working directory

static void add(const char* name, int code, const char* expect, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(const char* name, int code, const char* expect, const char* fmt, ...) {
    if (ncases == capcases) {
        capcases = capcases ? 2 * capcases : 256;
        cases = realloc(cases, (size_t)capcases * sizeof *cases);
        if (!cases) abort();
    }
    HCase* c = &cases[ncases++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->code = code;
    snprintf(c->expect, sizeof c->expect, "%s", expect ? expect : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->cmd, sizeof c->cmd, fmt, ap);
    va_end(ap);
}

// marks the case just added as skipped, with the reason printed in the TAP line (never counted as passed)
static void skip_last(const char* why) { snprintf(cases[ncases - 1].skip, sizeof cases[0].skip, "%s", why); }

// ---------------------------------------------------------------------------------------------
// small helpers

static int sh(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char* fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st == -1) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void die_setup(const char* what) {
    printf("1..1\nnot ok 1 - hostile-input setup: %s\n", what);
    exit(1);
}

static void write_bytes(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) die_setup(path);
}

static void write_text(const char* path, const char* text) { write_bytes(path, text, strlen(text)); }

static char* slurp(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) die_setup(path);
    fclose(f);
    b[n] = 0;
    if (len) *len = (size_t)n;
    return b;
}

// a safetensors file: 8-byte length, the header text verbatim (padded with spaces to a multiple of
// 8 when pad), then ndata bytes of data
static void write_st_raw(const char* path, uint64_t hlen_field, const char* header, size_t ndata, bool pad) {
    size_t hl = strlen(header), padded = pad ? (hl + 7) / 8 * 8 : hl;
    if (hlen_field == UINT64_MAX) hlen_field = padded;
    size_t n = 8 + padded + ndata;
    unsigned char* b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, ' ', padded - hl);
    write_bytes(path, b, n);
    free(b);
}
static void write_st(const char* path, const char* header, size_t ndata) {
    write_st_raw(path, UINT64_MAX, header, ndata, true);
}

// the good model's header and data, for mutations
static json_t* good_header;
static unsigned char* good_data;
static size_t good_ndata;

static void load_good_model(const char* path) {
    size_t n;
    char* b = slurp(path, &n);
    if (!b || n < 8) die_setup("cannot read the tiny model's model.safetensors");
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)(unsigned char)b[i] << (8 * i);
    json_error_t je;
    good_header = json_loadb(b + 8, hl, 0, &je);
    if (!good_header) die_setup("tiny model header");
    good_ndata = n - 8 - hl;
    good_data = malloc(good_ndata + 1);
    memcpy(good_data, b + 8 + hl, good_ndata);
    free(b);
}

// writes header h (compact JSON) + data (ndata bytes of the good data, extended with zeros)
static void write_st_json(const char* path, json_t* h, size_t ndata) {
    char* text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    size_t hl = strlen(text), padded = (hl + 7) / 8 * 8, n = 8 + padded + ndata;
    unsigned char* b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(b + 8, text, hl);
    memset(b + 8 + hl, ' ', padded - hl);
    memcpy(b + 8 + padded, good_data, ndata < good_ndata ? ndata : good_ndata);
    write_bytes(path, b, n);
    free(b);
    free(text);
}

// a model dir $F/<name>: the good config.json and spiece.model, weights written by the caller
static void model_dir(char* out, size_t cap, const char* name) {
    snprintf(out, cap, "%s/f/%s", H, name);
    if (sh("mkdir -p '%s' && cp '%s/m/config.json' '%s/' && cp '%s/m/spiece.model' '%s/'", out, H, out, H, out))
        die_setup("model dir");
}

static uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
    const unsigned char* p = data;
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

// a checkpoint directory with a valid-looking state file (format of docs/checkpoints.md: 256 x int32
// header, no blobs), a marker and the given config.json; what to break is up to the caller
static void fake_checkpoint(const char* dir, int64_t step, const char* config_src) {
    if (sh("mkdir -p '%s' && cp '%s' '%s/config.json'", dir, config_src, dir)) die_setup("checkpoint dir");
    int32_t h[256] = {0};
    h[0] = 0x54355354;
    h[1] = 1;
    h[2] = 256;
    h[3] = 0;
    h[4] = 1;
    h[5] = 0;
    memcpy(&h[6], &step, 8);
    int64_t size = sizeof h;
    memcpy(&h[8], &size, 8);
    h[10] = 64;
    h[255] = (int32_t)crc32c(0, h, 255 * 4);
    char p[1024];
    snprintf(p, sizeof p, "%s/t5train_state.bin", dir);
    write_bytes(p, h, sizeof h);
    snprintf(p, sizeof p, "%s/t5train_done", dir);
    char text[128];
    snprintf(text, sizeof text, "t5train checkpoint\nstep %lld\nworld_size 1\n", (long long)step);
    write_text(p, text);
}

// ---------------------------------------------------------------------------------------------
// fixtures

static void make_fixtures(const char* data, const char* repo) {
    char p[1024];
    if (sh("mkdir -p '%s/m' '%s/d' '%s/f' '%s/R' '%s'", H, H, H, H, W)) die_setup("mkdir");
    // the valid tiny model (committed fixture, v1.0 shape, vocab 32128) + the real T5 spiece.model
    if (sh("cp '%s/test/fixtures/t5/tiny_v10/config.json' '%s/test/fixtures/t5/tiny_v10/model.safetensors' "
           "'%s/m/' && cp '%s/t5-spiece/spiece.model' '%s/m/'",
           repo, repo, H, data, H))
        die_setup("copy the tiny model and spiece.model");
    snprintf(p, sizeof p, "%s/m/model.safetensors", H);
    load_good_model(p);

    // data
    const char* rows =
        "{\"translation\": {\"en\": \"Hello world.\", \"ro\": \"Salut lume.\"}}\n"
        "{\"translation\": {\"en\": \"The cat sleeps.\", \"ro\": \"Pisica doarme.\"}}\n"
        "{\"translation\": {\"en\": \"Good morning.\", \"ro\": \"Buna dimineata.\"}}\n";
    snprintf(p, sizeof p, "%s/d/train.jsonl", H), write_text(p, rows);
    snprintf(p, sizeof p, "%s/d/val.jsonl", H), write_text(p, rows);
    snprintf(p, sizeof p, "%s/d/train.json", H), write_text(p, rows);
    snprintf(p, sizeof p, "%s/d/par.en", H), write_text(p, "Hello.\nCat.\n");
    snprintf(p, sizeof p, "%s/d/par.ro", H), write_text(p, "Salut.\nPisica.\n");
    snprintf(p, sizeof p, "%s/d/uneven.en", H), write_text(p, "Hello.\nCat.\nDog.\n");
    snprintf(p, sizeof p, "%s/d/uneven.ro", H), write_text(p, "Salut.\n");
    snprintf(p, sizeof p, "%s/d/alone.en", H), write_text(p, "Hello.\n");
    snprintf(p, sizeof p, "%s/d/empty.jsonl", H), write_text(p, "");
    snprintf(p, sizeof p, "%s/d/blank.jsonl", H), write_text(p, "\n\n\n");
    snprintf(p, sizeof p, "%s/d/badjson.jsonl", H), write_text(p, "{\"translation\": {\"en\": \"a\", \n");
    snprintf(p, sizeof p, "%s/d/array.jsonl", H), write_text(p, "[1, 2, 3]\n");
    snprintf(p, sizeof p, "%s/d/notrans.jsonl", H), write_text(p, "{\"text\": \"hello\"}\n");
    snprintf(p, sizeof p, "%s/d/nolang.jsonl", H), write_text(p, "{\"translation\": {\"en\": \"a\", \"de\": \"b\"}}\n");
    snprintf(p, sizeof p, "%s/d/numlang.jsonl", H), write_text(p, "{\"translation\": {\"en\": 5, \"ro\": \"b\"}}\n");
    snprintf(p, sizeof p, "%s/d/transarr.jsonl", H), write_text(p, "{\"translation\": [\"a\", \"b\"]}\n");
    snprintf(p, sizeof p, "%s/d/badutf8.jsonl", H);
    write_text(p, "{\"translation\": {\"en\": \"caf\xc3\", \"ro\": \"b\"}}\n");
    snprintf(p, sizeof p, "%s/d/overlong.jsonl", H);
    write_text(p, "{\"translation\": {\"en\": \"a\xc0\xaf\", \"ro\": \"b\"}}\n");
    snprintf(p, sizeof p, "%s/d/nul.jsonl", H);
    write_bytes(p, "{\"translation\": {\"en\": \"a\0b\", \"ro\": \"c\"}}\n", 44);
    snprintf(p, sizeof p, "%s/d/binary.jsonl", H);
    {
        unsigned char junk[4096];
        for (int i = 0; i < 4096; i++) junk[i] = (unsigned char)(i * 131 + 7);
        write_bytes(p, junk, sizeof junk);
    }
    snprintf(p, sizeof p, "%s/d/data.csv", H), write_text(p, "en,ro\nHello,Salut\n");
    snprintf(p, sizeof p, "%s/d/data.txt", H), write_text(p, "Hello\n");
    snprintf(p, sizeof p, "%s/d/data.parquet", H), write_text(p, "PAR1");
    snprintf(p, sizeof p, "%s/d/unclosed.en.sgm", H);
    write_text(p, "<srcset><doc docid=\"1\"><seg id=\"1\">Hello\n</doc></srcset>\n");
    if (sh("mkdir -p '%s/d/adir.jsonl' && mkfifo '%s/d/fifo.jsonl' && ln -s nowhere.jsonl '%s/d/dangling.jsonl'",
           H, H, H))
        die_setup("data dir/fifo/link");
    if (sh("cp '%s/d/train.jsonl' '%s/d/noread.jsonl' && chmod 000 '%s/d/noread.jsonl'", H, H, H))
        die_setup("unreadable data");

    // config files
    snprintf(p, sizeof p, "%s/f/bad.json", H), write_text(p, "{\"learning_rate\": 1e-4,,}");
    snprintf(p, sizeof p, "%s/f/array.json", H), write_text(p, "[1, 2]");
    snprintf(p, sizeof p, "%s/f/empty.json", H), write_text(p, "");
    snprintf(p, sizeof p, "%s/f/unknown.json", H), write_text(p, "{\"learning_rat\": 1e-4}");
    snprintf(p, sizeof p, "%s/f/deep_unknown.json", H);
    write_text(p, "{\"deepspeed\": {\"zero_optimization\": {\"stage3_max_live_parameter\": 5}}}");
    snprintf(p, sizeof p, "%s/f/wrongtype.json", H), write_text(p, "{\"learning_rate\": \"fast\"}");
    snprintf(p, sizeof p, "%s/f/dup.json", H), write_text(p, "{\"seed\": 1, \"seed\": 2}");
    snprintf(p, sizeof p, "%s/f/nanlit.json", H), write_text(p, "{\"learning_rate\": NaN}");
    snprintf(p, sizeof p, "%s/f/huge.json", H), write_text(p, "{\"learning_rate\": 1e999}");
    snprintf(p, sizeof p, "%s/f/intfloat.json", H), write_text(p, "{\"max_steps\": 2.5}");
    snprintf(p, sizeof p, "%s/f/negbatch.json", H), write_text(p, "{\"per_device_train_batch_size\": -1}");
    snprintf(p, sizeof p, "%s/f/badutf8.json", H), write_text(p, "{\"output_dir\": \"\xff\xfe\"}");
    snprintf(p, sizeof p, "%s/f/auto_bad.json", H), write_text(p, "{\"learning_rate\": \"auto\"}");
    snprintf(p, sizeof p, "%s/f/ds_stage4.json", H), write_text(p, "{\"zero_optimization\": {\"stage\": 4}}");
    snprintf(p, sizeof p, "%s/f/ds_stage3.json", H), write_text(p, "{\"zero_optimization\": {\"stage\": 3}}");
    snprintf(p, sizeof p, "%s/f/ds_nvme.json", H);
    write_text(p, "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\"}}}");
    snprintf(p, sizeof p, "%s/f/ds_nvme_path.json", H);
    write_text(p, "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", "
                  "\"nvme_path\": \"/tmp/t5train_nvme\"}}}");
    snprintf(p, sizeof p, "%s/f/ds_offload0.json", H);
    write_text(p, "{\"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": {\"device\": \"cpu\"}}}");
    snprintf(p, sizeof p, "%s/f/ds_both.json", H);
    write_text(p, "{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}");
    snprintf(p, sizeof p, "%s/f/ds_mismatch.json", H), write_text(p, "{\"train_micro_batch_size_per_gpu\": 7}");
    snprintf(p, sizeof p, "%s/f/ds_lion.json", H);
    write_text(p, "{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"lr\": \"auto\"}}}");
    snprintf(p, sizeof p, "%s/f/ds_onecycle.json", H);
    write_text(p, "{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {}}}");
    snprintf(p, sizeof p, "%s/f/ds_autobad.json", H), write_text(p, "{\"zero_optimization\": {\"sub_group_size\": \"auto\"}}");
    snprintf(p, sizeof p, "%s/f/ds_string.json", H), write_text(p, "\"zero\"");
    snprintf(p, sizeof p, "%s/f/ds_ok.json", H), write_text(p, "{\"zero_optimization\": {\"stage\": 0}}");
    snprintf(p, sizeof p, "%s/f/ds_clip.json", H), write_text(p, "{\"gradient_clipping\": -1}");
    snprintf(p, sizeof p, "%s/f/ds_scale.json", H), write_text(p, "{\"fp16\": {\"enabled\": true, \"loss_scale\": -1}}");
    snprintf(p, sizeof p, "%s/f/ds_offdev.json", H);
    write_text(p, "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"gpu\"}}}");
    snprintf(p, sizeof p, "%s/f/cfg_nested_ds_missing.json", H), write_text(p, "{\"deepspeed\": \"nope.json\"}");
    snprintf(p, sizeof p, "%s/f/cfg_ds_number.json", H), write_text(p, "{\"deepspeed\": 5}");

    // model directories: config.json problems (weights are the good ones)
    static const struct {
        const char* name;
        const char* key;
        const char* value;
    } CFG[] = {
        {"cfg_dmodel_neg", "d_model", "-8"},       {"cfg_dmodel_zero", "d_model", "0"},
        {"cfg_dmodel_str", "d_model", "\"8\""},    {"cfg_dmodel_float", "d_model", "8.5"},
        {"cfg_dmodel_huge", "d_model", "1e30"},    {"cfg_heads_zero", "num_heads", "0"},
        {"cfg_layers_neg", "num_layers", "-1"},    {"cfg_vocab_zero", "vocab_size", "0"},
        {"cfg_dff_null", "d_ff", "true"},          {"cfg_eps_str", "layer_norm_epsilon", "\"tiny\""},
        {"cfg_ffproj", "feed_forward_proj", "\"gated-silu\""},
        {"cfg_type", "model_type", "\"bert\""},    {"cfg_tie_str", "tie_word_embeddings", "\"yes\""},
        {"cfg_scale_num", "scale_decoder_outputs", "1"},
        {"cfg_buckets_zero", "relative_attention_num_buckets", "0"},
        {"cfg_dmodel_mismatch", "d_model", "16"},  {"cfg_layers_more", "num_layers", "3"},
        {"cfg_vocab_small", "vocab_size", "100"},  {"cfg_dkv_mismatch", "d_kv", "8"},
        {"cfg_dff_mismatch", "d_ff", "32"},
    };
    for (size_t i = 0; i < sizeof CFG / sizeof CFG[0]; i++) {
        char dir[700];
        model_dir(dir, sizeof dir, CFG[i].name);
        if (sh("cp '%s/m/model.safetensors' '%s/'", H, dir))
            die_setup("weights");
        json_error_t je;
        snprintf(p, sizeof p, "%s/config.json", dir);
        json_t* cfg = json_load_file(p, 0, &je);
        json_t* v = json_loads(CFG[i].value, JSON_DECODE_ANY, &je);
        if (!cfg || !v) die_setup("config mutation");
        json_object_set_new(cfg, CFG[i].key, v);
        json_dump_file(cfg, p, JSON_INDENT(2));
        json_decref(cfg);
    }
    {
        char dir[700];
        model_dir(dir, sizeof dir, "cfg_badjson");
        sh("cp '%s/m/model.safetensors' '%s/'", H, dir);
        snprintf(p, sizeof p, "%s/config.json", dir), write_text(p, "{\"d_model\": 8,");
        model_dir(dir, sizeof dir, "cfg_array");
        sh("cp '%s/m/model.safetensors' '%s/'", H, dir);
        snprintf(p, sizeof p, "%s/config.json", dir), write_text(p, "[]");
        // item 1: transformers 5.x's tied-unscaled config (no lm_head.weight: shared.weight projects) loads;
        // a config.json from before 5.x that says untied needs lm_head.weight in the weights
        model_dir(dir, sizeof dir, "cfg_5x_tied_unscaled");
        sh("cp '%s/m/model.safetensors' '%s/' && sed -i 's/\"scale_decoder_outputs\": true/\"scale_decoder_outputs\": "
           "false/' '%s/config.json' && grep -q '\"scale_decoder_outputs\": false' '%s/config.json'", H, dir, dir, dir);
        model_dir(dir, sizeof dir, "cfg_4x_untied_no_head");
        sh("cp '%s/m/model.safetensors' '%s/' && sed -i -e '/scale_decoder_outputs/d' -e "
           "'s/\"tie_word_embeddings\": true/\"tie_word_embeddings\": false/' '%s/config.json'", H, dir, dir);
        model_dir(dir, sizeof dir, "no_config");
        sh("cp '%s/m/model.safetensors' '%s/' && rm '%s/config.json'", H, dir, dir);
        model_dir(dir, sizeof dir, "config_dir");
        sh("cp '%s/m/model.safetensors' '%s/' && rm '%s/config.json' && mkdir '%s/config.json'", H, dir, dir, dir);
        model_dir(dir, sizeof dir, "no_weights");
        model_dir(dir, sizeof dir, "only_bin");
        snprintf(p, sizeof p, "%s/pytorch_model.bin", dir), write_text(p, "PK");
        model_dir(dir, sizeof dir, "weights_dir");
        sh("mkdir '%s/model.safetensors'", dir);
        model_dir(dir, sizeof dir, "no_spiece");
        sh("cp '%s/m/model.safetensors' '%s/' && rm '%s/spiece.model'", H, dir, dir);
        model_dir(dir, sizeof dir, "spiece_trunc");
        sh("cp '%s/m/model.safetensors' '%s/' && head -c 1000 '%s/m/spiece.model' > '%s/spiece.model'", H, dir, H,
           dir);
        model_dir(dir, sizeof dir, "spiece_half");
        sh("cp '%s/m/model.safetensors' '%s/' && head -c 400000 '%s/m/spiece.model' > '%s/spiece.model'", H, dir, H,
           dir);
        model_dir(dir, sizeof dir, "spiece_empty");
        sh("cp '%s/m/model.safetensors' '%s/' && : > '%s/spiece.model'", H, dir, dir);
        model_dir(dir, sizeof dir, "spiece_junk");
        sh("cp '%s/m/model.safetensors' '%s/' && head -c 5000 '%s/d/binary.jsonl' > '%s/spiece.model'", H, dir, H,
           dir);
        model_dir(dir, sizeof dir, "spiece_foreign");
        sh("cp '%s/m/model.safetensors' '%s/' && cp '%s/hf-fixtures/test_sentencepiece.model' '%s/spiece.model'", H,
           dir, data, dir);
        model_dir(dir, sizeof dir, "spiece_dir");
        sh("cp '%s/m/model.safetensors' '%s/' && rm '%s/spiece.model' && mkdir '%s/spiece.model'", H, dir, dir, dir);
        model_dir(dir, sizeof dir, "only_tokjson");
        sh("cp '%s/m/model.safetensors' '%s/' && rm '%s/spiece.model' && echo '{}' > '%s/tokenizer.json'", H, dir,
           dir, dir);
    }

    // model directories: safetensors header problems (the crate's checks and ours)
    static const struct {
        const char* name;
        const char* header;
        size_t ndata;
    } ST[] = {
        {"st_badjson", "{\"a\": {\"dtype\": \"F32\",", 0},
        {"st_notobject", "[1, 2, 3]", 0},
        {"st_leading_space", " {}", 0},
        {"st_nodtype", "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4},
        {"st_noshape", "{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4},
        {"st_nooffsets", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4},
        {"st_i64", "{\"a\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8},
        {"st_dtype_lower", "{\"a\": {\"dtype\": \"f32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4},
        {"st_shape_neg", "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4},
        {"st_shape_float", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4},
        {"st_shape_overflow",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 2], \"data_offsets\": [0, 0]}}", 0},
        {"st_shape_overflow2",
         "{\"a\": {\"dtype\": \"BF16\", \"shape\": [9223372036854775807, 2], \"data_offsets\": [0, 0]}}", 0},
        {"st_bytes_overflow",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904], \"data_offsets\": [0, 0]}}", 0},
        {"st_offsets_short", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8},
        {"st_offsets_reversed", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4},
        {"st_offsets_three", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8},
        {"st_offsets_neg", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 4},
        {"st_past_end", "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8},
        {"st_gap",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
         12},
        {"st_start_gap", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8},
        {"st_overlap",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
         12},
        {"st_alias",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
         4},
        {"st_trailing", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 12},
        {"st_duplicate",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
         8},
        {"st_empty_name", "{\"\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4},
        {"st_meta_num", "{\"__metadata__\": {\"format\": 5}}", 0},
        {"st_meta_array", "{\"__metadata__\": [\"pt\"]}", 0},
        {"st_tensor_string", "{\"a\": \"F32\"}", 0},
        {"st_empty_header", "{}", 0},
        {"st_dims_many",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], "
         "\"data_offsets\": [0, 4]}}",
         4},
    };
    for (size_t i = 0; i < sizeof ST / sizeof ST[0]; i++) {
        char dir[700];
        model_dir(dir, sizeof dir, ST[i].name);
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_st(p, ST[i].header, ST[i].ndata);
    }
    {
        char dir[700];
        model_dir(dir, sizeof dir, "st_empty_file");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_text(p, "");
        model_dir(dir, sizeof dir, "st_7bytes");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_bytes(p, "\x08\0\0\0\0\0\0", 7);
        model_dir(dir, sizeof dir, "st_hlen_huge");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_st_raw(p, 1ull << 62, "{}", 0, true);
        model_dir(dir, sizeof dir, "st_hlen_max");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_st_raw(p, UINT64_MAX - 1, "{}", 0, true);
        model_dir(dir, sizeof dir, "st_hlen_past_end");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_st_raw(p, 4096, "{}", 0, true);
        model_dir(dir, sizeof dir, "st_hlen_short");
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_st_raw(p, 3, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, true);
        model_dir(dir, sizeof dir, "st_header_badutf8");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_st(p, "{\"\xff\": 1}", 0);
        model_dir(dir, sizeof dir, "st_header_nul");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_st_raw(p, 16, "{}", 0, true);
        // the real tiny model, truncated in the middle of its data
        model_dir(dir, sizeof dir, "st_truncated");
        sh("head -c $(( $(stat -c %%s '%s/m/model.safetensors') - 100 )) '%s/m/model.safetensors' > '%s/model.safetensors'",
           H, H, dir);
        // the real model with one tensor dropped from the header (its bytes become a gap)
        json_t* h = json_deep_copy(good_header);
        json_object_del(h, "encoder.final_layer_norm.weight");
        model_dir(dir, sizeof dir, "st_missing_tensor");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_st_json(p, h, good_ndata);
        json_decref(h);
        // one extra tensor appended that the model does not have
        h = json_deep_copy(good_header);
        json_object_set_new(h, "encoder.block.9.layer.0.SelfAttention.q.weight",
                            json_pack("{s:s, s:[i], s:[I, I]}", "dtype", "F16", "shape", 4, "data_offsets",
                                      (json_int_t)good_ndata, (json_int_t)good_ndata + 8));
        model_dir(dir, sizeof dir, "st_unexpected_tensor");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_st_json(p, h, good_ndata + 8);
        json_decref(h);
        // one tensor with a different shape (same byte count: [32128, 8] -> [8, 32128])
        h = json_deep_copy(good_header);
        json_t* t = json_object_get(h, "shared.weight");
        if (t) json_object_set_new(t, "shape", json_pack("[i, i]", 8, 32128));
        model_dir(dir, sizeof dir, "st_wrong_shape");
        snprintf(p, sizeof p, "%s/model.safetensors", dir), write_st_json(p, h, good_ndata);
        json_decref(h);
        // sharded: the index names a shard that is not there / is not JSON / escapes the directory
        model_dir(dir, sizeof dir, "idx_missing_shard");
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        write_text(p, "{\"metadata\": {\"total_size\": 4}, \"weight_map\": {\"shared.weight\": "
                      "\"model-00001-of-00002.safetensors\"}}");
        model_dir(dir, sizeof dir, "idx_badjson");
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir), write_text(p, "{\"weight_map\": ");
        model_dir(dir, sizeof dir, "idx_no_map");
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir), write_text(p, "{\"metadata\": {}}");
        model_dir(dir, sizeof dir, "idx_escape");
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        write_text(p, "{\"weight_map\": {\"shared.weight\": \"../../m/model.safetensors\"}}");
        model_dir(dir, sizeof dir, "idx_map_number");
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        write_text(p, "{\"weight_map\": {\"shared.weight\": 5}}");
    }

    // checkpoints for --resume_from_checkpoint
    char cfg[600], other[700];
    snprintf(cfg, sizeof cfg, "%s/m/config.json", H);
    snprintf(other, sizeof other, "%s/f/cfg_dmodel_mismatch/config.json", H);
    snprintf(p, sizeof p, "%s/f/ck/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("cp '%s/m/model.safetensors' '%s/f/ck/checkpoint-4/'", H, H);
    snprintf(p, sizeof p, "%s/f/ck_nomarker/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("rm '%s/f/ck_nomarker/checkpoint-4/t5train_done'", H);
    snprintf(p, sizeof p, "%s/f/ck_wrongstep/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("printf 't5train checkpoint\\nstep 9\\nworld_size 1\\n' > '%s/f/ck_wrongstep/checkpoint-4/t5train_done'", H);
    snprintf(p, sizeof p, "%s/f/ck_badmarker/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("printf 'garbage' > '%s/f/ck_badmarker/checkpoint-4/t5train_done'", H);
    snprintf(p, sizeof p, "%s/f/ck_truncstate/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("truncate -s 100 '%s/f/ck_truncstate/checkpoint-4/t5train_state.bin'", H);
    snprintf(p, sizeof p, "%s/f/ck_badmagic/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("printf 'XXXX' | dd of='%s/f/ck_badmagic/checkpoint-4/t5train_state.bin' conv=notrunc 2>/dev/null", H);
    snprintf(p, sizeof p, "%s/f/ck_badcrc/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("printf '\\001' | dd of='%s/f/ck_badcrc/checkpoint-4/t5train_state.bin' bs=1 seek=100 conv=notrunc "
       "2>/dev/null",
       H);
    snprintf(p, sizeof p, "%s/f/ck_nostate/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("rm '%s/f/ck_nostate/checkpoint-4/t5train_state.bin'", H);
    snprintf(p, sizeof p, "%s/f/ck_other_model/checkpoint-4", H), fake_checkpoint(p, 4, other);
    snprintf(p, sizeof p, "%s/f/ck_noconfig/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("rm '%s/f/ck_noconfig/checkpoint-4/config.json'", H);
    snprintf(p, sizeof p, "%s/f/ck_badweights/checkpoint-4", H), fake_checkpoint(p, 4, cfg);
    sh("head -c 50 '%s/m/model.safetensors' > '%s/f/ck_badweights/checkpoint-4/model.safetensors'", H, H);
    sh("mkdir -p '%s/f/ck_empty' '%s/f/ck_badname/checkpoint-x'", H, H);
    // a save that did not finish (no marker in its temporary directory) and one that finished writing but
    // was stopped before its rename (marker present: complete under a leftover name, resumable, issue 14)
    sh("mkdir -p '%s/f/ck_tmponly' && cp -r '%s/f/ck/checkpoint-4' '%s/f/ck_tmponly/checkpoint-4.tmp-1' && "
       "rm '%s/f/ck_tmponly/checkpoint-4.tmp-1/t5train_done'", H, H, H, H);
    sh("mkdir -p '%s/f/ck_tmpdone' && cp -r '%s/f/ck/checkpoint-4' '%s/f/ck_tmpdone/checkpoint-4.tmp-1'", H, H, H);

    // the pre-existing run directory: a finished run with one complete checkpoint and results
    sh("cp -r '%s/f/ck/checkpoint-4' '%s/R/' && cp '%s/m/model.safetensors' '%s/m/config.json' '%s/R/' && "
       "echo '{\"train_loss\": 1.5}' > '%s/R/all_results.json' && echo '{}' > '%s/R/t5train_config.json' && "
       "echo 's:4 trl:1.5' > '%s/R/main.log'",
       H, H, H, H, H, H, H, H);
    // a second run dir holding a resumable checkpoint, for cases that resume "last"
    sh("mkdir -p '%s/R2' && cp -r '%s/f/ck_other_model/checkpoint-4' '%s/R2/'", H, H, H);
}

// ---------------------------------------------------------------------------------------------
// the table

static void make_cases(void) {
    // ---- valid controls (they keep the fixtures honest: a broken fixture fails here)
    add("control: valid run, --dry_run", 0, "", "$T $B --dry_run");
    add("control: valid run, inline --deepspeed object, --dry_run", 0, "",
        "$T $B --deepspeed '{\"zero_optimization\": {\"stage\": 0}}' --dry_run");
    add("control: parallel text train file, --dry_run", 0, "", "$T $B --train_file $D/par.en --dry_run");
    add("control: resume from a complete checkpoint, --dry_run", 0, "",
        "$T $B --resume_from_checkpoint $F/ck/checkpoint-4 --dry_run");
    add("control: bleu", 0, "", "printf 'a b c d\\n' > $H/hyp && $T bleu $H/hyp $H/hyp");
    add("control: tokenize", 0, "", "echo Hello | $T tokenize --model $M");
    add("control: dump-grads --help", 0, "", "$T dump-grads --help");
    add("control: --help", 0, "", "$T --help");

    // ---- command line (hand-written)
    add("cli: unknown flag", 2, "--learning_rat", "$T $B --learning_rat 1e-4 --dry_run");
    add("cli: single-dash flag", 2, "", "$T $B -lr 1e-4 --dry_run");
    add("cli: stray argument", 2, "stray", "$T $B stray --dry_run");
    add("cli: flag without value at the end", 2, "seed", "$T $B --dry_run --seed");
    add("cli: flag followed by a flag", 2, "seed", "$T $B --seed --dry_run");
    add("cli: negated non-bool", 2, "", "$T $B --no_seed --dry_run");
    add("cli: negated bool with a value", 2, "", "$T $B --no_fp16=true --dry_run");
    add("cli: --dry_run=maybe", 2, "dry_run", "$T $B --dry_run=maybe");
    add("cli: nan learning rate then more flags", 2, "learning_rate", "$T $B --learning_rate nan --dry_run");
    add("cli: fp16 and bf16", 2, "bf16", "$T $B --fp16 --bf16 --dry_run");
    add("cli: unknown subcommand", 2, "frobnicate", "$T frobnicate");
    add("cli: flag name too long", 2, "", "$T $B --$(printf 'x%%.0s' $(seq 300)) 1 --dry_run");
    add("cli: string value too long", 2, "too long", "$T $B --source_prefix $(printf 'x%%.0s' $(seq 5000)) --dry_run");
    add("cli: --dataset with empty value", 2, "", "$T $B --dataset= --dry_run");
    add("cli: --config missing file", 2, "not found", "$T $B --config $H/nope.json --dry_run");
    add("cli: --config is a directory", 2, "directory", "$T $B --config $H/f --dry_run");
    add("cli: --config_name missing", 2, "config_name", "$T $B --config_name $H/nope/config.json --dry_run");
    add("cli: no model", 2, "model_name_or_path",
        "$T --train_file $D/train.jsonl --source_lang en --target_lang ro --output_dir $R --dry_run");
    add("cli: no data", 2, "no data",
        "$T --model_name_or_path $M --source_lang en --target_lang ro --output_dir $R --dry_run");
    add("cli: no languages", 2, "source_lang",
        "$T --model_name_or_path $M --train_file $D/train.jsonl --output_dir $R --dry_run");
    add("cli: empty output_dir", 2, "output_dir", "$T $B --output_dir= --dry_run");
    add("cli: WORLD_SIZE garbage", 2, "WORLD_SIZE", "WORLD_SIZE=two $T $B --dry_run");
    add("cli: WORLD_SIZE 2 without MASTER_ADDR", 2, "MASTER_ADDR and MASTER_PORT are not set", "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 $T $B --dry_run");
    add("control: WORLD_SIZE 2 with MASTER_ADDR (a dry run joins no peers)", 0, "", "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 $T $B --dry_run");
    add("cli: WORLD_SIZE without RANK", 2, "RANK is not", "WORLD_SIZE=2 $T $B --dry_run");
    add("cli: max_steps 0 and no epochs", 2, "", "$T $B --max_steps 0 --num_train_epochs 0 --dry_run");

    // ---- "not implemented yet" (config errors: exit 2, found by --dry_run too)
    // Adafactor in the ZeRO engine (stages 1-3, offloads, ratio) on one rank or several (issue 33): accepted
    add("control: optim adafactor at stage 3 + offload on 2 ranks (a dry run joins no peers)", 0, "", "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 $T $B --optim adafactor --deepspeed '{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}}}' --dry_run");
    add("control: optim adafactor at stage 0 on 2 ranks (a dry run joins no peers)", 0, "", "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 $T $B --optim adafactor --dry_run");
    add("control: optim adafactor at stage 3, both offloads", 0, "", "$T $B --optim adafactor --deepspeed '{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}}}' --dry_run");
    add("control: optim adafactor at stage 2, offload ratio 0.3", 0, "", "$T $B --optim adafactor --adafactor_beta1 0.9 --deepspeed '{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.3}}}' --dry_run");
    add("control: --adafactor at stage 0, --dry_run", 0, "", "$T $B --adafactor --dry_run");
    add("nyi: lr_scheduler inverse_sqrt", 2, "not implemented yet", "$T $B --lr_scheduler_type inverse_sqrt --dry_run");
    add("label smoothing 0.1 runs (dry run)", 0, "", "$T $B --label_smoothing_factor 0.1 --dry_run");
    add("label smoothing 1 out of range", 2, "label_smoothing_factor", "$T $B --label_smoothing_factor 1 --dry_run");
    add("label smoothing negative", 2, "label_smoothing_factor", "$T $B --label_smoothing_factor -0.1 --dry_run");
    // best model (issue 20): HF's TrainingArguments rules, EarlyStoppingCallback's requirements, known metrics only
    add("best: load_best, matching steps", 0, "",
        "$T $B --load_best_model_at_end --evaluation_strategy steps --eval_steps 1 --save_steps 2 --dry_run");
    add("best: strategies differ", 2, "save and eval strategy to match",
        "$T $B --load_best_model_at_end --evaluation_strategy epoch --save_strategy steps --dry_run");
    add("best: save_steps not a multiple", 2, "not a round multiple of 3",
        "$T $B --load_best_model_at_end --evaluation_strategy steps --eval_steps 3 --save_steps 4 --dry_run");
    add("best: bleu without generation", 2, "eval_bleu",
        "$T $B --load_best_model_at_end --metric_for_best_model bleu --evaluation_strategy steps --eval_steps 1 "
        "--save_steps 1 --dry_run");
    add("best: bleu with generation", 0, "",
        "$T $B --load_best_model_at_end --metric_for_best_model bleu --predict_with_generate --evaluation_strategy "
        "steps --eval_steps 1 --save_steps 1 --greater_is_better true --run_name r1 --dry_run");
    add("best: unknown metric", 2, "'eval_rouge'", "$T $B --metric_for_best_model rouge --dry_run");
    add("best: early stopping without load_best", 2, "requires load_best_model_at_end",
        "$T $B --early_stopping_patience 2 --evaluation_strategy steps --eval_steps 1 --dry_run");
    add("best: early stopping patience 0", 2, "early_stopping_patience", "$T $B --early_stopping_patience 0 --dry_run");
    add("best: early stopping threshold negative", 2, "early_stopping_threshold",
        "$T $B --early_stopping_threshold -1 --dry_run");
    add("nyi: sortish sampler", 2, "not implemented yet", "$T $B --sortish_sampler --dry_run");
    add("nyi: report_to wandb", 2, "not implemented yet", "$T $B --report_to wandb --dry_run");
    // ZeRO stages 1-3 and CPU offload are implemented (src/zero); NVMe offload is not
    add("control: ZeRO stage 3, --dry_run", 0, "", "$T $B --deepspeed $F/ds_stage3.json --dry_run");
    add("nyi: NVMe parameter offload", 2, "not implemented yet: offload_param device nvme",
        "$T $B --deepspeed $F/ds_nvme_path.json --dry_run");
    add("nyi: NVMe parameter offload without --dry_run", 2, "not implemented yet",
        "$T $B --deepspeed $F/ds_nvme_path.json");
    add("nyi: DeepSpeed Lion optimizer", 2, "not implemented yet", "$T $B --deepspeed $F/ds_lion.json --dry_run");
    add("nyi: DeepSpeed OneCycle scheduler", 2, "not implemented yet",
        "$T $B --deepspeed $F/ds_onecycle.json --dry_run");
    add("control: the homework ds_config_zero3.json (stage 3, CPU offload), --dry_run", 0, "",
        "$T $B --deepspeed $REPO/configs/ds_config_zero3.json --dry_run");

    // ---- config files
    add("config: invalid JSON", 2, "invalid JSON", "$T $B --config $F/bad.json --dry_run");
    add("config: top-level array", 2, "object", "$T $B --config $F/array.json --dry_run");
    add("config: empty file", 2, "", "$T $B --config $F/empty.json --dry_run");
    add("config: unknown key", 2, "did you mean", "$T $B --config $F/unknown.json --dry_run");
    add("config: unknown nested DeepSpeed key", 2, "stage3_max_live_parameter",
        "$T $B --config $F/deep_unknown.json --dry_run");
    add("config: wrong type", 2, "learning_rate", "$T $B --config $F/wrongtype.json --dry_run");
    add("config: duplicate key", 2, "", "$T $B --config $F/dup.json --dry_run");
    add("config: NaN literal", 2, "", "$T $B --config $F/nanlit.json --dry_run");
    add("config: 1e999", 2, "", "$T $B --config $F/huge.json --dry_run");
    add("config: fractional integer", 2, "max_steps", "$T $B --config $F/intfloat.json --dry_run");
    add("config: negative batch size", 2, "per_device_train_batch_size", "$T $B --config $F/negbatch.json --dry_run");
    add("config: invalid UTF-8", 2, "", "$T $B --config $F/badutf8.json --dry_run");
    add("config: auto where not allowed", 2, "auto", "$T $B --config $F/auto_bad.json --dry_run");
    add("config: nested deepspeed path missing", 2, "not found", "$T $B --config $F/cfg_nested_ds_missing.json --dry_run");
    add("config: deepspeed is a number", 2, "deepspeed", "$T $B --config $F/cfg_ds_number.json --dry_run");
    add("deepspeed: missing file", 2, "not found", "$T $B --deepspeed $H/nope.json --dry_run");
    add("deepspeed: a directory", 2, "directory", "$T $B --deepspeed $H/f --dry_run");
    add("deepspeed: inline JSON invalid", 2, "", "$T $B --deepspeed '{\"zero_optimization\": ' --dry_run");
    add("deepspeed: inline JSON not an object", 2, "", "$T $B --deepspeed '[1]' --dry_run");
    add("deepspeed: inline unknown key", 2, "unknown key", "$T $B --deepspeed '{\"zero_optimisation\": {}}' --dry_run");
    add("deepspeed: stage 4", 2, "stage", "$T $B --deepspeed $F/ds_stage4.json --dry_run");
    add("deepspeed: nvme without path", 2, "nvme", "$T $B --deepspeed $F/ds_nvme.json --dry_run");
    add("deepspeed: offload at stage 0", 2, "offload", "$T $B --deepspeed $F/ds_offload0.json --dry_run");
    add("deepspeed: fp16 and bf16", 2, "bf16", "$T $B --deepspeed $F/ds_both.json --dry_run");
    add("deepspeed: batch mismatch", 2, "mismatch", "$T $B --deepspeed $F/ds_mismatch.json --dry_run");
    add("deepspeed: auto sub_group_size", 2, "auto", "$T $B --deepspeed $F/ds_autobad.json --dry_run");
    add("deepspeed: top-level string", 2, "", "$T $B --deepspeed $F/ds_string.json --dry_run");
    add("deepspeed: negative clipping", 2, "gradient_clipping", "$T $B --deepspeed $F/ds_clip.json --dry_run");
    add("deepspeed: negative loss scale", 2, "loss_scale", "$T $B --deepspeed $F/ds_scale.json --dry_run");
    add("deepspeed: offload device gpu", 2, "device", "$T $B --deepspeed $F/ds_offdev.json --dry_run");

    // ---- model directory and config.json (no GPU needed to find these: exit 2 before anything exists)
    add("model: missing directory", 2, "not found", "$T $B --model_name_or_path $H/nope --dry_run");
    add("model: missing directory, real run", 2, "not found", "$T $B --model_name_or_path $H/nope");
    add("control: transformers 5.x tied-unscaled config.json (no lm_head.weight), --dry_run", 0, "",
        "$T $B --model_name_or_path $F/cfg_5x_tied_unscaled --dry_run");
    add("model: untied config.json from before 5.x without lm_head.weight", 2, "lm_head.weight",
        "$T $B --model_name_or_path $F/cfg_4x_untied_no_head --dry_run");
    add("model: no config.json", 2, "config.json", "$T $B --model_name_or_path $F/no_config --dry_run");
    add("model: config.json is a directory", 2, "config.json", "$T $B --model_name_or_path $F/config_dir --dry_run");
    add("model: no weights", 2, "", "$T $B --model_name_or_path $F/no_weights --dry_run");
    add("model: only pytorch_model.bin", 2, "convert", "$T $B --model_name_or_path $F/only_bin --dry_run");
    add("model: model.safetensors is a directory", 2, "model.safetensors",
        "$T $B --model_name_or_path $F/weights_dir --dry_run");
    add("model: config.json invalid JSON", 2, "config.json", "$T $B --model_name_or_path $F/cfg_badjson --dry_run");
    add("model: config.json array", 2, "config.json", "$T $B --model_name_or_path $F/cfg_array --dry_run");
    static const char* const CFGS[] = {"cfg_dmodel_neg", "cfg_dmodel_zero", "cfg_dmodel_str", "cfg_dmodel_float",
                                       "cfg_dmodel_huge", "cfg_heads_zero", "cfg_layers_neg", "cfg_vocab_zero",
                                       "cfg_dff_null", "cfg_eps_str", "cfg_ffproj", "cfg_type", "cfg_tie_str",
                                       "cfg_scale_num", "cfg_buckets_zero"};
    for (size_t i = 0; i < sizeof CFGS / sizeof CFGS[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "model: config.json %s", CFGS[i] + 4);
        add(name, 2, "config.json", "$T $B --model_name_or_path $F/%s --dry_run", CFGS[i]);
    }
    static const char* const MISMATCH[] = {"cfg_dmodel_mismatch", "cfg_layers_more", "cfg_vocab_small",
                                           "cfg_dkv_mismatch", "cfg_dff_mismatch"};
    for (size_t i = 0; i < sizeof MISMATCH / sizeof MISMATCH[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "model: config.json vs weights, %s", MISMATCH[i] + 4);
        add(name, 2, "", "$T $B --model_name_or_path $F/%s --dry_run", MISMATCH[i]);
    }
    add("model: config vs weights, real run", 2, "", "$T $B --model_name_or_path $F/cfg_dmodel_mismatch");
    add("model: --config_name of another shape", 2, "",
        "$T $B --config_name $F/cfg_dmodel_mismatch/config.json --dry_run");

    // ---- safetensors
    static const char* const STS[] = {
        "st_badjson", "st_notobject", "st_leading_space", "st_nodtype", "st_noshape", "st_nooffsets", "st_i64",
        "st_dtype_lower", "st_shape_neg", "st_shape_float", "st_shape_overflow", "st_shape_overflow2",
        "st_bytes_overflow", "st_offsets_short", "st_offsets_reversed", "st_offsets_three", "st_offsets_neg",
        "st_past_end", "st_gap", "st_start_gap", "st_overlap", "st_alias", "st_trailing", "st_duplicate",
        "st_empty_name", "st_meta_num", "st_meta_array", "st_tensor_string", "st_empty_header", "st_dims_many",
        "st_empty_file", "st_7bytes", "st_hlen_huge", "st_hlen_max", "st_hlen_past_end", "st_hlen_short",
        "st_header_badutf8", "st_header_nul", "st_truncated", "st_missing_tensor", "st_unexpected_tensor",
        "st_wrong_shape", "idx_missing_shard", "idx_badjson", "idx_no_map", "idx_escape", "idx_map_number"};
    for (size_t i = 0; i < sizeof STS / sizeof STS[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "safetensors: %s", STS[i]);
        add(name, 2, "", "$T $B --model_name_or_path $F/%s --dry_run", STS[i]);
    }
    add("safetensors: shape overflow, real run", 2, "", "$T $B --model_name_or_path $F/st_shape_overflow");
    add("safetensors: truncated, real run", 2, "", "$T $B --model_name_or_path $F/st_truncated");

    // ---- tokenizer
    add("tokenizer: none in the model dir", 2, "tokenizer", "$T $B --model_name_or_path $F/no_spiece --dry_run");
    add("tokenizer: missing --tokenizer_name", 2, "", "$T $B --tokenizer_name $H/nope/spiece.model --dry_run");
    add("tokenizer: truncated spiece.model (1000 bytes)", 2, "spiece.model",
        "$T $B --model_name_or_path $F/spiece_trunc --dry_run");
    add("tokenizer: truncated spiece.model, real run", 2, "spiece.model",
        "$T $B --model_name_or_path $F/spiece_trunc");
    add("tokenizer: half a spiece.model", 2, "spiece.model", "$T $B --model_name_or_path $F/spiece_half --dry_run");
    add("tokenizer: empty spiece.model", 2, "spiece.model", "$T $B --model_name_or_path $F/spiece_empty --dry_run");
    add("tokenizer: junk spiece.model", 2, "spiece.model", "$T $B --model_name_or_path $F/spiece_junk --dry_run");
    add("tokenizer: foreign spiece.model", 2, "", "$T $B --model_name_or_path $F/spiece_foreign --dry_run");
    add("tokenizer: spiece.model is a directory", 2, "", "$T $B --model_name_or_path $F/spiece_dir --dry_run");
    add("tokenizer: only tokenizer.json", 2, "tokenizer", "$T $B --model_name_or_path $F/only_tokjson --dry_run");
    add("tokenizer: vocabulary larger than the model", 2, "vocab",
        "$T $B --model_name_or_path $F/cfg_vocab_small --dry_run");
    add("tokenize: truncated spiece.model", 2, "spiece.model", "echo Hello | $T tokenize --model $F/spiece_trunc");
    add("tokenize: missing model", 2, "", "echo Hello | $T tokenize --model $H/nope");

    // ---- data files
    static const struct {
        const char* file;
        const char* expect;
    } DATA[] = {
        {"nope.jsonl", "not found"}, {"adir.jsonl", "directory"}, {"fifo.jsonl", "fifo"},
        {"dangling.jsonl", ""},      {"noread.jsonl", ""},        {"data.csv", "csv"},
        {"data.txt", ".txt"},        {"data.parquet", "parquet"}, {"empty.jsonl", ""},
        {"blank.jsonl", ""},         {"badjson.jsonl", "line 1"}, {"array.jsonl", "line 1"},
        {"notrans.jsonl", "translation"}, {"nolang.jsonl", "ro"}, {"numlang.jsonl", "line 1"},
        {"transarr.jsonl", "line 1"}, {"badutf8.jsonl", "UTF-8"}, {"overlong.jsonl", "UTF-8"},
        {"nul.jsonl", "NUL"},        {"binary.jsonl", ""},        {"uneven.en", "lines"},
        {"alone.en", "alone.ro"},    {"unclosed.en.sgm", ""},
    };
    for (size_t i = 0; i < sizeof DATA / sizeof DATA[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "data: --train_file %s", DATA[i].file);
        add(name, 2, DATA[i].expect, "$T $B --train_file $D/%s --dry_run", DATA[i].file);
        if (!strcmp(DATA[i].file, "noread.jsonl") && geteuid() == 0)
            skip_last("running as root: chmod 000 does not stop root from reading the file, so there is no error to find");
    }
    add("data: --validation_file directory", 2, "directory", "$T $B --do_eval --validation_file $D/adir.jsonl --dry_run");
    add("data: --test_file fifo", 2, "fifo", "$T $B --do_predict --test_file $D/fifo.jsonl --dry_run");
    add("data: --train_file missing, real run", 2, "not found", "$T $B --train_file $D/nope.jsonl");
    add("data: --train_file invalid JSON, real run", 2, "line 1", "$T $B --train_file $D/badjson.jsonl");
    add("data: --data_dir missing", 2, "", "$T $B --train_file= --dataset_name wmt16 --dataset_config_name ro-en "
                                           "--data_dir $H/nope --dry_run");
    add("data: unknown dataset", 2, "", "$T $B --train_file= --dataset_name squad --data_dir $D --dry_run");
    add("data: wrong language pair for the file", 2, "", "$T $B --source_lang de --target_lang fr --dry_run");

    // ---- resume
    add("resume: missing directory", 2, "", "$T $B --resume_from_checkpoint $H/nope --dry_run");
    add("resume: no marker", 2, "", "$T $B --resume_from_checkpoint $F/ck_nomarker/checkpoint-4 --dry_run");
    add("resume: marker for another step", 2, "", "$T $B --resume_from_checkpoint $F/ck_wrongstep/checkpoint-4 --dry_run");
    add("resume: garbage marker", 2, "", "$T $B --resume_from_checkpoint $F/ck_badmarker/checkpoint-4 --dry_run");
    add("resume: truncated state file", 2, "", "$T $B --resume_from_checkpoint $F/ck_truncstate/checkpoint-4 --dry_run");
    add("resume: state file bad magic", 2, "", "$T $B --resume_from_checkpoint $F/ck_badmagic/checkpoint-4 --dry_run");
    add("resume: state file bad header CRC", 2, "", "$T $B --resume_from_checkpoint $F/ck_badcrc/checkpoint-4 --dry_run");
    add("resume: no state file", 2, "", "$T $B --resume_from_checkpoint $F/ck_nostate/checkpoint-4 --dry_run");
    add("resume: checkpoint of another model", 2, "", "$T $B --resume_from_checkpoint $F/ck_other_model/checkpoint-4 --dry_run");
    add("resume: checkpoint of another model, real run", 2, "",
        "$T $B --resume_from_checkpoint $F/ck_other_model/checkpoint-4");
    add("resume: last, in a dir with another model's checkpoint", 2, "",
        "$T $B --output_dir $H/R2 --resume_from_checkpoint last --dry_run");
    add("resume: truncated weights", 2, "", "$T $B --resume_from_checkpoint $F/ck_badweights/checkpoint-4 --dry_run");
    add("resume: not named checkpoint-N", 2, "", "$T $B --resume_from_checkpoint $F/ck_badname/checkpoint-x --dry_run");
    add("resume: a plain directory", 2, "", "$T $B --resume_from_checkpoint $F/ck_empty --dry_run");
    add("resume: last with no checkpoint", 2, "", "$T $B --output_dir $F/ck_empty --resume_from_checkpoint last --dry_run");
    add("resume: last with only an unfinished tmp dir", 2, "no complete checkpoint",
        "$T $B --output_dir $F/ck_tmponly --resume_from_checkpoint last --dry_run");
    add("control: resume last from a complete checkpoint left under its tmp name, --dry_run", 0, "",
        "$T $B --output_dir $F/ck_tmpdone --resume_from_checkpoint last --dry_run");
    add("resume: output_dir is a file", 2, "output_dir",
        "$T $B --output_dir $R/all_results.json --resume_from_checkpoint $F/ck/checkpoint-4 --dry_run");
    add("resume: checkpoint given as a file", 2, "", "$T $B --resume_from_checkpoint $R/main.log --dry_run");

    // ---- output_dir
    add("output_dir: not empty, no overwrite", 2, "overwrite_output_dir",
        "$T $B --overwrite_output_dir false --dry_run");
    add("output_dir: not empty, no overwrite, real run", 2, "overwrite_output_dir", "$T $B --overwrite_output_dir false");
    add("output_dir: a file", 2, "output_dir", "$T $B --output_dir $R/main.log --dry_run");
    add("output_dir: a file, real run", 2, "output_dir", "$T $B --output_dir $R/main.log");
    add("output_dir: under a file", 2, "output_dir", "$T $B --output_dir $R/main.log/sub --dry_run");
    add("output_dir: under a file, real run", 2, "output_dir", "$T $B --output_dir $R/main.log/sub");
    add("output_dir: logging_dir under a file", 2, "logging_dir", "$T $B --logging_dir $R/main.log/logs --dry_run");

    // ---- subcommands and writes
    add("bleu: no arguments", 2, "", "$T bleu");
    add("bleu: missing hypothesis file", 2, "", "$T bleu $H/nope $H/nope2");
    add("bleu: reference is a directory", 2, "", "printf 'a\\n' > $H/hyp1 && $T bleu $H/hyp1 $H/f");
    add("bleu: line counts differ", 2, "", "printf 'a\\nb\\n' > $H/hyp2 && printf 'a\\n' > $H/ref2 && $T bleu $H/hyp2 $H/ref2");
    add("bleu: stdout is /dev/full", 1, "write", "printf 'a b c d\\n' > $H/hyp3 && $T bleu $H/hyp3 $H/hyp3 > /dev/full");
    add("tokenize: stdout is /dev/full", 1, "write", "echo Hello | $T tokenize --model $M > /dev/full");
    add("--help: stdout is /dev/full", 1, "write", "$T --help > /dev/full");
    add("--dry_run: stdout is /dev/full", 1, "write", "$T $B --dry_run > /dev/full");
    add("dump-grads: no arguments", 2, "", "$T dump-grads");
    add("dump-grads: unknown flag", 2, "", "$T dump-grads --bogus 1");
    add("dump-grads: missing model", 2, "", "$T dump-grads --model $H/nope --batch $H/nope.json --out $H/x.safetensors");

    // ---- generated: every top-level flag with bad values of its type; the error must name the flag
    //      (a parse failure never drops the rest of the line: --dry_run after it is still honoured)
    static const char* const FLOATS[] = {"dropout_rate", "learning_rate", "weight_decay", "adam_beta1", "adam_beta2",
                                         "adam_epsilon", "max_grad_norm", "num_train_epochs", "warmup_ratio",
                                         "label_smoothing_factor", "length_penalty"};
    static const char* const FLOAT_BAD[] = {"nan", "inf", "-inf", "NaN", "1e999", "abc", "", "1.5x"};
    for (size_t i = 0; i < sizeof FLOATS / sizeof FLOATS[0]; i++)
        for (size_t j = 0; j < sizeof FLOAT_BAD / sizeof FLOAT_BAD[0]; j++) {
            char name[96];
            snprintf(name, sizeof name, "flag float: --%s '%s'", FLOATS[i], FLOAT_BAD[j]);
            add(name, 2, FLOATS[i], "$T $B --%s='%s' --dry_run", FLOATS[i], FLOAT_BAD[j]);
        }
    static const char* const INTS[] = {
        "preprocessing_num_workers", "max_source_length", "max_target_length", "val_max_target_length",
        "max_train_samples", "max_eval_samples", "max_predict_samples", "num_beams",
        "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps", "max_steps",
        "warmup_steps", "logging_steps", "save_steps", "save_total_limit", "seed", "data_seed",
        "dataloader_num_workers", "generation_max_length", "generation_num_beams"};
    static const char* const INT_BAD[] = {"abc", "nan", "inf", "1e400", "2.5", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof INTS / sizeof INTS[0]; i++)
        for (size_t j = 0; j < sizeof INT_BAD / sizeof INT_BAD[0]; j++) {
            char name[96];
            snprintf(name, sizeof name, "flag int: --%s '%s'", INTS[i], INT_BAD[j]);
            add(name, 2, INTS[i], "$T $B --%s '%s' --dry_run", INTS[i], INT_BAD[j]);
        }
    // logging / eval / save steps are HF floats (below 1: a ratio), whole above 1, checked under the steps strategy
    add("flag steps: --eval_steps 2.5", 2, "must be an integer if bigger than 1",
        "$T $B --eval_strategy steps --eval_steps 2.5 --dry_run");
    add("flag steps: --save_steps 0", 2, "non-zero --save_steps", "$T $B --save_steps 0 --dry_run");
    static const char* const BOOLS[] = {
        "overwrite_cache", "pad_to_max_length", "ignore_pad_token_for_loss", "do_eval", "do_predict",
        "logging_first_step", "save_on_each_node", "fp16", "bf16", "fp16_full_eval", "bf16_full_eval",
        "gradient_checkpointing", "dataloader_drop_last", "group_by_length", "predict_with_generate",
        "early_stopping", "eval_sort_by_length"};
    for (size_t i = 0; i < sizeof BOOLS / sizeof BOOLS[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "flag bool: --%s=maybe", BOOLS[i]);
        add(name, 2, BOOLS[i], "$T $B --%s=maybe --dry_run", BOOLS[i]);
    }
    static const char* const ENUMS[] = {"init", "evaluation_strategy", "lr_scheduler_type", "optim",
                                        "logging_strategy", "save_strategy"};
    for (size_t i = 0; i < sizeof ENUMS / sizeof ENUMS[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "flag enum: --%s bogus", ENUMS[i]);
        add(name, 2, ENUMS[i], "$T $B --%s bogus --dry_run", ENUMS[i]);
    }
}

// ---------------------------------------------------------------------------------------------
// running one case

// a listing of R: every entry's path, type, size, mode, and every file's checksum
static char* snapshot(const char* dir) {
    char out[700];
    snprintf(out, sizeof out, "%s/snap.txt", H);
    if (sh("cd '%s' && { find . -printf '%%p %%y %%s %%m\\n' | LC_ALL=C sort; find . -type f -exec cksum {} + | "
           "LC_ALL=C sort; } > '%s' 2>&1",
           dir, out))
        return NULL;
    return slurp(out, NULL);
}

static bool dir_empty(const char* dir) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
    return system(cmd) == 0;
}

static int count_error_lines(const char* s) {
    int n = 0;
    for (const char* p = s; p && *p;) {
        if (strncmp(p, "t5train: error:", 15) == 0) n++;
        const char* nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

// text that must never appear: crashes, check macros, source locations in messages
static const char* bad_text(const char* s) {
    static const char* const BAD[] = {"Segmentation", "Assertion", "AddressSanitizer", "runtime error:",
                                      " ERROR] rank", "terminate called", "Aborted", "core dumped"};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++)
        if (strstr(s, BAD[i])) return BAD[i];
    // "(src/foo.c:123)" or "foo.cc:12": a source line quoted in a message
    for (const char* p = s; (p = strpbrk(p, ".")); p++) {
        const char* q = p + 1;
        if ((q[0] == 'c' && q[1] == ':') || (q[0] == 'c' && q[1] == 'c' && q[2] == ':') ||
            (q[0] == 'c' && q[1] == 'u' && q[2] == ':') || (q[0] == 'h' && q[1] == ':')) {
            const char* d = strchr(q, ':') + 1;
            if (*d >= '0' && *d <= '9') return "a source location (file.c:line)";
        }
    }
    return NULL;
}

static bool run_case(int idx, const HCase* c, const char* before) {
    char cmd[2048], eo[700], oo[700];
    if (c->skip[0]) {
        printf("not ok %d # SKIP %s: %s\n", idx, c->name, c->skip);  // test/run_tests.sh counts it as skipped
        return true;
    }
    snprintf(eo, sizeof eo, "%s/case.err", H);
    snprintf(oo, sizeof oo, "%s/case.out", H);
    setenv("CMD", c->cmd, 1);
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 120 sh -c 'eval \"$CMD\"' </dev/null >'%s' 2>'%s'", W, oo, eo);
    int st = system(cmd);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char* err = slurp(eo, NULL);
    char why[600] = "";
    int nerr = count_error_lines(err ? err : "");
    const char* bad = bad_text(err ? err : "");
    char* after = snapshot(getenv("R"));
    if (rc != c->code) snprintf(why, sizeof why, "exit code %d, expected %d", rc, c->code);
    else if (c->code != 0 && nerr != 1) snprintf(why, sizeof why, "%d 't5train: error:' lines, expected 1", nerr);
    else if (c->code == 0 && nerr != 0) snprintf(why, sizeof why, "an error line in a successful run");
    else if (bad) snprintf(why, sizeof why, "stderr contains %s", bad);
    else if (c->expect[0] && !strstr(err ? err : "", c->expect))
        snprintf(why, sizeof why, "the error does not mention '%s'", c->expect);
    else if (!after || strcmp(before, after) != 0) snprintf(why, sizeof why, "the run directory R changed");
    else if (!dir_empty(W)) snprintf(why, sizeof why, "files were created in the working directory");
    bool ok = why[0] == 0;
    if (ok) {
        printf("ok %d - %s\n", idx, c->name);
    } else {
        printf("not ok %d - %s\n", idx, c->name);
        printf("# %s\n# command: %.300s\n", why, c->cmd);
        char* e = err ? err : "";
        // the stderr, at most 6 lines
        int lines = 0;
        for (char* p = e; *p && lines < 6; lines++) {
            char* nl = strchr(p, '\n');
            printf("#   | %.*s\n", nl ? (int)(nl - p) : (int)strlen(p), p);
            if (!nl) break;
            p = nl + 1;
        }
        // leave the working directory and R as they were for the next case
        sh("rm -rf '%s' && mkdir -p '%s'", W, W);
    }
    free(err);
    free(after);
    return ok;
}

static int restore_rc;

int main(void) {
    const char* data = getenv("T5TRAIN_DATA");
    static char databuf[1024], repo[1024], bin[1024];
    if (!data || !data[0]) data = "../shared/data";
    if (!realpath(data, databuf) || !getcwd(repo, sizeof repo)) {
        printf("1..1\nnot ok 1 # SKIP shared data not found (set T5TRAIN_DATA)\n");
        return 0;
    }
    const char* b = getenv("T5TRAIN_BIN");
    if (!b || !b[0]) b = "./t5train";
    if (!realpath(b, bin)) die_setup("t5train binary not found (T5TRAIN_BIN)");
    snprintf(H, sizeof H, "/tmp/t5hostile.XXXXXX");
    if (!mkdtemp(H)) die_setup("mkdtemp");
    snprintf(W, sizeof W, "%s/work", H);
    make_fixtures(databuf, repo);
    make_cases();

    char v[4096];
    setenv("T", bin, 1);
    snprintf(v, sizeof v, "%s/m", H), setenv("M", v, 1);
    snprintf(v, sizeof v, "%s/d", H), setenv("D", v, 1);
    snprintf(v, sizeof v, "%s/R", H), setenv("R", v, 1);
    snprintf(v, sizeof v, "%s/f", H), setenv("F", v, 1);
    setenv("H", H, 1);
    setenv("REPO", repo, 1);
    snprintf(v, sizeof v,
             "--model_name_or_path %s/m --train_file %s/d/train.jsonl --validation_file %s/d/val.jsonl "
             "--source_lang en --target_lang ro --output_dir %s/R --overwrite_output_dir --do_train --max_steps 2",
             H, H, H, H);
    setenv("B", v, 1);
    // never the network: a model or dataset missing here is an error, not a download (src/cli/fetch_inputs.h)
    setenv("HF_HUB_OFFLINE", "1", 1);
    setenv("HF_DATASETS_OFFLINE", "1", 1);
    unsetenv("WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");

    char* before = snapshot(getenv("R"));
    if (!before) die_setup("snapshot of R");
    printf("1..%d\n", ncases);
    int failed = 0;
    for (int i = 0; i < ncases; i++) {
        if (!run_case(i + 1, &cases[i], before)) {
            failed++;
            // R is restored from the fixtures so one failure does not fail every later case
            char* now = snapshot(getenv("R"));
            if (!now || strcmp(now, before) != 0) {
                restore_rc |= sh("rm -rf '%s/R' && mkdir -p '%s/R' && cp -r '%s/f/ck/checkpoint-4' '%s/R/' && "
                                 "cp '%s/m/model.safetensors' '%s/m/config.json' '%s/R/' && "
                                 "echo '{\"train_loss\": 1.5}' > '%s/R/all_results.json' && "
                                 "echo '{}' > '%s/R/t5train_config.json' && echo 's:4 trl:1.5' > '%s/R/main.log'",
                                 H, H, H, H, H, H, H, H, H, H);
                free(before);
                before = snapshot(getenv("R"));
            }
            free(now);
        }
    }
    printf("# %d cases, %d failed\n", ncases, failed);
    free(before);
    sh("chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", H, H);
    return failed ? 1 : 0;
}
