#!/usr/bin/env bash
# Where the DDP step's CPU goes: perf samples of the whole machine (both cores, 499 Hz) while the
# 4 emulated hosts at 1 Gbit/s run bench_ddp.py with one qccl variant (batch 1, SGD momentum 0.9,
# 25.6M parameters, torch 1.13, 15 steps after 3), for plain onebit and for onebit+m
# (optimizer=). Then table.sh on each recording, over its steady-state seconds, gives profile.txt.
# usage: run.sh [OUTDIR] (needs root, perf, the cluster up: bench/cluster/up 4 1gbit)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
out=${1:-/tmp}
for c in onebit onebit+m; do
  perf record -a -F 499 -o "$out/perf_$c.data" -- bench/cluster/launch -n 4 --timeout 900 \
    -x PYTHONPATH="$PWD/${BUILD:-build-dev}/bindings/python" -x OMP_NUM_THREADS=1 .venv/bin/python \
    examples/python/bench_ddp.py --bucket-view --batch 1 --steps 15 --warmup 3 --baselines "" --momentum 0.9 \
    --codecs "$c" --json "$out/prof_$c.json" > "$out/prof_$c.log" 2>&1
done
