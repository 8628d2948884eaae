#!/usr/bin/env bash
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=$1  # bench/cluster/up 4 1gbit first; mkdir -p $out
for run in 1 2 3; do
  for c in onebit "maxmin --bits 4"; do
    n=$(echo $c | tr -d ' -')
    bench/cluster/launch -n 4 -- build-release/bench/qccl-bench allreduce --codec $c -b 16M -e 64M -f 4 -n 5 -w 1 -c 1 --json > $out/$n-run$run.jsonl 2> $out/$n-run$run.err
    echo "$n run $run rc=$?"
  done
done
