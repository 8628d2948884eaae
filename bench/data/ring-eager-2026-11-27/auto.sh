#!/usr/bin/env bash
# auto with nothing to compress on 4 and 8 emulated hosts at 1 Gbit/s, every baseline in the same
# run, every row checked; then sra with chunks cut to the eager limit by hand (QCCL_CHUNK_BYTES:
# 61440-byte messages or less) against its own chunks, 4 hosts, 64 MiB:
#   bash bench/data/ring-eager-2026-11-27/auto.sh [ROUNDS]    (from the repository root, as root)
# Writes auto-h{4,8}-run{i}.jsonl and sra-{maxmin4,onebit}-{own,eager}-run{i}.jsonl here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-2}
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
bench=build-release/bench/qccl-bench
for hosts in 4 8; do
  bench/cluster/down >/dev/null 2>&1 || true
  bench/cluster/up "$hosts" 1gbit >/dev/null
  for ((i = 1; i <= rounds; i++)); do
    bench/cluster/launch -n "$hosts" -- $bench allreduce --codec none -b 1M -e 64M -f 4 -n 5 -w 1 -c 1 \
      --baselines all --json >"$here/auto-h$hosts-run$i.jsonl" 2>&1
  done
  if [ "$hosts" = 4 ]; then
    for ((i = 1; i <= rounds; i++)); do
      for codec in maxmin4 onebit; do
        if [ $codec = maxmin4 ]; then args=(--codec maxmin --bits 4); eager=460K; else args=(--codec onebit); eager=1664K; fi
        for mode in own eager; do
          xs=()
          [ $mode = eager ] && xs=(-x QCCL_CHUNK_BYTES=$eager)
          bench/cluster/launch -n 4 "${xs[@]}" -- $bench allreduce "${args[@]}" -b 64M -e 64M -n 8 -w 2 -c 1 \
            --baselines mpi --json >"$here/sra-$codec-$mode-run$i.jsonl" 2>&1
        done
      done
    done
  fi
done
bench/cluster/down >/dev/null
