#!/usr/bin/env python3
"""The corrected pass inside the last decode against the same pass after the call, one allreduce of
N float32 elements (default 25.6M, the DDP benchmark's model) with onebit, on the hook's algorithm for
optimizer= (allgather), on local ranks: CPU time per rank and call (time.process_time) and wall time,
medians over --calls calls, alternating the two variants call by call. Both must give the same bits.
With --local, both variants first run the hook's local pass (u = mu u + g + wd p) and send u, and a
third, "fused", runs it as the call's prologue at each chunk's encode (qcclAllreduceFused).
usage: mpirun -np 4 python3 micro.py [--n N] [--calls K] [--local]"""
import argparse, os, statistics as st, time

os.environ.setdefault("QCCL_LOCAL_COMPRESS", "1")  # one host: compress as asked, as across hosts
import torch
from mpi4py import MPI
import qccl
from qccl import _qccl

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=25_600_000)
ap.add_argument("--calls", type=int, default=9)
ap.add_argument("--algo", default="allgather")
ap.add_argument("--local", action="store_true", help="the local pass too, and the variant with it as the prologue")
args = ap.parse_args()
world = MPI.COMM_WORLD
comm = qccl.from_mpi(world)
rank, n = comm.rank, args.n
torch.manual_seed(rank)
grad = torch.randn(n)
param = torch.randn(n)
names = ("after", "inside", "fused") if args.local else ("after", "inside")
sent = {v: torch.randn(n, generator=torch.Generator().manual_seed(5)) for v in names}
vel = {v: torch.randn(n, generator=torch.Generator().manual_seed(6)) for v in names}
mu, keep, wd = 0.9, 1.0, 1e-4
out = {}
times = {v: [] for v in names}
for call in range(args.calls + 1):
    for v in (names if call % 2 == 0 else names[::-1]):
        x = grad.clone()
        u = vel[v]
        world.Barrier()
        w0, c0 = time.perf_counter(), time.process_time()
        tid = 1 + names.index(v)
        if args.local and v != "fused":
            _qccl._momentum_local_plain(x, u, param, mu, keep, wd)  # u = mu u + (x + wd p); x = u
        if v == "after":
            comm.allreduce(x, op="avg", codec="onebit", algo=args.algo, tensor_id=tid)
            _qccl._momentum_corrected_from_sent(x, sent[v], param, mu, keep, wd)
        elif v == "inside":
            comm._allreduce_corrected(x, [(0, n, sent[v], None, param, mu, keep, wd)], op="avg", codec="onebit",
                                      algo=args.algo, tensor_id=tid)
        else:  # u sent out of place, the local pass as its prologue, the corrected pass as its epilogue
            comm._allreduce_corrected(u, [(0, n, sent[v], None, param, mu, keep, wd)], out=x, op="avg",
                                      codec="onebit", algo=args.algo, tensor_id=tid,
                                      local=[(0, n, grad, None, None, param, mu, keep, wd)])
        c1, w1 = time.process_time(), time.perf_counter()
        if call > 0:
            times[v].append((c1 - c0, w1 - w0))
        out[v] = x
same = all(torch.equal(out[names[0]], out[v]) and torch.equal(sent[names[0]], sent[v]) for v in names)
rows = world.gather({v: times[v] for v in times}, root=0)
same_all = world.allreduce(int(not same), op=MPI.SUM) == 0
if rank == 0:
    print(f"{world.size} ranks, n {n}, onebit {args.algo}, {args.calls} calls each, same bits on every rank: {same_all}")
    for v in names:
        cpu = [c for r in rows for c, _ in r[v]]
        wall = [max(r[v][k][1] for r in rows) for k in range(args.calls)]
        print(f"  pass {v:6s}: CPU per rank and call median {1e3 * st.median(cpu):6.1f} ms "
              f"(range {1e3 * min(cpu):.1f}-{1e3 * max(cpu):.1f}); wall median {1e3 * st.median(wall):6.1f} ms")
