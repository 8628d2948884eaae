#!/usr/bin/env bash
# DDP step, old against new build in alternating jobs: 4 emulated hosts at 1 Gbit/s, batch 1, SGD
# momentum 0.9, 25.6M parameters, the compute floor, plain onebit and onebit with optimizer= (+m).
# usage: ddp-ab.sh OLD_BINDINGS_BUILD NEW_BUILD ROUNDS OUTDIR; then ddp-summarize.py OUTDIR
# (OLD_BINDINGS_BUILD: a tree with bindings/python whose extension loads the old libqccl.)
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
old=$1 new=$2 rounds=$3 out=$4; mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for side in old new; do
    b=$old; [ $side = new ] && b=$new
    codecs=onebit,onebit+m; ((round % 2 == 0)) && codecs=onebit+m,onebit
    bench/ddp-sweep --build "$b" --bucket-view --rates 1gbit --batches 1 --steps 7 --warmup 3 \
      --baselines compute --codecs "$codecs" --momentum 0.9 --out "$out/$side-r$round" > "$out/$side-r$round.log" 2>&1
    echo "round $round $side rc=$? $(date -u +%H:%M:%S)"
  done
done
