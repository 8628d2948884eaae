#!/usr/bin/env bash
# usage: codec-ab.sh OLD_BUILD NEW_BUILD ROUNDS -- qccl-bench codec, onebit and signscale, 64 KiB (in
# cache) and 64 MiB (from memory), the two builds alternating process by process.
old=$1 new=$2 rounds=$3
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    b=$old; [ $side = new ] && b=$new
    for c in onebit signscale; do
      echo "$side $r 64K $("$b/bench/qccl-bench" codec -b 64K -n 5000 --codec $c | tail -1)"
      echo "$side $r 64M $("$b/bench/qccl-bench" codec -b 64M -n 10 --codec $c | tail -1)"
    done
  done
done
