#!/usr/bin/env bash
# train_on_one_gpu.sh: the homework job on one GPU, what DeepSpeed users run as
#   deepspeed --num_gpus=1 run_translation.py --deepspeed ds_config_zero3.json --model_name_or_path t5-3b ...
# Every argument given is passed on after the homework's own (a later flag wins), e.g.
#   scripts/train_on_one_gpu.sh --model_name_or_path t5-small --output_dir out_small
#   scripts/train_on_one_gpu.sh --init random --data_dir /data/wmt16   # no weights or data downloads
# T5TRAIN_BIN picks the binary (default ./t5train). Prints the command it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${T5TRAIN_BIN:-./t5train}
cmd=("$BIN" --deepspeed configs/ds_config_zero3.json --model_name_or_path t5-3b
     --do_train --do_eval --per_device_train_batch_size 1 --per_device_eval_batch_size 4
     --output_dir output_dir --overwrite_output_dir --max_train_samples 500 --num_train_epochs 1
     --dataset_name wmt16 --dataset_config ro-en --source_lang en --target_lang ro --fp16 "$@")
echo "+ ${cmd[*]}"
exec "${cmd[@]}"
