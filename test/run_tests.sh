#!/usr/bin/env bash
# run_tests.sh BIN...: runs each cmocka test program with TAP output and prints the totals as
#   N passed, N failed, N skipped
# A program that crashes or exits non-zero without a failing test line counts as one failure,
# so a crash is never lost. GPU tests skip themselves when no GPU is present.
# Set T5TEST_QUIET=1 to print only failing programs' output.
set -u
passed=0; failed=0; skipped=0
failed_names=()
export CMOCKA_MESSAGE_OUTPUT=TAP
if [ -z "${T5TRAIN_DATA:-}" ] && [ -d ../shared/data ]; then
  export T5TRAIN_DATA="$(cd ../shared/data && pwd)"
fi
for bin in "$@"; do
  name=$(basename "$bin")
  start=$(date +%s.%N)
  out=$("$bin" 2>&1); rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
  p=$(grep -cE '^ok [0-9]+' <<<"$out")
  s=$(grep -cE '^not ok [0-9]+ # SKIP' <<<"$out")
  f=$(grep -E '^not ok [0-9]+' <<<"$out" | grep -cv '# SKIP')
  # a failure message without a trailing newline can glue the next "not ok" to its last line: the
  # TAP plan ("1..N") gives the real total, so tests not reported as ok or skipped count as failed
  plan=$(grep -oE '^1\.\.[0-9]+' <<<"$out" | head -1 | cut -d. -f3)
  if [ -n "$plan" ] && [ $((plan - p - s)) -gt "$f" ]; then f=$((plan - p - s)); fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    out+=$'\n'"not ok - $name exited with status $rc without reporting a failed test (crash?)"
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  if [ "$f" -gt 0 ]; then
    failed_names+=("$name")
    echo "=== $name: $p passed, $f failed, $s skipped (${secs}s)"
    echo "$out" | sed 's/^/    /'
  else
    echo "=== $name: $p passed, $f failed, $s skipped (${secs}s)"
    [ "${T5TEST_QUIET:-0}" = 1 ] || echo "$out" | grep -E '^(ok|not ok|#)' | sed 's/^/    /'
  fi
done
if [ "${#failed_names[@]}" -gt 0 ]; then echo "failing programs: ${failed_names[*]}"; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
