#!/usr/bin/env bash
# The suite with the hook's new defaults (min_compress_numel 4096) and the new recommended warm-up
# (a fifth of the run with maxmin 4-bit for the 1-bit codecs under SGD momentum), ten paired seeds;
# plain onebit with the old min_compress_numel (1024) beside it; the character-level LM (AdamW,
# three seeds). usage: run.sh [OUT] (default: this folder). Environment: PARTS (default "default
# min1024-plain charlm").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
S=0,1,2,3,4,5,6,7,8,9
T=ts-sgdm,ts-nesterov,digits-sgdm,cnn-reg-sgdm
run() { .venv/bin/python bench/convergence/run.py --powersgd off "$@"; }
for part in ${PARTS:-default min1024-plain charlm}; do
  case $part in
    default) run --tasks $T --seeds $S --variants fp32,onebit,onebit+m,signscale+m --out "$D/default" ;;
    min1024-plain) run --tasks $T --seeds $S --variants fp32,onebit --extra "--min-compress-numel 1024" \
                     --out "$D/min1024-plain" ;;
    charlm) run --tasks charlm-adamw --seeds 0,1,2 --variants fp32,onebit+m,signscale+m --out "$D/charlm" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
