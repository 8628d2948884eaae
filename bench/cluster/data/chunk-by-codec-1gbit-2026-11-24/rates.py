#!/usr/bin/env python3
"""bench/RESULTS.md "Pipeline chunks by codec", other rates: rates-after-{rate}-{codec}.jsonl (the
new default chunks, one run each, -n 3 -w 1) against the same command before the change
(../xbest-4host-1gbit-2026-11-24/sweep-{rate}-{codec}.jsonl, 4 MiB chunks, one run each)."""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
before_dir = os.path.join(here, "..", "xbest-4host-1gbit-2026-11-24")


def load(path):
    rows, model = {}, {}
    for line in open(path):
        r = json.loads(line)
        if r.get("model") == "row":
            model[r["size"]] = r["predicted_over_measured"]
        elif "model" not in r:
            rows[r["size"]] = r
    return rows, model


print("| link | codec | size | 4 MiB chunks ms (x_best, pred/meas) | by-codec chunks ms (x_best, pred/meas) | after vs before | checked, wrong (after) |")
print("|---|---|---|---|---|---:|---|")
for rate in ["250mbit", "500mbit", "2.5gbit"]:
    for codec in ["maxmin", "fp16"]:
        b, bm = load(os.path.join(before_dir, f"sweep-{rate}-{codec}.jsonl"))
        a, am = load(os.path.join(here, f"rates-after-{rate}-{codec}.jsonl"))
        for size in sorted(a):
            x, y = b[size], a[size]
            print(f"| {rate} | {codec}{'4' if codec == 'maxmin' else ''} | {size >> 20} MiB | "
                  f"{x['time_s'] * 1e3:.1f} ({x['speedup_vs_best']:.2f}x, {bm[size]:.2f}) | "
                  f"{y['time_s'] * 1e3:.1f} ({y['speedup_vs_best']:.2f}x, {am[size]:.2f}) | "
                  f"{x['time_s'] / y['time_s']:.2f}x | {'yes' if y['checked'] else 'no'}, {y['wrong']} |")
