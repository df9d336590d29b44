/*
 * autotune.h: DeepSpeed's `autotuning` section mapped onto the memory planner (docs/config.md "autotuning").
 *
 * DeepSpeed's autotuner launches trial runs (stages x micro-batches), measures each for a few steps and writes the
 * best one's config to results_dir/ds_config_optimal.json, its command to cmd_optimal.txt and a table to
 * summary.txt. t5train predicts instead: "enabled": true makes the run plan itself as `--zero_plan auto` does (the
 * ZeRO stage, the offloads and the micro-batch with the most predicted samples/s, src/cli/planner.h), with the
 * micro-batch held within min/max_train_micro_batch_size_per_gpu and min/max_train_batch_size (the global batch:
 * micro x gradient_accumulation_steps x world size); the run then trains with that plan (DeepSpeed's trial mode
 * stops after end_profile_step) and rank 0 writes the three files, predicted numbers, not measured ones.
 */
#pragma once
#include <stddef.h>

#include "config.h"
#include "planner.h"

// config_resolve: with autotuning enabled, zero_plan "auto" and a note; the bounds checked (exit 2 with the
// reason), metric "latency" refused. 0 or T5_EXIT_USAGE. No-op when autotuning is off.
int autotune_resolve(RunConfig* c, char* err, size_t errlen);
// planner_search_from_config: the micro-batch searched between the bounds (s->min_batch, s->max_batch).
void autotune_search(const RunConfig* raw, PlanSearch* s);
// The micro-batch bounds of a resolved config: [*lo, *hi]. 0, or -1 with a message (an empty range).
int autotune_bounds(const RunConfig* c, int* lo, int* hi, char* err, size_t errlen);
// run.c, after the plan: results_dir/ds_config_optimal.json (the resolved DeepSpeed config with the chosen batch,
// stage and offloads, the autotuning section removed), cmd_optimal.txt (argv with the optimal config and batch),
// summary.txt. 0 or T5_EXIT_FAILURE with err.
int autotune_write_results(const RunConfig* c, const ZeroOptions* zo, int batch, bool ckpt, double samples_s,
                           int argc, char** argv, char* err, size_t errlen);
