#!/usr/bin/env python3
"""The tables of bench/RESULTS.md "4 hosts x 1 Gbit/s again: AVX-512 machine, machine-wide CPU share
in the model" from {onebit,maxmin,fp16}-run{1,2}.jsonl (qccl-bench allreduce --json -c 1 on the
emulated cluster). Per row: median of the run's 5 timed calls (slowest rank); x_best against the
fastest uncompressed path timed in the same run; wire busbw = wire bytes per rank / time, against
the nominal 1 Gbit/s and against the link rate the run's own fp32 ring rows fit."""
import glob
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
rows, fits, model = {}, {}, {}
for f in sorted(glob.glob(os.path.join(here, "*-run*.jsonl"))):
    codec, run = os.path.basename(f)[:-6].split("-run")
    for line in open(f):
        r = json.loads(line)
        if r.get("model") == "fit":
            fits[(codec, run)] = r
        elif r.get("model") == "row":
            model[(codec, run, r["size"])] = r
        else:
            rows[(codec, run, r["size"])] = r
print("| codec | size | run | ran | qccl ms | best uncompressed ms (name) | x_best | wire MB/rank | wire busbw, % of 1 Gbit/s | % of the fitted link | predicted / measured | checked, wrong |")
print("|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---|")
for (codec, run, size), r in sorted(rows.items(), key=lambda kv: (["onebit", "maxmin", "fp16"].index(kv[0][0]), kv[0][2], kv[0][1])):
    fit = fits[(codec, run)]
    m = model.get((codec, run, size))
    gbit = r["wire_bytes"] * 8 / r["time_s"] / 1e9
    print(f"| {codec}{'4' if codec == 'maxmin' else ''} | {size >> 20} MiB | {run} | {r['algo_ran']} | {r['time_s'] * 1e3:.1f} | "
          f"{r['best_uncompressed_time_s'] * 1e3:.1f} ({r['best_uncompressed']}) | {r['speedup_vs_best']:.2f} | "
          f"{r['wire_bytes'] / 1e6:.2f} | {100 * gbit:.0f}% | {100 * gbit / fit['link_gbit']:.0f}% | "
          f"{m['predicted_over_measured']:.2f} | {'yes' if r['checked'] else 'no'}, {r['wrong']} |")
print()
for (codec, run), fit in sorted(fits.items()):
    print(f"fit {codec} run {run}: alpha {fit['alpha_s'] * 1e3:.3f} ms, link {fit['link_gbit']:.3f} Gbit/s")
