#!/usr/bin/env bash
# A/B: the copy into recv before sra (old: /tmp/ab-old, a worktree of commit c29d9c8 built with
#   cmake -DCMAKE_BUILD_TYPE=Release -DQCCL_CUDA=OFF -DQCCL_TESTS=OFF -DQCCL_EXAMPLES=OFF) against none
# (new: build-release at 571cb39); 4 emulated hosts at 1 Gbit/s (bench/cluster/up 4 1gbit first). Usage: ab.sh OUTDIR
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=$1; mkdir -p "$out"
for round in 1 2 3; do
  for v in old new; do
    bin=build-release/bench/qccl-bench; [ $v = old ] && bin=/tmp/ab-old/build/bench/qccl-bench
    for c in onebit "maxmin --bits 4"; do
      n=$(echo $c | tr -d ' -')
      bench/cluster/launch -n 4 -- $bin allreduce --codec $c -b 16M -e 64M -f 4 -n 7 -w 2 -c 1 --baselines mpi --json \
        > "$out/$n-$v-r$round.jsonl" 2> "$out/$n-$v-r$round.err"
      echo "$n $v round $round rc=$?"
    done
  done
done
