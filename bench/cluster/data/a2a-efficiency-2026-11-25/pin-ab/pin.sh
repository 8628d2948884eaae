#!/usr/bin/env bash
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
D=$1; R=${2:-3}; mkdir -p $D
bench/cluster/up 4 1gbit >/dev/null 2>&1 || { echo up-failed; exit 1; }
for r in $(seq $R); do
  for m in ${MODES:-none mod div}; do
    timeout 300 bench/cluster/launch -n 4 -x PIN_MODE=$m -- /tmp/exp/pin-wrap.sh $PWD/build-release/bench/qccl-bench allreduce --codec onebit -b 64M -e 64M -n 5 -w 1 -c 1 --baselines mpi --json > $D/onebit-$m-r$r.jsonl 2> $D/onebit-$m-r$r.err
    echo $m r$r $? $(python3 -c "
import json
for l in open('$D/onebit-$m-r$r.jsonl'):
    r=json.loads(l)
    if 'time_s' in r: print(round(r['time_s']*1e3,1), 'ms', round(r['wire_bytes']*8/r['time_s']/1e9,2), 'link; calls', [round(t*1e3) for t in r['times_s']], 'wrong', r['wrong'])
")
  done
done
bench/cluster/down >/dev/null 2>&1
