# 4 hosts x 2 ranks, auto with nothing to compress: QCCL_AUTO_RING=1 (hier against the ring) against
# QCCL_AUTO_RING=0 (hier against MPI_Iallreduce). Medians per link and size.
import json, sys, statistics as st, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
d = collections.defaultdict(list)
for r in rows:
    d[(r['rate'], r['size'] >> 20, r['auto_ring'])].append(r)
print('| link | size | auto_ring | ran (per round) | auto ms (rounds) | best: name, ms | x_best | MPI_Iallreduce ms | qccl ring ms | checked, wrong |')
print('|---|---|---:|---|---:|---|---:|---:|---:|---|')
for k in sorted(d, key=lambda k: (k[0], k[1], -k[2])):
    v = d[k]
    med = lambda f: st.median(f(x) for x in v)
    name = collections.Counter(x['best_uncompressed'] for x in v).most_common(1)[0][0]
    print(f"| {k[0]} | {k[1]} MiB | {k[2]} | {','.join(x['algo_ran'] for x in v)} | {med(lambda x: x['time_s'])*1e3:.1f} ({', '.join('%.0f' % (x['time_s']*1e3) for x in v)}) | "
          f"{name} {med(lambda x: x['best_uncompressed_time_s'])*1e3:.1f} | {med(lambda x: x['speedup_vs_best']):.3f} | {med(lambda x: x['mpi_iallreduce_time_s'])*1e3:.1f} | "
          f"{med(lambda x: x['qccl_ring_time_s'])*1e3:.1f} | {sum(1 for x in v if x['checked'])} of {len(v)}, {sum(x['wrong'] or 0 for x in v)} |")
