"""The DDP communication hook against gloo's allreduce, under mpirun -np N (gloo on 127.0.0.1)."""

import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import qccl
import qccl.torch as qtorch


def make_model(seed=0):
    torch.manual_seed(seed)
    # ~70k parameters, so the two large weights get compressed; biases stay fp32.
    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 64), nn.LayerNorm(64), nn.Linear(64, 10))


def grads_after_step(ddp, x, y):
    """Every parameter's gradient after one step (None for a parameter backward did not reach)."""
    ddp.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(ddp(x), y).backward()
    return [None if p.grad is None else p.grad.clone() for p in ddp.parameters()]


def same_on_every_rank(gloo, t):
    every = [torch.empty_like(t) for _ in range(gloo.get_world_size())]
    gloo.all_gather(every, t)
    return all(torch.equal(t, e) for e in every)


def batch(rank, step, dyadic=False):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 64, generator=g)
    if dyadic:
        x = torch.randint(-4, 5, (32, 64), generator=g).float()
    return x, torch.randint(0, 10, (32,), generator=g)


def pair(gloo, state, bucket_mb=25):
    base = make_model()
    ref = DDP(copy.deepcopy(base), bucket_cap_mb=bucket_mb)
    ours = DDP(copy.deepcopy(base), bucket_cap_mb=bucket_mb)
    ours.register_comm_hook(state, qtorch.allreduce_hook)
    return ref, ours


@pytest.mark.parametrize("async_op", [True, False])
def test_none_codec_equals_gloo_exactly(gloo, comm, async_op):
    # Three steps: DDP rebuilds its buckets after the first, and the hook must follow.
    world = gloo.get_world_size()
    if world > 2:
        # More ranks: inputs whose gradient sums are exact in any order.
        ref, ours = _linear_pair(gloo, comm, async_op)
        for step in range(3):
            x, _ = batch(gloo.get_rank(), step, dyadic=True)
            for a, b in zip(_linear_grads(ref, x), _linear_grads(ours, x)):
                assert torch.equal(a, b), step
        return
    # Two ranks: a + b is the same in any order, so random data match bit for bit.
    ref, ours = pair(gloo, qtorch.HookState(comm, codec="none", async_op=async_op), bucket_mb=0.05)
    for step in range(3):
        x, y = batch(gloo.get_rank(), step)
        for a, b in zip(grads_after_step(ref, x, y), grads_after_step(ours, x, y)):
            assert torch.equal(a, b), step


def _linear_pair(gloo, comm, async_op):
    torch.manual_seed(5)
    base = nn.Sequential(nn.Linear(64, 256, bias=True), nn.Linear(256, 10, bias=True))
    with torch.no_grad():
        for p in base.parameters():
            p.copy_(torch.randint(-2, 3, p.shape).float())
    ref = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    ours = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    ours.register_comm_hook(qtorch.HookState(comm, codec="none", async_op=async_op), qtorch.allreduce_hook)
    return ref, ours


def _linear_grads(ddp, x):
    # Integer weights and inputs: every gradient entry is an integer far below 2^24, so gloo's
    # divide-then-sum and qccl's sum-then-average round identically for power-of-two world sizes.
    ddp.zero_grad(set_to_none=True)
    ddp(x).sum().backward()
    return [p.grad.clone() for p in ddp.parameters()]


def local_grads(module, x, y):
    """This rank's own gradients (no DDP synchronization)."""
    module.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(module(x), y).backward()
    return [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("codec,bits", [("onebit", None), ("maxmin", 4), ("maxmin", 8)])
def test_lossy_hook_filter_and_error(gloo, comm, codec, bits):
    state = qtorch.HookState(comm, codec=codec, bits=bits, min_compress_numel=4096)
    ref, ours = pair(gloo, state)
    x, y = batch(gloo.get_rank(), 0)
    mine = local_grads(copy.deepcopy(ref.module), x, y)
    got = grads_after_step(ours, x, y)
    want = grads_after_step(ref, x, y)
    names = [n for n, _ in ours.module.named_parameters()]
    compressed = 0
    for name, p, g, a, b in zip(names, ours.parameters(), mine, want, got):
        if p.dim() >= 2 and p.numel() >= 4096:
            compressed += 1
            assert not torch.equal(a, b), name
            # onebit and maxmin keep a bucket's sum (onebit exactly, maxmin up to the rounding of
            # the levels), so the mean gradient stays close
            assert abs(float(a.sum() - b.sum())) < 0.05 * float(a.abs().sum()), name
            if codec == "maxmin":
                # Two quantization stages (each rank's input, then the reduced shard), each off by
                # at most half a level, (max - min) / (2^bits - 1) / 2, of a range no wider than
                # the widest rank's gradient range.
                ranges = [torch.zeros(()) for _ in range(gloo.get_world_size())]
                gloo.all_gather(ranges, (g.max() - g.min()).reshape(()))
                bound = max(float(r) for r in ranges) / (2**bits - 1) * 1.01
                assert float((a - b).abs().max()) <= bound, (name, float((a - b).abs().max()), bound)
            else:
                # a sign codec has no per-element bound; it must still beat sending nothing
                assert float((a - b).norm()) < float(a.norm()), name
        else:
            # biases, the LayerNorm and the small last layer travel as fp32
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), name
    assert compressed == 2
    assert comm.stats()["residual_bytes"] > 0


@pytest.mark.parametrize("codec,bits", [("onebit", None), ("maxmin", 4)])
def test_gradient_as_bucket_view_changes_nothing(gloo, comm, codec, bits):
    # DDP(gradient_as_bucket_view=True) hands the hook buckets whose gradients are views of them; the
    # compressed result (and the residuals behind it) must be bit for bit those of the default DDP,
    # through the bucket rebuild after the first step and a few error-feedback steps.
    base = make_model()
    plain = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    viewed = DDP(copy.deepcopy(base), bucket_cap_mb=0.05, gradient_as_bucket_view=True)
    for m in (plain, viewed):
        m.register_comm_hook(qtorch.HookState(comm, codec=codec, bits=bits, min_compress_numel=1),
                             qtorch.allreduce_hook)
    for step in range(4):
        x, y = batch(gloo.get_rank(), step)
        want, got = grads_after_step(plain, x, y), grads_after_step(viewed, x, y)
        for a, b in zip(want, got):
            assert torch.equal(a, b), step
    assert any(not torch.equal(a, torch.zeros_like(a)) for a in got)


class Branchy(nn.Module):
    """A model with a layer that takes no part in forward: DDP must be told (find_unused_parameters)
    or learn it (static_graph), and marks that layer's gradients ready without backward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a, self.b, self.unused = nn.Linear(64, 512), nn.Linear(512, 10), nn.Linear(64, 300)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("flags", ["find_unused_parameters", "static_graph"])
@pytest.mark.parametrize("codec", ["none", "onebit"])
def test_unused_parameters_and_static_graph(gloo, comm, flags, codec):
    # DDP's other modes, on torch 1.13 and 2.x: unused parameters found by DDP at every step, or a
    # static graph (DDP delays the first step's exchanges to the end of backward, then rebuilds).
    # Five steps through the rebuild: the hook gives gloo's gradients (codec none; bit for bit on
    # two ranks, where a + b is the same in either order), and with onebit the same gradients on
    # every rank, compressed.
    base = Branchy()
    ref = DDP(copy.deepcopy(base), bucket_cap_mb=0.05, **{flags: True})
    ours = DDP(copy.deepcopy(base), bucket_cap_mb=0.05, **{flags: True})
    state = qtorch.HookState(comm, codec=codec, min_compress_numel=1)
    ours.register_comm_hook(state, qtorch.allreduce_hook)
    world = gloo.get_world_size()
    for step in range(5):
        x, y = batch(gloo.get_rank(), step)
        want, got = grads_after_step(ref, x, y), grads_after_step(ours, x, y)
        for i, (a, b) in enumerate(zip(want, got)):
            assert (a is None) == (b is None), (step, i)
            if b is None:
                continue
            if codec == "none":
                assert torch.equal(a, b) if world == 2 else torch.allclose(a, b, rtol=1e-5, atol=1e-6), (step, i)
            else:
                assert same_on_every_rank(gloo, b), (step, i)
        if codec == "onebit":  # compressed: not gloo's average
            assert any(not torch.equal(a, b) for a, b in zip(want, got) if a is not None), step
    state.close()


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                    reason="torch 1.13 on the CPU has no fp16 matmul, and its gloo cannot broadcast bf16 (DDP's start)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("codec", ["none", "onebit", "maxmin"])
def test_half_precision_models(gloo, comm, dtype, codec):
    # A model trained in bf16 or fp16: DDP's buckets hold that type and so must the hook's result.
    # Codec none is gloo's average up to the type's rounding (qccl sums in fp32 and rounds once,
    # gloo sums in the type); the lossy codecs give every rank the same finite gradients.
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10)).to(dtype)
    ref = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    ours = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    state = qtorch.HookState(comm, codec=codec, min_compress_numel=1)
    ours.register_comm_hook(state, qtorch.allreduce_hook)
    for step in range(4):
        x, _ = batch(gloo.get_rank(), step)
        grads = []
        for m in (ref, ours):
            m.zero_grad(set_to_none=True)
            m(x.to(dtype)).float().pow(2).mean().backward()
            grads.append([p.grad for p in m.parameters()])
        for a, b in zip(*grads):
            assert b.dtype == dtype and torch.isfinite(b).all(), step
            assert same_on_every_rank(gloo, b), step
            if codec == "none":
                eps = torch.finfo(dtype).eps
                assert torch.allclose(a.float(), b.float(), rtol=4 * eps, atol=4 * eps * float(a.abs().max())), step
    state.close()


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2, reason="torch.compile is torch 2.x")
@pytest.mark.parametrize("codec", ["none", "onebit"])
def test_compiled_ddp(gloo, comm, codec):
    # torch.compile of a DDP model (dynamo's DDPOptimizer; inductor on the CPU): the hook still gets
    # every bucket. Codec none equals the compiled gloo model's gradients where sums are exact in
    # any order (two ranks), onebit gives every rank the same gradients.
    base = make_model()
    ref, ours = DDP(copy.deepcopy(base)), DDP(copy.deepcopy(base))
    state = qtorch.HookState(comm, codec=codec, min_compress_numel=1)
    ours.register_comm_hook(state, qtorch.allreduce_hook)
    compiled = [(m, torch.compile(m)) for m in (ref, ours)]
    world = gloo.get_world_size()
    for step in range(3):
        x, y = batch(gloo.get_rank(), step)
        grads = []
        for m, c in compiled:
            m.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(c(x), y).backward()
            grads.append([p.grad.clone() for p in m.parameters()])
        for a, b in zip(*grads):
            if codec == "none":
                assert torch.equal(a, b) if world == 2 else torch.allclose(a, b, rtol=1e-5, atol=1e-6), step
            assert same_on_every_rank(gloo, b), step
        if codec == "onebit":
            assert any(not torch.equal(a, b) for a, b in zip(*grads)), step
    state.close()


def test_warmup_steps_are_uncompressed(gloo, comm):
    state = qtorch.HookState(comm, codec="onebit", warmup_steps=2, min_compress_numel=1)
    ref, ours = pair(gloo, state)
    for step in range(3):
        x, y = batch(gloo.get_rank(), step)
        want, got = grads_after_step(ref, x, y), grads_after_step(ours, x, y)
        same = all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(want, got))
        assert same == (step < 2), step
        with torch.no_grad():  # keep both replicas on the same weights
            for p, q in zip(ref.parameters(), ours.parameters()):
                q.copy_(p)
    assert state.step == 3


def test_error_feedback_keeps_training_on_track(gloo, comm):
    # A few SGD steps with onebit + EF stay close to fp32 DDP on the same data.
    state = qtorch.HookState(comm, codec="onebit", min_compress_numel=1)
    ref, ours = pair(gloo, state)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.05)
    opt_o = torch.optim.SGD(ours.parameters(), lr=0.05)
    x, y = batch(gloo.get_rank(), 0)
    for _ in range(30):
        for ddp, opt in ((ref, opt_r), (ours, opt_o)):
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
    with torch.no_grad():
        loss_r = nn.functional.cross_entropy(ref(x), y).item()
        loss_o = nn.functional.cross_entropy(ours(x), y).item()
        l0 = nn.functional.cross_entropy(make_model()(x), y).item()
    assert loss_o < 0.8 * l0 and abs(loss_o - loss_r) < 0.25 * (l0 - loss_r), (l0, loss_r, loss_o)


def test_small_quantized_calls_take_allgather(gloo, comm):
    # algo=None: a quantized call of fewer than small_call_numel(n) elements takes allgather (one
    # round, one quantization), a larger one sra (3+ ranks); an explicit algo holds for every call,
    # and calls that quantize nothing (codec none) keep the default.
    assert qtorch.small_call_numel(2) > 1 << 40
    assert [qtorch.small_call_numel(n) for n in (3, 4, 8)] == [294912, 131072, 37449]
    assert qtorch.small_call_numel(4, 4) == 32768 and qtorch.small_call_numel(4, 8) == 16384
    world = gloo.get_world_size()
    calls = []

    class Recording:
        def __init__(self, inner):
            self.inner, self.size, self.rank = inner, inner.size, inner.rank

        def allreduce(self, t, **kw):
            calls.append((t.numel(), kw.get("codec"), kw.get("algo")))
            return self.inner.allreduce(t, **kw)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    torch.manual_seed(2)
    # a 512 x 512 weight (2^18 elements: a call of its own) and, with the 64 x 512 one, a packed call
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    for algo, codec in ((None, "onebit"), (None, "maxmin"), ("sra", "onebit"), (None, "none")):
        calls.clear()
        ddp = DDP(copy.deepcopy(model), bucket_cap_mb=25)
        state = qtorch.HookState(comm, codec=codec, algo=algo, min_compress_numel=1000)
        state.comm = Recording(comm)
        ddp.register_comm_hook(state, qtorch.allreduce_hook)
        x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
        nn.functional.cross_entropy(ddp(x), y).backward()
        lossy = [(n, a) for n, c, a in calls if c == codec and codec != "none"]
        assert sorted(n for n, _ in lossy) == ([] if codec == "none" else [64 * 512 + 512 * 10, 512 * 512])
        for n, a in lossy:
            if algo is not None or world == 2:
                assert a == algo or (algo is None and a == "allgather")
            else:
                bits = 4 if codec == "maxmin" else 1
                assert a == ("allgather" if n < qtorch.small_call_numel(world, bits) else "sra"), (n, a)
        if codec == "none" and world >= 3:
            assert calls and all(a != "allgather" for _, _, a in calls), calls


def test_hook_state_builds_its_communicator(mpi):
    # Under mpirun (no RANK/WORLD_SIZE) a HookState without a communicator takes MPI.COMM_WORLD's.
    state = qtorch.HookState(codec="maxmin", bits=4)
    try:
        assert (state.comm.rank, state.comm.size) == (mpi.rank, mpi.size)
        assert state.algo == ("sra" if mpi.size >= 3 else "allgather")
    finally:
        state.comm.destroy()


def test_hook_state_bad_arguments(comm):
    with pytest.raises(qccl.Error, match="codec"):
        qtorch.HookState(comm, codec="zip")
    with pytest.raises(qccl.Error, match="algo"):
        qtorch.HookState(comm, algo="ring")
    with pytest.raises(TypeError):
        qtorch.HookState(comm="not a communicator")
    with pytest.raises(qccl.Error):
        qtorch.HookState(comm, warmup_steps=-1)


@pytest.mark.parametrize("async_op", [True, False])
def test_hook_error_reaches_backward(gloo, mpi, async_op):
    # A failed exchange must surface as an exception from backward(), not hang or crash.
    dead = qccl.from_mpi(mpi)
    state = qtorch.HookState(dead, codec="onebit", async_op=async_op)
    dead.destroy()
    ddp = DDP(make_model())
    ddp.register_comm_hook(state, qtorch.allreduce_hook)
    x, y = batch(gloo.get_rank(), 0)
    with pytest.raises(Exception, match="destroyed"):
        nn.functional.cross_entropy(ddp(x), y).backward()
