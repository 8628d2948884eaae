#!/usr/bin/env python3
"""Medians over the runs of this directory: per transport and size, auto (the shared-memory sum)
against the best uncompressed path of the same run; every row's `wrong` must be 0 and checked."""
import glob
import json
import os
import statistics
import sys

here = os.path.dirname(os.path.abspath(__file__))
rows = {}
for f in sorted(glob.glob(os.path.join(here, "*-run*.jsonl"))):
    tr = os.path.basename(f).split("-")[0]
    for line in open(f):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "time_s" not in r:
            continue
        rows.setdefault((tr, r["size"]), []).append(r)

print("| transport | size | runs | ran | auto us (median) | best uncompressed us (median) | best by | x_best of medians | x_best per run (min-max) | checked, wrong |")
print("|---|---:|---:|---|---:|---:|---|---:|---|---|")
ok = True
for (tr, size), rs in sorted(rows.items()):
    t = statistics.median(r["time_s"] for r in rs)
    b = statistics.median(r["best_uncompressed_time_s"] for r in rs)
    names = sorted({r["best_uncompressed"] for r in rs})
    per = [r["speedup_vs_best"] for r in rs]
    ran = sorted({r["algo_ran"] for r in rs})
    checked = all(r.get("checked") for r in rs)
    wrong = sum(r.get("wrong") or 0 for r in rs)
    ok = ok and checked and wrong == 0
    sz = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    print(f"| {tr} | {sz} | {len(rs)} | {','.join(ran)} | {t * 1e6:.1f} | {b * 1e6:.1f} | {', '.join(names)} | "
          f"{b / t:.2f} | {min(per):.2f}-{max(per):.2f} | {'all' if checked else 'NOT ALL'}, {wrong} |")
sys.exit(0 if ok else 1)
