#!/usr/bin/env python3
"""Tables of bench/RESULTS.md, "A warm-up of uncompressed steps with optimizer=": per variant, the
ratio of its final test loss to fp32's of the same seed, with and without HookState(warmup_steps=).

    python3 bench/convergence/data/hook-warmup-2026-11-24/pool.py
"""
import glob
import json
import os
import statistics as st

HERE = os.path.dirname(os.path.abspath(__file__))


def load(sub, task="*"):
    out = {}
    for f in glob.glob(os.path.join(HERE, sub, task + "-s*.json")):
        j = json.load(open(f))
        seed = j["meta"]["seed"]
        r = {x["variant"]: x for x in j["results"]}
        for v, x in r.items():
            if v == "fp32":
                continue
            out.setdefault(v, {})[seed] = (x["test_loss"] / r["fp32"]["test_loss"],
                                           (r["fp32"].get("test_acc") or 0.0) - (x.get("test_acc") or 0.0),
                                           x["replicas_identical"])
    return out


def row(name, v, d):
    seeds = sorted(d)
    rs = [d[s][0] for s in seeds]
    se = st.stdev(rs) / len(rs) ** 0.5 if len(rs) > 1 else 0.0
    print(f"| {name} | {v} | {len(rs)} | {st.mean(rs):.3f} ({st.median(rs):.3f}) | {se:.3f} | "
          f"{sum(x > 1 for x in rs)} | {st.mean(d[s][1] for s in seeds):+.2f} | "
          f"{'yes' if all(d[s][2] for s in seeds) else 'NO'} |")


def paired(label, v, a, b):
    common = sorted(set(a) & set(b))
    diffs = [b[s][0] - a[s][0] for s in common]
    print(f"- {label}, {v}, paired over {len(common)} seeds: {st.mean(diffs):+.3f} "
          f"(standard error {st.stdev(diffs) / len(diffs) ** 0.5:.3f}), lower in {sum(x < 0 for x in diffs)}")


print("| run | variant | seeds | test loss / fp32: mean (median) | standard error | seeds above 1 | "
      "fp32 acc - acc, points | replicas identical |")
print("|---|---|---:|---:|---:|---:|---:|---|")
# Without a warm-up, from the code before (every change since is tested bit-identical; digits seeds 0-2
# there equal those of digits-nowarmup-s0-19).
FUSED = "../momentum-allgather-vs-sra/fused"
runs = [("digits, no warm-up", "digits-nowarmup-s0-19", "*"), ("digits, warm-up 40", "digits-warmup40-s0-19", "*"),
        ("digits, warm-up 30", "digits-warmup30-s0-9", "*"), ("cnn, no warm-up", "cnn-nowarmup-s0-9", "*"),
        ("cnn, warm-up 40", "cnn-warmup40-s0-9", "*"), ("ts-sgdm, no warm-up", FUSED, "ts-sgdm"),
        ("ts-sgdm, warm-up 30", "ts-warmup30-s0-2", "ts-sgdm"), ("ts-nesterov, no warm-up", FUSED, "ts-nesterov"),
        ("ts-nesterov, warm-up 30", "ts-warmup30-s0-2", "ts-nesterov")]
data = {(sub, task): load(sub, task) for _, sub, task in runs}
for name, sub, task in runs:
    for v in sorted(data[(sub, task)]):
        if v == "none":
            continue
        row(name, v, data[(sub, task)][v])
print()
for v in ("onebit+m", "signscale+m"):
    paired("digits, warm-up 40 - none", v, data[("digits-nowarmup-s0-19", "*")][v], data[("digits-warmup40-s0-19", "*")][v])
paired("cnn, warm-up 40 - none", "onebit+m", data[("cnn-nowarmup-s0-9", "*")]["onebit+m"],
       data[("cnn-warmup40-s0-9", "*")]["onebit+m"])
