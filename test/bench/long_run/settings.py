"""settings.py: the settings of the long-run comparison (issue 27), shared by run.py and compare.py.

Every setting trains a t5-small-shaped model from the random init of make_init.py (the same folder on both
sides for a seed) for MAX_STEPS optimizer steps and evaluates every eval_steps. Values that are not listed
are the COMMON ones. "ds" names a DeepSpeed config (DS_CONFIGS): then both sides take it with --deepspeed
(the HF side through DeepSpeed 0.19.8) and the precision flag (--fp16) as users pass them.

How the learning rate and warm-up were chosen: docs/training_results.md section 4.
"""
import copy

MAX_STEPS = 3000

COMMON = dict(shape="v10", task=None, precision="fp32", ds=None, gpus=1, batch=32, ga=1,
              lr=5e-4, warmup=500, max_steps=MAX_STEPS, eval_steps=250, logging_steps=50, eval_batch=64,
              max_source_length=128, max_target_length=128, prefix="translate English to Romanian: ",
              generate=False, max_eval_samples=None, max_train_samples=None, dropout=None, sides=("t5train", "hf"), hf_args=(),
              t5train_from=None, optim="adamw_torch", t5_args=(), against="exact_stage0")

SETTINGS = {
    "fp32": {},
    "bf16": {"precision": "bf16"},
    # DeepSpeed 0.19.8 at stage 0 with fp16 never scales the loss in engine.backward (only ZeRO optimizers do) but
    # FP16_Optimizer.step divides the gradients by the loss scale: updates 65536x too small (DeepSpeed PR #8393,
    # open). Measured: docs/training_results.md section 4. The fp16 comparison therefore runs at stage 2:
    "fp16_stage0": {"precision": "fp16", "ds": "fp16_stage0"},
    "fp16": {"precision": "fp16", "ds": "zero2_no_offload"},
    # HF + DeepSpeed fp16 stops at steps 150-200 (finding 7: module.half()); HF's own AMP fp16 (autocast over fp32
    # weights, torch's GradScaler) against t5train's fp16 without a deepspeed section (the GradScaler's numbers:
    # 2^16, x2 after 2,000 clean steps, /2 on overflow); HF with the eager attention (finding 2)
    "fp16_amp": {"precision": "fp16", "hf_args": ("--attn_implementation", "eager")},
    # HF bf16 went NaN at steps 650-950 in 3 of 3 seeds with transformers' default attention (training_results.md
    # section 6); the same HF runs with the eager attention, against bf16's t5train runs, tell whether it is SDPA's
    "bf16_hf_eager": {"precision": "bf16", "sides": ("hf",), "t5train_from": "bf16",
                      "hf_args": ("--attn_implementation", "eager")},
    "ga4_bf16": {"precision": "bf16", "batch": 8, "ga": 4},
    # transformers 5.17's Trainer passes num_items_in_batch to T5, whose forward takes **kwargs but ignores it: the
    # micro-batch losses are then summed, not averaged (the gradient and the logged loss are 4x with accumulation 4,
    # Nx on N processes). The same HF runs with the Trainer's averaging (model_accepts_loss_kwargs False), against
    # ga4_bf16's t5train runs:
    "ga4_bf16_hf_mean": {"precision": "bf16", "batch": 8, "ga": 4, "sides": ("hf",), "t5train_from": "ga4_bf16",
                         "hf_args": ("--hf_model_accepts_loss_kwargs", "false")},
    "zero3_offload_fp16": {"precision": "fp16", "ds": "zero3_offload"},
    "zero2_2gpu_fp16": {"precision": "fp16", "ds": "zero2_offload", "gpus": 2, "batch": 16},
    # HF + DeepSpeed fp16 stops at steps 150-200 (finding 7): the 2-GPU comparison in bf16, HF eager (finding 2)
    "zero2_2gpu_bf16": {"precision": "bf16", "ds": "zero2_offload", "gpus": 2, "batch": 16,
                        "hf_args": ("--attn_implementation", "eager")},
    # HF with the eager attention: with its default SDPA, HF bf16 goes NaN (training_results.md section 6, finding 2)
    "v11_bf16": {"precision": "bf16", "shape": "v11", "hf_args": ("--attn_implementation", "eager")},
    # the learnable tasks (make_data.py): generation + BLEU on the first 500 newsdev2016 sources at every eval
    "task_reverse_bf16": {"precision": "bf16", "task": "reverse_codes", "prefix": "encode: ", "eval_steps": 500,
                          "generate": True, "max_eval_samples": 500},
    "task_codes_bf16": {"precision": "bf16", "task": "codes", "prefix": "encode: ", "eval_steps": 500,
                        "generate": True, "max_eval_samples": 500},
    "task_swap_bf16": {"precision": "bf16", "task": "swap_codes", "prefix": "encode: ", "eval_steps": 500,
                       "generate": True, "max_eval_samples": 500},
    # t5train against itself, fp32 without dropout (the ranks' dropout streams differ from one GPU's): the
    # same global batch of 32 on stage 0 and on stage 3 with both offloads; the DeepSpeed configs without their
    # "scheduler" section, so that every run has the HF linear schedule of exact_stage0. 2 GPUs x 16 at stage 2
    # averages the two ranks' mean token losses (DeepSpeed's data parallelism), which is one GPU's 16 x accumulation
    # 2 (the mean of two micro-batch means), not one batch of 32 (the mean over all its tokens): its "against" is
    # exact_stage0_ga2. The call of 2026-11-27 (call 8) compared it with exact_stage0: 1.0e-5 apart at step 3,000.
    "exact_stage0": {"dropout": 0.0, "sides": ("t5train",)},
    "exact_zero3_offload": {"dropout": 0.0, "ds": "zero3_offload_hf_schedule", "sides": ("t5train",)},
    "exact_stage0_ga2": {"dropout": 0.0, "batch": 16, "ga": 2, "sides": ("t5train",), "against": None},
    "exact_2gpu_stage2": {"dropout": 0.0, "ds": "zero2_no_offload_hf_schedule", "gpus": 2, "batch": 16,
                          "sides": ("t5train",), "against": "exact_stage0_ga2"},
    # Since f7c0dac the ranks take whole batches as HF's Trainer does (data/dataloader.h), so 2 GPUs x 16 read one
    # GPU's 16 x accumulation 2 micro-batches, except where an epoch ends inside a global batch of 32 (2 GPUs
    # complete it from the order's start, one GPU's last batch is short): 22,016 = 688 x 32 pairs avoid that
    "exact_stage0_ga2_div": {"dropout": 0.0, "batch": 16, "ga": 2, "sides": ("t5train",), "against": None,
                             "max_train_samples": 22016},
    "exact_2gpu_stage2_div": {"dropout": 0.0, "ds": "zero2_no_offload_hf_schedule", "gpus": 2, "batch": 16,
                              "sides": ("t5train",), "against": "exact_stage0_ga2_div", "max_train_samples": 22016},
    # docs/training_results.md finding 16: the _div pair kept its gradient norms equal to step 1,050 and parted by
    # step 1,100 (session 7). The same pair logged at every step (max_steps unchanged: the schedule decays over it)
    # names the first step that differs; logging does not change training, so its norms are the _div runs'.
    "exact_stage0_ga2_div_fine": {"dropout": 0.0, "batch": 16, "ga": 2, "sides": ("t5train",), "against": None,
                                  "max_train_samples": 22016, "logging_steps": 1},
    "exact_2gpu_stage2_div_fine": {"dropout": 0.0, "ds": "zero2_no_offload_hf_schedule", "gpus": 2, "batch": 16,
                                   "sides": ("t5train",), "against": "exact_stage0_ga2_div_fine",
                                   "max_train_samples": 22016, "logging_steps": 1},
}

# The task search (t5train alone; docs/training_results.md section 6): at lr 5e-4 no task was learned in 3,000
# steps. T5's init (embeddings N(0, 1), no 1/sqrt(d) in attention) was made for Adafactor, whose updates scale with
# the parameter, so the search tries larger AdamW rates and Adafactor; "short_" tasks cut each sentence into
# pieces of at most 8 words (make_data.py). Names: sweep_<task>_<optim>_<lr>.
_TASK = {"precision": "bf16", "prefix": "encode: ", "eval_steps": 500, "generate": True, "max_eval_samples": 500,
         "sides": ("t5train",)}
for _task, _optim, _lr in [("codes", "adamw", 1e-3), ("codes", "adamw", 2e-3), ("codes", "adamw", 3e-3),
                           ("codes", "adafactor", 1e-3), ("codes", "adafactor", 3e-3),
                           ("reverse_codes", "adamw", 2e-3), ("reverse_codes", "adafactor", 3e-3),
                           ("swap_codes", "adamw", 2e-3), ("short_reverse_codes", "adamw", 2e-3),
                           ("short_reverse_codes", "adafactor", 3e-3)]:
    SETTINGS[f"sweep_{_task}_{_optim}_{_lr:g}"] = dict(_TASK, task=_task, lr=_lr,
                                                        optim="adafactor" if _optim == "adafactor" else "adamw_torch")

# T5's own recipe: Adafactor with scale_parameter and relative_step (updates relative to each parameter's RMS, lr
# min(1e-2, 1/sqrt(step))), as transformers' Adafactor docs give it for T5; learning_rate and warm-up are then not
# used on either side. A CPU control (transformers' T5, d_model 128, 2 layers, task on 3-word pieces) went from
# loss 5.30 / 4.26 at steps 100 / 200 with AdamW 1e-3 to 3.23 / 2.76 with it (training_results.md section 6).
_T5_RECIPE = {"optim": "adafactor", "t5_args": ("--adafactor_scale_parameter", "true", "--adafactor_relative_step",
                                                "true"), "hf_args": ("--hf_adafactor_t5", "true", "--attn_implementation", "eager")}  # (bf16: HF's SDPA NaN, finding 2)
for _task in ("codes", "reverse_codes", "short_reverse_codes"):
    SETTINGS[f"task_{_task}_t5recipe"] = dict(_TASK, task=_task, sides=("t5train", "hf"), **_T5_RECIPE)
# the same run continued to 5,000 steps (the recipe's rate does not depend on max_steps, so its first 3,000 steps
# are task_codes_t5recipe's): at 3,000 steps t5train's BLEU was 86-88 and still rising (training_results.md)
SETTINGS["task_codes_t5recipe_5k"] = dict(SETTINGS["task_codes_t5recipe"], max_steps=5000)
# The recipe's step size is min(1e-2, 1/sqrt(step)): 1e-2 for the first 10,000 steps, never decayed, and BLEU
# plateaued at 89-90 from step 3,500. The same relative updates (scale_parameter) under the linear schedule, decayed
# to 0 at max_steps (t5train --adafactor_scale_parameter true, HF: transformers' Adafactor with scale_parameter and
# lr, the Trainer's linear schedule); names task_codes_t5lin_<lr>[_<steps>][_d0 (dropout 0)]
_T5_LIN = {"optim": "adafactor", "warmup": 100, "t5_args": ("--adafactor_scale_parameter", "true"),
           "hf_args": ("--hf_adafactor_scale", "true", "--attn_implementation", "eager")}
for _lr, _steps, _drop in [(1e-2, 3000, None), (2e-2, 3000, None), (1e-2, 4000, None), (1e-2, 3000, 0.0),
                           (2e-2, 4000, None)]:
    SETTINGS[f"task_codes_t5lin_{_lr:g}" + (f"_{_steps // 1000}k" if _steps != MAX_STEPS else "")
             + ("_d0" if _drop == 0.0 else "")] = dict(_TASK, task="codes", sides=("t5train", "hf"), lr=_lr,
                                                       max_steps=_steps, dropout=_drop, **_T5_LIN)
SETTINGS["task_codes_t5recipe_d0"] = dict(SETTINGS["task_codes_t5recipe"], dropout=0.0)
# HF's side of task_codes_t5lin_0.01_4k (BLEU >= 90 on t5train's 3 seeds) in one 10-minute call: generation every
# 1,000 steps instead of 500 (HF's generation of 500 sources is the slow part); compared with t5train's runs of
# task_codes_t5lin_0.01_4k at steps 1,000-4,000 (the same runs: eval_steps does not change training)
SETTINGS["task_codes_t5lin_0.01_4k_hf"] = dict(SETTINGS["task_codes_t5lin_0.01_4k"], eval_steps=1000, sides=("hf",),
                                               t5train_from="task_codes_t5lin_0.01_4k")

_FP16 = {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
         "hysteresis": 2, "min_loss_scale": 1}
_OPT = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}
_SCHED = {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}}
_TAIL = {"gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
         "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False}
_BF16 = {"enabled": "auto"}


def _cfg(zero):
    c = {"fp16": dict(_FP16), "bf16": dict(_BF16), "optimizer": copy.deepcopy(_OPT), "scheduler": copy.deepcopy(_SCHED),
         "zero_optimization": zero}
    c.update(_TAIL)
    return c


# configs/ds_config_zero3.json and ds_config_zero2.json as users bring them (fp16 "auto", AdamW, WarmupLR), plus
# "bf16": {"enabled": "auto"}; fp16_stage0 is the same file at stage 0; zero2_no_offload drops the offload section
DS_CONFIGS = {
    "fp16_stage0": _cfg({"stage": 0}),
    "zero3_offload": _cfg({"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                           "offload_param": {"device": "cpu", "pin_memory": True}, "overlap_comm": True,
                           "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                           "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                           "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                           "stage3_gather_16bit_weights_on_model_save": True}),
    "zero2_offload": _cfg({"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                           "allgather_partitions": True, "allgather_bucket_size": 2e8, "overlap_comm": True,
                           "reduce_scatter": True, "reduce_bucket_size": "auto", "contiguous_gradients": True}),
    "zero2_no_offload": _cfg({"stage": 2, "allgather_partitions": True, "allgather_bucket_size": 2e8,
                              "overlap_comm": True, "reduce_scatter": True, "reduce_bucket_size": "auto",
                              "contiguous_gradients": True}),
}


for _name in ("zero3_offload", "zero2_no_offload"):
    DS_CONFIGS[_name + "_hf_schedule"] = {k: v for k, v in DS_CONFIGS[_name].items() if k != "scheduler"}


def setting(name):
    if name not in SETTINGS:
        raise SystemExit(f"unknown setting '{name}' (known: {', '.join(SETTINGS)})")
    s = dict(COMMON)
    s.update(SETTINGS[name])
    s["name"] = name
    return s
