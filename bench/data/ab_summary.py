#!/usr/bin/env python3
"""Summary of an old-against-new qccl-bench A/B folder (files CODEC-old-rN.jsonl / CODEC-new-rN.jsonl,
one qccl-bench --json run each, e.g. bench/data/ring-no-copy-2026-11-25/ab.sh): per codec and size,
the median over runs of each run's median call (slowest rank), old against new, what ran, CPU per
rank and call, and the checked rows' wrong elements.
usage: ab_summary.py DIR"""
import glob, json, os, re, statistics as st, sys

d = sys.argv[1]
rows = {}
for f in glob.glob(os.path.join(d, "*-r*.jsonl")):
    m = re.match(r"(\w+)-(old|new)-r(\d+)\.jsonl", os.path.basename(f))
    if not m:
        continue
    codec, v, _ = m.groups()
    for j in map(json.loads, open(f)):
        if "model" in j:
            continue
        rows.setdefault((codec, j["size"], v), []).append(
            (j["time_s"] * 1e3, j["wrong"], j["checked"], j["cpu"]["process_s"] * 1e3, j["algo_ran"]))
print("| codec | size | runs | ran | old ms: median (range) | new ms: median (range) | new / old | "
      "CPU per rank and call, old -> new | checked rows, wrong |")
print("|---|---:|---:|---|---:|---:|---:|---:|---|")
for codec, size in sorted({(k[0], k[1]) for k in rows}):
    o, n = rows.get((codec, size, "old"), []), rows.get((codec, size, "new"), [])
    if not o or not n:
        continue
    mo, mn = st.median(x[0] for x in o), st.median(x[0] for x in n)
    ran = ",".join(sorted({x[4] for x in o + n}))
    print(f"| {codec} | {size >> 20} MiB | {len(o)} | {ran} | {mo:.2f} ({min(x[0] for x in o):.2f}-{max(x[0] for x in o):.2f}) | "
          f"{mn:.2f} ({min(x[0] for x in n):.2f}-{max(x[0] for x in n):.2f}) | {mn / mo:.2f} | "
          f"{st.median(x[3] for x in o):.1f} -> {st.median(x[3] for x in n):.1f} ms | "
          f"{sum(x[2] for x in o + n)} of {len(o) + len(n)}, {sum(x[1] or 0 for x in o + n)} |")
