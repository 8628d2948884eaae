#!/usr/bin/env bash
# The same comparison as run.sh on the CNN (cnn-sgdm), ten paired seeds: the hook's new default
# (sra, feedback_gain 0.5) against the old one (feedback_gain 1: allgather).
# usage: run-cnn.sh [OUT] (default: this folder; results in OUT/cnn-*)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
S=${SEEDS:-0,1,2,3,4,5,6,7,8,9}
V=fp32,onebit+m,signscale+m
.venv/bin/python bench/convergence/run.py --tasks cnn-sgdm --seeds $S --variants $V --powersgd off --out "$D/cnn-sra-g0.5"
.venv/bin/python bench/convergence/run.py --tasks cnn-sgdm --seeds $S --variants $V --powersgd off --extra "--feedback-gain 1" --out "$D/cnn-allgather-g1"
python3 "$here/paired.py" "$D" cnn-allgather-g1
