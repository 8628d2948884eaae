#!/usr/bin/env bash
# Installs the Debian packages qccl needs to build, test and benchmark, if any is missing.
# Idempotent; runs apt-get only when something is absent. Needs root (or sudo).
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config git clang clang-format libclang-rt-14-dev
      libgtest-dev libgmock-dev openmpi-bin libopenmpi-dev libucx-dev ucx-utils libgloo-dev iproute2 procps)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
