#!/usr/bin/env bash
# Installs bindings/python into a clean virtual environment (no system site-packages) with pip and
# checks that the installed package imports and reduces. Needs PyPI for the build tools and numpy.
#   venv_install.sh <repo> <scratch dir> [python]
set -euo pipefail
repo="$1"
work="$2"
python="${3:-/usr/bin/python3}"

rm -rf "$work"
mkdir -p "$work"
"$python" -m venv "$work/venv"
venv_py="$work/venv/bin/python"
export CMAKE_BUILD_PARALLEL_LEVEL=2 PIP_DISABLE_PIP_VERSION_CHECK=1
"$venv_py" -m pip install --quiet "$repo/bindings/python"

cd "$work"  # away from the source tree, so only the installed package can be imported
"$venv_py" - <<'PY'
import os, sys
import numpy as np
import qccl

site = os.path.dirname(os.path.dirname(qccl.__file__))
assert site.startswith(sys.prefix), (qccl.__file__, sys.prefix)
files = sorted(os.listdir(os.path.dirname(qccl.__file__)))
assert any(f.startswith("_qccl") for f in files) and "libqccl.so.0" in files, files
[c] = qccl.loopback(1)
x = np.arange(10, dtype=np.float32)
c.allreduce(x, op="avg")
assert (x == np.arange(10)).all()
c.destroy()
try:
    qccl.loopback(1, codec="gzip")
except qccl.Error as e:
    assert e.code == 4
else:
    raise AssertionError("a bad codec must raise")
print("clean venv install ok:", qccl.__file__, files)
PY
