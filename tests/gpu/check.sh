#!/usr/bin/env bash
# Runs qccl's GPU checks on a GPU machine from a tree staged by tests/gpu/stage.sh (in .dev/ of the
# repository root, or $QCCL_STAGE): the machine facts, CTest (everything that needs neither mpirun,
# Python nor network namespaces: the CUDA codec and device-path tests run on the GPU there), and
# compute-sanitizer's memcheck, racecheck and synccheck on the CUDA tests, the device mode of
# qccl-bench codec, and (where the machine has an Open MPI of the same ABI, libmpi.so.40) the
# mpirun tests of device buffers, and the Python hook's CUDA tests (the extension is compiled there,
# against the machine's python3, torch and nanobind). Logs go to ./gpu-out (and
# $OUT/gpu-logs.tgz where OUT is set).
# Usage: tests/gpu/check.sh [ctest|sanitize|bench|profile|mpi|python]...  (default: all six)
set -u
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
steps=${*:-ctest sanitize bench profile mpi python}
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

for s in $steps; do
  case $s in
    ctest)
      (cd /work/main/build && timeout 900 ctest -j"$(nproc)" --timeout 300 --output-on-failure \
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
          timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
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
        "$b" codec --device -b $size -n 20 -w 3 2>&1 | tee "$out/bench-codec-device-$size.txt"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
      done
      ;;
    profile)
      # Nsight Compute on the encode kernels at 1 GiB (the rows that missed 0.8 there): DRAM bytes
      # and throughput against the kernel's own minimum (12n + wire), L1/L2 hit rates.
      b=/work/main/build/bench/qccl-bench
      if ! command -v ncu >/dev/null 2>&1; then
        echo "profile: no ncu on this machine"
        continue
      fi
      for row in onebit maxmin4 fp32; do
        timeout 240 ncu --kernel-name regex:encode --launch-skip 0 --launch-count 1 \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
          "$b" codec --device -b 1G -n 1 -w 0 --codec "$row" >"$out/ncu-encode-$row.txt" 2>&1 || rc=1
        grep -E "Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|dram__bytes" \
          "$out/ncu-encode-$row.txt" | sed "s/^/$row: /" | head -12
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
        timeout 600 ctest --timeout 240 --output-on-failure \
        -R '^(capi_mpirun_(mpi|ucx)_device_np[24]|capi_mpirun_(mpi|ucx)_np[24]|collective_mpi_np[24]|transport_mpi_np2)$') \
        >"$out/ctest-mpi.log" 2>&1 || rc=1
      tail -25 "$out/ctest-mpi.log"
      ;;
    python)
      # The extension for this machine's Python (nanobind from its site-packages), linked against
      # the staged libqccl; then the hook tests, whose CUDA cases run here.
      py=$(command -v python3)
      pkg="$out/pypkg/qccl"
      mkdir -p "$pkg" && cp "$root"/bindings/python/qccl/*.py "$pkg/"
      nb=$("$py" -c 'import nanobind, os; print(os.path.dirname(nanobind.__file__))' 2>/dev/null)
      pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
      ext=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
      if [ -z "$nb" ] || [ ! -f "$pyinc/Python.h" ]; then
        echo "python: no nanobind or no Python.h for $py: hook tests not run"
        continue
      fi
      if ! g++ -O2 -std=c++17 -fPIC -shared -fvisibility=hidden -DQCCL_HAVE_CUDA=1 -DQCCL_HAVE_MPI=1 -DQCCL_HAVE_UCX=1 -I"$nb/include" \
        -I"$nb/ext/robin_map/include" -I"$pyinc" -I"$root/include" "$root/bindings/python/src/qccl_ext.cc" \
        "$nb/src/nb_combined.cpp" -L"$stage/build" -l:libqccl.so.0 -Wl,-rpath,"$stage/build" \
        -o "$pkg/_qccl$ext" >"$out/python-build.log" 2>&1; then
        echo "python: the extension did not build"; tail -20 "$out/python-build.log"; rc=1
        continue
      fi
      (cd "$root" && PYTHONPATH="$out/pypkg" timeout 300 "$py" -m pytest -q -p no:cacheprovider \
        tests/python/test_hook_lifetime.py tests/python/test_single.py) >"$out/python.log" 2>&1 || rc=1
      tail -15 "$out/python.log"
      ;;
  esac
done
echo "check.sh: exit $rc" | tee "$out/exit.txt"
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-logs.tgz" -C "$root" gpu-out
exit $rc
