#!/usr/bin/env bash
# What libqccl_mpi.so costs MPI_Allreduce calls it does not compress: qccl-mpi-latency on local
# ranks, plain and with the library preloaded (QCCL_CODEC unset: the pure pass-through; onebit:
# small calls still pass through, float sums after the QCCL_INTERPOSE_CHECK agreement step; onebit
# with QCCL_INTERPOSE_CHECK=0). The configurations alternate for ROUNDS rounds so that drifting load
# on a shared machine falls on all of them; the table has each configuration's median over rounds.
#   bench/interpose_overhead.sh [BUILD_DIR] [NP] [ROUNDS]
set -euo pipefail
build=${1:-build}
np=${2:-2}
rounds=${3:-3}
lat=$build/bench/qccl-mpi-latency
lib=$(cd "$build/bindings/mpi" && pwd)/libqccl_mpi.so
[ -x "$lat" ] && [ -f "$lib" ] || { echo "build $build first (qccl-mpi-latency, libqccl_mpi.so)" >&2; exit 1; }
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np")
configs=("plain" "preloaded, QCCL_CODEC unset" "preloaded, QCCL_CODEC=onebit" "preloaded, onebit, QCCL_INTERPOSE_CHECK=0")
run() {
  case $1 in
    0) "${mpirun[@]}" "$lat" ;;
    1) "${mpirun[@]}" -x LD_PRELOAD="$lib" "$lat" ;;
    2) "${mpirun[@]}" -x LD_PRELOAD="$lib" -x QCCL_CODEC=onebit "$lat" ;;
    3) "${mpirun[@]}" -x LD_PRELOAD="$lib" -x QCCL_CODEC=onebit -x QCCL_INTERPOSE_CHECK=0 "$lat" ;;
  esac
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u +%FT%TZ) $(uptime)"
for ((r = 0; r < rounds; r++)); do
  for c in 0 1 2 3; do run $c | grep -v '^#' >"$tmp/$c.$r"; done
done
for c in 0 1 2 3; do
  echo "## ${configs[$c]}: median over $rounds rounds of the per-round median, microseconds per call"
  cut -c1-20 "$tmp/$c.0" | while IFS= read -r name; do
    vals=$(cat "$tmp/$c".* | grep -F -- "$name" | awk '{ print $(NF - 1) }' | sort -g)
    n=$(wc -l <<<"$vals")
    printf '%s %8s\n' "$name" "$(sed -n "$(((n + 1) / 2))p" <<<"$vals")"
  done
done
echo "# $(uptime)"
