"""The DDP hook's error-feedback residuals across checkpoints and under a mixed-precision loss
scaler (HookState.state_dict / load_state_dict, HookState(grad_scaler=)).

Run under mpirun (np 2 and 4, see CMakeLists.txt): DDP's own process group is gloo, the buckets
travel through qccl. Every comparison is exact: onebit is scale-equivariant for powers of two, so
gradients of a loss scaled by 2^k come back as exactly 2^k times the unscaled ones when (and only
when) the residuals are kept in the right units.
"""

import copy
import hashlib

import pytest

torch = pytest.importorskip("torch")
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import qccl  # noqa: E402
import qccl.torch as qtorch  # noqa: E402

# DDP's initial buckets. Its rebuilt ones differ by torch version: 1.13 puts the whole model in a
# first bucket of 1 MiB, 2.x caps every rebuilt bucket at bucket_cap_mb.
BUCKET_MB = 0.005
# Large enough for the whole model in one bucket, initial and rebuilt, on every torch version.
ONE_BUCKET_MB = 1.0


class Backwards(torch.nn.Module):
    """An MLP whose layers are registered last first: DDP's initial bucket (parameters in reverse
    registration order) then has the layout of its rebuilt one (in the order backward produced the
    gradients) when both hold the whole model, so a checkpoint's residuals fit from the resumed
    run's first step."""

    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(64, 8, bias=False)
        self.hid = torch.nn.Linear(64, 64, bias=False)
        self.inp = torch.nn.Linear(32, 64, bias=False)

    def forward(self, x):
        return self.out(torch.relu(self.hid(torch.relu(self.inp(x)))))


def make_model(bias=True):
    torch.manual_seed(0)
    if not bias:
        return Backwards()
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 8))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)


def loss_of(model, rank, step):
    x, y = batch(rank, step)
    return torch.nn.functional.mse_loss(model(x), y)


def ddp(comm, bias=True, bucket_mb=BUCKET_MB, **hook):
    model = DDP(make_model(bias), bucket_cap_mb=bucket_mb)
    state = qtorch.HookState(comm, codec="onebit", min_compress_numel=256, **hook)
    model.register_comm_hook(state, qtorch.allreduce_hook)
    return model, state


def digest(model):
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def sgd_step(model, scale=1.0):
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(0.05 * p.grad / scale)
            p.grad = None


class FakeScaler:
    """What the hook reads from a GradScaler: the current scale."""

    def __init__(self, scale):
        self.scale = scale

    def get_scale(self):
        return self.scale


def train(model, rank, start, steps):
    for step in range(start, start + steps):
        loss_of(model, rank, step).backward()
        sgd_step(model)


def test_checkpoint_resume_keeps_the_residuals(gloo, comm):
    # DDP's initial bucket (the resumed run's first step) has the layout of the rebuilt one that
    # was saved (see Backwards): resuming is exact.
    rank = gloo.get_rank()
    model, state = ddp(comm, bias=False, bucket_mb=ONE_BUCKET_MB)
    train(model, rank, 0, 6)
    ckpt = {"model": copy.deepcopy(model.module.state_dict()), "hook": copy.deepcopy(state.state_dict())}
    assert any(any(s) for r in ckpt["hook"]["residuals"] for s in r["state"]), "no residual saved"
    train(model, rank, 6, 6)
    state.close()

    def resumed(load_hook):
        m, s = ddp(comm, bias=False, bucket_mb=ONE_BUCKET_MB)
        m.module.load_state_dict(ckpt["model"])
        if load_hook:
            s.load_state_dict(ckpt["hook"])
        train(m, rank, 6, 6)
        s.close()
        return digest(m.module)

    assert resumed(True) == digest(model.module)
    assert resumed(False) != digest(model.module)  # the residuals matter: the test can fail


def test_checkpoint_residuals_wait_for_ddps_rebuilt_buckets(gloo, comm, recwarn):
    # Here DDP's initial buckets differ from the rebuilt, saved one: the first step sends them
    # uncompressed, and after the rebuild every saved residual is taken (no warning).
    rank = gloo.get_rank()
    model, state = ddp(comm)
    train(model, rank, 0, 4)
    sd = state.state_dict()
    state.close()
    m, s = ddp(comm)
    m.module.load_state_dict(model.module.state_dict())
    s.load_state_dict(sd)
    train(m, rank, 4, 3)
    assert not s._saved and not [w for w in recwarn if "matched no bucket" in str(w.message)]
    restored = s.state_dict()["residuals"]
    assert [r["layout"] for r in restored] == [r["layout"] for r in sd["residuals"]]
    s.close()


def test_load_state_dict_after_a_step_is_refused(gloo, comm):
    model, state = ddp(comm)
    sd = state.state_dict()
    loss_of(model, gloo.get_rank(), 0).backward()
    with pytest.raises(qccl.Error, match="before the first backward"):
        state.load_state_dict(sd)
    state.close()


def test_grad_scaler_rescales_and_rolls_back_residuals(gloo, comm):
    rank = gloo.get_rank()
    plain, plain_state = ddp(comm)  # reference: unscaled losses, no scaler
    scaler = FakeScaler(1024.0)
    amp, amp_state = ddp(comm, grad_scaler=scaler)
    blind, blind_state = ddp(comm)  # scaled losses, but the hook is not told the scale
    # step -> what the scaler does after it: grow x2 after step 2, skip step 5 (Inf in one layer).
    grow, skip = {2}, {5}
    inf_hook = None
    blind_diverged = False
    for step in range(9):
        s = scaler.scale
        if step in skip:
            inf_hook = amp.module[0].weight.register_hook(lambda g: g * float("inf"))  # one layer only
        (loss_of(amp, rank, step) * s).backward()
        (loss_of(blind, rank, step) * s).backward()
        if step in skip:
            inf_hook.remove()
            assert not torch.isfinite(amp.module[0].weight.grad).all()
            assert torch.isfinite(amp.module[4].weight.grad).all()  # other buckets were exchanged
            for m in (amp, blind):
                for p in m.parameters():
                    p.grad = None
            scaler.scale = s / 2  # GradScaler's backoff: the step is skipped, the scale halved
            continue
        loss_of(plain, rank, step).backward()
        for p, q, b in zip(plain.parameters(), amp.parameters(), blind.parameters()):
            assert torch.equal(q.grad / s, p.grad), f"step {step}: scaled gradients differ"
            blind_diverged |= not torch.equal(b.grad / s, p.grad)
        sgd_step(plain)
        sgd_step(amp, s)
        sgd_step(blind, s)
        if step in grow:
            scaler.scale = s * 2
    assert digest(plain.module) == digest(amp.module)
    assert blind_diverged  # without grad_scaler the residuals are in the wrong units: the test can fail
    for st in (plain_state, amp_state, blind_state):
        st.close()


@pytest.mark.skipif(not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"),
                    reason="no torch.amp.GradScaler for the CPU (torch < 2.3)")
def test_a_real_grad_scaler(gloo, comm):
    # torch's own GradScaler on the CPU, as a training loop uses it: scale the loss, step through
    # the scaler, update. One step's gradients hold an Inf, so the scaler skips it and halves its
    # scale. Since scaling by powers of two is exact here, the parameters must end bit for bit
    # where an unscaled run without that step ends (the hook rolled the skipped step's residuals
    # back and kept the others in the scale's units).
    rank = gloo.get_rank()
    plain, plain_state = ddp(comm)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=3)
    amp, amp_state = ddp(comm, grad_scaler=scaler)
    opt_plain = torch.optim.SGD(plain.parameters(), lr=0.05)
    opt_amp = torch.optim.SGD(amp.parameters(), lr=0.05)
    scales = []
    for step in range(10):
        poison = amp.module[0].weight.register_hook(lambda g: g * float("inf")) if step == 4 else None
        opt_amp.zero_grad()
        scaler.scale(loss_of(amp, rank, step)).backward()
        scaler.step(opt_amp)
        scaler.update()
        scales.append(scaler.get_scale())
        if poison is not None:
            poison.remove()
            continue  # the scaler skipped this step; the plain run never takes it
        opt_plain.zero_grad()
        loss_of(plain, rank, step).backward()
        opt_plain.step()
    assert scales[4] == scales[3] / 2 and max(scales) > scales[0], scales  # skipped once, grew too
    assert digest(plain.module) == digest(amp.module)
    for st in (plain_state, amp_state):
        st.close()


def test_grad_scaler_arguments(comm):
    with pytest.raises(qccl.Error, match="get_scale"):
        qtorch.HookState(comm, codec="onebit", grad_scaler=object())
    opt = torch.optim.SGD(make_model().parameters(), lr=0.1, momentum=0.9)
    st = qtorch.HookState(comm, codec="onebit", grad_scaler=FakeScaler(1.0), optimizer=opt)  # together: test_momentum.py
    assert st.momentum is not None and st.grad_scaler is not None
    st.close()
