#!/usr/bin/env bash
# AVX2 encode before/after, alternating processes (this VM's memory bandwidth drifts within minutes,
# so the two builds take turns): qccl-bench codec for onebit, signscale and maxmin 4-bit at 256 KiB
# (in cache) and 64 MiB of fp32 (SIZES), ROUNDS rounds; prints one line per run, then medians.
#   bench/data/codec-avx2-2026-11-27/ab.sh OLD_BUILD NEW_BUILD [ROUNDS] > log.txt
# Builds: cmake -S SRC -B DIR -G Ninja -DCMAKE_BUILD_TYPE=Release -DQCCL_CUDA=OFF -DQCCL_TESTS=OFF
#         -DQCCL_EXAMPLES=OFF && ninja -C DIR qccl-bench
set -euo pipefail
old=${1:?old build dir} new=${2:?new build dir} rounds=${3:-6}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for size in ${SIZES:-256K 64M}; do
  n=100
  [ "$size" = 64M ] && n=10
  for r in $(seq "$rounds"); do
    for which in old new; do
      dir=$old
      [ "$which" = new ] && dir=$new
      for codec in onebit signscale maxmin4; do
        enc=$(QCCL_CPU_ISA=avx2 "$dir/bench/qccl-bench" codec -b "$size" -n "$n" --codec "$codec" |
          awk -v c="$codec" '$1 == c {print $4}')
        echo "$size $codec $which $r $enc" | tee -a "$tmp"
      done
    done
  done
done
echo "# medians of encode GB/s (fp32 input bytes per second): size codec build median runs"
python3 - "$tmp" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    size, codec, which, _, enc = line.split()
    runs[(size, codec, which)].append(float(enc))
for k in sorted(runs):
    print(*k, statistics.median(runs[k]), runs[k])
PY
