#!/usr/bin/env bash
# usage: codec-ab.sh OLD_BUILD NEW_BUILD ROUNDS [KNOB_BUILD] -- qccl-bench codec, onebit and
# signscale at 1 MiB (stays in an 8 MiB L3), 4 MiB and 64 MiB, the builds alternating process by
# process. KNOB_BUILD: the build before with prefetch-knobs.diff, run with QCCL_X_PM=1 (the next
# bucket prefetched at every streaming size, without the 1M-element threshold).
old=$1 new=$2 rounds=$3 knob=${4:-}
for r in $(seq 1 "$rounds"); do
  for side in old new knob; do
    b=$old; env=()
    [ $side = new ] && b=$new
    if [ $side = knob ]; then [ -n "$knob" ] || continue; b=$knob; env=(QCCL_X_PM=1); fi
    for c in onebit signscale; do
      for s in 1M 4M 64M; do
        echo "$side $r $s $(env "${env[@]}" "$b/bench/qccl-bench" codec -b $s -n 20 --codec $c | tail -1)"
      done
    done
  done
done
