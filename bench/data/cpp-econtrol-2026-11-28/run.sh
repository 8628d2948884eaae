#!/usr/bin/env bash
# examples/cpp's qccl-train-mlp with SGD momentum 0.9 through qcclMomentumAllreduce: error control
# (qcclMomentumConfig_t.feedbackGain, default 0.5: each exchange sends the velocity plus half the
# accumulated codec error and keeps the rest) against plain error feedback (--feedback-gain 1, the
# scheme before it) and a gain of 0.25, against exact averaging (--codec mpi) on the same seed.
#   bench/data/cpp-econtrol-2026-11-28/run.sh BUILD_DIR OUT_DIR
#   python3 bench/data/cpp-momentum-2026-11-26/summarize.py OUT_DIR
# Configs: default (hidden 256, lr 0.02, 400 steps, seeds 1-5); wide (--hidden 2048, constant lr,
# seeds 1-3); wide_cosine (the same with --schedule cosine). 4 local ranks. The rotation is auto
# everywhere (it chooses 512 on both models). File names: CONFIG-CODEC-MODE-ALGO-seedS.txt.
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out dir}
mkdir -p "$out"
source "$(dirname "$0")/../cpp-momentum-2026-11-26/train_run.sh"
for seed in 1 2 3; do
  run wide "$seed" mpi exact --hidden 2048
  run wide "$seed" onebit gain05 --hidden 2048
  run wide "$seed" signscale gain05 --hidden 2048
  run wide "$seed" maxmin gain05 --hidden 2048
  run wide "$seed" onebit gain1 --hidden 2048 --feedback-gain 1
  run wide "$seed" onebit gain025 --hidden 2048 --feedback-gain 0.25
  run wide_cosine "$seed" mpi exact --hidden 2048 --schedule cosine
  run wide_cosine "$seed" onebit gain05 --hidden 2048 --schedule cosine
  run wide_cosine "$seed" signscale gain05 --hidden 2048 --schedule cosine
done
for seed in 1 2 3 4 5; do
  run default "$seed" mpi exact
  run default "$seed" onebit gain05
  run default "$seed" signscale gain05
  run default "$seed" maxmin gain05
  run default "$seed" onebit gain1 --feedback-gain 1
done
