/*
 * recut.h: optimizer state saved by one number of ranks, read into the partition of another (resume on a different
 * number of GPUs, issue 16 item 3). Pure arithmetic over two ZeRO layouts (src/zero/plan.h), tested on the CPU.
 *
 * A rank's AdamW blob is its flat partition (units in order, each unit's part) of m, then the same of v. A stage 0
 * run, or one rank, saves the whole model: the layout of world 1. Old rank r' holds element g of unit u at flat
 * position part_offset'[u] + (g - r' x part'[u]); the new rank takes the elements g in its owned [lo, hi) of every unit.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "../../model/zero.h"
#include "plan.h"

// One run of consecutive floats of an old blob that lands in the new partition: `which` 0 = m, 1 = v; new_off is
// the offset in the new rank's m (or v) partition.
typedef void (*RecutPut)(void* ctx, int which, size_t new_off, const float* src, size_t n);

// Floats [e0, e0 + n) of old rank `Lold->rank`'s blob (2 x Lold->part_total floats): every piece inside the new
// rank's owned ranges is handed to put, in order. Returns the number of floats handed on.
size_t recut_chunk(const ZeroLayout* Lold, const ZeroLayout* Lnew, size_t e0, const float* data, size_t n, RecutPut put,
                   void* ctx);
// True when old rank `old_rank` of Lold's world owns some element the new rank owns (its file must be read).
bool recut_rank_needed(const ZeroLayout* Lold, int old_rank, const ZeroLayout* Lnew);

// ---- Adafactor (docs/optimizer.md "Adafactor on several ranks", Checkpoints)
//
// A rank's Adafactor blob: per tensor in table order, for the tensors it holds elements of (owned = its slice):
// a matrix's exp_avg_sq_row (rows) + exp_avg_sq_col (cols), whole (replicated on every rank holding a slice), or a
// vector's exp_avg_sq (owned), then exp_avg (owned) with beta1. One rank (or stage 0) holds every tensor whole: the
// layout of world 1, stage 0's blob. The new rank takes a matrix's statistics from the lowest old rank holding a slice
// of it, and each element's exp_avg_sq / exp_avg from the old rank that owned the element.

// Floats of the Adafactor blob of layout L's rank (zero_adafactor_tensor_floats over its slices).
size_t recut_ada_blob_floats(const ZeroTensor* t, int n, const ZeroLayout* L, bool has_beta1);
// Floats [e0, e0 + n) of old rank Lold->rank's Adafactor blob: every piece the new rank's blob takes is handed to put
// (which 0, new_off = the offset in the new rank's blob), in order. Returns the number of floats handed on.
size_t recut_ada_chunk(const ZeroTensor* t, int nt, bool has_beta1, const ZeroLayout* Lold, const ZeroLayout* Lnew,
                       size_t e0, const float* data, size_t n, RecutPut put, void* ctx);
// True when old rank `old_rank`'s Adafactor blob holds something the new rank takes.
bool recut_ada_rank_needed(const ZeroTensor* t, int nt, bool has_beta1, const ZeroLayout* Lold, int old_rank,
                           const ZeroLayout* Lnew);
