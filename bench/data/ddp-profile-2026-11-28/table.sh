#!/usr/bin/env bash
# usage: table.sh PERF_DATA FROM TO [ROWS] -- the share of perf samples per symbol (and object)
# between perf timestamps FROM and TO (seconds; perf script prints them), most first.
set -eu
perf script -i "$1" -F time,ip,sym,dso 2>/dev/null | awk -v a="$2" -v b="$3" '
  { t = $1 + 0
    if (t >= a && t < b) {
      s = $0; sub(/^[ ]*[0-9.]+:[ ]*/, "", s); sub(/^[0-9a-f]+ /, "", s); sub(/\+0x[0-9a-f]+/, "", s)
      if (s ~ /^\[unknown\]/ || s ~ /^ *\(/) s = "?" substr(s, index(s, "("))
      c[s]++; n++ } }
  END { for (k in c) printf "%6.2f%% %5d %s\n", 100 * c[k] / n, c[k], k
        printf "%6.2f%% %5d (all samples)\n", 100, n }' | sort -rn | head -"${4:-25}"
