#!/usr/bin/env bash
# The README's two commands on a fresh Debian bookworm machine: builds a throwaway root with
# debootstrap (minbase), binds this machine's CUDA toolkit read-only when it has one, clones this
# checkout's HEAD into it and runs each command of the README's "The two commands" block exactly
# as written, as root in the chroot, from the clone's top directory. Reports each command's exit
# status and wall time, and exits non-zero if any failed. Every mount and the root are removed
# on exit, Ctrl-C included.
#   tests/fresh-machine.sh              # with the CUDA toolkit (/usr/local/cuda*) when present
#   tests/fresh-machine.sh --no-cuda    # the same machine without a CUDA toolkit
# Only committed work is tested: the clone is of HEAD. Exit 77 (with the reason) when this
# machine cannot run it: not root, no debootstrap and no way to install it, no Debian mirror
# configured, or too little free disk.
#
# Nothing of this machine goes into the root but its network settings (resolv.conf, proxy
# variables, apt's proxy, and the CA bundle, so a TLS-intercepting proxy works for pip), the
# CUDA toolkit, and caches of the .deb files apt downloads and of pip's downloads (packages are
# still installed by the project's own scripts, only not downloaded again). /etc/hosts gets localhost and the machine's
# name, as the Debian installer writes it.
# Environment:
#   QCCL_FRESH_CACHE    cache folder (default /var/cache/qccl-fresh-machine): the debootstrap
#                       tarball (rebuilt after QCCL_FRESH_MAX_AGE days, default 30), the .deb
#                       and pip download caches, and last-run/*.log, the output of each command
#   QCCL_FRESH_WORKDIR  where the throwaway root is made (default /var/tmp)
#   QCCL_FRESH_MIRROR   Debian mirror (default: the bookworm mirror in /etc/apt/sources.list{,.d/*})
#   QCCL_FRESH_SECURITY Debian security mirror (default: from the same files; none if absent)
set -euo pipefail
# One brace group, read whole before it runs: a checkout or an edit of this file during a run
# (which takes long) cannot change what the run does.
{

suite=bookworm
min_free_gib=30
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${QCCL_FRESH_CACHE:-/var/cache/qccl-fresh-machine}
workdir=${QCCL_FRESH_WORKDIR:-/var/tmp}
max_age=${QCCL_FRESH_MAX_AGE:-30}
bind_cuda=1

for a in "$@"; do
  case "$a" in
    --no-cuda) bind_cuda=0 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "fresh-machine: unknown option $a (see --help)" >&2
      exit 2
      ;;
  esac
done

say() { echo "fresh-machine: $*"; }
skip() {
  echo "fresh-machine: SKIP: $*"
  exit 77
}
die() {
  echo "fresh-machine: ERROR: $*" >&2
  exit 1
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { s = b - a; printf "%dm%02ds (%.0f s)", s / 60, s % 60, s }'; }

# ---------------------------------------------------------------------------------------------
# Can this machine do it?
# ---------------------------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot and mounts)"
command -v git >/dev/null || skip "needs git to clone the checkout"
git -C "$repo" rev-parse --verify -q HEAD >/dev/null || skip "$repo is not a git checkout with a commit"

# "URI SUITE" for every enabled deb entry of apt's one-line and deb822 source files.
apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                       if (i + 1 <= NF) print $i, $(i + 1) }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush() { if (types ~ /(^| )deb( |$)/ && enabled != "no")
                              for (u in uris) for (s in suites) print uris[u], suites[s]
                            types = ""; enabled = ""; delete uris; delete suites }
         /^[ \t]*#/ { next }
         /^[ \t]*$/ { flush(); next }
         { key = tolower($1); sub(/:$/, "", key) }
         key == "types" { $1 = ""; types = $0 " " }
         key == "enabled" { enabled = tolower($2) }
         key == "uris" { for (i = 2; i <= NF; i++) uris[i] = $i }
         key == "suites" { for (i = 2; i <= NF; i++) suites[i] = $i }
         END { flush() }' "$f"
  done
}
sources=$(apt_sources || true)
mirror=${QCCL_FRESH_MIRROR:-$(awk -v s="$suite" '$2 == s || $2 == s "-updates" { print $1; exit }' <<<"$sources")}
if [ -z "$mirror" ]; then # a Debian machine of another release: its mirror serves bookworm too
  mirror=$(awk '$2 !~ /-security$/ && $1 ~ /debian\/?$/ { print $1; exit }' <<<"$sources")
fi
[ -n "$mirror" ] || skip "no Debian mirror in /etc/apt/sources.list{,.d/*}; set QCCL_FRESH_MIRROR"
security=${QCCL_FRESH_SECURITY-$(awk '$2 ~ /-security$/ && $1 ~ /debian-security\/?$/ { print $1; exit }' <<<"$sources")}
mirror=${mirror%/}
security=${security%/}

if ! command -v debootstrap >/dev/null; then
  command -v apt-get >/dev/null || skip "no debootstrap and no apt-get to install it"
  say "installing debootstrap"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } >&2; then
    skip "debootstrap is not installed and apt-get could not install it"
  fi
fi
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] ||
  skip "no /usr/share/keyrings/debian-archive-keyring.gpg to check the $suite release with"

mkdir -p "$cache" "$workdir"
free_gib=$(df -Pk "$workdir" | awk 'NR == 2 { print int($4 / 1048576) }')
[ "$free_gib" -ge "$min_free_gib" ] || skip "$workdir has $free_gib GiB free, the root needs $min_free_gib"

cuda_dirs=()
if ((bind_cuda)); then
  for d in /usr/local/cuda*; do
    [ -d "$d" ] && [ ! -L "$d" ] && cuda_dirs+=("$d")
  done
fi

# ---------------------------------------------------------------------------------------------
# The root, and its removal whatever happens.
# ---------------------------------------------------------------------------------------------
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
root=$(mktemp -d "$workdir/qccl-fresh.XXXXXX")
chmod 755 "$root"
logs=$cache/last-run

# Processes whose root is the chroot (the commands and anything they left behind).
# shellcheck disable=SC2317 # this and the next two run from the EXIT trap
procs_in_root() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
  done
  return 0
}
# shellcheck disable=SC2317
mounts_in_root() { awk -v r="$root" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo; }
# shellcheck disable=SC2317
cleanup() {
  local rc=$? pids
  set +e
  trap - EXIT INT TERM
  mapfile -t pids < <(procs_in_root)
  if ((${#pids[@]})); then
    say "stopping processes left in the root: ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null
    sleep 2
    mapfile -t pids < <(procs_in_root)
    ((${#pids[@]})) && kill -KILL "${pids[@]}" 2>/dev/null && sleep 1
  fi
  if [ -n "$(mounts_in_root)" ]; then
    umount -R "$root" 2>/dev/null || umount -R -l "$root"
  fi
  if [ -n "$(mounts_in_root)" ]; then
    echo "fresh-machine: ERROR: mounts left under $root, not removing it:" >&2
    mounts_in_root >&2
    exit 1
  fi
  rm -rf --one-file-system "$root"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A mount point of its own, private, so that nothing mounted inside propagates back to this
# machine, and so that `ip netns exec` (which makes / a recursive slave) works inside.
mount --bind "$root" "$root"
mount --make-private "$root"

# ---------------------------------------------------------------------------------------------
# Debian bookworm, minbase, from a cached tarball of its packages.
# ---------------------------------------------------------------------------------------------
t0=$(now)
tarball=$cache/debootstrap-$suite-minbase-$arch.tgz
if [ -f "$tarball" ] && [ -n "$(find "$tarball" -mtime +"$max_age")" ]; then
  say "$tarball is older than $max_age days: fetching the packages again"
  rm -f "$tarball"
fi
if [ ! -f "$tarball" ]; then
  say "downloading the $suite minbase packages from $mirror into $tarball"
  scratch=$(mktemp -d "$workdir/qccl-fresh-tarball.XXXXXX")
  if ! debootstrap --variant=minbase --arch="$arch" --make-tarball="$tarball.tmp" "$suite" "$scratch" "$mirror" \
    >"$cache/debootstrap-download.log" 2>&1; then
    rm -rf "$scratch" "$tarball.tmp"
    tail -n 20 "$cache/debootstrap-download.log" >&2
    die "debootstrap --make-tarball failed (log: $cache/debootstrap-download.log)"
  fi
  rm -rf "$scratch"
  mv "$tarball.tmp" "$tarball"
fi
say "debootstrap $suite (minbase, $arch) into $root"
if ! debootstrap --variant=minbase --arch="$arch" --unpack-tarball="$tarball" "$suite" "$root" "$mirror" \
  >"$cache/debootstrap.log" 2>&1; then
  tail -n 20 "$cache/debootstrap.log" >&2
  die "debootstrap failed (log: $cache/debootstrap.log)"
fi

# What a default bookworm install lists: the release, its updates and its security archive.
{
  echo "deb $mirror $suite main"
  echo "deb $mirror $suite-updates main"
  [ -z "$security" ] || echo "deb $security $suite-security main"
} >"$root/etc/apt/sources.list"
t_root=$(now)

# ---------------------------------------------------------------------------------------------
# Kernel file systems, network settings, caches, the CUDA toolkit.
# ---------------------------------------------------------------------------------------------
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm" # Open MPI's shared memory, private
mount -t tmpfs -o mode=755,nosuid,nodev run "$root/run"       # ip netns keeps /run/netns here
install -d -m 1777 "$root/run/lock"

rm -f "$root/etc/resolv.conf"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
grep -qs . "$root/etc/hosts" || printf '127.0.0.1\tlocalhost\n' >"$root/etc/hosts"
grep -q "[[:space:]]$(hostname)\([[:space:]]\|$\)" "$root/etc/hosts" ||
  printf '127.0.1.1\t%s\n' "$(hostname)" >>"$root/etc/hosts"
apt-config dump 2>/dev/null | grep -iE '^Acquire::(http|https|ftp)::Proxy ' \
  >"$root/etc/apt/apt.conf.d/01host-proxy" || rm -f "$root/etc/apt/apt.conf.d/01host-proxy"

run_env=(HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -z "${!v:-}" ] || run_env+=("$v=${!v}")
done
host_ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$host_ca" ]; then
  install -D -m 644 "$host_ca" "$root/etc/ssl/host-ca-bundle.crt"
  run_env+=(SSL_CERT_FILE=/etc/ssl/host-ca-bundle.crt PIP_CERT=/etc/ssl/host-ca-bundle.crt
    REQUESTS_CA_BUNDLE=/etc/ssl/host-ca-bundle.crt)
fi

mkdir -p "$cache/apt-archives/partial"
mount --bind "$cache/apt-archives" "$root/var/cache/apt/archives"
# pip's download cache, for the same reason (torch 2.x from PyPI for the python_torch2_* tests is
# about 5 GiB of wheels); pip still installs every package into the root.
mkdir -p "$cache/pip" "$root/root/.cache/pip"
mount --bind "$cache/pip" "$root/root/.cache/pip"

cuda_note="no CUDA toolkit"
((bind_cuda)) || cuda_note="no CUDA toolkit (--no-cuda)"
if ((${#cuda_dirs[@]})); then
  for d in "${cuda_dirs[@]}"; do
    mkdir -p "$root$d"
    mount --bind "$d" "$root$d"
    mount -o remount,bind,ro "$root$d"
  done
  for l in /usr/local/cuda*; do # /usr/local/cuda -> cuda-13.0 and the like
    [ -L "$l" ] && ln -sfn "$(readlink -f "$l")" "$root$l"
  done
  cuda_note="CUDA toolkit ${cuda_dirs[*]} bound read-only"
fi

# ---------------------------------------------------------------------------------------------
# The checkout under test, and the README's commands.
# ---------------------------------------------------------------------------------------------
commit=$(git -C "$repo" rev-parse HEAD)
[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ] ||
  say "note: uncommitted changes in $repo are not tested (the clone is of HEAD $commit)"
git clone --quiet --no-checkout "$repo" "$root/root/qccl"
git -C "$root/root/qccl" fetch --quiet "$repo" HEAD
git -C "$root/root/qccl" -c advice.detachedHead=false checkout --quiet --detach FETCH_HEAD
[ "$(git -C "$root/root/qccl" rev-parse HEAD)" = "$commit" ] || die "HEAD of $repo moved while it was cloned"

readme=$root/root/qccl/README.md
mapfile -t commands < <(awk '/^## The two commands/ { s = 1; next }
                              s && /^## / { exit }
                              s && /^```/ { if (in_block) exit; in_block = 1; next }
                              in_block { sub(/[ \t]*#.*/, ""); if ($0 ~ /[^ \t]/) print }' "$readme")
((${#commands[@]})) || die "no commands found in the code block under '## The two commands' of README.md"

load() { cut -d' ' -f1-3 /proc/loadavg; }
say "commit $commit; Debian $suite minbase from $mirror; $cuda_note"
say "$(nproc) CPUs; load average $(load)"
say "root ready in $(elapsed "$t0" "$t_root") (debootstrap)"
rm -rf "$logs"
mkdir -p "$logs"
names=() statuses=() times=()
for cmd in "${commands[@]}"; do
  log=$logs/$(tr -c 'A-Za-z0-9._-' '_' <<<"$cmd" | sed 's/_*$//').log
  echo
  say "=== $cmd (in /root/qccl, as root; output also in $log) ==="
  t1=$(now)
  # In the background and waited for, so that a TERM or INT to this script runs the cleanup at
  # once (bash runs traps only after a foreground command ends).
  {
    # shellcheck disable=SC2016 # $1 is expanded by the shell inside the root
    chroot "$root" /usr/bin/env -i "${run_env[@]}" /bin/bash -c 'cd /root/qccl && eval "$1"' bash "$cmd" 2>&1
    echo $? >"${log%.log}.exit"
  } | tee "$log" &
  wait $!
  status=$(cat "${log%.log}.exit" 2>/dev/null || echo "?")
  t2=$(now)
  names+=("$cmd") statuses+=("$status") times+=("$(elapsed "$t1" "$t2")")
  say "=== $cmd: exit $status after $(elapsed "$t1" "$t2") ==="
done

echo
say "summary (commit ${commit:0:12}, Debian $suite minbase, $cuda_note):"
say "load average at the end $(load) ($(nproc) CPUs)"
printf '  %-16s %s\n' "root" "$(elapsed "$t0" "$t_root")"
failed=0
for i in "${!names[@]}"; do
  printf '  %-16s exit %-3s %s\n' "${names[$i]}" "${statuses[$i]}" "${times[$i]}"
  [ "${statuses[$i]}" = 0 ] || failed=1
done
# Tests CTest did not run (GPU tests without a GPU, say) are listed, so none is skipped silently.
for f in "$logs"/*.log; do
  if grep -q "The following tests did not run" "$f"; then
    echo "  tests that did not run ($(basename "$f")):"
    sed -n '/The following tests did not run/,/^$/p' "$f" | sed '1d; /^$/d; s/^[[:space:]]*/    /'
  fi
done
((failed == 0)) || die "a README command failed on a fresh $suite machine (logs: $logs)"
say "PASS"
exit 0
}
