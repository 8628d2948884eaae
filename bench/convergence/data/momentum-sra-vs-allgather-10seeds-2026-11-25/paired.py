#!/usr/bin/env python3
"""Paired comparison of sra against allgather for the momentum-aware 1-bit variants: per task and
variant, the mean test loss / fp32 under each algorithm and the paired (same seed) difference with
its standard error. usage: paired.py [DIR] (DIR holds allgather/ and sra/; default: this folder)"""
import glob, json, math, os, sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def ratios(d):
    out = {}
    for f in glob.glob(os.path.join(here, d, "*-s*.json")):
        task, seed = os.path.basename(f)[:-5].rsplit("-s", 1)
        res = {r["variant"]: r["test_loss"] for r in json.load(open(f))["results"]}
        for v, loss in res.items():
            if v != "fp32":
                out.setdefault((task, v), {})[int(seed)] = loss / res["fp32"]
    return out


ag, sra = ratios("allgather"), ratios("sra")
print("| task | variant | seeds | allgather: mean | sra: mean | sra - allgather, paired | standard error |")
print("|---|---|---:|---:|---:|---:|---:|")
for key in sorted(ag):
    seeds = sorted(set(ag[key]) & set(sra.get(key, {})))
    if not seeds:
        continue
    d = [sra[key][s] - ag[key][s] for s in seeds]
    m = sum(d) / len(d)
    se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else float("nan")
    ma = sum(ag[key][s] for s in seeds) / len(seeds)
    ms = sum(sra[key][s] for s in seeds) / len(seeds)
    print(f"| {key[0]} | {key[1]} | {len(seeds)} | {ma:.3f} | {ms:.3f} | {m:+.4f} | {se:.4f} |")
