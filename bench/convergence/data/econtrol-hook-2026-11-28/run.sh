#!/usr/bin/env bash
# Error control in the DDP hook (HookState(feedback_gain=...)), ten paired seeds on the three fast
# tasks for the momentum-aware 1-bit variants: the hook's new default (sra with feedback_gain 0.5),
# the old one (plain error feedback, feedback_gain 1, which picks allgather) and allgather with
# gain 0.5; then paired.py for the table. usage: run.sh [OUT] (default: this folder)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
S=${SEEDS:-0,1,2,3,4,5,6,7,8,9}
T=${TASKS:-ts-sgdm,ts-nesterov,digits-sgdm}
V=fp32,onebit+m,signscale+m
.venv/bin/python bench/convergence/run.py --tasks $T --seeds $S --variants $V --powersgd off --out "$D/sra-g0.5"
.venv/bin/python bench/convergence/run.py --tasks $T --seeds $S --variants $V --powersgd off --extra "--feedback-gain 1" --out "$D/allgather-g1"
.venv/bin/python bench/convergence/run.py --tasks $T --seeds $S --variants $V --powersgd off --extra "--algo allgather" --out "$D/allgather-g0.5"
python3 "$here/paired.py" "$D"
