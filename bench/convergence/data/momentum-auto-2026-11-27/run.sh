#!/usr/bin/env bash
# HookState(..., reconcile="auto") (the default since 2026-11-27) against the two fixed settings of
# ../momentum-no-reconcile-2026-11-25, same seeds and tasks:
#   auto/       the three fast tasks, seeds 0-2, no clipping: to equal no-reconcile/ there
#   clip-auto/  ts-sgdm and ts-nesterov with clip_grad_norm_(0.1) after every backward, seeds 0-2:
#               to equal clip-reconcile/ there
# then ../momentum-no-reconcile-2026-11-25/paired.py A_DIR B_DIR for each pair.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
run() { .venv/bin/python bench/convergence/run.py --variants fp32,onebit+m,signscale+m --powersgd off "$@"; }
run --tasks ts-sgdm,ts-nesterov,digits-sgdm --seeds 0,1,2 --out "$D/auto"
run --tasks ts-sgdm,ts-nesterov --seeds 0,1,2 --extra="--clip 0.1" --out "$D/clip-auto"
