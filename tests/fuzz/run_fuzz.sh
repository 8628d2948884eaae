#!/usr/bin/env bash
# Builds the wire-decoder fuzzer with clang in its own build directory, writes the seed corpus,
# and fuzzes for N seconds (first argument, default 60). Exits non-zero on any crash.
#   QCCL_FUZZ_BUILD_DIR  build directory (default <repo>/build-fuzz)
#   QCCL_FUZZ_RUNS       stop after this many executions instead (the time limit still applies)
set -euo pipefail
secs=${1:-60}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${QCCL_FUZZ_BUILD_DIR:-$root/build-fuzz}

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQCCL_FUZZ=ON -DQCCL_CUDA=OFF -DQCCL_MPI=OFF -DQCCL_UCX=OFF -DQCCL_TESTS=OFF -DQCCL_BENCH=OFF \
  -DQCCL_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j2 --target qccl-fuzz-decode qccl-fuzz-seeds

corpus=$build/fuzz-corpus
mkdir -p "$corpus" "$build/fuzz-artifacts"
"$build/tests/fuzz/qccl-fuzz-seeds" "$corpus"
# -rss_limit_mb bounds a runaway allocation; a crash input lands in fuzz-artifacts/.
runs=()
[ -n "${QCCL_FUZZ_RUNS:-}" ] && runs=(-runs="$QCCL_FUZZ_RUNS")
"$build/tests/fuzz/qccl-fuzz-decode" -max_total_time="$secs" "${runs[@]}" -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$build/fuzz-artifacts/" -print_final_stats=1 "$corpus"
echo "run_fuzz.sh: no crash in ${secs}s"
