#!/usr/bin/env python3
"""Per round: the compute floor, and onebit+m with the rotation inside the exchange (qccl-onebit+m)
and in the momentum passes (qccl-onebit+m%autop): median step, CPU per rank and step, the share of
corrected passes run inside the exchange; then the paired medians. usage: summarize.py [OUTDIR]"""
import glob
import json
import os
import statistics
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = []
print("| round | floor ms | in the exchange: step ms | CPU ms | fused share | in the passes: step ms | CPU ms | fused share |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for f in sorted(glob.glob(os.path.join(root, "r*", "b8_1gbit.json"))):
    with open(f) as fh:
        j = {r["variant"]: r for r in json.load(fh)["results"]}
    a, p, c = j["qccl-onebit+m"], j["qccl-onebit+m%autop"], j["compute"]
    rows.append((a["median_s"] - p["median_s"], a["cpu_s"] - p["cpu_s"]))
    print("| %s | %.0f | %.0f | %.1f | %.1f | %.0f | %.1f | %.1f |" % (
        os.path.basename(os.path.dirname(f)), c["median_s"] * 1e3, a["median_s"] * 1e3, a["cpu_s"] * 1e3,
        a.get("qccl_fused_share", 0.0), p["median_s"] * 1e3, p["cpu_s"] * 1e3, p.get("qccl_fused_share", 0.0)))
d = [r[0] * 1e3 for r in rows]
print("\nin the exchange minus in the passes, paired by round: step %+.1f ms median (%+.1f to %+.1f), CPU per rank "
      "%+.1f ms median" % (statistics.median(d), min(d), max(d), statistics.median(r[1] * 1e3 for r in rows)))
