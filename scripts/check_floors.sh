#!/usr/bin/env bash
# check_floors.sh: every #include "..." of the source rooms points at its own folder or a lower floor
# (docs/layout.md). Prints TAP (one test, "1..1") so test/run_tests.sh counts it; a failure lists each
# offending line: an include from a higher floor, from a peer folder of the same floor, from a folder
# not in the table, one that resolves to no file, or a source file in a folder not in the table.
# Run from anywhere: scripts/check_floors.sh [REPO_ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

# folder -> floor (lowest first); keep in step with docs/layout.md
floor_of() {
  case "$1" in
    src/base) echo 0 ;;
    cuda) echo 1 ;;
    model | data | src/launch | src/nvme) echo 2 ;;
    src/zero | src/report | src/download) echo 3 ;;
    src/eval | src/upload) echo 4 ;;
    src/train) echo 5 ;;
    src/cli) echo 6 ;;
    *) echo "" ;;
  esac
}

bad=()
nfiles=0
while IFS= read -r f; do
  nfiles=$((nfiles + 1))
  dir=$(dirname "$f")
  from=$(floor_of "$dir")
  if [ -z "$from" ]; then
    bad+=("$f: folder $dir is not in the floor table (scripts/check_floors.sh, docs/layout.md)")
    continue
  fi
  while IFS=: read -r line inc; do
    inc=${inc#*\"}; inc=${inc%%\"*}
    tgt=""
    for cand in "$dir/$inc" "$inc"; do  # relative to the file, then -I. (the repository root)
      if [ -f "$cand" ]; then tgt=$(realpath -m --relative-to=. "$cand"); break; fi
    done
    if [ -z "$tgt" ]; then
      bad+=("$f:$line: \"$inc\" resolves to no file")
      continue
    fi
    tdir=$(dirname "$tgt")
    to=$(floor_of "$tdir")
    if [ -z "$to" ]; then
      bad+=("$f:$line: \"$inc\" is in $tdir, a folder not in the floor table")
    elif [ "$tdir" != "$dir" ] && [ "$to" -ge "$from" ]; then
      bad+=("$f:$line: \"$inc\" reaches $tdir (floor $to) from $dir (floor $from)")
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | cut -d: -f1,2-)
done < <(find src model data cuda -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc' \) | sort)

echo "1..1"
if [ "${#bad[@]}" -eq 0 ] && [ "$nfiles" -gt 0 ]; then
  echo "ok 1 - floors: $nfiles source files include only their own folder or lower floors"
  exit 0
fi
echo "not ok 1 - floors: ${#bad[@]} include(s) break the floor order (docs/layout.md)"
for b in "${bad[@]}"; do echo "# $b"; done
exit 1
