#!/usr/bin/env python3
"""The table of bench/RESULTS.md "Across hosts: one round of checks loses to recursive doubling".

rd-run{1,2,3}.jsonl: the check as in the library (recursive doubling, QCCL_ONE_ROUND_RANKS=0);
oneround-run{1,2,3}.jsonl: one-round.patch applied, QCCL_ONE_ROUND_RANKS=4 (every rank sends its
message to the 3 others in one round). Interleaved runs, same command. Medians of the runs' medians;
MPI_Allreduce is the median over all six runs' baseline rows."""
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
print("| size | ran | recursive doubling us | one round us | `MPI_Allreduce` us | one round vs rd | checked, wrong |")
print("|---|---|---:|---:|---:|---:|---|")
for s in sorted({k[0] for k in rows}):
    a, b = rows[(s, "rd")], rows[(s, "oneround")]
    ta = st.median(r["time_s"] for r in a) * 1e6
    tb = st.median(r["time_s"] for r in b) * 1e6
    m = st.median(r["mpi_time_s"] for r in a + b) * 1e6
    checked = all(r["checked"] for r in a + b)
    wrong = sum(r["wrong"] or 0 for r in a + b if r["checked"])
    ran = "/".join(sorted({r["algo_ran"] for r in a + b}))
    print(f"| {s} | {ran} | {ta:.0f} | {tb:.0f} | {m:.0f} | {ta / tb:.2f}x | {len(a + b)} of {len(a + b)}, {wrong} |"
          if checked else f"| {s} | {ran} | {ta:.0f} | {tb:.0f} | {m:.0f} | {ta / tb:.2f}x | not all checked |")
