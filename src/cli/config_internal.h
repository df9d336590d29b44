/*
 * config_internal.h: what config.c shares with config_parse.c and config_resolve.c (not part of the
 * config API: include config.h for that).
 */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"

#define DS_PREFIX "deepspeed."
#define DS_PREFIX_LEN 10

static inline void* field_ptr(RunConfig* c, const ConfigKey* k) { return (char*)c + k->offset; }
static inline const void* field_cptr(const RunConfig* c, const ConfigKey* k) { return (const char*)c + k->offset; }

// a note printed with the resolved config (at most CONFIG_NOTE_LEN per note; extra notes are dropped)
void add_note(RunConfig* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// the last path component of a dotted key
const char* key_leaf(const char* key);
// length of the parent part of a dotted key ("a.b.c" -> 3 for "a.b"), 0 for top level
size_t key_parent_len(const char* key);
// what a key's kind expects, for messages ("an integer", ...)
const char* kind_name(const ConfigKey* k);
// a short text of a JSON value for messages
void json_brief(const json_t* v, char* buf, size_t n);
// the i-th choice of an enum ("a|b|c") into buf
bool enum_choice(const ConfigKey* k, int idx, char* buf, size_t n);
// Sets key ki from JSON value v. `where` names the key for messages ("file.json: a.b" or
// "command line: --flag"). Returns 0 or T5_EXIT_USAGE.
int config_set_json(RunConfig* c, int ki, const json_t* v, ConfigSource src, const char* where, char* err,
                    size_t n);
// config_foreign_apply for a JSON value (a config or DeepSpeed file)
int config_foreign_apply_json(RunConfig* c, int fi, const json_t* v, const char* where, char* err, size_t n);
// one note per no-op foreign key that was given (config_resolve, after it clears the notes)
void config_foreign_notes(RunConfig* c);
// the resolved config as a JSON object (what t5train_config.json holds); the caller owns it
json_t* config_to_json(const RunConfig* c);
// every deepspeed.* key back to its default, no DeepSpeed file
void config_reset_deepspeed(RunConfig* c);
