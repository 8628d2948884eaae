#!/usr/bin/env bash
# HookState(..., reconcile=False) against the default (reconcile=True) in the convergence suite.
#   no-reconcile/          the three fast tasks, ten seeds, the hook's other choices; paired against
#                          ../momentum-sra-vs-allgather-10seeds-2026-11-25/allgather (the default,
#                          the same code otherwise; fp32 is bit-identical on both sides)
#   clip-{reconcile,no-reconcile}/  ts-sgdm and ts-nesterov with clip_grad_norm_(0.1) after every
#                          backward (it acts: fp32's loss moves by 7% on seed 0), ten seeds
#   charlm-{reconcile,no-reconcile}/  the character-level LM with AdamW (onebit_adam's scheme), 3 seeds
#   clip-norms/            clip-reconcile's first three seeds again, with the norms clip_grad_norm_ saw
# then paired.py A_DIR B_DIR for each pair. (no-reconcile/, clip-*/ and charlm-reconcile/ were first
# produced with commit eea04c3, whose momentum passes are reconcile=False's, and its parent, whose
# are the default's; ts-sgdm seeds 0-1 rerun with this script's commands gave bit-identical losses.)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
run() { .venv/bin/python bench/convergence/run.py --variants fp32,onebit+m,signscale+m --powersgd off "$@"; }
S10=0,1,2,3,4,5,6,7,8,9
run --tasks ts-sgdm,ts-nesterov,digits-sgdm --seeds $S10 --extra=--no-reconcile --out "$D/no-reconcile"
run --tasks ts-sgdm,ts-nesterov --seeds $S10 --extra="--clip 0.1" --out "$D/clip-reconcile"
run --tasks ts-sgdm,ts-nesterov --seeds $S10 --extra="--clip 0.1 --no-reconcile" --out "$D/clip-no-reconcile"
run --tasks charlm-adamw --seeds 0,1,2 --out "$D/charlm-reconcile"
run --tasks charlm-adamw --seeds 0,1,2 --extra=--no-reconcile --out "$D/charlm-no-reconcile"
# The norms clip_grad_norm_ saw (train.py records grad_norm_median and clipped_steps with --clip):
run --tasks ts-sgdm,ts-nesterov --seeds 0,1,2 --extra="--clip 0.1" --out "$D/clip-norms"
