#!/usr/bin/env bash
# The DDP step on torch 2.15 (PyPI) against torch 1.13 (Debian), in the same job: 4 emulated hosts,
# 25.6M parameters, SGD momentum 0.9, DDP(gradient_as_bucket_view=True), median of 7 steps after 3;
# the compute floor, gloo fp32, torch's fp16 hook, and the qccl hook with onebit, maxmin 4-bit and
# onebit with optimizer= (onebit+m). Batch 1 at 1 Gbit/s in ROUNDS rounds, the torch versions'
# order alternating; then batch 8 at 1 Gbit/s and unshaped once per version.
# usage: run.sh [OUTDIR]; then summarize.py [OUTDIR]. PY2: the torch 2.x interpreter
# (bindings/python/install_torch2.sh; default <repo>/.venv-torch2/bin/python).
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
export QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113}
out=${1:-$here}; mkdir -p "$out"
py1=${PY1:-$PWD/.venv/bin/python}
py2=${PY2:-$PWD/.venv-torch2/bin/python}
sweep() {  # name python batches rates outdir
  mkdir -p "$(dirname "$5")"
  bench/ddp-sweep --build "${BUILD:-build-dev}" --python "$2" --bucket-view --rates "$4" --batches "$3" \
    --steps 7 --warmup 3 --baselines compute,fp32,fp16 --codecs onebit,maxmin:4,onebit+m --momentum 0.9 \
    --out "$5" > "$5.log" 2>&1
  echo "$1 batch $3 rates '$4' rc=$? $(date -u +%H:%M:%S)"
}
for round in ${ROUNDS:-1 2 3}; do
  order="t1 t2"; ((round % 2 == 0)) && order="t2 t1"
  for t in $order; do
    py=$py1; [ "$t" = t2 ] && py=$py2
    sweep "$t round $round" "$py" 1 1gbit "$out/$t/r$round"
  done
done
for t in t2 t1; do
  py=$py1; [ "$t" = t2 ] && py=$py2
  sweep "$t" "$py" 8 "1gbit none" "$out/$t/b8"
done
