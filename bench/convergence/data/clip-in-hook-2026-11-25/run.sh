#!/usr/bin/env bash
# Gradient clipping with the 1-bit codecs: HookState(..., clip_grad_norm=0.1), each rank's own
# gradient clipped in the hook before it enters the local momentum (DGC's local clipping), against
# clip_grad_norm_(0.1) in the loop after backward (../momentum-no-reconcile-2026-11-25/clip-reconcile,
# the same tasks and seeds; fp32 clips in the loop in both, and is bit-identical).
#   hook/       ts-sgdm, ts-nesterov, ten seeds: fp32 (loop clip), none (qccl without compression,
#               the hook's clipping rule), onebit+m, signscale+m (the hook's clipping)
#   hook-no-reconcile/  as hook/, with HookState(..., reconcile=False): the loop then hands
#               opt.step() the hook's gradients unchanged, which is what that option needs
#   threshold-max-norm/  the rejected threshold: each rank clipped to 0.1 itself (--hook-clip 0.05,
#               times sqrt(4)), fp32 still after backward at 0.1; the regression tasks, seeds 0-2
#   digits-*/   digits-sgdm, ten seeds, the loop's clip and the hook's
#   charlm-*/   the character-level LM with AdamW (onebit_adam's scheme), three seeds, clipped at
#               0.25 (fp32's median norm there is 0.48), the loop's clip and the hook's
# then summarize.py. In these files clipped_steps counts the steps whose norm exceeded 0.1 in every
# row; the hook's rows clip rank 0's own norm (grad_norm_median) at 0.1 * sqrt(4) = 0.2 (train.py
# now records that limit as clip_limit). hook/'s ts-sgdm seeds 0-1 ran before a change to the hook
# that left the clipping as it was; rerun with the committed code they gave bit-identical losses.
# Every folder but hook-chunked-norm/ was produced while the hook took a bucket's norm in one float32
# reduction (off by up to 1.5e-4 of itself on a 25 MiB bucket); hook-chunked-norm/ is hook/'s seeds
# 0-2 with the chunked norm the hook now takes: every loss ratio moved by at most 0.0005.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
run() { .venv/bin/python bench/convergence/run.py --powersgd off "$@"; }
S10=0,1,2,3,4,5,6,7,8,9
run --variants fp32,none,onebit+m,signscale+m --tasks ts-sgdm,ts-nesterov --seeds $S10 \
  --extra="--clip 0.1 --clip-in-hook" --out "$D/hook"
run --variants fp32,onebit+m,signscale+m --tasks ts-sgdm,ts-nesterov --seeds $S10 \
  --extra="--clip 0.1 --clip-in-hook --no-reconcile" --out "$D/hook-no-reconcile"
run --variants fp32,onebit+m,signscale+m --tasks ts-sgdm,ts-nesterov --seeds 0,1,2 \
  --extra="--clip 0.1 --clip-in-hook --hook-clip 0.05" --out "$D/threshold-max-norm"
run --variants fp32,onebit+m,signscale+m --tasks digits-sgdm --seeds $S10 --extra="--clip 0.1" --out "$D/digits-loop"
run --variants fp32,none,onebit+m,signscale+m --tasks digits-sgdm --seeds $S10 \
  --extra="--clip 0.1 --clip-in-hook" --out "$D/digits-hook"
run --variants fp32,onebit+m --tasks charlm-adamw --seeds 0,1,2 --extra="--clip 0.25" --out "$D/charlm-loop"
run --variants fp32,none,onebit+m --tasks charlm-adamw --seeds 0,1,2 --extra="--clip 0.25 --clip-in-hook" \
  --out "$D/charlm-hook"
run --variants fp32,none,onebit+m,signscale+m --tasks ts-sgdm,ts-nesterov --seeds 0,1,2 \
  --extra="--clip 0.1 --clip-in-hook" --out "$D/hook-chunked-norm"
