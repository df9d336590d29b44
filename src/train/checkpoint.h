/*
 * checkpoint.h: checkpoint directories that lose nothing (DESIGN.md invariant 6, issue 5).
 *
 * Layout (HF names the directories; docs/training.md has the full protocol):
 *
 *   output_dir/checkpoint-<step>/
 *       model.safetensors, config.json, ...   written by the model code into the temporary directory
 *       trainer_state.json                    src/report/results.c
 *       t5train_state.bin                     this file's state format (one per rank when world_size > 1:
 *                                             t5train_state_r00000.bin, ...)
 *       t5train_done                          completion marker, written LAST: "t5train checkpoint\n
 *                                             step <N>\nworld_size <W>\n"
 *
 * Save:  checkpoint_begin     -> mkdir output_dir/checkpoint-<N>.tmp-<nonce>
 *        (every rank)            fill w.tmp_dir: weights, trainer_state.json, checkpoint_state_* per rank
 *        (barrier)
 *        checkpoint_commit    -> (rank 0) write t5train_done into the tmp dir, fsync every file, rename to
 *                                checkpoint-<N> (a re-save of N: swap the two names atomically with
 *                                renameat2 RENAME_EXCHANGE, then remove the old one), fsync output_dir
 *        checkpoint_rotate    -> save_total_limit: delete the oldest complete checkpoints (never the one just
 *                                written, nor the newest, nor best_step)
 * Resume: checkpoint_resolve_resume("last" | DIR) -> newest complete checkpoint; incomplete or corrupt ones
 *        (tmp dirs, no marker, truncated state file, checksum mismatch) are reported and skipped.
 *
 * State file (STYLE.md 12): a 256 x int32 header
 *   [0] magic 0x54355354 ("T5ST")  [1] version 1  [2] 256  [3] rank  [4] world_size  [5] number of blobs
 *   [6..7] step (int64)  [8..9] file size in bytes (int64)  [10] blob record size (64)
 *   [255] CRC32C of ints 0..254
 * then per blob a 64-byte record {char tag[40] NUL-padded; int64 nbytes; uint32 crc32c; uint32 magic "BLOB";
 * int64 0} followed by nbytes of data. Readers check magic, version, header CRC and the file size against the
 * header before allocating anything; every blob's CRC32C is checked when it is read.
 *
 * Library code: errors are returned (-1 or NULL, one sentence naming the file in err); the trainer calls t5_die.
 */
#pragma once
#include "../base/crc32c.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHECKPOINT_STATE_MAGIC 0x54355354
#define CHECKPOINT_STATE_VERSION 1
#define CHECKPOINT_HEADER_INTS 256
#define CHECKPOINT_RECORD_BYTES 64
#define CHECKPOINT_TAG_MAX 40  // including the NUL
#define CHECKPOINT_MARKER "t5train_done"
#define CHECKPOINT_PREFIX "checkpoint"

// blob tags (any NUL-terminated name shorter than 40 bytes is allowed): the trainer's data position and RNG; the
// engine names its own blobs (src/zero/engine_state.c: "optimizer", "scaler", "scheduler", ...; the same names here
// for the tests that write a state file by hand)
#define CKPT_TAG_OPTIMIZER "optimizer"
#define CKPT_TAG_SCALER "scaler"
#define CKPT_TAG_SCHEDULER "scheduler"
#define CKPT_TAG_DATA "data_position"
#define CKPT_TAG_RNG "rng"

// CRC32C of the state files: src/base/crc32c.h (zlib-style chaining, SSE4.2 when available).
static inline uint32_t checkpoint_crc32c(uint32_t crc, const void* data, size_t n) { return t5_crc32c(crc, data, n); }
static inline uint32_t checkpoint_crc32c_sw(uint32_t crc, const void* data, size_t n) {
    return t5_crc32c_sw(crc, data, n);  // table version (tests compare)
}

// output_dir/checkpoint-<step> (malloc'd)
char* checkpoint_dir_path(const char* output_dir, int64_t step);
// "t5train_state.bin" for world_size 1, "t5train_state_r%05d.bin" otherwise
void checkpoint_state_filename(char* buf, size_t cap, int rank, int world_size);
// The number of ranks that saved a complete checkpoint directory (its completion marker).
int checkpoint_world_size(const char* dir, int* world, char* err, size_t errcap);
// Parses "checkpoint-<digits>" exactly (HF's ^checkpoint\-(\d+)$); returns the step or -1.
int64_t checkpoint_parse_name(const char* name);

// ---------------------------------------------------------------------------------------------
// directory protocol

typedef struct {
    char* output_dir;
    char* final_dir;  // output_dir/checkpoint-<step>
    char* tmp_dir;    // output_dir/checkpoint-<step>.tmp-<nonce>: write everything here
    int64_t step;
    int world_size;
} CheckpointWriter;

// Creates the temporary directory (and output_dir). nonce <= 0: getpid(). With several ranks, every rank
// passes the same nonce (rank 0's, broadcast) so they fill one directory.
int checkpoint_begin(CheckpointWriter* w, const char* output_dir, int64_t step, int world_size, long nonce,
                     char* err, size_t errcap);
// Rank 0, after every rank has written its files: the marker into the tmp dir, fsync all, then the final
// name: a rename, or for an existing final_dir (a re-save of the step) an atomic swap of the two names
// (RENAME_EXCHANGE; where the filesystem lacks it, old aside then new in) before the old one is removed.
// A complete checkpoint-<N> is never removed before its replacement is complete and in place. On error
// the tmp dir stays; checkpoint_remove_stale settles it at the next start.
int checkpoint_commit(CheckpointWriter* w, char* err, size_t errcap);
// Removes the temporary directory (a failed save).
void checkpoint_abort(CheckpointWriter* w);
void checkpoint_writer_free(CheckpointWriter* w);

// ---------------------------------------------------------------------------------------------
// state file: writing (streamed: a blob may be written in chunks, e.g. from pinned staging buffers)

typedef struct CheckpointStateWriter CheckpointStateWriter;

CheckpointStateWriter* checkpoint_state_create(const char* dir, int64_t step, int rank, int world_size, char* err,
                                               size_t errcap);
int checkpoint_state_blob_begin(CheckpointStateWriter* w, const char* tag, char* err, size_t errcap);
int checkpoint_state_blob_write(CheckpointStateWriter* w, const void* data, size_t n, char* err, size_t errcap);
int checkpoint_state_blob_end(CheckpointStateWriter* w, char* err, size_t errcap);
// begin + write + end
int checkpoint_state_add(CheckpointStateWriter* w, const char* tag, const void* data, size_t n, char* err,
                         size_t errcap);
// Writes the header, fsyncs and closes; frees w in every case.
int checkpoint_state_finish(CheckpointStateWriter* w, char* err, size_t errcap);
// Closes and deletes a partly written file; frees w.
void checkpoint_state_discard(CheckpointStateWriter* w);

// ---------------------------------------------------------------------------------------------
// state file: reading

typedef struct {
    char tag[CHECKPOINT_TAG_MAX];
    int64_t offset;  // of the data in the file
    int64_t nbytes;
    uint32_t crc;
} CheckpointBlobInfo;

typedef struct {
    char* path;
    FILE* f;
    int64_t step;
    int rank, world_size;
    int nblobs;
    CheckpointBlobInfo* blobs;  // (nblobs,)
    int64_t file_size;
} CheckpointState;

// Opens and validates header and blob table (magic, version, header CRC, sizes). No blob data is read.
int checkpoint_state_open(CheckpointState* s, const char* path, char* err, size_t errcap);
const CheckpointBlobInfo* checkpoint_state_find(const CheckpointState* s, const char* tag);
// Reads blob `tag` into dst; nbytes must equal the stored size; the CRC32C is checked.
int checkpoint_state_read(CheckpointState* s, const char* tag, void* dst, size_t nbytes, char* err, size_t errcap);
// Reads blob `tag` (nbytes must equal the stored size) in pieces of at most `chunk` bytes, handing each to
// consume(ctx, data, byte_offset, n) (nonzero return stops with that error in err), so a large blob never needs
// a second full copy in memory. The CRC32C is checked after the last piece: on a mismatch the pieces already
// consumed must be discarded by the caller (the function returns -1 with the corrupt-file message).
int checkpoint_state_read_stream(CheckpointState* s, const char* tag, size_t nbytes, size_t chunk,
                                 int (*consume)(void* ctx, const void* data, size_t byte_offset, size_t n), void* ctx,
                                 char* err, size_t errcap);
// Checks the CRC32C of every blob (reads the whole file in chunks).
int checkpoint_state_verify(CheckpointState* s, char* err, size_t errcap);
void checkpoint_state_close(CheckpointState* s);

// ---------------------------------------------------------------------------------------------
// finding, resuming, rotating

// Is dir a complete checkpoint? Name, marker (step and world size match), every rank's state file valid
// for that step; with verify_checksums also every blob's CRC. Returns 0 (step in *step) or -1 with the reason.
int checkpoint_validate(const char* dir, bool verify_checksums, int64_t* step, char* err, size_t errcap);
// Newest complete checkpoint in output_dir (malloc'd path) or NULL. Every incomplete/corrupt candidate newer
// than the one returned, and every temporary directory, is reported to `report` (NULL: silent).
char* checkpoint_find_latest(const char* output_dir, bool verify_checksums, FILE* report);
// --resume_from_checkpoint ARG: "last" (or "latest") -> checkpoint_find_latest; else ARG must be a complete
// checkpoint. Returns the malloc'd directory, or NULL with err set.
char* checkpoint_resolve_resume(const char* arg, const char* output_dir, FILE* report, char* err, size_t errcap);
// save_total_limit (<= 0: keep all). Deletes the oldest complete checkpoints until `limit` remain, never
// keep_step (the one just written), the newest, or best_step (-1: none; we have no best metric yet).
// Incomplete directories are left alone (find_latest reports them). Prints HF's line per deletion to report.
// Returns the number deleted, or -1 with err set.
// HF's end of training with save_total_limit 1 and a best checkpoint: every complete checkpoint but keep_step is
// deleted (HF's line per deletion to report). Returns the number deleted, or -1 with err set.
int checkpoint_keep_only(const char* output_dir, int64_t keep_step, FILE* report, char* err, size_t errcap);
int checkpoint_rotate(const char* output_dir, int limit, int64_t keep_step, int64_t best_step, FILE* report,
                      char* err, size_t errcap);
// The same, sparing spare_step too (-1: none): the checkpoint a background push still reads (src/train/trainer_push.h).
int checkpoint_rotate_sparing(const char* output_dir, int limit, int64_t keep_step, int64_t best_step,
                              int64_t spare_step, FILE* report, char* err, size_t errcap);
// Settles leftover checkpoint-*.tmp-* / .old-* directories (rank 0, at start, before this run saves): a
// complete leftover whose checkpoint-<N> is missing or incomplete is renamed back to checkpoint-<N> (.tmp-
// first: the newer save); every other leftover is deleted. Returns how many were settled.
int checkpoint_remove_stale(const char* output_dir, FILE* report);
// rm -rf path (no symlinks followed). Returns 0 or -1.
int checkpoint_remove_tree(const char* path);

#ifdef __cplusplus
}
#endif
