#!/usr/bin/env bash
# bench_t5_step.sh: our T5 fwd+bwd step against transformers (PyTorch eager) on the same shapes and dtypes,
# one device run, one side-by-side table (docs/benchmarks.md).
#
#   scripts/bench_t5_step.sh [BENCH_BIN] [OUTDIR]
#     BENCH_BIN  build/bench/bench_t5_step (make bench)        OUTDIR  bench_out (ours.csv, hf*.csv, table.md)
#   environment: MODELS (t5-small,t5-base,t5-large,t5-3b), SHAPES (1x48x48,8x128x128), DTYPES (bf16,fp16),
#     ITERS (ours 20), HF_ITERS (10), WARMUP (3), HF_MODES (amp,pure; amp_compile adds HF + torch.compile, issue 30), ADAMW_MODELS (t5-small,t5-3b: HF
#     pure+AdamW rows in bf16, the issue's reference point; empty = none), PEAK_TFLOPS (989, H100/H200 SXM dense
#     bf16 datasheet), HF_CSV (reuse an earlier hf.csv instead of running transformers again).
set -euo pipefail
BIN=${1:-build/bench/bench_t5_step}
OUTDIR=${2:-bench_out}
MODELS=${MODELS:-t5-small,t5-base,t5-large,t5-3b}
SHAPES=${SHAPES:-1x48x48,8x128x128}
DTYPES=${DTYPES:-bf16,fp16}
ITERS=${ITERS:-20}
HF_ITERS=${HF_ITERS:-10}
WARMUP=${WARMUP:-3}
HF_MODES=${HF_MODES:-amp,pure}
ADAMW_MODELS=${ADAMW_MODELS-t5-small,t5-3b}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1

echo "== ours: $BIN"
"$BIN" --models "$MODELS" --shapes "$SHAPES" --dtypes "$DTYPES" --warmup "$WARMUP" --iters "$ITERS" \
    --peak-tflops "$PEAK_TFLOPS" --csv "$OUTDIR/ours.csv"

if [ -n "${HF_CSV:-}" ]; then
    echo "== transformers: reusing $HF_CSV"
    cp "$HF_CSV" "$OUTDIR/hf.csv"
else
    echo "== transformers eager"
    python3 scripts/bench_t5_step_hf.py --models "$MODELS" --shapes "$SHAPES" --dtypes "$DTYPES" \
        --modes "$HF_MODES" --warmup "$WARMUP" --iters "$HF_ITERS" --csv "$OUTDIR/hf_main.csv"
    cp "$OUTDIR/hf_main.csv" "$OUTDIR/hf.csv"
    if [ -n "$ADAMW_MODELS" ]; then
        python3 scripts/bench_t5_step_hf.py --models "$ADAMW_MODELS" --shapes "$SHAPES" --dtypes bf16 \
            --modes pure_adamw --warmup "$WARMUP" --iters "$HF_ITERS" --csv "$OUTDIR/hf_adamw.csv"
        tail -n +2 "$OUTDIR/hf_adamw.csv" >> "$OUTDIR/hf.csv"
    fi
fi

python3 - "$OUTDIR/ours.csv" "$OUTDIR/hf.csv" "$PEAK_TFLOPS" "$OUTDIR/table.md" <<'EOF'
import csv, sys
ours = list(csv.DictReader(open(sys.argv[1])))
hf = list(csv.DictReader(open(sys.argv[2])))
peak = float(sys.argv[3]) * 1e12
key = lambda r: (r["model"], r["dtype"], int(r["B"]), int(r["Ts"]), int(r["Tt"]))
O, H = {}, {}
for r in ours: O.setdefault(key(r), {})[r["mode"]] = r
for r in hf: H.setdefault(key(r), {})[r["mode"]] = r
f = lambda x: f"{x:.2f}" if x < 100 else f"{x:.1f}"
lines = [
    "| model | dtype | B x (Ts+Tt) | ours eager ms | ours graph ms | HF amp ms | HF pure ms | HF pure+AdamW ms "
    "| HF amp + torch.compile ms | speed-up vs HF amp | vs HF pure | vs HF compiled | ours GiB | HF amp GiB | HF pure GiB "
    "| ours MFU | HF amp MFU | HF pure MFU | ours tok/s |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for k in sorted(O, key=lambda k: (["t5-small", "t5-base", "t5-large", "t5-3b"].index(k[0]) if k[0] in
                                  ["t5-small", "t5-base", "t5-large", "t5-3b"] else 9, k[1], k[2])):
    o, h = O[k], H.get(k, {})
    best = min(float(r["ms_median"]) for r in o.values())
    flops = float(next(iter(o.values()))["flops"])
    ms = lambda d, m: float(d[m]["ms_median"]) if m in d else None
    cell = lambda v: f(v) if v is not None else "-"
    ratio = lambda m: f"{ms(h, m) / best:.2f}x" if m in h else "-"
    mem = lambda m: f(float(h[m]["reserved_gib"])) if m in h else "-"
    mfu = lambda t: f"{100 * flops / (t * 1e-3) / peak:.1f}%" if t else "-"
    om = max(float(r["mem_gib"]) for r in o.values())
    lines.append(f"| {k[0]} | {k[1]} | {k[2]} x ({k[3]}+{k[4]}) | {cell(ms(o, 'eager'))} | {cell(ms(o, 'graph'))} | "
                 f"{cell(ms(h, 'hf-amp'))} | {cell(ms(h, 'hf-pure'))} | {cell(ms(h, 'hf-pure_adamw'))} | "
                 f"{cell(ms(h, 'hf-amp_compile'))} | "
                 f"{ratio('hf-amp')} | {ratio('hf-pure')} | {ratio('hf-amp_compile')} | {f(om)} | {mem('hf-amp')} | "
                 f"{mem('hf-pure')} | "
                 f"{mfu(best)} | {mfu(ms(h, 'hf-amp'))} | {mfu(ms(h, 'hf-pure'))} | "
                 f"{k[2] * (k[3] + k[4]) / (best * 1e-3):.0f} |")
out = "\n".join(lines)
print(out)
open(sys.argv[4], "w").write(out + "\n")
EOF
