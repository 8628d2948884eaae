import sys, time, threading
import torch
from mpi4py import MPI
import qccl
comm = qccl.from_mpi(MPI.COMM_WORLD, timeout=120.0)
rank = MPI.COMM_WORLD.rank
n = 25 * 1024 * 1024 // 4
x = torch.randn(n)
def timeit(fn, reps=4):
    ts = []
    for _ in range(reps):
        MPI.COMM_WORLD.Barrier()
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2] * 1e3
res = {}
res['qccl main'] = timeit(lambda: comm.allreduce(x, op="avg", codec="none", tensor_id=7))
def in_thread(fn):
    def run():
        t = threading.Thread(target=fn); t.start(); t.join()
    return run
res['qccl thread'] = timeit(in_thread(lambda: comm.allreduce(x, op="avg", codec="none", tensor_id=7)))
res['qccl ring main'] = timeit(lambda: comm.allreduce(x, op="avg", codec="none", algo="ring", tensor_id=8))
y = x.numpy().copy(); z = y.copy()
res['mpi4py Allreduce'] = timeit(lambda: MPI.COMM_WORLD.Allreduce(y, z, op=MPI.SUM))
def iall():
    r = MPI.COMM_WORLD.Iallreduce(y, z, op=MPI.SUM); r.Wait()
res['mpi4py Iallreduce+Wait'] = timeit(iall)
if rank == 0:
    print("thread level", MPI.Query_thread(), "MULTIPLE=", MPI.THREAD_MULTIPLE)
    for k, v in res.items(): print(f"{k:25s} {v:8.1f} ms")
def iall_inplace():
    r = MPI.COMM_WORLD.Iallreduce(MPI.IN_PLACE, z, op=MPI.SUM); r.Wait()
v = timeit(iall_inplace)
w = timeit(lambda: MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, z, op=MPI.SUM))
if rank == 0:
    print(f"{'mpi4py Iallreduce IN_PLACE':25s} {v:8.1f} ms")
    print(f"{'mpi4py Allreduce IN_PLACE':25s} {w:8.1f} ms")
