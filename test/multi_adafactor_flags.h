/*
 * multi_adafactor_flags.h: the DeepSpeed JSON of test_gpu_multi_adafactor.c's test_stage2_hf_defaults_vs_stage0
 * (ZeRO-2 on 2 GPUs, DeepSpeed's default buckets, HF Trainer's Adafactor options), which is compared against stage 0
 * on one GPU (no DeepSpeed section: clipped at max_grad_norm 1). Shared with test_config_adafactor.c, which checks on
 * the CPU that both sides resolve to the same clip norm (config_clip_norm).
 *
 * With a DeepSpeed section the clip norm is its gradient_clipping, absent = 0 = off (DeepSpeed's default; HF's
 * Trainer fills it from max_grad_norm only when it says "auto"). The first version of this JSON, like the one
 * scripts/device/ds_adafactor_zero2.sh's run c used on 4 x H200, had no gradient_clipping: the 2-GPU run did not
 * clip while the one-GPU runs did, which Adafactor's first update cannot show (a common factor of the gradient
 * cancels in it) and every later update does (test_cpu_adafactor.c test_clip_shows_from_update_2).
 * No spaces: the CPU test splits its command line on spaces without a shell.
 */
#pragma once

#define S2HF_DS_JSON "{\"zero_optimization\":{\"stage\":2},\"gradient_clipping\":\"auto\"}"
