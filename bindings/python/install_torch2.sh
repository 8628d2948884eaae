#!/usr/bin/env bash
# Makes a second Python environment with torch 2.x from PyPI, in which the Python tests run a
# second time (CTest's python_torch2_* tests; tests/run.sh does this by default). qccl's own
# environment (install_deps.sh) uses Debian's torch 1.13; users mostly have torch 2.x, whose DDP
# rebuilds buckets and registers backends differently, so both are tested.
#
# The environment is layered on /usr/bin/python3 with --system-site-packages, like install_deps.sh's,
# so it has Debian's numpy, mpi4py (built against the Open MPI qccl links), scikit-learn, pytest and
# matplotlib, and the extension CTest builds for that interpreter loads in it; its own torch from
# PyPI comes first on sys.path. PyPI's Linux torch wheel brings its CUDA packages (about 5 GiB; they
# are not needed on the CPU). Idempotent: an environment that already has the version is kept.
#
# Usage: bindings/python/install_torch2.sh [VENV]   # the interpreter's path on stdout, the rest on stderr
# Environment: QCCL_TORCH2_VERSION (default 2.15.0), QCCL_TORCH2_VENV (default <repo>/.venv-torch2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-${QCCL_TORCH2_VENV:-$repo/.venv-torch2}}"
version="${QCCL_TORCH2_VERSION:-2.15.0}"
py="$venv/bin/python"

have() {
  [[ -x "$py" ]] && "$py" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null
}

if ! have; then
  if [[ -x "$py" ]] && [[ "$(readlink -f "$py")" != "$(readlink -f /usr/bin/python3)" ]]; then
    rm -rf "$venv"  # made from another interpreter: the extension would not load in it
  fi
  [[ -x "$py" ]] || /usr/bin/python3 -m venv --system-site-packages "$venv" >&2
  # torch's own requirements (typing-extensions, sympy, ...) are newer than Debian's: pip puts them
  # in the environment, in front of the system's.
  echo "install_torch2: torch==$version from PyPI into $venv" >&2
  "$py" -m pip install --quiet --disable-pip-version-check --progress-bar off "torch==$version" >&2
fi

"$py" - >&2 <<PY
import mpi4py, numpy, pytest, sklearn, torch
import torch.distributed as dist
assert torch.__version__.split("+")[0] == "$version", torch.__version__
assert dist.is_available() and dist.is_gloo_available(), "torch without gloo"
print(f"torch2 env ok: torch {torch.__version__}, numpy {numpy.__version__}, mpi4py {mpi4py.__version__}")
PY
echo "$py"
