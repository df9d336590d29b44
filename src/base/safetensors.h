/*
 * safetensors.h: reading and writing HuggingFace safetensors checkpoints (single file or sharded).
 *
 * File format (https://github.com/huggingface/safetensors):
 *   [8 bytes] N = header length, uint64 little-endian
 *   [N bytes] JSON header: {"__metadata__": {str: str}, "<name>": {"dtype": "F16", "shape": [..],
 *             "data_offsets": [begin, end]}, ...}; offsets are relative to the byte after the header.
 *             Writers pad the header with spaces so the data starts 8-byte aligned.
 *   [data]    the tensors, row-major, little-endian, packed.
 * Sharded checkpoints (HF save_pretrained above max_shard_size): model-0000N-of-0000M.safetensors plus
 * model.safetensors.index.json = {"metadata": {"total_size": bytes}, "weight_map": {name: shard file}}.
 *
 * Reader: files are mmap'ed (no host copy of the checkpoint); every header is validated when its file is
 * opened: header length within the file, JSON syntax, dtype (F32/F16/BF16 only, others rejected naming the
 * tensor), shape, data_offsets in range, consistent with dtype*shape, non-overlapping, and the file size
 * against the largest offset ("truncated"). Shards of an index are opened lazily, on the first lookup of a
 * tensor they hold. Reads convert on the fly to the caller's dtype (f32/f16/bf16, round to nearest even).
 * Each successful read marks the tensor consumed, so the caller can list the names it never asked for
 * ("unexpected tensor").
 *
 * Errors: library functions never exit. They return 0 on success or -1 with a one-line message in
 * err (errlen bytes, may be NULL) that names the file and, where there is one, the tensor. The
 * command-line layer turns that into t5_die().
 *
 * Writer: collect tensors (name, dtype, shape, and either a data pointer that stays valid until the
 * write, or a callback that produces the bytes in chunks, e.g. gathered from GPUs), then write
 *   - a single file at an explicit *.safetensors path, or
 *   - into a directory: model.safetensors when the total fits in max_shard_bytes, otherwise
 *     model-0000N-of-0000M.safetensors + model.safetensors.index.json (HF's greedy split, in the order
 *     the tensors were added).
 * Every file is written to "<name>.tmp.<pid>" and renamed into place (DESIGN.md invariant 6); the index is
 * written last. __metadata__ always carries {"format": "pt"} (transformers requires it) plus what the
 * caller set; for a sharded save the caller's keys also go into the index's "metadata" (beside total_size),
 * which is what safetensors_metadata() returns for an index.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SAFETENSORS_MAX_DIMS 8
// HF's default max_shard_size "5GB" = 5 * 10^9 bytes (transformers' convert_file_size_to_int).
#define SAFETENSORS_DEFAULT_SHARD_BYTES ((size_t)5000000000ULL)

typedef struct {
    const char* name;                     // tensor name, e.g. "encoder.block.0.layer.0.SelfAttention.q.weight"
    DType dtype;                          // stored dtype (F32 / F16 / BF16)
    int ndim;                             // 0 for a scalar
    int64_t shape[SAFETENSORS_MAX_DIMS];  // row-major shape
    size_t numel;                         // product of shape (1 for a scalar)
    size_t nbytes;                        // numel * dtype_size(dtype)
    const char* file;                     // path of the file (shard) holding it
    bool consumed;                        // set by a successful safetensors_read*()
} SafeTensorInfo;

typedef struct SafeTensors SafeTensors;  // opaque reader handle

// Opens `path`: a *.safetensors file, a *.safetensors.index.json, or a directory holding
// model.safetensors or model.safetensors.index.json. Single files are validated at once; the shards of an
// index are validated when first used (the index itself is checked: every shard it names must exist).
int safetensors_open(SafeTensors** out, const char* path, char* err, size_t errlen);
void safetensors_close(SafeTensors* st);

// Number of tensors (the weight_map size for an index) and their names in file / index order.
int safetensors_count(const SafeTensors* st);
const char* safetensors_name(const SafeTensors* st, int i);
// True if the checkpoint has a tensor of that name (does not open shards).
bool safetensors_has(const SafeTensors* st, const char* name);

// Looks up a tensor, opening its shard if needed. -1 with "missing tensor '<name>' in <file>" when absent,
// or the shard's validation error.
int safetensors_info(SafeTensors* st, const char* name, const SafeTensorInfo** info, char* err, size_t errlen);

// Value of a __metadata__ key (of the single file, or of the index's "metadata" for an index), or NULL.
const char* safetensors_metadata(const SafeTensors* st, const char* key);

// Reads the whole tensor `name` into dst (numel elements of dst_dtype), converting from the stored dtype
// (fp32->fp16/bf16 rounds to nearest even; NaN stays NaN, overflow gives inf). When expect_ndim >= 0 the
// stored shape must equal expect_shape[0..expect_ndim) ("wrong shape" error naming both shapes otherwise).
// Marks the tensor consumed.
int safetensors_read(SafeTensors* st, const char* name, void* dst, DType dst_dtype, const int64_t* expect_shape,
                     int expect_ndim, char* err, size_t errlen);
// Reads elements [elem_offset, elem_offset + n) of the flattened tensor (for partitioned loads: ZeRO-3
// ranks read only their slice). Marks the tensor consumed.
int safetensors_read_slice(SafeTensors* st, const char* name, size_t elem_offset, size_t n, void* dst,
                           DType dst_dtype, char* err, size_t errlen);
// Requires the stored dtype to be exactly `dt` ("wrong dtype" error otherwise). For callers that cannot
// accept a conversion.
int safetensors_check_dtype(SafeTensors* st, const char* name, DType dt, char* err, size_t errlen);
// Zero-copy access: pointer into the mmap'ed file at the tensor's first byte (little-endian stored dtype;
// only 1-byte alignment is guaranteed in general). Does not mark it consumed.
int safetensors_data(SafeTensors* st, const char* name, const void** data, char* err, size_t errlen);

// Names never consumed, joined with ", " into buf (truncated with "..." when longer). Returns their count.
int safetensors_unconsumed(const SafeTensors* st, char* buf, size_t buflen);

// Element conversion used by the reader (exposed for tests and other code): n elements from src (sdt) to
// dst (ddt); src and dst may not overlap unless identical dtypes.
void safetensors_convert(void* dst, DType ddt, const void* src, DType sdt, size_t n);
uint16_t safetensors_f32_to_f16(float f);   // round to nearest even, overflow to inf
uint16_t safetensors_f32_to_bf16(float f);  // round to nearest even, NaN kept quiet
float safetensors_f16_to_f32(uint16_t h);
float safetensors_bf16_to_f32(uint16_t h);

// ---- writer

// Producer callback: fill dst with `nbytes` bytes of the tensor's stored representation starting at byte
// `byte_offset` (the writer calls it in chunks of at most 64 MiB, in increasing offset order).
// Return 0, or -1 with a message in err (the write is then abandoned and temp files removed).
typedef int (*SafeTensorsProduceFn)(void* ctx, const char* name, size_t byte_offset, void* dst, size_t nbytes,
                                    char* err, size_t errlen);

typedef struct SafeTensorsWriter SafeTensorsWriter;  // opaque

SafeTensorsWriter* safetensors_writer_new(void);
void safetensors_writer_free(SafeTensorsWriter* w);
// Adds a tensor whose bytes are at `data` (dtype dt, row-major), valid until the write. -1 with err on a
// duplicate name, a bad shape or too many dims.
int safetensors_writer_add(SafeTensorsWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                           const void* data, char* err, size_t errlen);
// Same, with the bytes produced by fn(ctx, ...) at write time.
int safetensors_writer_add_fn(SafeTensorsWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                              SafeTensorsProduceFn fn, void* ctx, char* err, size_t errlen);
// Adds a __metadata__ entry (string to string). "format" defaults to "pt".
void safetensors_writer_set_metadata(SafeTensorsWriter* w, const char* key, const char* value);
// Writes one file at `path` (no sharding), atomically.
int safetensors_writer_write_file(SafeTensorsWriter* w, const char* path, char* err, size_t errlen);
// Writes into directory `dir` (created if needed): model.safetensors, or shards + index.json when the
// total exceeds max_shard_bytes (0 = SAFETENSORS_DEFAULT_SHARD_BYTES). A stale model.safetensors or index
// from an earlier save with the other layout is removed so transformers does not pick the wrong one.
// If nshards is not NULL it receives the number of files written (1 = unsharded).
int safetensors_writer_write_dir(SafeTensorsWriter* w, const char* dir, size_t max_shard_bytes, int* nshards,
                                 char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
