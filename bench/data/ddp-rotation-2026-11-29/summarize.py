#!/usr/bin/env python3
"""Medians over run.sh's rounds at one batch size: step, step / (floor + wire), x_best, CPU, the
rotation the hook chose; and onebit+m (rotation auto) against onebit+m%0 (none) paired by round.
usage: summarize.py [OUTDIR] [BATCH]"""
import glob
import json
import os
import statistics
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
batch = sys.argv[2] if len(sys.argv) > 2 else "1"
jobs = []
for f in sorted(glob.glob(os.path.join(root, "r*", "b%s_1gbit.json" % batch))):
    with open(f) as fh:
        jobs.append({r["variant"]: r for r in json.load(fh)["results"]})
print("batch %s, %d jobs\n" % (batch, len(jobs)))
print("| variant | step ms, median (range) | / (floor + wire) | x_best | CPU ms per rank and step | calls rotated |")
print("|---|---:|---:|---:|---:|---|")
for variant in ("compute", "fp32", "fp16", "qccl-onebit", "qccl-onebit+m", "qccl-onebit+m%0"):
    have = [j for j in jobs if variant in j]
    if not have:
        continue
    steps = [j[variant]["median_s"] * 1e3 for j in have]
    cells = ["%.0f (%.0f-%.0f)" % (statistics.median(steps), min(steps), max(steps))]
    if variant.startswith("qccl"):
        # floor + plain onebit's bytes at line rate, as in the earlier sections
        fw = [j[variant]["median_s"] / (j["compute"]["median_s"] + j["qccl-onebit"]["qccl_bytes_sent_per_step"] * 8 / 1e9)
              for j in have]
        xb = [min(j[b]["median_s"] for b in ("fp32", "fp16") if b in j) / j[variant]["median_s"] for j in have]
        cells += ["%.2f (%.2f-%.2f)" % (statistics.median(fw), min(fw), max(fw)),
                  "%.2f (%.2f-%.2f)" % (statistics.median(xb), min(xb), max(xb))]
    else:
        cells += ["-", "-"]
    cells.append("%.1f" % statistics.median(j[variant].get("cpu_s", 0.0) * 1e3 for j in have))
    rot = have[0][variant].get("qccl_rotation")
    cells.append("-" if rot is None else "%d of %d" % (sum(b > 0 for b in rot), len(rot)))
    print("| %s | %s |" % (variant.replace("qccl-", "qccl "), " | ".join(cells)))
pairs = [(j["qccl-onebit+m"], j["qccl-onebit+m%0"]) for j in jobs if "qccl-onebit+m" in j and "qccl-onebit+m%0" in j]
if pairs:
    d = [(a["median_s"] - b["median_s"]) * 1e3 for a, b in pairs]
    cpu = [(a["cpu_s"] - b["cpu_s"]) * 1e3 for a, b in pairs]
    print("\nrotation auto (onebit+m) against none (onebit+m%%0), paired by round: step %+.1f ms, median (range "
          "%+.1f to %+.1f, longer in %d of %d); CPU per rank %+.1f ms, median"
          % (statistics.median(d), min(d), max(d), sum(x > 0 for x in d), len(d), statistics.median(cpu)))
