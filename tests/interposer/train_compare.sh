#!/usr/bin/env bash
# The plain-MPI trainer, once as it is and once with libqccl_mpi.so preloaded: the compressed run
# must end at the uncompressed run's loss (within a tolerance), with identical weights on every
# rank, and the interposer's report must show compressed calls with error feedback.
#   train_compare.sh --preload LIBS [--tolerance REL] [--env VAR=VAL]... -- MPIRUN [MPIRUN ARGS] TRAINER [ARGS]
# LIBS is the LD_PRELOAD value for the ranks; the first word after -- must be mpirun.
set -euo pipefail
preload=""
tol=0.05
envs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --preload) preload=$2; shift 2 ;;
    --tolerance) tol=$2; shift 2 ;;
    --env) envs+=(-x "$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "train_compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$preload" ] && [ $# -ge 2 ] || { echo "usage: see the header of $0" >&2; exit 2; }
mpirun=$1
shift

final_loss() { sed -n 's/^# loss [0-9.]* -> \([0-9.]*\) .*/\1/p' <<<"$1"; }

echo "== exact: $mpirun $*"
exact=$("$mpirun" "$@" 2>&1) || { printf '%s\n' "$exact"; echo "train_compare.sh: the exact run failed"; exit 1; }
printf '%s\n' "$exact"
echo "== compressed: LD_PRELOAD=$preload ${envs[*]}"
comp=$("$mpirun" -x LD_PRELOAD="$preload" -x QCCL_INTERPOSE_REPORT=1 "${envs[@]}" "$@" 2>&1) ||
  { printf '%s\n' "$comp"; echo "train_compare.sh: the compressed run failed"; exit 1; }
printf '%s\n' "$comp"

le=$(final_loss "$exact")
lc=$(final_loss "$comp")
[ -n "$le" ] && [ -n "$lc" ] || { echo "train_compare.sh: no final loss line"; exit 1; }
ok=1
grep -q "^# weights identical across ranks" <<<"$comp" || { echo "train_compare.sh: weights differ across ranks"; ok=0; }
# Every rank's report: some calls compressed, some of them with error feedback.
reports=$(grep -c "^qccl-mpi: rank .*compressed [1-9][0-9]* (error feedback [1-9]" <<<"$comp" || true)
ranks=$(grep -c "^qccl-mpi: rank " <<<"$comp" || true)
((reports > 0 && reports == ranks)) || { echo "train_compare.sh: $reports of $ranks ranks report compressed calls with error feedback"; ok=0; }
if awk -v a="$le" -v b="$lc" -v t="$tol" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(d <= t) }'; then
  echo "train_compare.sh: final loss $lc compressed vs $le exact (within $tol)"
else
  echo "train_compare.sh: final loss $lc compressed vs $le exact: more than $tol apart"
  ok=0
fi
((ok)) && echo "train_compare.sh: PASS" && exit 0
exit 1
