#!/usr/bin/env python3
"""hier without a copy of the source, A/B: per codec and size, the median over runs of each run's
median call (slowest rank), old against new, CPU per rank and call, and the checked rows' wrong elements.
usage: summarize.py DIR"""
import glob, json, os, re, statistics as st, sys

d = sys.argv[1]
rows = {}
for f in glob.glob(os.path.join(d, "*-r*.jsonl")):
    codec, v, _ = re.match(r"(\w+)-(old|new)-r(\d+)\.jsonl", os.path.basename(f)).groups()
    for j in map(json.loads, open(f)):
        if "model" in j:
            continue
        rows.setdefault((codec, j["size"], v), []).append(
            (j["time_s"] * 1e3, j["wrong"], j["checked"], j["cpu"]["process_s"] * 1e3, j["algo_ran"]))
print("| codec | size | runs | ran | old ms: median (range) | new ms: median (range) | new / old | CPU per rank and call, old -> new | checked rows, wrong |")
print("|---|---:|---:|---|---:|---:|---:|---:|---|")
for codec in ("none", "onebit"):
    for size in sorted({k[1] for k in rows if k[0] == codec}):
        o, n = rows[(codec, size, "old")], rows[(codec, size, "new")]
        mo, mn = st.median(x[0] for x in o), st.median(x[0] for x in n)
        ran = ",".join(sorted({x[4] for x in o + n}))
        print(f"| {codec} | {size >> 20} MiB | {len(o)} | {ran} | {mo:.2f} ({min(x[0] for x in o):.2f}-{max(x[0] for x in o):.2f}) | "
              f"{mn:.2f} ({min(x[0] for x in n):.2f}-{max(x[0] for x in n):.2f}) | {mn / mo:.2f} | "
              f"{st.median(x[3] for x in o):.1f} -> {st.median(x[3] for x in n):.1f} ms | "
              f"{sum(x[2] for x in o + n)} of {len(o) + len(n)}, {sum(x[1] or 0 for x in o + n)} |")
