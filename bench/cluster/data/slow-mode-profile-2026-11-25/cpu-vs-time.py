#!/usr/bin/env python3
"""onebit 64 MiB rows on 4 emulated hosts (every recorded run of 2026-11-25: hugepages-, model-probe-
and this folder), sorted by call time: the per-call CPU breakdown (ms per rank and call: encode and
decode wall time, process CPU, its system part) and the codec throughput qccl-bench measured with
the other ranks idle. Then the medians of the fast (< 40 ms) and slow (>= 50 ms) runs.
usage: cpu-vs-time.py (from anywhere)"""
import glob, json, os, statistics as st

here = os.path.dirname(os.path.abspath(__file__))
data = os.path.dirname(here)
files = (glob.glob(os.path.join(data, "hugepages-2026-11-25", "*", "onebit-*.jsonl"))
         + glob.glob(os.path.join(data, "model-probe-2026-11-25", "**", "*onebit*.jsonl"), recursive=True)
         + glob.glob(os.path.join(here, "*", "*.jsonl")))
rows = []
for f in files:
    for line in open(f):
        r = json.loads(line)
        if r.get("codec") == "onebit" and "cpu" in r and r["size"] == 64 << 20 and "model" not in r:
            c = r["cpu"]
            if r["time_s"] < 0.07:  # the 0.25-0.5 Gbit/s rows are wire-bound
                rows.append((r["time_s"] * 1e3, os.path.relpath(f, data), c["encode_s"] * 1e3, c["decode_s"] * 1e3,
                             c["process_s"] * 1e3, c.get("process_sys_s", 0) * 1e3, r["encode_gbps"]))
rows.sort()
print(f"{'call ms':>7} {'encode':>6} {'decode':>6} {'cpu':>5} {'sys':>5} {'idle enc GB/s':>13}  file")
for t, f, e, d, p, s, g in rows:
    print(f"{t:7.1f} {e:6.1f} {d:6.1f} {p:5.1f} {s:5.1f} {g:13.2f}  {f}")
for name, sel in (("fast (< 40 ms)", [r for r in rows if r[0] < 40]), ("slow (>= 50 ms)", [r for r in rows if r[0] >= 50])):
    if sel:
        med = [st.median(r[i] for r in sel) for i in (0, 2, 3, 4, 5, 6)]
        print(f"{name}: {len(sel)} runs, medians: call {med[0]:.1f} ms, encode {med[1]:.1f}, decode {med[2]:.1f}, "
              f"process CPU {med[3]:.1f} (system {med[4]:.1f}) ms per rank and call, idle encode {med[5]:.2f} GB/s")
