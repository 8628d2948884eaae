"""Medians of ab.sh's runs: python3 bench/data/ring-eager-2026-11-27/summarize.py"""
import glob
import json
import os
import statistics

here = os.path.dirname(os.path.abspath(__file__))
cells = {}
for path in sorted(glob.glob(os.path.join(here, "h*-*-*-run*.jsonl"))):
    hosts, codec, mode = os.path.basename(path).split("-")[:3]
    for line in open(path):
        if not line.startswith("{") or '"time_s"' not in line:
            continue
        r = json.loads(line)
        if r.get("time_s") is None:
            continue
        cells.setdefault((int(hosts[1:]), codec, r["size"], mode), []).append(r)
ms = lambda rows, k: statistics.median(r[k] for r in rows) * 1e3
print("| hosts | codec | size | before, ms | after, ms | after/before | gloo, ms | x_best after | CPU/rank before, after ms | checked, wrong |")
print("|---|---|---|---:|---:|---:|---:|---:|---|---|")
for hosts, codec, size in sorted({k[:3] for k in cells}):
    b, a = cells.get((hosts, codec, size, "whole"), []), cells.get((hosts, codec, size, "cut"), [])
    if not a or not b:
        continue
    both = a + b
    checked = sum(1 for r in both if r["checked"])
    wrong = sum(r["wrong"] or 0 for r in both if r["checked"])
    cpu = lambda rows: statistics.median(r["cpu"]["process_s"] for r in rows) * 1e3
    print("| %d | %s | %d MiB | %.1f | %.1f | %.2f | %.1f | %.2f | %.0f, %.0f | %d of %d, %d |" % (
        hosts, codec, size >> 20, ms(b, "time_s"), ms(a, "time_s"), ms(a, "time_s") / ms(b, "time_s"),
        ms(both, "gloo_time_s"), statistics.median(r["speedup_vs_best"] for r in a), cpu(b), cpu(a),
        checked, len(both), wrong))
