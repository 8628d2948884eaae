#!/usr/bin/env python3
"""Times momentum correction's fused passes on 25.6M float32 elements (the DDP benchmark's model),
SGD momentum 0.9 without weight decay, one thread: the reconciled pair (_momentum_local,
_momentum_corrected; the default) and the pair reconcile=False takes (_momentum_local_plain,
_momentum_corrected_from_sent), interleaved, median of 11 each.
usage: PYTHONPATH=build-dev/bindings/python .venv/bin/python pass.py [LABEL]
(two at once: start two of them together)"""
import statistics
import sys
import time

import torch

import qccl  # noqa: F401
from qccl import _qccl

torch.set_num_threads(1)
n = 25_600_000
g, u, sent, buf, p, x = (torch.randn(n) for _ in range(6))
mu, keep, wd = 0.9, 1.0, 0.0
times = {k: [] for k in ("local", "corrected", "local_plain", "corrected_from_sent")}


def timed(name, f, *a):
    t = time.perf_counter()
    f(*a)
    times[name].append(time.perf_counter() - t)


for _ in range(11):
    timed("local", _qccl._momentum_local, g, u, sent, buf, p, mu, keep, wd)
    timed("corrected", _qccl._momentum_corrected, x, buf, sent, p, mu, keep, wd)
    time.sleep(0.05)
    timed("local_plain", _qccl._momentum_local_plain, g, u, p, mu, keep, wd)
    timed("corrected_from_sent", _qccl._momentum_corrected_from_sent, x, sent, p, mu, keep, wd)
    time.sleep(0.05)
m = {k: 1e3 * statistics.median(v) for k, v in times.items()}
label = sys.argv[1] if len(sys.argv) > 1 else ""
print(f"{label} reconciled: local {m['local']:.1f} + corrected {m['corrected']:.1f} = "
      f"{m['local'] + m['corrected']:.1f} ms; reconcile=False: local {m['local_plain']:.1f} + corrected "
      f"{m['corrected_from_sent']:.1f} = {m['local_plain'] + m['corrected_from_sent']:.1f} ms")
