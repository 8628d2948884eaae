#!/usr/bin/env python3
"""bench/RESULTS.md \"Pipeline chunks by codec\": cmp-{codec}-{4M,1M}-run{1,2,3}.jsonl, interleaved
runs with QCCL_CHUNK_BYTES=4M|1M (--baselines mpi); medians of the 3 runs."""
import json,glob,statistics as st,os,sys
d=os.path.dirname(os.path.abspath(__file__))
rows={}
for f in glob.glob(os.path.join(d,"cmp-*-run*.jsonl")):
    _,codec,cb,run=os.path.basename(f)[:-6].replace("-run","-").split("-")
    for l in open(f):
        r=json.loads(l)
        if "model" in r: continue
        rows.setdefault((codec,r["size"],cb),[]).append(r)
def runs(rs):
    return " / ".join("%.1f" % (r["time_s"]*1e3) for r in rs)
print("| codec | size | 4 MiB chunks: ms (runs) | 1 MiB chunks: ms (runs) | 1 MiB vs 4 MiB | wire busbw % of 1 Gbit/s, 4 MiB / 1 MiB | checked, wrong |")
print("|---|---|---|---|---:|---|---|")
for codec in ["onebit","maxmin","fp16"]:
    for size in sorted({k[1] for k in rows if k[0]==codec}):
        a,b=rows[(codec,size,"4M")],rows[(codec,size,"1M")]
        ta=st.median(r["time_s"] for r in a)*1e3; tb=st.median(r["time_s"] for r in b)*1e3
        ga=100*a[0]["wire_bytes"]*8/(ta/1e3)/1e9; gb=100*b[0]["wire_bytes"]*8/(tb/1e3)/1e9
        w=sum(r["wrong"] or 0 for r in a+b); c=sum(r["checked"] for r in a+b)
        name=codec+("4" if codec=="maxmin" else "")
        print(f"| {name} | {size>>20} MiB | {ta:.1f} ({runs(a)}) | {tb:.1f} ({runs(b)}) | {ta/tb:.2f}x | {ga:.0f}% / {gb:.0f}% | {c} of {len(a+b)}, {w} |")
