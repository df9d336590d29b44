#!/usr/bin/env bash
# all_checks.sh OUT: every device check of the open issues in one call, each under its own time limit, with one
# summary line per check at the end (for a session's limited device time: plan about 12 minutes in all).
#   1. the GPU tests (scripts/device_gpu_tests.sh on the staged binaries; makes the transformers checkpoint cases)
#   2. scripts/device/kill_resume.sh with CYCLES=75 (a cycle takes ~1.25/CYCLES of the run: CYCLES=60 gave 49 kills)  (issue 14)
#   3. scripts/device/estimate_accuracy.sh                                               (issue 17)
#   4. scripts/device/e2e_fresh_machine.sh, then scripts/hf_run_keys.py --compare on its output (issue 15)
#   5. scripts/device/precision_vs_autocast.py                                            (issue 14)
#   6. scripts/device/item7_memory.sh: GPU memory with buffers sized by the data vs by the max lengths (issue 14)
# Environment: T5TRAIN_BIN (the staged t5train), STAGED (the folder of staged test binaries, default the binary's),
# T5TRAIN_DATA, LD_LIBRARY_PATH with .devlibs; SKIP="2 5" leaves checks out. Everything goes under OUT.
set -u
OUT=${1:?usage: all_checks.sh OUT}
BIN=${T5TRAIN_BIN:?set T5TRAIN_BIN}
STAGED=${STAGED:-$(dirname "$BIN")}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
declare -a summary
run_check() {  # number name limit_s command...
    local n=$1 name=$2 limit=$3; shift 3
    if [[ " ${SKIP:-} " == *" $n "* ]]; then summary+=("$n $name: skipped (SKIP)"); return; fi
    local t0=$SECONDS
    if declare -F "$1" > /dev/null; then  # a function of this script: timeout cannot run it
        ( "$@" ) > "$OUT/$n-$name.log" 2>&1 &
        local pid=$!
        ( sleep "$limit"; kill -TERM -- "$pid" 2>/dev/null ) &
        local killer=$!
        wait "$pid"
        local rc=$?
        kill "$killer" 2>/dev/null
    else
        timeout "$limit" "$@" > "$OUT/$n-$name.log" 2>&1
        local rc=$?
    fi
    local verdict=PASS
    [ $rc -ne 0 ] && verdict="FAIL (exit $rc$([ $rc -eq 124 ] && echo ", over ${limit} s"))"
    summary+=("$n $name: $verdict in $((SECONDS - t0)) s; $(grep -E 'passed, .* failed|^PASS |^FAIL ' "$OUT/$n-$name.log" | tail -1)")
}
run_check 1 gpu_tests 560 bash scripts/device_gpu_tests.sh "$STAGED"
run_check 2 kill_resume 330 env CYCLES=75 MAX_STEPS=1500 bash scripts/device/kill_resume.sh "$OUT/kr"
run_check 3 estimate_accuracy 300 bash scripts/device/estimate_accuracy.sh "$OUT/ea"
run_check 4 e2e 120 bash scripts/device/e2e_fresh_machine.sh "$OUT/e2e"
# the run scripts/hf_run_keys.py made with transformers (test/fixtures/hf_keys/hf_run_keys.json), by t5train
D=${T5TRAIN_DATA:?set T5TRAIN_DATA}
keys_run() {
    "$BIN" --model_name_or_path test/fixtures/t5/tiny_v10 --tokenizer_name "$D/t5-spiece/spiece.model" \
        --train_file "$D/wmt16-ro-en/validation.en" --validation_file "$D/wmt16-ro-en/validation.en" \
        --test_file "$D/wmt16-ro-en/validation.en" --source_lang en --target_lang ro --max_train_samples 32 \
        --max_eval_samples 8 --max_predict_samples 8 --per_device_train_batch_size 8 --per_device_eval_batch_size 8 \
        --do_train --do_eval --do_predict --predict_with_generate --generation_max_length 16 --max_steps 4 \
        --evaluation_strategy steps --eval_steps 2 --save_strategy steps --save_steps 2 --save_total_limit 1 \
        --logging_steps 1 --output_dir "$OUT/keys_run" --overwrite_output_dir &&
        python3 scripts/hf_run_keys.py --compare "$OUT/keys_run"
}
run_check 4b hf_keys_compare 90 keys_run
run_check 5 precision 240 python3 scripts/device/precision_vs_autocast.py "$OUT/prec"
run_check 6 item7_memory 200 bash scripts/device/item7_memory.sh "$OUT/item7"
echo "==== summary"
printf '%s\n' "${summary[@]}"
