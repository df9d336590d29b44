#!/usr/bin/env bash
# install_deps.sh: installs the Debian/Ubuntu packages t5train needs to build and test.
# Idempotent: when every package is present it only checks and returns (well under a second).
# The CUDA toolkit (nvcc, cuBLASLt) and NCCL are expected under CUDA_HOME (default /usr/local/cuda);
# they are checked, not installed.
set -euo pipefail
PKGS=(build-essential pkg-config libjansson-dev libsentencepiece-dev libcmocka-dev libopenmpi-dev openmpi-bin libcurl4-openssl-dev libarchive-dev libprotobuf-c-dev protobuf-c-compiler)
# probe what the build needs (tools on PATH, libraries through pkg-config, as the Makefile does)
missing=()
for t in gcc g++ make pkg-config mpirun; do command -v "$t" >/dev/null 2>&1 || missing+=("tool:$t"); done
if command -v pkg-config >/dev/null 2>&1; then
  for m in jansson sentencepiece cmocka ompi-c libcurl libarchive libprotobuf-c; do pkg-config --exists "$m" || missing+=("lib:$m"); done
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install_deps: missing ${missing[*]}; installing ${PKGS[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
else
  echo "install_deps: all packages present"
fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "install_deps: warning: nvcc not found under $CUDA_HOME (set CUDA_HOME); the CUDA toolkit is not installed by this script" >&2
fi
# the tensorboard Python package: test_report reads the event files back with TensorBoard's own reader (the
# test skips, saying so, without it); about 8 s with pip, so CI installs it; a failure only warns
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import tensorboard' >/dev/null 2>&1; then
  echo "install_deps: installing the tensorboard Python package (pip)"
  python3 -m pip install -q tensorboard >/dev/null 2>&1 || \
    echo "install_deps: warning: pip install tensorboard failed; test_report skips its TensorBoard read-back" >&2
fi
