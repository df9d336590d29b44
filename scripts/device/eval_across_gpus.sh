#!/usr/bin/env bash
# eval_across_gpus.sh OUT: issue 29's evaluation figures on one host with 4 GPUs, one run at a time:
#   same   a t5-small from random weights trained TRAIN_STEPS (500) updates on newsdev2016 itself (bf16, lr 1e-3, batch
#          32: one update left every prediction empty; the saved weights are fp32), evaluated and predicted on newsdev2016
#          (wmt16-ro-en/validation, 1,999 pairs; --do_eval --do_predict --predict_with_generate, greedy) on 1, 2 and 4
#          GPUs, in fp32 and bf16: generated_predictions.txt compared line by line with one GPU's, eval_loss /
#          predict_loss relative differences, bleu and gen_len;
#   sorted one GPU, fp32, generation batches by source length (the default) against input order (SORT_OFF, the flag
#          that turns it off): the same comparison and both predict_runtime;
#   speed  t5-3b of random weights, bf16, --do_predict --predict_with_generate on newsdev2016 on 1, 2 and 4 GPUs:
#          predict_runtime and samples/s from predict_results.json, the ratio to one GPU (targets: 2 GPUs >= 1.8x,
#          4 GPUs >= 3.5x);
#   hf_speed  the HF side of speed (scripts/device/hf_eval_speed.py): transformers' Seq2SeqTrainer.predict
#          (predict_with_generate, bf16, per-device batch 32, max_length GEN_LEN, greedy) on the same sources, t5-3b of
#          random weights (transformers' init, seed 11), on HF_SPEED_GPUS (default "1 2 4") GPUs, launched with
#          torchrun (HF_LAUNCHER=deepspeed: `deepspeed --num_gpus N`), in each of HF_SPEED_MODES (default "zero3":
#          DeepSpeed 0.19.8 ZeRO-3 predict-only, "ZeRO inference"; "ddp": no DeepSpeed, DDP / one GPU, autocast over
#          fp32 weights as run_translation --bf16); the first HF_SPEED_SAMPLES pairs (default 0: all 1,999); each run
#          under `timeout HF_SPEED_TIMEOUT` (default 540 s); HF_SPEED_EXTRA: more hf_eval_speed.py run flags (the CPU
#          check of the part: HF_SPEED_EXTRA="--device cpu --model tiny --bf16 0"). Installs the carried .whl into /tmp/site as
#          test/bench/long_run/device.sh does. Prints a table of both sides (ratios to one GPU; t5train / HF
#          samples/s at each GPU count where both ran: the sample counts may differ, samples/s is compared);
#   zinf   t5-11b of random weights, bf16, --do_eval on newsdev2016: one GPU (stage 0) against ZINF_GPUS (2) at stage 3
#          gathering on demand (ZeRO inference, T5TRAIN_EVAL_NO_HOLD=1): eval_loss within 1e-3 relative; ZINF_BATCH
#          (default 4; at 32 an evaluation-only run asked for the training activations, 117 GiB, before its model kept
#          one block's activations (forward_only): docs/multi_gpu.md).
# Needs (carried): .devdata/shared (t5-spiece/, wmt16-ro-en/), .devlibs, .devrun-final/t5train; hf_speed: .whl and
# python3 with torch, transformers 5.x, accelerate, sentencepiece (sacrebleu if there: predict_bleu).
# PARTS (default "same sorted speed"; hf_speed and zinf only when named); SPEED_GPUS (default "1 2 4": the GPU counts of the speed part);
# SPEED_SAMPLES (the speed part's --max_predict_samples; default: all 1,999; set it to HF_SPEED_SAMPLES for the same sources); GEN_LEN (generation_max_length, default 64); SORT_OFF (default
# "--eval_sort_by_length false").
set -u
OUT=${1:?usage: eval_across_gpus.sh OUT}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NVLS_ENABLE=0
BIN=${T5TRAIN_BIN:-$PWD/.devrun-final/t5train}
D=$PWD/.devdata/shared
PARTS=${PARTS:-same sorted speed}
GEN_LEN=${GEN_LEN:-64}
SORT_OFF=${SORT_OFF:---eval_sort_by_length false}
want() { [[ " $PARTS " == *" $1 "* ]]; }
data=(--tokenizer_name "$D/t5-spiece/spiece.model" --source_lang en --target_lang ro --max_source_length 128
      --source_prefix "translate English to Romanian: ")
ev=(--validation_file "$D/wmt16-ro-en/validation.en" --test_file "$D/wmt16-ro-en/validation.en" --do_eval --do_predict
    --predict_with_generate --generation_max_length "$GEN_LEN" --max_target_length 128 --per_device_eval_batch_size 32)
launch() {  # N: the launcher words for N GPUs
  if [ "$1" = 1 ]; then echo "env CUDA_VISIBLE_DEVICES=0 $BIN"; else echo "$BIN --num_gpus $1"; fi
}
# compare A B: lines of generated_predictions.txt that differ, and the metrics side by side
compare() {
  python3 - "$1" "$2" <<'PY'
import json, os, sys
a, b = sys.argv[1:3]
def lines(d):
    try: return open(os.path.join(d, "generated_predictions.txt")).read().split("\n")
    except OSError: return None
def res(d, f):
    try: return json.load(open(os.path.join(d, f)))
    except OSError: return {}
la, lb = lines(a), lines(b)
diff = None if la is None or lb is None else sum(x != y for x, y in zip(la, lb)) + abs(len(la) - len(lb))
out = {"a": os.path.basename(a), "b": os.path.basename(b), "lines": len(la or []), "lines_differing": diff}
for f, keys in (("eval_results.json", ("eval_loss", "eval_bleu", "eval_gen_len", "eval_runtime")),
                ("predict_results.json", ("predict_loss", "predict_bleu", "predict_gen_len", "predict_runtime"))):
    ra, rb = res(a, f), res(b, f)
    for k in keys:
        if k in ra and k in rb:
            out[k] = [ra[k], rb[k]]
            if k.endswith("_loss") and ra[k]: out[k + "_rel"] = abs(ra[k] - rb[k]) / abs(ra[k])
print(json.dumps(out))
PY
}
if want same || want sorted; then
  timeout 120 env CUDA_VISIBLE_DEVICES=0 "$BIN" --model_name_or_path t5-small --init random --seed 11 "${data[@]}" \
      --train_file "$D/wmt16-ro-en/validation.en" --do_train --bf16 --max_steps ${TRAIN_STEPS:-500} --learning_rate 1e-3 \
      --per_device_train_batch_size 32 --max_target_length 64 --save_strategy no --logging_steps 100 \
      --output_dir "$OUT/model" > "$OUT/model.log" 2>&1
  echo "model: exit $?"
fi
if want same; then
  for p in fp32 bf16; do
    flag=(); [ $p = bf16 ] && flag=(--bf16)
    for n in 1 2 4; do
      t=$SECONDS
      timeout 200 $(launch $n) --model_name_or_path "$OUT/model" "${data[@]}" "${ev[@]}" "${flag[@]}" \
          --output_dir "$OUT/${p}_${n}gpu" > "$OUT/${p}_${n}gpu.log" 2>&1
      echo "$p on $n GPU(s): exit $? in $((SECONDS - t)) s"
      [ $n != 1 ] && compare "$OUT/${p}_1gpu" "$OUT/${p}_${n}gpu"
    done
  done
fi
if want sorted; then
  timeout 200 $(launch 1) --model_name_or_path "$OUT/model" "${data[@]}" "${ev[@]}" $SORT_OFF \
      --output_dir "$OUT/fp32_1gpu_input_order" > "$OUT/fp32_1gpu_input_order.log" 2>&1
  echo "fp32 on 1 GPU, input order ($SORT_OFF): exit $?"
  [ -d "$OUT/fp32_1gpu" ] || timeout 200 $(launch 1) --model_name_or_path "$OUT/model" "${data[@]}" "${ev[@]}" \
      --output_dir "$OUT/fp32_1gpu" > "$OUT/fp32_1gpu.log" 2>&1
  compare "$OUT/fp32_1gpu_input_order" "$OUT/fp32_1gpu"
fi
if want speed; then
  for n in ${SPEED_GPUS:-1 2 4}; do
    t=$SECONDS
    timeout 300 $(launch $n) --model_name_or_path t5-3b --init random --seed 11 "${data[@]}" --bf16 \
        --test_file "$D/wmt16-ro-en/validation.en" --do_predict --predict_with_generate --generation_max_length "$GEN_LEN" \
        --max_target_length 128 --per_device_eval_batch_size 32 ${SPEED_SAMPLES:+--max_predict_samples $SPEED_SAMPLES} \
        --output_dir "$OUT/t5-3b_${n}gpu" > "$OUT/t5-3b_${n}gpu.log" 2>&1
    echo "t5-3b bf16 predict on $n GPU(s): exit $? in $((SECONDS - t)) s"
  done
  python3 - "$OUT" <<'PY'
import json, sys
r = {}
for n in (1, 2, 4):
    try: r[n] = json.load(open(f"{sys.argv[1]}/t5-3b_{n}gpu/predict_results.json"))
    except OSError: pass
for n, d in r.items():
    line = {"gpus": n, "predict_runtime": d.get("predict_runtime"), "samples_per_second": d.get("predict_samples_per_second"),
            "gen_len": d.get("predict_gen_len")}
    if 1 in r and d.get("predict_runtime"): line["speedup"] = round(r[1]["predict_runtime"] / d["predict_runtime"], 3)
    print(json.dumps(line))
PY
fi
if want zinf; then
  # ZeRO inference (issue 29 item 3): t5-11b of random weights (the draw does not depend on the GPU count:
  # model/t5_weights.c draws each unit whole), bf16, --do_eval on newsdev2016, one GPU at stage 0 against ZINF_GPUS
  # GPUs at stage 3 gathering every unit on demand (T5TRAIN_EVAL_NO_HOLD=1: the weights stay partitioned, as when the
  # model does not fit one GPU); the target: eval_loss within 1e-3 relative
  # ZINF_REF_LOSS set (e.g. 10.917905246931173, 4 x H200 session 7's one-GPU stage 0 eval_loss at batch 32,
  # docs/multi_gpu.md): the one-GPU run is skipped (t5-11b at stage 0 does not fit an 80 GB card) and the N-GPU
  # eval_loss is compared with that value instead
  z3='{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3}}'
  zruns="1 ${ZINF_GPUS:-2}"
  [ -n "${ZINF_REF_LOSS:-}" ] && zruns="${ZINF_GPUS:-2}"
  for n in $zruns; do
    t=$SECONDS
    ds=(); env=""
    if [ "$n" != 1 ]; then ds=(--deepspeed "$z3"); env="T5TRAIN_EVAL_NO_HOLD=1"; fi
    timeout 300 env $env $(launch $n) --model_name_or_path t5-11b --init random --seed 11 "${data[@]}" --bf16 "${ds[@]}" \
        --validation_file "$D/wmt16-ro-en/validation.en" --do_eval --max_target_length 128 \
        --per_device_eval_batch_size ${ZINF_BATCH:-4} --output_dir "$OUT/t5-11b_${n}gpu" > "$OUT/t5-11b_${n}gpu.log" 2>&1
    echo "t5-11b bf16 eval on $n GPU(s): exit $? in $((SECONDS - t)) s"
    grep -h -i -E 'error|peak|eval_loss|eval_runtime' "$OUT/t5-11b_${n}gpu.log" | tail -6
  done
  python3 - "$OUT" ${ZINF_GPUS:-2} "${ZINF_REF_LOSS:-}" <<'PY'
import json, sys
out, n, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    a = {"eval_loss": float(ref), "eval_runtime": None} if ref else json.load(open(f"{out}/t5-11b_1gpu/eval_results.json"))
    b = json.load(open(f"{out}/t5-11b_{n}gpu/eval_results.json"))
except OSError as e:
    print(json.dumps({"zinf": "missing", "error": str(e)})); sys.exit()
rel = abs(a["eval_loss"] - b["eval_loss"]) / abs(a["eval_loss"])
print(json.dumps({"zinf_eval_loss_1gpu": a["eval_loss"], f"zinf_eval_loss_{n}gpu": b["eval_loss"], "rel_diff": rel,
                  "within_1e-3": rel <= 1e-3, "runtime_1gpu": a.get("eval_runtime"), f"runtime_{n}gpu": b.get("eval_runtime")}))
PY
fi
if want hf_speed; then
  HW=${HF_SPEED_WORK:-/tmp/hf_speed}
  mkdir -p "$HW"
  # python without t5train's .devlibs on its library path (t5train's libraries, for t5train alone)
  PYLIBS=${LD_LIBRARY_PATH#"$PWD/.devlibs"}; PYLIBS=${PYLIBS#:}
  t=$SECONDS
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$HW/pip.log" 2>&1
  rc=$?
  echo "hf_speed: pip install of .whl into /tmp/site: exit $rc in $((SECONDS - t)) s"
  [ $rc = 0 ] || tail -5 "$HW/pip.log"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH DS_BUILD_OPS=0 TORCH_CUDA_ARCH_LIST=9.0
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
  HPY=scripts/device/hf_eval_speed.py
  LD_LIBRARY_PATH="$PYLIBS" python3 $HPY prepare --spiece "$D/t5-spiece/spiece.model" --work "$HW"
  for mode in ${HF_SPEED_MODES:-zero3}; do
    ds=(); [ "$mode" = zero3 ] && ds=(--deepspeed "$HW/ds_zero3_inference.json")
    for n in ${HF_SPEED_GPUS:-1 2 4}; do
      vis=$(seq -s, 0 $((n - 1)))
      if [ "${HF_LAUNCHER:-torchrun}" = deepspeed ]; then
        launcher=(deepspeed --num_gpus "$n" --master_port $((29600 + n)))
      else
        launcher=(python3 -m torch.distributed.run --standalone --nproc_per_node "$n")
      fi
      t=$SECONDS
      CUDA_VISIBLE_DEVICES=$vis LD_LIBRARY_PATH="$PYLIBS" timeout -k 10 ${HF_SPEED_TIMEOUT:-540} "${launcher[@]}" $HPY run \
          --data "$D" --tokenizer_dir "$HW/tokenizer" --out "$OUT/hf_${mode}_${n}gpu" --model t5-3b --seed 11 --bf16 1 \
          --batch 32 --gen_len "$GEN_LEN" --max_source_length 128 --max_target_length 128 \
          --samples "${HF_SPEED_SAMPLES:-0}" "${ds[@]}" ${HF_SPEED_EXTRA:-} > "$OUT/hf_${mode}_${n}gpu.log" 2>&1
      echo "HF t5-3b bf16 predict ($mode) on $n GPU(s): exit $? in $((SECONDS - t)) s"
      grep -h '^hf_eval_speed:' "$OUT/hf_${mode}_${n}gpu.log" || \
        { grep -E 'Error|error' "$OUT/hf_${mode}_${n}gpu.log" | sort -u | tail -5; tail -5 "$OUT/hf_${mode}_${n}gpu.log"; }
    done
  done
fi
if want speed || want hf_speed; then
  # both sides' speed lines (hf_eval_speed.py table: also run here on folders fetched from separate calls)
  python3 scripts/device/hf_eval_speed.py table "$OUT"
fi
find "$OUT" \( -name "*.safetensors" -o -name "spiece.model" \) -delete
