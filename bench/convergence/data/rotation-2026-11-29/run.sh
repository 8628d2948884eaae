#!/usr/bin/env bash
# The suite's momentum-aware 1-bit rows with the hook's block rotation (HookState(rotation="auto"),
# the new default), ten paired seeds (the character-level LM three), and the CNN with the rotation
# forced on and off. usage: run.sh [OUT] (default: this folder). Environment: PARTS (default
# "default charlm cnn-on cnn-off").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
S=0,1,2,3,4,5,6,7,8,9
V=fp32,onebit+m,signscale+m
run() { .venv/bin/python bench/convergence/run.py --powersgd off "$@"; }
for part in ${PARTS:-default charlm cnn-on cnn-off}; do
  case $part in
    default) run --tasks ts-sgdm,ts-nesterov,digits-sgdm,cnn-reg-sgdm --seeds $S --variants $V --out "$D/default" ;;
    charlm) run --tasks charlm-adamw --seeds 0,1,2 --variants $V --out "$D/charlm" ;;
    cnn-on) run --tasks cnn-reg-sgdm --seeds $S --variants $V --extra "--rotation 512" --out "$D/cnn-on" ;;
    cnn-off) run --tasks cnn-reg-sgdm --seeds $S --variants $V --extra "--rotation 0" --out "$D/cnn-off" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
