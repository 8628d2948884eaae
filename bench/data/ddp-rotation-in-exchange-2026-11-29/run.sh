#!/usr/bin/env bash
# The DDP step with the hook's rotation inside the exchange (HookState.fuse_rotation, commit 25225c2;
# reverted after this measurement) against the rotation in the momentum passes (onebit+m%autop), in
# the same jobs: 4 emulated hosts at 1 Gbit/s, 25.6M parameters, torch 1.13, SGD momentum 0.9,
# DDP(gradient_as_bucket_view=True), batch 8, median of 7 steps after 3, four rounds alternating the
# order. Run from a checkout of 25225c2 (the %Rp spec exists only there). usage: run.sh OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
out=${1:?usage: run.sh OUTDIR}
mkdir -p "$out"
for round in 1 2 3 4; do
  codecs=onebit+m,onebit+m%autop; ((round % 2 == 0)) && codecs=onebit+m%autop,onebit+m
  bench/ddp-sweep --build "${BUILD:-build-dev}" --python "${PY:-$PWD/.venv/bin/python}" --bucket-view \
    --rates 1gbit --batches 8 --steps 7 --warmup 3 --baselines compute --codecs "$codecs" \
    --momentum 0.9 --out "$out/r$round" > "$out/r$round.log" 2>&1
  echo "round $round rc=$? $(date -u +%H:%M:%S)"
done
