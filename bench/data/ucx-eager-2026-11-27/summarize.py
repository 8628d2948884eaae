#!/usr/bin/env python3
"""Medians of run.sh's rows: per (file, hosts, codec, algo, size) the after/before times, their ratio,
x_best (against the best uncompressed path of the same run), x_other (the same without qccl's own
fp32 ring, which runs over the same UCX communicator and so changes with it: MPI_Allreduce,
MPI_Iallreduce and gloo's variants) and the rows' checks.
  python3 bench/data/ucx-eager-2026-11-27/summarize.py OUT_DIR"""
import json
import os
import statistics as st
import sys
from collections import defaultdict

out = sys.argv[1]
for name in ("auto.jsonl", "codecs.jsonl", "local.jsonl"):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        continue
    rows = defaultdict(lambda: defaultdict(list))
    for line in open(path):
        r = json.loads(line)
        codec = r["codec"] + (str(r["bits"]) if r["codec"] == "maxmin" else "")
        rows[(r["hosts_n"], codec, r["algo"], r["size"])][r["variant"]].append(r)
    print(f"## {name}")
    print("| hosts | codec | algo | size | ran | after ms | before ms | after/before | x_best after | x_best before "
          "| x_other after | x_other before | best (after runs) | cpu ms after / before | checked, wrong |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    for (hosts, codec, algo, size), v in sorted(rows.items()):
        a, b = v.get("after", []), v.get("before", [])
        if not a or not b:
            continue
        ta = st.median(x["time_s"] for x in a)
        tb = st.median(x["time_s"] for x in b)

        def xbest(xs):
            bs = [x["best_uncompressed_time_s"] / x["time_s"] for x in xs if x.get("best_uncompressed_time_s", 0) > 0]
            return f"{st.median(bs):.3f}" if bs else "-"

        def xother(xs):
            bs = []
            for x in xs:
                o = [t for k, t in x.get("baselines", {}).items() if k != "qccl_ring" and t > 0]
                if o:
                    bs.append(min(o) / x["time_s"])
            return f"{st.median(bs):.3f}" if bs else "-"

        best = sorted({x.get("best_uncompressed", "-") for x in a})
        cpu = f"{1e3 * st.median(x['cpu']['process_s'] for x in a):.1f} / {1e3 * st.median(x['cpu']['process_s'] for x in b):.1f}"
        allx = a + b
        checked = sum(1 for x in allx if x.get("checked"))
        wrong = sum(x["wrong"] or 0 for x in allx if x.get("checked"))
        ran = "/".join(sorted({x["algo_ran"] for x in allx}))
        mib = size / (1 << 20)
        print(f"| {hosts} | {codec} | {algo} | {mib:g} MiB | {ran} | {1e3 * ta:.1f} | {1e3 * tb:.1f} | {ta / tb:.2f} "
              f"| {xbest(a)} | {xbest(b)} | {xother(a)} | {xother(b)} | {','.join(best)} | {cpu} | {checked} of {len(allx)}, {wrong} |")
    print()
