#!/usr/bin/env python3
"""usage: summarize.py [DIR] -- run.sh's jobs per torch version (t1: 1.13, t2: 2.x): per variant the
median step over the batch-1 rounds, its ratio to (the same job's compute floor + plain onebit's
wire at line rate), x_best (the faster of gloo fp32 and torch's fp16 hook in the same job), CPU per
rank and step; then the batch-8 jobs (1 Gbit/s: ratio to floor + wire; unshaped: ratio to gloo fp32)."""
import glob, json, os, statistics as st, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def load(f):
    j = json.load(open(f))
    return j, {r["variant"]: r for r in j["results"]}


for t in ("t1", "t2"):
    rows, version = {}, "?"
    for f in sorted(glob.glob(os.path.join(d, t, "r*", "b1_1gbit.json"))):
        j, res = load(f)
        version = j.get("torch", version)
        floor = res["compute"]["median_s"]
        wire = 8 * res["qccl-onebit"]["qccl_bytes_sent_per_step"] / 1e9
        best = min(res[v]["median_s"] for v in ("fp32", "fp16") if v in res)
        for v, r in res.items():
            q = v.startswith("qccl")
            rows.setdefault(v, []).append((r["median_s"] * 1e3, r["median_s"] / (floor + wire) if q else None,
                                           best / r["median_s"] if q else None, r.get("cpu_s", float("nan")) * 1e3))
    print(f"\n{t} (torch {version}), batch 1, 1 Gbit/s, {len(rows.get('compute', []))} jobs\n")
    print("| variant | step ms, median (range) | / (floor + wire), median (range) | x_best, median (range) | CPU per rank ms |")
    print("|---|---:|---:|---:|---:|")
    for v, xs in rows.items():
        s = [x[0] for x in xs]
        cell = lambda k: "-" if xs[0][k] is None else f"{st.median(x[k] for x in xs):.2f} ({min(x[k] for x in xs):.2f}-{max(x[k] for x in xs):.2f})"
        print(f"| {v} | {st.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | {cell(1)} | {cell(2)} | {st.median(x[3] for x in xs):.0f} |")
    for rate in ("1gbit", "none"):
        for f in glob.glob(os.path.join(d, t, "b8", f"b8_{rate}.json")):
            _, res = load(f)
            floor, gloo = res["compute"]["median_s"], res["fp32"]["median_s"]
            wire = 8 * res["qccl-onebit"]["qccl_bytes_sent_per_step"] / 1e9 if rate == "1gbit" else 0.0
            parts = [f"floor {floor * 1e3:.0f} ms", f"gloo fp32 {gloo * 1e3:.0f} ms"]
            for v in ("qccl-onebit", "qccl-maxmin:4", "qccl-onebit+m"):
                if v in res:
                    m = res[v]["median_s"]
                    rel = f"{m / (floor + wire):.2f} x (floor + wire)" if rate == "1gbit" else f"{m / gloo:.2f} x gloo"
                    parts.append(f"{v} {m * 1e3:.0f} ms = {rel}")
            print(f"\nbatch 8, {rate}: " + "; ".join(parts))
