#!/usr/bin/env bash
# The DDP step with the hook's block rotation (onebit+m: HookState(rotation="auto"), the default)
# against the same hook without it (onebit+m%0: rotation=0), in the same jobs: 4 emulated hosts at
# 1 Gbit/s, 25.6M parameters, torch 1.13, SGD momentum 0.9, DDP(gradient_as_bucket_view=True),
# median of 7 steps after 3; the compute floor, gloo fp32, torch's fp16 hook and plain onebit
# besides. ROUNDS rounds, the two variants' order alternating; BATCHES samples per rank.
# usage: run.sh [OUTDIR]; then summarize.py OUTDIR BATCH
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
out=${1:-$here}
mkdir -p "$out"
for round in ${ROUNDS:-1 2 3}; do
  codecs=onebit,onebit+m,onebit+m%0; ((round % 2 == 0)) && codecs=onebit,onebit+m%0,onebit+m
  bench/ddp-sweep --build "${BUILD:-build-dev}" --python "${PY:-$PWD/.venv/bin/python}" --bucket-view \
    --rates 1gbit --batches "${BATCHES:-1 8}" --steps 7 --warmup 3 --baselines compute,fp32,fp16 --codecs "$codecs" \
    --momentum 0.9 --out "$out/r$round" > "$out/r$round.log" 2>&1
  echo "round $round rc=$? $(date -u +%H:%M:%S)"
done
