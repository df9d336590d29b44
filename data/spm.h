/*
 * spm.h: the plain-C face of the SentencePiece C++ library (data/spm.cc is the only C++ in
 * the project). Load a .model file, encode text to ids, look up pieces. No special-token
 * logic here: T5's </s>, <extra_id_*> and HF's rules live in data/tokenizer.c.
 *
 * Error contract: functions that can fail return a negative value (or NULL) and write one
 * sentence into err[errlen]; nothing here exits or throws.
 * Thread safety: after spm_load, every const function may be called from many threads at
 * once (SentencePieceProcessor::Encode is const and thread-safe).
 */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SpmProcessor SpmProcessor;

// Loads a SentencePiece model file. NULL + err on a missing file or a file that is not a model.
SpmProcessor* spm_load(const char* path, char* err, size_t errlen);
void spm_free(SpmProcessor* sp);

// Number of pieces in the model (32000 for T5).
int spm_vocab_size(const SpmProcessor* sp);
// Piece string of id (NUL-terminated, owned by sp), or NULL when id is out of range.
const char* spm_id_to_piece(const SpmProcessor* sp, int id);
// Id of a piece, or the unk id when the piece is not in the vocabulary.
int spm_piece_to_id(const SpmProcessor* sp, const char* piece);
int spm_unk_id(const SpmProcessor* sp);
bool spm_is_control(const SpmProcessor* sp, int id);
bool spm_is_unknown(const SpmProcessor* sp, int id);

// Encodes text[0..len) (UTF-8) with the model's normaliser. Writes at most cap ids into out and
// returns the total number of ids (which may exceed cap: call again with a larger buffer),
// or -1 with err set.
int spm_encode(const SpmProcessor* sp, const char* text, size_t len, int32_t* out, int cap,
               char* err, size_t errlen);
// SentencePiece's own decode (unk as " \u2047 ", no special-token skipping). Writes at most
// cap-1 bytes plus NUL into out and returns the full length, or -1 with err set.
int spm_decode(const SpmProcessor* sp, const int32_t* ids, int n, char* out, size_t cap,
               char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
