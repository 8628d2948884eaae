"""bench/convergence/time_to_target.py's arithmetic on synthetic train.py output."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "convergence", "time_to_target.py")


def run_json(seed, curves, steps=100, train_s=None):
    results = []
    for name, evals in curves.items():
        results.append({"variant": name, "steps": steps, "train_s": (train_s or {}).get(name, evals[-1][0]),
                        "test_loss": evals[-1][1], "evals": [{"step": 10 * (i + 1), "time_s": t, "loss": l}
                                                             for i, (t, l) in enumerate(evals)]})
    return {"meta": {"seed": seed}, "results": results}


def table(tmp_path, runs, *extra):
    paths = []
    for i, r in enumerate(runs):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps(r))
        paths.append(str(p))
    out = subprocess.run([sys.executable, SCRIPT, *paths, "--markdown", *extra], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in out.stdout.splitlines()[2:]}


def test_first_evaluation_at_or_below_the_target(tmp_path):
    # fp32 ends at 1.0: target 1.03, reached at its third evaluation (30 s); onebit+m at 10 s.
    rows = table(tmp_path, [run_json(0, {"fp32": [(10, 2.0), (20, 1.1), (30, 1.03), (40, 1.0)],
                                         "onebit+m": [(10, 1.02), (20, 0.99)],
                                         "slow": [(50, 1.5), (100, 1.2)]})])
    assert rows["fp32"][1:4] == ["1.03000", "30.0", "1.00"]
    assert rows["onebit+m"][2:4] == ["10.0", "3.00"]
    assert rows["slow"][2:4] == ["not reached", "-"]
    # step time: train_s / steps = 0.4 s and 0.2 s per step
    assert rows["fp32"][4:] == ["400.0", "1.00"] and rows["onebit+m"][4:] == ["200.0", "2.00"]


def test_median_over_seeds_and_other_factor(tmp_path):
    runs = [run_json(s, {"fp32": [(10, 1.5), (20, 1.0)], "x": [(t, 1.0)]}) for s, t in ((0, 4), (1, 5), (2, 10))]
    rows = table(tmp_path, runs, "--factor", "1.0")
    assert rows["x"][2:4] == ["5.0", "4.00"]


def test_output_without_evaluation_times_is_refused(tmp_path):
    r = run_json(0, {"fp32": [(10, 1.0)]})
    del r["results"][0]["evals"][0]["time_s"]
    with pytest.raises(RuntimeError, match="time_s"):
        table(tmp_path, [r])
