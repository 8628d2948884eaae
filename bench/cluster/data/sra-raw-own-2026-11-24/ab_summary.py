# Medians per codec, size and variant of the A/B rows in a folder: python3 ab_summary.py FOLDER
import json,sys,glob,os,statistics as st
d=sys.argv[1]
rows={}
for f in sorted(glob.glob(d+'/*.jsonl')):
    n=os.path.basename(f)[:-6]; codec,v,r=n.split('-')
    for l in open(f):
        if not l.startswith('{"collective'): continue
        x=json.loads(l)
        rows.setdefault((codec,x['size']>>20,v),[]).append(x)
print(f"{'codec':12s} {'MiB':>3s} {'var':3s} {'ms per run':28s} {'median':>7s} {'cpu ms':>7s} {'enc ms':>7s} {'dec ms':>7s} {'rel_err':>9s} wrong/checked")
for k in sorted(rows):
    xs=rows[k]
    t=[x['time_s']*1e3 for x in xs]
    print(f"{k[0]:12s} {k[1]:3d} {k[2]:3s} {' / '.join('%.1f'%v for v in t):28s} {st.median(t):7.1f} {st.median([x['cpu']['process_s']*1e3 for x in xs]):7.1f} {st.median([x['cpu']['encode_s']*1e3 for x in xs]):7.1f} {st.median([x['cpu']['decode_s']*1e3 for x in xs]):7.1f} {st.median([x['rel_err'] for x in xs]):9.4g} {sum(x['wrong'] for x in xs)}/{sum(1 for x in xs if x['checked'])}")
