#!/usr/bin/env python3
"""The alpha-beta model against the measured time at every shaped rate: sweep-{rate}-{codec}.jsonl
(2.5gbit, 500mbit, 250mbit; -n 3 -w 1) and the 1 Gbit/s runs {codec}-run{1,2}.jsonl (-n 5 -w 1),
all `qccl-bench allreduce --json -c 1` on 4 emulated hosts. Prints predicted / measured, x_best and
the model's break-even rate per row (bench/RESULTS.md, "4 hosts x 1 Gbit/s again")."""
import glob
import json
import os
import sys

# The folder of the JSON files: this script's, or the one given (the same file names elsewhere).
here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
RATES = {"250mbit": 0.25, "500mbit": 0.5, "1gbit": 1.0, "2.5gbit": 2.5}


def load(path):
    rows, model, fit = {}, {}, None
    for line in open(path):
        r = json.loads(line)
        if r.get("model") == "fit":
            fit = r
        elif r.get("model") == "row":
            model[r["size"]] = r
        else:
            rows[r["size"]] = r
    return rows, model, fit


files = []
for f in glob.glob(os.path.join(here, "sweep-*.jsonl")):
    _, rate, codec = os.path.basename(f)[:-6].split("-")
    files.append((RATES[rate], codec, "1", f))
for f in glob.glob(os.path.join(here, "*-run*.jsonl")):
    codec, run = os.path.basename(f)[:-6].split("-run")
    files.append((1.0, codec, run, f))
order = ["onebit", "maxmin", "fp16"]
print("| link Gbit/s | codec | run | size | qccl ms | best uncompressed ms | x_best | predicted / measured | model break-even Gbit/s | fitted link Gbit/s | checked, wrong |")
print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|")
for rate, codec, run, f in sorted(files, key=lambda x: (x[0], order.index(x[1]), x[2])):
    rows, model, fit = load(f)
    for size in sorted(rows):
        r, m = rows[size], model.get(size)
        be = m["breakeven_gbit"]
        be = f"{be:.1f}" if be is not None else ("any rate" if m.get("breakeven_any_rate") else "never")
        print(f"| {rate} | {codec}{'4' if codec == 'maxmin' else ''} | {run} | {size >> 20} MiB | {r['time_s'] * 1e3:.1f} | "
              f"{r['best_uncompressed_time_s'] * 1e3:.1f} | {r['speedup_vs_best']:.2f} | "
              f"{m['predicted_over_measured']:.2f} | {be} | {fit['link_gbit']:.3f} | "
              f"{'yes' if r['checked'] else 'no'}, {r['wrong']} |")
