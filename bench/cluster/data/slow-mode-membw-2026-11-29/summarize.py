#!/usr/bin/env python3
"""Per run of run.sh: the onebit 64 MiB call (median ms, its share of the link from its wire bytes,
process CPU per rank and call), and the probes before and after it (triad GB/s of two threads and
of one, the register-only loop on two vCPUs over alone); then the rank correlation of call time
with each probe figure.
usage: summarize.py OUTDIR [LINK_GBIT]
       summarize.py --pooled OUTDIR:LINK_GBIT ... (each run's call time over its folder's median,
       against the two-thread triad, pooled over the folders)"""
import glob, json, os, statistics as st, sys


def load(d, link):
    rows = []
    runs = sorted(glob.glob(os.path.join(d, "run-*.jsonl")), key=lambda f: int(f.rsplit("-", 1)[1].split(".")[0]))
    for f in runs:
        i = f.rsplit("-", 1)[1].split(".")[0]
        r = next((json.loads(l) for l in open(f) if '"collective"' in l), None)
        if r is None:
            continue
        pb = json.load(open(os.path.join(d, f"probe-before-{i}.json")))
        pa = json.load(open(os.path.join(d, f"probe-after-{i}.json")))
        wire = r["wire_bytes"] * 8 / (link * 1e9)  # seconds one rank's bytes take at the line
        rows.append(dict(run=int(i), ms=r["time_s"] * 1e3, link=100 * wire / r["time_s"], wrong=r["wrong"],
                         checked=r["checked"], cpu=r["cpu"]["process_s"] * 1e3, enc=r["cpu"]["encode_s"] * 1e3,
                         dec=r["cpu"]["decode_s"] * 1e3, tri=(pb["triad_gbs_two"] + pa["triad_gbs_two"]) / 2,
                         tri1=(pb["triad_gbs_alone"] + pa["triad_gbs_alone"]) / 2,
                         alu=(pb["alu_s_two"] / pb["alu_s_alone"] + pa["alu_s_two"] / pa["alu_s_alone"]) / 2))
    return rows


def ranks(v):
    order = sorted(range(len(v)), key=lambda k: v[k])
    out = [0.0] * len(v)
    for pos, k in enumerate(order):
        out[k] = float(pos)
    return out


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = st.mean(ra), st.mean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return num / den if den else float("nan")


if sys.argv[1] == "--pooled":
    rel, tri = [], []
    for arg in sys.argv[2:]:
        d, link = arg.rsplit(":", 1)
        rows = load(d, float(link))
        med = st.median(r["ms"] for r in rows)
        rel += [r["ms"] / med for r in rows]
        tri += [r["tri"] for r in rows]
    cut = st.median(tri)
    low = [x for x, t in zip(rel, tri) if t < cut]
    high = [x for x, t in zip(rel, tri) if t >= cut]
    print(f"{len(rel)} runs pooled: Spearman rank correlation of call time / its folder's median with the "
          f"two-thread triad {spearman(rel, tri):+.2f}; runs with the triad below its median ({cut:.1f} GB/s): "
          f"{st.median(low):.2f}x the folder's median call (n={len(low)}), at or above it: {st.median(high):.2f}x "
          f"(n={len(high)})")
    sys.exit(0)

d = sys.argv[1]
rows = load(d, float(sys.argv[2]) if len(sys.argv) > 2 else 2.5)
print("| run | call ms | % of link | CPU ms/rank | encode | decode | triad GB/s, 2 threads | 1 thread | "
      "register loop, 2 / 1 | checked, wrong |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    print(f"| {r['run']} | {r['ms']:.1f} | {r['link']:.0f}% | {r['cpu']:.1f} | {r['enc']:.1f} | {r['dec']:.1f} | "
          f"{r['tri']:.1f} | {r['tri1']:.1f} | {r['alu']:.2f} | {r['checked']}, {r['wrong']} |")
if len(rows) >= 3:
    ms = [r["ms"] for r in rows]
    print(f"\n{len(rows)} runs: call median {st.median(ms):.1f} ms (range {min(ms):.1f}-{max(ms):.1f}); Spearman rank "
          f"correlation of call time with: two-thread triad {spearman(ms, [r['tri'] for r in rows]):+.2f}, one-thread "
          f"triad {spearman(ms, [r['tri1'] for r in rows]):+.2f}, register-loop ratio "
          f"{spearman(ms, [r['alu'] for r in rows]):+.2f}, process CPU {spearman(ms, [r['cpu'] for r in rows]):+.2f}")
