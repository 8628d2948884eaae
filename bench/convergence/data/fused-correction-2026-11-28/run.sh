#!/usr/bin/env bash
# The corrected pass inside the exchange's last decode and the local momentum sent out of place
# (2026-11-28) change no bit of training: the runs of ../momentum-auto-2026-11-27/auto again, same
# tasks, seeds and variants, to compare test losses bit for bit (compare.py); and the character-level
# LM with AdamW (onebit_adam's scheme after its warm-up) under reconcile="auto", against
# ../charlm-adamw-default-scheme (reconcile=True then).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
run() { .venv/bin/python bench/convergence/run.py --variants fp32,onebit+m,signscale+m --powersgd off "$@"; }
run --tasks ts-sgdm,ts-nesterov,digits-sgdm --seeds 0,1,2 --out "$D/auto"
run --tasks charlm-adamw --seeds 0,1,2 --out "$D/charlm"
# After the local pass moved into the allreduce's prologue (commit f8c0c39): the fast tasks again
# (the two runs above are from commit 1a79693).
run --tasks ts-sgdm,ts-nesterov,digits-sgdm --seeds 0,1,2 --out "$D/auto-prologue"
