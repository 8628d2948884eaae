"""The DDP hook with a CUDA model under real DDP: N processes sharing GPU 0, torch.distributed on
gloo, qccl's communicator from torchrun's environment. Run by tests/gpu/check.sh (python step):

    python3 tests/python/launch.py --np 2 -- python3 tests/gpu/ddp_cuda.py

Checks, on every rank:
  1. codec "none": the hook's gradients equal gloo's own allreduce bit for bit (two ranks: a + b is
     the same in any order), each step run on a non-default stream with the batch copied in
     asynchronously from pinned memory on that stream;
  2. codec "onebit" with error feedback: the reduced gradients are the same on every rank (bytes),
     finite, and the loss of a fixed-target regression falls;
  3. the same onebit step with the model and its buckets on the CPU gives the CUDA buckets' bytes
     for the same gradients (the CUDA kernels and the CPU codec encode the same bytes), checked on
     the first bucket layout through the hook directly.
Exit status 0 when all hold; an AssertionError names the one that failed. QCCL_DDP_DEVICE=cpu runs
checks 1 and 2 on the CPU (the script's own check on a machine without a GPU).
"""

import contextlib
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import qccl
import qccl.torch as qtorch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from grad_bucket import Bucket  # noqa: E402


DEV = os.environ.get("QCCL_DDP_DEVICE", "cuda")
CUDA = DEV == "cuda"


def pinned(t):
    return t.pin_memory() if CUDA else t


def on(stream):
    return torch.cuda.stream(stream) if CUDA else contextlib.nullcontext()


def wrap(module):
    return DDP(copy.deepcopy(module), device_ids=[0] if CUDA else None, bucket_cap_mb=1)


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 16))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return pinned(torch.randn(64, 256, generator=g)), pinned(torch.randn(64, 16, generator=g))


def grads(ddp, x, y, stream):
    with on(stream):
        xd, yd = x.to(DEV, non_blocking=True), y.to(DEV, non_blocking=True)
        ddp.zero_grad(set_to_none=True)
        nn.functional.mse_loss(ddp(xd), yd).backward()
        out = [p.grad.detach().clone() for p in ddp.parameters()]
    if CUDA:
        stream.synchronize()
    return out


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    comm = qccl.from_env()
    stream = torch.cuda.Stream() if CUDA else None
    base = make_model().to(DEV)

    # 1. codec "none" against gloo.
    ref, ours = wrap(base), wrap(base)
    ours.register_comm_hook(qtorch.HookState(comm, codec="none"), qtorch.allreduce_hook)
    for step in range(3):  # DDP rebuilds its buckets after the first step; the hook follows
        x, y = batch(rank, step)
        for i, (a, b) in enumerate(zip(grads(ref, x, y, stream), grads(ours, x, y, stream))):
            assert torch.equal(a, b), f"rank {rank} step {step} param {i}: hook none != gloo"
    where = ", non-default stream" if CUDA else ""
    print(f"rank {rank}: codec none equals gloo bit for bit (3 steps{where})", flush=True)

    # 2. onebit with error feedback, training a fixed regression.
    model = wrap(base)
    model.register_comm_hook(qtorch.HookState(comm, codec="onebit"), qtorch.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    teacher = make_model(seed=7).to(DEV)
    losses = []
    for step in range(60):
        g = torch.Generator().manual_seed(50_000 + 1000 * step + rank)
        x = pinned(torch.randn(64, 256, generator=g))
        with on(stream):
            xd = x.to(DEV, non_blocking=True)
            with torch.no_grad():
                yd = teacher(xd)
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(xd), yd)
            loss.backward()
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            assert torch.isfinite(flat).all(), f"rank {rank} step {step}: non-finite gradient"
            every = [torch.empty_like(flat) for _ in range(world)]
            opt.step()
        if CUDA:
            stream.synchronize()
        dist.all_gather(every, flat)
        for r in range(world):
            assert torch.equal(every[r].view(torch.int32), flat.view(torch.int32)), \
                f"rank {rank} step {step}: reduced gradients differ from rank {r}"
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, f"rank {rank}: onebit loss {first:.4g} -> {last:.4g} did not fall"
    print(f"rank {rank}: onebit DDP on {DEV}: reduced gradients equal on all ranks for 60 steps, "
          f"loss {first:.4g} -> {last:.4g}", flush=True)

    # 3. The same gradients through CUDA buckets and CPU buckets give the same bytes.
    outs = {}
    for device in ("cuda", "cpu") if CUDA else ():
        state = qtorch.HookState(comm, codec="onebit", min_compress_numel=0)
        g = torch.Generator().manual_seed(9 + rank)
        vals = [torch.randn(n, generator=g) for n in (300_001, 4099)]
        params = [torch.nn.Parameter(torch.zeros(v.numel(), device=device)) for v in vals]
        res = []
        for step in range(3):  # the same layout each step: the residuals carry over
            futs = []
            for i, (v, p) in enumerate(zip(vals, params)):
                b = Bucket(i, [p], i == len(vals) - 1, (v * (step + 1)).to(device))
                futs.append(qtorch.allreduce_hook(state, b))
            res = [f.wait().cpu() for f in futs]
        outs[device] = res
        state.close()
    for a, b in zip(outs.get("cuda", []), outs.get("cpu", [])):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32)), f"rank {rank}: CUDA buckets != CPU buckets"
    if CUDA:
            print(f"rank {rank}: onebit CUDA buckets give the CPU buckets' bytes (3 steps, 2 buckets)", flush=True)

    comm.destroy()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
