#!/usr/bin/env python3
"""run.py: runs settings of the long-run comparison (issue 27) on the device, both sides, several seeds.

    python3 test/bench/long_run/run.py --bin ./t5train --data .devdata/long_run --init /tmp/lr/init \
        --work /tmp/lr/runs --settings fp32 bf16 --seeds 1 2 3 --t5_jobs 1 --hf_jobs 6

For each (setting, seed, side) it writes <work>/<setting>/<side>_s<seed>/: the side's trainer_log.jsonl (t5train
writes its own; hf_side.py writes the same line format), log.txt (stdout + stderr) and run_summary.json (the
wall-clock measured here around the whole process, evaluation included; the side's train_runtime and
train_loss; fp16 skipped steps: t5train's overflow events, DeepSpeed's engine.skipped_steps; the number of
jobs that shared the GPU while it ran). t5train runs go through one pool of --t5_jobs and HF runs through
another of --hf_jobs at the same time, so runs share the GPU unless both pools are 1 and --serial is given.
With --gpus N (N > 1: a machine with several GPUs) each run takes the setting's number of GPUs with the fewest runs
on them, counted in the file --gpu_load (shared by the two run.py processes device.sh starts, under a lock), and
sees only those (CUDA_VISIBLE_DEVICES); run_summary.json names them and the most other runs on one of them at the
run's start and at its end.
Settings and DeepSpeed configs: settings.py. Prints one line per finished run and exits 1 if any failed.
"""
import argparse
import concurrent.futures as cf
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import settings as S  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_running = {"n": 0, "max": 0}
_port = [29600]


def common_args(s, seed, data, init, out, tok_for):
    task = s["task"]
    a = ["--model_name_or_path", os.path.join(init, f"{s['shape']}_s{seed}"),
         "--tokenizer_name", tok_for,
         "--train_file", os.path.join(data, f"task_{task}_train.jsonl" if task else "train.jsonl"),
         "--validation_file", os.path.join(data, f"task_{task}_validation.jsonl" if task else "validation.jsonl"),
         "--source_lang", "en", "--target_lang", "ro", "--source_prefix", s["prefix"],
         "--max_source_length", str(s["max_source_length"]), "--max_target_length", str(s["max_target_length"]),
         "--per_device_train_batch_size", str(s["batch"]), "--gradient_accumulation_steps", str(s["ga"]),
         "--per_device_eval_batch_size", str(s["eval_batch"]), "--do_train", "--do_eval",
         "--max_steps", str(s["max_steps"]), "--learning_rate", str(s["lr"]), "--warmup_steps", str(s["warmup"]),
         "--logging_steps", str(s["logging_steps"]), "--eval_strategy", "steps", "--eval_steps", str(s["eval_steps"]),
         "--save_strategy", "no", "--seed", str(seed), "--output_dir", out]
    if s["precision"] in ("fp16", "bf16"):
        a.append("--" + s["precision"])
    if s["ds"]:
        a += ["--deepspeed", os.path.join(os.path.dirname(out), "..", "ds_" + s["ds"] + ".json")]
    if s["generate"]:
        a += ["--predict_with_generate", "--generation_max_length", str(s["max_target_length"])]
    if s["max_eval_samples"]:
        a += ["--max_eval_samples", str(s["max_eval_samples"])]
    if s["max_train_samples"]:
        a += ["--max_train_samples", str(s["max_train_samples"])]
    if s["optim"] != "adamw_torch":
        a += ["--optim", s["optim"]]
    if s["dropout"] is not None:
        a += ["--dropout_rate", str(s["dropout"])]
    return a


def command(side, s, seed, a, out):
    tok = os.path.join(a.data, "tokenizer")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if side == "t5train":
        cmd = [a.bin] + common_args(s, seed, a.data, a.init, out, os.path.join(tok, "spiece.model"))
        cmd += ["--overwrite_output_dir"] + list(s["t5_args"])
        if s["gpus"] > 1:
            cmd += ["--num_gpus", str(s["gpus"])]
        return cmd, env
    args = common_args(s, seed, a.data, a.init, out, tok) + ["--report_to", "none", "--disable_tqdm", "true"]
    args += list(s["hf_args"])
    env.setdefault("OMP_NUM_THREADS", "4")  # several HF runs share the host's cores
    with _lock:
        _port[0] += 1
        port = _port[0]
    script = os.path.join(HERE, "hf_side.py")
    if s["gpus"] > 1:
        return ["torchrun", f"--nproc_per_node={s['gpus']}", f"--master_port={port}", script] + args, env
    if s["ds"]:  # one process, no launcher: the variables DeepSpeed's init_distributed reads
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return [sys.executable, script] + args, env


def t5train_summary(out):
    sm = {}
    for name in ("train_results.json", "all_results.json"):
        p = os.path.join(out, name)
        if os.path.exists(p):
            with open(p) as f:
                sm.update(json.load(f))
    overflow = 0
    p = os.path.join(out, "trainer_log.jsonl")
    if os.path.exists(p):
        with open(p) as f:
            for line in f:
                if '"overflow"' in line and json.loads(line).get("event") == "overflow":
                    overflow += 1
    sm["skipped_steps"] = overflow
    return sm


@contextlib.contextmanager
def _gpu_table(path, n):
    """The runs on each GPU, read and written under an exclusive lock of PATH (a JSON list of N counts)."""
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read()
        load = json.loads(text) if text.strip() else [0] * n
        yield load
        f.seek(0)
        f.truncate()
        f.write(json.dumps(load))
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)


def take_gpus(a, k):
    """The K least-loaded GPUs (lowest index first on ties) and the most runs already on one of them."""
    with _gpu_table(a.gpu_load, a.gpus) as load:
        ids = sorted(range(a.gpus), key=lambda g: (load[g], g))[:k]
        busy = max(load[g] for g in ids)
        for g in ids:
            load[g] += 1
    return ids, busy


def give_gpus(a, ids):
    """Gives the GPUs back; returns the most other runs on one of them just before."""
    with _gpu_table(a.gpu_load, a.gpus) as load:
        others = max(load[g] for g in ids) - 1
        for g in ids:
            load[g] -= 1
    return others


def run_one(side, s, seed, a):
    out = os.path.join(a.work, s["name"], f"{side}_s{seed}")
    os.makedirs(out, exist_ok=True)
    cmd, env = command(side, s, seed, a, out)
    gpu_ids, gpu_busy, gpu_busy_end = [], 0, 0
    if a.gpus > 1:
        gpu_ids, gpu_busy = take_gpus(a, min(s["gpus"], a.gpus))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_ids))
    with _lock:
        _running["n"] += 1
        _running["max"] = max(_running["max"], _running["n"])
        shared = _running["n"]
    t0 = time.time()
    with open(os.path.join(out, "log.txt"), "w") as log:
        log.write(("CUDA_VISIBLE_DEVICES=" + env["CUDA_VISIBLE_DEVICES"] + " " if gpu_ids else "") + " ".join(cmd) + "\n")
        log.flush()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    wall = time.time() - t0
    if gpu_ids:
        gpu_busy_end = give_gpus(a, gpu_ids)
    with _lock:
        shared = max(shared, _running["n"])
        _running["n"] -= 1
    sm = {}
    p = os.path.join(out, "run_summary.json")
    if side == "hf" and os.path.exists(p):
        with open(p) as f:
            sm = json.load(f)
    elif side == "t5train":
        sm = t5train_summary(out)
    sm.update(rc=rc, wall_s_driver=wall, jobs_sharing_gpu_at_most=shared, setting=s["name"], side=side, seed=seed)
    if gpu_ids:  # on a machine with several GPUs: which, and how many runs were on them when this one started
        sm.update(gpus_used=gpu_ids, other_runs_on_its_gpus_at_start=gpu_busy, other_runs_on_its_gpus_at_end=gpu_busy_end)
    steps = s["max_steps"] * s["batch"] * s["ga"] * s["gpus"]
    sm["samples_per_s_end_to_end_driver"] = steps / wall
    with open(p, "w") as f:
        json.dump(sm, f, indent=1, default=str)
    print(f"[{time.strftime('%H:%M:%S')}] {s['name']:22s} {side:8s} s{seed} rc={rc} wall {wall:7.1f} s "
          f"train_loss {sm.get('train_loss')} skipped {sm.get('skipped_steps')}", flush=True)
    return rc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--settings", nargs="+", required=True, help="NAME or NAME:SEED[,SEED...]")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--sides", nargs="+", default=["t5train", "hf"])
    ap.add_argument("--t5_jobs", type=int, default=1)
    ap.add_argument("--hf_jobs", type=int, default=6)
    ap.add_argument("--max_steps", type=int, default=None, help="override (smoke runs; device.sh MAX_STEPS)")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs of the machine (>1: each run takes the least loaded)")
    ap.add_argument("--gpu_load", default=None, help="the runs-per-GPU file shared by run.py processes")
    a = ap.parse_args()
    if a.gpus > 1 and not a.gpu_load:
        a.gpu_load = os.path.join(a.work, "gpu_load.json")
    a.bin = os.path.abspath(a.bin)
    os.makedirs(a.work, exist_ok=True)
    for name, cfg in S.DS_CONFIGS.items():
        with open(os.path.join(a.work, f"ds_{name}.json"), "w") as f:
            json.dump(cfg, f, indent=1)
    jobs = {"t5train": [], "hf": []}
    for spec in a.settings:  # NAME or NAME:SEED[,SEED...] (those seeds only)
        name, _, only = spec.partition(":")
        s = S.setting(name)
        if a.max_steps:
            s["max_steps"] = a.max_steps
            s["eval_steps"] = min(s["eval_steps"], a.max_steps)
        for seed in ([int(x) for x in only.split(",")] if only else a.seeds):
            for side in s["sides"]:
                if side in a.sides:
                    jobs[side].append((side, s, seed))
    pools = {side: cf.ThreadPoolExecutor(max_workers=n) for side, n in (("t5train", a.t5_jobs), ("hf", a.hf_jobs))}
    futs = [pools[side].submit(run_one, side, s, seed, a) for side in jobs for (side, s, seed) in jobs[side]]
    bad = sum(1 for f in futs if f.result() != 0)
    print(f"run.py: {len(futs) - bad} runs succeeded, {bad} failed; at most {_running['max']} at once")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
