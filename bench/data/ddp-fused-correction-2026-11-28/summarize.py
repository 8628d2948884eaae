#!/usr/bin/env python3
"""Medians over the rounds of ab.sh: per variant the step, its ratio to (the same job's compute floor
+ onebit's own wire at line rate), how many rounds were within issue 9's 1.25, the CPU per rank, the
share of exchanges whose corrected pass ran inside the exchange, and the paired (same job) step
and CPU differences of the default (+m, the pass inside the last decode) against +ma (after it).
usage: summarize.py [DIR]"""
import glob, json, os, statistics as st, sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows, jobs = {}, []
for f in sorted(glob.glob(os.path.join(here, "r*", "b1_1gbit.json"))):
    res = {r["variant"]: r for r in json.load(open(f))["results"]}
    jobs.append(res)
    floor = res["compute"]["median_s"]
    wire = 8 * res["qccl-onebit"]["qccl_bytes_sent_per_step"] / 1e9
    for v, r in res.items():
        ratio = float("nan") if v == "compute" else r["median_s"] / (floor + wire)
        rows.setdefault(v, []).append((r["median_s"] * 1e3, ratio, r.get("cpu_s", float("nan")) * 1e3,
                                       r.get("qccl_bytes_sent_per_step", 0) / 2**20,
                                       r.get("qccl_fused_share")))
print(f"rounds: {len(jobs)}")
print("| variant | MiB sent / step | corrected inside the exchange | step ms, median (range) | / (floor + onebit's wire), "
      "median (range) | within 1.25 | CPU per rank ms, median |")
print("|---|---:|---:|---:|---:|---:|---:|")
for v, xs in rows.items():
    s, a, c = [x[0] for x in xs], [x[1] for x in xs], [x[2] for x in xs]
    if v == "compute":
        print(f"| compute (the floor) | - | - | {st.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | - | - | {st.median(c):.0f} |")
        continue
    share = "-" if xs[0][4] is None else f"{st.median(x[4] for x in xs):.0%}"
    print(f"| {v} | {xs[0][3]:.2f} | {share} | {st.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | {st.median(a):.2f} "
          f"({min(a):.2f}-{max(a):.2f}) | {sum(x <= 1.25 for x in a)} of {len(a)} | {st.median(c):.0f} |")
for other in ("qccl-onebit+ma",):
    d = [1e3 * (j["qccl-onebit+m"]["median_s"] - j[other]["median_s"]) for j in jobs]
    c = [1e3 * (j["qccl-onebit+m"]["cpu_s"] - j[other]["cpu_s"]) for j in jobs]
    print(f"- onebit+m - {other[5:]}, paired by job: step median {st.median(d):+.0f} ms (range {min(d):+.0f} to "
          f"{max(d):+.0f}), lower in {sum(x < 0 for x in d)} of {len(d)}; CPU per rank median {st.median(c):+.0f} ms")
