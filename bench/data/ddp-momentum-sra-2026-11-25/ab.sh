#!/usr/bin/env bash
# DDP step with optimizer= (onebit+m) under allgather (the hook's choice) and sra, in the same run
# (bench_ddp.py --codecs ...@sra), with plain onebit beside them: 4 emulated hosts at 1 Gbit/s,
# batch 1, SGD momentum 0.9, 6 rounds. usage: ab.sh [OUTDIR]; then summarize.py [OUTDIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=${1:-$here}; mkdir -p "$out"
for round in ${ROUNDS:-1 2 3 4 5 6}; do
  bench/ddp-sweep --build build-dev --bucket-view --rates 1gbit --batches 1 --steps 7 --warmup 3 \
    --baselines compute --codecs onebit,onebit+m,onebit+m@sra --momentum 0.9 --out "$out/r$round" > "$out/r$round.log" 2>&1
  echo "round $round rc=$?"
done
