# Medians per transport and size of run.sh's rows: auto against every uncompressed baseline.
import json, sys, statistics as st, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
d = collections.defaultdict(list)
for r in rows:
    d[(r['transport'], r['size'] >> 20)].append(r)
print('| transport | size | ran (per round) | auto ms | best: name, ms | x_best | MPI_Iallreduce ms | qccl ring (bench) ms | gloo ms | cpu ms | checked, wrong |')
print('|---|---|---|---:|---|---:|---:|---:|---:|---:|---|')
for k in sorted(d):
    v = d[k]
    med = lambda f: st.median(f(x) for x in v)
    names = collections.Counter(x['best_uncompressed'] for x in v).most_common(1)[0][0]
    print(f"| {k[0]} | {k[1]} MiB | {','.join(x['algo_ran'] for x in v)} | {med(lambda x: x['time_s'])*1e3:.1f} | {names} {med(lambda x: x['best_uncompressed_time_s'])*1e3:.1f} | "
          f"{med(lambda x: x['speedup_vs_best']):.3f} | {med(lambda x: x['mpi_iallreduce_time_s'])*1e3:.1f} | {med(lambda x: x['qccl_ring_time_s'])*1e3:.1f} | "
          f"{med(lambda x: x['gloo_time_s'])*1e3:.1f} | {med(lambda x: x['cpu']['process_s'])*1e3:.1f} | {sum(1 for x in v if x['checked'])} of {len(v)}, {sum(x['wrong'] or 0 for x in v)} |")
