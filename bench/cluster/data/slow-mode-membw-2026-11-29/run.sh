#!/usr/bin/env bash
# onebit's slow mode against the host's memory bandwidth (bench/RESULTS.md, "onebit's slow mode
# and the memory bandwidth"): RUNS times, the probe (probe.c: triad bandwidth of one and of two
# threads, a register-only loop alone and on both vCPUs) and then one qccl-bench job, onebit 64 MiB
# on 4 emulated hosts at RATE (-n 10 -w 2 -c 1, the MPI baselines only), probe again.
# usage: run.sh OUTDIR [RATE] [RUNS]; then summarize.py OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.." || exit 1
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
D=$1; rate=${2:-2.5gbit}; runs=${3:-10}; mkdir -p "$D"
cc -O3 -march=native -pthread "$here/probe.c" -o "$D/probe" || exit 1
bench/cluster/up 4 "$rate" >/dev/null 2>&1 || { echo up-failed; exit 1; }
for i in $(seq 1 "$runs"); do
  "$D/probe" > "$D/probe-before-$i.json"
  timeout 600 bench/cluster/launch -n 4 -- "${BUILD:-build-dev}"/bench/qccl-bench allreduce --codec onebit \
    -b 64M -e 64M -n 10 -w 2 -c 1 --json --baselines mpi > "$D/run-$i.jsonl" 2> "$D/run-$i.err"
  rc=$?
  "$D/probe" > "$D/probe-after-$i.json"
  echo "run $i rc=$rc $(date -u +%T)"
done
bench/cluster/down >/dev/null 2>&1
rm -f "$D/probe"
