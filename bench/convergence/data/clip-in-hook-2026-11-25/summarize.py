#!/usr/bin/env python3
"""Tables for run.sh's folders: per task and variant, the mean over seeds of the final test loss over
the same seed's fp32 (clipped in the loop), its per-seed range, where there is a `none` row (qccl
without compression, clipped by the hook's rule) the mean of loss over that, the accuracy gap for
digits, the median norm the clipping saw (the hook's: each rank's own gradient, limit clip *
sqrt(4) = 0.2; the loop's: the averaged direction, limit 0.1) and whether the replicas stayed
identical. usage: summarize.py [DIR]"""
import glob, json, os, statistics as st, sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
loop = os.path.join(here, "..", "momentum-no-reconcile-2026-11-25", "clip-reconcile")
for name, d in [("loop clip, regression (previous data)", loop)] + [
        (os.path.basename(p), p) for p in sorted(glob.glob(os.path.join(here, "*"))) if os.path.isdir(p)]:
    rows = {}
    for f in sorted(glob.glob(os.path.join(d, "*-s*.json"))):
        j = json.load(open(f))
        res = {r["variant"]: r for r in j["results"]}
        fp, none = res["fp32"], res.get("none")
        for v, r in res.items():
            rows.setdefault((j["meta"]["task"], v), []).append((
                r["test_loss"] / fp["test_loss"],
                r["test_loss"] / none["test_loss"] if none else None,
                (fp["test_acc"] - r["test_acc"]) if fp.get("test_acc") is not None else None,
                r.get("grad_norm_median"), r["replicas_identical"]))
    print(f"\n{name} ({d})")
    print("| task | variant | loss / fp32, mean | per seed, range | loss / none, mean | fp32 acc - acc, points | "
          "clip saw, median norm | seeds | replicas identical |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for (task, v), xs in rows.items():
        a = [x[0] for x in xs]
        n = [x[1] for x in xs if x[1] is not None]
        acc = [x[2] for x in xs if x[2] is not None]
        norms = [x[3] for x in xs if x[3] is not None]
        print(f"| {task} | {v} | {st.mean(a):.3f} | {min(a):.3f}-{max(a):.3f} | "
              f"{st.mean(n):.3f} | " if n else f"| {task} | {v} | {st.mean(a):.3f} | {min(a):.3f}-{max(a):.3f} | - | ",
              end="")
        print(f"{st.mean(acc):+.2f} | " if acc else "- | ", end="")
        print(f"{st.median(norms):.3f} | " if norms else "- | ", end="")
        print(f"{len(xs)} | {'yes' if all(x[4] for x in xs) else 'NO'} |")
