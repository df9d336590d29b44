/*
 * disk_check.h: the bytes a run's saves will write into output_dir, checked against the free space of its
 * filesystem before any training time is spent (issue 28 item 4: a t5-11b run that trained for hours and then
 * failed at the final save with "No space left on device").
 *
 * What a run writes (docs/training.md, Checkpoints):
 *   final model   model.safetensors (+ shards) of the unique parameters: 4 bytes each (fp32, today's only format)
 *   checkpoint    the same weights + every rank's t5train_state.bin: AdamW's m and v (8 bytes a parameter; at
 *                 ZeRO stage 0 every rank writes the whole state, at stages 1-3 the ranks' partitions add up to
 *                 one copy), or Adafactor's state (a matrix's row + column factors, a vector's numel, + a first
 *                 moment of every parameter with beta1), plus SAVE_SMALL_BYTES of config, tokenizer and counters
 * A save first writes the new checkpoint and only then rotates the oldest away, so with save_total_limit L the
 * peak is L + 1 checkpoints, or L checkpoints and the final model, whichever is larger; a run of max_steps with
 * save_steps writes ceil(max_steps / save_steps) of them, the last at the final step (a SIGTERM's save is not
 * counted). The checkpoints
 * already in output_dir (a resume) are on the disk already: they are counted against L and as the run's first ones,
 * not as new bytes; a save still writes one before it rotates. With load_best_model_at_end a limit of 1 keeps 2 (the
 * best checkpoint is never rotated away), as HF.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SAVE_SMALL_BYTES ((uint64_t)4 << 20)  // config.json, tokenizer files, trainer_state.json, counters: a bound

typedef struct {
    uint64_t params;             // unique parameters (a tied embedding once)
    uint64_t adafactor_floats;   // Adafactor's state floats of the whole model; 0 with AdamW
    int world_size;              // ranks writing state files on this node
    bool state_partitioned;      // ZeRO stage >= 1: the ranks' optimizer states add up to one copy
    int final_bytes_per_param;   // 4 (fp32)
    bool final_model;            // do_train: the model is saved at the end
    bool checkpoints;            // save_strategy steps or epoch, with do_train
    int64_t save_total_limit;    // <= 0: none (every checkpoint is kept)
    int64_t planned_checkpoints; // checkpoints the run will write (ceil(max_steps / save_steps)); < 0: not known
    int existing_checkpoints;    // checkpoint-N folders already in output_dir
} SavePlan;

typedef struct {
    uint64_t final_model;        // bytes of the final save
    uint64_t checkpoint;         // bytes of one checkpoint
    int new_checkpoints;         // checkpoints counted at the peak beyond those already on the disk
    uint64_t need;               // the peak of new bytes on the disk
    bool unbounded;              // checkpoints without save_total_limit: need counts one, more follow
    bool final_at_peak;          // the peak is new_checkpoints and the final model (else new_checkpoints alone)
} SaveBytes;

// The plan of a run: the model's parameters, its optimizer and ZeRO stage, its save strategy and limit, the
// checkpoints already in output_dir.
void disk_save_plan(const TrainerArgs* a, int world_size, SavePlan* p);
// The arithmetic above (no file system access).
void disk_save_bytes(const SavePlan* p, SaveBytes* b);
// Free bytes for an unprivileged writer (statvfs f_bavail * f_frsize) of the filesystem holding `path`, or of its
// nearest existing ancestor when `path` does not exist yet (output_dir is created later); `where` gets that folder.
// Returns 0, or -1 with a message.
int disk_free_bytes(const char* path, uint64_t* free_bytes, char* where, size_t wcap, char* err, size_t errcap);
// The number of checkpoint-<N> folders in output_dir (0 when it does not exist).
int disk_count_checkpoints(const char* output_dir);
// The check: 0 when `free_bytes` holds `need`; else T5_EXIT_USAGE (2) with one line naming the bytes needed, of
// what, and the bytes free. A run without save_total_limit passes with *warn set (its checkpoints are unbounded).
int disk_check_saves(const SaveBytes* b, uint64_t free_bytes, const char* where, bool* warn, char* err,
                     size_t errcap);

#ifdef __cplusplus
}
#endif
