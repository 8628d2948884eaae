#!/usr/bin/env bash
# The fp32 sum with a raw first term (the fp32 ring's reduce-scatter receive: this rank's own values
# plus the floats from the left) in one pass (this commit, "fused") against a copy of the first
# term into dst and an add over it (OLD_LIB, the library of the commit before, "separate"):
#   1. sum_bench.cc, one process pinned to one core, 16M floats in 256K-element chunks as the
#      executor calls decodeSumParsed, alternated library by library (micro.txt);
#   2. the collectives on 4 unshaped emulated hosts with every baseline, through
#      ../fp32-bare-2026-11-27/run.sh (rows.jsonl; summarize.py there with "separate fused").
#   bench/data/fp32-init-sum-2026-11-27/run.sh OLD_LIB NEW_LIB [micro|cluster|all]
set -euo pipefail
old=$(realpath "${1:?old libqccl directory}")
new=$(realpath "${2:?new libqccl directory}")
here=$(cd "$(dirname "$0")" && pwd)
what=${3:-all}
if [ "$what" != cluster ]; then
g++ -O2 -std=c++17 -I"$here/../../../include" "$here/sum_bench.cc" -L"$new" -lqccl -o /tmp/qccl_sum_bench
for i in 1 2 3 4 5; do
  for l in "$old" "$new"; do
    echo -n "$([ "$l" = "$old" ] && echo separate || echo fused) "
    LD_LIBRARY_PATH=$l taskset -c 1 /tmp/qccl_sum_bench
  done
done | tee "$here/micro.txt"
fi
[ "$what" = micro ] && exit 0
SETUPS="4 none" LABELS="separate fused" "$here/../fp32-bare-2026-11-27/run.sh" "$old" 4 "$here/rows.jsonl"
