/*
 * step.h: AdamW over the partition's tensors (REFERENCE 4.5), internal to src/zero/: the arithmetic only. The
 * partition (part_step.c) decides which units step where and publishes their weights; nothing here calls back
 * into it.
 */
#pragma once
#include "part.h"

// The fused GPU AdamW plan over every segment of the GPU-stepped units (master, m, v, the accumulated gradient,
// the 16-bit destination zp_unit_x_dst; fp32 runs: none). NULL when no unit is GPU-stepped; *count its tensors.
AdamWPlan* zstep_adamw_plan(ZeroPart* P, int* count);
// The plan's step on stream s (a->d_inv_scale: 1/combined on the device).
void zstep_adamw_gpu(const ZeroPart* P, AdamWPlan* plan, const ZeroStepArgs* a, cudaStream_t s);
// One CPU unit's AdamW over its segments, all cores (the optimizer thread); ca: the step's CpuAdam.
void zstep_adamw_cpu_unit(ZeroPart* P, int u, const ZeroStepArgs* a, const CpuAdam* ca);
