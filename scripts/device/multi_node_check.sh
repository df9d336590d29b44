#!/usr/bin/env bash
# multi_node_check.sh: the same two-rank run started four ways gives the same loss trajectory (issue 16, "two
# nodes"): (a) `t5train --num_gpus 2`; (b) scripts/train_on_multi_nodes.sh with a hostfile naming this host twice
# (two one-GPU "hosts": each rank sees one GPU and is local rank 0 of its host), NCCL forced off shared memory and
# peer-to-peer (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: NCCL's network transport, as between hosts); (c) torchrun-
# style variables set by hand (RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT); (d) Slurm-style variables
# (SLURM_PROCID SLURM_NTASKS SLURM_LOCALID + MASTER_ADDR/PORT), also on the network transport.
#   T5TRAIN_BIN=... T5TRAIN_DATA=... bash scripts/device/multi_node_check.sh OUT
set -u
cd "$(dirname "$0")/../.."
BIN=$(realpath "${T5TRAIN_BIN:?}")
DATA=${T5TRAIN_DATA:?}
OUT=${1:-/tmp/multi_node_check}
rm -rf "$OUT"; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
args=(--model_name_or_path "$PWD/test/fixtures/t5/tiny_v10" --tokenizer_name "$DATA/t5-spiece/spiece.model"
      --train_file "$DATA/wmt16-ro-en/validation.en" --dataset_name '' --do_eval false --fp16 false
      --source_lang en --target_lang ro --max_source_length 48 --max_target_length 8 --max_train_samples 64
      --per_device_train_batch_size 2 --dropout_rate 0 --logging_steps 1 --seed 7 --do_train --max_steps 30
      --learning_rate 3e-3 --warmup_steps 3 --save_strategy no
      --deepspeed '{"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}')
"$BIN" --num_gpus 2 "${args[@]}" --output_dir "$OUT/a" > "$OUT/a.log" 2>&1; echo "(a) --num_gpus 2: exit $?"
# (b) two one-GPU hosts: each rank's GPU by its world rank, local rank 0 of 1 on its "host"
cat > "$OUT/one_gpu_host.sh" <<SH
#!/usr/bin/env bash
export CUDA_VISIBLE_DEVICES=\${OMPI_COMM_WORLD_RANK} OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=1 LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
exec "$BIN" "\$@"
SH
chmod +x "$OUT/one_gpu_host.sh"
printf 'localhost slots=1\n%s slots=1\n' "$(hostname)" > "$OUT/hostfile"
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO T5TRAIN_BIN="$OUT/one_gpu_host.sh" \
  bash scripts/train_on_multi_nodes.sh --hostfile "$OUT/hostfile" --master_port 29611 "${args[@]}" \
  --output_dir "$OUT/b" > "$OUT/b.log" 2>&1
echo "(b) train_on_multi_nodes.sh, hostfile localhost + $(hostname), NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: exit $?"
grep -m1 "^+ mpirun" "$OUT/b.log"; grep -m2 -E "via NET|NET/Socket|NET/IB" "$OUT/b.log"
# (c) torchrun-style variables
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29612 \
    "$BIN" "${args[@]}" --output_dir "$OUT/c" > "$OUT/c$r.log" 2>&1 &
done
wait %1; c0=$?; wait %2; c1=$?; echo "(c) torchrun-style variables: exit $c0 $c1"
# (d) Slurm-style variables, network transport
for r in 0 1; do
  SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_JOB_ID=7 SLURM_STEP_ID=0 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=29613 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "$BIN" "${args[@]}" --output_dir "$OUT/d" \
    > "$OUT/d$r.log" 2>&1 &
done
wait %1; d0=$?; wait %2; d1=$?; echo "(d) Slurm-style variables: exit $d0 $d1"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def losses(d):
    try:
        return [json.loads(l)["loss"] for l in open(f"{out}/{d}/trainer_log.jsonl") if '"max_steps"' in l]
    except OSError:
        return []
a = losses("a")
ok = len(a) == 30
for d in "bcd":
    x = losses(d)
    worst = max((abs(p - q) / abs(p) for p, q in zip(a, x)), default=float("nan"))
    good = len(x) == 30 and worst <= 1e-6
    ok = ok and good
    print(f"({d}) vs (a): {len(x)} steps, worst loss rel diff {worst:.3g}: {'PASS' if good else 'FAIL'}")
print("multi_node_check:", "PASS" if ok else "FAIL")
PY
