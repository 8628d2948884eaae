#!/usr/bin/env python3
# The table of ab.sh OUTDIR: per codec and build, each run's call time and the medians of CPU per rank and call.
import json,glob,sys,statistics as st,collections
rows=collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1]+'/*.jsonl')):
  side,codec,r=f.split('/')[-1][:-6].split('-')
  for l in open(f):
    if l.startswith('{"collective'):
      d=json.loads(l); c=d['cpu']
      rows[(codec,side)].append((d['time_s']*1e3,c['encode_s']*1e3,c['decode_s']*1e3,c['process_s']*1e3,d['wrong'],d['checked'],d['best_uncompressed_time_s']*1e3))
print('| codec | build | call ms (each run) | median | encode | decode | process CPU | wrong |')
print('|---|---|---|---:|---:|---:|---:|---|')
for (codec,side),v in sorted(rows.items(), key=lambda x:(x[0][0], x[0][1]!='old')):
  print('| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %s |'%(codec,side,', '.join('%.1f'%x[0] for x in v),st.median(x[0] for x in v),st.median(x[1] for x in v),st.median(x[2] for x in v),st.median(x[3] for x in v),'/'.join(str(x[4]) for x in v)+(' (checked)' if all(x[5] for x in v) else ' (UNCHECKED)')))
