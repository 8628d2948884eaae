#!/usr/bin/env bash
# The cut fp32 ring's pipeline depth on 8 emulated hosts at 1 Gbit/s: auto with nothing to compress
# (which runs that ring from 4 MiB) at QCCL_PIPELINE 2 (the default) and 8, interleaved, every row
# checked, every baseline in the same run:
#   bash bench/data/ring-eager-2026-11-27/depth.sh [ROUNDS]    (from the repository root, as root)
# Writes depth-h8-d{2,8}-run{i}.jsonl here; summarize_depth.py reads them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-2}
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
bench/cluster/down >/dev/null 2>&1 || true
bench/cluster/up 8 1gbit >/dev/null
for ((i = 1; i <= rounds; i++)); do
  for d in 2 8; do
    bench/cluster/launch -n 8 -x QCCL_PIPELINE=$d -- build-release/bench/qccl-bench allreduce --codec none \
      -b 16M -e 64M -f 4 -n 5 -w 1 -c 1 --baselines all --json >"$here/depth-h8-d$d-run$i.jsonl" 2>&1
  done
done
bench/cluster/down >/dev/null
