#!/usr/bin/env bash
# ds_adafactor_zero2.sh OUT: issue 33's last "Show" item on a machine with 2 GPUs, in one call (about 1-2 min, at most
# about 4.5 with every timeout hit): what DeepSpeed + HF Trainer does with `--adafactor` at ZeRO-2 on 2 GPUs, beside
# transformers' single-GPU Adafactor and t5train, from the same weights on the same rows:
#   d. t5train, 1 GPU x micro-batch 2 x accumulation 2, --dump_batches (the rows of every update, replayed by a and b);
#   c. t5train --num_gpus 2 x 2, --deepspeed '{"zero_optimization": {"stage": 2}, "gradient_clipping": "auto"}' (the
#      key: absent, DeepSpeed does not clip, as with HF's Trainer; the 4 x H200 call of 2026-11-27 ran c without it);
#   b. HF Seq2SeqTrainer, optim="adafactor", 1 GPU x 2 x accumulation 2, no DeepSpeed (the reference);
#   a. the same Trainer under DeepSpeed 0.19.8 ZeRO-2 (WORK/ds_zero2.json: no "optimizer" section, so the Trainer's
#      Adafactor is DeepSpeed's client optimizer; fp32; no offload), 2 GPUs x 2, launched with torch.distributed.run
#      (torchrun, as test/bench/long_run/run.py launches HF's multi-GPU runs).
# All four: test/fixtures/t5/tiny_v10 (fp16 on disk, trained in fp32), the first 64 pairs of
# $T5TRAIN_DATA/wmt16-ro-en/validation.{en,ro}, max_source_length 48, max_target_length 8, dropout 0, seed 7, 30 updates,
# lr 1e-3 with the linear schedule and no warm-up, clip 1.0, logging every step, TF32 off; the t5train flags are those of
# test/test_gpu_multi_adafactor.c (its lr 3e-3 / warm-up 3 aside). Why a and b replay t5train's rows and why b uses
# accumulation 2: ds_adafactor_zero2.py's top comment.
# Needs (carried): .whl (the DeepSpeed 0.19.8 wheels and their dependencies, docs/zero.md; installed with
# --target into WORK/site, used by run a only), .devdata/shared (t5-spiece/, wmt16-ro-en/; or T5TRAIN_DATA), .devlibs
# (the binary's shared libraries), a t5train binary (T5TRAIN_BIN, default ./t5train at the repository root); python3
# with torch, transformers, sentencepiece, safetensors; 2 GPUs.
# Prints the four losses of every step with the relative difference of a, c and d against b, then a summary: step 1's
# losses and gradient norms (same weights and rows: all four should agree to ~1e-6 before any update), the largest
# relative loss difference of a, c, d against b, the final weights' relative L2 against b, and what DeepSpeed's
# Adafactor holds on each rank (how many tensors of 1 and 2 dimensions, how many got a factored second moment) against
# b's. Writes OUT/ds_adafactor_zero2.json, OUT/losses.tsv, OUT/summary.txt and the runs' logs and trainer_log.jsonl.
# WORK (default /tmp/ds_adafactor_zero2) is emptied first.
set -u
OUT=${1:?usage: ds_adafactor_zero2.sh OUT}
cd "$(dirname "$0")/../.."
REPO=$PWD
BIN=${T5TRAIN_BIN:-$REPO/t5train}
DATA=${T5TRAIN_DATA:-$REPO/.devdata/shared}
WORK=${WORK:-/tmp/ds_adafactor_zero2}
PY=scripts/device/ds_adafactor_zero2.py
MODEL=$REPO/test/fixtures/t5/tiny_v10
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 T5TRAIN_CACHE=$WORK/token_cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T5LIBS="$REPO/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # t5train's libraries, for t5train alone
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
if [ "$(nvidia-smi -L | grep -c '^GPU')" -lt 2 ]; then echo "ds_adafactor_zero2.sh: needs 2 GPUs"; exit 2; fi
for f in "$BIN" "$DATA/t5-spiece/spiece.model" "$DATA/wmt16-ro-en/validation.en" "$DATA/wmt16-ro-en/validation.ro" \
         "$MODEL/model.safetensors"; do
  [ -e "$f" ] || { echo "ds_adafactor_zero2.sh: $f is missing (see the usage lines)"; exit 2; }
done

# DeepSpeed's wheels, in the background (run a only; no ops are built: a client optimizer at ZeRO-2 without offload)
( timeout 90 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$WORK/site" .whl/*.whl > "$WORK/pip.log" 2>&1; echo $? > "$WORK/pip.rc" ) &
pip_pid=$!
python3 $PY prepare --data "$DATA" --work "$WORK" || exit 1
done_part() {  # NAME RC SECONDS WHAT
  echo "$1 $2 $3" >> "$WORK/status.txt"
  echo "== $1, $4: exit $2 in $3 s"
}
T5=(--model_name_or_path "$MODEL" --tokenizer_name "$DATA/t5-spiece/spiece.model"
    --train_file "$DATA/wmt16-ro-en/validation.en" --source_lang en --target_lang ro --max_source_length 48
    --max_target_length 8 --max_train_samples 64 --per_device_train_batch_size 2 --dropout_rate 0 --logging_steps 1
    --seed 7 --do_train --max_steps 30 --learning_rate 1e-3 --optim adafactor --save_strategy no --overwrite_output_dir)
HF=(hf --model "$MODEL" --tokenizer_dir "$WORK/tokenizer" --batches "$WORK/batches.json" --data "$DATA")

t=$SECONDS
CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH=$T5LIBS timeout -k 5 60 "$BIN" "${T5[@]}" --gradient_accumulation_steps 2 \
  --output_dir "$WORK/t5train_1gpu_ga2" --dump_batches "$WORK/batches.json" --dump_batches_steps 30 \
  > "$WORK/t5train_1gpu_ga2.log" 2>&1
done_part d $? $((SECONDS - t)) "t5train 1 GPU x 2 x accumulation 2 (--dump_batches)"
have_rows=1
if [ ! -s "$WORK/batches.json" ]; then
  have_rows=0
  echo "ds_adafactor_zero2.sh: t5train wrote no batches; the HF runs are skipped. Its log's tail:"
  tail -15 "$WORK/t5train_1gpu_ga2.log"
fi

( t=$SECONDS
  CUDA_VISIBLE_DEVICES=0,1 LD_LIBRARY_PATH=$T5LIBS timeout -k 5 90 "$BIN" --num_gpus 2 "${T5[@]}" \
    --gradient_accumulation_steps 1 --deepspeed '{"zero_optimization": {"stage": 2}, "gradient_clipping": "auto"}' \
    --output_dir "$WORK/t5train_zero2_2gpu" > "$WORK/t5train_zero2_2gpu.log" 2>&1
  done_part c $? $((SECONDS - t)) "t5train --num_gpus 2 ZeRO-2" ) &
c_pid=$!
b_pid=""
if [ $have_rows = 1 ]; then
  ( t=$SECONDS
    CUDA_VISIBLE_DEVICES=0 timeout -k 5 150 python3 $PY "${HF[@]}" --ga 2 --out "$WORK/hf_1gpu_ga2" \
      > "$WORK/hf_1gpu_ga2.log" 2>&1
    done_part b $? $((SECONDS - t)) "HF Trainer 1 GPU x 2 x accumulation 2" ) &
  b_pid=$!
fi
wait $pip_pid
echo "== pip install of .whl into $WORK/site: exit $(cat "$WORK/pip.rc" 2>/dev/null || echo '?')"
[ "$(cat "$WORK/pip.rc" 2>/dev/null)" = 0 ] || tail -5 "$WORK/pip.log"
if [ $have_rows = 1 ]; then
  t=$SECONDS
  CUDA_VISIBLE_DEVICES=0,1 PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}" DS_BUILD_OPS=0 TORCH_CUDA_ARCH_LIST=9.0 \
    timeout -k 10 170 python3 -m torch.distributed.run --standalone --nproc_per_node 2 $PY "${HF[@]}" --ga 1 \
      --deepspeed "$WORK/ds_zero2.json" --out "$WORK/hf_ds_zero2_2gpu" > "$WORK/hf_ds_zero2_2gpu.log" 2>&1
  done_part a $? $((SECONDS - t)) "HF Trainer + DeepSpeed ZeRO-2, 2 GPUs x 2"
fi
wait $c_pid ${b_pid:+$b_pid}
for r in hf_ds_zero2_2gpu hf_1gpu_ga2 t5train_zero2_2gpu t5train_1gpu_ga2; do  # a failed run's last lines
  if ! grep -q '"max_steps"' "$WORK/$r/trainer_log.jsonl" 2>/dev/null && [ -f "$WORK/$r.log" ]; then
    echo "== $r logged no step; its log's errors and last lines:"
    grep -E 'Error|error:' "$WORK/$r.log" | sort -u | tail -5; grep -v '^\s*$' "$WORK/$r.log" | tail -6
  fi
done
python3 $PY compare --work "$WORK" --out "$OUT" | tee "$OUT/summary.txt"
# logs (their tails) and the small result files come back; models do not
for r in hf_ds_zero2_2gpu hf_1gpu_ga2 t5train_zero2_2gpu t5train_1gpu_ga2; do
  mkdir -p "$OUT/$r"
  [ -f "$WORK/$r.log" ] && tail -c 40000 "$WORK/$r.log" > "$OUT/$r/log_tail.txt"
  for f in trainer_log.jsonl run_summary.json train_results.json all_results.json "$WORK/$r"/adafactor_view_rank*.json; do
    f=$(basename "$f")
    [ -f "$WORK/$r/$f" ] && cp "$WORK/$r/$f" "$OUT/$r/"
  done
done
cp "$WORK/status.txt" "$WORK/ds_zero2.json" "$OUT/" 2>/dev/null
tail -c 4000 "$WORK/pip.log" > "$OUT/pip_log_tail.txt" 2>/dev/null
gzip -c "$WORK/batches.json" > "$OUT/batches.json.gz" 2>/dev/null
echo "ds_adafactor_zero2.sh: $SECONDS s in all; results in $OUT"
