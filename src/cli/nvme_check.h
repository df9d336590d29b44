/*
 * nvme_check.h: offload_optimizer nvme's preflight (issue 28 item 2): before anything is created, a dry run
 * included, nvme_path must be a folder with room for every local rank's swap file of Adam m, v (the engine's
 * estimate, src/zero/estimate.c). The engine checks again when it makes the file, and O_DIRECT only then.
 */
#pragma once
#include <stddef.h>

#include "../train/trainer.h"

// 0 (note: what was checked, "" when the run has no NVMe offload), or an exit status with the line in err
int nvme_check_run(const TrainerArgs* a, char* note, size_t notelen, char* err, size_t errlen);
