#!/usr/bin/env bash
# A/B: the owner of an sra shard encoding its own values for itself (old: the library of commit f73bc1e,
# copied with qccl-bench to /tmp/s27/old) against taking them raw (new: build-release of this change); 4 emulated
# hosts at 1 Gbit/s (bench/cluster/up 4 1gbit first), 9 timed calls. Usage: ab.sh OUTDIR
here=$(cd "$(dirname "$0")" && pwd)
OLD_BIN=/tmp/s27/old/qccl-bench OLD_LIB=/tmp/s27/old ITERS=9 exec bash "$here/../sra-no-copy-2026-11-24/ab.sh" "$1"
