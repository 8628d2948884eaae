#!/usr/bin/env python3
"""The corrected pass inside the last decode against the same pass after the call, one allreduce of
N float32 elements (default 25.6M, the DDP benchmark's model) with onebit, on the hook's algorithm for
optimizer= (allgather), on local ranks: CPU time per rank and call (time.process_time) and wall time,
medians over --calls calls, alternating the two variants call by call. Both must give the same bits.
usage: mpirun -np 4 python3 micro.py [--n N] [--calls K]"""
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
args = ap.parse_args()
world = MPI.COMM_WORLD
comm = qccl.from_mpi(world)
rank, n = comm.rank, args.n
torch.manual_seed(rank)
grad = torch.randn(n)
param = torch.randn(n)
sent = {v: torch.randn(n, generator=torch.Generator().manual_seed(5)) for v in ("after", "inside")}
mu, keep, wd = 0.9, 1.0, 1e-4
out = {}
times = {"after": [], "inside": []}
for call in range(args.calls + 1):
    for v in (("after", "inside") if call % 2 == 0 else ("inside", "after")):
        x = grad.clone()
        world.Barrier()
        w0, c0 = time.perf_counter(), time.process_time()
        if v == "after":
            comm.allreduce(x, op="avg", codec="onebit", algo=args.algo, tensor_id=1)
            _qccl._momentum_corrected_from_sent(x, sent[v], param, mu, keep, wd)
        else:
            comm._allreduce_corrected(x, [(0, n, sent[v], None, param, mu, keep, wd)], op="avg", codec="onebit",
                                      algo=args.algo, tensor_id=2)
        c1, w1 = time.process_time(), time.perf_counter()
        if call > 0:
            times[v].append((c1 - c0, w1 - w0))
        out[v] = x
same = torch.equal(out["after"], out["inside"]) and torch.equal(sent["after"], sent["inside"])
rows = world.gather({v: times[v] for v in times}, root=0)
same_all = world.allreduce(int(not same), op=MPI.SUM) == 0
if rank == 0:
    print(f"{world.size} ranks, n {n}, onebit {args.algo}, {args.calls} calls each, same bits on every rank: {same_all}")
    for v in ("after", "inside"):
        cpu = [c for r in rows for c, _ in r[v]]
        wall = [max(r[v][k][1] for r in rows) for k in range(args.calls)]
        print(f"  pass {v:6s}: CPU per rank and call median {1e3 * st.median(cpu):6.1f} ms "
              f"(range {1e3 * min(cpu):.1f}-{1e3 * max(cpu):.1f}); wall median {1e3 * st.median(wall):6.1f} ms")
