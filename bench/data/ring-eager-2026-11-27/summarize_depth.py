"""Table of depth.sh's runs: python3 bench/data/ring-eager-2026-11-27/summarize_depth.py"""
import glob
import json
import os
import statistics

here = os.path.dirname(os.path.abspath(__file__))
cells = {}
for path in sorted(glob.glob(os.path.join(here, "depth-h8-d*-run*.jsonl"))):
    depth = int(os.path.basename(path).split("-")[2][1:])
    for line in open(path):
        if line.startswith("{") and '"time_s"' in line:
            r = json.loads(line)
            if r.get("time_s") is not None:
                cells.setdefault((r["size"], depth), []).append(r)
print("| size | depth | ran | auto, ms (each run) | qccl ring, ms | gloo, ms | MPI_Iallreduce, ms | x_best | CPU/rank, ms | checked, wrong |")
print("|---|---:|---|---|---:|---:|---:|---:|---:|---|")
for (size, depth), rs in sorted(cells.items()):
    m = lambda k: statistics.median(x[k] for x in rs) * 1e3
    checked = sum(1 for x in rs if x["checked"])
    wrong = sum(x["wrong"] or 0 for x in rs if x["checked"])
    print("| %d MiB | %d | %s | %s | %.1f | %.1f | %.1f | %.2f | %.0f | %d of %d, %d |" % (
        size >> 20, depth, "/".join(sorted({x["algo_ran"] for x in rs})),
        ", ".join("%.1f" % (x["time_s"] * 1e3) for x in rs), m("qccl_ring_time_s"), m("gloo_time_s"),
        m("mpi_iallreduce_time_s"), statistics.median(x["speedup_vs_best"] for x in rs),
        statistics.median(x["cpu"]["process_s"] for x in rs) * 1e3, checked, len(rs), wrong))
