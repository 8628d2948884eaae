#!/usr/bin/env python3
"""Tables of run.sh's output: per config and variant, the final training loss (mean of the last 10% of
steps) against exact averaging (--codec mpi) of the same seed, and the test accuracy against it.
  python3 bench/data/cpp-momentum-2026-11-26/summarize.py [OUT_DIR]   (default: its own runs/)"""
import glob
import os
import re
import statistics
import sys

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "runs")
pat = re.compile(r"^# loss ([0-9.naif]+) -> ([0-9.naif]+) .*test accuracy ([0-9.]+)%", re.M)
runs = {}
for f in sorted(glob.glob(os.path.join(out, "*.txt"))):
    name = re.match(r"(\w+)-(\w+)-(\w+)-(\w+)-seed(\d+)\.txt", os.path.basename(f))
    if not name:
        continue  # not a training run (e.g. rotation_cost.txt in cpp-rotation-2026-11-27)
    cfg, codec, mode, algo, seed = name.groups()
    text = open(f).read()
    m = pat.search(text)
    if not m:
        print("no result in", f, file=sys.stderr)
        continue
    variant = "mpi (exact)" if codec == "mpi" else "%s%s, %s%s" % (
        codec, " 4-bit" if codec == "maxmin" else "", mode, "" if algo == "default" else ", algo " + algo)
    runs.setdefault(cfg, {}).setdefault(variant, {})[int(seed)] = (
        float(m.group(2)), float(m.group(3)), "weights identical" in text)
for cfg, by in runs.items():
    base = by["mpi (exact)"]
    print("\n### %s\n" % cfg)
    print("| variant | seeds | final loss / exact: mean | per seed | test accuracy - exact, points: mean | per seed | replicas identical |")
    print("|---|---:|---:|---|---:|---|---|")
    for variant, res in by.items():
        seeds = sorted(s for s in res if s in base)
        ratio = [res[s][0] / base[s][0] for s in seeds]
        dacc = [res[s][1] - base[s][1] for s in seeds]
        print("| %s | %d | %.3f | %s | %+.2f | %s | %s |" % (
            variant, len(seeds), statistics.mean(ratio), " / ".join("%.3f" % r for r in ratio),
            statistics.mean(dacc), " / ".join("%+.2f" % d for d in dacc),
            "yes" if all(res[s][2] for s in seeds) else "NO"))
