#!/usr/bin/env bash
# A/B: the copy into recv before sra (old: /tmp/ab-old, a worktree of commit c29d9c8 built with
#   cmake -DCMAKE_BUILD_TYPE=Release -DQCCL_CUDA=OFF -DQCCL_TESTS=OFF -DQCCL_EXAMPLES=OFF) against none
# (new: build-release at 571cb39); 4 emulated hosts at 1 Gbit/s (bench/cluster/up 4 1gbit first). Usage: ab.sh OUTDIR
# Later A/Bs reuse it: OLD_BIN (the old qccl-bench), OLD_LIB (a directory holding the old libqccl,
# handed to the ranks as LD_LIBRARY_PATH) and ITERS (timed calls; 7 here) override the defaults.
set -u
cd /work/main
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
out=$1; mkdir -p "$out"
old_bin=${OLD_BIN:-/tmp/ab-old/build/bench/qccl-bench}
old_env=()
[ -n "${OLD_LIB:-}" ] && old_env=(-x "LD_LIBRARY_PATH=$OLD_LIB")
for round in 1 2 3; do
  for v in old new; do
    bin=build-release/bench/qccl-bench env=()
    [ $v = old ] && bin=$old_bin env=("${old_env[@]}")
    for c in onebit "maxmin --bits 4"; do
      n=$(echo $c | tr -d ' -')
      bench/cluster/launch -n 4 "${env[@]}" -- $bin allreduce --codec $c -b 16M -e 64M -f 4 -n "${ITERS:-7}" -w 2 -c 1 \
        --baselines mpi --json > "$out/$n-$v-r$round.jsonl" 2> "$out/$n-$v-r$round.err"
      echo "$n $v round $round rc=$?"
    done
  done
done
