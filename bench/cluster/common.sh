# Shared settings of the emulated-cluster scripts; sourced, never run.
#
# Everything lives in network namespaces this file names, so the machine's own interfaces, routes
# and /etc/hosts are never touched:
#   <prefix>-br    holds the bridge br0 (address <net>.254) and is where mpirun runs;
#   <prefix>-hI    host I: interface eth0 with address <net>.(I+1), a veth into br0.
# Environment overrides, for running two clusters side by side (the CTest uses its own):
#   QCCL_CLUSTER_PREFIX  namespace prefix (default qccl)
#   QCCL_CLUSTER_NET     first three octets of the private /24 (default 10.199.73)

CLUSTER_PREFIX=${QCCL_CLUSTER_PREFIX:-qccl}
CLUSTER_NET=${QCCL_CLUSTER_NET:-10.199.73}
CLUSTER_BR_NS="${CLUSTER_PREFIX}-br"
CLUSTER_STATE="/run/${CLUSTER_PREFIX}-cluster"
CLUSTER_MAX_HOSTS=64

cluster_die() {
  echo "cluster: $*" >&2
  exit 1
}

cluster_check_config() {
  [[ "$CLUSTER_PREFIX" =~ ^[a-z][a-z0-9]{0,11}$ ]] ||
    cluster_die "QCCL_CLUSTER_PREFIX must be 1-12 lower-case letters/digits, got '$CLUSTER_PREFIX'"
  [[ "$CLUSTER_NET" =~ ^(10\.[0-9]{1,3}\.[0-9]{1,3}|192\.168\.[0-9]{1,3}|172\.(1[6-9]|2[0-9]|3[01])\.[0-9]{1,3})$ ]] ||
    cluster_die "QCCL_CLUSTER_NET must be the first three octets of a private /24 (e.g. 10.199.73), got '$CLUSTER_NET'"
}

cluster_require_root() {
  [ "$(id -u)" -eq 0 ] || cluster_die "must run as root (network namespaces and tc need CAP_NET_ADMIN)"
  command -v ip >/dev/null || cluster_die "'ip' not found (apt-get install iproute2)"
  command -v tc >/dev/null || cluster_die "'tc' not found (apt-get install iproute2)"
}

cluster_host_ns() { echo "${CLUSTER_PREFIX}-h$1"; }
cluster_host_ip() { echo "${CLUSTER_NET}.$(($1 + 1))"; }
cluster_subnet() { echo "${CLUSTER_NET}.0/24"; }

# Number of hosts of the cluster that is up, or 0.
cluster_hosts() {
  if [ -r "$CLUSTER_STATE/hosts" ]; then
    wc -l <"$CLUSTER_STATE/hosts"
  else
    echo 0
  fi
}

# Namespaces owned by this prefix that exist now (from an earlier run, maybe an interrupted one).
cluster_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${CLUSTER_PREFIX}-(br|h[0-9]+)$" || true
}
