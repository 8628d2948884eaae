#!/usr/bin/env bash
# The plain-MPI trainer (examples/cpp/train_mlp_mpi.cc) on the emulated cluster, as it is and with
# libqccl_mpi.so preloaded: MPI_Allreduce time per step (after a barrier, slowest rank) and the
# final loss. The two alternate for ROUNDS rounds, so that load drifting on a shared machine falls
# on both. Needs a cluster that is up (bench/cluster/up 4 1gbit).
#   bench/interpose_cluster.sh [-b BUILD_DIR] [-r ROUNDS] [-c CODEC] [-- TRAINER ARGS]
# Default trainer arguments: a 16 MiB gradient (--hidden 55924), 100 steps of batch 16, SGD lr 0.001.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=build
rounds=3
codec=onebit
while [ $# -gt 0 ]; do
  case "$1" in
    -b) build=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -c) codec=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "interpose_cluster.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
args=("$@")
((${#args[@]})) || args=(--hidden 55924 --batch 16 --steps 100 --lr 0.001 --momentum 0 --print-every 25)
trainer=$(cd "$build/examples/cpp" && pwd)/train-mlp-mpi
lib=$(cd "$build/bindings/mpi" && pwd)/libqccl_mpi.so
[ -x "$trainer" ] && [ -f "$lib" ] || { echo "build $build first (train-mlp-mpi, libqccl_mpi.so)" >&2; exit 1; }

row() {  # label, output of one run
  local line
  line=$(grep '^# loss' <<<"$2") || { printf '%s\n' "$2"; echo "interpose_cluster.sh: $1 run failed" >&2; exit 1; }
  grep -q '^# weights identical' <<<"$2" || { echo "interpose_cluster.sh: $1: weights differ across ranks" >&2; exit 1; }
  sed -E "s/^# loss ([0-9.]+) -> ([0-9.]+) .*test accuracy ([0-9.]+)%, MPI_Allreduce ([0-9.]+) ms.*median ([0-9.]+) ms.*/$1 \2 \3 \4 \5/" <<<"$line"
}

echo "# $(date -u +%FT%TZ) $(uptime)"
echo "# train-mlp-mpi ${args[*]} --sync-timing; codec $codec"
echo "# run final_loss test_accuracy_% allreduce_ms_per_step_mean allreduce_ms_per_step_median"
for ((r = 1; r <= rounds; r++)); do
  out=$("$here/cluster/launch" "$trainer" "${args[@]}" --sync-timing 2>&1)
  row "mpi-$r" "$out"
  out=$("$here/cluster/launch" -x LD_PRELOAD="$lib" -x QCCL_CODEC="$codec" -x QCCL_INTERPOSE_REPORT=1 \
    "$trainer" "${args[@]}" --sync-timing 2>&1)
  row "$codec-$r" "$out"
  grep -o 'qccl-mpi: rank 0/.*' <<<"$out" | sed 's/^/# /'
done
echo "# $(uptime)"
