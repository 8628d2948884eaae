#!/usr/bin/env bash
# CTest: brings up a 2-host emulated cluster under its own prefix and /24, checks bad input is
# refused, runs a tiny MPI job across the hosts (ranks in distinct namespaces, exact allreduce,
# a send that cannot beat the shaped link), and checks that teardown leaves nothing behind.
# Exit 77 (CTest skip) when not root or when network namespaces are unavailable.
#   netns_smoke.sh PROBE_BINARY
set -euo pipefail
probe=${1:?usage: netns_smoke.sh PROBE_BINARY}
root=$(cd "$(dirname "$0")/../.." && pwd)
cl=$root/bench/cluster
export QCCL_CLUSTER_PREFIX=qct$$ QCCL_CLUSTER_NET=10.199.74
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: not root; the emulated cluster needs network namespaces and tc"
  exit 77
fi
if ! ip netns add "${QCCL_CLUSTER_PREFIX}-try" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here"
  exit 77
fi
ip netns del "${QCCL_CLUSTER_PREFIX}-try"
trap '"$cl/down"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
expect_refused() {
  local out
  if out=$("$@" 2>&1); then fail "accepted: $*"; fi
  grep -q "cluster: " <<<"$out" || fail "no clear message from: $* (got: $out)"
  echo "refused as expected: $* -> $(head -n1 <<<"$out")"
}
expect_refused "$cl/up" 0 1gbit
expect_refused "$cl/up" 2 fast
expect_refused "$cl/up" 2 1gbit soon
if command -v setpriv >/dev/null; then
  # From a copy that uid 65534 can reach: a checkout under a private directory such as /root
  # would otherwise end in "Permission denied" before the script could refuse.
  nobody_cl=$(mktemp -d)
  trap 'rm -rf "$nobody_cl"; "$cl/down"' EXIT
  install -m 755 "$cl/up" "$nobody_cl/up"
  install -m 644 "$cl/common.sh" "$nobody_cl/common.sh"
  chmod 755 "$nobody_cl"
  expect_refused setpriv --reuid=65534 --regid=65534 --clear-groups "$nobody_cl/up" 2 1gbit
  rm -rf "$nobody_cl"
  trap '"$cl/down"' EXIT
fi

# 500 Mbit/s: slow enough that even an idle machine cannot mistake shaping for CPU limits.
"$cl/up" 2 500mbit
"$cl/up" 2 500mbit >/dev/null # re-running must replace the cluster, not fail
expect_refused "$cl/launch" -n 3 "$probe"
out=$("$cl/launch" --timeout 120 "$probe" --bytes 32M --reps 1)
echo "$out"
grep -q "ranks: 2 in 2 distinct network namespaces" <<<"$out" || fail "ranks did not run in two namespaces"
grep -q "^allreduce: ok" <<<"$out" || fail "allreduce across the hosts was wrong"
grep -q "rank 1: netns [0-9]* addr ${QCCL_CLUSTER_NET}.2$" <<<"$out" || fail "rank 1 is not on host 1"
rate=$(sed -n 's/.*median \([0-9.]*\) Gbit\/s.*/\1/p' <<<"$out")
# A machine under load only makes the transfer slower, so only the upper bound is a fair check.
awk -v r="$rate" 'BEGIN { exit !(r > 0 && r <= 0.5 * 1.05) }' || fail "send ran at $rate Gbit/s on a 0.5 Gbit/s link"

"$cl/down"
trap - EXIT
left=$(ip netns list | grep -c "^${QCCL_CLUSTER_PREFIX}-" || true)
[ "$left" -eq 0 ] || fail "$left namespaces left after down"
[ ! -e "/run/${QCCL_CLUSTER_PREFIX}-cluster" ] || fail "state left after down"
echo "PASS"
