"""Tables and plots of the convergence suite from the JSON files train.py writes (see run.py).

Per task and variant, over the paired seeds: the mean of (variant's final test loss / fp32's final
test loss of the same seed), its spread (min..max over the seeds), and for classification tasks the
mean of (fp32 accuracy - variant accuracy) in points with its spread.
"""

import glob
import json
import os
from typing import Any, Dict, List

import numpy as np


def _load(out: str, tasks: List[str], seeds: List[int]) -> Dict[str, Dict[int, Dict[str, Any]]]:
    runs: Dict[str, Dict[int, Dict[str, Any]]] = {}
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        if path.endswith("summary.json"):
            continue
        with open(path) as f:
            data = json.load(f)
        meta = data.get("meta", {})
        task, seed = meta.get("task"), meta.get("seed")
        if task not in tasks or seed not in seeds:
            continue
        slot = runs.setdefault(task, {}).setdefault(seed, {"meta": meta, "results": {}})
        if "steps" in meta:
            slot["meta"] = meta
        for r in data["results"]:
            slot["results"][r["variant"]] = r
    return runs


def _order(variants: List[str]) -> List[str]:
    base = ["fp32", "fp16", "powersgd"]
    rest = sorted((v for v in variants if v not in base), key=lambda v: (v.split("+")[0], "+" in v, v))
    return [v for v in base if v in variants] + rest


def report(out: str, tasks: List[str], seeds: List[int]) -> Dict[str, Any]:
    runs = _load(out, tasks, seeds)
    cells = []
    lines = ["| task | variant | test loss / fp32 (mean) | per seed | fp32 acc - acc, points (mean) | per seed | "
             "replicas identical |", "|---|---|---|---|---|---|---|"]
    for task in tasks:
        per_seed = runs.get(task, {})
        variants = _order(sorted({v for s in per_seed.values() for v in s["results"]}))
        for v in variants:
            cell = {"task": task, "variant": v, "seeds": []}
            for seed in sorted(per_seed):
                res = per_seed[seed]["results"]
                r, ref = res.get(v), res.get("fp32")
                if r is None:
                    continue
                if "error" in r or ref is None or "error" in ref:
                    cell["seeds"].append({"seed": seed, "error": r.get("error", "no fp32 run")})
                    continue
                entry = {"seed": seed, "ratio": r["test_loss"] / ref["test_loss"], "test_loss": r["test_loss"],
                         "replicas_identical": r["replicas_identical"],
                         "loss_fell": bool(np.mean(r["train_loss"][-10:]) < np.mean(r["train_loss"][:10]))}
                if r.get("test_acc") is not None:
                    entry["acc"] = r["test_acc"]
                    entry["acc_drop"] = ref["test_acc"] - r["test_acc"]
                cell["seeds"].append(entry)
            ok = [s for s in cell["seeds"] if "error" not in s]
            if ok:
                ratios = [s["ratio"] for s in ok]
                cell["ratio_mean"] = float(np.mean(ratios))
                cell["ratio_min"], cell["ratio_max"] = float(min(ratios)), float(max(ratios))
                drops = [s["acc_drop"] for s in ok if "acc_drop" in s]
                if drops:
                    cell["acc_drop_mean"] = float(np.mean(drops))
                    cell["acc_drop_min"], cell["acc_drop_max"] = float(min(drops)), float(max(drops))
            cells.append(cell)
            lines.append(_row(cell))
    summary = {"cells": cells}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for task in tasks:
        if task in runs:
            _plot(task, runs[task], os.path.join(out, f"{task}.png"))
    return summary


def _row(cell: Dict[str, Any]) -> str:
    errors = [s for s in cell["seeds"] if "error" in s]
    if "ratio_mean" not in cell:
        msg = errors[0]["error"] if errors else "no runs"
        return f"| {cell['task']} | {cell['variant']} | failed: {msg} | | | | |"
    ok = [s for s in cell["seeds"] if "error" not in s]
    per = " / ".join(f"{s['ratio']:.3f}" for s in ok)
    acc = accs = ""
    if "acc_drop_mean" in cell:
        acc = f"{cell['acc_drop_mean']:+.2f}"
        accs = " / ".join(f"{s['acc_drop']:+.2f}" for s in ok)
    ident = "yes" if all(s["replicas_identical"] for s in ok) else "**no**"
    if errors:
        per += f" ({len(errors)} failed)"
    return f"| {cell['task']} | {cell['variant']} | {cell['ratio_mean']:.3f} | {per} | {acc} | {accs} | {ident} |"


def _plot(task: str, per_seed: Dict[int, Dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = min(per_seed)
    results = per_seed[seed]["results"]
    variants = [v for v in _order(list(results)) if "error" not in results[v]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    cmap = plt.get_cmap("tab20")
    for i, v in enumerate(variants):
        r = results[v]
        loss = np.asarray(r["train_loss"])
        k = max(1, min(20, len(loss) // 10))
        smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
        style = dict(color="black", lw=2.2) if v == "fp32" else dict(color=cmap(i % 20), lw=1.1,
                                                                     ls="-" if v.endswith("+m") else "--")
        ax1.plot(np.arange(k - 1, len(loss)), smooth, label=v, **style)
        ev = r.get("evals", [])
        if ev:
            ax2.plot([e["step"] for e in ev], [e["loss"] for e in ev], label=v, **style)
    ax1.set(xlabel="step", ylabel=f"training loss (mean over ranks, {k}-step average)", yscale="log",
            title=f"{task}, seed {seed}: training loss")
    ax2.set(xlabel="step", ylabel="test loss", yscale="log", title="test loss (solid: optimizer=, dashed: without)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    ax2.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
