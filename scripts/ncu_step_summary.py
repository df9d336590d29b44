#!/usr/bin/env python3
"""Per-kernel summary of decode steps from an ncu CSV (see test/bench/bench_generate.c, T5TRAIN_BENCH_PROFILE=1).

    T5TRAIN_BENCH_PROFILE=1 T5TRAIN_BENCH_CASES=4x1,32x1 ncu --profile-from-start off --graph-profiling node \
        --cache-control none --clock-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --log-file ncu.csv bench_generate 3 1 t5-3b
    python3 scripts/ncu_step_summary.py ncu.csv

A decode step is the kernels from an embedding lookup to the next greedy update / beam selection; the summary
groups each step's kernels by name (and grid) and prints count, total us and DRAM GB/s. ncu runs kernels one at a
time, so the sum is GPU time without the gaps between graph nodes (compare with bench_generate's GPU step ms).
"""
import csv
import re
import sys
from collections import OrderedDict


def short(name):
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"^void ", "", name)
    return name[:60]


def main():
    rows = OrderedDict()
    with open(sys.argv[1]) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        k = r["ID"]
        if k not in rows:
            rows[k] = {"name": r["Kernel Name"], "grid": r["Grid Size"], "block": r["Block Size"]}
        rows[k][r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
    ks = list(rows.values())
    steps, cur = [], []
    for k in ks:
        cur.append(k)
        if "greedy_update" in k["name"] or "beam_select" in k["name"]:
            i = max(j for j, x in enumerate(cur) if "embedding_forward" in x["name"])
            steps.append(cur[i:])
            cur = []
    print(f"{len(ks)} kernels, {len(steps)} steps")
    for si, st in enumerate(steps):
        tot = sum(k["gpu__time_duration.sum"] for k in st) / 1e3
        byt = sum(k.get("dram__bytes_read.sum", 0) for k in st)
        print(f"\n## step {si}: {len(st)} kernels, {tot:.1f} us, DRAM read {byt / 1e6:.0f} MB ({byt / tot / 1e3:.0f} GB/s)")
        g = OrderedDict()
        for k in st:
            key = (short(k["name"]), k["grid"], k["block"])
            e = g.setdefault(key, [0, 0.0, 0.0])
            e[0] += 1
            e[1] += k["gpu__time_duration.sum"] / 1e3
            e[2] += k.get("dram__bytes_read.sum", 0)
        print("| kernel | grid | block | n | us total | us each | % | GB/s |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for (n, gr, bl), (c, us, b) in sorted(g.items(), key=lambda x: -x[1][1]):
            print(f"| {n} | {gr} | {bl} | {c} | {us:.1f} | {us / c:.2f} | {100 * us / tot:.1f} | {b / us / 1e3:.0f} |")


if __name__ == "__main__":
    main()
