#!/usr/bin/env bash
# UCX's TCP segment sizes for qccl over UCX on 4 emulated hosts, unshaped and at 1 Gbit/s: qccl's
# defaults since this change (ucxConfigDefaults: TX_SEG_SIZE=256K, RX_SEG_SIZE=512K; variant "seg")
# against UCX's own 8K / 64K (variant "default", set through the environment, which wins), alternated:
# the fp32 ring (auto with nothing to compress; every baseline) and onebit (sra; the MPI baselines).
#   bench/data/ucx-tcp-seg-2026-11-27/run.sh ROUNDS OUT.jsonl
#   python3 bench/data/ucx-tcp-seg-2026-11-27/summarize.py OUT.jsonl
# The recorded rows.jsonl came from the binary before the change, with the variants swapped: "default"
# ran as it was, "seg" with -x UCX_TCP_TX_SEG_SIZE=256K -x UCX_TCP_RX_SEG_SIZE=512K (the same settings;
# strace of a 2-rank tcp job showed the same send and receive sizes either way).
set -euo pipefail
rounds=${1:?rounds}
out=${2:?out file}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
for rate in none 1gbit; do
  bench/cluster/down > /dev/null 2>&1 || true
  bench/cluster/up 4 "$rate" > /dev/null
  for r in $(seq 1 "$rounds"); do
    for v in default seg; do
      x=()
      [ "$v" = default ] && x=(-x UCX_TCP_TX_SEG_SIZE=8K -x UCX_TCP_RX_SEG_SIZE=64K)
      tag="s/^{/{\"variant\":\"$v\",\"rate\":\"$rate\",\"round\":$r,/"
      bench/cluster/launch -n 4 "${x[@]}" -- build-release/bench/qccl-bench allreduce --transport ucx --codec none \
        --algo auto -b 4M -e 64M -f 4 -n 5 -w 2 -c 1 --baselines all --json 2>/dev/null | grep '"time_s"' |
        sed "$tag" >> "$out"
      bench/cluster/launch -n 4 "${x[@]}" -- build-release/bench/qccl-bench allreduce --transport ucx --codec onebit \
        --algo auto -b 16M -e 64M -f 4 -n 10 -w 2 -c 1 --baselines mpi --json 2>/dev/null | grep '"time_s"' |
        sed "$tag" >> "$out"
    done
  done
done
bench/cluster/down > /dev/null 2>&1 || true
