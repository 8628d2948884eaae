#!/usr/bin/env bash
# A/B of the wait loop's spin rounds: HEAD (64), 16, 4; onebit and maxmin 4-bit, 16 and 64 MiB, 4 hosts x 1 Gbit/s
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
D=$1; R=${2:-3}; mkdir -p $D
bench/cluster/up 4 1gbit >/dev/null 2>&1 || { echo up-failed; exit 1; }
for r in $(seq $R); do
  for v in 64 16 4; do
    x="-x LD_LIBRARY_PATH=/tmp/build-sp$v"; [ $v = 64 ] && x="-x LD_LIBRARY_PATH=/tmp/old/build"
    for c in onebit "maxmin --bits 4"; do
      n=$(echo $c | tr -d ' -' | sed 's/bits4//')
      timeout 400 bench/cluster/launch -n 4 $x -- build-release/bench/qccl-bench allreduce --codec $c -b 16M -e 64M -f 4 -n 5 -w 1 -c 1 --baselines mpi --json \
        > $D/$n-spin$v-r$r.jsonl 2> $D/$n-spin$v-r$r.err
      echo $n spin$v r$r $? $(python3 -c "
import json
for l in open('$D/$n-spin$v-r$r.jsonl'):
    r=json.loads(l)
    if 'time_s' in r: print(r['size']>>20, 'MiB', round(r['time_s']*1e3,1), 'ms', round(r['wire_bytes']*8/r['time_s']/1e9,2), 'link cpu', round(r['cpu']['process_s']*1e3,1), 'wrong', r['wrong'], end='; ')
")
    done
  done
done
bench/cluster/down >/dev/null 2>&1
