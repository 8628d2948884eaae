#!/usr/bin/env bash
# Do the ranks' places on the 2 cores make onebit's slow runs? 4 emulated hosts at RATE, onebit 16
# and 64 MiB, interleaved runs of three placements: the scheduler's (mpirun --bind-to none, as
# bench/cluster/launch runs), rank r pinned to core r % 2 (ranks 0+2 and 1+3 share a core) and to
# core r / 2 (0+1 and 2+3). usage: [MODES="free mod2"] pin-ab.sh OUTDIR [RUNS] [RATE]
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=$1; runs=${2:-5}; rate=${3:-1gbit}; mkdir -p "$out"
bench/cluster/up 4 "$rate" >/dev/null 2>&1 || { echo "cluster up failed"; exit 1; }
for r in $(seq 1 "$runs"); do
  for mode in ${MODES:-free mod2 div2}; do
    case $mode in
      free) pre=() ;;
      mod2) pre=(sh -c 'exec taskset -c $((OMPI_COMM_WORLD_RANK % 2)) "$0" "$@"') ;;
      div2) pre=(sh -c 'exec taskset -c $((OMPI_COMM_WORLD_RANK / 2)) "$0" "$@"') ;;
    esac
    timeout 600 bench/cluster/launch -n 4 -- "${pre[@]}" build-release/bench/qccl-bench allreduce --codec onebit \
      -b 16M -e 64M -f 4 -n 10 -w 2 -c 1 --json --baselines mpi > "$out/$mode-r$r.jsonl" 2> "$out/$mode-r$r.err"
    echo "$mode run $r rc=$?"
  done
done
bench/cluster/down >/dev/null 2>&1
