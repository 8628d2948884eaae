#!/usr/bin/env python3
"""The model (codec_cpu_s: the codec's throughput on rank 0 alone, from memory, times the CPU share)
against the same rows with the codec's CPU at every rank's throughput at once (codec_cpu_all_s,
the most memory contention the ranks can see), both pipelined with the same wire time and
transport CPU: predicted / measured per row, and the 64 MiB rows within 20% for each.
usage: codec_cpu.py FOLDER (sweep-{rate}-{codec}.jsonl from run.sh, qccl-bench from 2026-11-29 on)"""
import glob
import json
import os
import sys

RATES = {"250mbit": 0.25, "500mbit": 0.5, "1gbit": 1.0, "2.5gbit": 2.5}
ORDER = ["onebit", "maxmin", "fp16"]
folder = sys.argv[1]


def pipelined(wire, cpu, rounds):
    k = max(1.0, rounds)
    return max(wire, cpu) + min(wire, cpu) / k


files = []
for f in glob.glob(os.path.join(folder, "sweep-*.jsonl")):
    _, rate, codec = os.path.basename(f)[:-6].split("-")
    files.append((RATES[rate], codec, f))
print("| link Gbit/s | codec | size | qccl ms | wire ms | transport CPU ms | codec CPU ms: alone x share / at once | "
      "encode, decodeAdd GB/s: alone / at once | **predicted / measured** | at once / measured | checked, wrong |")
print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
hits = {"new": 0, "old": 0}
total = 0
for rate, codec, f in sorted(files, key=lambda x: (x[0], ORDER.index(x[1]))):
    rows, model = {}, {}
    for line in open(f):
        r = json.loads(line)
        if r.get("model") == "row":
            model[r["size"]] = r
        elif "collective" in r:
            rows[r["size"]] = r
    for size in sorted(rows):
        r, m = rows[size], model.get(size)
        if m is None or "codec_cpu_all_s" not in m:
            continue
        transport = m["cpu_s"] - m["codec_cpu_s"]
        old = pipelined(m["wire_s"], m["codec_cpu_all_s"] + transport, m["chunk_rounds"]) / r["time_s"]
        new = m["predicted_over_measured"]
        if size == 64 << 20:
            total += 1
            hits["new"] += abs(new - 1) <= 0.2
            hits["old"] += abs(old - 1) <= 0.2
        mark = lambda x: f"**{x:.2f}**" if abs(x - 1) > 0.2 else f"{x:.2f}"
        print(f"| {rate} | {codec}{'4' if codec == 'maxmin' else ''} | {size >> 20} MiB | {r['time_s'] * 1e3:.1f} | "
              f"{m['wire_s'] * 1e3:.1f} | {transport * 1e3:.1f} | {m['codec_cpu_s'] * 1e3:.1f} / "
              f"{m['codec_cpu_all_s'] * 1e3:.1f} | {r['encode_gbps']:.1f}, {r['decode_gbps']:.1f} / "
              f"{m['encode_gbps_all']:.2f}, {m['decode_gbps_all']:.2f} | {mark(new)} | "
              f"{mark(old)} | {'yes' if r['checked'] else 'no'}, {r['wrong']} |")
print(f"\n64 MiB rows within 20%: {hits['new']} of {total} (the model), {hits['old']} of {total} with the codec at once")
