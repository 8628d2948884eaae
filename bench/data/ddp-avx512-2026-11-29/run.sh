#!/usr/bin/env bash
# The DDP step before and after the AVX-512 sign kernels took error control and the multi-source
# decode (bench/RESULTS.md, "AVX-512: error control and the multi-source decode"): 4 emulated hosts at
# 1 Gbit/s, 25.6M parameters, torch 1.13, SGD momentum 0.9, DDP(gradient_as_bucket_view=True),
# batch 1, median of 7 steps after 3; the compute floor, gloo fp32, torch's fp16 hook, and the qccl
# hook with onebit, maxmin 4-bit and onebit with optimizer= (onebit+m). ROUNDS rounds, the two
# builds' order alternating.
# usage: OLD=<build dir of the earlier commit> NEW=<build dir> run.sh [OUTDIR]; then summarize.py [OUTDIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
out=${1:-$here}
: "${OLD:?set OLD to the build directory of the earlier commit}" "${NEW:=build-dev}"
for round in ${ROUNDS:-1 2 3 4 5 6}; do
  order="old new"; ((round % 2 == 0)) && order="new old"
  for v in $order; do
    b=$NEW; [ "$v" = old ] && b=$OLD
    mkdir -p "$out/$v"
    bench/ddp-sweep --build "$b" --python "${PY:-$PWD/.venv/bin/python}" --bucket-view --rates 1gbit --batches 1 \
      --steps 7 --warmup 3 --baselines compute,fp32,fp16 --codecs onebit,maxmin:4,onebit+m --momentum 0.9 \
      --out "$out/$v/r$round" > "$out/$v/r$round.log" 2>&1
    echo "$v round $round rc=$? $(date -u +%H:%M:%S)"
  done
done
