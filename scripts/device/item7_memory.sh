#!/usr/bin/env bash
# item7_memory.sh OUT: issue 14 item 7 on the device: GPU memory of the README job and of the homework t5-3b job
# (at ZeRO stage 0) with the activation buffers sized from the data (today's rule: the longest tokenized example,
# capped by the max lengths) and sized for the max lengths, as before item 7 (--pad_to_max_length: every batch is
# padded to max_source_length / max_target_length, so the buffers are those of the old rule).
#   README job: configs/t5-small-wmt16.json (t5-small, batch 16, fp16, max_source_length 1024 by default), 30 steps,
#     evaluation on 64 pairs with generation (per_device_eval_batch_size 32).
#   homework job: the README's homework line (t5-3b, batch 1, fp16, 1024 / 128) with "zero_optimization" stage 0,
#     5 steps, no evaluation (t5-3b generation over the validation set takes minutes; the training step is the peak).
# Random weights (--init random) on the wmt16 ro-en files of $T5TRAIN_DATA/hw. Measured: the highest of
# trainer_log.jsonl's gpu_mem_peak_gib (CUDA's used memory) and nvidia-smi's memory.used sampled every 50 ms.
# Environment: T5TRAIN_BIN, T5TRAIN_DATA. Prints one line per run and a table; exit 0 when every run ended with
# exit 0 or, for the pre-item-7 sizing, with the out-of-memory refusal (exit 1 and a "t5train: error:" line).
set -u
OUT=${1:?usage: item7_memory.sh OUT}
BIN=${T5TRAIN_BIN:?set T5TRAIN_BIN}
D=${T5TRAIN_DATA:?set T5TRAIN_DATA}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
export T5TRAIN_CACHE=$OUT/tok
python3 - "$REPO/configs/ds_config_zero3.json" "$OUT/ds_zero0.json" <<'EOF' || exit 1
import json, sys
c = json.load(open(sys.argv[1])); c["zero_optimization"] = {"stage": 0}
json.dump(c, open(sys.argv[2], "w"), indent=1)
EOF
data=(--init random --tokenizer_name "$D/hw/spiece.model" --data_dir "$D/hw" --overwrite_output_dir)
readme=(--config "$REPO/configs/t5-small-wmt16.json" --max_steps 30 --max_eval_samples 64 --save_strategy no)
homework=(--deepspeed "$OUT/ds_zero0.json" --model_name_or_path t5-3b --do_train --per_device_train_batch_size 1
          --max_train_samples 500 --num_train_epochs 1 --dataset_name wmt16 --dataset_config ro-en --source_lang en
          --target_lang ro --fp16 --max_steps 5 --save_strategy no)
bad=0
run() {  # tag args...
    local tag=$1; shift
    rm -rf "$OUT/$tag.out"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$OUT/$tag.smi" 2>/dev/null &
    local smi=$!
    "$BIN" "$@" "${data[@]}" --output_dir "$OUT/$tag.out" > "$OUT/$tag.log" 2>&1
    local rc=$?
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    rm -f "$OUT/$tag.out"/*.safetensors
    local peak
    peak=$(python3 - "$OUT/$tag.out/trainer_log.jsonl" "$OUT/$tag.smi" <<'EOF'
import json, sys
p = 0.0
try:
    for line in open(sys.argv[1]):
        d = json.loads(line)
        if d.get("gpu_mem_peak_gib") is not None: p = max(p, float(d["gpu_mem_peak_gib"]))
except OSError:
    pass
smi = [float(x) for x in open(sys.argv[2]).read().split() if x.strip()]
print(f"{max(p, max(smi) / 1024 if smi else 0):.2f}")
EOF
)
    local sized
    sized=$(grep -m1 "^activations sized" "$OUT/$tag.log")
    local err
    err=$(grep -m1 "t5train: error:" "$OUT/$tag.log")
    echo "$tag: exit $rc, GPU peak $peak GiB; ${sized:-no sizing line}${err:+; $err}"
    if [ $rc -ne 0 ] && ! { [[ $tag == *_max ]] && [ -n "$err" ]; }; then bad=$((bad + 1)); fi
}
run readme_data "${readme[@]}"
run readme_max "${readme[@]}" --pad_to_max_length
run homework_stage0_data "${homework[@]}"
run homework_stage0_max "${homework[@]}" --pad_to_max_length
[ $bad -eq 0 ] && echo "PASS item7_memory" || echo "FAIL item7_memory: $bad run(s) failed"
[ $bad -eq 0 ]
