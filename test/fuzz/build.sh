#!/usr/bin/env bash
# build.sh [OUT_DIR]: builds the libFuzzer harnesses of test/fuzz under ASan + UBSan with clang
# (Debian's clang ships libFuzzer). Each harness links only the host C files it exercises.
#   bash test/fuzz/build.sh build-fuzz && build-fuzz/fuzz_safetensors -runs=1000000 test/fuzz/corpus/safetensors
# Run from the repository root. CC=clang-NN overrides the compiler.
set -euo pipefail
OUT=${1:-build-fuzz}
CC=${CC:-clang}
mkdir -p "$OUT"
PKG_CFLAGS=$(pkg-config --cflags jansson sentencepiece 2>/dev/null || true)
FLAGS="-g -O1 -std=gnu11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -I. -Isrc -Isrc/base -Imodel -Idata -I/usr/local/cuda/include $PKG_CFLAGS"
LIBS="-ljansson -lm -lpthread"
CXX=${CXX:-${CC/clang/clang++}}
build() {  # name sources... (.cc files are compiled as C++ and linked with the SentencePiece library)
  local name=$1; shift
  local objs=() extra=""
  echo "Building $OUT/$name"
  for s in "$@"; do
    if [[ $s == *.cc ]]; then
      # shellcheck disable=SC2086
      $CXX ${FLAGS/-std=gnu11/-std=c++17} -fsanitize=fuzzer-no-link -fno-sanitize=vptr -c "$s" -o "$OUT/$(basename "$s").o"
      objs+=("$OUT/$(basename "$s").o"); extra="$(pkg-config --libs sentencepiece) -lstdc++"
    else
      objs+=("$s")
    fi
  done
  # shellcheck disable=SC2086
  $CC $FLAGS -o "$OUT/$name" "test/fuzz/$name.c" "${objs[@]}" $LIBS $extra
}
build fuzz_safetensors src/base/safetensors.c src/base/common.c src/base/signals.c
build fuzz_state src/train/checkpoint.c src/base/crc32c.c src/base/safetensors.c src/base/common.c src/base/signals.c src/report/results.c src/report/trainer_log.c model/params.c model/optim_groups.c model/t5_config.c
build fuzz_readers data/readers.c data/tokenizer.c data/spm.cc src/base/common.c
CONFIG_SRCS=$(ls src/cli/config*.c)
build fuzz_config $CONFIG_SRCS model/t5_config.c src/base/safetensors.c src/base/common.c src/base/signals.c
