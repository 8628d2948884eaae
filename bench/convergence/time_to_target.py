#!/usr/bin/env python3
"""Wall-clock time to a target test loss, from train.py's JSON (one file per seed).

    time_to_target.py RUN.json [RUN.json ...] [--factor 1.03] [--reference fp32] [--markdown]

The target of each run is ``factor`` x the reference variant's final test loss (fp32's: gloo's
allreduce). For every variant, the time to target is the training time (``time_s`` of the
evaluations: steps only, evaluations left out) at the first evaluation whose test loss is at or
below the target; "not reached" when none is. The speedup column divides the reference's time
to target by the variant's, and the last column its step time (training time / steps) by the
variant's. Several files (seeds) give the median of each column.
"""
import argparse
import json
import statistics
import sys
from typing import Any, Dict, List, Optional


def time_to(evals: List[Dict[str, Any]], target: float) -> Optional[float]:
    for e in evals:
        if e["loss"] <= target:
            return float(e["time_s"])
    return None


def rows_of(run: Dict[str, Any], factor: float, reference: str) -> Dict[str, Dict[str, Any]]:
    by = {r["variant"]: r for r in run["results"] if "error" not in r and r.get("evals")}
    if reference not in by:
        raise SystemExit(f"time_to_target: no {reference!r} results in the run of seed {run['meta']['seed']}")
    if any("time_s" not in e for r in by.values() for e in r["evals"]):
        raise SystemExit("time_to_target: the evaluations carry no time_s (a train.py from before time-to-target)")
    target = factor * by[reference]["test_loss"]
    ref_time = time_to(by[reference]["evals"], target)
    ref_step = by[reference]["train_s"] / by[reference]["steps"]
    out = {}
    for name, r in by.items():
        t = time_to(r["evals"], target)
        out[name] = dict(target=target, time=t, final=r["test_loss"], step=r["train_s"] / r["steps"],
                         speedup=(ref_time / t) if t and ref_time else None, step_speedup=ref_step / (r["train_s"] / r["steps"]))
    return out


def median(values: List[Optional[float]]) -> Optional[float]:
    got = [v for v in values if v is not None]
    return statistics.median(got) if len(got) == len(values) and got else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--factor", type=float, default=1.03)
    ap.add_argument("--reference", default="fp32")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    per_seed = []
    for path in a.runs:
        with open(path) as f:
            per_seed.append(rows_of(json.load(f), a.factor, a.reference))
    variants = [v for v in per_seed[0] if all(v in s for s in per_seed)]
    fmt = (lambda v, spec: "-" if v is None else format(v, spec))
    head = ["variant", "final test loss", "target", "time to target (s)", "x fp32 (time to target)",
            "step (ms)", "x fp32 (step)"]
    lines = []
    for v in variants:
        col = lambda k: median([s[v][k] for s in per_seed])  # noqa: E731
        t = col("time")
        lines.append([v, fmt(col("final"), ".5f"), fmt(col("target"), ".5f"),
                      "not reached" if t is None else format(t, ".1f"), fmt(col("speedup"), ".2f"),
                      fmt(1e3 * col("step"), ".1f"), fmt(col("step_speedup"), ".2f")])
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in lines:
            print("| " + " | ".join(row) + " |")
    else:
        w = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
        for row in lines:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(row)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
