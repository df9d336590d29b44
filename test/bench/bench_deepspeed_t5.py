#!/usr/bin/env python3
"""DeepSpeed side of the t5train-vs-DeepSpeed benchmark (issue 13, "Benchmark beside DeepSpeed").

HF Seq2SeqTrainer + DeepSpeed ZeRO-3 with CPU offload of optimizer and parameters
(configs/ds_config_zero3.json, the homework config) on a RANDOM-init t5-3b-shaped model,
synthetic fixed-length batches (128 source + 128 target tokens, ids uniform in [2, 32000)),
fp16, gradient_accumulation_steps 1, lr 5e-5, logging every step.

Launch (one GPU):
    BENCH_T0=$(date +%s.%N) deepspeed --num_gpus=1 test/bench/bench_deepspeed_t5.py --batch 1 --steps 8
several GPUs (issue 18, the same per-GPU batch; --ds_config picks the stage):
    deepspeed --num_gpus=8 test/bench/bench_deepspeed_t5.py --batch 8 --steps 12 --ds_config DS.json
or without the launcher:
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \
        python3 test/bench/bench_deepspeed_t5.py --batch 1 --steps 8

Output: JSON lines on stdout, each starting with {"bench": "deepspeed_t5", ...}:
  "kind": "env"    versions, GPU, host
  Several ranks (WORLD_SIZE > 1): each rank gets batch x steps samples of its own; "step" lines come from rank 0
  only, every rank writes its "result" (its own GPU and host memory) with "rank" and "world_size", and
  samples_per_s counts every rank's samples (batch x world_size per step).
  "kind": "step"   one per optimizer step: wall time between on_step_begin and on_step_end (both after
                   torch.cuda.synchronize), end-to-end interval since the previous step's end, loss scale,
                   whether DeepSpeed skipped the step (fp16 overflow)
  "kind": "result" time to the end of the first optimizer step (from process start, from script start,
                   and from BENCH_T0 if the caller set it), median s/step over the steps after the first 2,
                   samples/s, GPU peak allocated/reserved, host VmHWM, losses
Everything is measured; nothing is estimated.

Caveat (seen on the device, 2026-11-25): with the config's fp16 initial_scale_power 16, every one of 8 steps
overflowed (grad_norm inf, loss scale 65536 -> 512) and DeepSpeed skipped the optimizer step, so those step
times hold forward, backward, gradient offload and the overflow check but no CPU Adam and no parameter
update. "skipped_steps" and "median_s_per_step_applied" (steps that did update) say which; use more --steps
or a lower --initial_scale_power to time applied steps.

--no-deepspeed runs the same loop without DeepSpeed (a CPU smoke test of the script with a tiny model:
--tiny --no-deepspeed --no-fp16).
"""
import argparse
import json
import os
import statistics
import sys
import time

T_SCRIPT = time.time()

BENCH = "deepspeed_t5"


def process_start_epoch():
    """Wall-clock time at which this process started (from /proc), or None."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        # field 22 (starttime, clock ticks since boot); fields after the ')' of comm
        fields = stat[stat.rindex(")") + 2:].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        hz = os.sysconf("SC_CLK_TCK")
        return time.time() - uptime + start_ticks / hz
    except Exception:
        return None


T_PROC = process_start_epoch()


def proc_status_gib(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024 / 2**30  # kB
    except Exception:
        pass
    return None


def meminfo_gib(key):
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024 / 2**30
    except Exception:
        pass
    return None


RANK = int(os.environ.get("RANK", 0))
WORLD = int(os.environ.get("WORLD_SIZE", 1))


def emit(kind, **kw):
    rec = {"bench": BENCH, "kind": kind}
    if WORLD > 1:
        rec.update(rank=RANK, world_size=WORLD)
    rec.update(kw)
    print(json.dumps(rec, sort_keys=False), flush=True)


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=1, help="per_device_train_batch_size (1 or 8)")
    p.add_argument("--steps", type=int, default=12, help="optimizer steps (max_steps)")
    p.add_argument("--src_len", type=int, default=128)
    p.add_argument("--tgt_len", type=int, default=128)
    p.add_argument("--ds_config", default=os.path.join(repo, "configs", "ds_config_zero3.json"))
    p.add_argument("--output_dir", default="/tmp/bench_deepspeed_t5_out")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--warmup_steps", type=int, default=1,
                   help="HF warmup_steps, which fills the config's WarmupLR warmup_num_steps; DeepSpeed 0.19.8 "
                        "refuses 0 (HF's default: 'warmup_num_steps must be a positive integer, got 0')")
    p.add_argument("--initial_scale_power", type=int, default=None,
                   help="override fp16.initial_scale_power of --ds_config (a copy is written next to --output_dir); "
                        "with the config's 16, a random-init t5-3b overflows for at least 8 steps and DeepSpeed "
                        "skips every optimizer step (so no CPU Adam runs)")
    p.add_argument("--skip_first", type=int, default=2, help="steps left out of the median")
    p.add_argument("--fp16", dest="fp16", action="store_true", default=True)
    p.add_argument("--no-fp16", dest="fp16", action="store_false")
    p.add_argument("--no-deepspeed", dest="deepspeed", action="store_false", default=True)
    p.add_argument("--tiny", action="store_true", help="a 2-layer d_model 64 model (smoke test only)")
    p.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    return p.parse_args()


def t5_3b_config(tiny):
    from transformers import T5Config
    # t5-3b's shape, written out by hand (no download): relu feed-forward, tied embeddings.
    kw = dict(
        vocab_size=32128, d_model=1024, d_kv=128, d_ff=16384, num_layers=24, num_decoder_layers=24,
        num_heads=32, relative_attention_num_buckets=32, relative_attention_max_distance=128,
        dropout_rate=0.1, layer_norm_epsilon=1e-6, initializer_factor=1.0, feed_forward_proj="relu",
        is_encoder_decoder=True, use_cache=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        tie_word_embeddings=True,
    )
    if tiny:
        kw.update(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4)
    return T5Config(**kw)


def main():
    args = parse_args()
    import torch
    import transformers
    from transformers import (AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments,
                              TrainerCallback)

    cuda = torch.cuda.is_available()
    try:
        import deepspeed
        ds_version = deepspeed.__version__
    except Exception as e:  # reported, and fatal only when DeepSpeed is asked for
        ds_version = None
        if args.deepspeed:
            raise
    t_imports = time.time()

    emit("env", batch=args.batch, steps=args.steps, src_len=args.src_len, tgt_len=args.tgt_len,
         fp16=args.fp16, deepspeed=args.deepspeed, ds_config=os.path.relpath(args.ds_config) if args.deepspeed else None,
         deepspeed_version=ds_version, torch=torch.__version__, transformers=transformers.__version__,
         cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0) if cuda else None,
         gpu_count=torch.cuda.device_count() if cuda else 0, cpu_count=os.cpu_count(),
         host_memtotal_gib=meminfo_gib("MemTotal"), python=sys.version.split()[0],
         imports_s=round(t_imports - T_SCRIPT, 3), tiny=args.tiny)

    ds_config = args.ds_config
    if args.deepspeed and args.initial_scale_power is not None:
        with open(ds_config) as f:
            cfg = json.load(f)
        cfg.setdefault("fp16", {})["initial_scale_power"] = args.initial_scale_power
        os.makedirs(args.output_dir, exist_ok=True)
        ds_config = os.path.join(args.output_dir, f"ds_config_bench_rank{RANK}.json")  # one per rank: no torn reads
        with open(ds_config, "w") as f:
            json.dump(cfg, f, indent=2)

    # TrainingArguments first: with deepspeed= it fills the config's "auto" values and registers the
    # config, so the model built next is constructed under deepspeed.zero.Init (partitioned and
    # offloaded as it is created), as from_pretrained does in run_translation.py.
    targs = Seq2SeqTrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        learning_rate=5e-5,
        warmup_steps=args.warmup_steps,
        max_steps=args.steps,
        logging_steps=1,
        logging_first_step=True,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        fp16=args.fp16,
        deepspeed=ds_config if args.deepspeed else None,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        seed=args.seed,
        disable_tqdm=True,
        use_cpu=not cuda,
    )

    config = t5_3b_config(args.tiny)
    t_model0 = time.time()
    model = AutoModelForSeq2SeqLM.from_config(config)  # random init
    t_model1 = time.time()
    n_params = config.vocab_size * config.d_model  # tied embedding counted once
    try:
        zero3 = args.deepspeed and hasattr(next(model.parameters()), "ds_numel")
        n_params = sum((p.ds_numel if hasattr(p, "ds_numel") else p.numel()) for p in model.parameters())
    except Exception:
        zero3 = False

    class SyntheticSeq2Seq(torch.utils.data.Dataset):
        """Fixed-length random batches: ids and labels uniform in [2, 32000), no padding."""

        def __init__(self, n, src_len, tgt_len, seed):
            g = torch.Generator().manual_seed(seed)
            self.src = torch.randint(2, 32000, (n, src_len), generator=g, dtype=torch.long)
            self.tgt = torch.randint(2, 32000, (n, tgt_len), generator=g, dtype=torch.long)

        def __len__(self):
            return self.src.shape[0]

        def __getitem__(self, i):
            return {"input_ids": self.src[i], "attention_mask": torch.ones_like(self.src[i]),
                    "labels": self.tgt[i]}

    # the Trainer's sampler gives each of WORLD ranks len/WORLD samples: batch x steps per rank
    train_ds = SyntheticSeq2Seq(args.batch * args.steps * WORLD, args.src_len, args.tgt_len, args.seed)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.trainer = None
            self.steps = []
            self.t_begin = None
            self.t_prev_end = None
            self.t_first_end = None
            self.t_train_begin = None
            self.skipped_prev = 0

        def on_train_begin(self, args_, state, control, **kw):
            sync()
            self.t_train_begin = time.time()
            self.t_prev_end = self.t_train_begin

        def on_step_begin(self, args_, state, control, **kw):
            sync()
            self.t_begin = time.time()

        def on_step_end(self, args_, state, control, **kw):
            sync()
            t = time.time()
            rec = {"step": state.global_step, "step_s": round(t - self.t_begin, 4),
                   "interval_s": round(t - self.t_prev_end, 4)}
            engine = getattr(self.trainer, "deepspeed", None) if self.trainer is not None else None
            if engine is not None:
                skipped = getattr(engine, "skipped_steps", None)
                if skipped is not None:
                    rec["skipped"] = bool(skipped > self.skipped_prev)
                    self.skipped_prev = skipped
                opt = getattr(engine, "optimizer", None)
                scale = getattr(opt, "loss_scale", None) if opt is not None else None
                if scale is not None:
                    try:
                        rec["loss_scale"] = float(scale)
                    except Exception:
                        pass
            if cuda:
                rec["gpu_alloc_gib"] = round(torch.cuda.memory_allocated() / 2**30, 3)
            rec["host_rss_gib"] = round(proc_status_gib("VmRSS") or 0.0, 3)
            if self.t_first_end is None:
                self.t_first_end = t
            self.t_prev_end = t
            self.steps.append(rec)
            if RANK == 0:
                emit("step", **rec)

    timer = StepTimer()
    trainer = Seq2SeqTrainer(model=model, args=targs, train_dataset=train_ds, callbacks=[timer])
    timer.trainer = trainer
    trainer.train()
    sync()
    t_end = time.time()

    step_s = [s["step_s"] for s in timer.steps]
    timed = step_s[args.skip_first:] if len(step_s) > args.skip_first else step_s
    med = statistics.median(timed) if timed else None
    intervals = [s["interval_s"] for s in timer.steps][args.skip_first:]
    applied = [s["step_s"] for s in timer.steps[args.skip_first:] if s.get("skipped") is False]
    med_applied = statistics.median(applied) if applied else None
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    t0_env = os.environ.get("BENCH_T0")
    res = {
        "batch": args.batch, "steps": len(step_s), "src_len": args.src_len, "tgt_len": args.tgt_len,
        "fp16": args.fp16, "warmup_steps": args.warmup_steps, "deepspeed_version": ds_version, "zero3_partitioned": bool(zero3),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "params": n_params,
        "first_step_from_process_start_s": round(timer.t_first_end - T_PROC, 2) if T_PROC else None,
        "first_step_from_script_start_s": round(timer.t_first_end - T_SCRIPT, 2),
        "first_step_from_launch_s": round(timer.t_first_end - float(t0_env), 2) if t0_env else None,
        "model_init_s": round(t_model1 - t_model0, 2),
        "train_begin_from_script_start_s": round(timer.t_train_begin - T_SCRIPT, 2),
        "first_step_s": step_s[0] if step_s else None,
        "median_s_per_step": round(med, 4) if med is not None else None,
        "median_over_steps": f"{args.skip_first + 1}..{len(step_s)}",
        "median_interval_s": round(statistics.median(intervals), 4) if intervals else None,
        "samples_per_s": round(args.batch * WORLD / med, 4) if med else None,
        "median_s_per_step_applied": round(med_applied, 4) if med_applied is not None else None,
        "applied_steps_in_median": len(applied),
        "initial_scale_power": args.initial_scale_power,
        "step_s": step_s,
        "skipped_steps": [s["step"] for s in timer.steps if s.get("skipped")],
        "losses": losses,
        "gpu_max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None,
        "gpu_max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 3) if cuda else None,
        "host_peak_rss_gib": round(proc_status_gib("VmHWM") or 0.0, 3),
        "host_memtotal_gib": round(meminfo_gib("MemTotal") or 0.0, 1),
        "total_s_from_script_start": round(t_end - T_SCRIPT, 2),
    }
    emit("result", **res)


if __name__ == "__main__":
    main()
