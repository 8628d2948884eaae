#!/usr/bin/env bash
# DDP step with optimizer=: momentum correction's passes fused into the exchange (+m, the default
# now: the corrected pass inside the last decode, qcclAllreduceEpilogue; from commit 1a79693 also the
# local momentum sent out of place, from f8c0c39 its local pass as the prologue, qcclAllreduceFused)
# against the same hook with every pass outside the exchange (+ma, fuse=False: as before), in the same job, with plain onebit and the compute floor beside them: 4 emulated
# hosts at 1 Gbit/s, batch 1, SGD momentum 0.9, 25.6M parameters, the hook's own algorithm
# (allgather for onebit with optimizer=).
# usage: ab.sh [OUTDIR]; then summarize.py [OUTDIR]
# Odd rounds run the codecs in the order below, even rounds in the reverse order, so that no
# variant always runs in the same place of the job.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=${1:-$here}; mkdir -p "$out"
fwd=onebit,onebit+m,onebit+ma
rev=onebit+ma,onebit+m,onebit
for round in ${ROUNDS:-1 2 3 4 5 6 7 8}; do
  codecs=$fwd; ((round % 2 == 0)) && codecs=$rev
  bench/ddp-sweep --build "${BUILD:-$PWD/build-dev}" --bucket-view --rates 1gbit --batches 1 --steps 7 --warmup 3 \
    --baselines compute --codecs "$codecs" --momentum 0.9 --out "$out/r$round" > "$out/r$round.log" 2>&1
  echo "round $round rc=$? $(date -u +%H:%M:%S)"
done
