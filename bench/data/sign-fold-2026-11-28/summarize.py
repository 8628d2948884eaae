#!/usr/bin/env python3
"""usage: summarize.py DIR -- per codec and side (old/new): median call time, encode/decode CPU per
rank and call, x_best, rows checked and wrong, from ab.sh's JSON lines."""
import glob, json, os, statistics, sys

d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
    side, tag, _ = os.path.basename(f)[:-6].split("-")
    for line in open(f):
        j = json.loads(line)
        if "time_s" not in j:
            continue
        rows.setdefault((tag, side), []).append(j)
print("| codec | build | runs | call ms (each run) | median | encode ms | decode ms | process CPU ms | x MPI_Allreduce | checked / wrong |")
print("|---|---|---:|---|---:|---:|---:|---:|---:|---|")
for (tag, side), js in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] != "old")):
    t = [j["time_s"] * 1e3 for j in js]
    enc = statistics.median(j["cpu"]["encode_s"] * 1e3 for j in js)
    dec = statistics.median(j["cpu"]["decode_s"] * 1e3 for j in js)
    proc = statistics.median(j["cpu"]["process_s"] * 1e3 for j in js)
    x = statistics.median(j["speedup_vs_mpi"] for j in js)
    chk = sum(1 for j in js if j.get("checked"))
    wrong = sum(j.get("wrong") or 0 for j in js)
    print(f"| {tag} | {side} | {len(js)} | {', '.join(f'{v:.1f}' for v in t)} | {statistics.median(t):.1f} | "
          f"{enc:.1f} | {dec:.1f} | {proc:.1f} | {x:.2f} | {chk} / {wrong} |")
