#!/usr/bin/env python3
"""compare.py: the long-run comparison's verdicts, table and pictures from the folders run.py wrote.

    python3 test/bench/long_run/compare.py --work RUNS [--work RUNS2 ...] --img docs/img/long_run \
        --json test/bench/results/long_run_<date>.json --md /tmp/long_run.md

For each setting with both sides (t5train, hf) and >= 2 seeds a side, at every eval step both sides logged:
  |mean t5train - mean HF| <= max(2 x pooled standard error, 1% of HF's mean)   (eval loss; issue 27)
with pooled SE = sqrt(sd_t^2 / n_t + sd_h^2 / n_h) (sd over seeds, ddof 1); the same for the final train loss (the
last logging window's mean loss, and the run's mean train_loss); fp16: the mean skipped steps within 2; with
eval_bleu (the learnable task): t5train's mean BLEU at the last step >= 90 and within 1.0 of HF's.
For the exact_* settings (t5train against itself): the largest relative difference of every logged train loss
and eval loss to its "against" setting's (exact_stage0, or exact_stage0_ga2 for 2 GPUs x 16), and whether every value
is bit-identical.
Wall-clock: each side's mean whole-run seconds (run.py's, evaluation included) and samples/s end to end, with the
number of jobs that shared the GPU. One PNG per setting (scripts/plot_loss.py). Exit 1 if a verdict fails.
"""
import argparse
import glob
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
sys.path.insert(0, HERE)
import plot_loss  # noqa: E402
import settings as S  # noqa: E402

SIDES = ("t5train", "hf")


def stats(v):
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else float("nan")
    return m, sd, len(v)


def verdict(t, h, rel=0.01):
    """t, h: per-seed values of the two sides -> dict with the rule of issue 27."""
    mt, st, nt = stats(t)
    mh, sh, nh = stats(h)
    se = math.sqrt(st ** 2 / nt + sh ** 2 / nh)
    bound = max(2 * se, rel * abs(mh))
    d = mt - mh
    return {"t5train_mean": mt, "t5train_sd": st, "hf_mean": mh, "hf_sd": sh, "diff": d, "pooled_se": se,
            "bound": bound, "ok": abs(d) <= bound}


def load_setting(folder):
    runs = {s: {} for s in SIDES}
    runs["failed"] = []
    for d in sorted(glob.glob(os.path.join(folder, "*_s*"))):
        side, seed = os.path.basename(d).rsplit("_s", 1)
        log = os.path.join(d, "trainer_log.jsonl")
        if side not in runs or not os.path.exists(log):
            continue
        sm = {}
        if os.path.exists(os.path.join(d, "run_summary.json")):
            with open(os.path.join(d, "run_summary.json")) as f:
                sm = json.load(f)
        if (sm.get("rc") or 0) > 0:  # failed; a run stopped by a signal (the call's time limit) is kept, partial
            runs["failed"].append({"setting": os.path.basename(folder), "side": side, "seed": int(seed),
                                   "last_logged_step": sm.get("last_logged_step"), "error": sm.get("error"),
                                   "log": log})
            continue
        r = plot_loss.read(log)
        f = hf_loss_factor(sm) if side == "hf" else 1
        if f != 1:  # the HF Trainer's summed micro-batch / rank losses, back to the mean (settings.py, ga4_bf16_hf_mean)
            r["train"] = {k: v / f for k, v in r["train"].items()}
            if "train_loss" in sm:
                sm["train_loss_as_logged"] = sm["train_loss"]
                sm["train_loss"] = sm["train_loss"] / f
        runs[side][int(seed)] = {"log": log, "r": r, "sm": sm, "loss_factor": f}
    return runs


def hf_loss_factor(sm):
    """How many times the HF Trainer's logged training loss is the mean loss: with model_accepts_loss_kwargs (T5 in
    transformers 5.x takes **kwargs and ignores num_items_in_batch) it sums the gradient_accumulation_steps
    micro-batch means and multiplies by the number of processes (average_tokens_across_devices, default true)."""
    if not sm.get("model_accepts_loss_kwargs"):
        return 1
    return int(sm.get("gradient_accumulation_steps", 1)) * int(sm.get("world_size", 1))


def compare_sides(name, runs):
    t, h = runs["t5train"], runs["hf"]
    out = {"setting": name, "seeds": {s: sorted(runs[s]) for s in SIDES}, "eval": [], "ok": True}
    steps = sorted(set.intersection(*[set(x["r"]["eval"]) for x in list(t.values()) + list(h.values())]))
    for st in steps:
        v = verdict([x["r"]["eval"][st] for x in t.values()], [x["r"]["eval"][st] for x in h.values()])
        v["step"] = st
        out["eval"].append(v)
        out["ok"] &= v["ok"]
    common = set.intersection(*[set(x["r"]["train"]) for x in list(t.values()) + list(h.values())])
    if common:
        last = max(common)
        out["final_train_loss_window"] = verdict([x["r"]["train"][last] for x in t.values()],
                                                 [x["r"]["train"][last] for x in h.values()])
        out["final_train_loss_window"]["step"] = last
        out["ok"] &= out["final_train_loss_window"]["ok"]
    if all("train_loss" in x["sm"] for x in list(t.values()) + list(h.values())):
        out["train_loss_mean"] = verdict([x["sm"]["train_loss"] for x in t.values()],
                                         [x["sm"]["train_loss"] for x in h.values()])
        out["ok"] &= out["train_loss_mean"]["ok"]
    sk = {s: [x["sm"].get("skipped_steps") for x in runs[s].values()] for s in SIDES}
    if any(v for s in SIDES for v in sk[s]):  # fp16: DeepSpeed's skipped steps (None: the run was stopped early)
        out["skipped_steps"] = {"t5train": sk["t5train"], "hf": sk["hf"], "ok": None}
        if all(v is not None for s in SIDES for v in sk[s]):
            ms = {s: sum(sk[s]) / len(sk[s]) for s in SIDES}
            out["skipped_steps"]["ok"] = abs(ms["t5train"] - ms["hf"]) <= 2
            out["ok"] &= out["skipped_steps"]["ok"]
    bsteps = sorted(set.intersection(*[set(x["r"]["bleu"]) for x in list(t.values()) + list(h.values())]))
    if bsteps:
        out["bleu"] = []
        for st in bsteps:
            mt = stats([x["r"]["bleu"][st] for x in t.values()])[0]
            mh = stats([x["r"]["bleu"][st] for x in h.values()])[0]
            out["bleu"].append({"step": st, "t5train_mean": mt, "hf_mean": mh, "diff": mt - mh})
        b = out["bleu"][-1]
        out["bleu_ok"] = b["t5train_mean"] >= 90 and abs(b["diff"]) <= 1.0
        out["ok"] &= out["bleu_ok"]
    out["wall"] = {}
    for s in SIDES:
        w = [x["sm"].get("wall_s_driver") for x in runs[s].values()]
        sps = [x["sm"].get("samples_per_s_end_to_end_driver") for x in runs[s].values()]
        alone = [bool(x["sm"].get("alone_on_gpu")) for x in runs[s].values()]
        done = [bool(x["sm"].get("completed", True)) for x in runs[s].values()]
        if all(v is not None for v in w) and all(done):
            out["wall"][s] = {"wall_s_mean": sum(w) / len(w), "samples_per_s_mean": sum(sps) / len(sps),
                              "alone_on_gpu": all(alone)}
    return out


def compare_exact(runs_by_setting):
    res = []
    for name, runs in sorted(runs_by_setting.items()):
        against = S.setting(name)["against"] if name in S.SETTINGS else "exact_stage0"
        if not name.startswith("exact_") or name == "exact_stage0" or not against:
            continue
        base = runs_by_setting.get(against, {}).get("t5train", {})
        for seed, x in sorted(runs["t5train"].items()):
            if seed not in base:
                continue
            b = base[seed]["r"]
            worst, ident, n = 0.0, True, 0
            for key in ("train", "eval"):
                for st, v in x["r"][key].items():
                    if st in b[key]:
                        n += 1
                        ident &= v == b[key][st]
                        worst = max(worst, abs(v - b[key][st]) / max(abs(b[key][st]), 1e-30))
            res.append({"setting": name, "against": against, "seed": seed, "values": n,
                        "max_rel_diff": worst, "bit_identical": ident, "ok": ident or worst <= 1e-6})
    return res


def fmt(v, p=4):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{p}f}"


def markdown(results, exact, failed):
    lines = ["| setting | seeds t5train / HF | eval points within bound | worst eval step: t5train vs HF (bound) | "
             "final train loss (window) t5train / HF | skipped steps t5train / HF | wall s, whole run, t5train / HF | "
             "verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        ev = r["eval"]
        worst = max(ev, key=lambda v: abs(v["diff"]) / v["bound"] if not math.isnan(v["diff"]) else math.inf) \
            if ev else None
        ok = sum(v["ok"] for v in ev)
        w = r["wall"]
        sk = r.get("skipped_steps")
        ft = r.get("final_train_loss_window", {"t5train_mean": None, "hf_mean": None})
        lines.append(
            f"| {r['setting']} | {len(r['seeds']['t5train'])} / {len(r['seeds']['hf'])} | {ok}/{len(ev)} | "
            + (f"step {worst['step']}: {fmt(worst['t5train_mean'])} vs {fmt(worst['hf_mean'])} "
               f"(diff {worst['diff']:+.4f}, bound {worst['bound']:.4f}) | " if worst else "- | ")
            + f"{fmt(ft['t5train_mean'])} / {fmt(ft['hf_mean'])} | "
            + (f"{sk['t5train']} / {sk['hf']} | " if sk else "- | ")
            + " / ".join(f"{w[s]['wall_s_mean']:.0f}{'' if w[s]['alone_on_gpu'] else ' (shared GPU)'}"
                         if s in w else "-" for s in SIDES) + " | "
            + ("pass" if r["ok"] else "FAIL") + " |")
        for b in r.get("bleu", []):
            lines.append(f"|   BLEU step {b['step']} | | | t5train {b['t5train_mean']:.2f} vs HF {b['hf_mean']:.2f} "
                         f"(diff {b['diff']:+.2f}) | | | | |")
    if failed:
        lines += ["", "| run that failed | last logged step | error |", "| --- | --- | --- |"]
        for x in failed:
            lines.append(f"| {x['setting']} {x['side']} seed {x['seed']} | {x['last_logged_step']} | {x['error']} |")
    if exact:
        lines += ["", "| t5train against itself (fp32, dropout 0) | seed | values compared | max rel. diff | "
                  "bit-identical | verdict |", "| --- | --- | --- | --- | --- | --- |"]
        for e in exact:
            lines.append(f"| {e['setting']} vs {e['against']} | {e['seed']} | {e['values']} | {e['max_rel_diff']:.3g} | "
                         f"{e['bit_identical']} | {'pass' if e['ok'] else 'FAIL'} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", nargs="+", required=True, help="run.py --work folders")
    ap.add_argument("--img", default=None, help="folder for one PNG per setting")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    a = ap.parse_args()
    by_setting = {}
    for w in a.work:
        for folder in sorted(glob.glob(os.path.join(w, "*"))):
            if os.path.isdir(folder):
                by_setting[os.path.basename(folder)] = load_setting(folder)
    for name, runs in by_setting.items():  # a setting that borrows the t5train runs of another
        src = S.SETTINGS.get(name, {}).get("t5train_from")
        if src and src in by_setting and not runs["t5train"]:
            runs["t5train"] = by_setting[src]["t5train"]
    results = []
    alone = []  # the learnable tasks run by t5train alone (the task search), one group (seeds: a band) per setting
    for name, runs in sorted(by_setting.items()):
        if len(runs["t5train"]) >= 2 and len(runs["hf"]) >= 2:
            results.append(compare_sides(name, runs))
        if name.startswith(("task_", "sweep_")) and not runs["hf"]:
            alone.append((name, [x["log"] for _, x in sorted(runs["t5train"].items())]))
        elif a.img and (runs["t5train"] or runs["hf"]) and not name.startswith(("exact_", "zero3_offload_warmuplr")):
            os.makedirs(a.img, exist_ok=True)
            ds = S.SETTINGS.get(name, {}).get("ds")
            hf_label = "HF Seq2SeqTrainer" + (" + DeepSpeed 0.19.8" if ds else "")
            groups = [(lab, [x["log"] for _, x in sorted(runs[s].items())])
                      for s, lab in (("t5train", "t5train"), ("hf", hf_label)) if runs[s]]
            for s in SIDES:  # failed runs, up to where they stopped
                logs = [x["log"] for x in runs["failed"] if x["side"] == s]
                if logs:
                    groups.append((f"{s if s == 't5train' else hf_label} (failed: stopped)", logs))
            plot_loss.plot(groups, os.path.join(a.img, f"{name}.png"),
                           title=f"{name}: t5-small shape from random init, seeds: "
                                 f"t5train {len(runs['t5train'])}, HF {len(runs['hf'])}")
    recipe = [g for g in alone if g[0].endswith(("_t5recipe", "_t5recipe_5k"))]
    if a.img and recipe:  # T5's Adafactor recipe, where the tasks are learned
        plot_loss.plot(recipe, os.path.join(a.img, "tasks_t5recipe_t5train.png"),
                       title="the learnable tasks with T5's Adafactor recipe, t5train alone: BLEU on 500 sources")
    # the recipe's relative updates under other schedules (decayed to 0, dropout 0), beside its 5,000-step runs
    schedule = [g for g in alone if "_t5lin_" in g[0] or g[0].endswith("_t5recipe_d0")]
    if a.img and schedule:
        plot_loss.plot(schedule + [g for g in recipe if g[0].endswith("_5k")],
                       os.path.join(a.img, "tasks_t5schedule_t5train.png"),
                       title="the codes task, Adafactor's relative updates by schedule, t5train alone: BLEU on 500 sources")
    search = [g for g in alone if g not in recipe and g not in schedule]
    if a.img and search:
        plot_loss.plot(search, os.path.join(a.img, "tasks_t5train.png"),
                       title="the task search, t5train alone: eval loss and BLEU (500 sources) by setting")
    exact = compare_exact(by_setting)
    failed = [{k: v for k, v in x.items() if k != "log"} for runs in by_setting.values() for x in runs["failed"]]
    md = markdown(results, exact, failed)
    print(md)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": results, "exact": exact, "failed": failed}, f, indent=1)
    bad = [r["setting"] for r in results if not r["ok"]] + [e["setting"] for e in exact if not e["ok"]]
    print(f"compare.py: {len(results) - len([r for r in results if not r['ok']])} settings pass, "
          f"{len(bad)} fail{': ' + ', '.join(bad) if bad else ''}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
