#!/usr/bin/env bash
# Over UCX `auto` with nothing to compress selects exactly the explicit fp32 ring (no library
# allreduce to race, no check), yet run.sh's auto rows on 8 hosts at 1 Gbit/s were slower than its
# ring rows; auto always ran first of the pair there. This alternates the order: 64 MiB, 8 emulated
# hosts at 1 Gbit/s, UCX, the MPI baselines only (gloo is in run.sh's rows), this commit's library.
#   [TRANSPORT=mpi] bench/data/fp32-bare-2026-11-27/order.sh ROUNDS OUT.jsonl
#   (recorded: order-rows.jsonl, UCX, 4 rounds; order-rows-mpi.jsonl, TRANSPORT=mpi, 4 rounds)
set -euo pipefail
rounds=${1:?rounds}
out=$(realpath -m "${2:?out file}")
cd "$(dirname "$0")/../../.."
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
bench/cluster/down > /dev/null 2>&1 || true
bench/cluster/up 8 1gbit > /dev/null
for r in $(seq 1 "$rounds"); do
  order="auto ring"
  [ $((r % 2)) -eq 0 ] && order="ring auto"
  pos=0
  for algo in $order; do
    pos=$((pos + 1))
    tag="s/^{/{\"transport_asked\":\"${TRANSPORT:-ucx}\",\"round\":$r,\"position\":$pos,\"algo_asked\":\"$algo\",/"
    bench/cluster/launch -n 8 -- build-release/bench/qccl-bench allreduce --transport "${TRANSPORT:-ucx}" --codec none \
      --algo "$algo" -b 64M -e 64M -n 7 -w 2 -c 1 --baselines mpi --json 2>/dev/null | grep '"time_s"' |
      sed "$tag" >> "$out"
  done
done
bench/cluster/down > /dev/null 2>&1 || true
