#!/usr/bin/env bash
# 4 hosts x 2 ranks: auto with nothing to compress, the hier trial against the ring (QCCL_AUTO_RING=1,
# the default) or against MPI_Iallreduce (QCCL_AUTO_RING=0), alternated; every baseline.
#   bench/data/auto-shared-hosts-2026-11-27/run.sh OUT.jsonl ROUNDS none 1gbit; python3 bench/data/auto-shared-hosts-2026-11-27/summarize.py OUT.jsonl
cd "$(dirname "$0")/../../.."
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=${1:?out file}; rounds=${2:?rounds}; shift 2
for rate in "$@"; do
  bench/cluster/down > /dev/null 2>&1 || true
  bench/cluster/up 4 "$rate" > /dev/null
  for r in $(seq 1 $rounds); do
    for v in 1 0; do
      bench/cluster/launch -n 8 --per-host 2 -x QCCL_AUTO_RING=$v -- build-release/bench/qccl-bench allreduce --codec none --algo auto -b 16M -e 64M -f 4 -n 5 -w 3 -c 1 --baselines all --json 2>/dev/null | grep '"time_s"' | sed "s/^{/{\"auto_ring\":$v,\"rate\":\"$rate\",\"round\":$r,/" >> $out
    done
  done
done
bench/cluster/down > /dev/null 2>&1 || true
