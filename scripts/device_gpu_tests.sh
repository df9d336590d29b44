#!/usr/bin/env bash
# device_gpu_tests.sh [BUILD]: runs the GPU tests on a machine with a GPU from binaries built
# elsewhere (e.g. carried to the device machine with the folder .devlibs holding libjansson,
# libsentencepiece, libcmocka and libgomp). Equivalent to `make test-gpu` without rebuilding.
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}
if [ -d .devlibs ]; then export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
BIN=t5train; [ "$BUILD" != build ] && BIN=$BUILD/t5train
T5TRAIN_BIN=$PWD/$BIN T5TRAIN_REQUIRE_GPU=1 bash test/run_tests.sh "$BUILD"/test/test_gpu_*
