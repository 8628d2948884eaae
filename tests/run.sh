#!/usr/bin/env bash
# Installs what is missing, builds qccl with its tests and runs them all (CTest).
#   tests/run.sh                 # release build (CUDA kernels too when nvcc is found), all tests
#   tests/run.sh --sanitize      # CPU-only ASan+UBSan build, all tests that do not need CUDA
# Environment: BUILD_DIR (default build or build-asan), JOBS (default: nproc), QCCL_TORCH2=0 leaves
# out the second run of the Python tests under torch 2.x (bindings/python/install_torch2.sh: a
# PyPI download of about 5 GiB, kept in <repo>/.venv-torch2).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "tests/run.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

bash cmake/install-deps.sh
[ -x bindings/python/install_deps.sh ] && bash bindings/python/install_deps.sh
# The Python tests run again under torch 2.x from PyPI (python_torch2_*; Debian's torch is 1.13).
torch2=()
if ((!sanitize)) && [ "${QCCL_TORCH2:-1}" != 0 ]; then
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
else
  build=${BUILD_DIR:-build}
fi

cmake -S . -B "$build" "${args[@]}" ${torch2[@]+"${torch2[@]}"}
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 600
