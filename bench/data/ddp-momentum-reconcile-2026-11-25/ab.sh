#!/usr/bin/env bash
# DDP step with optimizer= and reconcile=False (+mu) against the default (+m), in the same job, under
# allgather (the hook's choice for onebit) and sra, with plain onebit and the compute floor beside
# them: 4 emulated hosts at 1 Gbit/s, batch 1, SGD momentum 0.9, 25.6M parameters.
# usage: ab.sh [OUTDIR]; then summarize.py [OUTDIR]
# Rounds 1-6 ran the codecs in the order below; rounds 7-12 in the reverse order (ROUNDS="7 8 9 10
# 11 12" CODECS=onebit+mu@sra,onebit+m@sra,onebit+mu,onebit+m,onebit), so that no variant always
# runs in the same place of the job.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=${1:-$here}; mkdir -p "$out"
for round in ${ROUNDS:-1 2 3 4 5 6}; do
  bench/ddp-sweep --build "${BUILD:-$PWD/build-dev}" --bucket-view --rates 1gbit --batches 1 --steps 7 --warmup 3 \
    --baselines compute --codecs "${CODECS:-onebit,onebit+m,onebit+mu,onebit+m@sra,onebit+mu@sra}" --momentum 0.9 \
    --out "$out/r$round" > "$out/r$round.log" 2>&1
  echo "round $round rc=$?"
done
