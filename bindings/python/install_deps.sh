#!/usr/bin/env bash
# Installs what the qccl Python package, its tests and the training examples need, on a fresh
# Debian bookworm machine (root, Debian apt and PyPI reachable). Idempotent: safe to run again.
#
# Why Debian's torch: PyPI's default torch wheel pulls several GiB of CUDA packages, while
# bookworm's python3-torch (1.13, CPU, gloo) is ~200 MB with everything below. Debian's
# python3-mpi4py is built against the same Open MPI that qccl links, so mpi4py and qccl share one
# MPI library. The packages target /usr/bin/python3 (3.11); a virtual environment layered on it
# with --system-site-packages (QCCL_VENV, default <repo>/.venv) adds the small PyPI-only build
# tools (nanobind, scikit-build-core) without touching the system Python.
#
# Usage: bindings/python/install_deps.sh            # apt packages + venv
#        QCCL_VENV=/path/to/venv bindings/python/install_deps.sh
# Then:  . "$QCCL_VENV/bin/activate" (or use $QCCL_VENV/bin/python directly)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${QCCL_VENV:-$repo/.venv}"

apt_pkgs=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin libucx-dev
  python3 python3-dev python3-venv python3-pip
  python3-numpy python3-torch python3-mpi4py python3-sklearn python3-matplotlib python3-pytest
)

missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update
  $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

if [[ ! -x "$venv/bin/python" ]]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
# Build tools for the in-tree CMake build of the extension (CTest) and for pip's isolated build.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "nanobind>=2.0" "scikit-build-core>=0.10"
"$venv/bin/python" - <<'PY'
import mpi4py, nanobind, numpy, sklearn, matplotlib, torch
print(f"python deps ok: torch {torch.__version__}, numpy {numpy.__version__}, mpi4py {mpi4py.__version__}")
PY
