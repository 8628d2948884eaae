#!/usr/bin/env bash
# The suite with the hook's small quantized calls over allgather (qccl.torch.small_call_numel): ten
# paired seeds of the four SGD tasks' momentum-aware 1-bit rows, the four tasks' full matrix on the
# suite's seeds 0-2, the character LM's matrix on seeds 0-2 (1-bit rows, then the rest), and the time to
# target on the emulated cluster. usage: run.sh [OUT] (default: this folder). Environment: PARTS
# (default "default full-matrix charlm time-to-target charlm-multibit").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
D=${1:-$here}
export QCCL_BUILD_DIR=${QCCL_BUILD_DIR:-$PWD/build-dev}
T=cnn-reg-sgdm,digits-sgdm,ts-sgdm,ts-nesterov
run() { .venv/bin/python bench/convergence/run.py "$@"; }
for part in ${PARTS:-default full-matrix charlm time-to-target charlm-multibit}; do
  case $part in
    default) run --powersgd off --tasks $T --seeds 0,1,2,3,4,5,6,7,8,9 --variants fp32,onebit+m,signscale+m --out "$D/default" ;;
    full-matrix) run --tasks $T --seeds 0,1,2 --out "$D/full-matrix" ;;
    charlm) run --powersgd off --tasks charlm-adamw --seeds 0,1,2 --variants fp32,onebit,signscale,onebit+m,signscale+m \
      --out "$D/charlm" ;;
    time-to-target) QCCL_CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-q13} QCCL_CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.113} \
      bench/convergence/time-to-target --build "$QCCL_BUILD_DIR" \
      --variants fp32,onebit+m,signscale+m,onebit --out "$D/time-to-target" ;;
    charlm-multibit) run --tasks charlm-adamw --seeds 0,1,2 \
      --variants fp32,fp16,maxmin2,maxmin4,maxmin8,dyn8,maxmin2+m,maxmin4+m,maxmin8+m,dyn8+m --out "$D/charlm-multibit" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
