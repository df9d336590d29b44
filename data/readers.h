/*
 * readers.h: parallel text readers: HF datasets JSON-lines ({"translation": {"en": .., "ro": ..}}),
 * line-aligned plain text (train.en + train.ro) and WMT SGML (<seg id="N">..</seg>).
 *
 * Every reader validates UTF-8 and returns -1 with one sentence naming the file and line on bad
 * input. Pairs where either side is empty (or only whitespace) are skipped and counted, since
 * they carry no training signal (HF would keep them: a documented deviation, reported by
 * dataset_open as a warning).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t n;                   // pairs kept
    char** src;                  // (n,) NUL-terminated UTF-8
    char** tgt;                  // (n,)
    int64_t* line;               // (n,) 1-based line (jsonl, text) or segment number (sgml) in the source file
    int64_t n_skipped_empty;     // pairs dropped because one side was empty
    int64_t first_skipped_line;  // line of the first dropped pair (0 if none)
    // storage
    char** blocks;
    int n_blocks, cap_blocks;
    int64_t cap;
} TextPairs;

// Longest line accepted (bytes); longer lines are an error (a binary file, a missing newline).
#define TEXT_MAX_LINE_BYTES ((size_t)64 << 20)

int text_pairs_read_jsonl(const char* path, const char* src_lang, const char* tgt_lang, TextPairs* out,
                          char* err, size_t errlen);
int text_pairs_read_parallel(const char* src_path, const char* tgt_path, TextPairs* out, char* err, size_t errlen);
int text_pairs_read_sgml(const char* src_path, const char* tgt_path, TextPairs* out, char* err, size_t errlen);
void text_pairs_free(TextPairs* tp);

// Unescapes SGML/XML entities (&amp; &lt; &gt; &quot; &apos; &#N; &#xH;) in place; unknown
// entities are kept as they are. Returns the new length.
size_t sgml_unescape(char* s, size_t len);

#ifdef __cplusplus
}
#endif
