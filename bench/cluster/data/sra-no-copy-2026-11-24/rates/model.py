#!/usr/bin/env python3
"""The alpha-beta model against the measured time after the out-of-place change: sweep-{rate}-{codec}.jsonl
(run.sh: 250mbit, 500mbit, 2.5gbit; -n 3 -w 1) and the 1 Gbit/s runs {codec}-run{1,2}.jsonl (-n 5 -w 1, from
../after/), all `qccl-bench allreduce --json -c 1` on 4 emulated hosts. Prints predicted / measured per row."""
import glob
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
RATES = {"250mbit": 0.25, "500mbit": 0.5, "1gbit": 1.0, "2.5gbit": 2.5}
files = []
for f in glob.glob(os.path.join(here, "sweep-*.jsonl")):
    _, rate, codec = os.path.basename(f)[:-6].split("-")
    files.append((RATES[rate], codec, "1", f))
for f in glob.glob(os.path.join(here, "*-run*.jsonl")):
    codec, run = os.path.basename(f)[:-6].split("-run")
    files.append((1.0, codec, run, f))
print("| link Gbit/s | codec | run | size | qccl ms | best uncompressed ms | x_best | predicted / measured | fitted link Gbit/s | checked, wrong |")
print("|---:|---|---|---|---:|---:|---:|---:|---:|---|")
for rate, codec, run, f in sorted(files, key=lambda x: (x[0], x[1], x[2])):
    rows, model, fit = {}, {}, None
    for line in open(f):
        r = json.loads(line)
        if r.get("model") == "fit":
            fit = r
        elif r.get("model") == "row":
            model[r["size"]] = r
        else:
            rows[r["size"]] = r
    for size in sorted(rows):
        r, m = rows[size], model[size]
        print(f"| {rate} | {codec}{'4' if codec == 'maxmin' else ''} | {run} | {size >> 20} MiB | {r['time_s'] * 1e3:.1f} | "
              f"{r['best_uncompressed_time_s'] * 1e3:.1f} | {r['speedup_vs_best']:.2f} | {m['predicted_over_measured']:.2f} | "
              f"{fit['link_gbit']:.3f} | {'yes' if r['checked'] else 'no'}, {r['wrong']} |")
