#!/usr/bin/env python3
"""Paired comparison of the runs under DIR (default: this folder): per task and momentum-aware
variant, each configuration's mean test loss / fp32 over the seeds, and its paired (same seed)
difference from the first configuration named, with the standard error.
usage: paired.py [DIR] [BASE] (BASE: the reference subfolder, default allgather-g1)"""
import glob, json, math, os, sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
base = sys.argv[2] if len(sys.argv) > 2 else "allgather-g1"


def ratios(d):
    out = {}
    for f in glob.glob(os.path.join(here, d, "*-s*.json")):
        task, seed = os.path.basename(f)[:-5].rsplit("-s", 1)
        res = {r["variant"]: r for r in json.load(open(f))["results"]}
        for v, r in res.items():
            if v != "fp32" and "test_loss" in r and "test_loss" in res["fp32"]:
                acc = None
                if r.get("test_acc") is not None and res["fp32"].get("test_acc") is not None:
                    acc = res["fp32"]["test_acc"] - r["test_acc"]  # percent already
                out.setdefault((task, v), {})[int(seed)] = (r["test_loss"] / res["fp32"]["test_loss"], acc)
    return out


configs = sorted(d for d in os.listdir(here) if os.path.isdir(os.path.join(here, d)))
data = {c: ratios(c) for c in configs}
ref = data.get(base, {})
print(f"| task | variant | config | seeds | loss / fp32: mean | min-max | fp32 acc - acc, points | minus {base}, paired | standard error |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for key in sorted(ref):
    for c in configs:
        cur = data[c].get(key, {})
        seeds = sorted(set(cur) & set(ref[key]))
        if not seeds:
            continue
        r = [cur[s][0] for s in seeds]
        accs = [cur[s][1] for s in seeds if cur[s][1] is not None]
        acc = f"{sum(accs) / len(accs):+.2f}" if accs else ""
        d = [cur[s][0] - ref[key][s][0] for s in seeds]
        m = sum(d) / len(d)
        se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else float("nan")
        diff = "" if c == base else f"{m:+.4f}"
        sef = "" if c == base else f"{se:.4f}"
        print(f"| {key[0]} | {key[1]} | {c} | {len(seeds)} | {sum(r) / len(r):.3f} | {min(r):.3f}-{max(r):.3f} | {acc} | {diff} | {sef} |")
