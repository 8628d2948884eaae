#!/usr/bin/env bash
# onebit and signscale allreduce over sra and over allgather, 64 KiB to 16 MiB of fp32 (16K to 4M
# elements), and maxmin 4-bit to 4 MiB, on 4 emulated hosts at 1 Gbit/s (bench/cluster), -n 20 after 5
# warm-up calls: where the DDP hook's quantized calls switch from allgather to sra
# (qccl.torch.small_call_numel).
# usage: run.sh [OUTDIR] [BUILD]; then summarize.py OUTDIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
out=${1:-$here}
build=${2:-build-dev}
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
mkdir -p "$out"
bench/cluster/up 4 1gbit > "$out/up.log" 2>&1
for algo in sra allgather; do
  for codec in onebit signscale; do
    bench/cluster/launch "$build/bench/qccl-bench" allreduce --codec $codec --algo $algo -b 64K -e 16M -f 2 \
      -n 20 -w 5 --baselines mpi --json > "$out/lat-$algo-$codec.jsonl"
  done
done
for algo in sra allgather; do
  bench/cluster/launch "$build/bench/qccl-bench" allreduce --codec maxmin --bits 4 --algo $algo -b 64K -e 4M -f 2 \
    -n 20 -w 5 --baselines mpi --json > "$out/lat-$algo-maxmin4.jsonl"
done
bench/cluster/down > /dev/null 2>&1 || true
