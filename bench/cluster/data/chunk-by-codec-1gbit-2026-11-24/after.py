#!/usr/bin/env python3
"""bench/RESULTS.md "Pipeline chunks by codec": after-{codec}-run{1,2}.jsonl, the default chunks
(QCCL_CHUNK_BYTES unset) with every uncompressed baseline timed in the same run (gloo included)."""
import glob
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
print("| codec | size | run | ran | qccl ms | best uncompressed ms (name) | x_best | wire busbw, % of 1 Gbit/s | predicted / measured | checked, wrong |")
print("|---|---|---|---|---:|---|---:|---:|---:|---|")
order = ["onebit", "maxmin", "fp16"]
for f in sorted(glob.glob(os.path.join(here, "after-*-run*.jsonl")),
                key=lambda p: (order.index(os.path.basename(p).split("-")[1]), p)):
    codec, run = os.path.basename(f)[len("after-"):-6].split("-run")
    rows, model = [], {}
    for line in open(f):
        r = json.loads(line)
        if r.get("model") == "row":
            model[r["size"]] = r["predicted_over_measured"]
        elif "model" not in r:
            rows.append(r)
    for r in rows:
        print(f"| {codec}{'4' if codec == 'maxmin' else ''} | {r['size'] >> 20} MiB | {run} | {r['algo_ran']} | "
              f"{r['time_s'] * 1e3:.1f} | {r['best_uncompressed_time_s'] * 1e3:.1f} ({r['best_uncompressed']}) | "
              f"{r['speedup_vs_best']:.2f} | {100 * r['wire_bytes'] * 8 / r['time_s'] / 1e9:.0f}% | "
              f"{model[r['size']]:.2f} | {'yes' if r['checked'] else 'no'}, {r['wrong']} |")
