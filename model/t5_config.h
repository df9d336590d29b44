/*
 * t5_config.h: the T5 architecture (HF T5Config fields we use), built-in presets, and
 * reading a HF config.json.
 *
 * Presets: t5-small, t5-base, t5-large, t5-3b, t5-11b (v1.0: ReLU FF, tied embeddings, lm_head input
 * scaled by D^-0.5) and google/t5-v1_1-{small,base,large,xl,xxl}, google/flan-t5-{small,base,large,xl,xxl}
 * (gated-GELU with gelu_new, untied lm_head, no scaling). Names are accepted with or without the
 * "google/" or "google-t5/" organisation prefix. Note H * Dk != D for t5-3b and t5-11b.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { T5_FF_RELU = 0, T5_FF_GATED_GELU = 1 } T5FeedForward;

typedef struct {
    char name[128];          // preset name or the directory it was read from
    int vocab_size;          // V: 32128 for every public checkpoint
    int d_model;             // D
    int d_kv;                // Dk
    int d_ff;                // F
    int num_layers;          // L (encoder)
    int num_decoder_layers;  // decoder layers (defaults to num_layers)
    int num_heads;           // H
    int relative_attention_num_buckets;   // 32
    int relative_attention_max_distance;  // 128
    float dropout_rate;                   // 0.1
    float layer_norm_epsilon;             // 1e-6
    T5FeedForward feed_forward;           // "relu" or "gated-gelu" (gelu_new)
    // The output projection and its input scale are two notions (transformers >= 5 keeps them apart):
    bool tie_word_embeddings;    // the projection is shared.weight (no lm_head.weight parameter): v1.0, and the
                                 // 5.x "tied-unscaled" T5Config(tie_word_embeddings=False)
    bool scale_decoder_outputs;  // the decoder output is scaled by d_model^-0.5 before the projection: v1.0
    bool tie_from_weights;       // config.json has "scale_decoder_outputs" (written by transformers >= 5): whether
                                 // the weights hold lm_head.weight decides tie_word_embeddings (t5_config_resolve_head)
    int pad_token_id;                     // 0
    int eos_token_id;                     // 1
    int decoder_start_token_id;           // 0
} T5Config;

// Fills cfg from a built-in preset; false when the name is unknown.
bool t5_config_preset(const char* name, T5Config* cfg);
// Comma-separated list of preset names, for error messages and --help.
const char* t5_config_preset_names(void);
// Reads a HF config.json. Returns 0, or -1 with a one-line message in err naming the file and key.
int t5_config_load_json(const char* path, T5Config* cfg, char* err, size_t errlen);
// The output projection of a checkpoint whose config.json came from transformers >= 5 (tie_from_weights):
// lm_head.weight when the weights (a file, a folder, or a sharded index) hold it, else shared.weight, as
// transformers loads it. No-op for older config.json files (tie_word_embeddings says it) and for a NULL
// weights_path (random init). 0, or -1 with err naming the file.
int t5_config_resolve_head(T5Config* cfg, const char* weights_path, char* err, size_t errlen);
// Writes cfg as a HF config.json that transformers loads (architectures T5ForConditionalGeneration,
// model_type t5). Returns 0 or -1 with err.
int t5_config_save_json(const T5Config* cfg, const char* path, char* err, size_t errlen);
// Number of parameters (unique, tied embedding counted once).
size_t t5_config_num_params(const T5Config* cfg);

#ifdef __cplusplus
}
#endif
