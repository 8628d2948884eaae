#!/usr/bin/env bash
# The ring without a copy of the source, A/B on 4 local ranks (unshaped, MPI): qccl-bench allreduce
# --algo ring out of place, fp16 and fp32 (codec none), 1-64 MiB, every row checked, builds interleaved.
# usage: ab.sh OUT OLD_BUILD NEW_BUILD [ROUNDS]; then python3 bench/data/ab_summary.py OUT
out=$1; old=$2; new=$3; mkdir -p "$out"
for r in $(seq 1 "${4:-5}"); do
  for c in fp16 none; do
    for v in old new; do
      b=$old; [ $v = new ] && b=$new
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 "$b/bench/qccl-bench" allreduce --codec $c \
        --algo ring -b 1M -e 64M -f 4 -n 10 -w 2 -c 1 --json --baselines mpi > "$out/$c-$v-r$r.jsonl" 2> "$out/$c-$v-r$r.err"
      echo "$c $v $r rc=$?"
    done
  done
done
