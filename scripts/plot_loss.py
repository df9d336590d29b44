#!/usr/bin/env python3
"""plot_loss.py: loss, BLEU and learning-rate curves from trainer_log.jsonl files (t5train's, or the HF side's of
test/bench/long_run/hf_side.py, which writes the same lines) as one PNG.

    python3 scripts/plot_loss.py --out docs/img/loss.png fp16=out16/trainer_log.jsonl bf16=outbf/trainer_log.jsonl
    python3 scripts/plot_loss.py --out cmp.png --title "fp32, 3 seeds" \
        t5train=runs/fp32/t5train_s1/trainer_log.jsonl,runs/fp32/t5train_s2/trainer_log.jsonl \
        HF=runs/fp32/hf_s1/trainer_log.jsonl,runs/fp32/hf_s2/trainer_log.jsonl

Each argument is LABEL=PATH[,PATH...] (or just PATH). One path: its training loss per logging step, its eval
losses as markers, fp16 overflow events as ticks at the bottom, windows with a non-finite gradient norm as crosses (their loss is left out). Several paths (runs of one label, e.g. seeds):
the mean over runs as a line and mean +- one standard deviation as a band, for the eval loss (markers on the
mean) and the training loss (thinner). Panels: loss; BLEU (only where an eval line holds eval_bleu, with the
same mean and band); learning rate per step (--no_lr leaves it out; the first run of each label). Needs matplotlib.
"""
import argparse
import json
import math


def read(path):
    """One run's log: {"train": {step: loss}, "lr": {step: lr}, "eval": {step: eval_loss}, "bleu": {step: bleu},
    "overflow": [steps]}; an eval step logged twice (the in-loop eval and do_eval's at the last step) counts once."""
    r = {"train": {}, "lr": {}, "eval": {}, "bleu": {}, "overflow": [], "nonfinite": []}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            if "max_steps" in d and d.get("loss") is not None:
                gn = d.get("grad_norm")
                if isinstance(gn, float) and not math.isfinite(gn):
                    # a non-finite gradient norm in the window: HF's logging_nan_inf_filter logs the mean of the
                    # window's finite losses (0 when none was), so the logged loss is not the run's loss
                    r["nonfinite"].append(d["step"])
                    r["train"][d["step"]] = math.nan
                else:
                    r["train"][d["step"]] = d["loss"]
                if d.get("learning_rate") is not None:
                    r["lr"][d["step"]] = d["learning_rate"]
            elif "eval_loss" in d:
                r["eval"].setdefault(d["step"], d["eval_loss"])
                if d.get("eval_bleu") is not None:
                    r["bleu"].setdefault(d["step"], d["eval_bleu"])
            elif d.get("event") == "overflow":
                r["overflow"].append(d["step"])
    return r


def mean_sd(series):
    """series: list of {step: value} (one per run); steps every run has -> (steps, means, sds)."""
    steps = sorted(set.intersection(*[set(s) for s in series])) if series else []
    means, sds = [], []
    for st in steps:
        v = [s[st] for s in series]
        m = sum(v) / len(v)
        means.append(m)
        sds.append(math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0)
    return steps, means, sds


def draw(ax, series, color, label, marker=None, lw=1.2, band=True):
    """The mean over runs as a line, mean +- one standard deviation as a band (several runs)."""
    steps, m, sd = mean_sd(series)
    if not steps:
        return
    ax.plot(steps, m, color=color, lw=lw, marker=marker, ms=3.5, label=label)
    if band and len(series) > 1:
        ax.fill_between(steps, [a - b for a, b in zip(m, sd)], [a + b for a, b in zip(m, sd)], color=color, alpha=0.2,
                        lw=0)


def plot(groups, out, title=None, no_lr=False):
    """groups: list of (label, [paths]). Writes the PNG to out."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [(label, [read(p) for p in paths]) for label, paths in groups]
    has_bleu = any(r["bleu"] for _, rs in runs for r in rs)
    panels = ["loss"] + (["bleu"] if has_bleu else []) + ([] if no_lr else ["lr"])
    ratios = {"loss": 3, "bleu": 1.8, "lr": 1.2}
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.5, 2.6 + 1.6 * sum(ratios[p] for p in panels)), dpi=110,
                             sharex=True, gridspec_kw={"height_ratios": [ratios[p] for p in panels]}, squeeze=False)
    ax = {p: axes[i][0] for i, p in enumerate(panels)}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, rs) in enumerate(runs):
        c = colors[i % len(colors)]
        n = f" ({len(rs)} runs, mean ± sd)" if len(rs) > 1 else ""
        single = len(rs) == 1
        draw(ax["loss"], [r["train"] for r in rs], c, f"{label} train loss{n}", lw=0.8 if not single else 1.2)
        draw(ax["loss"], [r["eval"] for r in rs], c, f"{label} eval loss{n}", marker="o", lw=1.6)
        ovf = sorted(s for r in rs for s in r["overflow"])
        if ovf:
            lo = min(min(r["train"].values()) for r in rs if r["train"])
            ax["loss"].plot(ovf, [lo * 0.98] * len(ovf), "|", color=c, ms=8,
                            label=f"{label} fp16 overflow (step skipped), all runs")
        nf = sorted(set(s for r in rs for s in r["nonfinite"]))
        if nf:
            lo = min(v for r in rs for v in r["train"].values() if math.isfinite(v))
            ax["loss"].plot(nf, [lo * 0.96] * len(nf), "x", color=c, ms=5,
                            label=f"{label} non-finite gradient norm (some run)")
        if has_bleu and any(r["bleu"] for r in rs):
            draw(ax["bleu"], [r["bleu"] for r in rs if r["bleu"]], c, f"{label} BLEU{n}", marker="o", lw=1.6)
        if not no_lr and rs[0]["lr"]:
            st = sorted(rs[0]["lr"])
            ax["lr"].plot(st, [rs[0]["lr"][s] for s in st], color=c, lw=1.2, label=f"{label} learning rate")
    axes[-1][0].set_xlabel("optimizer step")
    ax["loss"].set_ylabel("cross-entropy")
    ax["loss"].set_title(title or "training and eval loss")
    for p in panels:
        ax[p].grid(alpha=0.3)
        ax[p].legend(fontsize=7.5)
    if has_bleu:
        ax["bleu"].set_ylabel("BLEU")
    if not no_lr:
        ax["lr"].set_ylabel("learning rate")
        ax["lr"].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default=None)
    ap.add_argument("--no_lr", action="store_true", help="no learning-rate panel")
    ap.add_argument("runs", nargs="+", help="LABEL=PATH[,PATH...] or PATH")
    a = ap.parse_args()
    groups = []
    for r in a.runs:
        label, paths = r.split("=", 1) if "=" in r else (r, r)
        groups.append((label, paths.split(",")))
    plot(groups, a.out, a.title, a.no_lr)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
