#!/usr/bin/env bash
# Error control in the DDP hook (HookState(feedback_gain=...)), ten paired seeds for the
# momentum-aware 1-bit variants under three configurations: the hook's new default (sra-g0.5: sra
# with feedback_gain 0.5), the old one (allgather-g1: plain error feedback, which picks allgather)
# and allgather with gain 0.5 (allgather-g0.5); then paired.py for the table.
# usage: run.sh [OUT] (default: this folder). Environment: TASKS (default the three fast tasks),
# SEEDS (0-9), CONFIGS (a subset of the three), PREFIX (put before each configuration's folder).
# The CNN rows: TASKS=cnn-sgdm PREFIX=cnn- CONFIGS="sra-g0.5 allgather-g1" run.sh, then
# paired.py . cnn-allgather-g1
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
S=${SEEDS:-0,1,2,3,4,5,6,7,8,9}
T=${TASKS:-ts-sgdm,ts-nesterov,digits-sgdm}
V=fp32,onebit+m,signscale+m
for c in ${CONFIGS:-sra-g0.5 allgather-g1 allgather-g0.5}; do
  case $c in
    sra-g0.5) extra="" ;;
    allgather-g1) extra="--feedback-gain 1" ;;
    allgather-g0.5) extra="--algo allgather" ;;
    *) echo "unknown configuration $c" >&2; exit 2 ;;
  esac
  .venv/bin/python bench/convergence/run.py --tasks $T --seeds $S --variants $V --powersgd off --extra "$extra" \
    --out "$D/${PREFIX:-}$c"
done
python3 "$here/paired.py" "$D" "${PREFIX:-}allgather-g1"
