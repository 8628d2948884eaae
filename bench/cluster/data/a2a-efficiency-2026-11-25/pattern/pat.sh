#!/usr/bin/env bash
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
rate=$1
bench/cluster/up 4 $rate >/dev/null 2>&1 || { echo up-failed; exit 1; }
for a in sra ring; do
  timeout 400 bench/cluster/launch -n 4 -- build-release/bench/qccl-bench allreduce --codec none --algo $a -b 16M -e 16M -n 3 -w 1 -c 1 --baselines mpi --json > /tmp/exp/pat-$rate-$a.jsonl 2>/tmp/exp/pat-$rate-$a.err
  echo $a $(python3 -c "import json,sys;r=json.loads(open('/tmp/exp/pat-$rate-$a.jsonl').readline());print(r['time_s'],r['wire_bytes'],r['wire_bytes']*8/r['time_s']/1e9, r['cpu'])")
done
bench/cluster/down >/dev/null 2>&1
