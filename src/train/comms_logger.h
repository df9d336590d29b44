/*
 * comms_logger.h: DeepSpeed's comms_logger in the trainer (deepspeed.comms_logger; docs/config.md "comms_logger").
 * comms_logger_start turns on the collectives' timing (src/launch/comms_log.h) for the ops asked; once per update
 * comms_logger_poll reads the timings already complete (no wait) into DeepSpeed's aggregation
 * (src/report/comms_summary.h), printing DeepSpeed's "comm op: ..." line for each with verbose (rank 0); at the end of
 * training comms_logger_end waits for the rest, and rank 0 prints DeepSpeed's log_summary table to stdout and appends
 * {"step":N,"event":"comms_summary","world_size":W,"summary":{...}} (log_all's return_dict summary) to
 * trainer_log.jsonl. Every rank records its own collectives (as DeepSpeed's logger does); rank 0's are printed.
 * Disabled (ops 0): start returns NULL and the others return at once.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "../report/trainer_log.h"

typedef struct {
    unsigned ops;          // 1u << CommsOp of each op timed; 0: off
    bool verbose, debug;   // DeepSpeed's keys of the same names
} CommsLoggerArgs;

typedef struct CommsLogger CommsLogger;

// NULL when a->ops is 0. log: the trainer's (rank 0 prints through it).
CommsLogger* comms_logger_start(const CommsLoggerArgs* a, int world, TrainerLog* log);
void comms_logger_poll(CommsLogger* c);
// The summary after `step` updates, then timing stops and c is freed (NULL: nothing).
void comms_logger_end(CommsLogger* c, int64_t step);
