#!/usr/bin/env bash
# examples/cpp's qccl-train-mlp with SGD momentum 0.9 through qcclMomentumAllreduce: the rotation
# before the 1-bit codecs (qcclMomentumConfig_t.rotation, auto: decided at the first call; every run
# prints "# rotation in use") against none (--rotation 0, the scheme before it), a block of 4096, and
# residual decay (0.6 without the rotation, 0.8 with it), against exact averaging
# (--codec mpi) on the same seed; then the rotation's CPU cost (rotation_cost.c, one rank).
#   bench/data/cpp-rotation-2026-11-27/run.sh BUILD_DIR OUT_DIR
#   python3 bench/data/cpp-momentum-2026-11-26/summarize.py OUT_DIR
# Configs: default (hidden 256, lr 0.02, 400 steps, seeds 1-5); wide (--hidden 2048, seeds 1-3);
# wide_cosine (the same with --schedule cosine). 4 local ranks (the example compresses on one host
# too). File names: CONFIG-CODEC-MODE-ALGO-seedS.txt, MODE naming the variant (summarize.py's format).
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
source "$(dirname "$0")/../cpp-momentum-2026-11-26/train_run.sh"
variants() {  # config seed args...
  local cfg=$1 seed=$2
  shift 2
  run "$cfg" "$seed" mpi exact "$@"
  run "$cfg" "$seed" onebit auto "$@"
  run "$cfg" "$seed" signscale auto "$@"
  run "$cfg" "$seed" onebit norotation "$@" --rotation 0
  run "$cfg" "$seed" signscale norotation "$@" --rotation 0
}
for seed in 1 2 3 4 5; do
  variants default "$seed"
  run default "$seed" maxmin auto
  run default "$seed" onebit decay06 --rotation 0 --residual-decay 0.6
  run default "$seed" onebit autodecay08 --residual-decay 0.8
  run default "$seed" onebit autodecay09 --residual-decay 0.9    # added on 2026-11-27, after the
  run default "$seed" onebit autodecay095 --residual-decay 0.95  # passes were fused (same bits)
done
for seed in 1 2 3; do
  variants wide "$seed" --hidden 2048
  run wide "$seed" onebit rotation4096 --hidden 2048 --rotation 4096
  run wide "$seed" onebit decay06 --hidden 2048 --rotation 0 --residual-decay 0.6
  run wide "$seed" onebit autodecay08 --hidden 2048 --residual-decay 0.8
  run wide "$seed" onebit autodecay09 --hidden 2048 --residual-decay 0.9
  run wide "$seed" onebit autodecay095 --hidden 2048 --residual-decay 0.95
done
# Added later on 2026-11-27: the wide case with the first 40 calls (10%) exchanged exactly (QCCL_WARMUP).
for seed in 1 2 3; do
  for codec in onebit signscale; do
    f="$out/wide-$codec-warmup40-default-seed$seed.txt"
    "${mpi[@]}" -x QCCL_WARMUP=40 "$build/examples/cpp/qccl-train-mlp" --codec "$codec" --seed "$seed" --print-every 50 \
      --hidden 2048 > "$f"
    echo "wide seed $seed $codec warmup40: $(grep '^# loss' "$f")"
  done
done
for seed in 1 2 3; do
  run wide_cosine "$seed" mpi exact --hidden 2048 --schedule cosine
  run wide_cosine "$seed" onebit auto --hidden 2048 --schedule cosine
  run wide_cosine "$seed" signscale auto --hidden 2048 --schedule cosine
done
# The rotation's CPU cost on one rank, 25.6M elements (the DDP benchmark's model size). The recorded
# rotation_cost.txt comes from the final transform (vectorized, two stages per pass, persistent
# buffers), run after the training runs; the final code reproduces them bit for bit (checked on
# default seed 1 and wide seed 2, onebit).
inc=$here/../../../include
mpicc -O2 -I"$inc" -o "$out/rotation_cost" "$here/rotation_cost.c" -L"$build" -lqccl -Wl,-rpath,"$build"
for k in 1 2 3; do
  mpirun --allow-run-as-root -np 1 "$out/rotation_cost" 25600000 15 | tee -a "$out/rotation_cost.txt"
done
