#!/usr/bin/env bash
# device.sh OUT: the long-run comparison (issue 27) on the device machine, in one call.
#
#   here:   python3 test/bench/long_run/make_data.py --out .devdata/long_run   (the data, from ../shared)
#           make t5train; copy the shared libraries the binary needs to .devlibs/ (docs/training_results.md)
#           wheels for DeepSpeed 0.19.8 in .whl/ (docs/zero.md: built from its sdist with DS_BUILD_OPS=0)
#   there:  SETTINGS="fp32 bf16" SEEDS="1 2 3" bash test/bench/long_run/device.sh $OUT
#           (carry .devdata, .devlibs, .whl; t5train is built here and carried at the repository root)
#
# Environment: SETTINGS (settings.py names, NAME:SEED[,SEED] for some seeds; T5_SETTINGS / HF_SETTINGS for one
# side), SEEDS, T5_JOBS / HF_JOBS (runs at once per side; default 2 / 9),
# MAX_STEPS (every run's max_steps instead of its setting's, e.g. a shorter exact pair),
# LIMIT (seconds for all runs; the runs still going are stopped then and their partial logs kept; default 500),
# SMOKE (settings run for 30 steps on the HF side only, before the real ones: a check of the DeepSpeed paths),
# SIDES (default "t5train hf"), T5_FIRST=1 (t5train's runs alone first, then HF's), T5_AFTER (t5train settings run
# beside HF's, after T5_FIRST's), WORK (default /tmp/long_run). Writes $OUT/runs.tar.gz (every run's
# trainer_log.jsonl, run_summary.json, log.txt tail and results files); compare.py reads it back here.
# On a machine with several GPUs (NGPU, default: nvidia-smi's count) each run takes the least-loaded GPU(s)
# (run.py --gpus): t5train's and HF's runs then share a GPU only when there are more runs than GPUs.
set -u
OUT=${1:?usage: device.sh OUT}
cd "$(dirname "$0")/../../.."
HERE=test/bench/long_run
WORK=${WORK:-/tmp/long_run}
SETTINGS=${SETTINGS:-}  # both sides; T5_SETTINGS / HF_SETTINGS: one side's (default SETTINGS)
SEEDS=${SEEDS:-1 2 3}
SIDES=${SIDES:-t5train hf}
LIMIT=${LIMIT:-500}
T0=$SECONDS
export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
mkdir -p "$WORK" "$OUT"
./t5train env > "$OUT/t5train_env.txt" 2>&1  # the machine, as a bug report would give it (docs/env.md)

# DeepSpeed, when a setting names a ds config; its ops (fused_adam for stage 0, cpu_adam for the offloads) are
# built once here, in the background, while the t5train runs start
need_ds=0
T5_SETTINGS=${T5_SETTINGS:-$SETTINGS}
HF_SETTINGS=${HF_SETTINGS:-$SETTINGS}
for s in $HF_SETTINGS ${SMOKE:-}; do
  python3 -c "import sys; sys.path.insert(0, '$HERE'); import settings as S; sys.exit(0 if S.setting('${s%%:*}')['ds'] else 1)" \
    && need_ds=1
done
ops_pid=""
if [ $need_ds = 1 ] && [[ " $SIDES " == *" hf "* ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$WORK/pip.log" 2>&1 || { echo "device.sh: wheel install failed"; tail -5 "$WORK/pip.log"; }
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH DS_BUILD_OPS=0 TORCH_CUDA_ARCH_LIST=9.0
  ( t=$SECONDS; python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder, FusedAdamBuilder
CPUAdamBuilder().load(); FusedAdamBuilder().load()" > "$WORK/ds_ops.log" 2>&1
    echo "device.sh: DeepSpeed ops built (rc $?) in $((SECONDS - t)) s" ) &
  ops_pid=$!
fi
python3 $HERE/make_init.py --out "$WORK/init" --seeds $SEEDS | tail -2
NGPU=${NGPU:-$(nvidia-smi -L | grep -c '^GPU')}
rm -f "$WORK/runs/gpu_load.json" "$WORK/smoke/gpu_load.json"  # counts left by an earlier call on this machine
RUN="python3 $HERE/run.py --bin ./t5train --data .devdata/long_run --init $WORK/init --work $WORK/runs --seeds $SEEDS --gpus $NGPU ${MAX_STEPS:+--max_steps $MAX_STEPS}"
left() { echo $((LIMIT - (SECONDS - T0))); }
pids=()
if [[ " $SIDES " == *" t5train "* ]]; then
  timeout $(left) $RUN --settings $T5_SETTINGS --sides t5train --t5_jobs ${T5_JOBS:-2} > "$WORK/t5train.log" 2>&1 &
  pids+=($!)
  # T5_FIRST=1: the t5train runs alone on the GPU first (their wall-clock then is a whole run's, alone), then HF's
  if [ "${T5_FIRST:-0}" = 1 ]; then wait "${pids[@]}"; pids=(); fi
fi
if [[ " $SIDES " == *" hf "* ]]; then
  # the HF runs without DeepSpeed start at once, the others once DeepSpeed's ops are built
  nods=$(python3 -c "import sys; sys.path.insert(0, '$HERE'); import settings as S
print(' '.join(s for s in '$HF_SETTINGS'.split() if not S.setting(s.split(':')[0])['ds']))")
  ds=$(python3 -c "import sys; sys.path.insert(0, '$HERE'); import settings as S
print(' '.join(s for s in '$HF_SETTINGS'.split() if S.setting(s.split(':')[0])['ds']))")
  if [ -n "$nods" ]; then
    timeout $(left) $RUN --settings $nods --sides hf --hf_jobs ${HF_JOBS:-9} > "$WORK/hf.log" 2>&1 &
    pids+=($!)
  fi
  [ -n "$ops_pid" ] && wait $ops_pid
  if [ -n "${SMOKE:-}" ]; then
    timeout $(left) $RUN --work $WORK/smoke --settings $SMOKE --sides hf --hf_jobs 6 --max_steps 30 > "$WORK/smoke.log" 2>&1
    echo "== smoke ($SMOKE, 30 steps, HF side)"; cat "$WORK/smoke.log"
  fi
  if [ -n "$ds" ]; then
    timeout $(left) $RUN --settings $ds --sides hf --hf_jobs ${HF_JOBS:-9} > "$WORK/hf_ds.log" 2>&1 &
    pids+=($!)
  fi
fi
if [ -n "${T5_AFTER:-}" ] && [[ " $SIDES " == *" t5train "* ]]; then
  timeout $(left) $RUN --settings $T5_AFTER --sides t5train --t5_jobs ${T5_JOBS:-2} > "$WORK/t5train_after.log" 2>&1 &
  pids+=($!)
fi
for p in "${pids[@]}"; do wait $p; done
# timeout stops run.py; the runs it started are stopped here (their logs so far are kept)
pkill -f hf_side.py; pkill -f 'torchrun'; pkill -x t5train; sleep 2
echo "== runs"; cat "$WORK"/t5train.log "$WORK"/t5train_after.log "$WORK"/hf.log "$WORK"/hf_ds.log 2>/dev/null | grep -v '^ *File\|^Traceback\|^ *\^\|^    '
cd "$WORK"
for d in runs/*/* smoke/*/*; do  # the log's tail only (HF's are long)
  [ -f "$d/log.txt" ] && tail -c 20000 "$d/log.txt" > "$d/log_tail.txt"
done
find runs smoke \( -name trainer_log.jsonl -o -name run_summary.json -o -name log_tail.txt -o -name '*_results.json' \) \
  2>/dev/null > list.txt
tar czf "$OUT/runs.tar.gz" -T list.txt *.log init/v10_s1/config.json
ls -la "$OUT"
echo "device.sh: $((SECONDS - T0)) s in all"
