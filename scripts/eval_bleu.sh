#!/usr/bin/env bash
# eval_bleu.sh OUTPUT_DIR_OR_MODEL [SPLIT] [extra t5train flags...]: BLEU of a T5 checkpoint on WMT16 en->ro,
# the way run_translation.py --predict_with_generate computes it (greedy unless BEAMS > 1).
#
#   bash scripts/eval_bleu.sh output_dir                 # a directory t5train (or HF) saved, validation split
#   bash scripts/eval_bleu.sh t5-small test              # a hub name (HF cache), the test split
#   BEAMS=4 BATCH=32 BF16=1 bash scripts/eval_bleu.sh output_dir validation --max_eval_samples 500
#   bash scripts/eval_bleu.sh t5-3b test --num_gpus 4  # 4 ranks (t5train --num_gpus 4), each a share of the batches
#
# SPLIT: validation (default; --do_eval, metrics in eval_results.json) or test (--do_predict, metrics in
# predict_results.json plus generated_predictions.txt). Results go to $RESULTS_DIR (default
# OUTPUT_DIR_OR_MODEL/eval-<split> for a directory, ./eval-<name>-<split> for a hub name).
# Environment: T5TRAIN (binary, default ./t5train), BEAMS (1), BATCH (per_device_eval_batch_size, 32),
# MAX_LENGTH (generation_max_length, default: val_max_target_length 128), BF16=1 / FP16=1 (precision).
# --num_gpus N (anywhere after OUTPUT_DIR_OR_MODEL): t5train starts N ranks on this host (docs/launch.md); BATCH is
# per GPU. With a --deepspeed stage 3 config the weights stay partitioned over the ranks (ZeRO inference,
# docs/multi_gpu.md).
set -euo pipefail

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac

model="$1"; shift
split="validation"
if [ $# -ge 1 ] && [[ "$1" != --* ]]; then split="$1"; shift; fi
# --num_gpus N / --num_gpus=N: taken out of the extra flags and put first (t5train's launcher)
launch=()
rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    --num_gpus|--num_gpus=*)
      if [ "$1" = --num_gpus ]; then
        [ $# -ge 2 ] || { echo "eval_bleu.sh: error: --num_gpus needs a number of GPUs" >&2; exit 2; }
        n="$2"; shift 2
      else
        n="${1#--num_gpus=}"; shift
      fi
      [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "eval_bleu.sh: error: --num_gpus '$n' is not a positive whole number" >&2; exit 2; }
      [ ${#launch[@]} -eq 0 ] || { echo "eval_bleu.sh: error: --num_gpus given twice" >&2; exit 2; }
      launch=(--num_gpus "$n") ;;
    *) rest+=("$1"); shift ;;
  esac
done
set -- ${rest[@]+"${rest[@]}"}
bin="${T5TRAIN:-./t5train}"
[ -x "$bin" ] || { echo "eval_bleu.sh: error: t5train binary not found at $bin (build it with make, or set T5TRAIN)" >&2; exit 1; }

case "$split" in
  validation|eval) mode=(--do_eval); split=validation ;;
  test|predict) mode=(--do_predict); split=test ;;
  *) echo "eval_bleu.sh: error: unknown split '$split' (expected validation or test)" >&2; exit 2 ;;
esac

if [ -d "$model" ]; then
  results="${RESULTS_DIR:-$model/eval-$split}"
else
  results="${RESULTS_DIR:-./eval-$(basename "$model")-$split}"
fi

args=(--model_name_or_path "$model" --output_dir "$results" --overwrite_output_dir
      --dataset_name wmt16 --dataset_config ro-en --source_lang en --target_lang ro
      --source_prefix "translate English to Romanian: "
      "${mode[@]}" --predict_with_generate
      --per_device_eval_batch_size "${BATCH:-32}" --num_beams "${BEAMS:-1}")
[ -n "${MAX_LENGTH:-}" ] && args+=(--generation_max_length "$MAX_LENGTH")
[ "${BF16:-0}" = 1 ] && args+=(--bf16)
[ "${FP16:-0}" = 1 ] && args+=(--fp16)

echo "+ $bin ${launch[*]+${launch[*]} }${args[*]} $*"
"$bin" ${launch[@]+"${launch[@]}"} "${args[@]}" "$@"
for f in eval_results.json predict_results.json; do
  [ -f "$results/$f" ] && { echo "$results/$f:"; cat "$results/$f"; echo; }
done
[ -f "$results/generated_predictions.txt" ] && echo "predictions: $results/generated_predictions.txt"
exit 0
