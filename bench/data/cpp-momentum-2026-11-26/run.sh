#!/usr/bin/env bash
# examples/cpp's qccl-train-mlp with SGD momentum 0.9: exact averaging (--codec mpi) against the 1-bit
# codecs through qcclMomentumAllreduce (--momentum-mode dgc, the default) and through the old loop
# (compress the gradient, momentum after: --momentum-mode plain), and maxmin 4-bit; onebit's dgc also
# with --algo sra (two quantization stages) against the default allgather (one).
#   bench/data/cpp-momentum-2026-11-26/run.sh BUILD_DIR OUT_DIR      (then summarize.py OUT_DIR)
# Configs: default (hidden 256, lr 0.02, 400 steps, seeds 1-5); wide (--hidden 2048, seeds 1-3);
# wide_cosine (the same with --schedule cosine). Then every codec once on seed 1 (OUT_DIR/codecs-seed1/),
# wide_m0 (no momentum, lr 0.2, seeds 2-3) and wide_lr001 (lr 0.01, seed 2).
# 4 local ranks; the example compresses on one host too (localCompress = 1). One file per run.
set -euo pipefail
build=${1:?build dir}
out=${2:?out dir}
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np 4)
variants=("mpi dgc default" "onebit dgc default" "onebit dgc sra" "onebit plain default" "signscale dgc default"
          "signscale plain default" "maxmin dgc default")
run() {  # config-name seed codec mode algo args...
  local cfg=$1 seed=$2 codec=$3 mode=$4 algo=$5
  shift 5
  local f="$out/$cfg-$codec-$mode-$algo-seed$seed.txt"
  local extra=()
  [ "$codec" = maxmin ] && extra=(--bits 4)
  "${mpi[@]}" "$build/examples/cpp/qccl-train-mlp" --codec "$codec" "${extra[@]}" --momentum-mode "$mode" \
    --algo "$algo" --seed "$seed" --print-every 50 "$@" > "$f"
  echo "$cfg seed $seed $codec $mode $algo: $(grep '^# loss' "$f")"
}
for seed in 1 2 3 4 5; do
  for v in "${variants[@]}"; do
    set -- $v
    run default "$seed" "$@"
  done
done
for seed in 1 2 3; do
  for v in "${variants[@]}"; do
    set -- $v
    run wide "$seed" "$@" --hidden 2048
  done
done
for seed in 1 2 3; do
  for v in "mpi dgc default" "onebit dgc default" "onebit plain default" "signscale dgc default"; do
    set -- $v
    run wide_cosine "$seed" "$@" --hidden 2048 --schedule cosine
  done
done
mkdir -p "$out/codecs-seed1"
for c in mpi none fp16 onebit signscale "maxmin --bits 4" "maxmin --bits 2" dyn8; do
  "${mpi[@]}" "$build/examples/cpp/qccl-train-mlp" --codec $c --print-every 100 > "$out/codecs-seed1/$(echo $c | tr -d ' -').txt"
done
# Without momentum at lr 0.2 (the momentum runs' lr / (1 - momentum)), seeds 2 and 3.
for seed in 2 3; do
  for codec in mpi onebit; do
    run wide_m0 "$seed" "$codec" plain default --hidden 2048 --momentum 0 --lr 0.2
  done
done
# The wide layer at half the learning rate, seed 2.
for codec in mpi onebit; do
  run wide_lr001 2 "$codec" dgc default --hidden 2048 --lr 0.01
done
