#!/usr/bin/env bash
# The ring's chunks cut to Open MPI's TCP eager limit, against the codec's own chunk (what the ring
# sent before: QCCL_CHUNK_BYTES=4M for fp32, 1M for fp16, which also turns the cut off), on the
# emulated cluster at 1 Gbit/s, interleaved, every row checked. The rows in this folder were taken
# on commit bd124e2, which cut the fp16 ring by default, to the chunk this script now names:
#   bash bench/data/ring-eager-2026-11-27/ab.sh [ROUNDS]     (from the repository root, as root)
# Needs build-release/bench/qccl-bench. Writes h{2,4}-{fp32,fp16}-{cut,whole}-run{i}.jsonl here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-2}
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
bench=build-release/bench/qccl-bench
for hosts in 2 4; do
  bench/cluster/down >/dev/null 2>&1 || true
  bench/cluster/up "$hosts" 1gbit >/dev/null
  for ((i = 1; i <= rounds; i++)); do
    for codec in fp32 fp16; do
      if [ $codec = fp32 ]; then args=(--algo ring --codec none); whole=4M; else args=(--codec fp16); whole=1M; fi
      for mode in whole cut; do
        xs=()
        [ $mode = whole ] && xs=(-x QCCL_CHUNK_BYTES=$whole)
        # The fp16 ring is not cut by the library (any more): its cut chunk, 32672 halves in a
        # 65376-byte message, is asked for by hand.
        [ $mode = cut ] && [ $codec = fp16 ] && xs=(-x QCCL_CHUNK_BYTES=130688)
        bench/cluster/launch -n "$hosts" "${xs[@]}" -- $bench allreduce "${args[@]}" -b 16M -e 64M -f 4 -n 5 -w 1 -c 1 \
          --baselines all --json >"$here/h$hosts-$codec-$mode-run$i.jsonl" 2>&1
      done
    done
  done
done
bench/cluster/down >/dev/null
