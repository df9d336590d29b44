#!/usr/bin/env python3
"""plot_loss.py: loss and learning-rate curves from t5train's output_dir/trainer_log.jsonl files (one per run) as one PNG.

    python3 scripts/plot_loss.py --out docs/img/loss.png fp16=out16/trainer_log.jsonl bf16=outbf/trainer_log.jsonl

Each argument is LABEL=PATH (or just PATH). Step lines (with "max_steps") give the training loss; eval lines
({"step", "eval_loss"}) are drawn as markers; overflow events as ticks at the bottom. A second panel below shows
each run's learning rate per step (the "learning_rate" of the step lines; --no_lr leaves it out). Needs matplotlib.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    steps, loss, lr, ev, ovf = [], [], [], [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            if "max_steps" in d and d.get("loss") is not None:
                steps.append(d["step"])
                loss.append(d["loss"])
                lr.append(d.get("learning_rate"))
            elif "eval_loss" in d:
                ev.append((d["step"], d["eval_loss"]))
            elif d.get("event") == "overflow":
                ovf.append(d["step"])
    return steps, loss, lr, ev, ovf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default=None, help="default: what the panels show")
    ap.add_argument("--no_lr", action="store_true", help="only the loss panel")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    if a.no_lr:
        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
        ax_lr = None
    else:
        fig, (ax, ax_lr) = plt.subplots(2, 1, figsize=(8, 6.5), dpi=110, sharex=True,
                                        gridspec_kw={"height_ratios": [3, 1.3]})
    for r in a.runs:
        label, path = r.split("=", 1) if "=" in r else (r, r)
        s, l, lr, ev, ovf = read(path)
        (line,) = ax.plot(s, l, label=f"{label} train loss", lw=1.2)
        if ax_lr is not None and any(x is not None for x in lr):
            ax_lr.plot([x for x, y in zip(s, lr) if y is not None], [y for y in lr if y is not None],
                       color=line.get_color(), lw=1.2, label=f"{label} learning rate")
        if ev:
            ax.plot([e[0] for e in ev], [e[1] for e in ev], "o", color=line.get_color(), label=f"{label} eval loss")
        if ovf:
            ax.plot(ovf, [min(l) * 0.98] * len(ovf), "|", color=line.get_color(), ms=8,
                    label=f"{label} overflow (step skipped)")
    (ax_lr if ax_lr is not None else ax).set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy")
    if ax_lr is not None:
        ax_lr.set_ylabel("learning rate")
        ax_lr.grid(alpha=0.3)
        ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.set_title(a.title or ("t5train: training loss" if ax_lr is None else "t5train: training loss and learning rate"))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
