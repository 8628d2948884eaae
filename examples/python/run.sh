#!/usr/bin/env bash
# Trains the digits MLP on 4 local ranks with fp32, fp16, qccl onebit and qccl maxmin 4-bit.
#   examples/python/run.sh [train_digits.py options, e.g. --epochs 20]
# Uses the package built in build/ (or $QCCL_BUILD_DIR) when it is there, else an installed qccl;
# the Python is <repo>/.venv (bindings/python/install_deps.sh) unless $PYTHON says otherwise.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
build="${QCCL_BUILD_DIR:-$repo/build}"
if [[ -d "$build/bindings/python/qccl" ]]; then
  export PYTHONPATH="$build/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
fi
np="${NP:-4}"
exec mpirun --allow-run-as-root --oversubscribe -np "$np" --bind-to none "$python" "$here/train_digits.py" "$@"
