#!/usr/bin/env bash
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
D=$1; R=${2:-3}; CODEC=${CODEC:-onebit}; mkdir -p $D
B=/tmp/build-thp/bench/qccl-bench
bench/cluster/up 4 1gbit >/dev/null 2>&1 || { echo up-failed; exit 1; }
T=/sys/kernel/mm/transparent_hugepage/enabled
for r in $(seq $R); do
  for m in ${MODES:-base xhuge always}; do
    X=""; echo madvise > $T
    [ $m = xhuge ] && X="-x QCCL_XHUGE=1"
    [ $m = always ] && echo always > $T
    timeout 300 bench/cluster/launch -n 4 $X -- $B allreduce --codec $CODEC -b 16M -e 64M -f 4 -n 5 -w 1 -c 1 --baselines mpi --json > $D/$CODEC-$m-r$r.jsonl 2> $D/$CODEC-$m-r$r.err
    rc=$?
    echo madvise > $T
    echo $m r$r $rc $(python3 -c "
import json
for l in open('$D/$CODEC-$m-r$r.jsonl'):
    r=json.loads(l)
    if 'time_s' in r: print(r['size']>>20,'MiB',round(r['time_s']*1e3,1), 'ms', round(r['wire_bytes']*8/r['time_s']/1e9,2), 'link; wrong', r['wrong'],';')
")
  done
done
echo madvise > $T
bench/cluster/down >/dev/null 2>&1
