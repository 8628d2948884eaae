#!/usr/bin/env bash
# The fp32 ring with bare floats after each stream's first chunk, sent from and received into the
# caller's buffers (variant "bare", this commit) against the same bench binary on the library of the
# commit before (variant "copy", OLD_LIB: a Release libqccl.so built from 85e8364), alternated:
# `auto` with nothing to compress and the explicit fp32 ring, every baseline in the same run, on 8
# emulated hosts at 1 Gbit/s and on 4 unshaped hosts, over MPI and over UCX.
#   [SETUPS="8 1gbit,4 none"] [LABELS="copy bare"] bench/data/fp32-bare-2026-11-27/run.sh OLD_LIB ROUNDS OUT.jsonl
#   python3 bench/data/fp32-bare-2026-11-27/summarize.py OUT.jsonl [OLD_LABEL NEW_LABEL]
# LABELS names the old and the new library in the rows (later A/B's reuse this script).
set -euo pipefail
old=${1:?old libqccl directory}
rounds=${2:?rounds}
out=$(realpath -m "${3:?out file}")
cd "$(dirname "$0")/../../.."
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
IFS=, read -r -a setups <<< "${SETUPS:-8 1gbit,4 none}"
read -r old_label new_label <<< "${LABELS:-copy bare}"
for setup in "${setups[@]}"; do
  set -- $setup
  hosts=$1 rate=$2
  bench/cluster/down > /dev/null 2>&1 || true
  bench/cluster/up "$hosts" "$rate" > /dev/null
  for r in $(seq 1 "$rounds"); do
    for tr in mpi ucx; do
      for v in "$old_label" "$new_label"; do
        x=()
        [ "$v" = "$old_label" ] && x=(-x "LD_LIBRARY_PATH=$old")
        for algo in auto ring; do
          tag="s/^{/{\"variant\":\"$v\",\"hosts\":$hosts,\"rate\":\"$rate\",\"round\":$r,\"transport\":\"$tr\",\"algo_asked\":\"$algo\",/"
          bench/cluster/launch -n "$hosts" "${x[@]}" -- build-release/bench/qccl-bench allreduce --transport "$tr" \
            --codec none --algo "$algo" -b 16M -e 64M -f 4 -n 5 -w 2 -c 1 --baselines all --json 2>/dev/null |
            grep '"time_s"' | sed "$tag" >> "$out"
        done
      done
    done
  done
done
bench/cluster/down > /dev/null 2>&1 || true
