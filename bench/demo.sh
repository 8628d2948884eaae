#!/usr/bin/env bash
# The main job: installs what is missing, builds qccl, and runs compressed allreduce on local ranks
# against the best uncompressed path timed in the same run (MPI_Allreduce, MPI_Iallreduce, qccl's
# fp32 ring, gloo) and qccl's fp16 ring; x_best is the speedup over the best of them.
#   bench/demo.sh            # 4 local ranks, 1 MiB .. 64 MiB: onebit, maxmin 4-bit, fp16 (compressed as asked,
#                            # QCCL_LOCAL_COMPRESS=1), then what auto does here with onebit asked and with nothing
#                            # to compress (both: the exact shared-memory sum)
# Environment: NP (ranks, default 4), BUILD_DIR (default build-release), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."

bash cmake/install-deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
build=${BUILD_DIR:-build-release}
np=${NP:-4}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQCCL_TESTS=OFF -DQCCL_CUDA=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target qccl-bench

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {
  echo
  echo "== mpirun -np $np qccl-bench allreduce $* =="
  mpirun -np "$np" --oversubscribe --bind-to none "$build/bench/qccl-bench" allreduce "$@"
}
# On one host auto would sum these exactly in shared memory; QCCL_LOCAL_COMPRESS=1 compresses as asked.
export QCCL_LOCAL_COMPRESS=1
run --codec onebit -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
run --codec maxmin --bits 4 -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
run --codec fp16 -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
export QCCL_LOCAL_COMPRESS=0
run --codec onebit --algo auto -b 1M -e 64M -f 4 -n 10 -w 2 -c 1   # auto's choice here: ran = shm, exact
run --algo auto -b 1M -e 64M -f 4 -n 10 -w 2 -c 1                  # nothing to compress: ran = shm
echo
echo "Local ranks share memory, so compression does not pay off here, and auto sums host buffers"
echo "exactly in shared memory whatever the codec (ran = shm); see bench/RESULTS.md and"
echo "bench/run-cluster for the bandwidth-limited emulated cluster."
