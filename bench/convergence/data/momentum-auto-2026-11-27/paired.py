#!/usr/bin/env python3
"""Paired comparison of two runs of the suite (here reconcile=True as A, reconcile=False as B): per
task and variant, the mean test loss / fp32 on each side and the paired (same seed) difference B - A
with its standard error, and whether fp32 itself was bit-identical on both sides.
usage: paired.py A_DIR B_DIR"""
import glob, json, math, os, sys


def load(d):
    out = {}
    for f in glob.glob(os.path.join(d, "*-s*.json")):
        task, seed = os.path.basename(f)[:-5].rsplit("-s", 1)
        out[(task, int(seed))] = {r["variant"]: r["test_loss"] for r in json.load(open(f))["results"]}
    return out


before, after = load(sys.argv[1]), load(sys.argv[2])  # A, B
common = sorted(set(before) & set(after))
same_fp32 = sum(before[k]["fp32"] == after[k]["fp32"] for k in common)
print(f"{len(common)} task-seed pairs; fp32 bit-identical on both sides in {same_fp32}")
print("| task | variant | seeds | A: mean | B: mean | B - A, paired | standard error |")
print("|---|---|---:|---:|---:|---:|---:|")
keys = sorted({(t, v) for (t, s) in common for v in after[(t, s)] if v != "fp32"})
for task, v in keys:
    seeds = [s for (t, s) in common if t == task and v in before[(t, s)] and v in after[(t, s)]]
    rb = [before[(task, s)][v] / before[(task, s)]["fp32"] for s in seeds]
    ra = [after[(task, s)][v] / after[(task, s)]["fp32"] for s in seeds]
    d = [a - b for a, b in zip(ra, rb)]
    m = sum(d) / len(d)
    se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else float("nan")
    print(f"| {task} | {v} | {len(seeds)} | {sum(rb) / len(rb):.3f} | {sum(ra) / len(ra):.3f} | {m:+.4f} | {se:.4f} |")
