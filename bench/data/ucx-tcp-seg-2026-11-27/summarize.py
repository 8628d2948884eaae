# Medians per link, codec and size of the rows of run.sh: default (UCX 8K/64K) against seg (qccl 256K/512K).
import json,sys,statistics as st,collections
rows=[json.loads(l) for l in open(sys.argv[1])]
d=collections.defaultdict(list)
for r in rows:
    d[(r['rate'],r['codec'],r['size']>>20,r['variant'])].append(r)
keys=sorted(set(k[:3] for k in d))
print('| link | codec | size | default ms (median) | seg ms (median) | seg/default | x_best default | x_best seg | cpu ms default / seg | checked, wrong |')
print('|---|---|---|---:|---:|---:|---:|---:|---|---|')
for k in keys:
    a=d.get(k+('default',),[]); b=d.get(k+('seg',),[])
    if not a or not b: continue
    ma=st.median(x['time_s'] for x in a)*1e3; mb=st.median(x['time_s'] for x in b)*1e3
    xa=st.median(x['speedup_vs_best'] for x in a); xb=st.median(x['speedup_vs_best'] for x in b)
    ca=st.median(x['cpu']['process_s'] for x in a)*1e3; cb=st.median(x['cpu']['process_s'] for x in b)*1e3
    chk=sum(1 for x in a+b if x['checked']); wr=sum(x['wrong'] or 0 for x in a+b)
    print(f"| {k[0]} | {k[1]} | {k[2]} MiB | {ma:.1f} ({', '.join('%.0f'%(x['time_s']*1e3) for x in a)}) | {mb:.1f} ({', '.join('%.0f'%(x['time_s']*1e3) for x in b)}) | {mb/ma:.2f} | {xa:.3f} | {xb:.3f} | {ca:.1f} / {cb:.1f} | {chk} of {len(a)+len(b)}, {wr} |")
