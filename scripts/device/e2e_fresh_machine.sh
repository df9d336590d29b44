#!/usr/bin/env bash
# e2e_fresh_machine.sh OUT: issue 15 "Show" on the GPU machine, with no network: the loopback Hub
# (test/hub_server.py) serves a tiny random T5 written by transformers (save_pretrained) + spiece.model as repo
# "org/t5-e2e"; from an empty HF_HOME under OUT:
#   1. --dry_run lists what it would download and downloads nothing (only HEAD requests, no cache folder);
#   2. t5train --model_name_or_path org/t5-e2e trains a few steps and evaluates (HF_ENDPOINT = the loopback Hub),
#      writing run_translation's files;
#   3. transformers (HF_HUB_OFFLINE=1, same HF_HOME) loads the model with from_pretrained("org/t5-e2e") from the cache
#      t5train filled, and its logits on one batch match the model t5train loaded (its dump-grads);
#   3b. the other way: transformers / huggingface_hub download org/t5-e2e from the loopback Hub into a second empty
#      HF_HOME, and t5train dump-grads reads that cache offline (0 requests) to the same logits;
#   4. t5train again with HF_HUB_OFFLINE=1: it runs from the cache, and the server sees no request at all;
#   5. the loss / learning-rate plot of run 2 from trainer_log.jsonl (scripts/plot_loss.py; skipped with a note when
#      matplotlib is missing) into OUT/loss_lr.png.
# Environment: T5TRAIN_BIN, T5TRAIN_DATA (t5-spiece/spiece.model, wmt16-ro-en/validation.{en,ro}). python3 with torch,
# transformers, safetensors. Prints PASS/FAIL lines; exit 0 only when all passed. About 1 minute.
set -u
OUT=${1:?usage: e2e_fresh_machine.sh OUT}
BIN=${T5TRAIN_BIN:?set T5TRAIN_BIN to the t5train binary}
DATA=${T5TRAIN_DATA:?set T5TRAIN_DATA to the data folder}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/served" "$OUT/hf" "$OUT/run1" "$OUT/run2" "$OUT/tok" "$OUT/server.log"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
pass() { echo "PASS $*"; }

# ---- the tiny model, written by transformers (random weights, v1.0 shape, real vocabulary)
mkdir -p "$OUT/served/org/t5-e2e"
python3 - "$OUT/served/org/t5-e2e" <<'EOF' || { echo "FAIL could not write the model with transformers"; exit 1; }
import sys, torch
from transformers import T5Config, T5ForConditionalGeneration
cfg = T5Config(vocab_size=32128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
               feed_forward_proj="relu", tie_word_embeddings=True, dropout_rate=0.1, decoder_start_token_id=0,
               pad_token_id=0, eos_token_id=1)
torch.manual_seed(0)
T5ForConditionalGeneration(cfg).save_pretrained(sys.argv[1])
EOF
cp "$DATA/t5-spiece/spiece.model" "$OUT/served/org/t5-e2e/" || exit 1
ls "$OUT/served/org/t5-e2e"

# ---- the loopback Hub
python3 "$REPO/test/hub_server.py" --root "$OUT/served" --port-file "$OUT/port" --log "$OUT/server.log" \
    > "$OUT/server.out" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$OUT/port" ] && break; sleep 0.05; done
[ -s "$OUT/port" ] || { echo "FAIL the loopback Hub did not start: $(cat "$OUT/server.out")"; exit 1; }
EP=http://127.0.0.1:$(cat "$OUT/port")
echo "loopback Hub at $EP"

# every cache under OUT; nothing from the machine's own caches
export HF_HOME=$OUT/hf HF_ENDPOINT=$EP T5TRAIN_CACHE=$OUT/tok T5TRAIN_HTTP_RETRY_BASE_S=0.01
unset HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_TOKEN
job() {  # the main job's command line (run_translation flags), output_dir $1
    "$BIN" --model_name_or_path org/t5-e2e --train_file "$DATA/wmt16-ro-en/validation.en" \
        --validation_file "$DATA/wmt16-ro-en/validation.en" --source_lang en --target_lang ro \
        --source_prefix 'translate English to Romanian: ' --max_source_length 64 --max_target_length 64 \
        --max_train_samples 64 --max_eval_samples 16 --per_device_train_batch_size 8 --per_device_eval_batch_size 8 \
        --do_train --do_eval --predict_with_generate --max_steps 20 --learning_rate 1e-3 --logging_steps 1 \
        --save_steps 10 --save_total_limit 1 --output_dir "$1" --overwrite_output_dir --fp16 "${@:2}"
}
nreq() {  # requests in the server log matching $1 (the server logs after answering: give it a moment)
    sleep 0.2
    if [ -f "$OUT/server.log" ]; then grep -c "$1" "$OUT/server.log"; else echo 0; fi
}

# ---- 1. dry run from the empty cache: lists, downloads nothing
job "$OUT/run1" --dry_run > "$OUT/dry.log" 2>&1
rc=$?
grep "^dry run" "$OUT/dry.log"
if [ $rc -eq 0 ] && grep -q "dry run: would download" "$OUT/dry.log" && [ "$(nreq '^GET ')" = 0 ] &&
   [ ! -e "$HF_HOME/hub/models--org--t5-e2e" ] && [ ! -e "$OUT/run1" ]; then
    pass "dry run: lists the files it would download, $(nreq '^HEAD ') HEAD requests, no GET, nothing created"
else
    fail "dry run: exit $rc, GET requests $(nreq '^GET '), cache folder $( [ -e "$HF_HOME/hub/models--org--t5-e2e" ] && echo created || echo absent)"
fi
: > "$OUT/server.log"

# ---- 2. from the empty cache: download, train, evaluate
job "$OUT/run1" > "$OUT/run1.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    tail -20 "$OUT/run1.log"
    fail "run 1 (download + train + eval): exit $rc"
else
    missing=""
    for f in model.safetensors config.json spiece.model all_results.json train_results.json eval_results.json \
             trainer_state.json trainer_log.jsonl; do
        [ -f "$OUT/run1/$f" ] || missing="$missing $f"
    done
    [ -z "$missing" ] && pass "run 1: downloaded $(nreq '^GET ') files, trained 20 steps, evaluated; every results file written" \
                      || fail "run 1: missing$missing"
    grep -h '"eval_loss"\|"eval_bleu"' "$OUT/run1/eval_results.json"
fi
SNAP=$(ls -d "$HF_HOME"/hub/models--org--t5-e2e/snapshots/*/ 2>/dev/null | head -1)
[ -n "$SNAP" ] && [ -f "$HF_HOME/hub/models--org--t5-e2e/refs/main" ] && pass "HF cache layout: $SNAP" \
    || fail "no snapshot / refs/main under $HF_HOME/hub/models--org--t5-e2e"

# ---- 3. transformers reads the cache t5train filled (offline), same logits as the model t5train loads
if [ -n "$SNAP" ]; then
    python3 - "$BIN" "$REPO" "$OUT" <<'EOF'
import json, os, subprocess, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from transformers import T5ForConditionalGeneration
binary, repo, out = sys.argv[1:4]
try:
    m = T5ForConditionalGeneration.from_pretrained("org/t5-e2e", dtype=torch.float32).eval()
except Exception as e:
    print(f"FAIL transformers from_pretrained('org/t5-e2e') offline: {type(e).__name__}: {e}")
    sys.exit(1)
b = json.load(open(os.path.join(repo, "test/fixtures/t5/batch.json")))
kw = {k: torch.tensor(b[k]) for k in ("input_ids", "attention_mask", "labels")}
with torch.no_grad():
    logits = m(**kw, use_cache=False).logits
bp = os.path.join(out, "batch.json")
json.dump({k: b[k] for k in ("input_ids", "attention_mask", "labels", "decoder_input_ids") if k in b}, open(bp, "w"))
r = subprocess.run([binary, "dump-grads", "--model", "org/t5-e2e", "--batch", bp, "--out",
                    os.path.join(out, "dg.safetensors")], capture_output=True, text=True)
if r.returncode != 0:
    print(f"FAIL t5train dump-grads --model org/t5-e2e (offline cache): {(r.stdout + r.stderr)[-500:]}")
    sys.exit(1)
from safetensors.torch import load_file
ours = load_file(os.path.join(out, "dg.safetensors"))["logits"]
rel = float((ours.double() - logits.double()).norm() / logits.double().norm())
ok = rel < 1e-4
print(f"{'PASS' if ok else 'FAIL'} transformers loads org/t5-e2e offline from the cache t5train filled; logits vs "
      f"t5train's rel L2 {rel:.2e}")
sys.exit(0 if ok else 1)
EOF
    [ $? -eq 0 ] || fails=$((fails + 1))
fi

# ---- 3b. and the other way: a cache filled by transformers (huggingface_hub through the loopback Hub, a second empty
# HF_HOME) is read by t5train offline, with no request, to the same logits
TX=$OUT/hf_tx
: > "$OUT/server.log"
HF_HOME=$TX python3 - "$REPO" "$OUT" <<'EOF'
import json, os, sys
import torch
from transformers import T5ForConditionalGeneration
repo, out = sys.argv[1:3]
try:  # config.json + model.safetensors through huggingface_hub's cache (what dump-grads needs)
    m = T5ForConditionalGeneration.from_pretrained("org/t5-e2e", dtype=torch.float32).eval()
except Exception as e:
    print(f"FAIL transformers could not download org/t5-e2e from the loopback Hub: {type(e).__name__}: {e}")
    sys.exit(1)
b = json.load(open(os.path.join(out, "batch.json")))
kw = {k: torch.tensor(b[k]) for k in ("input_ids", "attention_mask", "labels")}
with torch.no_grad():
    torch.save(m(**kw, use_cache=False).logits, os.path.join(out, "tx_logits.pt"))
EOF
if [ $? -eq 0 ]; then
    : > "$OUT/server.log"
    HF_HOME=$TX HF_HUB_OFFLINE=1 "$BIN" dump-grads --model org/t5-e2e --batch "$OUT/batch.json" \
        --out "$OUT/dg_tx.safetensors" > "$OUT/dg_tx.log" 2>&1
    rc=$?
    python3 - "$OUT" "$rc" "$(nreq '.')" <<'EOF'
import sys
import torch
from safetensors.torch import load_file
out, rc, nreq = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if rc != 0:
    print(f"FAIL t5train dump-grads offline from the cache transformers filled: exit {rc} "
          f"({open(out + '/dg_tx.log').read()[-400:]})")
    sys.exit(1)
ref = torch.load(out + "/tx_logits.pt")
ours = load_file(out + "/dg_tx.safetensors")["logits"]
rel = float((ours.double() - ref.double()).norm() / ref.double().norm())
ok = rel < 1e-4 and nreq == "0"
print(f"{'PASS' if ok else 'FAIL'} t5train reads offline the cache transformers filled ({nreq} requests); logits vs "
      f"transformers' rel L2 {rel:.2e}")
sys.exit(0 if ok else 1)
EOF
    [ $? -eq 0 ] || fails=$((fails + 1))
else
    fails=$((fails + 1))
fi

# ---- 4. offline rerun: the cache is reused, no request
: > "$OUT/server.log"
HF_HUB_OFFLINE=1 job "$OUT/run2" > "$OUT/run2.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(nreq '.')" = 0 ] && [ -f "$OUT/run2/eval_results.json" ]; then
    pass "offline rerun: trained and evaluated from the cache, 0 requests"
else
    tail -5 "$OUT/run2.log"
    fail "offline rerun: exit $rc, $(nreq '.') requests"
fi
# online rerun: the complete snapshot is used without any request either
: > "$OUT/server.log"
job "$OUT/run2" --dry_run > "$OUT/dry2.log" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(nreq '.')" = 0 ] && grep -q "every check passed" "$OUT/dry2.log" \
    && pass "online dry run with the cache: every check passed, 0 requests" \
    || fail "online dry run with the cache: exit $rc, $(nreq '.') requests"

# ---- 5. the loss / learning-rate plot
if python3 -c "import matplotlib" 2>/dev/null; then
    python3 "$REPO/scripts/plot_loss.py" --out "$OUT/loss_lr.png" "fp16=$OUT/run1/trainer_log.jsonl" > "$OUT/plot.log" 2>&1
    [ -s "$OUT/loss_lr.png" ] && pass "plot: $OUT/loss_lr.png" || fail "plot: $(tail -3 "$OUT/plot.log")"
else
    echo "NOTE plot skipped: matplotlib is not installed here (elsewhere: python3 scripts/plot_loss.py --out loss_lr.png fp16=$OUT/run1/trainer_log.jsonl)"
fi

echo "---- summary"
if [ $fails -eq 0 ]; then echo "PASS e2e_fresh_machine"; exit 0; fi
echo "FAIL e2e_fresh_machine: $fails check(s) failed (logs in $OUT)"
exit 1
