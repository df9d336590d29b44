#!/usr/bin/env bash
# estimate_tables.sh [T5TRAIN_BIN] > docs/estimate_tables.md: `t5train estimate` for t5-small ... t5-11b on 1, 2 and
# 8 GPUs (one node), the homework knobs (configs/ds_config_zero3.json), fp16, batch 8 x (128 + 128), no
# checkpointing, against an 80 GB H100's 79.6 GiB and a 125 GiB host per node (the device machine), with
# DeepSpeed's own estimator beside each. Needs no GPU (--gpu_mem / --host_mem replace the machine's readings).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-${T5TRAIN_BIN:-./t5train}}
echo "# Memory plans for every T5 size on 1, 2 and 8 GPUs (generated)"
echo
echo "Made by \`scripts/estimate_tables.sh\` (commit $(git rev-parse --short HEAD)): \`t5train estimate --deepspeed"
echo "configs/ds_config_zero3.json --model M --fp16 --batch 8 --source_len 128 --target_len 128 --num_gpus N"
echo "--gpu_mem 79.6 --host_mem 125\`. GiB per GPU (rank) and per node. Several ranks: the engine's N-rank partitions and"
echo "buffers, NCCL's measured allowance, and step times from the NCCL bandwidth measured on two H100s of one host"
echo "(docs/multi_gpu.md; 8 GPUs assume the same per-link rate, not measured). How each column is counted: docs/estimate.md."
for m in t5-small t5-base t5-large t5-3b t5-11b; do
    echo
    echo "## $m"
    for n in 1 2 8; do
        echo
        echo "### $m on $n GPU$([ "$n" -gt 1 ] && echo s)"
        echo
        echo '```'
        "$BIN" estimate --deepspeed configs/ds_config_zero3.json --model "$m" --fp16 --batch 8 --source_len 128 \
            --target_len 128 --num_gpus "$n" --gpu_mem 79.6 --host_mem 125 2>&1 |
            sed -n '/^plan /,$p'
        echo '```'
    done
done
