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
