#!/usr/bin/env bash
# kill_resume.sh OUT: issue 14 "Show": a tiny training run killed CYCLES times (default 50) at random moments with
# SIGKILL, SIGTERM or SIGINT (during start-up, steps and checkpoint writes: a checkpoint is saved every step), resumed
# each time with --resume_from_checkpoint last, then run to the end. Checks:
#   - every resume starts from the newest complete checkpoint (t5train_done) that existed before it started
#     ("Continuing training from global step N" = that step), and no complete checkpoint is reported corrupt;
#   - nothing complete is lost: the newest complete checkpoint before a cycle is still there after it (or replaced
#     by a newer one), and if still there its model.safetensors is byte-identical;
#   - every logged loss / grad_norm / loss_scale of every step (also the steps run twice after a resume) equals the
#     uninterrupted run's, and the final model.safetensors equals the uninterrupted run's bit for bit;
#   - no temporary file (*.tmp.*, .tmp-*) is left in output_dir at the end.
# Environment: T5TRAIN_BIN (the binary), T5TRAIN_DATA (t5-spiece/spiece.model, wmt16-ro-en/validation.{en,ro}),
# CYCLES (50), SEED (1: the kill moments and signals), MAX_STEPS (300). Prints PASS/FAIL lines and a summary;
# exit 0 only when every check passed. Runs in about 1-3 minutes on an H100 (the tiny model: D=8).
set -u
OUT=${1:?usage: kill_resume.sh OUT}
BIN=${T5TRAIN_BIN:?set T5TRAIN_BIN to the t5train binary}
DATA=${T5TRAIN_DATA:?set T5TRAIN_DATA to the data folder}
CYCLES=${CYCLES:-50}
MAX_STEPS=${MAX_STEPS:-300}
RANDOM=${SEED:-1}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=$REPO/test/fixtures/t5/tiny_v10
for f in "$BIN" "$DATA/t5-spiece/spiece.model" "$DATA/wmt16-ro-en/validation.en" "$MODEL/model.safetensors"; do
    [ -e "$f" ] || { echo "FAIL setup: $f not found"; exit 1; }
done
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/straight" "$OUT/killed" "$OUT/logs" "$OUT/tok"
mkdir -p "$OUT/logs"
export T5TRAIN_CACHE=$OUT/tok
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }  # no bc on a bare machine

# fp16 with dropout and gradient accumulation: the scaler, RNG, data position and Adam state all matter
args() {
    echo "--model_name_or_path $MODEL --tokenizer_name $DATA/t5-spiece/spiece.model" \
         "--train_file $DATA/wmt16-ro-en/validation.en --source_lang en --target_lang ro" \
         "--max_source_length 48 --max_target_length 48 --max_train_samples 64 --per_device_train_batch_size 8" \
         "--gradient_accumulation_steps 2 --do_train --max_steps $MAX_STEPS --learning_rate 3e-3 --warmup_steps 3" \
         "--dropout_rate 0.1 --fp16 --seed 7 --logging_steps 1 --save_steps 1 --save_total_limit 3" \
         "--output_dir $1"
}

# ---- the uninterrupted run, timed (start-up = until the first log line)
t0=$(date +%s.%N)
# shellcheck disable=SC2046
"$BIN" $(args "$OUT/straight") > "$OUT/logs/straight.log" 2>&1 &
pid=$!
startup=""
while kill -0 $pid 2>/dev/null; do
    if [ -z "$startup" ] && [ -s "$OUT/straight/trainer_log.jsonl" ]; then
        startup=$(calc "$(date +%s.%N) - $t0")
    fi
    sleep 0.02
done
wait $pid
rc=$?
wall=$(calc "$(date +%s.%N) - $t0")
if [ $rc -ne 0 ] || [ ! -f "$OUT/straight/model.safetensors" ]; then
    tail -20 "$OUT/logs/straight.log"
    echo "FAIL straight run: exit $rc"
    exit 1
fi
startup=${startup:-1}
echo "straight run: $MAX_STEPS steps in ${wall} s (start-up ${startup} s)"

# the kill moment of a cycle: part of the start-up, then a random share of the training time such that about
# CYCLES cycles are needed to reach the end (the work of each cycle since its resume point is redone after a kill)
train_s=$(calc "$wall - $startup")
sigs=(KILL TERM INT)
declare -A n_sig=([KILL]=0 [TERM]=0 [INT]=0)
# a complete leftover (checkpoint-N.tmp-* / .old-* with its marker: killed between the marker and the rename) counts:
# t5train's stale cleanup puts it back as checkpoint-N at the next start (src/train/checkpoint.c)
newest_complete() {  # prints "step" of the newest complete checkpoint-N (or leftover of N) with t5train_done, or 0
    local best=0 d s
    for d in "$1"/checkpoint-*; do
        [ -f "$d/t5train_done" ] || continue
        s=${d##*/checkpoint-}
        s=${s%%.*}
        [[ $s =~ ^[0-9]+$ ]] && [ "$s" -gt "$best" ] && best=$s
    done
    echo $best
}
K=$OUT/killed
resumed_ok=0
finished_early=0
for ((i = 1; i <= CYCLES; i++)); do
    before=$(newest_complete "$K")
    before_sum=""
    [ "$before" -gt 0 ] && [ -f "$K/checkpoint-$before/model.safetensors" ] &&
        before_sum=$(sha256sum < "$K/checkpoint-$before/model.safetensors" | cut -c1-64)
    resume=(--overwrite_output_dir)  # no checkpoint yet: a killed start-up may have left t5train_config.json
    [ "$before" -gt 0 ] && resume=(--resume_from_checkpoint last)
    sig=${sigs[$((RANDOM % 3))]}
    # delay: 30-120% of the start-up + up to 2.5x the average training share per cycle
    delay=$(calc "$startup * (30 + $RANDOM % 91) / 100 + $train_s * 2.5 * ($RANDOM % 1000) / 1000 / $CYCLES")
    log=$OUT/logs/cycle_$i.log
    # shellcheck disable=SC2046
    "$BIN" $(args "$K") "${resume[@]}" > "$log" 2>&1 &
    pid=$!
    sleep "$delay"
    if kill -0 $pid 2>/dev/null; then
        kill -s "$sig" $pid
        n_sig[$sig]=$((n_sig[$sig] + 1))
    else
        sig="none (finished before the kill)"
    fi
    wait $pid
    rc=$?
    # what it resumed from
    if [ "$before" -gt 0 ]; then
        from=$(sed -n 's/^  Continuing training from global step \([0-9]*\).*/\1/p' "$log" | head -1)
        if [ -n "$from" ]; then
            if [ "$from" != "$before" ]; then
                fail "cycle $i: resumed from step $from, the newest complete checkpoint was $before"
            else
                resumed_ok=$((resumed_ok + 1))
            fi
        elif [ "$sig" = KILL ] || [ $rc -ge 128 ]; then
            :  # stopped before it read the checkpoint (killed during start-up)
        else
            fail "cycle $i: exit $rc without a 'Continuing training from global step' line"
        fi
    fi
    if grep -q "skipping incomplete or corrupt checkpoint" "$log"; then
        fail "cycle $i: a checkpoint was reported incomplete or corrupt: $(grep -m1 'skipping incomplete' "$log")"
    fi
    if grep -q "\[CUDA ERROR\]\|Segmentation\|Aborted\|core dumped" "$log"; then
        fail "cycle $i: crash text in $log"
    fi
    case $sig in
        KILL) [ $rc -eq 137 ] || fail "cycle $i: SIGKILL but exit $rc" ;;
        TERM | INT) [ $rc -eq 0 ] || [ $rc -eq 130 ] || [ $rc -eq 143 ] || fail "cycle $i: SIG$sig, exit $rc (0 in the loop, 130/143 before it)" ;;
        *) [ $rc -eq 0 ] || fail "cycle $i: exit $rc without a signal" ;;
    esac
    after=$(newest_complete "$K")
    if [ "$after" -lt "$before" ]; then
        fail "cycle $i: the newest complete checkpoint went from $before to $after (a complete checkpoint was lost)"
    fi
    if [ -n "$before_sum" ] && [ -f "$K/checkpoint-$before/t5train_done" ]; then
        now=$(sha256sum < "$K/checkpoint-$before/model.safetensors" | cut -c1-64)
        [ "$now" = "$before_sum" ] || fail "cycle $i: checkpoint-$before/model.safetensors changed"
    elif [ -n "$before_sum" ] && [ "$after" -le "$before" ]; then
        fail "cycle $i: checkpoint-$before disappeared without a newer complete one"
    fi
    printf 'cycle %2d: SIG%-5s after %6.3f s, exit %3d, newest complete checkpoint %4d -> %4d\n' "$i" "$sig" "$delay" "$rc" "$before" "$after"
    if [ -f "$K/model.safetensors" ] && [ "$after" -ge "$MAX_STEPS" ] && [ $rc -eq 0 ]; then
        finished_early=$i
        echo "the run reached step $MAX_STEPS in cycle $i (raise CYCLES for more kills: each cycle takes ~1.25/CYCLES of the run)"
        break
    fi
done

# ---- to the end
if [ ! -f "$K/model.safetensors" ] || [ "$(newest_complete "$K")" -lt "$MAX_STEPS" ]; then
    # shellcheck disable=SC2046
    "$BIN" $(args "$K") --resume_from_checkpoint last > "$OUT/logs/final.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail "final resumed run: exit $rc ($(tail -1 "$OUT/logs/final.log"))"
fi

# ---- the same numbers as the uninterrupted run
python3 - "$OUT/straight/trainer_log.jsonl" "$K/trainer_log.jsonl" "$MAX_STEPS" <<'EOF' || fails=$((fails + 1))
import json, sys
def rows(p):
    out = []
    for line in open(p):
        line = line.strip()
        if not line:
            continue
        d = json.loads(line)
        if "max_steps" in d:  # step lines
            out.append(d)
    return out
ref = {d["step"]: d for d in rows(sys.argv[1])}
got = rows(sys.argv[2])
bad = 0
for d in got:
    r = ref.get(d["step"])
    for k in ("loss", "grad_norm", "learning_rate", "loss_scale"):
        if r is None or repr(d.get(k)) != repr(r.get(k)):
            bad += 1
            if bad <= 5:
                print(f"FAIL step {d['step']} {k}: {d.get(k)!r} after kills vs {r.get(k) if r else None!r} straight")
steps = sorted({d["step"] for d in got})
missing = [s for s in range(1, int(sys.argv[3]) + 1) if s not in steps]
if missing:
    print(f"FAIL steps never logged after the kills: {missing[:10]}{' ...' if len(missing) > 10 else ''}")
print(f"log lines after the kills: {len(got)} for {len(steps)} steps ({len(got) - len(steps)} steps run again after a "
      f"resume); mismatches against the straight run: {bad}")
sys.exit(1 if bad or missing else 0)
EOF
if cmp -s "$OUT/straight/model.safetensors" "$K/model.safetensors"; then
    echo "PASS final weights: model.safetensors identical to the uninterrupted run ($(stat -c %s "$K/model.safetensors") bytes)"
else
    fail "final weights differ from the uninterrupted run"
fi
left=$(find "$K" \( -name '*.tmp.*' -o -name '.tmp-*' -o -name '*.tmp-*' \) | head -5)
[ -z "$left" ] || fail "temporary files left in output_dir: $left"

echo "---- summary"
echo "cycles: $((finished_early > 0 ? finished_early : CYCLES)), signals sent: SIGKILL ${n_sig[KILL]}, SIGTERM ${n_sig[TERM]}, SIGINT ${n_sig[INT]}; resumes from the newest complete checkpoint: $resumed_ok"
if [ $fails -eq 0 ]; then
    echo "PASS kill_resume: every resume from the newest complete checkpoint, nothing complete lost, final weights bit-identical"
    exit 0
fi
echo "FAIL kill_resume: $fails check(s) failed (logs in $OUT/logs)"
exit 1
