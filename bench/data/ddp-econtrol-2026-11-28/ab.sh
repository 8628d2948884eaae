#!/usr/bin/env bash
# DDP step with optimizer= under the hook's new default (onebit+m: sra with feedback_gain 0.5)
# against its old one (onebit+m/1: plain error feedback, which picks allgather), plain onebit, the
# compute floor, gloo fp32 and torch's fp16 hook in the same job: 4 emulated hosts at 1 Gbit/s,
# batch 1, SGD momentum 0.9, 25.6M parameters, median of 7 steps after 3; the qccl variants'
# order alternates by round. usage: ab.sh [OUTDIR]; then summarize.py [OUTDIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
out=${1:-$here}; mkdir -p "$out"
for round in ${ROUNDS:-1 2 3 4 5 6}; do
  codecs=onebit,onebit+m,onebit+m/1; ((round % 2 == 0)) && codecs=onebit+m/1,onebit+m,onebit
  bench/ddp-sweep --build "${BUILD:-build-dev}" --bucket-view --rates 1gbit --batches 1 --steps 7 --warmup 3 \
    --baselines compute,fp32,fp16 --codecs "$codecs" --momentum 0.9 --out "$out/r$round" > "$out/r$round.log" 2>&1
  echo "round $round rc=$? $(date -u +%H:%M:%S)"
done
