#!/usr/bin/env bash
# device_gpu_tests.sh: run the GPU tests on a machine with a GPU from binaries built elsewhere
# (the device machine has no jansson / SentencePiece / cmocka headers to build with).
#
#   here:    make -j2 tests && bash scripts/device_gpu_tests.sh --stage .devrun-lead
#            (copies t5train and build/test/test_gpu_* into the folder; .devlibs must hold
#             libjansson, libsentencepiece, libcmocka and libgomp .so files)
#   there:   T5TRAIN_DATA=<folder with t5-spiece/, wmt16-ro-en/> bash scripts/device_gpu_tests.sh .devrun-lead
#
# Equivalent to `make test-gpu` without rebuilding; prints the same "N passed, N failed, N skipped" line. Where
# python3 has torch and transformers, it first writes the transformers checkpoints test_gpu_hf_checkpoints reads.
set -u
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--stage" ]; then
  dir=${2:?usage: device_gpu_tests.sh --stage DIR}
  mkdir -p "$dir"
  cp t5train build/test/test_gpu_* "$dir"/ && rm -f "$dir"/*.o "$dir"/*.d
  strip --strip-debug "$dir"/*   # smaller to carry (64 MiB limit)
  du -sh "$dir"
  exit 0
fi
dir=${1:?usage: device_gpu_tests.sh DIR}
dir=$(realpath "$dir")  # absolute or relative to the repository root
if [ -d .devlibs ]; then export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# test_gpu_hf_checkpoints compares with checkpoints transformers writes: make them here when torch + transformers
# are there (the device machine), else that test skips
if [ -z "${T5TRAIN_HF_CASES:-}" ] && python3 -c 'import torch, transformers' 2>/dev/null; then
  cases=${TMPDIR:-/tmp}/t5train_hf_cases
  if PYTHONUNBUFFERED=1 python3 scripts/make_hf_checkpoint_cases.py --out "$cases" > "$cases.log" 2>&1; then
    export T5TRAIN_HF_CASES=$cases
  else
    echo "make_hf_checkpoint_cases.py failed (test_gpu_hf_checkpoints will skip): see $cases.log"
  fi
fi
T5TRAIN_BIN=$dir/t5train T5TRAIN_REQUIRE_GPU=1 bash test/run_tests.sh "$dir"/test_gpu_*
