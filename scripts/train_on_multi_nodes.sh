#!/usr/bin/env bash
# train_on_multi_nodes.sh: the homework job on several hosts, one rank per GPU, what DeepSpeed users run as
#   deepspeed --hostfile hostfile run_translation.py --deepspeed ds_config_zero3.json ...
# Launcher's options first, then every t5train argument (passed on after the homework's own; a later flag
# wins):
#   --hostfile FILE    DeepSpeed format: one "HOST slots=N" per line, # comments (default ./hostfile)
#   --master_port P    the rendezvous port on the first host (default 29500)
#   --print_only       print the command and exit (CI checks it without hosts)
#   --                 ends the launcher's options
# Outside Slurm the ranks start with OpenMPI's mpirun on the hostfile's hosts (HOST:N each, ranks filled host
# by host, as DeepSpeed does); MASTER_ADDR (the first host) and MASTER_PORT go to every rank (mpirun -x), so
# a t5train built with or without MPI finds rank 0. Under Slurm (SLURM_JOB_ID set) the allocation decides:
# srun starts SLURM_NTASKS ranks (kill-on-bad-exit) and the hostfile is not read. Environment passed on: NCCL_*,
# CUDA_VISIBLE_DEVICES, T5TRAIN_*, HF_*. T5TRAIN_BIN picks the binary (default ./t5train, the same path on every
# host). Prints the command it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${T5TRAIN_BIN:-./t5train}
hostfile=hostfile
port=29500
print_only=0
die() { echo "t5train: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile) [ $# -ge 2 ] || die "--hostfile needs a file"; hostfile=$2; shift 2 ;;
    --hostfile=*) hostfile=${1#*=}; shift ;;
    --master_port) [ $# -ge 2 ] || die "--master_port needs a port"; port=$2; shift 2 ;;
    --master_port=*) port=${1#*=}; shift ;;
    --print_only) print_only=1; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "--master_port $port: give a TCP port, 1..65535"

job=(--deepspeed configs/ds_config_zero3.json --model_name_or_path t5-3b
     --do_train --do_eval --per_device_train_batch_size 1 --per_device_eval_batch_size 4
     --output_dir output_dir --overwrite_output_dir --max_train_samples 500 --num_train_epochs 1
     --dataset_name wmt16 --dataset_config ro-en --source_lang en --target_lang ro --fp16 "$@")

# the variables every rank needs from here
pass_env() {
  local v
  for v in $(compgen -e); do
    case "$v" in NCCL_* | T5TRAIN_* | HF_* | CUDA_VISIBLE_DEVICES) echo "$v" ;; esac
  done
}

if [ -n "${SLURM_JOB_ID:-}" ]; then
  command -v scontrol >/dev/null 2>&1 || [ "$print_only" = 1 ] || die "SLURM_JOB_ID is set but scontrol is not on the PATH"
  if command -v scontrol >/dev/null 2>&1; then
    master=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" | head -n 1)
  else
    master=${SLURM_JOB_NODELIST%%,*}
  fi
  [ -n "$master" ] || die "cannot tell the first host of the Slurm allocation (SLURM_JOB_NODELIST='${SLURM_JOB_NODELIST:-}')"
  ntasks=${SLURM_NTASKS:-}
  [ -n "$ntasks" ] || die "SLURM_NTASKS is not set: allocate with --ntasks (one task per GPU), e.g. sbatch -N 2 --ntasks-per-node 8 --gpus-per-node 8"
  cmd=(env MASTER_ADDR="$master" MASTER_PORT="$port" srun --ntasks="$ntasks" --kill-on-bad-exit=1 "$BIN" "${job[@]}")
else
  [ -f "$hostfile" ] || die "hostfile $hostfile not found (one \"HOST slots=N\" per line; --hostfile FILE)"
  hosts=()
  total=0
  lineno=0
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    line=${line%%#*}
    read -r -a f <<<"$line" || true
    [ "${#f[@]}" -eq 0 ] && continue
    if [ "${#f[@]}" -ne 2 ] || ! [[ "${f[1]}" =~ ^slots=([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 1 ]; then
      die "$hostfile:$lineno: '$line' is not \"HOST slots=N\" (N >= 1)"
    fi
    for h in "${hosts[@]%%:*}"; do [ "$h" != "${f[0]}" ] || die "$hostfile:$lineno: host ${f[0]} appears twice"; done
    hosts+=("${f[0]}:${BASH_REMATCH[1]}")
    total=$((total + BASH_REMATCH[1]))
  done <"$hostfile"
  [ "${#hosts[@]}" -gt 0 ] || die "hostfile $hostfile names no host"
  command -v mpirun >/dev/null 2>&1 || [ "$print_only" = 1 ] || die "mpirun not found: install OpenMPI (scripts/install_deps.sh) or run under Slurm"
  master=${hosts[0]%%:*}
  hostlist=$(IFS=,; echo "${hosts[*]}")
  cmd=(mpirun -np "$total" -H "$hostlist" --map-by slot --bind-to none
       -x MASTER_ADDR="$master" -x MASTER_PORT="$port")
  for v in $(pass_env); do cmd+=(-x "$v"); done
  [ "$(id -u)" = 0 ] && cmd+=(--allow-run-as-root)
  cmd+=("$BIN" "${job[@]}")
fi
echo "+ ${cmd[*]}"
[ "$print_only" = 1 ] && exit 0
exec "${cmd[@]}"
