"""The corrected pass without reconciliation on 25,591,808 elements, last average as a tensor against
packed (qccl._qccl._PackedSent), with the average in cache as the epilogue sees it: each 32768-
element piece is copied into a small buffer first, then corrected; "copy-only" is that copy alone.
Python calls one piece at a time, so the figures include the loop's overhead; compare them with each
other, per process. QCCL_CPU_ISA=avx2|scalar caps the packed pass's path. Then the resident memory
of a tensor copy of such an average and of its packed form.
(MALLOC_MMAP_THRESHOLD_ keeps glibc from serving the packed form from freed heap memory that is
resident already, which would hide its size.)
usage: MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=<build>/bindings/python python micro.py"""
import torch, time, qccl, sys
from qccl import _qccl
torch.set_num_threads(1)
n=25_591_808
g=torch.Generator().manual_seed(0)
def two(n):
    nb=n//512
    a=torch.randn(nb,generator=g).repeat_interleave(512); b=torch.randn(nb,generator=g).repeat_interleave(512)
    return torch.where(torch.rand(n,generator=g)<0.5,a,b).contiguous()
last=two(n); now=two(n); p=torch.randn(n)


def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6


# first, before anything else is allocated and freed: resident memory of a tensor copy of an
# average and of its packed form
r0 = rss()
t = now.clone()
r1 = rss()
q = _qccl._PackedSent(now)
r2 = rss()
print("resident: tensor %.1f MB, packed %.1f MB (blocks kept as floats: %d of %d)" % (r1 - r0, r2 - r1, q.raw_blocks,
                                                                                       q.blocks))
del t, q
sent=last.clone(); ps=_qccl._PackedSent(last)
x=now.clone()
# in-cache: x chunks of 32768 elements copied into a small buffer first (as the decode leaves it)
small=torch.empty(32768)
def run_cached(fn):
    t=time.perf_counter()
    for o in range(0,n,32768):
        small.copy_(now[o:o+32768]); fn(o)
    return time.perf_counter()-t
def copyonly(o): pass
for r in range(4):
    c=run_cached(copyonly)
    a=run_cached(lambda o: _qccl._momentum_corrected_from_sent(small, sent[o:o+32768], p[o:o+32768], 0.9,1.0,0.0))
    b=run_cached(lambda o: _qccl._momentum_corrected_packed(small, ps, o, p, 0.9,1.0,0.0))
    print(f"cached: copy-only {c*1e3:.1f}  tensor {a*1e3:.1f} ms  packed {b*1e3:.1f} ms")

