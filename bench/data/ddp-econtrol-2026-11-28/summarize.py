#!/usr/bin/env python3
"""usage: summarize.py [DIR] -- per variant of ab.sh over its rounds: median step, its ratio to (the
same job's compute floor + plain onebit's wire at line rate), x_best (the faster of gloo fp32 and
torch's fp16 hook in the same job), MiB sent per step, CPU per rank and step, the algorithm."""
import glob, json, os, statistics as st, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = {}
for f in sorted(glob.glob(os.path.join(d, "r*", "b1_1gbit.json"))):
    res = {r["variant"]: r for r in json.load(open(f))["results"]}
    floor = res["compute"]["median_s"]
    wire = 8 * res["qccl-onebit"]["qccl_bytes_sent_per_step"] / 1e9
    best = min(res[v]["median_s"] for v in ("fp32", "fp16") if v in res)
    for v, r in res.items():
        ratio = float("nan") if not v.startswith("qccl") else r["median_s"] / (floor + wire)
        rows.setdefault(v, []).append((r["median_s"] * 1e3, ratio, best / r["median_s"],
                                       r.get("qccl_bytes_sent_per_step", 0) / 2**20, r.get("cpu_s", float("nan")) * 1e3,
                                       r.get("qccl_algo", "")))
print("| variant | jobs | step ms, median (range) | / (floor + wire), median (range) | x_best, median (range) | MiB sent per step | CPU per rank ms | algo |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for v, xs in rows.items():
    s, a, b = [x[0] for x in xs], [x[1] for x in xs], [x[2] for x in xs]
    ratio = "-" if not v.startswith("qccl") else f"{st.median(a):.2f} ({min(a):.2f}-{max(a):.2f})"
    xb = "-" if not v.startswith("qccl") else f"{st.median(b):.2f} ({min(b):.2f}-{max(b):.2f})"
    mib = f"{st.median(x[3] for x in xs):.2f}" if v.startswith("qccl") else "-"
    print(f"| {v} | {len(xs)} | {st.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | {ratio} | {xb} | {mib} | "
          f"{st.median(x[4] for x in xs):.0f} | {xs[0][5]} |")
