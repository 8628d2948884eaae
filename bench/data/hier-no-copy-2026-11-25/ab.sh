#!/usr/bin/env bash
# hier without a copy of the source, A/B on the emulated cluster: 2 hosts x 2 ranks at RATE,
# qccl-bench allreduce --algo hier out of place, fp32 (codec none) and onebit, 16 and 64 MiB, every row
# checked, the two builds interleaved. usage: ab.sh OUT OLD_BUILD NEW_BUILD [ROUNDS] [RATE];
# then python3 bench/data/ab_summary.py OUT
here=$(cd "$(dirname "$0")" && pwd)
out=$1; old=$2; new=$3; rounds=${4:-4}; rate=${5:-none}; mkdir -p "$out"
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
bench/cluster/up 2 "$rate" >/dev/null 2>&1 || { echo "cluster up failed"; exit 1; }
for r in $(seq 1 "$rounds"); do
  for c in none onebit; do
    for v in old new; do
      b=$old; [ $v = new ] && b=$new
      timeout 600 bench/cluster/launch -n 4 --per-host 2 -- "$b/bench/qccl-bench" allreduce --codec $c --algo hier -b 16M -e 64M -f 4 \
        -n 10 -w 2 -c 1 --json --baselines mpi > "$out/$c-$v-r$r.jsonl" 2> "$out/$c-$v-r$r.err"
      echo "$rate $c $v $r rc=$?"
    done
  done
done
bench/cluster/down >/dev/null 2>&1
