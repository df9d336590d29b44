#!/usr/bin/env bash
# single_gpu_figures.sh OUT: the one-H200 figures of issues 34, 28 and 32 in one device call, one run at a time:
#   engine   (issue 34) the stage 0 and ZeRO-3 homework steps (test/bench/bench_zero.sh's zero0_b8, zero3_b8: t5-3b
#            fp16 8 x (128+128)) with the binaries before the engine refactor (.devrun-before, 9857253) and after
#            (.devrun-after), in the order before, after, after, before (drift cancels in the means);
#   pageable (issue 28 item 1) the homework ZeRO-3 config at batch 8 with pin_memory false in both offload sections
#            against pinned in the same call: pinned, then pageable with the staging ring alone
#            (T5TRAIN_PAGEABLE_REGISTER=0), then pageable registered in the background (=1, passed explicitly: the
#            feature is off by default until it has run on a GPU), fp16;
#            each row also gives the median of its last third of steps (after the registration finished) and the end
#            line's registration figures (GiB registered, seconds after the engine's start);
#   nvme     (issue 28 item 2) the disk's O_DIRECT write/read bandwidth (dd), then the homework ZeRO-3 config fp16 batch 8
#            with offload_optimizer on NVMe (NVME_DIR, default /tmp/t5nvme) beside offload_optimizer cpu, NVME_STEPS
#            (default 4) updates each (NVME_DEVS picks "cpu nvme"); the end line's NVMe bytes read / written per run;
#            NVME_T5_11B=1 adds t5-11b bf16 with the optimizer on NVMe and offload_param cpu (x4 machines' disk);
#   profile  (issue 32) DeepSpeed's flops_profiler on t5-3b bf16 stage 0 8 x (128+128), profile_step 3;
#   afbs     (issue 32 item 4) --auto_find_batch_size from micro-batch 2048 on t5-3b: stage 0 bf16 and the homework
#            ZeRO-3 config fp16; 4 updates each; prints the batch chosen, the measured GPU peak against the
#            estimate, and the next batch up (2048 x 0.9^k) through --dry_run, which the plan check must refuse;
#            AFBS_CASES (default "s0:bf16 hw:fp16") adds z11:bf16, t5-11b with the plan --zero_plan auto picks on an
#            H200 with 125 GiB of host (stage 3, both offloads, ratio 0.40, gradient checkpointing; issue 32's Show).
# Needs (carried): .devdata/hw (spiece.model, wmt16-ro-en/train.*), .devlibs, .devrun-after/t5train (or T5TRAIN_BIN) and, for
# engine, .devrun-before/t5train. PARTS (default "engine pageable profile afbs") picks parts; STEPS (default 10);
# PAGEABLE (default "true:fp16 false:fp16:0 false:fp16:1") the pageable part's PIN:DTYPE[:REG] runs (REG: the value of
# T5TRAIN_PAGEABLE_REGISTER, unset when absent, which is on since session 8), PAGEABLE_STEPS (default 20) their updates, TAG a suffix of their names.
set -u
OUT=${1:?usage: single_gpu_figures.sh OUT}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1
BIN=${T5TRAIN_BIN:-$PWD/.devrun-after/t5train}
PARTS=${PARTS:-engine pageable profile afbs}
STEPS=${STEPS:-10}
want() { [[ " $PARTS " == *" $1 "* ]]; }
# each run's final model goes at once: t5-3b saves 11.4 GB, and the run's disk check refuses a run whose saves no
# longer fit (the first call of this script filled the 64 GiB disk with eight of them)
drop_models() { find "$OUT" \( -name "*.safetensors" -o -name "*.bin" \) -delete; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
common=(--model_name_or_path t5-3b --init random --tokenizer_name .devdata/hw/spiece.model --data_dir .devdata/hw
        --dataset_name wmt16 --dataset_config ro-en --source_lang en --target_lang ro --do_train
        --max_source_length 128 --max_target_length 128 --pad_to_max_length --logging_steps 1
        --save_strategy no --learning_rate 5e-5 --overwrite_output_dir)
# summary NAME DIR LOG: median step_ms of the steps after the first two, GPU peak, host RSS, time to first step
summary() {
  python3 - "$@" <<'PY'
import json, re, statistics, sys
name, d, log = sys.argv[1:4]
rows = []
try:
    rows = [json.loads(l) for l in open(d + "/trainer_log.jsonl")]
except OSError as e:
    print(json.dumps({"case": name, "error": str(e)})); sys.exit()
st = [r for r in rows if "step_ms" in r]
text = open(log, errors="replace").read()
m = re.search(r"time to first step: ([0-9.]+) s", text)
ms = [r["step_ms"] for r in st[2:]] or [r["step_ms"] for r in st]
tail = [r["step_ms"] for r in st[-max(3, len(st) // 3):]]
# pin_memory false: the end line's ring bytes and background registration (src/zero/engine.c stats_line)
ring = re.search(r"([0-9.]+) GiB through the pinned staging ring", text)
reg = re.search(r"registered in the background: ([0-9.]+) of ([0-9.]+) GiB, ([^;]+)", text)
res = {"case": name, "steps": len(st), "step_ms_median": round(statistics.median(ms), 1) if ms else None,
       "step_ms_tail_median": round(statistics.median(tail), 1) if tail else None,
       "ring_gib": float(ring.group(1)) if ring else 0.0,
       "registered_gib": [float(reg.group(1)), float(reg.group(2)), reg.group(3).strip()] if reg else None,
       "step_ms_min": round(min(ms), 1) if ms else None, "step_ms_max": round(max(ms), 1) if ms else None,
       "gpu_peak_gib": max((r.get("gpu_mem_peak_gib") or 0) for r in st) if st else None,
       "rss_gib": max((r.get("rss_gib") or 0) for r in st) if st else None,
       "first_step_s": float(m.group(1)) if m else None,
       "loss_first_last": [st[0].get("loss"), st[-1].get("loss")] if st else None}
print(json.dumps(res))
PY
}
if want engine; then
  k=0
  for v in before after after before; do
    k=$((k + 1))
    BENCH_STEPS=$STEPS T5TRAIN_BIN=$PWD/.devrun-$v/t5train T5TRAIN_DATA=$PWD/.devdata CASES="zero0_b8 zero3_b8" \
        timeout 200 bash test/bench/bench_zero.sh "$OUT/engine_${k}_$v" > "$OUT/engine_${k}_$v.log" 2>&1
    echo "engine $k $v: exit $?"
    drop_models
    for c in zero0_b8 zero3_b8; do summary "engine_${k}_${v}_$c" "$OUT/engine_${k}_$v/$c" "$OUT/engine_${k}_$v/$c.log"; done
  done
fi
# the homework config with pin_memory false in both offload sections, and bf16 instead of fp16
ds_variant() {  # PIN(true|false) DTYPE(fp16|bf16) -> a file
  python3 - "$1" "$2" "$OUT/ds_$1_$2.json" <<'PY'
import json, sys
pin, dtype, out = sys.argv[1] == "true", sys.argv[2], sys.argv[3]
c = json.load(open("configs/ds_config_zero3.json"))
for k in ("offload_optimizer", "offload_param"):
    c["zero_optimization"][k]["pin_memory"] = pin
if dtype == "bf16":
    del c["fp16"]
    c["bf16"] = {"enabled": "auto"}
json.dump(c, open(out, "w"), indent=1)
PY
  echo "$OUT/ds_$1_$2.json"
}
if want pageable; then
  for v in ${PAGEABLE:-true:fp16 false:fp16:0 false:fp16:1}; do  # PIN:DTYPE[:REG]
    set -- ${v//:/ }
    name=pin_$1_$2${3:+_reg$3}${TAG:-}
    reg=()
    [ -n "${3:-}" ] && reg=(env T5TRAIN_PAGEABLE_REGISTER="$3")
    t=$SECONDS
    timeout 200 ${reg[@]+"${reg[@]}"} "$BIN" --deepspeed "$(ds_variant "$1" "$2")" "${common[@]}" --"$2" --per_device_train_batch_size 8 \
        --max_steps "${PAGEABLE_STEPS:-20}" --output_dir "$OUT/$name" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - t)) s"
    drop_models
    summary "$name" "$OUT/$name" "$OUT/$name.log"
  done
fi
if want nvme; then
  # issue 28 item 2's Show: the disk's O_DIRECT bandwidth first (dd, 4 GiB in 64 MiB blocks, write then read), then
  # the homework ZeRO-3 config (fp16, batch 8) with offload_optimizer on NVMe under NVME_DIR beside the same config
  # with the optimizer in (pinned) host memory, NVME_STEPS updates each. The floor the disk implies for a step: the
  # bytes the end line says were read and written, over the two dd figures.
  ND=${NVME_DIR:-/tmp/t5nvme}
  mkdir -p "$ND"
  df -h "$ND" | tail -1
  dd if=/dev/zero of="$ND/dd.bin" bs=64M count=64 oflag=direct 2>&1 | tail -1 | sed 's/^/nvme dd write O_DIRECT: /'
  dd if="$ND/dd.bin" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1 | sed 's/^/nvme dd read O_DIRECT: /'
  rm -f "$ND/dd.bin"
  for dev in ${NVME_DEVS:-cpu nvme}; do
    cfg=$OUT/ds_nvme_$dev.json
    python3 - "$dev" "$ND" "$cfg" <<'PY'
import json, sys
dev, nd, out = sys.argv[1:4]
c = json.load(open("configs/ds_config_zero3.json"))
if dev == "nvme":
    c["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": nd, "pin_memory": True,
                                                   "buffer_count": 4, "fast_init": False}
json.dump(c, open(out, "w"), indent=1)
PY
    name=nvme_opt_$dev
    t=$SECONDS
    timeout 400 "$BIN" --deepspeed "$cfg" "${common[@]}" --fp16 --per_device_train_batch_size 8 \
        --max_steps "${NVME_STEPS:-4}" --output_dir "$OUT/$name" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - t)) s"
    drop_models
    grep -oE "NVMe [0-9.]+ GiB read, [0-9.]+ GiB written|swap file under [^;]*" "$OUT/$name.log" | sed "s/^/$name: /"
    summary "$name" "$OUT/$name" "$OUT/$name.log"
  done
  # NVME_T5_11B=1: issue 28's t5-11b row (the Show: one GPU of an x4 machine, 235 GB disk, host RSS <= 40 GiB):
  # bf16, stage 3, offload_optimizer nvme + offload_param cpu, gradient checkpointing, batch 8, NVME_STEPS updates;
  # with branch nvme-master the fp32 master is in the swap file too (about 136 GB of file)
  if [ -n "${NVME_T5_11B:-}" ]; then
    cfg=$OUT/ds_nvme_t5-11b.json
    python3 - "$ND" "$cfg" <<'PY'
import json, sys
nd, out = sys.argv[1:3]
c = {"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3,
     "offload_optimizer": {"device": "nvme", "nvme_path": nd, "pin_memory": True, "pipeline_read": True,
                           "pipeline_write": True},
     "offload_param": {"device": "cpu", "pin_memory": True}}}
json.dump(c, open(out, "w"), indent=1)
PY
    t=$SECONDS
    timeout 500 "$BIN" --deepspeed "$cfg" "${common[@]}" --model_name_or_path t5-11b --gradient_checkpointing --bf16 \
        --per_device_train_batch_size 8 --max_steps "${NVME_STEPS:-4}" --output_dir "$OUT/nvme_t5-11b" \
        > "$OUT/nvme_t5-11b.log" 2>&1
    echo "nvme_t5-11b: exit $? in $((SECONDS - t)) s"
    drop_models
    grep -oE "NVMe [0-9.]+ GiB read, [0-9.]+ GiB written|swap file under [^;]*|host [0-9.]+ GiB \([0-9.]+ GiB pinned\)" \
        "$OUT/nvme_t5-11b.log" | sed "s/^/nvme_t5-11b: /"
    summary nvme_t5-11b "$OUT/nvme_t5-11b" "$OUT/nvme_t5-11b.log"
  fi
  rm -rf "$ND"
fi
if want profile; then
  timeout 120 "$BIN" --deepspeed '{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 0}, "flops_profiler": {"enabled": true, "profile_step": 3, "module_depth": -1, "top_modules": 3, "detailed": true}}' \
      "${common[@]}" --bf16 --per_device_train_batch_size 8 --max_steps 5 --output_dir "$OUT/profile" > "$OUT/profile.log" 2>&1
  echo "profile: exit $?"
  drop_models
  sed -n '/DeepSpeed Flops Profiler/,/^------------------------------------------------------------------------------$/p' "$OUT/profile.log" > "$OUT/profile.txt"; head -60 "$OUT/profile.txt"
fi
if want afbs; then
  for v in ${AFBS_CASES:-s0:bf16 hw:fp16}; do  # CASE:DTYPE; z11: t5-11b with --zero_plan auto's plan for this host
    set -- ${v/:/ }
    extra=()
    case $1 in
      s0) ds='{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 0}}' ;;
      hw) ds=configs/ds_config_zero3.json ;;
      z11) ds='{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.4}, "offload_param": {"device": "cpu"}}}'
           extra=(--model_name_or_path t5-11b --gradient_checkpointing) ;;  # after common's t5-3b: the last wins
    esac
    name=afbs_$1
    t=$SECONDS
    timeout 300 "$BIN" --deepspeed "$ds" "${common[@]}" "${extra[@]}" --"$2" --per_device_train_batch_size 2048 \
        --auto_find_batch_size --max_steps 4 --output_dir "$OUT/$name" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - t)) s"
    drop_models
    grep -E "auto_find_batch_size|predicted|estimate" "$OUT/$name.log" | head -5
    summary "$name" "$OUT/$name" "$OUT/$name.log"
    b=$(grep -oE "per_device_train_batch_size 2048 -> [0-9]+" "$OUT/$name.log" | awk '{print $NF}')
    if [ -n "$b" ]; then  # the estimate of the plan at b (its GPU column against gpu_peak_gib above)
      case $1 in s0) row='^stage 0 ' ;; hw) row='^stage 3, offload_optimizer cpu \(ratio 1.00\), offload_param cpu' ;;
                 *) row='^stage 3, offload_optimizer cpu \(ratio 0.40\), offload_param cpu' ;; esac
      "$BIN" estimate --deepspeed "$ds" "${common[@]}" "${extra[@]}" --"$2" --per_device_train_batch_size "$b" 2>&1 | grep -E "$row" |
          sed "s/^/$name estimate at micro-batch $b: /"
      # the batch before b in accelerate's sequence: the plan check must refuse it
      up=$(python3 -c "b = 2048
while int(b * 0.9) > $b: b = int(b * 0.9)
print(b)")
      "$BIN" --deepspeed "$ds" "${common[@]}" "${extra[@]}" --"$2" --per_device_train_batch_size "$up" --max_steps 4 --dry_run \
          --output_dir "$OUT/${name}_up" > "$OUT/${name}_up.log" 2>&1
      echo "${name} micro-batch $up (next up) --dry_run: exit $?"; grep -E "predicted|fit" "$OUT/${name}_up.log" | head -3
    fi
  done
fi
find "$OUT" \( -name "*.safetensors" -o -name "*.bin" -o -name "spiece.model" \) -delete
