# The A/B table from the ddp-sweep logs in a folder: python3 summary.py FOLDER
import re,sys,glob,os,statistics as st
d=sys.argv[1]
res={}
for f in sorted(glob.glob(d+'/*-r*.log')):
    v,r=os.path.basename(f)[:-4].split('-r')
    txt=open(f).read()
    m=re.search(r'^\| 1 Gbit/s \| (\d+) \| (\d+) \| (\d+) \|.*\| ([\d.]+) \| ([\d.]+) \|$',txt,re.M)
    if not m: continue
    fl,ob,obm,r1,r2=m.groups()
    enc=re.search(r'^qccl-onebit +[\d.]+ .*$',txt,re.M).group(0).split()
    encm=re.search(r'^qccl-onebit\+m +[\d.]+ .*$',txt,re.M).group(0).split()
    res.setdefault(v,[]).append((int(r),int(fl),int(ob),int(obm),float(r1),float(r2),float(enc[-3]),float(enc[-2]),float(encm[-3]),float(encm[-2]),float(enc[-5]),float(encm[-5])))
print("| library | round | floor ms | onebit ms | onebit+m ms | onebit / (floor+wire) | onebit+m / (floor+wire) | onebit CPU ms per rank (encode / decode) | onebit+m CPU ms (encode / decode) |")
print("|---|---:|---:|---:|---:|---:|---:|---|---|")
for v in ("old","new"):
    for x in sorted(res.get(v,[])):
        print(f"| {v} | {x[0]} | {x[1]} | {x[2]} | {x[3]} | {x[4]:.2f} | {x[5]:.2f} | {x[10]:.0f} ({x[6]:.1f} / {x[7]:.1f}) | {x[11]:.0f} ({x[8]:.1f} / {x[9]:.1f}) |")
for v in ("old","new"):
    xs=res.get(v,[])
    if xs: print(f"{v}: n={len(xs)} median onebit/(floor+wire) {st.median([x[4] for x in xs]):.2f}, onebit+m {st.median([x[5] for x in xs]):.2f}; median step onebit {st.median([x[2] for x in xs])}, onebit+m {st.median([x[3] for x in xs])}; CPU onebit {st.median([x[10] for x in xs])}, +m {st.median([x[11] for x in xs])}; encode onebit {st.median([x[6] for x in xs])}, decode {st.median([x[7] for x in xs])}")
