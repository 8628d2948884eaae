#!/usr/bin/env python3
"""Paired comparison: for each folder given, per task and variant, the mean test loss / fp32 over
the seeds (range), fp32's accuracy minus the variant's, and the paired (same seed) difference of the
ratio from the reference folder's same variant, with its standard error. fp32's losses must be the
same in both folders (checked).
usage: compare.py --ref REF [--ref-variant-suffix +m] FOLDER..."""
import argparse, glob, json, math, os

ap = argparse.ArgumentParser()
ap.add_argument("--ref", required=True, help="folder (or folders, comma-separated) of the reference runs")
ap.add_argument("folders", nargs="+")
args = ap.parse_args()


def load(folder):
    out = {}
    for f in glob.glob(os.path.join(folder, "*-s*.json")):
        task, seed = os.path.basename(f)[:-5].rsplit("-s", 1)
        res = {r["variant"]: r for r in json.load(open(f))["results"]}
        fp = res["fp32"]
        for v, r in res.items():
            if v != "fp32" and "test_loss" in r:
                acc = None if r.get("test_acc") is None else fp["test_acc"] - r["test_acc"]
                out.setdefault((task, v), {})[int(seed)] = (r["test_loss"] / fp["test_loss"], acc, fp["test_loss"])
    return out


ref = {}
for d in args.ref.split(","):
    for k, v in load(d).items():
        ref.setdefault(k, {}).update(v)
print("| folder | task | variant | seeds | loss / fp32: mean | range | fp32 acc - acc, points | minus reference, paired | standard error |")
print("|---|---|---|---:|---:|---|---:|---:|---:|")
for folder in args.folders:
    for (task, v), runs in sorted(load(folder).items()):
        seeds = sorted(runs)
        r = [runs[s][0] for s in seeds]
        accs = [runs[s][1] for s in seeds if runs[s][1] is not None]
        acc = f"{sum(accs) / len(accs):+.2f}" if accs else ""
        base = ref.get((task, v), {})
        common = [s for s in seeds if s in base]
        for s in common:
            if base[s][2] != runs[s][2]:
                raise SystemExit(f"{folder} {task} seed {s}: fp32's loss differs from the reference's")
        d = [runs[s][0] - base[s][0] for s in common]
        m = sum(d) / len(d) if d else float("nan")
        se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else float("nan")
        diff = f"{m:+.4f} ({len(d)})" if d else ""
        print(f"| {os.path.basename(folder.rstrip('/'))} | {task} | {v} | {len(seeds)} | {sum(r) / len(r):.3f} | "
              f"{min(r):.3f}-{max(r):.3f} | {acc} | {diff} | {se:.4f} |" if d else
              f"| {os.path.basename(folder.rstrip('/'))} | {task} | {v} | {len(seeds)} | {sum(r) / len(r):.3f} | "
              f"{min(r):.3f}-{max(r):.3f} | {acc} | | |")
