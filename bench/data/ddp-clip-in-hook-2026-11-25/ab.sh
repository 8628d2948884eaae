#!/usr/bin/env bash
# DDP step with gradient clipping: clip_grad_norm_(0.01) after backward (onebit+m, and the floor)
# against HookState(..., clip_grad_norm=0.01) (onebit+m+hc, whose buckets wait for the step's last
# one), in the same job: 4 emulated hosts at 1 Gbit/s, batch 1 and 8, SGD momentum 0.9, 25.6M
# parameters. 0.01 is below every norm here, so both clip at every step.
# usage: ab.sh [OUTDIR]; then summarize.py [OUTDIR]
# Rounds 1-3 run the codecs in the order below, rounds 4-6 in the reverse order.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=${1:-$here}; mkdir -p "$out"
for round in 1 2 3 4 5 6; do
  codecs=onebit,onebit+m,onebit+m+hc
  ((round > 3)) && codecs=onebit+m+hc,onebit+m,onebit
  bench/ddp-sweep --build "${BUILD:-$PWD/build-dev}" --bucket-view --rates 1gbit --batches "1 8" --steps 7 --warmup 3 \
    --baselines compute --codecs "$codecs" --momentum 0.9 --clip 0.01 --out "$out/r$round" > "$out/r$round.log" 2>&1
  echo "round $round rc=$?"
done
