#!/usr/bin/env bash
# usage: ab.sh OLD_BUILD NEW_BUILD ROUNDS OUTDIR -- maxmin 4-bit, 64 MiB, 4 emulated hosts x 1 Gbit/s,
# the two builds alternating process by process, every row checked (-c 1); the new build's last
# round also times every uncompressed baseline (--baselines all) for x_best. Then
# python3 bench/data/prefetch-2026-11-28/summarize.py OUTDIR (it reads OUTDIR/{old,new}-CODEC-R.jsonl).
cd "$(dirname "$0")/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
old=$1 new=$2 rounds=$3 out=$4
mkdir -p "$out"
bench/cluster/up 4 1gbit > /dev/null 2>&1
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    b=$old
    [ $side = new ] && b=$new
    base=mpi
    [ $side = new ] && [ "$r" = "$rounds" ] && base=all
    timeout 900 bench/cluster/launch -n 4 -- "$b/bench/qccl-bench" allreduce --codec maxmin --bits 4 -b 64M -e 64M \
      -n 10 -w 2 -c 1 --json --baselines $base > "$out/$side-maxmin-$r.jsonl" 2>> "$out/err.txt" || echo "FAIL $side $r"
  done
  echo "round $r $(date -u +%T)"
done
