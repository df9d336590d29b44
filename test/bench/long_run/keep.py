#!/usr/bin/env python3
"""keep.py: what a device call of the long-run comparison leaves in the repository (small, reviewable).

    tar xzf runs.tar.gz -C /tmp/call5
    python3 test/bench/long_run/keep.py --runs /tmp/call5/runs --dst test/bench/results/long_run_2026-11-27 \
        --call 5 --shared "1 H200; t5train's exact pair alone first, then 6 HF + 3 t5train at once" \
        [--settings fp16 bf16_hf_eager] [--rename exact_stage0=exact_stage0_call5] [--alone exact_stage0 ...]

For each <setting>/<side>_s<seed>/ under --runs it writes <dst>/<setting>/<side>_s<seed>/:
  trainer_log.jsonl  the logging and eval lines only (step, loss, grad_norm, learning_rate, loss_scale, skipped and
                     every eval_* key; t5train's overflow events), the per-step machine keys dropped
  run_summary.json   run.py's summary plus device_call, last_logged_step, completed (reached max_steps),
                     concurrent_on_gpu (--shared), alone_on_gpu (--alone), and for a failed run its error line
Existing folders of the same name are replaced.
"""
import argparse
import json
import os
import shutil

KEEP = {"step", "max_steps", "epoch", "loss", "grad_norm", "learning_rate", "loss_scale", "skipped", "event"}


def reduce_log(src, dst):
    last = 0
    with open(src) as f, open(dst, "w") as g:
        for line in f:
            j = json.loads(line)
            if "eval_loss" not in j and "loss" not in j and j.get("event") != "overflow":
                continue
            k = {key: v for key, v in j.items() if key in KEEP or key.startswith("eval_")}
            last = max(last, k.get("step") or 0)
            g.write(json.dumps(k) + "\n")
    return last


def error_line(run):
    p = os.path.join(run, "log_tail.txt")
    if not os.path.exists(p):
        return None
    with open(p, errors="replace") as f:
        lines = [ln.strip() for ln in f if "Error" in ln or "Exception" in ln or "error:" in ln]
    return lines[-1][:300] if lines else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--call", type=int, required=True)
    ap.add_argument("--shared", required=True, help="what shared the GPU in that call, in words")
    ap.add_argument("--settings", nargs="*", default=None, help="only these settings (default: all)")
    ap.add_argument("--rename", nargs="*", default=[], help="OLD=NEW setting folder names")
    ap.add_argument("--alone", nargs="*", default=[],
                    help="settings whose runs had the GPU to themselves; SETTING/SIDE for one side's runs only")
    a = ap.parse_args()
    rename = dict(r.split("=", 1) for r in a.rename)
    for setting in sorted(os.listdir(a.runs)):
        if a.settings is not None and setting not in a.settings:
            continue
        for run in sorted(os.listdir(os.path.join(a.runs, setting))):
            src = os.path.join(a.runs, setting, run)
            if not os.path.exists(os.path.join(src, "trainer_log.jsonl")):
                continue
            dst = os.path.join(a.dst, rename.get(setting, setting), run)
            shutil.rmtree(dst, ignore_errors=True)
            os.makedirs(dst)
            last = reduce_log(os.path.join(src, "trainer_log.jsonl"), os.path.join(dst, "trainer_log.jsonl"))
            sm = {}
            if os.path.exists(os.path.join(src, "run_summary.json")):
                with open(os.path.join(src, "run_summary.json")) as f:
                    sm = json.load(f)
            max_steps = sm.get("max_steps", 3000)
            sm.update(device_call=a.call, last_logged_step=last, completed=last >= max_steps,
                      concurrent_on_gpu=f"call {a.call}: {a.shared}", alone_on_gpu=setting in a.alone
                      or f"{setting}/{run.split('_s')[0]}" in a.alone
                      or (sm.get("other_runs_on_its_gpus_at_start") == 0 and sm.get("other_runs_on_its_gpus_at_end") == 0))
            if (sm.get("rc") or 0) > 0:
                sm["error"] = error_line(src)
            with open(os.path.join(dst, "run_summary.json"), "w") as f:
                json.dump(sm, f, indent=1, default=str)
            print(f"keep.py: {setting}/{run} -> {dst} (to step {last}{', rc ' + str(sm.get('rc')) if sm.get('rc') else ''})")


if __name__ == "__main__":
    main()
