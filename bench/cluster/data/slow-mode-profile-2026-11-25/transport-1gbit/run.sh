#!/usr/bin/env bash
# onebit 16 and 64 MiB over MPI and over UCX, interleaved, 4 emulated hosts at 1 Gbit/s, 3 runs each;
# read with ../pin-summary.py-style fields (tr-TRANSPORT-RUN.jsonl).
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
bench/cluster/up 4 1gbit >/dev/null 2>&1 || exit 1
for r in 1 2 3; do
  for t in mpi ucx; do
    timeout 300 bench/cluster/launch -n 4 -- build-release/bench/qccl-bench allreduce --transport $t --codec onebit \
      -b 16M -e 64M -f 4 -n 10 -w 2 -c 1 --json --baselines mpi > "$here/tr-$t-$r.jsonl" 2> "$here/tr-$t-$r.err"
  done
done
bench/cluster/down >/dev/null 2>&1
