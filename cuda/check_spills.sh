#!/usr/bin/env bash
# Register-spill check for the CUDA codec kernels (cuobjdump is not needed).
#
#   cuda/check_spills.sh              compile every cuda/*.cu for sm_75, sm_80, sm_90 and sm_100 with
#                                     the build's device flags plus -Xptxas -v, and check the report
#   cuda/check_spills.sh BUILD.LOG    check an existing build log instead (configure the build with
#                                     -DQCCL_CUDA_PTXAS_VERBOSE=ON so ptxas prints its report)
#
# Exits non-zero when any kernel of any architecture reports non-zero "spill stores" or
# "spill loads", when a compile fails, or when no ptxas report was found at all.
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), ARCHS (default "75 80 90 100").
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
archs="${ARCHS:-75 80 90 100}"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if [[ $# -ge 1 ]]; then
  cp "$1" "$log"
else
  gencode=()
  for a in $archs; do gencode+=(-gencode "arch=compute_${a},code=sm_${a}"); done
  for src in "$here"/*.cu; do
    echo "compiling $(basename "$src") for sm_${archs// /, sm_}" >&2
    # Same device flags as cuda/CMakeLists.txt; -O3 is nvcc's device default.
    if ! "$nvcc" -std=c++17 -O3 -fmad=false --expt-relaxed-constexpr -Xptxas -v "${gencode[@]}" \
      -I"$root/include" -I"$root/src" -I"$root" -c "$src" -o /dev/null >>"$log" 2>&1; then
      cat "$log" >&2
      echo "check_spills: compile of $src failed" >&2
      exit 2
    fi
  done
fi

# ptxas prints "Compiling entry function 'NAME' for 'sm_XX'" and, a few lines later,
# "N bytes stack frame, S bytes spill stores, L bytes spill loads". Pair them up.
awk '
  /Compiling entry function/ {
    fn = $0; sub(/.*entry function \047/, "", fn); sub(/\047.*/, "", fn)
    arch = $0; sub(/.*for \047/, "", arch); sub(/\047.*/, "", arch)
  }
  /spill stores/ {
    n = split($0, w, /[ ,]+/)
    st = -1; ld = -1
    for (i = 2; i <= n; i++) {
      if (w[i] == "spill" && w[i + 1] == "stores") st = w[i - 2] + 0
      if (w[i] == "spill" && w[i + 1] == "loads") ld = w[i - 2] + 0
    }
    checked++
    perArch[arch]++
    if (st != 0 || ld != 0) { bad++; printf("SPILL %s %s: %d bytes spill stores, %d bytes spill loads\n", arch, fn, st, ld) }
  }
  /Used [0-9]+ registers/ {
    r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r)
    if (r + 0 > maxReg[arch]) maxReg[arch] = r + 0
  }
  END {
    for (a in perArch) printf("%s: %d kernel reports, max %d registers\n", a, perArch[a], maxReg[a])
    if (checked == 0) { print "check_spills: no ptxas -v report found"; exit 2 }
    if (bad > 0) { printf("check_spills: %d kernel(s) spill registers\n", bad); exit 1 }
    printf("check_spills: OK, %d kernel reports, zero spill stores and loads\n", checked)
  }
' "$log"
