"""The DDP hook's residual keying across bucket rebuilds and its worker's lifetime (close, destroy,
interrupt, interpreter exit), in one process on loopback communicators with buckets built here
the way DDP hands them over (index, flat buffer, parameters, is_last)."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import qccl
import qccl.torch as qtorch
from grad_bucket import Bucket


def run_step(state, layout):
    """Hands the buckets of one step to the hook, in order, and waits for every future."""
    buckets = [Bucket(i, ps, i == len(layout) - 1) for i, ps in enumerate(layout)]
    futs = [qtorch.allreduce_hook(state, b) for b in buckets]
    for f in futs:
        f.wait()
    return buckets


def slow_hook(seconds):
    """A one-rank loopback communicator and a onebit HookState on it whose every exchange takes at
    least `seconds` longer (a loaded wire); returns them and the list of exchange end times."""
    [comm] = qccl.loopback(1)
    state = qtorch.HookState(comm, codec="onebit", min_compress_numel=1)
    done = []
    inner = state._reduce

    def reduce(*args, **kw):
        time.sleep(seconds)
        inner(*args, **kw)
        done.append(time.monotonic())

    state._reduce = reduce
    return comm, state, done


def test_rebuild_never_swaps_residuals_of_identical_layers():
    [comm] = qccl.loopback(1)
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)  # two identically shaped layers
    state = qtorch.HookState(comm, codec="onebit", min_compress_numel=1)
    first = run_step(state, [[a], [b]])
    id_a, id_b = (state.plan(x).compressed_id for x in first)
    assert id_a != id_b
    assert comm.stats()["tensors"] == 2
    saved_a = comm.save_tensor_state(id_a)
    # The rebuild swaps the two buckets. Keyed by shape and index, bucket 0 would now apply a's
    # residual to b; keyed by the parameters, each layer keeps its own.
    swapped = [Bucket(0, [b], False), Bucket(1, [a], True)]
    assert state.plan(swapped[0]).compressed_id == id_b
    assert state.plan(swapped[1]).compressed_id == id_a
    assert state.retire() == []  # both layouts still live: nothing freed
    assert comm.save_tensor_state(id_a) == saved_a
    run_step(state, [[b], [a]])
    assert comm.stats()["tensors"] == 2
    # A layout that replaces both: their residuals are freed with the step's last bucket.
    joined = run_step(state, [[a, b]])
    assert state.plan(joined[0]).compressed_id not in (id_a, id_b)
    assert comm.stats()["tensors"] == 1
    assert comm.save_tensor_state(id_a) == b"" and comm.save_tensor_state(id_b) == b""
    state.close()
    comm.destroy()


def test_ids_agree_across_ranks_through_a_rebuild():
    # Two ranks, two states: the residual ids depend only on the order the layouts arrive in.
    comms = qccl.loopback(2)
    results = [None, None]

    def rank(r):
        torch.manual_seed(0)
        p = [torch.randn(32, 32) for _ in range(3)]
        state = qtorch.HookState(comms[r], codec="maxmin", bits=4, min_compress_numel=1)
        ids = []
        for layout in ([[p[0]], [p[1]], [p[2]]], [[p[2]], [p[0], p[1]]], [[p[2]], [p[0], p[1]]]):
            ids.append([state.plan(x).compressed_id for x in run_step(state, layout)])
        state.close()
        results[r] = (ids, comms[r].stats()["tensors"])

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert results[0] == results[1]
    ids, tensors = results[0]
    assert ids[1] == ids[2] and ids[1][0] == ids[0][2]  # p2 kept its residual through the rebuild
    assert tensors == 2  # p0's and p1's single-layer residuals were freed
    for c in comms:
        c.destroy()


def test_close_finishes_queued_buckets_then_refuses():
    comm, state, done = slow_hook(0.1)
    params = [torch.randn(16, 16) for _ in range(3)]
    futs = [qtorch.allreduce_hook(state, Bucket(i, [p], i == 2)) for i, p in enumerate(params)]
    assert state.close() is True
    assert len(done) == 3 and all(f.done() for f in futs)
    for f in futs:
        f.wait()  # no exception
    late = qtorch.allreduce_hook(state, Bucket(0, [params[0]], True))
    with pytest.raises(qccl.Error, match="closed"):
        late.wait()
    assert state.close() is True  # twice is fine
    comm.destroy()


def test_destroy_drains_the_hook_worker_first():
    comm, state, done = slow_hook(0.2)
    futs = [qtorch.allreduce_hook(state, Bucket(i, [torch.randn(8, 8)], i == 1)) for i in range(2)]
    comm.destroy()  # from the main thread, while the worker still has both buckets
    assert len(done) == 2
    for f in futs:
        f.wait()  # both ran on a live communicator
    assert not comm.alive


def test_close_interrupts_a_stuck_exchange():
    comms = qccl.loopback(2, timeout=60)  # rank 1 never joins
    state = qtorch.HookState(comms[0], codec="onebit", min_compress_numel=1)
    fut = qtorch.allreduce_hook(state, Bucket(0, [torch.randn(64, 64)], True))
    time.sleep(0.3)
    t0 = time.monotonic()
    assert state.close(timeout=0.5) is False
    assert time.monotonic() - t0 < 20
    with pytest.raises(qccl.Error, match="qcclCommFailed|aborted|interrupt"):
        fut.wait()
    for c in comms:
        c.destroy()


def test_exit_during_backward_finishes_the_queued_buckets():
    # The script queues a slow bucket and exits at once: the exit handlers must let the worker
    # finish it on a live communicator, then free the communicator, and exit cleanly.
    script = textwrap.dedent("""
        import time, torch, qccl, qccl.torch as qtorch
        [comm] = qccl.loopback(1)
        state = qtorch.HookState(comm, codec="onebit", min_compress_numel=1)
        inner = state._reduce
        def reduce(*a, **k):
            time.sleep(0.5)
            inner(*a, **k)
            print("bucket reduced, communicator alive:", comm.alive, flush=True)
        state._reduce = reduce
        class B:
            def __init__(s): s.b = torch.randn(4096)
            def index(s): return 0
            def buffer(s): return s.b
            def parameters(s): return [torch.nn.Parameter(torch.zeros(64, 64))]
            def is_last(s): return True
        qtorch.allreduce_hook(state, B())
        print("leaving", flush=True)
    """)
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["leaving", "bucket reduced, communicator alive: True"], (r.stdout, r.stderr)


def test_large_segments_are_reduced_in_place_each_with_its_residual():
    # Two large weights interleaved with biases (DDP's layout): each weight gets a call of its own
    # on a view of the bucket (no packing copy) and a residual of its own; the biases stay exact.
    [comm] = qccl.loopback(1)
    torch.manual_seed(1)
    w1, b1, w2, b2 = torch.randn(512, 512), torch.randn(512), torch.randn(512, 512), torch.randn(512)
    state = qtorch.HookState(comm, codec="onebit")
    [bucket] = run_step(state, [[w1, b1, w2, b2]])
    plan = state.plan(bucket)
    assert [(o, n) for o, n, _ in plan.own] == [(0, w1.numel()), (w1.numel() + 512, w2.numel())]
    assert plan.compressed == [] and len({i for _, _, i in plan.own} | {plan.compressed_id, plan.raw_id}) == 4
    out = bucket.buffer()
    assert torch.equal(out[w1.numel():w1.numel() + 512], b1)
    assert torch.equal(out[-512:], b2)
    assert not torch.equal(out[:w1.numel()], w1.flatten())  # onebit changed the weights
    assert comm.stats()["tensors"] == 2
    run_step(state, [[w1, b1], [w2, b2]])  # a rebuild: the old layout's residuals are freed
    assert comm.stats()["tensors"] == 2
    assert all(comm.save_tensor_state(i) == b"" for _, _, i in plan.own)
    state.close()
    comm.destroy()


@pytest.mark.skipif(not torch.cuda.is_available() or not qccl._qccl.HAVE_CUDA,
                    reason="needs a CUDA device and qccl built with CUDA")
def test_cuda_bucket_completes_in_stream_order():
    [comm] = qccl.loopback(1)
    state = qtorch.HookState(comm, codec="none")
    p = torch.nn.Parameter(torch.zeros(256, 256, device="cuda"))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        b = Bucket(0, [p], True)
        b._buf = torch.arange(p.numel(), device="cuda", dtype=torch.float32)
        b._buf.mul_(2.0)  # queued on the side stream: the exchange must come after it
        fut = qtorch.allreduce_hook(state, b)
    out = fut.wait()
    assert torch.equal(out.cpu(), torch.arange(p.numel(), dtype=torch.float32) * 2.0)
    state.close()
    comm.destroy()


@pytest.mark.skipif(not torch.cuda.is_available() or not qccl._qccl.HAVE_CUDA,
                    reason="needs a CUDA device and qccl built with CUDA")
@pytest.mark.parametrize("codec", ["onebit", "maxmin", "none"])
def test_cuda_buckets_give_the_cpu_buckets_bytes(codec):
    # Two ranks on threads, three steps of two buckets each, once with CUDA buckets (residuals on
    # the device) and once with CPU buckets: the reduced buckets agree bit for bit.
    def run(device):
        comms = qccl.loopback(2)
        out = [None, None]

        def rank(r):
            state = qtorch.HookState(comms[r], codec=codec)
            g = torch.Generator().manual_seed(100 + r)
            params = [torch.nn.Parameter(torch.zeros(n, device=device)) for n in (70001, 4099)]
            for _ in range(3):
                buckets = [Bucket(i, [p], i == 1) for i, p in enumerate(params)]
                for b in buckets:
                    b._buf = torch.randn(b._buf.numel(), generator=g).to(device)
                futs = [qtorch.allreduce_hook(state, b) for b in buckets]
                res = [f.wait() for f in futs]
            out[r] = [t.cpu() for t in res]
            state.close()

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in comms:
            c.destroy()
        return out

    cuda, cpu = run("cuda"), run("cpu")
    for r in range(2):
        for got, want in zip(cuda[r], cpu[r]):
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)), f"rank {r}"


@pytest.mark.parametrize("async_op", [True, False])
def test_clip_grad_norm_holds_a_steps_buckets_until_its_last(async_op):
    # Each bucket is held (its future pending) until the step's last one comes; then all are scaled
    # by one factor from their joint norm and reduced in order. Closing in the middle of a step
    # fails the held futures instead of leaving DDP waiting on them.
    [comm] = qccl.loopback(1)
    state = qtorch.HookState(comm, codec="none", clip_grad_norm=1.0, async_op=async_op)
    ps = [torch.full((3, 4), 1.0), torch.full((4, 4), 2.0)]  # norm sqrt(12 + 64) = 8.72
    b0, b1 = Bucket(0, [ps[0]], False), Bucket(1, [ps[1]], True)
    f0 = qtorch.allreduce_hook(state, b0)
    time.sleep(0.05)
    assert not f0.done()
    f1 = qtorch.allreduce_hook(state, b1)
    f0.wait(), f1.wait()
    factor = 1.0 / (76**0.5 + 1e-6)
    assert state.last_local_grad_norm == pytest.approx(76**0.5)
    assert torch.allclose(b0.buffer(), torch.full((12,), factor))
    assert torch.allclose(b1.buffer(), torch.full((16,), 2 * factor))
    pending = qtorch.allreduce_hook(state, Bucket(0, [ps[0]], False))
    state.close()
    with pytest.raises(Exception, match="middle of a step"):
        pending.wait()
    comm.destroy()
