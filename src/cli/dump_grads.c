/*
 * dump_grads.c: `t5train dump-grads` — one forward + backward of a checkpoint on a JSON batch, written
 * as safetensors for comparison with transformers:
 *   t5train dump-grads --model DIR --batch FILE.json --out FILE.safetensors
 *                      [--dtype fp32|fp16|bf16] [--grad-dtype same|fp32] [--dropout P] [--seed N]
 *                      [--gradient-checkpointing]
 * --grad-dtype: the engine's gradient buffers, in the run dtype (default, as training runs) or fp32.
 * Output tensors (all F32): "loss" (), "logits" (B, Tt, V), and every parameter's gradient under its HF
 * name (e.g. "shared.weight", "encoder.block.0.layer.0.SelfAttention.q.weight"). Dropout is off unless
 * --dropout P > 0 is given (then the model is in train mode with rate P and seed N).
 * Also here: the JSON batch reader declared in t5.h.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/check.h"
#include "commands.h"
#include "../base/common.h"
#include "../base/safetensors.h"
#include "../../model/zero.h"
#include "../../model/model_lookup.h"
#include "../../model/params.h"
#include "../../model/t5.h"
#include "../../model/t5_config.h"
#include "../../model/t5_weights.h"

// ---------------------------------------------------------------------------------------------
// batch JSON

static const char* batch_keys[] = {"input_ids", "attention_mask", "labels", "decoder_input_ids",
                                   "decoder_attention_mask"};

// parses a (rows, cols) integer matrix; returns malloc'd int array or NULL with err
static int* parse_matrix(json_t* v, const char* path, const char* key, int* rows, int* cols, char* err, size_t errlen) {
    if (!json_is_array(v) || json_array_size(v) == 0) {
        snprintf(err, errlen, "%s: key \"%s\" must be a non-empty array of rows (arrays of integers)", path, key);
        return NULL;
    }
    int R = (int)json_array_size(v), C = -1;
    for (int r = 0; r < R; r++) {
        json_t* row = json_array_get(v, (size_t)r);
        if (!json_is_array(row) || json_array_size(row) == 0) {
            snprintf(err, errlen, "%s: \"%s\" row %d must be a non-empty array of integers", path, key, r);
            return NULL;
        }
        if (C < 0) C = (int)json_array_size(row);
        if ((int)json_array_size(row) != C) {
            snprintf(err, errlen, "%s: \"%s\" row %d has %zu values, row 0 has %d (rows must be padded to one length)",
                     path, key, r, json_array_size(row), C);
            return NULL;
        }
    }
    int* out = malloc_check((size_t)R * C * sizeof(int));
    for (int r = 0; r < R; r++) {
        json_t* row = json_array_get(v, (size_t)r);
        for (int c = 0; c < C; c++) {
            json_t* x = json_array_get(row, (size_t)c);
            if (!json_is_integer(x) || json_integer_value(x) < -2147483647 || json_integer_value(x) > 2147483647) {
                snprintf(err, errlen, "%s: \"%s\"[%d][%d] is not a 32-bit integer", path, key, r, c);
                free(out);
                return NULL;
            }
            out[(size_t)r * C + c] = (int)json_integer_value(x);
        }
    }
    *rows = R;
    *cols = C;
    return out;
}

void t5_batch_free(T5Batch* b) {
    free((void*)b->input_ids);
    free((void*)b->attention_mask);
    free((void*)b->labels);
    free((void*)b->decoder_input_ids);
    free((void*)b->decoder_attention_mask);
    memset(b, 0, sizeof *b);
}

int t5_batch_load_json(const char* path, T5Batch* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t* root = json_load_file(path, 0, &jerr);
    if (!root) {
        if (!t5_path_exists(path)) snprintf(err, errlen, "cannot read batch file %s: no such file", path);
        else snprintf(err, errlen, "%s:%d:%d: invalid JSON: %s", path, jerr.line, jerr.column, jerr.text);
        return -1;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: expected a JSON object with input_ids, attention_mask, labels", path);
        json_decref(root);
        return -1;
    }
    const char* key;
    json_t* val;
    json_object_foreach(root, key, val) {
        bool known = false;
        for (size_t i = 0; i < T5_ARRAY_LEN(batch_keys); i++) known |= strcmp(key, batch_keys[i]) == 0;
        if (!known) {
            snprintf(err, errlen, "%s: unknown key \"%s\" (expected input_ids, attention_mask, labels, "
                                  "decoder_input_ids, decoder_attention_mask)", path, key);
            json_decref(root);
            return -1;
        }
    }
    int* arr[5] = {0};
    int rows[5] = {0}, cols[5] = {0};
    int rc = 0;
    for (int i = 0; i < 5 && rc == 0; i++) {
        json_t* v = json_object_get(root, batch_keys[i]);
        if (!v) {
            if (i == 0) {
                snprintf(err, errlen, "%s: missing key \"input_ids\"", path);
                rc = -1;
            }
            continue;
        }
        arr[i] = parse_matrix(v, path, batch_keys[i], &rows[i], &cols[i], err, errlen);
        if (!arr[i]) rc = -1;
    }
    // shapes: every field has input_ids' batch size; attention_mask input_ids' length; the target fields
    // (labels, decoder_input_ids, decoder_attention_mask) one common length
    int tref = arr[2] ? 2 : (arr[3] ? 3 : 4);
    for (int i = 1; i < 5 && rc == 0; i++) {
        if (!arr[i]) continue;
        int ref = i == 1 ? 0 : tref;
        if (rows[i] != rows[0]) {
            snprintf(err, errlen, "%s: \"%s\" has %d rows but \"input_ids\" has %d", path, batch_keys[i], rows[i],
                     rows[0]);
            rc = -1;
        } else if (cols[i] != cols[ref]) {
            snprintf(err, errlen, "%s: \"%s\" rows have %d values but \"%s\" rows have %d", path, batch_keys[i],
                     cols[i], batch_keys[ref], cols[ref]);
            rc = -1;
        }
    }
    if (rc == 0 && !arr[2] && !arr[3]) {
        snprintf(err, errlen, "%s: needs \"labels\" or \"decoder_input_ids\"", path);
        rc = -1;
    }
    json_decref(root);
    if (rc) {
        for (int i = 0; i < 5; i++) free(arr[i]);
        return -1;
    }
    out->B = rows[0];
    out->Ts = cols[0];
    out->Tt = arr[2] ? cols[2] : cols[3];
    out->input_ids = arr[0];
    out->attention_mask = arr[1];
    out->labels = arr[2];
    out->decoder_input_ids = arr[3];
    out->decoder_attention_mask = arr[4];
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the command

#define DUMP_GRADS_USAGE                                                                                   \
    "usage: t5train dump-grads --model DIR --batch FILE.json --out FILE.safetensors "                      \
    "[--dtype fp32|fp16|bf16] [--grad-dtype same|fp32] [--dropout P] [--seed N] [--gradient-checkpointing]"

static void usage_die(const char* msg) { t5_die_hint(T5_EXIT_USAGE, DUMP_GRADS_USAGE, "dump-grads: %s", msg); }

int dump_grads_main(int argc, char** argv) {
    const char *model = NULL, *batch_path = NULL, *out_path = NULL, *dtype_s = "fp32", *gdtype_s = "same";
    float dropout = 0.0f;
    unsigned long long seed = 1234;
    bool ckpt = false;
    char msg[512];
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        bool has_val = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("%s\n\nOne forward+backward of a T5 model on a JSON batch; writes the loss, the logits and every "
                   "parameter gradient to FILE.safetensors (docs/model.md).\n", DUMP_GRADS_USAGE);
            return T5_EXIT_OK;
        }
        if (strcmp(a, "--gradient-checkpointing") == 0 || strcmp(a, "--gradient_checkpointing") == 0) {
            ckpt = true;
            continue;
        }
        if (strcmp(a, "--model") && strcmp(a, "--batch") && strcmp(a, "--out") && strcmp(a, "--dtype") &&
            strcmp(a, "--grad-dtype") && strcmp(a, "--dropout") && strcmp(a, "--seed")) {
            snprintf(msg, sizeof msg, "unknown argument '%s'", a);
            usage_die(msg);
        }
        if (!has_val) {
            snprintf(msg, sizeof msg, "%s needs a value", a);
            usage_die(msg);
        }
        const char* v = argv[++i];
        char* end = NULL;
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--batch")) batch_path = v;
        else if (!strcmp(a, "--out")) out_path = v;
        else if (!strcmp(a, "--dtype")) dtype_s = v;
        else if (!strcmp(a, "--grad-dtype")) gdtype_s = v;
        else if (!strcmp(a, "--dropout")) {
            dropout = strtof(v, &end);
            if (!end || *end || dropout < 0 || dropout >= 1) {
                snprintf(msg, sizeof msg, "--dropout '%s' must be a number in [0, 1)", v);
                usage_die(msg);
            }
        } else {
            seed = strtoull(v, &end, 10);
            if (!end || *end) {
                snprintf(msg, sizeof msg, "--seed '%s' must be a non-negative integer", v);
                usage_die(msg);
            }
        }
    }
    if (!model) usage_die("--model is required");
    if (!batch_path) usage_die("--batch is required");
    if (!out_path) usage_die("--out is required");
    DType dt;
    if (!strcmp(dtype_s, "fp32")) dt = DT_F32;
    else if (!strcmp(dtype_s, "fp16")) dt = DT_F16;
    else if (!strcmp(dtype_s, "bf16")) dt = DT_BF16;
    else {
        snprintf(msg, sizeof msg, "--dtype '%s' must be fp32, fp16 or bf16", dtype_s);
        usage_die(msg);
    }
    DType gdt = dt;
    if (!strcmp(gdtype_s, "fp32")) gdt = DT_F32;
    else if (strcmp(gdtype_s, "same")) {
        snprintf(msg, sizeof msg, "--grad-dtype '%s' must be same or fp32", gdtype_s);
        usage_die(msg);
    }

    static char err[MODEL_LOOKUP_ERRLEN];
    ModelLocation loc;
    if (model_lookup(model, MODEL_NEED_WEIGHTS, &loc, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    T5Config cfg;
    if (t5_config_load_json(loc.config_path, &cfg, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    if (t5_config_resolve_head(&cfg, loc.weights_path, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    T5Batch batch;
    if (t5_batch_load_json(batch_path, &batch, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);
    if (!batch.labels) t5_die(T5_EXIT_USAGE, "%s: dump-grads needs \"labels\" (the loss is what is differentiated)",
                              batch_path);
    ParamTable t;
    if (params_build(&t, &cfg, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s: %s", loc.config_path, err);

    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0)
        t5_die(T5_EXIT_FAILURE, "dump-grads needs a CUDA GPU and none is usable");
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    size_t* numel = malloc_check((size_t)t.num_units * sizeof(size_t));
    const char** names = malloc_check((size_t)t.num_units * sizeof(char*));
    for (int u = 0; u < t.num_units; u++) {
        numel[u] = t.units[u].numel;
        names[u] = t.units[u].name;
    }
    ZeroEngine* Z = zero_create_ex(0, dt, gdt, t.num_units, numel, names, err, sizeof err);
    if (!Z) t5_die(T5_EXIT_FAILURE, "%s", err);
    if (t5_weights_load(Z, &t, loc.weights_path, s, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s", err);

    T5ModelOptions opt = {.max_B = batch.B, .max_Ts = batch.Ts, .max_Tt = batch.Tt, .dtype = dt,
                          .gradient_checkpointing = ckpt, .keep_logits = true, .dropout_rate = dropout};
    T5Model* M = t5_model_create(&t, Z, &opt, err, sizeof err);
    if (!M) t5_die(T5_EXIT_FAILURE, "%s", err);
    t5_model_set_train(M, dropout > 0);
    if (t5_model_set_batch(M, &batch, s, err, sizeof err)) t5_die(T5_EXIT_USAGE, "%s: %s", batch_path, err);
    zero_begin_grads(Z, s);
    t5_model_forward(M, true, 1.0f, seed, s);
    t5_model_backward(M, s);
    float loss = t5_model_loss(M, s);
    CUDA_CHECK(cudaStreamSynchronize(s));

    // host copies: logits -> fp32, the whole flat gradient
    size_t nlog = (size_t)batch.B * batch.Tt * cfg.vocab_size;
    void* lx = malloc_check(nlog * dtype_size(dt));
    float* logits = malloc_check(nlog * sizeof(float));
    CUDA_CHECK(cudaMemcpy(lx, t5_model_logits(M), nlog * dtype_size(dt), cudaMemcpyDeviceToHost));
    safetensors_convert(logits, DT_F32, lx, dt, nlog);
    free(lx);
    float* grads = malloc_check(zero_flat_numel(Z) * sizeof(float));
    zero_grads_to_host_f32(Z, grads, s);

    SafeTensorsWriter* w = safetensors_writer_new();
    int64_t lshape[3] = {batch.B, batch.Tt, cfg.vocab_size};
    if (safetensors_writer_add(w, "loss", DT_F32, 0, lshape, &loss, err, sizeof err) ||
        safetensors_writer_add(w, "logits", DT_F32, 3, lshape, logits, err, sizeof err))
        t5_die(T5_EXIT_FAILURE, "%s", err);
    for (int i = 0; i < t.num_params; i++) {
        const ParamDesc* p = &t.params[i];
        const float* g = grads + zero_unit_offset(Z, p->unit) + p->offset;
        if (safetensors_writer_add(w, p->name, DT_F32, p->ndim, p->shape, g, err, sizeof err))
            t5_die(T5_EXIT_FAILURE, "%s", err);
    }
    safetensors_writer_set_metadata(w, "dtype", dtype_name(dt));
    safetensors_writer_set_metadata(w, "grad_dtype", dtype_name(gdt));
    safetensors_writer_set_metadata(w, "model", loc.dir);
    if (safetensors_writer_write_file(w, out_path, err, sizeof err)) t5_die(T5_EXIT_FAILURE, "%s", err);
    printf("dump-grads: %s %s loss %.9g, %d gradients -> %s\n", cfg.name, dtype_name(dt), loss, t.num_params,
           out_path);
    safetensors_writer_free(w);
    free(grads);
    free(logits);
    t5_model_destroy(M);
    zero_destroy(Z);
    params_free(&t);
    t5_batch_free(&batch);
    free(numel);
    free(names);
    CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
}
