"""Table of auto (nothing to compress) against the uncompressed paths, with and without libnbc's
ring, from the runs in this folder: python3 bench/data/nbc-ring-2026-11-27/summarize.py"""
import glob
import json
import os
import statistics

here = os.path.dirname(os.path.abspath(__file__))
cells = {}
for path in sorted(glob.glob(os.path.join(here, "h*-ring*-run*.jsonl"))):
    name = os.path.basename(path)
    hosts, ring = int(name[1]), int(name.split("ring")[1][0])
    for line in open(path):
        if not line.startswith("{") or '"time_s"' not in line:
            continue
        r = json.loads(line)
        cells.setdefault((hosts, r["size"], ring), []).append(r)
print("| hosts | size | auto before, ms | auto with the ring, ms | gloo, ms | MPI_Allreduce, ms | qccl ring, ms "
      "| x_best before | x_best after | checked, wrong |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
for hosts, size in sorted({(h, s) for h, s, _ in cells}):
    b, a = cells.get((hosts, size, 0), []), cells.get((hosts, size, 1), [])
    if not a or not b:
        continue
    med = lambda rows, k: statistics.median(r[k] for r in rows)
    both = a + b
    checked = sum(1 for r in both if r["checked"])
    wrong = sum(r["wrong"] or 0 for r in both if r["checked"])
    print("| %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %d of %d, %d |" % (
        hosts, "%d KiB" % (size >> 10) if size < 1 << 20 else "%d MiB" % (size >> 20),
        med(b, "time_s") * 1e3, med(a, "time_s") * 1e3, med(both, "gloo_time_s") * 1e3,
        med(both, "mpi_time_s") * 1e3, med(both, "qccl_ring_time_s") * 1e3,
        med(b, "speedup_vs_best"), med(a, "speedup_vs_best"), checked, len(both), wrong))
