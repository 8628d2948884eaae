#!/usr/bin/env python3
"""race.sh's rows: per link rate and size the path auto kept, its time, the best uncompressed path
other than qccl's own ring (gloo, MPI_Allreduce, MPI_Iallreduce) and qccl's ring, medians over rounds.
  python3 bench/data/ucx-eager-2026-11-27/summarize_race.py OUT_DIR"""
import json
import os
import statistics as st
import sys
from collections import defaultdict

rows = defaultdict(list)
for line in open(os.path.join(sys.argv[1], "rows.jsonl")):
    r = json.loads(line)
    rows[(r["rate"], r["size"])].append(r)
print("| link | size | ran (per round) | auto ms | best other: name, ms | x_other | qccl ring ms | MPI_Iallreduce ms "
      "| x_best | checked, wrong |")
print("|---|---|---|---:|---|---:|---:|---:|---:|---|")
for (rate, size), v in sorted(rows.items(), key=lambda kv: (kv[0][0] != "none", kv[0][1])):
    t = st.median(x["time_s"] for x in v)
    others = []
    names = []
    for x in v:
        o = {k: s for k, s in x["baselines"].items() if k != "qccl_ring" and s > 0}
        b = min(o, key=o.get)
        others.append(o[b])
        names.append(b)
    ring = st.median(x["baselines"]["qccl_ring"] for x in v)
    iar = st.median(x["baselines"]["mpi_iallreduce"] for x in v)
    xo = st.median(o / x["time_s"] for o, x in zip(others, v))
    xb = st.median(x["speedup_vs_best"] for x in v)
    wrong = sum(x["wrong"] or 0 for x in v if x.get("checked"))
    checked = sum(1 for x in v if x.get("checked"))
    print(f"| {rate} | {size >> 20} MiB | {','.join(x['algo_ran'] for x in v)} | {1e3 * t:.1f} | "
          f"{'/'.join(sorted(set(names)))} {1e3 * st.median(others):.1f} | {xo:.3f} | {1e3 * ring:.1f} | "
          f"{1e3 * iar:.1f} | {xb:.3f} | {checked} of {len(v)}, {wrong} |")
