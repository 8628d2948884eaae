#!/usr/bin/env bash
# A/B: the owner of an sra shard encoding its own values for itself (old: the library of commit f73bc1e,
# copied with qccl-bench to /tmp/s27/old) against taking them raw (new: build-release of this change); 4 emulated
# hosts at 1 Gbit/s (bench/cluster/up 4 1gbit first). Usage: ab.sh OUTDIR
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=$1; mkdir -p "$out"
for round in 1 2 3; do
  for v in old new; do
    if [ $v = old ]; then bin=/tmp/s27/old/qccl-bench; env=(-x LD_LIBRARY_PATH=/tmp/s27/old); else bin=build-release/bench/qccl-bench; env=(); fi
    for c in onebit "maxmin --bits 4"; do
      n=$(echo $c | tr -d ' -')
      bench/cluster/launch -n 4 "${env[@]}" -- $bin allreduce --codec $c -b 16M -e 64M -f 4 -n 9 -w 2 -c 1 --baselines mpi --json \
        > "$out/$n-$v-r$round.jsonl" 2> "$out/$n-$v-r$round.err"
      echo "$n $v round $round rc=$?"
    done
  done
done
