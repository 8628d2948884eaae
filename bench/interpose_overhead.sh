#!/usr/bin/env bash
# What libqccl_mpi.so costs the MPI_Allreduce calls it does not compress: qccl-mpi-latency, which
# alternates MPI_Allreduce (the interposer, when preloaded) with PMPI_Allreduce (MPI itself) in one
# process, run plain (a control: the two must agree) and preloaded three ways: QCCL_CODEC unset (the
# pure pass-through), QCCL_CODEC=onebit (small calls still pass through; float sums after the
# QCCL_INTERPOSE_CHECK agreement step), and onebit with QCCL_INTERPOSE_CHECK=0.
#   bench/interpose_overhead.sh [BUILD_DIR] [NP] [CALLS]
# NP=1 isolates the CPU cost of the call path (MPI's allreduce on one rank is nearly free); NP=2
# shows it against a real allreduce over shared memory.
set -euo pipefail
build=${1:-build}
np=${2:-2}
calls=${3:-20000}
lat=$build/bench/qccl-mpi-latency
lib=$(cd "$build/bindings/mpi" && pwd)/libqccl_mpi.so
[ -x "$lat" ] && [ -f "$lib" ] || { echo "build $build first (qccl-mpi-latency, libqccl_mpi.so)" >&2; exit 1; }
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np "$np")
echo "# $(date -u +%FT%TZ) np $np $(uptime)"
echo "## plain (MPI_Allreduce is MPI's own)"
"${mpirun[@]}" "$lat" -n "$calls"
echo "## preloaded, QCCL_CODEC unset"
"${mpirun[@]}" -x LD_PRELOAD="$lib" "$lat" -n "$calls"
echo "## preloaded, QCCL_CODEC=onebit"
"${mpirun[@]}" -x LD_PRELOAD="$lib" -x QCCL_CODEC=onebit "$lat" -n "$calls"
echo "## preloaded, QCCL_CODEC=onebit, QCCL_INTERPOSE_CHECK=0"
"${mpirun[@]}" -x LD_PRELOAD="$lib" -x QCCL_CODEC=onebit -x QCCL_INTERPOSE_CHECK=0 "$lat" -n "$calls"
echo "# $(uptime)"
