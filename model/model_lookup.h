/*
 * model_lookup.h: turn `--model t5-3b` (or --model_name_or_path) into a directory holding a T5 checkpoint,
 * the way transformers' from_pretrained finds it offline.
 *
 * Lookup order (first hit wins):
 *   1. `model` is an existing directory (relative or absolute): used as is. If it lacks config.json or
 *      weights the error says what is missing there; the cache is NOT searched (a typo'd local path should
 *      not silently load something else).
 *   2. The HuggingFace hub cache, in each root below that exists (duplicates skipped):
 *        $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
 *        ~/.cache/huggingface/hub
 *      and in each root every repo-folder spelling of the name:
 *        "t5-3b"          -> models--t5-3b, models--google-t5--t5-3b (the hub redirects t5-* to google-t5/)
 *        "google-t5/t5-3b" -> models--google-t5--t5-3b, models--t5-3b
 *        "google/flan-t5-xl" -> models--google--flan-t5-xl
 *      A repo folder is used through snapshots/<rev>/, preferring <rev> = contents of refs/main; otherwise the
 *      most recently modified snapshot that has a config.json.
 * A candidate directory counts as a hit when it holds config.json and weights. Weights, in order of
 * preference (transformers' order): model.safetensors, model.safetensors.index.json (sharded), then pytorch_model.bin /
 * pytorch_model.bin.index.json (found but unusable: the error points at
 * scripts/convert_bin_to_safetensors.py).
 *
 * When nothing is found, the message lists every place that was looked at (one per line, with why it did
 * not qualify) and how to get the weights (scripts/download_model.sh <name>).
 *
 * Errors are returned (0 / -1 + multi-line message in err, first line one sentence), never exit; err
 * should be large (MODEL_LOOKUP_ERRLEN).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_LOOKUP_ERRLEN 8192
#define MODEL_LOOKUP_PATHLEN 4096

typedef enum {
    MODEL_WEIGHTS_NONE = 0,
    MODEL_WEIGHTS_SAFETENSORS = 1,          // model.safetensors
    MODEL_WEIGHTS_SAFETENSORS_SHARDED = 2,  // model.safetensors.index.json + shards
    MODEL_WEIGHTS_PYTORCH_BIN = 3,          // pytorch_model.bin(.index.json): needs conversion
} ModelWeightsFormat;

typedef enum {
    MODEL_TOKENIZER_NONE = 0,
    MODEL_TOKENIZER_SPIECE = 1,  // spiece.model (SentencePiece, what t5train uses)
    MODEL_TOKENIZER_JSON = 2,    // tokenizer.json only (HF fast tokenizer)
} ModelTokenizerFormat;

typedef struct {
    char dir[MODEL_LOOKUP_PATHLEN];             // the checkpoint directory (a snapshot dir in the HF cache)
    char config_path[MODEL_LOOKUP_PATHLEN];     // dir/config.json
    char weights_path[MODEL_LOOKUP_PATHLEN];    // dir/model.safetensors or dir/model.safetensors.index.json
    ModelWeightsFormat weights;
    char tokenizer_path[MODEL_LOOKUP_PATHLEN];  // dir/spiece.model, else dir/tokenizer.json, else ""
    ModelTokenizerFormat tokenizer;
    bool from_cache;                            // found in the HF hub cache (not a local directory)
} ModelLocation;

// What the caller needs: weights (training / eval) or only the tokenizer (./t5train tokenize --model).
typedef enum {
    MODEL_NEED_WEIGHTS = 1,    // config.json + safetensors weights
    MODEL_NEED_TOKENIZER = 2,  // spiece.model or tokenizer.json
} ModelNeed;

// Finds `model` (a directory or a hub name, see above) holding what `need` (a ModelNeed bitmask) asks for.
// 0 and *loc filled (tokenizer fields filled whenever present, whatever `need`), or -1 and err.
// A pytorch_model.bin-only checkpoint with MODEL_NEED_WEIGHTS is an error naming the conversion script.
int model_lookup(const char* model, int need, ModelLocation* loc, char* err, size_t errlen);

// Convenience for the data pipeline: the tokenizer file of `model` (spiece.model preferred). 0 or -1+err.
int model_lookup_tokenizer(const char* model, char* path, size_t pathlen, char* err, size_t errlen);

// The HF cache roots that exist, in search order, as a malloc'd NULL-terminated array (free with
// model_lookup_free_list). Exposed for tests and `--help`.
char** model_lookup_cache_roots(void);
void model_lookup_free_list(char** list);

#ifdef __cplusplus
}
#endif
