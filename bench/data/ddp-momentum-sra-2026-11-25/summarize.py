#!/usr/bin/env python3
"""Medians over the rounds of the DDP A/B (ab.sh): per variant, the step, its ratio to (floor + onebit's
own wire at line rate; onebit's sra bytes, the issue's reference) and to (floor + its own wire).
usage: summarize.py [DIR]"""
import glob, json, os, statistics as st, sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = {}
for f in sorted(glob.glob(os.path.join(here, "r*", "b1_1gbit.json"))):
    res = {r["variant"]: r for r in json.load(open(f))["results"]}
    floor = res["compute"]["median_s"]
    rows.setdefault("compute", []).append((floor, float("nan"), float("nan"), 0.0, res["compute"]["cpu_s"]))
    ref_wire = 8 * res["qccl-onebit"]["qccl_bytes_sent_per_step"] / 1e9
    for v, r in res.items():
        if v == "compute":
            continue
        own = 8 * r["qccl_bytes_sent_per_step"] / 1e9
        rows.setdefault(v, []).append((r["median_s"], r["median_s"] / (floor + ref_wire), r["median_s"] / (floor + own),
                                       r["qccl_bytes_sent_per_step"] / 2**20, r["cpu_s"] if "cpu_s" in r else float("nan")))
print(f"rounds: {len(next(iter(rows.values())))}")
print("| variant | MiB sent / step | step ms, median (range) | / (floor + onebit's wire), median (range) | / (floor + own wire), median | CPU per rank, ms, median |")
print("|---|---:|---:|---:|---:|---:|")
for v, xs in rows.items():
    s = [x[0] * 1e3 for x in xs]; a = [x[1] for x in xs]; b = [x[2] for x in xs]
    if v == "compute":
        print(f"| compute (the floor) | - | {st.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | - | - | {1e3 * st.median(x[4] for x in xs):.0f} |")
        continue
    print(f"| {v} | {xs[0][3]:.2f} | {st.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | {st.median(a):.2f} ({min(a):.2f}-{max(a):.2f}) | {st.median(b):.2f} | {1e3 * st.median(x[4] for x in xs):.0f} |")
