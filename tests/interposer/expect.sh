#!/usr/bin/env bash
# Runs a command and checks how it ended and what it printed (stdout and stderr together).
#   expect.sh [--fail] [--grep REGEX]... [--no-grep REGEX]... -- COMMAND [ARGS...]
#     --fail           the command must exit non-zero (default: zero)
#     --grep REGEX     the output must match the extended regular expression (repeatable)
#     --no-grep REGEX  the output must not match it (repeatable)
set -uo pipefail
want_fail=0
greps=()
nogreps=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fail) want_fail=1; shift ;;
    --grep) greps+=("$2"); shift 2 ;;
    --no-grep) nogreps+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "expect.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
ok=1
if ((want_fail)) && ((rc == 0)); then echo "expect.sh: the command succeeded, a failure was expected"; ok=0; fi
if ((!want_fail)) && ((rc != 0)); then echo "expect.sh: the command failed (exit $rc)"; ok=0; fi
for re in "${greps[@]+"${greps[@]}"}"; do
  grep -Eq -- "$re" <<<"$out" || { echo "expect.sh: no line matches: $re"; ok=0; }
done
for re in "${nogreps[@]+"${nogreps[@]}"}"; do
  grep -Eq -- "$re" <<<"$out" && { echo "expect.sh: a line matches: $re"; ok=0; }
done
((ok)) && echo "expect.sh: PASS" && exit 0
exit 1
