#!/usr/bin/env bash
# A/B: old library (HEAD before the lookahead) vs new, interleaved; args: outdir rate rounds
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
D=$1; rate=$2; R=${3:-2}; mkdir -p $D
bench/cluster/up 4 $rate >/dev/null 2>&1 || { echo up-failed; exit 1; }
for r in $(seq $R); do
  for v in old new; do
    x=""; [ $v = old ] && x="-x LD_LIBRARY_PATH=/tmp/old/build"
    for c in onebit "maxmin --bits 4"; do
      n=$(echo $c | tr -d ' -' | sed 's/bits4//')
      timeout 400 bench/cluster/launch -n 4 $x -- build-release/bench/qccl-bench allreduce --codec $c -b 16M -e 64M -f 4 -n 5 -w 1 -c 1 --baselines mpi --json \
        > $D/$rate-$n-$v-r$r.jsonl 2> $D/$rate-$n-$v-r$r.err
      echo $rate $n $v r$r $? $(python3 -c "
import json
for l in open('$D/$rate-$n-$v-r$r.jsonl'):
    r=json.loads(l)
    if 'time_s' in r: print(r['size']>>20, 'MiB', round(r['time_s']*1e3,1), 'ms', round(r['wire_bytes']*8/r['time_s']/1e9/$(echo $rate | sed 's/mbit/e-3/;s/gbit//'),2), 'of link', 'wrong', r['wrong'], end='; ')
")
    done
  done
done
bench/cluster/down >/dev/null 2>&1
