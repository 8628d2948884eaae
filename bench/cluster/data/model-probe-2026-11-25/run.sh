#!/usr/bin/env bash
# The alpha-beta model with the sra wire time from the row's own messages replayed without a codec
# (bench/wire_probe.cc): 4 emulated hosts at every shaped rate, onebit, maxmin 4-bit and fp16,
# 16 and 64 MiB, every baseline (the ring fit needs qccl_ring), every row checked.
# usage: run.sh OUTDIR [RATES]
set -u
cd "$(dirname "$0")/../../../.."
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
D=$1; mkdir -p "$D"
for rate in ${2:-250mbit 500mbit 1gbit 2.5gbit}; do
  bench/cluster/up 4 $rate >/dev/null 2>&1 || { echo up-failed $rate; exit 1; }
  for c in onebit "maxmin --bits 4" fp16; do
    n=$(echo $c | tr -d ' -' | sed 's/bits4//')
    timeout 600 bench/cluster/launch -n 4 -- build-release/bench/qccl-bench allreduce --codec $c -b 16M -e 64M -f 4 \
      -n 3 -w 1 -c 1 --json > "$D/sweep-$rate-$n.jsonl" 2> "$D/sweep-$rate-$n.err"
    echo $rate $n $?
  done
  bench/cluster/down >/dev/null 2>&1
done
