#!/usr/bin/env bash
# tf32_and_engine_timing.sh OUT: two measurements of one device call (one H200), after each other on the GPU:
#   1. --tf32 (issue 32): t5-3b fp32 at ZeRO stage 0, 8 x (128+128) padded, 12 updates with and without --tf32
#      (step_ms of trainer_log.jsonl), then scripts/trajectory_parity.py --precisions fp32,fp32_tf32 (50 steps of a
#      small random T5 against transformers with TF32 off: the error TF32 costs);
#   2. the engine refactor (issue 34): test/bench/bench_zero.sh's zero0_b8 and zero3_b8 with the binaries of
#      9857253 (.devrun-before, before the move) and of the merge (.devrun-after), same machine, one after the other.
# Needs (carried): .devdata/hw (spiece.model, wmt16-ro-en/train.*), .devdata/shared (t5-spiece, wmt16-ro-en),
# .devlibs, .devrun-before/t5train, .devrun-after/t5train. PARTS (default "tf32 parity engine") picks parts.
set -u
OUT=${1:?usage: tf32_and_engine_timing.sh OUT}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1
BIN=${T5TRAIN_BIN:-$PWD/.devrun-after/t5train}
PARTS=${PARTS:-tf32 parity engine}
if [[ " $PARTS " == *" tf32 "* ]]; then
  for v in off on; do
    extra=(); [ $v = on ] && extra=(--tf32 true)
    t=$SECONDS
    timeout 120 "$BIN" --model_name_or_path t5-3b --init random --tokenizer_name .devdata/hw/spiece.model --data_dir .devdata/hw \
        --dataset_name wmt16 --dataset_config ro-en --source_lang en --target_lang ro --do_train \
        --max_source_length 128 --max_target_length 128 --pad_to_max_length --per_device_train_batch_size 8 \
        --max_steps 12 --logging_steps 1 --save_strategy no --learning_rate 5e-5 --overwrite_output_dir \
        --output_dir "$OUT/tf32_$v" "${extra[@]}" > "$OUT/tf32_$v.log" 2>&1
    echo "tf32 $v: exit $? in $((SECONDS - t)) s"
  done
  python3 - "$OUT" <<'PY'
import json, statistics, sys
for v in ("off", "on"):
    try:
        rows = [json.loads(l) for l in open(f"{sys.argv[1]}/tf32_{v}/trainer_log.jsonl")]
    except OSError as e:
        print(f"tf32 {v}: {e}"); continue
    ms = [r["step_ms"] for r in rows if "step_ms" in r and r.get("step", 0) > 2]
    loss = [r["loss"] for r in rows if "loss" in r]
    print(f"tf32 {v}: t5-3b fp32 8x(128+128) step_ms median {statistics.median(ms):.1f} (min {min(ms):.1f}, "
          f"max {max(ms):.1f}, steps 3-12), first losses {loss[:3]}" if ms else f"tf32 {v}: no step_ms")
PY
fi
if [[ " $PARTS " == *" parity "* ]]; then
  timeout 240 python3 scripts/trajectory_parity.py --bin "$BIN" --tokenizer .devdata/shared/t5-spiece/spiece.model \
      --train_file .devdata/shared/wmt16-ro-en/validation.en --work /tmp/tf32_parity --precisions fp32,fp32_tf32 \
      --out "$OUT/tf32_parity.json" > "$OUT/tf32_parity.log" 2>&1
  echo "parity: exit $?"; grep -E "^== |PARITY" "$OUT/tf32_parity.log"
fi
if [[ " $PARTS " == *" engine "* ]]; then
  for v in before after; do
    BENCH_STEPS=${BENCH_STEPS:-10} T5TRAIN_BIN=$PWD/.devrun-$v/t5train T5TRAIN_DATA=$PWD/.devdata CASES="zero0_b8 zero3_b8" \
        timeout 200 bash test/bench/bench_zero.sh "$OUT/engine_$v" > "$OUT/engine_$v.log" 2>&1
    echo "engine $v: exit $?"; grep -E '^\{' "$OUT/engine_$v.log" | cut -c1-400
  done
fi
find "$OUT" \( -name "*.safetensors" -o -name "spiece.model" \) -delete  # logs and JSON come back, not models
