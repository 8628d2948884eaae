#!/usr/bin/env python3
"""Medians over run.sh's rounds: step, step / (floor + wire), x_best, CPU; and onebit+m against
onebit+mn paired by round."""
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
print("| variant | step ms, median (range) | / (floor + wire) | x_best | CPU ms per rank and step | decode ms | packed share | jobs |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for variant in ("compute", "fp32", "fp16", "qccl-onebit", "qccl-onebit+m", "qccl-onebit+mn"):
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
    for key in ("cpu_s", "decode_s"):  # decode_s includes the corrected pass that runs inside it
        cells.append("%.1f" % statistics.median(j[variant].get(key, 0.0) * 1e3 for j in have))
    ps = [j[variant].get("qccl_packed_share") for j in have]
    cells.append("-" if ps[0] is None else "%.2f" % statistics.median(ps))
    print("| %s | %s | %d |" % (variant.replace("qccl-", "qccl "), " | ".join(cells), len(have)))
pairs = [(j["qccl-onebit+m"]["median_s"] * 1e3, j["qccl-onebit+mn"]["median_s"] * 1e3) for j in jobs
         if "qccl-onebit+m" in j and "qccl-onebit+mn" in j]
if pairs:
    d = [b - a for a, b in pairs]
    cpu = [(j["qccl-onebit+mn"]["cpu_s"] - j["qccl-onebit+m"]["cpu_s"]) * 1e3 for j in jobs
           if "qccl-onebit+m" in j and "qccl-onebit+mn" in j]
    dec = [(j["qccl-onebit+mn"]["decode_s"] - j["qccl-onebit+m"]["decode_s"]) * 1e3 for j in jobs
           if "qccl-onebit+m" in j and "qccl-onebit+mn" in j]
    print("\npacked (onebit+m) against never packed (onebit+mn), paired by round: step %.1f ms shorter, median "
          "(range %.1f to %.1f, shorter in %d of %d); CPU per rank %.1f ms less, median; decode (with the "
          "corrected pass) %.1f ms less per rank, median (range %.1f to %.1f, less in %d of %d)"
          % (statistics.median(d), min(d), max(d), sum(x > 0 for x in d), len(d), statistics.median(cpu),
             statistics.median(dec), min(dec), max(dec), sum(x > 0 for x in dec), len(dec)))
