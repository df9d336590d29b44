/*
 * nvme_check.c: offload_optimizer nvme's preflight (nvme_check.h).
 */
#include "nvme_check.h"

#include <stdio.h>

#include "../base/common.h"
#include "../nvme/aio.h"
#include "planner.h"

int nvme_check_run(const TrainerArgs* a, char* note, size_t notelen, char* err, size_t errlen) {
    if (notelen) note[0] = 0;
    const ZeroOptions* z = &a->zero;
    if (!a->do_train || !z->nvme_path[0] || !z->offload_optimizer || z->stage < 1) return 0;
    PlanInput in;
    planner_input_from_args(a, &in);
    PlanRow r;
    if (planner_row(&in, z->stage, true, z->offload_param, z->ratio, &r, err, errlen)) return T5_EXIT_USAGE;
    const uint64_t need = r.nvme_file_bytes * (uint64_t)in.gpus_per_node;  // the ranks of a node share the folder
    const int rc = nvme_path_check(z->nvme_path, need, err, errlen);
    if (rc) return T5_EXIT_USAGE;
    snprintf(note, notelen, "nvme_path: %.2f GB free on %s, the swap file%s of Adam m, v need%s %.2f GB",
             (double)nvme_free_bytes(z->nvme_path) / 1e9, z->nvme_path, in.gpus_per_node > 1 ? "s" : "",
             in.gpus_per_node > 1 ? "" : "s", (double)need / 1e9);
    return 0;
}
