# Medians of run.sh's rows per setting: the copy (old) and bare (new) libraries side by side, each
# against the best uncompressed path of its own run and against the best path outside qccl
# (gloo, MPI_Allreduce, MPI_Iallreduce), which the library change does not touch.
import collections
import json
import statistics as st
import sys

rows = [json.loads(l) for l in open(sys.argv[1])]
OLD, NEW = sys.argv[2:4] if len(sys.argv) > 3 else ('copy', 'bare')
d = collections.defaultdict(list)
for r in rows:
    d[(r['hosts'], r['rate'], r['transport'], r['algo_asked'], r['size'] >> 20, r['variant'])].append(r)


def ext(x):
    b = x['baselines']
    return min(v for k, v in b.items() if k != 'qccl_ring' and v)


def med(v, f):
    return st.median(f(x) for x in v)


print(f'| hosts, rate | transport | asked | size | ran | {OLD} ms | {NEW} ms | {NEW}/{OLD} | {OLD} x_best | {NEW} x_best '
      f'| {NEW} vs best outside qccl | gloo ms | cpu ms {OLD} / {NEW} | encode+decode ms {OLD} / {NEW} | checked, wrong |')
print('|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|')
keys = sorted({k[:5] for k in d})
for k in keys:
    c, b = d.get(k + (OLD,), []), d.get(k + (NEW,), [])
    if not c or not b:
        continue
    ran = ','.join(sorted({x['algo_ran'] for x in c + b}))
    tc, tb = med(c, lambda x: x['time_s']), med(b, lambda x: x['time_s'])
    cpu = lambda v: med(v, lambda x: x['cpu']['process_s']) * 1e3
    cod = lambda v: med(v, lambda x: x['cpu']['encode_s'] + x['cpu']['decode_s']) * 1e3
    checked = sum(1 for x in c + b if x['checked'])
    wrong = sum(x['wrong'] or 0 for x in c + b)
    print(f"| {k[0]}, {k[1]} | {k[2]} | {k[3]} | {k[4]} MiB | {ran} | {tc*1e3:.1f} | {tb*1e3:.1f} | {tb/tc:.2f} "
          f"| {med(c, lambda x: x['speedup_vs_best']):.3f} | {med(b, lambda x: x['speedup_vs_best']):.3f} "
          f"| {med(b, lambda x: ext(x) / x['time_s']):.3f} | {med(c + b, lambda x: x['gloo_time_s'])*1e3:.1f} "
          f"| {cpu(c):.1f} / {cpu(b):.1f} | {cod(c):.1f} / {cod(b):.1f} | {checked} of {len(c + b)}, {wrong} |")
