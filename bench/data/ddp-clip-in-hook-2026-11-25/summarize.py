#!/usr/bin/env python3
"""Medians over the rounds of ab.sh, per batch: each variant's step (all clip), its ratio to the same
job's floor (compute, clipped in the loop) + onebit's wire at line rate, and the paired (same job)
difference of the hook's clipping against the loop's. usage: summarize.py [DIR]"""
import glob, json, os, statistics as st, sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
for batch in (1, 8):
    rows, jobs = {}, []
    for f in sorted(glob.glob(os.path.join(here, "r*", f"b{batch}_1gbit.json"))):
        res = {r["variant"]: r for r in json.load(open(f))["results"]}
        jobs.append(res)
        floor = res["compute"]["median_s"]
        wire = 8 * res["qccl-onebit"]["qccl_bytes_sent_per_step"] / 1e9
        for v, r in res.items():
            ratio = float("nan") if v == "compute" else r["median_s"] / (floor + wire)
            rows.setdefault(v, []).append((r["median_s"] * 1e3, ratio, r.get("clip", "-")))
    print(f"batch {batch}, rounds: {len(jobs)}")
    print("| variant | clip | step ms, median (range) | / (floor + onebit's wire), median (range) |")
    print("|---|---|---:|---:|")
    for v, xs in rows.items():
        s, a = [x[0] for x in xs], [x[1] for x in xs]
        ratio = "-" if v == "compute" else f"{st.median(a):.2f} ({min(a):.2f}-{max(a):.2f})"
        print(f"| {v} | {xs[0][2]} | {st.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | {ratio} |")
    d = [1e3 * (j["qccl-onebit+m+hc"]["median_s"] - j["qccl-onebit+m"]["median_s"]) for j in jobs]
    print(f"- onebit+m+hc - onebit+m, paired by job: median {st.median(d):+.0f} ms "
          f"(range {min(d):+.0f} to {max(d):+.0f}), lower in {sum(x < 0 for x in d)} of {len(d)}\n")
