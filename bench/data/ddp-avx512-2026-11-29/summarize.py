#!/usr/bin/env python3
"""Medians over rounds of run.sh's jobs, per build: step, step / (floor + wire), x_best, CPU."""
import glob
import json
import os
import statistics
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
print("| build | variant | step ms, median (range) | / (floor + wire) | x_best | CPU ms per rank and step | encode ms | decode ms | jobs |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for build in ("old", "new"):
    jobs = []
    for f in sorted(glob.glob(os.path.join(root, build, "r*", "b1_1gbit.json"))):
        with open(f) as fh:
            jobs.append({r["variant"]: r for r in json.load(fh)["results"]})
    if not jobs:
        continue
    for variant in ("compute", "fp32", "fp16", "qccl-onebit", "qccl-maxmin:4", "qccl-onebit+m"):
        have = [j for j in jobs if variant in j]
        if not have:
            continue
        steps = [j[variant]["median_s"] * 1e3 for j in have]
        cells = ["%.0f (%.0f-%.0f)" % (statistics.median(steps), min(steps), max(steps))]
        if variant.startswith("qccl"):
            # floor + plain onebit's bytes at line rate, as in the earlier sections
            fw = [j[variant]["median_s"] / (j["compute"]["median_s"] + j["qccl-onebit"]["qccl_bytes_sent_per_step"] * 8 / 1e9) for j in have]
            xb = [min(j[b]["median_s"] for b in ("fp32", "fp16") if b in j) / j[variant]["median_s"] for j in have]
            cells += ["%.2f (%.2f-%.2f)" % (statistics.median(fw), min(fw), max(fw)),
                      "%.2f (%.2f-%.2f)" % (statistics.median(xb), min(xb), max(xb))]
        else:
            cells += ["-", "-"]
        for key in ("cpu_s", "encode_s", "decode_s"):
            cells.append("%.1f" % statistics.median(j[variant].get(key, 0.0) * 1e3 for j in have))
        print("| %s | %s | %s | %d |" % (build, variant.replace("qccl-", "qccl "), " | ".join(cells), len(have)))
