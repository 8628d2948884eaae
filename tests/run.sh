#!/usr/bin/env bash
# Installs what is missing, builds qccl with its tests and runs them all (CTest).
#   tests/run.sh                 # release build (CUDA kernels too when nvcc is found), all tests
#   tests/run.sh --sanitize      # CPU-only ASan+UBSan build, all tests that do not need CUDA
#   tests/run.sh --tsan          # CPU-only ThreadSanitizer build: the tests where threads or ranks
#                                #   run concurrently (not the single-threaded codec matrices, the
#                                #   benchmark checks, the cluster and the interposer's training
#                                #   runs, which ASan covers; not Python)
# Environment: BUILD_DIR (default build, build-asan or build-tsan), JOBS (default: nproc),
# QCCL_TORCH2=0 leaves out the second run of the Python tests under torch 2.x
# (bindings/python/install_torch2.sh: a PyPI download of about 5 GiB, kept in <repo>/.venv-torch2).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
tsan=0
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    --tsan) tsan=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "tests/run.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

if ((sanitize && tsan)); then echo "tests/run.sh: --sanitize and --tsan are separate builds" >&2; exit 2; fi
bash cmake/install-deps.sh
[ -x bindings/python/install_deps.sh ] && bash bindings/python/install_deps.sh
# The Python tests run again under torch 2.x from PyPI (python_torch2_*; Debian's torch is 1.13).
torch2=()
if ((!sanitize && !tsan)) && [ "${QCCL_TORCH2:-1}" != 0 ]; then
  py2=$(bash bindings/python/install_torch2.sh)
  torch2=(-DQCCL_TORCH2_PYTHON="$py2")
fi

export PATH="/usr/local/cuda/bin:$PATH"
jobs=${JOBS:-$(nproc)}
args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQCCL_WERROR=ON)
if ((sanitize)); then
  build=${BUILD_DIR:-build-asan}
  args+=(-DQCCL_SANITIZE=ON -DQCCL_CUDA=OFF)
  # Open MPI and UCX keep some allocations until exit; leaks inside them are not ours.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
elif ((tsan)); then
  build=${BUILD_DIR:-build-tsan}
  args+=(-DQCCL_TSAN=ON -DQCCL_CUDA=OFF)
  # Any report fails its test (exit code 66); tests/tsan.supp suppresses only Open MPI's and gloo's.
  export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$PWD/tests/tsan.supp:second_deadlock_stack=1:exitcode=66}
  # UCX's memory hooks (libucm) patch madvise/mmap under the TSan runtime and crash new threads.
  export UCX_MEM_EVENTS=no
else
  build=${BUILD_DIR:-build}
fi

cmake -S . -B "$build" "${args[@]}" ${torch2[@]+"${torch2[@]}"}
cmake --build "$build" -j "$jobs"
cd "$build"
skip=()
if ((tsan)); then
  skip=(-E '^(All/(IsaEquivalence|CodecRoundTrip|CodecEdge|WireValidation)|CudaEmulated|capi_bench_|cluster|interposer[.]train_)')
fi
ctest --output-on-failure -j "$jobs" --timeout 600 ${skip[@]+"${skip[@]}"}
