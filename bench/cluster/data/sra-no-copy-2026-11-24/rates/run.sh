#!/usr/bin/env bash
# The alpha-beta model's shaped rates after the out-of-place change: 4 emulated hosts, onebit and maxmin 4-bit,
# 16 and 64 MiB, -n 3 -w 1 (the command of "4 hosts x 1 Gbit/s again", sweep-*.jsonl there).
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
D=$1; mkdir -p $D
for rate in 250mbit 500mbit 2.5gbit; do
  bench/cluster/up 4 $rate >/dev/null 2>&1 || { echo up-failed $rate; exit 1; }
  for c in onebit "maxmin --bits 4"; do
    n=$(echo $c | tr -d ' -' | sed 's/bits4//')
    timeout 400 bench/cluster/launch -n 4 -- build-release/bench/qccl-bench allreduce --codec $c -b 16M -e 64M -f 4 -n 3 -w 1 -c 1 --json \
      > $D/sweep-$rate-$n.jsonl 2> $D/sweep-$rate-$n.err
    echo $rate $n $?
  done
  bench/cluster/down >/dev/null 2>&1
done
