/*
 * gen_lockstep.h: the decisions of generation in lockstep over several ranks (model/generate.h
 * t5_generator_set_lockstep), pure C so that they are CPU-tested (test/test_gen_lockstep.c simulates ranks).
 *
 * At each finished-check a rank votes, the ranks' maximum comes back (an all-reduce), and each rank moves on:
 *   vote 0  every row of this rank's batch is finished
 *        1  some row is not
 *        2  some row is not, and the device beam search must process the steps it launched ahead before it
 *           compacts the batch (a drain)
 * The maximum 0 stops every rank. While it is 2 no rank launches further steps: every rank then launches the same
 * steps, so a drain is only ever asked for steps that every rank launched.
 */
#pragma once
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

// live: this rank's unfinished batch items (greedy: rows); want_drain: a compaction waiting for launched steps
int gen_lockstep_vote(int live, bool want_drain);

typedef enum {
    GEN_LOCKSTEP_STOP = 0,  // no rank has an unfinished row: the batch is done
    GEN_LOCKSTEP_STEP_ON,   // next step in the current layout (nothing to lay out here, or another rank drains)
    GEN_LOCKSTEP_DRAIN,     // process the launched steps first, launch nothing (this rank's compaction waits)
    GEN_LOCKSTEP_LAYOUT,    // lay the batch out anew (compaction, beam reordering), then launch
    GEN_LOCKSTEP_BROKEN,    // the ranks disagree on what was launched: a bug
} GenLockstepMove;

// Beam search's move after the agreement: all = the ranks' maximum vote; live, compact (the layout would shrink),
// want_drain as voted. *draining = whether the next iteration launches nothing.
GenLockstepMove gen_lockstep_beam_move(int all, int live, bool compact, bool want_drain, bool* draining);

#ifdef __cplusplus
}
#endif
