#!/usr/bin/env bash
# Stages a CUDA build of qccl for a GPU machine that has the CUDA driver but none of qccl's other
# dependencies and no package registry: the test and bench executables (stripped), libqccl, the
# CTest files (they name /work/main/build; check.sh links that path to the staged tree), and the
# shared libraries the executables need beyond glibc/libstdc++ (Open MPI's and UCX's, with UCX's
# transport modules, and the CUDA runtime). Usage: tests/gpu/stage.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out dir}
rm -rf "$out"
mkdir -p "$out/build" "$out/lib"
out=$(cd "$out" && pwd)
grep -q '^QCCL_CUDA:BOOL=ON' "$build/CMakeCache.txt" || { echo "stage.sh: $build is not a CUDA build" >&2; exit 1; }

# Executables and the library, keeping their place in the build tree (their RPATH and the CTest
# files name it).
cd "$build"
find . -type f -perm -u+x \( -path './tests/*' -o -path './bench/*' -o -path './examples/*' \) \
  ! -path '*/CMakeFiles/*' ! -path '*/venv*' ! -name '*.so' ! -name '*.py' ! -name '*.sh' ! -name 'fortran_*' |
  while read -r f; do
    file -b "$f" | grep -q ELF || continue
    mkdir -p "$out/build/$(dirname "$f")"
    strip --strip-debug -o "$out/build/$f" "$f"
  done
for f in libqccl.so*; do cp -a "$f" "$out/build/"; done
[ -e bindings/mpi/libqccl_mpi.so ] && mkdir -p "$out/build/bindings/mpi" && cp -a bindings/mpi/libqccl_mpi.so* "$out/build/bindings/mpi/"
find . \( -name 'CTestTestfile.cmake' -o -name '*_include.cmake' -o -name '*_tests.cmake' \) ! -path '*/CMakeFiles/*' |
  while read -r f; do mkdir -p "$out/build/$(dirname "$f")" && cp "$f" "$out/build/$f"; done

# Shared libraries beyond the C/C++ runtime.
libs=$(ldd "$build"/libqccl.so "$build"/tests/*/* "$build"/bench/qccl-bench 2>/dev/null | awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libmvec|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libgfortran|libquadmath|libqccl|libmpi_mpifh|libmpi_usempif08|ld-linux[^/]*)\.so' || true)
for l in $libs; do cp -L "$l" "$out/lib/"; done
ucx=$(dirname "$(ldd "$build"/libqccl.so | awk '/libucs.so/ {print $3}')")/ucx
[ -d "$ucx" ] && mkdir -p "$out/lib/ucx" && cp -a "$ucx"/*.so* "$out/lib/ucx/"
du -sh "$out"
