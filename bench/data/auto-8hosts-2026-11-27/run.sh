#!/usr/bin/env bash
# auto with nothing to compress on 8 emulated hosts at 1 Gbit/s, over MPI (the ring-versus-library
# trial) and over UCX (the fp32 ring: eager, 1 MiB chunks, 256 KiB tcp segments): every baseline.
#   bench/data/auto-8hosts-2026-11-27/run.sh OUT.jsonl ROUNDS; python3 bench/data/auto-8hosts-2026-11-27/summarize.py OUT.jsonl
cd "$(dirname "$0")/../../.."
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=${1:?out file}; rounds=${2:?rounds}
bench/cluster/down > /dev/null 2>&1 || true
bench/cluster/up 8 1gbit > /dev/null
for r in $(seq 1 $rounds); do
  for tr in mpi ucx; do
    bench/cluster/launch -n 8 -- build-release/bench/qccl-bench allreduce --transport $tr --codec none --algo auto -b 4M -e 64M -f 4 -n 5 -w 3 -c 1 --baselines all --json 2>/dev/null | grep '"time_s"' | sed "s/^{/{\"hosts\":8,\"rate\":\"1gbit\",\"round\":$r,/" >> $out
  done
done
bench/cluster/down > /dev/null 2>&1 || true
