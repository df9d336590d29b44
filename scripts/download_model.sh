#!/usr/bin/env bash
# download_model.sh NAME [DEST_DIR]: fetch a T5 checkpoint from the HuggingFace hub (needs internet).
#
#   bash scripts/download_model.sh t5-3b                  # into the HF cache, where ./t5train --model t5-3b looks
#   bash scripts/download_model.sh google/flan-t5-xl ./models/flan-t5-xl   # into a plain directory
#
# Only what t5train reads is fetched: config.json, the safetensors weights (single or sharded + index),
# and the tokenizer files (spiece.model, tokenizer.json, ...). Uses `hf download` / `huggingface-cli download`
# when installed, else python3 with huggingface_hub.snapshot_download. Honours HF_HOME / HF_HUB_CACHE / HF_TOKEN.
# Set T5_ALLOW_BIN=1 to also fetch pytorch_model.bin when a repo has no safetensors (then convert it with
# scripts/convert_bin_to_safetensors.py).
set -euo pipefail

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
case "$1" in -h|--help) usage ;; esac

name="$1"
dest="${2:-}"
# the hub's canonical ids: t5-* live under google-t5/, v1.1 and FLAN-T5 under google/
case "$name" in
  */*) repo="$name" ;;
  t5-v1_1-*|flan-t5-*) repo="google/$name" ;;
  t5-*) repo="google-t5/$name" ;;
  *) repo="$name" ;;
esac

patterns=(config.json generation_config.json "*.safetensors" model.safetensors.index.json spiece.model
          tokenizer.json tokenizer_config.json special_tokens_map.json)
if [ "${T5_ALLOW_BIN:-0}" = 1 ]; then patterns+=(pytorch_model.bin pytorch_model.bin.index.json "pytorch_model-*.bin"); fi

echo "downloading $repo${dest:+ into $dest} (${patterns[*]})"
if command -v hf >/dev/null 2>&1; then
  cli=(hf download)
elif command -v huggingface-cli >/dev/null 2>&1; then
  cli=(huggingface-cli download)
else
  cli=()
fi

if [ ${#cli[@]} -gt 0 ]; then
  args=("$repo")
  for p in "${patterns[@]}"; do args+=(--include "$p"); done
  [ -n "$dest" ] && args+=(--local-dir "$dest")
  out=$("${cli[@]}" "${args[@]}" | tail -n 1)
elif python3 -c 'import huggingface_hub' 2>/dev/null; then
  out=$(python3 - "$repo" "$dest" "${patterns[@]}" <<'PY'
import sys
from huggingface_hub import snapshot_download
repo, dest, pats = sys.argv[1], sys.argv[2], sys.argv[3:]
print(snapshot_download(repo_id=repo, allow_patterns=pats, local_dir=dest or None))
PY
)
else
  echo "t5train: error: neither the hf / huggingface-cli command nor the huggingface_hub Python package is installed" >&2
  echo "HINT: pip install -U huggingface_hub   (then run this script again)" >&2
  exit 1
fi

dir="${dest:-$out}"
echo "checkpoint folder: $dir"
if ! ls "$dir"/*.safetensors >/dev/null 2>&1; then
  echo "t5train: warning: $repo has no safetensors weights in $dir" >&2
  echo "HINT: T5_ALLOW_BIN=1 bash $0 $name ${dest}  then  python3 scripts/convert_bin_to_safetensors.py $dir" >&2
  exit 1
fi
echo "use it with: ./t5train --model ${dest:-$name}"
