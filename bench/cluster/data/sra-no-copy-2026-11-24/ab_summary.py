#!/usr/bin/env python3
"""Summarizes the A/B of the copy before sra: per codec, size and variant, the per-run times and medians."""
import glob, json, os, re, statistics as st, sys
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = {}
for f in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
    m = re.match(r"(\w+)-(old|new)-r(\d)", os.path.basename(f))
    for line in open(f):
        if line.startswith("{"):
            r = json.loads(line)
            rows.setdefault((m[1], r["size"] >> 20, m[2]), []).append(r)
print("| codec | MiB | variant | ms per run | median ms | process CPU ms/rank | of it kernel | wrong (checked) |")
print("|---|---:|---|---|---:|---:|---:|---|")
for (codec, mib, v), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] == "new")):
    t = [1e3 * r["time_s"] for r in rs]
    print(f"| {codec} | {mib} | {v} | {' / '.join('%.1f' % x for x in t)} | {st.median(t):.1f} | "
          f"{st.median(1e3 * r['cpu']['process_s'] for r in rs):.1f} | {st.median(1e3 * r['cpu']['process_sys_s'] for r in rs):.1f} | "
          f"{sum(r['wrong'] or 0 for r in rs)} ({sum(1 for r in rs if r['checked'])} of {len(rs)}) |")
