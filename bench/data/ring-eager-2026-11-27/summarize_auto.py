"""Tables of auto.sh's runs: python3 bench/data/ring-eager-2026-11-27/summarize_auto.py"""
import glob
import json
import os
import statistics

here = os.path.dirname(os.path.abspath(__file__))


def rows(pattern):
    out = []
    for path in sorted(glob.glob(os.path.join(here, pattern))):
        for line in open(path):
            if line.startswith("{") and '"time_s"' in line:
                r = json.loads(line)
                if r.get("time_s") is not None:
                    out.append((os.path.basename(path), r))
    return out


med = lambda xs: statistics.median(xs)
print("auto, nothing to compress (medians over runs; ran = what auto ran)")
print("| hosts | size | ran | auto, ms | MPI_Iallreduce, ms | gloo, ms | qccl ring, ms | x_best | checked, wrong |")
print("|---|---|---|---:|---:|---:|---:|---:|---|")
cells = {}
for name, r in rows("auto-h*-run*.jsonl"):
    cells.setdefault((int(name.split("-")[1][1:]), r["size"]), []).append(r)
for (hosts, size), rs in sorted(cells.items()):
    f = lambda k: med([x[k] for x in rs]) * 1e3
    checked = sum(1 for x in rs if x["checked"])
    wrong = sum(x["wrong"] or 0 for x in rs if x["checked"])
    print("| %d | %d MiB | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %d of %d, %d |" % (
        hosts, size >> 20, "/".join(sorted({x["algo_ran"] for x in rs})), f("time_s"), f("mpi_iallreduce_time_s"),
        f("gloo_time_s"), f("qccl_ring_time_s"), med([x["speedup_vs_best"] for x in rs]), checked, len(rs), wrong))
print()
print("sra, 4 hosts, 64 MiB: its own chunks against chunks cut to the eager limit by hand")
print("| codec | chunks | ms (each run) | process CPU / rank, ms | checked, wrong |")
print("|---|---|---|---:|---|")
sra = {}
for name, r in rows("sra-*-run*.jsonl"):
    _, codec, mode = name.split("-")[:3]
    sra.setdefault((codec, mode), []).append(r)
for (codec, mode), rs in sorted(sra.items()):
    checked = sum(1 for x in rs if x["checked"])
    wrong = sum(x["wrong"] or 0 for x in rs if x["checked"])
    print("| %s | %s | %s | %.1f | %d of %d, %d |" % (codec, mode, ", ".join("%.1f" % (x["time_s"] * 1e3) for x in rs),
                                                     med([x["cpu"]["process_s"] for x in rs]) * 1e3, checked, len(rs), wrong))
