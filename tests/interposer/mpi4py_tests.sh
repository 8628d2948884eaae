#!/usr/bin/env bash
# mpi4py's own test suite for collectives (and the parts of MPI they lean on), run with
# libqccl_mpi.so preloaded and QCCL_CODEC=onebit. Debian's python3-mpi4py ships no tests, so they
# come from the source distribution of the installed version on PyPI (fetched once into CACHE).
#   mpi4py_tests.sh --preload LIBS [--np N] [--python PY] [--cache DIR]
# Exits 77 (CTest's SKIP) when mpi4py cannot be imported or its sdist cannot be fetched.
set -euo pipefail
preload=""
np=3
py=/usr/bin/python3
cache=${TMPDIR:-/tmp}/qccl-mpi4py
while [ $# -gt 0 ]; do
  case "$1" in
    --preload) preload=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    *) echo "mpi4py_tests.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$preload" ] || { echo "mpi4py_tests.sh: --preload is required" >&2; exit 2; }

ver=$("$py" -c 'import mpi4py; print(mpi4py.__version__)' 2>/dev/null) ||
  { echo "mpi4py_tests.sh: SKIP: $py cannot import mpi4py (apt-get install python3-mpi4py)"; exit 77; }
src="$cache/mpi4py-$ver"
if [ ! -f "$src/test/runtests.py" ]; then
  mkdir -p "$cache"
  "$py" -m pip download --quiet --no-deps --no-binary :all: --dest "$cache" "mpi4py==$ver" ||
    { echo "mpi4py_tests.sh: SKIP: cannot fetch the mpi4py $ver sdist from PyPI"; exit 77; }
  tar -xzf "$cache/mpi4py-$ver.tar.gz" -C "$cache"
fi

# The collective tests, and the neighbouring ones whose objects the interposer touches
# (communicators it attaches attributes to, datatypes it inspects, error handlers it calls).
tests=(test_cco_buf test_cco_vec test_cco_obj test_cco_obj_inter test_cco_nb_buf test_cco_nb_vec
       test_cco_ngh_buf test_cco_ngh_obj test_comm test_comm_inter test_attributes test_datatype
       test_op test_errhandler test_pack test_threads)
inc=()
for t in "${tests[@]}"; do inc+=(-i "$t"); done
echo "mpi4py $ver tests (from $src/test): ${tests[*]}"
cd "$src/test"
out=$(mpirun --allow-run-as-root --oversubscribe -np "$np" \
  -x LD_PRELOAD="$preload" -x QCCL_CODEC=onebit -x QCCL_INTERPOSE_REPORT=1 -x PYTHONDONTWRITEBYTECODE=1 \
  "$py" runtests.py --no-builddir -v "${inc[@]}" 2>&1) || { printf '%s\n' "$out"; echo "mpi4py_tests.sh: FAIL"; exit 1; }
# unittest writes "name ... " and "ok" apart, so a rank's report can land inside a line.
printf '%s\n' "$out" | grep -E "^(Ran |OK|FAILED)|ERROR|FAIL:" || true
grep -o "qccl-mpi: rank .*" <<<"$out" || true
ranks=$(grep -o "qccl-mpi: rank [0-9]*/" <<<"$out" | sort -u | wc -l)
oks=$(grep -c "^OK" <<<"$out" || true)
[ "$ranks" -eq "$np" ] || { printf '%s\n' "$out"; echo "mpi4py_tests.sh: the interposer reported on $ranks of $np ranks"; exit 1; }
[ "$oks" -eq "$np" ] || { printf '%s\n' "$out"; echo "mpi4py_tests.sh: $oks of $np ranks ended OK"; exit 1; }
echo "mpi4py_tests.sh: PASS"
