#!/usr/bin/env bash
# onebit 64 MiB on 4 emulated hosts at 1 Gbit/s: chunk size x pipeline depth, interleaved rounds.
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=${1:-/tmp/chunk/out}; mkdir -p "$out"
for round in 1 2 3; do
  for cfg in 4M:2 4M:4 2M:4 8M:2 16M:1; do
    c=${cfg%:*}; d=${cfg#*:}
    bench/cluster/launch -n 4 -x QCCL_CHUNK_BYTES=$c -x QCCL_PIPELINE=$d -- build-release/bench/qccl-bench allreduce \
      --codec onebit -b 64M -e 64M -n 7 -w 2 -c 1 --baselines mpi --json > "$out/onebit-c$c-d$d-r$round.jsonl" 2> "$out/onebit-c$c-d$d-r$round.err"
    echo "$cfg round $round rc=$?"
  done
done
