#!/usr/bin/env bash
# Error control with sra (--algo sra: the owner re-quantizes the averaged velocity, a second codec
# stage with its own residual) against plain error feedback with sra, same configs and seeds as
# run.sh (whose exact-averaging rows summarize.py compares against; run it into the same OUT_DIR).
#   bench/data/cpp-econtrol-2026-11-28/sra.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out dir}
mkdir -p "$out"
algo=sra
source "$(dirname "$0")/../cpp-momentum-2026-11-26/train_run.sh"
for seed in 1 2 3 4 5; do
  run default "$seed" onebit gain05
  run default "$seed" onebit gain1 --feedback-gain 1
done
for seed in 1 2 3; do
  run wide "$seed" onebit gain05 --hidden 2048
  run wide "$seed" onebit gain1 --hidden 2048 --feedback-gain 1
done
