#!/usr/bin/env bash
# qccl over UCX with every message eager and the fp32 ring in 1 MiB chunks (the defaults since this
# change) against UCX's own rendezvous threshold and the codec's 4 MiB chunks (the defaults before
# it, restored here through the environment: UCX_RNDV_THRESH=auto is UCX's default and, being set,
# keeps qccl's RNDV_THRESH=inf out; QCCL_CHUNK_BYTES=4194304 is given to the fp32 rows only, whose
# chunk this change cut; the codecs' chunks are unchanged), alternated, every row checked.
#   bench/data/ucx-eager-2026-11-27/run.sh ROUNDS OUT_DIR
#   python3 bench/data/ucx-eager-2026-11-27/summarize.py OUT_DIR
# Needs root (the emulated cluster) and build-release/bench/qccl-bench.
set -euo pipefail
rounds=${1:?rounds}
out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"
mkdir -p "$out"
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
bench=build-release/bench/qccl-bench
before=(-x UCX_RNDV_THRESH=auto -x QCCL_CHUNK_BYTES=4194304)  # fp32 rows
before_codec=(-x UCX_RNDV_THRESH=auto)                        # compressed rows
cluster() {  # hosts: the emulated cluster at 1 Gbit/s
  bench/cluster/down > /dev/null 2>&1 || true
  bench/cluster/up "$1" 1gbit > /dev/null
}
row() {  # file label hosts launch-args... -- bench-args...
  local f=$1 label=$2 hosts=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  bench/cluster/launch -n "$hosts" "${envs[@]}" -- "$bench" allreduce --transport ucx "$@" -c 1 --json 2>/dev/null |
    grep '"time_s"' | sed "s/^{/{\"variant\":\"$label\",\"hosts_n\":$hosts,/" >> "$out/$f"
}
local_row() {  # file label mpirun-env-args... -- bench-args...  (4 ranks on this host)
  local f=$1 label=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  mpirun --allow-run-as-root --oversubscribe -np 4 "${envs[@]}" "$bench" allreduce --transport ucx "$@" -c 1 --json \
    2>/dev/null | grep '"time_s"' | sed "s/^{/{\"variant\":\"$label\",\"hosts_n\":1,/" >> "$out/$f"
}
for hosts in 4 2; do
  cluster "$hosts"
  for r in $(seq 1 "$rounds"); do
    # auto with nothing to compress (over UCX: the fp32 ring), every uncompressed baseline
    row auto.jsonl after "$hosts" -- --codec none --algo auto -b 4M -e 64M -f 4 -n 5 -w 2 --baselines all
    row auto.jsonl before "$hosts" "${before[@]}" -- --codec none --algo auto -b 4M -e 64M -f 4 -n 5 -w 2 --baselines all
    if [ "$hosts" = 4 ]; then
      for c in "--codec onebit" "--codec maxmin --bits 4" "--codec fp16"; do
        row codecs.jsonl after 4 -- $c -b 64M -e 64M -n 5 -w 2 --baselines mpi
        row codecs.jsonl before 4 "${before_codec[@]}" -- $c -b 64M -e 64M -n 5 -w 2 --baselines mpi
      done
    fi
  done
done
bench/cluster/down > /dev/null 2>&1 || true
for r in $(seq 1 "$rounds"); do
  local_row local.jsonl after -- --codec none --algo ring -b 1M -e 64M -f 8 -n 5 -w 2 --baselines mpi
  local_row local.jsonl before "${before[@]}" -- --codec none --algo ring -b 1M -e 64M -f 8 -n 5 -w 2 --baselines mpi
  local_row local.jsonl after -- --codec maxmin --bits 4 --algo sra -b 1M -e 64M -f 8 -n 5 -w 2 --baselines mpi
  local_row local.jsonl before "${before_codec[@]}" -- --codec maxmin --bits 4 --algo sra -b 1M -e 64M -f 8 -n 5 \
    -w 2 --baselines mpi
done
