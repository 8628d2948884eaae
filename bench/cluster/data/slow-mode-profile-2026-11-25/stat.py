#!/usr/bin/env python3
"""Per run of multi.sh: onebit 16 and 64 MiB medians, and the machine's /proc/stat deltas over the
run (jiffies of both CPUs: user, system, idle, softirq, steal; context switches).
usage: stat.py DIR (e.g. 1gbit-8runs)"""
import json, os, sys

d = sys.argv[1]
for line in open(os.path.join(d, "stat.txt")):
    r, s0, s1, c0, c1 = line.strip().split("|")
    a, b = list(map(int, s0.split()[1:])), list(map(int, s1.split()[1:]))
    x = [q - p for p, q in zip(a, b)]
    t = {j["size"] >> 20: j["time_s"] * 1e3 for j in map(json.loads, open(os.path.join(d, f"r{r}.jsonl")))
         if "model" not in j and j.get("codec") == "onebit"}
    print(f"run {r}: 16 MiB {t.get(16, 0):5.1f} ms, 64 MiB {t.get(64, 0):5.1f} ms | user {x[0]} system {x[2]} "
          f"idle {x[3]} softirq {x[6]} steal {x[7]} | context switches {int(c1.split()[1]) - int(c0.split()[1])}")
