#!/usr/bin/env python3
"""Table of bench/data/one-host-codecs-2026-11-24: auto with a codec on 4 local ranks, with the
default (QCCL_LOCAL_COMPRESS=0: summed exactly in the shared segment) and with QCCL_LOCAL_COMPRESS=1
(compressed as asked), against the best uncompressed path of the same run. Medians over runs."""
import glob
import json
import os
import statistics

here = os.path.dirname(os.path.abspath(__file__))
rows = {}
for path in sorted(glob.glob(os.path.join(here, "*-lc[01]-run*.jsonl"))):
    tr, codec, lc, _ = os.path.basename(path).split("-")
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "time_s" not in r or "collective" not in r:
            continue  # the model line
        rows.setdefault((tr, codec, r["size"]), {}).setdefault(lc, []).append(r)

print("| transport | codec | size | runs | default: ran | default us | QCCL_LOCAL_COMPRESS=1: ran | compressed us "
      "| best uncompressed us (by) | default x_best | compressed x_best | compressed / default | checked, wrong |")
print("|---|---|---:|---:|---|---:|---|---:|---|---:|---:|---:|---|")
for (tr, codec, size), d in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
    a, b = d.get("lc0", []), d.get("lc1", [])
    if not a or not b:
        continue
    ta = statistics.median(r["time_s"] for r in a) * 1e6
    tb = statistics.median(r["time_s"] for r in b) * 1e6
    best = statistics.median(r["best_uncompressed_time_s"] for r in a + b) * 1e6
    by = sorted({r["best_uncompressed"] for r in a + b})
    checked = all(r["checked"] for r in a + b)
    wrong = sum(r["wrong"] or 0 for r in a + b)
    ran_a = "/".join(sorted({r["algo_ran"] for r in a}))
    ran_b = "/".join(sorted({r["algo_ran"] for r in b}))
    size_s = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    print(f"| {tr} | {codec} | {size_s} | {len(a)} | {ran_a} | {ta:.1f} | {ran_b} | {tb:.1f} | {best:.1f} ({', '.join(by)}) "
          f"| {best / ta:.2f} | {best / tb:.2f} | {tb / ta:.2f} | {'all' if checked else 'NOT all'}, {wrong} |")
