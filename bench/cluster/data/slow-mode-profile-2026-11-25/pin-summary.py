#!/usr/bin/env python3
"""pin-ab.sh's runs per placement: onebit's median call per run (16 and 64 MiB), the share of the
link its wire bytes reached, process CPU and scheduler counts per rank and call, ranks' CPUs.
usage: pin-summary.py DIR [LINK_GBIT]"""
import glob, json, os, re, statistics as st, sys

d = sys.argv[1]
link = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
runs = {}
for f in sorted(glob.glob(os.path.join(d, "*-r*.jsonl"))):
    mode, r = re.match(r"(\w+)-r(\d+)\.jsonl", os.path.basename(f)).groups()
    for j in map(json.loads, open(f)):
        if "model" in j or j.get("codec") != "onebit":
            continue
        frac = j["wire_bytes"] / j["time_s"] / (link * 1e9 / 8)
        c = j["cpu"]
        runs.setdefault(mode, []).append((int(r), j["size"] >> 20, j["time_s"] * 1e3, frac, c["process_s"] * 1e3,
                                          c.get("nivcsw", -1), c.get("migrations", -1), c.get("rank_cpus", [])))
for mode, rows in runs.items():
    print(f"== {mode}")
    for r, size, t, frac, cpu, iv, mig, cpus in sorted(rows):
        print(f"  run {r} {size:3d} MiB {t:6.1f} ms {100 * frac:4.0f}% of the link  cpu {cpu:5.1f} ms  "
              f"nivcsw {iv:6.1f}  migrations {mig:5.2f}  cpus {cpus}")
    for size in (16, 64):
        sel = [x for x in rows if x[1] == size]
        if sel:
            ok = sum(1 for x in sel if x[3] >= 0.7)
            print(f"  {size} MiB: median {st.median(x[2] for x in sel):.1f} ms (range {min(x[2] for x in sel):.1f}-"
                  f"{max(x[2] for x in sel):.1f}), >= 70% of the link in {ok} of {len(sel)} runs, process CPU "
                  f"{st.median(x[4] for x in sel):.1f} ms")
