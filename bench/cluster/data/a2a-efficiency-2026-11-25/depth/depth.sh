#!/usr/bin/env bash
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
D=$1; rate=$2; shift 2; mkdir -p $D
bench/cluster/up 4 $rate >/dev/null 2>&1 || { echo up-failed; exit 1; }
for dep in "$@"; do
  for c in onebit "maxmin --bits 4"; do
    n=$(echo $c | tr -d ' -' | sed 's/bits4//')
    timeout 400 bench/cluster/launch -n 4 -x QCCL_PIPELINE=$dep -- build-release/bench/qccl-bench allreduce --codec $c -b 64M -e 64M -n 3 -w 1 -c 1 --baselines mpi --json \
      > $D/$rate-$n-d$dep.jsonl 2> $D/$rate-$n-d$dep.err
    echo $rate $n d$dep $? $(python3 -c "import json,sys;r=json.loads(open('$D/$rate-$n-d$dep.jsonl').readline());print(r['time_s'],r['wire_bytes']*8/r['time_s']/1e9)")
  done
done
bench/cluster/down >/dev/null 2>&1
