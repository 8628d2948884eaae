#!/usr/bin/env python3
"""The table of bench/RESULTS.md "Across hosts: the check carries calls of up to 4,096 floats".

old-run{1,2,3}.jsonl: d4ecd48 (the check an MPI collective of fixed size carrying up to 256
floats, then MPI_Iallreduce); new-run{1,2,3}.jsonl: the recursive-doubling check carrying up to
4,096 floats. Interleaved runs, same command. Medians of the runs' medians; MPI_Allreduce is the
median over all six runs' baseline rows."""
import glob
import json
import os
import statistics as st

here = os.path.dirname(os.path.abspath(__file__))
rows = {}
for f in sorted(glob.glob(os.path.join(here, "*-run*.jsonl"))):
    v = os.path.basename(f).split("-run")[0]
    for line in open(f):
        r = json.loads(line)
        rows.setdefault((r["size"], v), []).append(r)
sizes = sorted({k[0] for k in rows})
print("| size | before: ran | before us | after: ran | after us | `MPI_Allreduce` us | before x MPI | after x MPI "
      "| after vs before | checked, wrong |")
print("|---|---|---:|---|---:|---:|---:|---:|---:|---|")
for s in sizes:
    o, n = rows[(s, "old")], rows[(s, "new")]
    ot = st.median(r["time_s"] for r in o) * 1e6
    nt = st.median(r["time_s"] for r in n) * 1e6
    m = st.median(r["mpi_time_s"] for r in o + n) * 1e6
    checked = all(r["checked"] for r in o + n)
    wrong = sum(r["wrong"] or 0 for r in o + n if r["checked"])
    label = f"{s} B" if s < 1024 else f"{s // 1024} KiB"
    print(f"| {label} | {'/'.join(sorted({r['algo_ran'] for r in o}))} | {ot:.0f} "
          f"| {'/'.join(sorted({r['algo_ran'] for r in n}))} | {nt:.0f} | {m:.0f} | {m / ot:.2f} | {m / nt:.2f} "
          f"| {ot / nt:.2f}x | {'all' if checked else 'NOT ALL'} ({len(o + n)} rows), {wrong} |")
