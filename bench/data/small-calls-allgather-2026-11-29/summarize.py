#!/usr/bin/env python3
"""allgather's median time over sra's, per codec and size (run.sh's JSON rows). usage: summarize.py [DIR]"""
import json
import os
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = {}
for algo in ("sra", "allgather"):
    for codec in ("onebit", "signscale", "maxmin4"):
        path = os.path.join(root, "lat-%s-%s.jsonl" % (algo, codec))
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                if line.startswith("{") and '"time_s"' in line:
                    r = json.loads(line)
                    rows.setdefault((codec, r["count"]), {})[algo] = r["time_s"]
print("| codec | elements | sra, us | allgather, us | allgather / sra |")
print("|---|---:|---:|---:|---:|")
for (codec, n), d in sorted(rows.items()):
    if "sra" in d and "allgather" in d:
        print("| %s | %d | %.0f | %.0f | %.2f |" % (codec, n, d["sra"] * 1e6, d["allgather"] * 1e6, d["allgather"] / d["sra"]))
