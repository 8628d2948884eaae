#!/usr/bin/env bash
# usage: multi.sh RATE N TAG
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
rate=$1; N=$2; tag=$3; D=$here/$tag; mkdir -p $D
bench/cluster/up 4 $rate >/dev/null 2>&1 || { echo upfail; exit 1; }
for r in $(seq 1 $N); do
  s0=$(head -1 /proc/stat); c0=$(grep ctxt /proc/stat)
  timeout 600 bench/cluster/launch -n 4 -- build-release/bench/qccl-bench allreduce --codec onebit -b 16M -e 64M -f 4 -n 10 -w 2 -c 1 --json --baselines mpi > $D/r$r.jsonl 2> $D/r$r.err
  s1=$(head -1 /proc/stat); c1=$(grep ctxt /proc/stat)
  echo "$r|$s0|$s1|$c0|$c1" >> $D/stat.txt
done
bench/cluster/down >/dev/null 2>&1
