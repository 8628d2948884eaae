#!/usr/bin/env python3
"""The alpha-beta model against the measured time at every shaped rate (sweep-{rate}-{codec}.jsonl
from run.sh): per row the measured time, the model's prediction over it, its two parts (wire time:
the replayed messages for sra rows, the ring's line for fp16's ring; CPU: the codec's plus the
replay's transport CPU, both times the CPU share), the share of the
link the replay moved its bytes at, the previous model's prediction (ring line + CPU, added) over
the measured time, x_best and the check. usage: sweep.py [FOLDER]"""
import glob
import json
import os
import sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
RATES = {"250mbit": 0.25, "500mbit": 0.5, "1gbit": 1.0, "2.5gbit": 2.5}
ORDER = ["onebit", "maxmin", "fp16"]
ROUNDS = {"sra": 2, "allgather": 1}


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
    files.append((RATES[rate], codec, f))
print("| link Gbit/s | codec | size | ran | qccl ms | predicted / measured | wire ms (from) | replay's share of the link | CPU ms (codec + transport) | rounds | previous model / measured | x_best | checked, wrong |")
print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
within = total = 0
for rate, codec, f in sorted(files, key=lambda x: (x[0], ORDER.index(x[1]))):
    rows, model, fit = load(f)
    for size in sorted(rows):
        r, m = rows[size], model.get(size)
        if m is None:
            print(f"| {rate} | {codec} | {size >> 20} MiB | {r['algo_ran']} | {r['time_s'] * 1e3:.1f} | no model row |")
            continue
        share = m["wire_probe_bytes"] * 8 / m["wire_s"] / (rate * 1e9)
        rounds = ROUNDS.get(m["algo_ran"], 2 * (r["nranks"] - 1))
        prev = (rounds * fit["alpha_s"] + r["wire_bytes"] * fit["beta_s_per_byte"] + m["codec_cpu_s"]) / r["time_s"]
        pm = m["predicted_over_measured"]
        cpu = m.get("cpu_s", m["codec_cpu_s"])  # the first sweep's model counted the codec alone
        if size == 64 << 20:
            total += 1
            within += abs(pm - 1) <= 0.2
        print(f"| {rate} | {codec}{'4' if codec == 'maxmin' else ''} | {size >> 20} MiB | {m['algo_ran']} | "
              f"{r['time_s'] * 1e3:.1f} | {'**%.2f**' % pm if abs(pm - 1) > 0.2 else '%.2f' % pm} | "
              f"{m['wire_s'] * 1e3:.1f} ({m['wire_from']}) | {share:.2f} | {cpu * 1e3:.1f} ({m['codec_cpu_s'] * 1e3:.1f} + {(cpu - m['codec_cpu_s']) * 1e3:.1f}) | "
              f"{m['chunk_rounds']} | {prev:.2f} | {r['speedup_vs_best']:.2f} | "
              f"{'yes' if r['checked'] else 'no'}, {r['wrong']} |")
print(f"\n64 MiB rows within 20%: {within} of {total}")
