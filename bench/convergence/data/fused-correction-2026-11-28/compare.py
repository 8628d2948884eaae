#!/usr/bin/env python3
"""Test losses of two result folders of bench/convergence/run.py, per task, seed and variant: how
many are bit-identical, and the ratio of the rest. usage: compare.py A_DIR B_DIR"""
import glob, json, os, sys

a_dir, b_dir = sys.argv[1], sys.argv[2]
same = differ = 0
for fa in sorted(glob.glob(os.path.join(a_dir, "*-s*.json"))):
    fb = os.path.join(b_dir, os.path.basename(fa))
    if not os.path.exists(fb):
        continue
    ra = {r["variant"]: r for r in json.load(open(fa))["results"]}
    rb = {r["variant"]: r for r in json.load(open(fb))["results"]}
    for v in sorted(set(ra) & set(rb)):
        la, lb = ra[v]["test_loss"], rb[v]["test_loss"]
        if la == lb:
            same += 1
        else:
            differ += 1
            print(f"{os.path.basename(fa)[:-5]:18s} {v:12s} {la:.6f} vs {lb:.6f} ({lb / la:.4f}x)")
print(f"bit-identical test losses: {same} of {same + differ}")
