#!/usr/bin/env bash
# Runs qccl's GPU checks on a GPU machine from a tree staged by tests/gpu/stage.sh (in .dev/ of the
# repository root, or $QCCL_STAGE): the machine facts, CTest (everything that needs neither mpirun,
# Python nor network namespaces: the CUDA codec and device-path tests run on the GPU there), and
# compute-sanitizer's memcheck, racecheck and synccheck on the CUDA tests, the device mode of
# qccl-bench codec, and (where the machine has an Open MPI of the same ABI, libmpi.so.40) the
# mpirun tests of device buffers, the Python hook's CUDA tests and tests/gpu/ddp_cuda.py (real DDP
# with a CUDA model; the extension is compiled there, against the machine's python3, torch and
# nanobind), and Nsight Compute on chosen kernels. Logs go to ./gpu-out (and
# $OUT/gpu-logs.tgz where OUT is set).
# The steps run in the order given (default: bench ctest python mpi sanitize profile, the order of
# what matters most) inside one time budget, QCCL_GPU_BUDGET_S seconds (default 400): each step's
# commands get what is left, and a step with under 20 s left is skipped and says so.
# Usage: tests/gpu/check.sh [ctest|sanitize|bench|profile|mpi|python]...
set -u
t_start=$(date +%s)
budget=${QCCL_GPU_BUDGET_S:-400}
left() { echo $((budget - ($(date +%s) - t_start))); }
# cap N: N seconds, or what is left of the budget (less 5), whichever is smaller (at least 1).
cap() {
  local l=$(($(left) - 5))
  [ "$l" -lt "$1" ] && { [ "$l" -lt 1 ] && echo 1 || echo "$l"; } || echo "$1"
}
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=${QCCL_STAGE:-$root/.dev}
out=$root/gpu-out  # the logs; also packed into $OUT/gpu-logs.tgz when OUT is set (the device tool)
rm -rf "$out" && mkdir -p "$out"
export LD_LIBRARY_PATH="$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$stage/lib/ucx"
# The staged executables' RPATH and the CTest files name /work/main/build.
if [ ! -e /work/main/build ]; then
  mkdir -p /work/main 2>/dev/null && ln -s "$stage/build" /work/main/build
fi
steps=${*:-bench ctest python mpi sanitize profile}
rc=0

{
  echo "== machine"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  nvidia-smi 2>&1 | sed -n 1,12p
  nvcc --version 2>&1 | tail -1
  nproc; uname -r
  command -v compute-sanitizer mpirun mpiexec ucx_info python3 2>&1
  mpirun --version 2>&1 | head -1
  ldconfig -p | grep -E 'libmpi\.so|libucp\.so' | head -4
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1
} 2>&1 | tee "$out/machine.txt"

# The Python extension for this machine's Python (nanobind from its site-packages), linked against
# the staged libqccl, built in the background while the first steps run.
pybuild=
py=$(command -v python3)
pkg="$out/pypkg/qccl"
ext=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
case " $steps " in *" python "*)
  mkdir -p "$pkg" && cp "$root"/bindings/python/qccl/*.py "$pkg/"
  nb=$("$py" -c 'import nanobind, os; print(os.path.dirname(nanobind.__file__))' 2>/dev/null)
  pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  if [ -n "$nb" ] && [ -f "$pyinc/Python.h" ]; then
    (
      g++ -O1 -std=c++17 -fPIC -fvisibility=hidden -I"$nb/include" -I"$nb/ext/robin_map/include" -I"$pyinc" \
        -c "$nb/src/nb_combined.cpp" -o "$out/nb.o" &
      g++ -O2 -std=c++17 -fPIC -fvisibility=hidden -DQCCL_HAVE_CUDA=1 -DQCCL_HAVE_MPI=1 -DQCCL_HAVE_UCX=1 \
        -I"$nb/include" -I"$nb/ext/robin_map/include" -I"$pyinc" -I"$root/include" \
        -c "$root/bindings/python/src/qccl_ext.cc" -o "$out/ext.o" || exit 1
      wait $! || exit 1
      g++ -shared "$out/ext.o" "$out/nb.o" -L"$stage/build" -l:libqccl.so.0 -Wl,-rpath,"$stage/build" -o "$pkg/_qccl$ext"
    ) >"$out/python-build.log" 2>&1 &
    pybuild=$!
  else
    echo "python: no nanobind or no Python.h for $py: hook tests not run" >"$out/python-build.log"
  fi
  ;;
esac

for s in $steps; do
  if [ "$(left)" -lt 20 ]; then
    echo "== $s: skipped, $(left) s of the ${budget} s budget left" | tee -a "$out/skipped.txt"
    continue
  fi
  echo "== $s ($(left) s left)"
  case $s in
    ctest)
      (cd /work/main/build && timeout "$(cap 150)" ctest -j"$(nproc)" --timeout 120 --output-on-failure \
        -E '^(python_|cluster\.|interposer\.|convergence|transport_mpi_|collective_mpi_|capi_momentum_|capi_mpirun_|capi_bench_)') \
        >"$out/ctest.log" 2>&1 || rc=1
      tail -25 "$out/ctest.log"
      ;;
    sanitize)
      # memcheck on every CUDA test; racecheck and synccheck (shared memory and barriers: the
      # kernels alone) on the codec test, whose kernels are the ones the collectives launch.
      for run in memcheck:tests/cuda/qccl_cuda_codec_test memcheck:tests/collective/qccl_collective_device_test \
        memcheck:tests/collective/qccl_device_context_test racecheck:tests/cuda/qccl_cuda_codec_test \
        synccheck:tests/cuda/qccl_cuda_codec_test; do
        tool=${run%%:*} t=${run#*:}
        {
          echo "== compute-sanitizer --tool $tool $t"
          timeout "$(cap 90)" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
            /work/main/build/$t --gtest_brief=1 >"$out/sanitize-$tool-$(basename "$t").log" 2>&1
          r=$?
          echo "exit $r"; tail -4 "$out/sanitize-$tool-$(basename "$t").log"
        }
      done 2>&1 | tee "$out/sanitize.txt"
      grep -q '^exit [^0]' "$out/sanitize.txt" && rc=1
      ;;
    bench)
      b=/work/main/build/bench/qccl-bench
      for size in 64M 1G; do
        timeout "$(cap 120)" "$b" codec --device -b $size -n 20 -w 3 2>&1 | tee "$out/bench-codec-device-$size.txt"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
      done
      ;;
    profile)
      # Nsight Compute on chosen kernels: QCCL_PROFILE lists kind:row pairs (kind encode or decode,
      # row a qccl-bench codec row), default the encodes that missed at 1 GiB on the H100;
      # QCCL_PROFILE_SIZE the buffer (default 1G). DRAM bytes and throughput, L1/L2 hit rates,
      # occupancy and the warps' stall reasons.
      b=/work/main/build/bench/qccl-bench
      if ! command -v ncu >/dev/null 2>&1; then
        echo "profile: no ncu on this machine"
        continue
      fi
      for item in ${QCCL_PROFILE:-encode:onebit encode:maxmin4 encode:fp32}; do
        kind=${item%%:*} row=${item#*:}
        f="$out/ncu-$kind-$row.txt"
        # The bench's first launch of each kernel is its check against the CPU codec.
        timeout "$(cap 90)" ncu --kernel-name "regex:${kind}" --launch-skip 0 --launch-count 1 \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
          "$b" codec --device -b "${QCCL_PROFILE_SIZE:-1G}" -n 1 -w 0 --codec "$row" >"$f" 2>&1 || rc=1
        grep -E "Duration|DRAM Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Stall|Warp Cycles Per Issued" "$f" |
          sed "s/^/$kind $row: /" | head -14
      done
      ;;
    mpi)
      # The machine's own Open MPI (mpirun and its components must match libmpi), and its UCX where
      # it has one; the staged copies only for what the machine lacks.
      if ! ldconfig -p | grep -q 'libmpi\.so\.40 ' || ! mpirun --version 2>&1 | grep -q 'Open MPI'; then
        echo "mpi: this machine has no Open MPI with libmpi.so.40: mpirun tests not run"
        continue
      fi
      lib2="$stage/lib-machine"
      rm -rf "$lib2" && mkdir -p "$lib2"
      for l in "$stage"/lib/*.so*; do
        ldconfig -p | grep -q " $(basename "$l") " || ln -s "$l" "$lib2/"
      done
      [ -e /usr/bin/mpiexec ] || ln -s "$(command -v mpirun)" /usr/bin/mpiexec
      ucxdir=$UCX_MODULE_DIR
      ldconfig -p | grep -q ' libucp\.so\.0 ' && ucxdir=
      (cd /work/main/build && env LD_LIBRARY_PATH="$lib2" UCX_MODULE_DIR="$ucxdir" OMPI_MCA_plm_rsh_agent=false \
        timeout "$(cap 180)" ctest --timeout 120 --output-on-failure \
        -R '^(capi_mpirun_(mpi|ucx)_device_np[24]|capi_mpirun_(mpi|ucx)_np[24]|collective_mpi_np[24]|transport_mpi_np2)$') \
        >"$out/ctest-mpi.log" 2>&1 || rc=1
      tail -25 "$out/ctest-mpi.log"
      ;;
    python)
      # The hook tests (their CUDA cases run here) and tests/gpu/ddp_cuda.py (real DDP, a CUDA
      # model, two processes sharing the GPU), with the extension built in the background above.
      wait "$pybuild" 2>/dev/null
      if [ ! -f "$pkg/_qccl$ext" ]; then
        echo "python: the extension did not build"; tail -20 "$out/python-build.log"; rc=1
        continue
      fi
      (cd "$root" && PYTHONPATH="$out/pypkg" timeout "$(cap 200)" "$py" -m pytest -q -p no:cacheprovider \
        tests/python/test_hook_lifetime.py tests/python/test_single.py) >"$out/python.log" 2>&1 || rc=1
      tail -8 "$out/python.log"
      (cd "$root" && PYTHONPATH="$out/pypkg" PYTHONUNBUFFERED=1 timeout "$(cap 150)" "$py" tests/python/launch.py \
        --np 2 --timeout 140 -- "$py" tests/gpu/ddp_cuda.py) >"$out/ddp-cuda.log" 2>&1 || { rc=1; echo "ddp_cuda: FAILED"; }
      tail -8 "$out/ddp-cuda.log"
      ;;
  esac
done
echo "check.sh: exit $rc" | tee "$out/exit.txt"
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-logs.tgz" -C "$root" gpu-out
exit $rc
