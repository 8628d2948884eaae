#!/usr/bin/env bash
# A/B of the DDP step: the library before sra's owner took its own shard raw (old: a worktree of
# f73bc1e built with -DQCCL_TESTS=ON -DQCCL_CUDA=OFF, target _qccl) against after (build-dev of
# 917cba9); 4 emulated hosts at 1 Gbit/s, batch 1, SGD momentum 0.9, rounds interleaved.
# Usage: ROUNDS="1 2 3 4 5 6" ddp-ab.sh OUTDIR (this data: rounds 1-2, then 3-6)
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=$1; mkdir -p "$out"
for round in ${ROUNDS:-1 2}; do
  for v in old new; do
    b=build-dev; [ $v = old ] && b=/tmp/ab-old/build
    bench/ddp-sweep --build $b --bucket-view --rates 1gbit --batches 1 --steps 7 --warmup 3 \
      --baselines compute --codecs onebit,onebit+m --momentum 0.9 --out "$out/$v-r$round" > "$out/$v-r$round.log" 2>&1
    echo "$v round $round rc=$?"
  done
done
