#!/usr/bin/env bash
# auto with nothing to compress over MPI on 4 emulated hosts, unshaped and at 1 Gbit/s, once auto
# times its fp32 ring against MPI_Iallreduce on each tensor's first QCCL_AUTO_TRIAL_CALLS calls
# (the bench runs those untimed) and keeps the faster: every baseline, every row checked.
#   bench/data/ucx-eager-2026-11-27/race.sh ROUNDS OUT_DIR
set -euo pipefail
rounds=${1:?rounds}
out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
mkdir -p "$out"
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
for rate in none 1gbit; do
  bench/cluster/down > /dev/null 2>&1 || true
  bench/cluster/up 4 "$rate" > /dev/null
  for r in $(seq 1 "$rounds"); do
    bench/cluster/launch -n 4 -- build-release/bench/qccl-bench allreduce --codec none --algo auto -b 4M -e 64M -f 4 \
      -n 10 -w 3 -c 1 --baselines all --json 2>/dev/null | grep '"time_s"' |
      sed "s/^{/{\"rate\":\"$rate\",\"round\":$r,/" >> "$out/rows.jsonl"
  done
done
bench/cluster/down > /dev/null 2>&1 || true
