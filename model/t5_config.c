/*
 * t5_config.c: T5 presets, HF config.json reading/writing, parameter count (see t5_config.h).
 *
 * Values are those of the config.json files published on the hub (t5-*, google/t5-v1_1-*, google/flan-t5-*);
 * the defaults for keys a config.json leaves out are transformers' T5Config defaults (REFERENCE.md 5.1).
 */
#include "t5_config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/base/common.h"
#include "../src/base/safetensors.h"

// ---------------------------------------------------------------------------------------------
// presets

typedef struct {
    const char* name;  // canonical hub id
    int D, Dk, F, L, Ld, H;
    T5FeedForward ff;
    bool tied;
} T5Preset;

static const T5Preset presets[] = {
    // v1.0: ReLU, tied embeddings (lm_head input scaled by D^-0.5)
    {"t5-small", 512, 64, 2048, 6, 6, 8, T5_FF_RELU, true},
    {"t5-base", 768, 64, 3072, 12, 12, 12, T5_FF_RELU, true},
    {"t5-large", 1024, 64, 4096, 24, 24, 16, T5_FF_RELU, true},
    {"t5-3b", 1024, 128, 16384, 24, 24, 32, T5_FF_RELU, true},     // H*Dk = 4096 != D
    {"t5-11b", 1024, 128, 65536, 24, 24, 128, T5_FF_RELU, true},  // H*Dk = 16384 != D
    // v1.1 and FLAN-T5: gated-GELU (gelu_new), untied lm_head
    {"google/t5-v1_1-small", 512, 64, 1024, 8, 8, 6, T5_FF_GATED_GELU, false},
    {"google/t5-v1_1-base", 768, 64, 2048, 12, 12, 12, T5_FF_GATED_GELU, false},
    {"google/t5-v1_1-large", 1024, 64, 2816, 24, 24, 16, T5_FF_GATED_GELU, false},
    {"google/t5-v1_1-xl", 2048, 64, 5120, 24, 24, 32, T5_FF_GATED_GELU, false},
    {"google/t5-v1_1-xxl", 4096, 64, 10240, 24, 24, 64, T5_FF_GATED_GELU, false},
    {"google/flan-t5-small", 512, 64, 1024, 8, 8, 6, T5_FF_GATED_GELU, false},
    {"google/flan-t5-base", 768, 64, 2048, 12, 12, 12, T5_FF_GATED_GELU, false},
    {"google/flan-t5-large", 1024, 64, 2816, 24, 24, 16, T5_FF_GATED_GELU, false},
    {"google/flan-t5-xl", 2048, 64, 5120, 24, 24, 32, T5_FF_GATED_GELU, false},
    {"google/flan-t5-xxl", 4096, 64, 10240, 24, 24, 64, T5_FF_GATED_GELU, false},
};

// transformers' T5Config() defaults
static void config_defaults(T5Config* cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->vocab_size = 32128;
    cfg->d_model = 512;
    cfg->d_kv = 64;
    cfg->d_ff = 2048;
    cfg->num_layers = 6;
    cfg->num_decoder_layers = 6;
    cfg->num_heads = 8;
    cfg->relative_attention_num_buckets = 32;
    cfg->relative_attention_max_distance = 128;
    cfg->dropout_rate = 0.1f;
    cfg->layer_norm_epsilon = 1e-6f;
    cfg->feed_forward = T5_FF_RELU;
    cfg->tie_word_embeddings = true;
    cfg->scale_decoder_outputs = true;
    cfg->tie_from_weights = false;
    cfg->pad_token_id = 0;
    cfg->eos_token_id = 1;
    cfg->decoder_start_token_id = 0;  // T5 convention; every hub config.json sets it to 0
}

// strips an organisation prefix "google/" or "google-t5/"
static const char* strip_org(const char* name) {
    if (strncmp(name, "google/", 7) == 0) return name + 7;
    if (strncmp(name, "google-t5/", 10) == 0) return name + 10;
    return name;
}

bool t5_config_preset(const char* name, T5Config* cfg) {
    if (!name) return false;
    const char* want = strip_org(name);
    for (size_t i = 0; i < T5_ARRAY_LEN(presets); i++) {
        const T5Preset* p = &presets[i];
        if (strcmp(strip_org(p->name), want) != 0) continue;
        config_defaults(cfg);
        snprintf(cfg->name, sizeof cfg->name, "%s", p->name);
        cfg->d_model = p->D;
        cfg->d_kv = p->Dk;
        cfg->d_ff = p->F;
        cfg->num_layers = p->L;
        cfg->num_decoder_layers = p->Ld;
        cfg->num_heads = p->H;
        cfg->feed_forward = p->ff;
        cfg->tie_word_embeddings = p->tied;
        cfg->scale_decoder_outputs = p->tied;  // v1.0: tied and scaled; v1.1 / flan-t5: untied, unscaled
        return true;
    }
    return false;
}

const char* t5_config_preset_names(void) {
    static char buf[1024];
    if (!buf[0]) {
        size_t n = 0;
        for (size_t i = 0; i < T5_ARRAY_LEN(presets); i++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? ", " : "", presets[i].name);
    }
    return buf;
}

// ---------------------------------------------------------------------------------------------
// config.json

// reads an integer key if present; min is the smallest accepted value
static int get_int(json_t* root, const char* key, int* out, int min, const char* path, char* err, size_t errlen) {
    json_t* v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return t5_set_err(err, errlen, "%s: key \"%s\" must be an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < min || x > 1000000000)
        return t5_set_err(err, errlen, "%s: key \"%s\" = %lld is out of range (must be >= %d)", path, key,
                       (long long)x, min);
    *out = (int)x;
    return 0;
}

static int get_float(json_t* root, const char* key, float* out, double min, double max, const char* path, char* err,
                     size_t errlen) {
    json_t* v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return t5_set_err(err, errlen, "%s: key \"%s\" must be a number", path, key);
    double x = json_number_value(v);
    if (!(x >= min && x <= max))
        return t5_set_err(err, errlen, "%s: key \"%s\" = %g is out of range [%g, %g]", path, key, x, min, max);
    *out = (float)x;
    return 0;
}

int t5_config_load_json(const char* path, T5Config* cfg, char* err, size_t errlen) {
    json_error_t jerr;
    json_t* root = json_load_file(path, 0, &jerr);
    if (!root) {
        if (!t5_path_exists(path)) return t5_set_err(err, errlen, "cannot read %s: %s", path, strerror(ENOENT));
        return t5_set_err(err, errlen, "%s:%d:%d: invalid JSON: %s", path, jerr.line, jerr.column, jerr.text);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return t5_set_err(err, errlen, "%s: expected a JSON object at the top level", path);
    }
    T5Config c;
    config_defaults(&c);
    int rc = -1;
    json_t* mt = json_object_get(root, "model_type");
    if (mt && !(json_is_string(mt) && strcmp(json_string_value(mt), "t5") == 0)) {
        t5_set_err(err, errlen, "%s: key \"model_type\" is %s%s%s, only \"t5\" models are supported", path,
                json_is_string(mt) ? "\"" : "", json_is_string(mt) ? json_string_value(mt) : "not a string",
                json_is_string(mt) ? "\"" : "");
        goto done;
    }
    if (get_int(root, "vocab_size", &c.vocab_size, 1, path, err, errlen) ||
        get_int(root, "d_model", &c.d_model, 1, path, err, errlen) ||
        get_int(root, "d_kv", &c.d_kv, 1, path, err, errlen) || get_int(root, "d_ff", &c.d_ff, 1, path, err, errlen) ||
        get_int(root, "num_layers", &c.num_layers, 1, path, err, errlen) ||
        get_int(root, "num_heads", &c.num_heads, 1, path, err, errlen) ||
        get_int(root, "relative_attention_num_buckets", &c.relative_attention_num_buckets, 2, path, err, errlen) ||
        get_int(root, "relative_attention_max_distance", &c.relative_attention_max_distance, 1, path, err,
                errlen) ||
        get_int(root, "pad_token_id", &c.pad_token_id, 0, path, err, errlen) ||
        get_int(root, "eos_token_id", &c.eos_token_id, 0, path, err, errlen) ||
        get_int(root, "decoder_start_token_id", &c.decoder_start_token_id, 0, path, err, errlen) ||
        get_float(root, "dropout_rate", &c.dropout_rate, 0.0, 1.0, path, err, errlen) ||
        get_float(root, "layer_norm_epsilon", &c.layer_norm_epsilon, 0.0, 1.0, path, err, errlen))
        goto done;
    // num_decoder_layers: null or absent means "same as num_layers" (HF)
    c.num_decoder_layers = c.num_layers;
    if (json_object_get(root, "num_decoder_layers") && !json_is_null(json_object_get(root, "num_decoder_layers"))) {
        if (get_int(root, "num_decoder_layers", &c.num_decoder_layers, 1, path, err, errlen)) goto done;
    }
    json_t* tie = json_object_get(root, "tie_word_embeddings");
    if (tie && !json_is_null(tie)) {
        if (!json_is_boolean(tie)) {
            t5_set_err(err, errlen, "%s: key \"tie_word_embeddings\" must be true or false", path);
            goto done;
        }
        c.tie_word_embeddings = json_is_true(tie);
    }
    // Older files: tie_word_embeddings says both (tied = shared.weight projects and the input is scaled).
    // transformers >= 5 writes "scale_decoder_outputs" (= the tie_word_embeddings the T5Config was given) and
    // always "tie_word_embeddings": true; the projection is then lm_head.weight when the checkpoint holds it,
    // else shared.weight (t5_config_resolve_head, once the weights are known). T5Config(tie_word_embeddings=
    // False) saved by 5.x is tied and unscaled.
    c.scale_decoder_outputs = c.tie_word_embeddings;
    json_t* scale = json_object_get(root, "scale_decoder_outputs");
    if (scale && !json_is_null(scale)) {
        if (!json_is_boolean(scale)) {
            t5_set_err(err, errlen, "%s: key \"scale_decoder_outputs\" must be true or false", path);
            goto done;
        }
        c.scale_decoder_outputs = json_is_true(scale);
        c.tie_from_weights = true;
    }
    // feed_forward_proj: "<act>" or "gated-<act>" as HF parses it; "gated-gelu" means gated gelu_new.
    json_t* ff = json_object_get(root, "feed_forward_proj");
    if (ff && !json_is_null(ff)) {
        if (!json_is_string(ff)) {
            t5_set_err(err, errlen, "%s: key \"feed_forward_proj\" must be a string", path);
            goto done;
        }
        const char* s = json_string_value(ff);
        if (strcmp(s, "relu") == 0) {
            c.feed_forward = T5_FF_RELU;
        } else if (strcmp(s, "gated-gelu") == 0 || strcmp(s, "gated-gelu_new") == 0) {
            c.feed_forward = T5_FF_GATED_GELU;
        } else {
            const char* dash = strchr(s, '-');
            bool valid = !dash || (strncmp(s, "gated-", 6) == 0 && !strchr(s + 6, '-'));
            t5_set_err(err, errlen,
                    "%s: key \"feed_forward_proj\" = \"%s\" is %s; t5train supports \"relu\" (T5 v1.0) and "
                    "\"gated-gelu\" (T5 v1.1 / FLAN-T5)",
                    path, s, valid ? "not supported" : "not of the form \"<act>\" or \"gated-<act>\"");
            goto done;
        }
    }
    if (c.relative_attention_num_buckets % 2 != 0 || c.relative_attention_num_buckets < 4) {
        t5_set_err(err, errlen, "%s: key \"relative_attention_num_buckets\" = %d must be even and >= 4", path,
                c.relative_attention_num_buckets);
        goto done;
    }
    if (c.relative_attention_max_distance <= c.relative_attention_num_buckets / 4) {
        t5_set_err(err, errlen, "%s: key \"relative_attention_max_distance\" = %d must exceed num_buckets/4 = %d", path,
                c.relative_attention_max_distance, c.relative_attention_num_buckets / 4);
        goto done;
    }
    snprintf(c.name, sizeof c.name, "%s", path);
    *cfg = c;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

// shortest decimal that round-trips the float, as a double (so 0.1f is written "0.1", not 0.10000000149)
static double float_to_short_double(float f) {
    char buf[64];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

int t5_config_save_json(const T5Config* cfg, const char* path, char* err, size_t errlen) {
    bool gated = cfg->feed_forward == T5_FF_GATED_GELU;
    json_t* o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", "T5ForConditionalGeneration"));
    json_object_set_new(o, "model_type", json_string("t5"));
    json_object_set_new(o, "classifier_dropout", json_real(0.0));  // T5Config's defaults, written by transformers 5.x
    json_object_set_new(o, "d_ff", json_integer(cfg->d_ff));
    json_object_set_new(o, "d_kv", json_integer(cfg->d_kv));
    json_object_set_new(o, "d_model", json_integer(cfg->d_model));
    json_object_set_new(o, "decoder_start_token_id", json_integer(cfg->decoder_start_token_id));
    json_object_set_new(o, "dense_act_fn", json_string(gated ? "gelu_new" : "relu"));
    json_object_set_new(o, "dropout_rate", json_real(float_to_short_double(cfg->dropout_rate)));
    json_object_set_new(o, "eos_token_id", json_integer(cfg->eos_token_id));
    json_object_set_new(o, "feed_forward_proj", json_string(gated ? "gated-gelu" : "relu"));
    json_object_set_new(o, "initializer_factor", json_real(1.0));
    json_object_set_new(o, "dtype", json_string("float32"));  // t5train saves fp32 weights
    json_object_set_new(o, "is_decoder", json_false());
    json_object_set_new(o, "is_encoder_decoder", json_true());
    json_object_set_new(o, "is_gated_act", json_boolean(gated));
    json_object_set_new(o, "layer_norm_epsilon", json_real(float_to_short_double(cfg->layer_norm_epsilon)));
    json_object_set_new(o, "num_decoder_layers", json_integer(cfg->num_decoder_layers));
    json_object_set_new(o, "num_heads", json_integer(cfg->num_heads));
    json_object_set_new(o, "num_layers", json_integer(cfg->num_layers));
    json_object_set_new(o, "pad_token_id", json_integer(cfg->pad_token_id));
    json_object_set_new(o, "relative_attention_max_distance", json_integer(cfg->relative_attention_max_distance));
    json_object_set_new(o, "relative_attention_num_buckets", json_integer(cfg->relative_attention_num_buckets));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(cfg->tie_word_embeddings));
    json_object_set_new(o, "scale_decoder_outputs", json_boolean(cfg->scale_decoder_outputs));  // transformers 5.x
    json_object_set_new(o, "use_cache", json_true());
    json_object_set_new(o, "vocab_size", json_integer(cfg->vocab_size));

    char* text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) return t5_set_err(err, errlen, "cannot serialise config for %s", path);
    // write to a temporary name, then rename (DESIGN.md invariant 6)
    size_t plen = strlen(path) + 32;
    char* tmp = malloc_check(plen);
    snprintf(tmp, plen, "%s.tmp.%d", path, (int)getpid());
    int rc = -1;
    FILE* f = fopen(tmp, "w");
    if (!f) {
        t5_set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    } else {
        bool ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
        ok = (fclose(f) == 0) && ok;
        if (!ok) {
            t5_set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
            remove(tmp);
        } else if (rename(tmp, path) != 0) {
            t5_set_err(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
            remove(tmp);
        } else {
            rc = 0;
        }
    }
    free(tmp);
    free(text);
    return rc;
}

size_t t5_config_num_params(const T5Config* c) {
    size_t D = (size_t)c->d_model, inner = (size_t)c->num_heads * (size_t)c->d_kv, F = (size_t)c->d_ff;
    size_t V = (size_t)c->vocab_size, NB = (size_t)c->relative_attention_num_buckets, H = (size_t)c->num_heads;
    size_t attn = 4 * D * inner;  // q, k, v: (inner, D); o: (D, inner)
    size_t ff = (c->feed_forward == T5_FF_GATED_GELU ? 3 : 2) * D * F;
    size_t enc_block = attn + ff + 2 * D;     // 2 RMSNorm weights
    size_t dec_block = 2 * attn + ff + 3 * D;  // self + cross attention, 3 RMSNorm weights
    size_t n = V * D;                          // shared embedding
    n += (size_t)c->num_layers * enc_block + NB * H + D;          // + relative bias (block 0) + final norm
    n += (size_t)c->num_decoder_layers * dec_block + NB * H + D;  // same for the decoder
    if (!c->tie_word_embeddings) n += V * D;                      // lm_head
    return n;
}

int t5_config_resolve_head(T5Config* cfg, const char* weights_path, char* err, size_t errlen) {
    if (!cfg->tie_from_weights || !weights_path || !weights_path[0]) return 0;
    SafeTensors* st = NULL;
    if (safetensors_open(&st, weights_path, err, errlen)) return -1;
    cfg->tie_word_embeddings = !safetensors_has(st, "lm_head.weight");
    safetensors_close(st);
    return 0;
}
