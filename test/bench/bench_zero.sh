#!/usr/bin/env bash
# bench_zero.sh: t5train's ZeRO engine beside DeepSpeed on the homework configuration (issue 13).
#
#   T5TRAIN_BIN=path/to/t5train T5TRAIN_DATA=dir bash test/bench/bench_zero.sh [OUT_DIR]
#
# Runs t5-3b (random init, --init random) fp16 with configs/ds_config_zero3.json (stage 3, optimizer and
# parameters offloaded to pinned CPU memory) on fixed 128+128-token batches (--pad_to_max_length) at batch 1 and
# batch 8, then batch 8 with offload_optimizer.ratio 0.5, then the same shapes at ZeRO stage 0 (everything on the
# GPU: the step's pure compute). Each case: 14 updates, T5TRAIN_ZERO_PROFILE=1 (per-step breakdown). Prints one
# JSON summary per case and the ratios against DeepSpeed: the numbers of test/bench/results/deepspeed_*.jsonl
# when present (measured beside it by test/bench/bench_deepspeed_t5.py), else issue 13's reference points
# (DeepSpeed 0.19.8 on an H200: 5.06 s/step at batch 1, 4.69 at batch 8, first step 44-47 s, host RSS 75.7 GiB).
#
# The floor of a step: max(CPU AdamW time, PCIe time) + the GPU compute that cannot overlap, with
#   CPU AdamW  = the engine's measured CPU AdamW time per step,
#   PCIe       = max(H2D, D2H bytes per step) / 55 GB/s (issue 13's measured pinned bandwidth),
#   compute    = the stage 0 step time of the same shape (forward + backward + GPU AdamW; an upper bound).
set -u
BIN=${T5TRAIN_BIN:-./t5train}
DATA=${T5TRAIN_DATA:?set T5TRAIN_DATA to a folder holding hw/wmt16-ro-en and hw/spiece.model}
OUT=${1:-/tmp/bench_zero}
mkdir -p "$OUT"
STEPS=${BENCH_STEPS:-14}
common=(--model_name_or_path t5-3b --init random --tokenizer_name "$DATA/hw/spiece.model" --data_dir "$DATA/hw"
        --dataset_name wmt16 --dataset_config ro-en --source_lang en --target_lang ro --do_train --fp16
        --max_source_length 128 --max_target_length 128 --pad_to_max_length --max_steps "$STEPS" --logging_steps 1
        --save_strategy no --learning_rate 5e-5 --overwrite_output_dir)
run_case() {  # name batch ds_config [extra...]
  local name=$1 b=$2 ds=$3; shift 3
  T5TRAIN_ZERO_PROFILE=1 "$BIN" --deepspeed "$ds" "${common[@]}" --per_device_train_batch_size "$b" \
      --output_dir "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  python3 - "$OUT/$name" "$OUT/$name.log" "$name" "$b" "$rc" <<'PY'
import json, re, statistics, sys
out, log, name, b, rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
text = open(log, errors="replace").read()
res = {"case": name, "batch": b, "rc": rc}
steps, prof = [], []
try:
    for line in open(out + "/trainer_log.jsonl"):
        d = json.loads(line)
        if "max_steps" in d and "step_ms" in d: steps.append(d)
except OSError:
    pass
for line in text.splitlines():
    if line.startswith('{"zero_step"'): prof.append(json.loads(line))
m = re.search(r"time to first step: ([0-9.]+) s", text)
if m: res["first_step_s"] = float(m.group(1))
m = re.search(r"allocated in ([0-9.]+) s", text)
if m: res["engine_alloc_s"] = float(m.group(1))
if len(steps) > 3:
    ms = [s["step_ms"] for s in steps[2:]]
    res["s_per_step"] = statistics.median(ms) / 1000
    res["samples_per_s"] = b / res["s_per_step"]
    res["gpu_peak_gib"] = max(s.get("gpu_mem_peak_gib") or 0 for s in steps)
    res["rss_gib"] = max(s.get("rss_gib") or 0 for s in steps)
    res["loss_first_last"] = [steps[0]["loss"], steps[-1]["loss"]]
if len(prof) > 3:
    p = prof[2:]
    res["fwd_bwd_s"] = statistics.median(x["fwd_bwd_s"] for x in p)
    for k in ("fwd_s", "bwd_s", "grad_tail_s"):
        if k in p[0]: res[k] = statistics.median(x[k] for x in p)
    res["cpu_adam_s"] = statistics.median(x["prev_cpu_adam_s"] for x in p)
    res["h2d_gib_per_step"] = statistics.median(x["h2d_gib"] for x in p)
    res["d2h_gib_per_step"] = statistics.median(x["d2h_gib"] for x in p)
m = re.search(r"host RSS peak ([0-9.]+) GiB", text)
if m: res["rss_at_first_step_gib"] = float(m.group(1))
if rc != 0: res["error_tail"] = text[-800:]
print(json.dumps(res)); sys.stdout.flush()
open(out + ".json", "w").write(json.dumps(res) + "\n")
PY
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
ratio_cfg="$OUT/ds_zero3_ratio05.json"
python3 - configs/ds_config_zero3.json "$ratio_cfg" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["zero_optimization"]["offload_optimizer"]["ratio"] = 0.5
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
stage0_cfg="$OUT/ds_zero0.json"
python3 - configs/ds_config_zero3.json "$stage0_cfg" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["zero_optimization"] = {"stage": 0}
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
CASES=${CASES:-zero3_b1 zero3_b8 zero3_b8_ratio05 zero0_b1 zero0_b8}  # a subset: e.g. CASES="zero3_b1 zero3_b8"
want() { [[ " $CASES " == *" $1 "* ]]; }
want zero3_b1 && run_case zero3_b1 1 configs/ds_config_zero3.json
want zero3_b8 && run_case zero3_b8 8 configs/ds_config_zero3.json
want zero3_b8_ratio05 && run_case zero3_b8_ratio05 8 "$ratio_cfg"
want zero0_b1 && run_case zero0_b1 1 "$stage0_cfg"
want zero0_b8 && run_case zero0_b8 8 "$stage0_cfg"
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
R = {os.path.basename(p)[:-5]: json.load(open(p)) for p in glob.glob(out + "/*.json") if not os.path.basename(p).startswith("ds_")}
ds = {1: {"s_per_step": 5.06, "first_step_s": 45.5, "rss_gib": 75.7, "src": "issue 13 reference (H200)"},
      8: {"s_per_step": 4.69, "first_step_s": 45.5, "rss_gib": 75.7, "src": "issue 13 reference (H200)"}}
for f in sorted(glob.glob("test/bench/results/deepspeed_*.jsonl")):
    for line in open(f):
        try: d = json.loads(line)
        except ValueError: continue
        if "batch" in d and "s_per_step" in d:
            ds[int(d["batch"])] = dict(d, src=f)
for name in ("zero3_b1", "zero3_b8", "zero3_b8_ratio05"):
    r = R.get(name)
    if not r or "s_per_step" not in r: print(name, "no result", r); continue
    b = r["batch"]; d = ds.get(b, {})
    line = {"case": name, "s_per_step": round(r["s_per_step"], 4), "samples_per_s": round(r["samples_per_s"], 3)}
    if d.get("s_per_step"): line["x_deepspeed_samples_per_s"] = round(d["s_per_step"] / r["s_per_step"], 2)
    if d.get("rss_gib") and r.get("rss_gib"): line["rss_vs_deepspeed"] = round(r["rss_gib"] / d["rss_gib"], 3)
    c0 = R.get("zero0_b%d" % b, {}).get("s_per_step")
    if r.get("cpu_adam_s") is not None and c0:
        pcie = max(r.get("h2d_gib_per_step", 0), r.get("d2h_gib_per_step", 0)) * 2**30 / 55e9
        floor = max(r["cpu_adam_s"], pcie) + c0
        line.update(cpu_adam_s=round(r["cpu_adam_s"], 3), pcie_s=round(pcie, 3), compute_s=round(floor - max(r["cpu_adam_s"], pcie), 4),
                    floor_s=round(floor, 3), step_over_floor=round(r["s_per_step"] / floor, 2))
    line.update(first_step_s=r.get("first_step_s"), gpu_peak_gib=r.get("gpu_peak_gib"), rss_gib=r.get("rss_gib"), deepspeed=d.get("src"))
    print(json.dumps(line))
PY
