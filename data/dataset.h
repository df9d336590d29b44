/*
 * dataset.h: a tokenized split of a translation data set, as HF run_translation.py builds it,
 * backed by a memory-mapped token cache.
 *
 * Where the text comes from (first match wins, see docs/data.md):
 *   - explicit files: <split>_file (.json/.jsonl: HF JSON-lines; .sgm: WMT SGML, with
 *     <split>_target_file or the "-src.<src>.sgm" -> "-ref.<tgt>.sgm" sibling; otherwise a
 *     path prefix P with P.<src> + P.<tgt>, or a file ending in .<src> with its .<tgt> sibling),
 *     or <split>_file + <split>_target_file as two parallel text files;
 *   - dataset "wmt16-ro-en" (or dataset_name "wmt16" + dataset_config "ro-en"): the first of
 *     data_dir, $T5TRAIN_DATA, ~/.cache/t5train/data holding
 *     <dir>/wmt16-ro-en/<split>.jsonl or <dir>/wmt16-ro-en/<split>.<src> + .<tgt>
 *     (split = train | validation | test).
 * Tokenization: source = prefix + text, max_source_length; target = text, max_target_length
 * (val_max_target_length for validation/test); </s> appended; see tokenizer.h.
 * Token cache (STYLE item 12): <cache_dir>/<name>.tokens, header 256 x int32, then
 *   int64 src_off[n+1], int64 tgt_off[n+1], int64 line[n], int32 src_ids[], int32 tgt_ids[];
 * keyed by the tokenizer bytes, prefix, lengths, direction and the source files' paths, sizes
 * and mtimes; written to a temp name and renamed; any mismatch, truncation or checksum failure
 * means it is rebuilt.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DATA_SPLIT_TRAIN = 0, DATA_SPLIT_VALIDATION = 1, DATA_SPLIT_TEST = 2 } DataSplit;

typedef struct {
    // where the text is
    const char* dataset_name;    // "wmt16-ro-en", or "wmt16" with dataset_config "ro-en"; NULL: files only
    const char* dataset_config;  // "ro-en"
    const char* data_dir;        // searched first for the dataset
    const char* split_file[3];         // train/validation/test: jsonl, sgm, text prefix, or source text file
    const char* split_target_file[3];  // optional second file of a parallel pair
    const char* source_lang;     // "en"
    const char* target_lang;     // "ro"
    // tokenization
    const char* tokenizer_path;  // spiece.model or a model dir
    const char* source_prefix;   // NULL: "translate <Src> to <Tgt>: "; "" none
    int max_source_length;       // 1024
    int max_target_length;       // 128
    int val_max_target_length;   // <= 0: max_target_length
    int64_t max_samples[3];      // first N of train/validation/test; < 0: all
    int num_threads;             // <= 0: all cores (OpenMP)
    const char* cache_dir;       // NULL: $T5TRAIN_CACHE or ~/.cache/t5train/tokens
    bool no_cache;               // tokenize in memory, never read or write a cache
    bool cache_read_only;        // use a valid cache, never create or write one (a dry run)
    bool quiet;                  // no progress lines on stderr
    // batching (dataloader.h)
    int train_batch_size;        // per device, 8
    int eval_batch_size;         // per device, 8
    uint64_t seed;               // 42
    int rank, world_size;        // 0, 1
    bool shuffle;                // train: true
    bool drop_last;              // false
    bool group_by_length;        // false
    bool pad_to_max_length;      // false: pad to the longest in the batch
    int pad_to_multiple_of;      // 0/1: none; HF uses 8 with --fp16
} DataOptions;

void data_options_default(DataOptions* opt);
const char* data_split_name(DataSplit split);

typedef struct Dataset Dataset;

// Resolves the split's files, tokenizes (or opens the cache) and applies max_samples. tok may be
// NULL (opened from opt->tokenizer_path). NULL + err (one sentence naming the file/line, or every
// place searched) on failure.
Dataset* dataset_open(const DataOptions* opt, DataSplit split, const Tokenizer* tok, char* err, size_t errlen);
// The token cache folder when DataOptions.cache_dir is NULL: $T5TRAIN_CACHE, else ~/.cache/t5train/tokens;
// NULL without HOME. Caller frees.
char* dataset_default_cache_dir(void);
void dataset_close(Dataset* ds);

int64_t dataset_size(const Dataset* ds);
// Ids of example i (ending with </s>). Pointers into the cache mapping.
void dataset_get(const Dataset* ds, int64_t i, const int32_t** src, int* n_src, const int32_t** tgt, int* n_tgt);
// 1-based line (or segment number) of example i in its source file.
int64_t dataset_line(const Dataset* ds, int64_t i);
// Source length of example i (group_by_length).
int dataset_source_length(const Dataset* ds, int64_t i);
// Where the data came from (source file path) and the cache file (NULL without cache).
const char* dataset_source_path(const Dataset* ds);
const char* dataset_cache_path(const Dataset* ds);
// true when the last open read an existing cache; false when it tokenized.
bool dataset_from_cache(const Dataset* ds);
int64_t dataset_skipped_empty(const Dataset* ds);
// Total tokens (source, target) over the examples kept.
int64_t dataset_num_tokens(const Dataset* ds, bool target);
// The lengths a model's activation buffers are sized for (issue 14 item 7): the longest source and target over the
// n splits given (NULL entries skipped), each capped by its max length (max_target_length or val_max_target_length,
// the larger), the caps themselves with pad_to_max_length, rounded up to 8.
void dataset_activation_lengths(const DataOptions* opt, Dataset* const* ds, int n, int* max_src, int* max_tgt);

// Resolves the files of a split without reading them: *src_path, *tgt_path (malloc'd; tgt NULL
// for jsonl) and *format ('j' jsonl, 't' text, 's' sgml). Returns 0, or -1 with err listing
// every place searched.
int dataset_resolve_files(const DataOptions* opt, DataSplit split, char** src_path, char** tgt_path, char* format,
                          char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
