/*
 * tokenizer.h: T5 tokenization exactly as HF transformers' T5 tokenizer (T5TokenizerFast /
 * transformers 5.x T5Tokenizer) does it for the t5-* checkpoints, on top of data/spm.h.
 *
 * Ids: <pad>=0, </s>=1, <unk>=2, the 32000 SentencePiece pieces, then <extra_id_99>..<extra_id_0>
 * = 32000..32099 (V = 32100; the model's embedding has 32128 rows).
 * Encode (HF `tokenizer(prefix + text, max_length=M, truncation=True)`):
 *   1. the added tokens <pad> </s> <unk> <extra_id_N> are matched in the raw text and become
 *      their ids; the text between them is encoded by SentencePiece on its own (each piece of
 *      text gets the "▁" dummy prefix, HF's Metaspace prepend_scheme "always" = legacy T5);
 *   2. U+0085 (NEL) is whitespace for HF's WhitespaceSplit but not for SentencePiece: we map it
 *      to a space first (the only difference found on the fixtures, see scripts/make_tokenizer_fixtures.py);
 *   3. ids are cut to M-1 and </s> is appended (M <= 0: no truncation).
 * Decode (HF `decode(ids, skip_special_tokens=True)`, clean_up_tokenization_spaces=False):
 *   drop pad/eos/unk/extra ids and ids outside [0, V), join the pieces, "▁" -> " ", and drop one
 *   leading space of the first remaining piece.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { T5_PAD_ID = 0, T5_EOS_ID = 1, T5_UNK_ID = 2, T5_NUM_EXTRA_IDS = 100 };

typedef struct Tokenizer Tokenizer;

// Opens a tokenizer from a spiece.model file or a model directory holding spiece.model.
// NULL + err (naming the path) when it is missing or not a T5 SentencePiece model.
Tokenizer* tokenizer_open(const char* path, char* err, size_t errlen);
void tokenizer_close(Tokenizer* tok);

// Resolves a tokenizer path (a spiece.model file or a directory holding one) to the model file
// (malloc'd) and FNV-1a 64 of its bytes, without loading it. Returns 0, or -1 with err set.
int tokenizer_file_hash(const char* path, char** model_path, uint64_t* hash, char* err, size_t errlen);

// Full vocabulary with the extra ids (32100 for T5).
int tokenizer_vocab_size(const Tokenizer* tok);
// The spiece.model path actually used.
const char* tokenizer_model_path(const Tokenizer* tok);
// true when the model directory also holds a tokenizer.json (we still use spiece.model).
bool tokenizer_has_tokenizer_json(const Tokenizer* tok);
// FNV-1a 64 of the model file's bytes (part of the token-cache key).
uint64_t tokenizer_hash(const Tokenizer* tok);
// Piece text of an id ("<extra_id_0>" for 32099), NULL when out of range.
const char* tokenizer_id_to_piece(const Tokenizer* tok, int id);
// true for pad, eos, unk and extra ids (HF's all_special_ids).
bool tokenizer_is_special(const Tokenizer* tok, int id);

// Encodes prefix + text[0..len) (prefix may be NULL). Ids go into *buf (grown with realloc as
// needed; *cap in ids). Returns the number of ids (<= max_length when max_length > 0, always
// ending with </s>), or -1 with err set. Thread-safe.
int tokenizer_encode(const Tokenizer* tok, const char* prefix, const char* text, size_t len,
                     int max_length, int32_t** buf, size_t* cap, char* err, size_t errlen);
// Decodes ids as HF batch_decode(..., skip_special_tokens=skip_special). malloc'd string.
// Negative ids (-100) are skipped always.
char* tokenizer_decode(const Tokenizer* tok, const int32_t* ids, int n, bool skip_special);
// Same, then HF's clean_up_tokenization when clean_up is true (" ." -> ".", " ," -> ",", " 's" -> "'s",
// ...: older transformers' default; 5.x has false).
char* tokenizer_decode_ex(const Tokenizer* tok, const int32_t* ids, int n, bool skip_special, bool clean_up);

// HF's default source prefix for T5 translation: "translate English to Romanian: ". Languages
// without a known name use the code itself. Writes into out[cap].
void tokenizer_default_prefix(const char* src_lang, const char* tgt_lang, char* out, size_t cap);

// UTF-8 validation: true when s[0..len) is valid UTF-8 (no overlongs, surrogates or > U+10FFFF);
// otherwise *bad_offset is the byte offset of the first bad sequence.
bool utf8_validate(const char* s, size_t len, size_t* bad_offset);

#ifdef __cplusplus
}
#endif
