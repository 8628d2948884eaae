#!/usr/bin/env bash
# Error control with sra (--algo sra: the owner re-quantizes the averaged velocity, a second codec
# stage with its own residual) against plain error feedback with sra, same configs and seeds as
# run.sh (whose exact-averaging rows summarize.py compares against; run it into the same OUT_DIR).
#   bench/data/cpp-econtrol-2026-11-28/sra.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out dir}
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np 4)
run() {  # config seed codec mode args...
  local cfg=$1 seed=$2 codec=$3 mode=$4
  shift 4
  local f="$out/$cfg-$codec-$mode-sra-seed$seed.txt"
  "${mpi[@]}" "$build/examples/cpp/qccl-train-mlp" --codec "$codec" --algo sra --seed "$seed" --print-every 50 "$@" > "$f"
  echo "$cfg seed $seed $codec $mode sra: $(grep '^# loss' "$f")"
}
for seed in 1 2 3 4 5; do
  run default "$seed" onebit gain05
  run default "$seed" onebit gain1 --feedback-gain 1
done
for seed in 1 2 3; do
  run wide "$seed" onebit gain05 --hidden 2048
  run wide "$seed" onebit gain1 --hidden 2048 --feedback-gain 1
done
