#!/usr/bin/env python3
"""The convergence suite in one command: every task x seed x gradient exchange on local ranks.

    bench/convergence/run.py                        # the full matrix (1-2 hours on 2 cores)
    bench/convergence/run.py --tasks ts-sgdm --seeds 0 --variants fp32,onebit,onebit+m
    bench/convergence/run.py --report-only          # tables and plots from the saved JSON
    bench/convergence/run.py --fast --check 1.5     # the CTest subset: one seed, fewer steps

For each task and seed it starts ``mpirun -np 4 train.py`` once for the DDP baselines and the qccl
variants (they share the processes, one after the other) and once more for DDP's PowerSGD hook,
which aborts the whole process on gloo under torch 1.13 (a gloo enforce failure); a crashed job is
recorded as such. Results go to OUT/TASK-sSEED.json (and -powersgd.json); report.py turns them into
OUT/summary.md, OUT/summary.json and one loss-vs-step PNG per task.

--check R exits 1 unless, for every task and seed, each variant with optimizer= (CODEC+m) ends with
a test loss within R times fp32's, training loss fell, and the replicas ended bit-identical.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)

from report import report  # noqa: E402

TASK_NAMES = ("ts-sgdm", "ts-nesterov", "digits-sgdm", "cnn-reg-sgdm", "charlm-adamw")
QCCL_CODECS = ("onebit", "signscale", "maxmin2", "maxmin4", "maxmin8", "dyn8")
FULL = ["fp32", "fp16"] + [c for c in QCCL_CODECS] + [c + "+m" for c in QCCL_CODECS]
FAST = ["fp32", "onebit", "onebit+m", "signscale+m", "maxmin4+m"]


def find_python() -> str:
    venv = os.path.join(repo, ".venv", "bin", "python")
    return os.environ.get("PYTHON") or (venv if os.path.exists(venv) else sys.executable)


def run_job(cmd, env, log) -> int:
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        return subprocess.call(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASK_NAMES))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--variants", default="full", help="'full', or a comma-separated list (see train.py)")
    ap.add_argument("--powersgd", choices=("on", "off"), default="on", help="also run DDP's PowerSGD hook")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every task's steps")
    ap.add_argument("--fast", action="store_true", help="CTest subset: seed 0, scale 0.3, a few variants, no PowerSGD")
    ap.add_argument("--extra", default="", help="more train.py arguments, e.g. '--constant-lr --algo allgather'")
    ap.add_argument("--out", default=os.path.join(repo, "bench", "convergence", "out"))
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--check", type=float, default=0.0, metavar="R")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per mpirun job")
    args = ap.parse_args()
    if args.fast:
        args.seeds, args.scale, args.powersgd = "0", 0.3, "off"
        if args.variants == "full":
            args.variants = ",".join(FAST)
    variants = FULL if args.variants == "full" else [v for v in args.variants.split(",") if v]
    tasks = [t for t in args.tasks.split(",") if t]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    os.makedirs(args.out, exist_ok=True)

    if not args.report_only:
        python = find_python()
        env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        build = os.environ.get("QCCL_BUILD_DIR", os.path.join(repo, "build"))
        if os.path.isdir(os.path.join(build, "bindings", "python", "qccl")):
            env["PYTHONPATH"] = os.path.join(build, "bindings", "python") + os.pathsep + env.get("PYTHONPATH", "")
        mpirun = shutil.which("mpirun") or "mpirun"
        log = os.path.join(args.out, "run.log")
        t_start = time.time()
        for task in tasks:
            for seed in seeds:
                jobs = [("", [v for v in variants if v != "powersgd"])]
                if args.powersgd == "on" or "powersgd" in variants:
                    jobs.append(("-powersgd", ["powersgd"]))
                for suffix, vs in jobs:
                    if not vs:
                        continue
                    out = os.path.join(args.out, f"{task}-s{seed}{suffix}.json")
                    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1",
                           "--timeout", str(args.timeout), "-np", str(args.np), python, os.path.join(here, "train.py"),
                           "--task", task, "--seed", str(seed), "--variants", ",".join(vs), "--scale", str(args.scale),
                           "--out", out] + args.extra.split()
                    t0 = time.time()
                    if os.path.exists(out):
                        os.remove(out)
                    rc = run_job(cmd, env, log)
                    status = "ok" if rc == 0 and os.path.exists(out) else f"exit {rc}"
                    print(f"[{time.time() - t_start:7.0f} s] {task} seed {seed} {','.join(vs)}: {status} "
                          f"({time.time() - t0:.0f} s)", flush=True)
                    if status != "ok":
                        with open(out, "w") as f:
                            json.dump({"meta": {"task": task, "seed": seed, "ranks": args.np},
                                       "results": [{"variant": v, "error": f"the job crashed ({status}); see run.log"}
                                                   for v in vs]}, f)
    summary = report(args.out, tasks, seeds)
    print(f"wrote {args.out}/summary.md")
    if args.check > 0:
        problems = check(summary, args.check)
        for p in problems:
            print("check failed:", p)
        return 1 if problems else 0
    return 0


def check(summary, bound: float):
    problems = []
    for cell in summary["cells"]:
        if not cell["variant"].endswith("+m"):
            continue
        for s in cell["seeds"]:
            if s.get("error"):
                problems.append(f"{cell['task']} {cell['variant']} seed {s['seed']}: {s['error']}")
                continue
            if s["ratio"] > bound:
                problems.append(f"{cell['task']} {cell['variant']} seed {s['seed']}: test loss {s['ratio']:.3f}x fp32's")
            if not s["replicas_identical"]:
                problems.append(f"{cell['task']} {cell['variant']} seed {s['seed']}: replicas differ")
            if not s["loss_fell"]:
                problems.append(f"{cell['task']} {cell['variant']} seed {s['seed']}: training loss did not fall")
    return problems


if __name__ == "__main__":
    sys.exit(main())
