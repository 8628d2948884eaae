#!/usr/bin/env python3
"""Pools the cnn-sgdm runs of seeds 0-19 (bench/RESULTS.md, "Twenty seeds"): per variant the mean,
median and standard error of (final test loss / fp32's on the same seed), fp32's accuracy minus the
variant's, and paired differences. Seeds 0-9: cnn-signscale-10seeds (bucket 512), cnn-bucket64-10seeds,
cnn-noise-floor-10seeds; seeds 10-19: cnn-seeds10-19 (bucket 512, with `none`), cnn-seeds10-19-bucket64."""
import glob
import json
import math
import os
import statistics as st

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def load(name):
    out = {}
    for f in sorted(glob.glob(os.path.join(D, name, "cnn-sgdm-s*.json"))):
        seed = int(f.rsplit("-s", 1)[1].split(".")[0])
        out[seed] = {r["variant"]: (r["test_loss"], r["test_acc"]) for r in json.load(open(f))["results"]}
    return out


def pooled(parts, variant):
    loss, acc = {}, {}
    for d in parts:
        for s, v in d.items():
            if variant in v:
                loss[s] = v[variant][0] / v["fp32"][0]
                acc[s] = v["fp32"][1] - v[variant][1]
    return loss, acc


b512 = [load("cnn-signscale-10seeds"), load("cnn-seeds10-19")]
b64 = [load("cnn-bucket64-10seeds"), load("cnn-seeds10-19-bucket64")]
none = [load("cnn-noise-floor-10seeds"), load("cnn-seeds10-19")]
rows = {"none (fp32 summed by qccl)": pooled(none, "none")}
for v in ("onebit+m", "signscale+m"):
    rows[v + ", bucket 512"] = pooled(b512, v)
    rows[v + ", bucket 64"] = pooled(b64, v)
print("| variant | seeds | test loss / fp32: mean (median) | standard error | fp32 acc - acc, points: mean |")
print("|---|---:|---:|---:|---:|")
for name, (loss, acc) in rows.items():
    x = [loss[s] for s in sorted(loss)]
    print(f"| {name} | {len(x)} | {st.mean(x):.3f} ({st.median(x):.3f}) | {st.stdev(x) / math.sqrt(len(x)):.3f} "
          f"| {st.mean(acc.values()):+.2f} |")
print()
ref = rows["none (fp32 summed by qccl)"][0]
for v in ("onebit+m", "signscale+m"):
    a, b = rows[v + ", bucket 512"][0], rows[v + ", bucket 64"][0]
    for label, x, y in (("bucket 64 - bucket 512", b, a), ("bucket 512 - none", a, ref), ("bucket 64 - none", b, ref)):
        d = [x[s] - y[s] for s in sorted(x) if s in y]
        print(f"- {v}, {label}, paired over {len(d)} seeds: {st.mean(d):+.3f} (standard error "
              f"{st.stdev(d) / math.sqrt(len(d)):.3f})")
