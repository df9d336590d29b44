/*
 * local_launch.h: `t5train --num_gpus N ...` on one host starts its own N ranks, as the `deepspeed`
 * launcher (and `torchrun --nproc_per_node N`) does: N children running the given command with
 * RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and T5TRAIN_RUN_ID set.
 *
 *   - MASTER_ADDR 127.0.0.1; MASTER_PORT the one given (--master_port), else a free port the kernel picks;
 *     T5TRAIN_RUN_ID a fresh id per launch (the rendezvous refuses ranks of another run);
 *   - each child is its own process group (a Ctrl-C reaches the children once, through the launcher) and
 *     gets SIGTERM if the launcher dies (PR_SET_PDEATHSIG);
 *   - SIGINT / SIGTERM / SIGHUP to the launcher are forwarded once to every child's process group, which
 *     then end as they do alone (the trainer saves and exits); no second signal follows;
 *   - the first rank that fails (non-zero exit or a signal) ends the others: one line naming it, SIGTERM
 *     to the rest, SIGKILL after grace_s; the launcher's exit code is that rank's (128 + signal for a
 *     signal). All ranks exiting 0: 0.
 * Pure C (fork/exec); CPU-tested with small shell commands (test/test_launch.c).
 */
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int nprocs;               // N >= 1
    int master_port;          // 0: pick a free one
    double grace_s;           // after the first failure, SIGKILL the rest after this long (<= 0: 30 s)
    int quiet;                // no "starting N ranks" line
} LocalLaunchOptions;

// Runs argv (argv[0] looked up in PATH unless it has a '/') N times. Returns the exit code to exit with,
// or -1 with one sentence in err when the ranks could not be started.
int local_launch(const LocalLaunchOptions* o, char* const argv[], char* err, size_t errlen);

// Strips the launcher's own flags from argv in place (--num_gpus N, --num_gpus=N, --master_port P,
// --master_port=P); *nprocs = 0 when --num_gpus is absent. Returns the new argc, or -1 with err on a
// bad value.
int local_launch_take_flags(int argc, char** argv, LocalLaunchOptions* o, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
