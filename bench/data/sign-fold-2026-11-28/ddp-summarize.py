#!/usr/bin/env python3
"""usage: ddp-summarize.py DIR -- per build and variant of ddp-ab.sh: median step, its ratio to (the
same job's compute floor + onebit's wire at line rate), CPU per rank and step."""
import glob, json, os, statistics as st, sys

rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-r*", "b1_1gbit.json"))):
    side = os.path.basename(os.path.dirname(f)).split("-")[0]
    res = {r["variant"]: r for r in json.load(open(f))["results"]}
    floor = res["compute"]["median_s"]
    wire = 8 * res["qccl-onebit"]["qccl_bytes_sent_per_step"] / 1e9
    for v, r in res.items():
        ratio = float("nan") if v == "compute" else r["median_s"] / (floor + wire)
        rows.setdefault((v, side), []).append((r["median_s"] * 1e3, ratio, r.get("cpu_s", float("nan")) * 1e3))
print("| variant | build | jobs | step ms, median (range) | / (floor + wire), median (range) | CPU per rank ms |")
print("|---|---|---:|---:|---:|---:|")
for (v, side), xs in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] != "old")):
    s, a, c = [x[0] for x in xs], [x[1] for x in xs], [x[2] for x in xs]
    ratio = "-" if v == "compute" else f"{st.median(a):.2f} ({min(a):.2f}-{max(a):.2f})"
    print(f"| {v} | {side} | {len(xs)} | {st.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | {ratio} | {st.median(c):.0f} |")
