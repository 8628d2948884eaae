#!/usr/bin/env bash
# sra against allgather for the momentum-aware 1-bit variants, ten paired seeds (the three fast
# tasks), then paired.py for the table. The delta-scheme/ runs need delta-scheme.patch applied to
# the bindings (a tried scheme, not in the library): QCCL_BUILD_DIR pointing at a build with it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
S=0,1,2,3,4,5,6,7,8,9
T=ts-sgdm,ts-nesterov,digits-sgdm
V=fp32,onebit+m,signscale+m
.venv/bin/python bench/convergence/run.py --tasks $T --seeds $S --variants $V --powersgd off --out "$D/allgather"
.venv/bin/python bench/convergence/run.py --tasks $T --seeds $S --variants $V --powersgd off --extra "--algo sra" --out "$D/sra"
python3 "$here/paired.py" "$D"
