/*
 * gen_lockstep.c: lockstep generation's decisions (contract in gen_lockstep.h).
 */
#include "gen_lockstep.h"

int gen_lockstep_vote(int live, bool want_drain) { return live <= 0 ? 0 : want_drain ? 2 : 1; }

GenLockstepMove gen_lockstep_beam_move(int all, int live, bool compact, bool want_drain, bool* draining) {
    if (all <= 0) return GEN_LOCKSTEP_STOP;
    // every rank launched the same steps, so a rank that wants to compact while another drains must want the same
    if (all == 2 && compact && !want_drain) return GEN_LOCKSTEP_BROKEN;
    if (live <= 0 || (all == 2 && !compact)) {
        *draining = all == 2;
        return GEN_LOCKSTEP_STEP_ON;
    }
    *draining = want_drain;
    return want_drain ? GEN_LOCKSTEP_DRAIN : GEN_LOCKSTEP_LAYOUT;
}
