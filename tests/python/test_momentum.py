"""Momentum-aware compression (HookState(..., optimizer=opt)) under real DDP, on 1 rank (plain
pytest) and under mpirun -np 2/4.

With codec none the momentum-aware path must give what DDP's own allreduce plus opt.step() gives:
the returned gradient makes the optimizer's buffer equal the averaged momentum, which with exact
averaging is the optimizer's own momentum. Float tolerance: the path rewrites the optimizer's
arithmetic (g' = (U - mu * buf) / (1 - dampening) - wd * p, then the optimizer undoes it), which
costs a few ulps per step; after 30 steps the parameters agree to 2e-5 of their largest magnitude.
"""

import copy
import hashlib

import pytest
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import qccl
import qccl.momentum as qmomentum
import qccl.torch as qtorch

TOL = 2e-5

OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "sgd_nesterov_wd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "sgd_dampening_wd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=1e-2),
    "sgd_maximize": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, maximize=True),
    "adam_wd": lambda ps: torch.optim.Adam(ps, lr=1e-3, weight_decay=1e-2),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=1e-2),
}


def make_model(seed=0):
    torch.manual_seed(seed)
    # Two weights above min_compress_numel (2048 and 4096 elements) take the momentum-aware path;
    # biases and the small last layer keep the plain one.
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


TEACHER = torch.randn(32, 4, generator=torch.Generator().manual_seed(7)) / 4


def batch(rank, step):
    """A learnable regression task: a fixed linear teacher plus noise; every rank its own samples."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 32, generator=g)
    return x, x @ TEACHER + 0.1 * torch.randn(16, 4, generator=g)


def loss_of(model, x, y):
    return nn.functional.mse_loss(model(x), y)


def max_rel_diff(a_model, b_model):
    with torch.no_grad():
        pairs = zip(a_model.parameters(), b_model.parameters())
        return max(float((a - b).abs().max() / a.abs().max()) for a, b in pairs)


def digest(model):
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def identical_across_ranks(mpi, model):
    every = mpi.allgather(digest(model))
    return all(d == every[0] for d in every)


def pair(make_opt, comm, scheme="dgc", codec="none", **hook):
    """(reference DDP + optimizer, DDP with the qccl hook and optimizer=, HookState) from one init.
    Without the rotation unless asked for: the tests of the passes fused into the exchange take the
    calls that fuse them (a rotated call does not); the rotation has tests of its own below."""
    hook.setdefault("rotation", 0)
    base = make_model()
    ref = DDP(copy.deepcopy(base))
    ours = DDP(copy.deepcopy(base))
    ref_opt, our_opt = make_opt(ref.parameters()), make_opt(ours.parameters())
    state = qtorch.HookState(comm, codec=codec, min_compress_numel=1000, optimizer=our_opt, scheme=scheme, **hook)
    ours.register_comm_hook(state, qtorch.allreduce_hook)
    return (ref, ref_opt), (ours, our_opt), state


def train(pairs, rank, steps, start=0, before_step=None):
    for step in range(start, start + steps):
        x, y = batch(rank, step)
        for model, opt in pairs:
            opt.zero_grad(set_to_none=True)
            sign = -1.0 if opt.defaults.get("maximize", False) else 1.0  # maximize=True climbs -loss
            (sign * loss_of(model, x, y)).backward()
            if before_step is None or before_step(step, model, opt):
                opt.step()


@pytest.mark.parametrize("scheme", ["dgc", "ef21"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_codec_none_equals_optimizer_step(gloo, comm, name, scheme):
    ref, ours, state = pair(OPTIMIZERS[name], comm, scheme)
    assert state.momentum is not None and len(state.momentum.state_dict()["state"]) == 0
    train([ref, ours], gloo.get_rank(), 30)
    assert max_rel_diff(ref[0], ours[0]) < TOL
    # the path really ran: both large weights hold local momentum
    assert len(state.momentum.state_dict()["state"]) == 2


def test_without_optimizer_is_the_plain_hook(comm):
    state = qtorch.HookState(comm, codec="onebit")
    assert state.momentum is None
    assert state.state_dict() == {"step": 0, "momentum": None, "residuals": [], "loss_scale": None}


def test_bad_arguments(comm):
    model = make_model()
    with pytest.raises(qccl.Error, match="scheme needs optimizer"):
        qtorch.HookState(comm, scheme="dgc")
    with pytest.raises(qccl.Error, match="RMSprop"):
        qtorch.HookState(comm, optimizer=torch.optim.RMSprop(model.parameters()))
    with pytest.raises(qccl.Error, match="amsgrad"):
        qtorch.HookState(comm, optimizer=torch.optim.Adam(model.parameters(), amsgrad=True))
    with pytest.raises(qccl.Error, match="onebit_adam"):
        qtorch.HookState(comm, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                         scheme="onebit_adam", warmup_steps=5)
    with pytest.raises(qccl.Error, match="warmup_steps"):
        qtorch.HookState(comm, optimizer=torch.optim.Adam(model.parameters()), scheme="onebit_adam")
    with pytest.raises(qccl.Error, match="scheme"):
        qtorch.HookState(comm, optimizer=torch.optim.Adam(model.parameters()), scheme="zip")
    with pytest.raises(qccl.Error, match="reconcile=False needs optimizer"):
        qtorch.HookState(comm, reconcile=False)
    with pytest.raises(qccl.Error, match="ef21"):
        qtorch.HookState(comm, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), scheme="ef21",
                         reconcile=False)
    for bad in ("yes", 33, 16, 1 << 17, True, -512, 512.0):
        with pytest.raises(qccl.Error, match="rotation"):
            qtorch.HookState(comm, codec="onebit", rotation=bad)


def test_default_scheme_by_optimizer_and_codec(comm):
    # SGD: momentum correction; Adam/AdamW with a lossy codec: onebit_adam (frozen second moment),
    # warming up for ADAM_WARMUP_STEPS unless told otherwise; a lossless codec keeps the exact dgc.
    model = make_model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    adamw = torch.optim.AdamW(model.parameters())
    st = qtorch.HookState(comm, codec="onebit", optimizer=sgd)
    assert (st.momentum.scheme, st.warmup_steps) == ("dgc", 0)
    for opt in (adamw, torch.optim.Adam(model.parameters())):
        st = qtorch.HookState(comm, codec="onebit", optimizer=opt)
        assert (st.momentum.scheme, st.warmup_steps) == ("onebit_adam", qmomentum.ADAM_WARMUP_STEPS)
        assert st.momentum.warmup_steps == qmomentum.ADAM_WARMUP_STEPS
    st = qtorch.HookState(comm, codec="maxmin", bits=4, optimizer=adamw, warmup_steps=7)
    assert (st.momentum.scheme, st.warmup_steps) == ("onebit_adam", 7)
    st = qtorch.HookState(comm, codec="none", optimizer=adamw)
    assert (st.momentum.scheme, st.warmup_steps) == ("dgc", 0)
    st = qtorch.HookState(comm, codec="onebit", optimizer=adamw, scheme="dgc")
    assert (st.momentum.scheme, st.warmup_steps) == ("dgc", 0)


def test_learning_rate_schedule_and_warmup(gloo, comm):
    ref, ours, _ = pair(OPTIMIZERS["sgd_nesterov_wd"], comm, warmup_steps=3)

    def schedule(step, model, opt):
        for group in opt.param_groups:
            group["lr"] = 0.05 * min(1.0, (step + 1) / 5) * (0.97**step)
        return True

    train([ref, ours], gloo.get_rank(), 25, before_step=schedule)
    assert max_rel_diff(ref[0], ours[0]) < TOL


def test_gradient_clipping_carries_over(gloo, comm):
    # clip_grad_norm_ after backward changes what opt.step() puts into the buffer; the next exchange
    # must continue from that buffer, as DDP + clipping does.
    ref, ours, _ = pair(OPTIMIZERS["sgd_momentum"], comm)
    clipped = []

    def clip(step, model, opt):
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        clipped.append(float(norm) > 0.05)
        return True

    train([ref, ours], gloo.get_rank(), 30, before_step=clip)
    assert sum(clipped) >= 10  # clipping really acted
    assert max_rel_diff(ref[0], ours[0]) < TOL


def test_skipped_steps_are_forgotten(gloo, comm):
    # A GradScaler skips opt.step() on overflow; the momentum of that step must not survive.
    ref, ours, _ = pair(OPTIMIZERS["sgd_momentum"], comm)
    train([ref, ours], gloo.get_rank(), 20, before_step=lambda step, m, o: step % 4 != 2)
    assert max_rel_diff(ref[0], ours[0]) < TOL


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_without_reconciliation_codec_none_equals_optimizer_step(gloo, comm, name):
    # reconcile=False takes the direction from the last average instead of the optimizer's buffer:
    # with exact averaging the optimizer must still step as plain DDP does, and the path must run.
    ref, ours, state = pair(OPTIMIZERS[name], comm, reconcile=False)
    assert state.momentum.reconcile is False
    train([ref, ours], gloo.get_rank(), 30)
    assert max_rel_diff(ref[0], ours[0]) < TOL
    assert len(state.momentum.state_dict()["state"]) == 2


def test_without_reconciliation_skipped_steps_and_a_reloaded_optimizer(gloo, mpi, comm):
    # What reconcile=False keeps right: a skipped opt.step() (the buffer misses that step's increment
    # of the average, as plain SGD misses its gradient) and an optimizer state loaded mid-run.
    ref, ours, _ = pair(OPTIMIZERS["sgd_nesterov_wd"], comm, reconcile=False)
    rank = gloo.get_rank()
    train([ref, ours], rank, 12, before_step=lambda step, m, o: step % 4 != 2)
    saved = (copy.deepcopy(ref[1].state_dict()), copy.deepcopy(ours[1].state_dict()))
    train([ref, ours], rank, 5, start=12)
    ref[1].load_state_dict(saved[0])  # both optimizers go back 5 steps; the hook's state does not
    ours[1].load_state_dict(saved[1])
    train([ref, ours], rank, 13, start=17)
    assert max_rel_diff(ref[0], ours[0]) < TOL
    # and a lossy codec without reconciliation trains, with replicas identical
    _, lossy, _ = pair(OPTIMIZERS["sgd_momentum"], comm, codec="onebit", reconcile=False)
    x_eval, y_eval = batch(99, 0)
    start = float(loss_of(lossy[0], x_eval, y_eval))
    train([lossy], rank, 40)
    assert float(loss_of(lossy[0], x_eval, y_eval)) < 0.9 * start
    assert identical_across_ranks(mpi, lossy[0])


@pytest.mark.parametrize("codec", ["none", "onebit"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_auto_reconciliation_without_edits_takes_the_cheaper_passes(gloo, comm, name, codec):
    # The default, reconcile="auto": where nothing touches the gradients between the hook and
    # opt.step(), the optimizer's buffer differs from the last average by rounding only, so every
    # exchange after a parameter's first must take reconcile=False's passes: the same parameters
    # bit for bit, and only the first exchange of each of the two weights reconciled.
    _, auto, sa = pair(OPTIMIZERS[name], comm, codec=codec)
    _, plain, _ = pair(OPTIMIZERS[name], comm, codec=codec, reconcile=False)
    assert sa.momentum.reconcile == "auto"
    train([auto, plain], gloo.get_rank(), 25)
    assert (sa.momentum.reconciled, sa.momentum.exchanges) == (2, 50)
    assert digest(auto[0]) == digest(plain[0])


@pytest.mark.parametrize("reconcile", [False, True, "auto"])
@pytest.mark.parametrize("codec", ["none", "onebit"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_corrected_pass_inside_the_exchange_changes_no_bit(gloo, comm, name, codec, reconcile):
    # The corrected pass runs as the exchange's epilogue (qcclAllreduceEpilogue), bucket by bucket
    # inside the last decode where the schedule allows it, else over the result after the sum: the
    # same parameters bit for bit as the pass after the exchange (MomentumCorrection.fuse = False),
    # and it really ran there for every exchange after each weight's first (which has no last
    # average yet), except under maximize, whose sign the pass after the exchange applies.
    rank = gloo.get_rank()
    _, fused, sf = pair(OPTIMIZERS[name], comm, codec=codec, reconcile=reconcile)
    _, after, sa = pair(OPTIMIZERS[name], comm, codec=codec, reconcile=reconcile)
    sa.momentum.fuse = False
    train([fused, after], rank, 12)
    assert digest(fused[0]) == digest(after[0])
    assert sa.momentum.fused == 0 and sf.momentum.exchanges == 24
    assert sf.momentum.fused == (0 if name == "sgd_maximize" else 22)
    # with clipping after backward every exchange reconciles, and the reconciled pass fuses too
    clip = lambda step, model, opt: torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01) is not None
    train([fused, after], rank, 6, start=12, before_step=clip)
    assert digest(fused[0]) == digest(after[0])


@pytest.mark.parametrize("reconcile", [False, "auto"])
@pytest.mark.parametrize("codec", ["none", "onebit"])
@pytest.mark.parametrize("name", ["sgd_momentum", "sgd_nesterov_wd", "adamw"])
def test_a_parameter_with_a_call_of_its_own_sends_its_momentum_out_of_place(gloo, comm, name, codec, reconcile):
    # A weight that is its bucket's only compressed segment gets a call on its own view of the
    # bucket (the first exchange of each has no local momentum yet): its local momentum goes in as the call's input, out of place, instead of being copied
    # into the bucket first, and the average comes out in the bucket with the corrected pass done.
    # The same parameters bit for bit as without either (MomentumCorrection.fuse = False).
    def model():
        torch.manual_seed(3)
        return nn.Sequential(nn.Linear(32, 64, bias=False), nn.ReLU(), nn.Linear(64, 4, bias=False))

    runs = []
    for fuse in (True, False):
        m = DDP(model())
        opt = OPTIMIZERS[name](m.parameters())
        st = qtorch.HookState(comm, codec=codec, min_compress_numel=1000, optimizer=opt, scheme="dgc",
                              reconcile=reconcile, rotation=0)  # a rotated call fuses neither pass
        st.momentum.fuse = fuse
        m.register_comm_hook(st, qtorch.allreduce_hook)
        runs.append(((m, opt), st))
    train([r[0] for r in runs], gloo.get_rank(), 10)
    assert digest(runs[0][0][0]) == digest(runs[1][0][0])
    fused, plain = runs[0][1].momentum, runs[1][1].momentum
    # codec none reduces the whole bucket (both weights) in one call: no weight has a call of its own
    assert fused.exchanges == 10 and (fused.unstaged, fused.fused) == (0 if codec == "none" else 9, 9)
    assert (plain.unstaged, plain.fused) == (0, 0)


@pytest.mark.parametrize("codec", ["none", "onebit"])
@pytest.mark.parametrize("name", ["sgd_momentum", "sgd_dampening_wd", "adamw"])
def test_auto_reconciliation_follows_clipping_and_skipped_steps(gloo, comm, name, codec):
    # Clipping after every backward moves every element of the buffer: each exchange must reconcile,
    # which gives reconcile=True's parameters bit for bit (a sample that missed it, or a tolerance
    # too loose, would take the other pass and change the bits). A skipped opt.step() is seen at the
    # next exchange and only there.
    rank = gloo.get_rank()
    clip = lambda step, model, opt: torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01) is not None
    _, auto, sa = pair(OPTIMIZERS[name], comm, codec=codec)
    _, full, _ = pair(OPTIMIZERS[name], comm, codec=codec, reconcile=True)
    train([auto, full], rank, 20, before_step=clip)
    assert (sa.momentum.reconciled, sa.momentum.exchanges) == (40, 40)
    assert digest(auto[0]) == digest(full[0])
    _, auto, sa = pair(OPTIMIZERS[name], comm, codec=codec)
    skipped = {5, 11, 12}
    counts = []

    def skip(step, model, opt):
        counts.append(sa.momentum.reconciled)
        return step not in skipped

    train([auto], rank, 20, before_step=skip)
    # reconciled at the first exchange (step 0) and at the ones after a skipped step (6, 12, 13)
    added = [b - a for a, b in zip([0] + counts, counts)]
    assert [s for s, n in enumerate(added) if n] == [0, 6, 12, 13] and set(added) <= {0, 2}


def test_drift_check_on_any_tensor_matches_the_fused_one():
    # reconcile="auto"'s check takes the C++ helper on contiguous float32 CPU tensors and torch's
    # operations elsewhere (CUDA, other dtypes, strided views): both must measure the same drift.
    g = torch.Generator().manual_seed(3)
    for n in (0, 1, 100, 4096, 10_001):
        buf = torch.randn(n, generator=g)
        sent = buf + 1e-6 * torch.randn(n, generator=g)
        p = torch.randn(n, generator=g)
        if n > 7:
            sent[7] += 0.5  # one edited element: seen only by the samples that hold it
        for offset in (0, 5, 7, 12345):
            for kw in (0.0, 1e-2):
                fused = qmomentum._drift(buf, sent, p, kw, offset)
                strided = [t.repeat_interleave(2)[::2] for t in (buf, sent, p)]
                assert not strided[0].is_contiguous() or n <= 1
                other = [qmomentum._drift(*strided, kw, offset), qmomentum._drift(buf.double(), sent.double(), p.double(), kw, offset)]
                for d in other:
                    assert d == pytest.approx(fused, rel=1e-6, abs=1e-12), (n, offset, kw)
    bad = torch.ones(300)
    bad[0] = float("nan")
    assert qmomentum._drift(bad, torch.ones(300), bad, 0.0, 0) == float("inf")
    assert qmomentum._drift(bad.double(), torch.ones(300).double(), bad, 0.0, 0) == float("inf")


def test_auto_reconciliation_samples_move_and_survive_a_checkpoint(gloo, comm):
    # An edit of one element of a 4096-element weight after every backward: a fixed sample of 256
    # spaced 16 apart would see it never or always; the moving sample sees it at some exchanges.
    rank = gloo.get_rank()
    _, (model, opt), state = pair(OPTIMIZERS["sgd_momentum"], comm)
    w = model.module[2].weight

    def edit(step, model, opt):
        with torch.no_grad():
            w.grad.view(-1)[7] += 1.0
        return True

    train([(model, opt)], rank, 40, before_step=edit)
    mc = state.momentum
    assert 2 < mc.reconciled < mc.exchanges
    sd = state.state_dict()
    assert sd["momentum"]["calls"] == {0: 39, 2: 39}  # the weights' exchanges after their first
    again = qtorch.HookState(comm, codec="none", min_compress_numel=1000, optimizer=opt)
    again.load_state_dict(sd)
    assert again.momentum._calls == mc._calls
    with pytest.raises(qccl.Error, match="reconcile='sometimes'"):
        qtorch.HookState(comm, optimizer=opt, reconcile="sometimes")


class FakeScaler:
    """What the hook reads of a GradScaler: get_scale()."""

    def __init__(self, scale):
        self.scale = scale

    def get_scale(self):
        return self.scale


@pytest.mark.parametrize("codec,rotation", [("none", 0), ("onebit", 0), ("onebit", 512), ("onebit", "auto")])
@pytest.mark.parametrize("name", ["sgd_momentum", "sgd_nesterov_wd", "adamw"])
def test_grad_scaler_with_optimizer_trains_like_unscaled(gloo, comm, name, codec, rotation):
    # Mixed precision as GradScaler runs it: losses scaled by S (powers of two, so scaling is exact),
    # the gradients unscaled before opt.step(), a step with Inf in one layer skipped with the scale
    # halved, the scale doubled after others. With codec none the hook must give what plain DDP and
    # the optimizer give on the unscaled losses without the skipped step; with onebit (exact under
    # power-of-two scaling) bit for bit what the hook gives on the unscaled losses. Without the
    # unscaled momenta (or their roll-back) the Inf or the scale would stay in them: the test can fail.
    # The rotation is linear and exact under power-of-two scaling too.
    rank = gloo.get_rank()
    scaler = FakeScaler(1024.0)
    hook = dict(codec=codec, scheme="dgc", rotation=rotation)
    ref, ours, state = pair(OPTIMIZERS[name], comm, grad_scaler=scaler, **hook)
    _, unscaled, unscaled_state = pair(OPTIMIZERS[name], comm, **hook)  # the hook on unscaled losses
    grow, skip = {2, 6}, {4, 9}
    for step in range(14):
        x, y = batch(rank, step)
        s = scaler.scale
        for model, opt in (ref, ours, unscaled):
            opt.zero_grad(set_to_none=True)
        inf = ours[0].module[0].weight.register_hook(lambda g: g * float("inf")) if step in skip else None
        (loss_of(ours[0], x, y) * s).backward()
        if inf is not None:
            inf.remove()
            assert not torch.isfinite(ours[0].module[0].weight.grad).all()
            scaler.scale = s / 2  # GradScaler: opt.step() skipped, the scale backed off
            continue
        for p in ours[0].parameters():
            p.grad.div_(s)  # GradScaler.unscale_
        for model, opt in (ref, unscaled):
            loss_of(model, x, y).backward()
            opt.step()
        ours[1].step()
        if step in grow:
            scaler.scale = s * 2
    assert all(torch.isfinite(p).all() for p in ours[0].parameters())
    if codec == "none":
        assert max_rel_diff(ref[0], ours[0]) < TOL
    else:
        assert digest(ours[0]) == digest(unscaled[0])
        assert max_rel_diff(ref[0], ours[0]) > TOL  # onebit really compressed
    # The local momenta are kept unscaled: those of the scaled run equal those of the unscaled one.
    # (With codec none the parameters alone would not show it: the correction's reconciliation
    # absorbs momenta in the wrong units, while a lossy codec's residuals would not.)
    mine, theirs = state.momentum.state_dict()["state"], unscaled_state.momentum.state_dict()["state"]
    assert len(mine) == 2 and sorted(mine) == sorted(theirs)  # the momentum-aware path ran
    for i in mine:
        u, v = mine[i]["u"], theirs[i]["u"]
        assert float((u - v).abs().max() / v.abs().max()) < TOL, f"parameter {i}: local momentum in other units"


def test_no_sync_accumulation(gloo, comm):
    ref, ours, _ = pair(OPTIMIZERS["adamw"], comm)
    rank = gloo.get_rank()
    for step in range(10):
        for model, opt in (ref, ours):
            opt.zero_grad(set_to_none=True)
            with model.no_sync():
                for micro in range(2):
                    loss_of(model, *batch(rank, 100 * step + micro)).backward()
            loss_of(model, *batch(rank, 100 * step + 2)).backward()
            opt.step()
    assert max_rel_diff(ref[0], ours[0]) < TOL


def test_checkpoint_resume_continues_the_trajectory(gloo, comm):
    # Codec none: no residual is involved, and the local momenta (which differ across ranks) decide
    # the result, so resuming without them would change it (checked below: the test can fail).
    rank, make_opt = gloo.get_rank(), OPTIMIZERS["sgd_nesterov_wd"]
    _, (model, opt), state = pair(make_opt, comm)
    train([(model, opt)], rank, 10)
    ckpt = {"model": copy.deepcopy(model.module.state_dict()), "opt": copy.deepcopy(opt.state_dict()),
            "hook": copy.deepcopy(state.state_dict())}
    train([(model, opt)], rank, 10, start=10)

    def resumed(load_hook):
        m = DDP(make_model())
        m.module.load_state_dict(ckpt["model"])
        o = make_opt(m.parameters())
        o.load_state_dict(ckpt["opt"])
        s = qtorch.HookState(comm, codec="none", min_compress_numel=1000, optimizer=o)
        if load_hook:
            s.load_state_dict(ckpt["hook"])
        m.register_comm_hook(s, qtorch.allreduce_hook)
        train([(m, o)], rank, 10, start=10)
        return m

    again = resumed(True)
    assert digest(again.module) == digest(model.module)
    if gloo.get_world_size() > 1:
        assert digest(resumed(False).module) != digest(model.module)


def test_feedback_gain_defaults_and_algorithm(comm):
    # optimizer= with the dgc scheme and a 1-bit codec: error control at DEFAULT_FEEDBACK_GAIN, and
    # with it sra for the 1-bit codecs on 3+ ranks; plain error feedback picks allgather there.
    model = make_model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    flat = "sra" if comm.size >= 3 else "allgather"
    st = qtorch.HookState(comm, codec="onebit", optimizer=sgd)
    assert (st.feedback_gain, st.algo, st.algo_cuda) == (qtorch.DEFAULT_FEEDBACK_GAIN, flat, "allgather")
    assert qtorch.DEFAULT_FEEDBACK_GAIN == 0.5
    st = qtorch.HookState(comm, codec="signscale", optimizer=sgd, feedback_gain=1.0)
    assert (st.feedback_gain, st.algo) == (1.0, "allgather")
    st = qtorch.HookState(comm, codec="onebit", optimizer=sgd, feedback_gain=0.25, algo="allgather")
    assert (st.feedback_gain, st.algo) == (0.25, "allgather")
    st = qtorch.HookState(comm, codec="maxmin", bits=4, optimizer=sgd)  # multi-bit: plain error feedback
    assert (st.feedback_gain, st.algo) == (1.0, flat)
    for kw in (dict(codec="onebit"), dict(codec="none", optimizer=sgd),
               dict(codec="onebit", optimizer=torch.optim.AdamW(model.parameters()))):
        assert qtorch.HookState(comm, **kw).feedback_gain == 1.0, kw  # without optimizer, dgc or a codec
    assert qtorch.HookState(comm, codec="onebit", feedback_gain=0.5).feedback_gain == 0.5
    for bad in (0.0, -1.0, 1.5, float("nan")):
        with pytest.raises(qccl.Error, match="feedback_gain"):
            qtorch.HookState(comm, codec="onebit", optimizer=sgd, feedback_gain=bad)
    for bad in (0.0, 2.0, float("inf")):
        with pytest.raises(qccl.Error, match="gain"):
            comm.set_feedback_gain(5, bad)
    with pytest.raises(qccl.Error, match="id 0"):
        comm.set_feedback_gain(0, 0.5)


def test_feedback_gain_reaches_the_library(gloo, comm):
    # The hook's gain g is the library's error control on its compressed tensors: over two steps it
    # gives, bit for bit, what plain error feedback gives when its residuals are scaled by g by hand
    # between them (the codec sees u + g e either way); the third step differs, because error
    # control kept the other (1 - g) e where the hand-scaled run dropped it.
    base = make_model()
    models, states = [], []
    for gain in (0.5, 1.0):
        m = DDP(copy.deepcopy(base))
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        st = qtorch.HookState(comm, codec="onebit", min_compress_numel=1000, optimizer=opt, feedback_gain=gain,
                              algo="sra" if comm.size >= 3 else "allgather")
        m.register_comm_hook(st, qtorch.allreduce_hook)
        models.append((m, opt))
        states.append(st)
    rank = gloo.get_rank()
    train(models, rank, 2)  # past DDP's bucket rebuild after the first step (new layouts, new residuals)
    ids = sorted({i for plan in states[1]._plans.values() for i in plan.ids})
    assert sum(comm.scale_tensor_state(i, 0.5) for i in ids) >= 1  # the hand-scaled run's residuals
    train(models, rank, 1, start=2)
    assert digest(models[0][0].module) == digest(models[1][0].module)
    train(models, rank, 1, start=3)
    assert digest(models[0][0].module) != digest(models[1][0].module)


@pytest.mark.parametrize("codec,name", [("onebit", "sgd_momentum"), ("signscale", "sgd_nesterov_wd"),
                                        ("maxmin", "adamw")])
def test_lossy_codec_trains_and_replicas_stay_identical(gloo, mpi, comm, codec, name):
    ref, ours, state = pair(OPTIMIZERS[name], comm, codec=codec)
    x_eval, y_eval = batch(99, 0)
    start = float(loss_of(ours[0], x_eval, y_eval))
    train([ours], gloo.get_rank(), 40)
    end = float(loss_of(ours[0], x_eval, y_eval))
    assert end < 0.9 * start, (start, end)
    assert identical_across_ranks(mpi, ours[0])
    # the local momenta differ across ranks when there is more than one (each holds its own gradients)
    sd = state.momentum.state_dict()["state"]
    local = hashlib.sha1(b"".join(s["u"].numpy().tobytes() for s in sd.values())).hexdigest()
    assert (len(set(mpi.allgather(local))) > 1) == (mpi.size > 1)


@pytest.mark.parametrize("mu,keep,wd", [(0.9, 1.0, 0.0), (0.8, 0.7, 1e-2), (0.9, 0.1, 0.0), (0.9, 1.0, 1e-3)])
def test_fused_passes_match_the_torch_expressions(mu, keep, wd):
    # The C++ passes momentum.py takes for float32 CPU tensors against the torch expressions they
    # replace, on values of mixed sign and magnitude (odd size: no vector-width assumptions).
    gen = torch.Generator().manual_seed(3)
    n = 10_007
    g, u, sent, buf, p, x = (torch.randn(n, generator=gen) * 10 ** torch.randint(-3, 3, (n,), generator=gen)
                             for _ in range(6))
    # local: u = mu * (u - (sent - buf)) + keep * (g + wd * p); g = u; sent untouched
    want_u = (u - (sent - buf)) * mu + (g + wd * p) * keep
    g2, u2, sent2 = g.clone(), u.clone(), sent.clone()
    qccl._qccl._momentum_local(g2, u2, sent2, buf, p, mu, keep, wd)
    assert torch.allclose(u2, want_u, rtol=1e-5, atol=1e-6 * float(want_u.abs().max()))
    assert torch.equal(g2, u2) and torch.equal(sent2, sent)
    # corrected: sent = x; x = (x - mu * buf) / keep - wd * p
    want_x = (x - mu * buf) / keep - wd * p
    x2, sent3 = x.clone(), torch.zeros(n)
    qccl._qccl._momentum_corrected(x2, buf, sent3, p, mu, keep, wd)
    assert torch.equal(sent3, x)
    assert torch.allclose(x2, want_x, rtol=1e-5, atol=1e-6 * float(want_x.abs().max()))
    # without reconciliation: u = mu * u + keep * (g + wd * p); g = u, and x = (x - mu * sent) / keep
    # - wd * p; sent = x as it came
    want_u = u * mu + (g + wd * p) * keep
    g4, u4 = g.clone(), u.clone()
    qccl._qccl._momentum_local_plain(g4, u4, p, mu, keep, wd)
    assert torch.allclose(u4, want_u, rtol=1e-5, atol=1e-6 * float(want_u.abs().max()))
    assert torch.equal(g4, u4)
    want_x = (x - mu * sent) / keep - wd * p
    x4, sent4 = x.clone(), sent.clone()
    qccl._qccl._momentum_corrected_from_sent(x4, sent4, p, mu, keep, wd)
    assert torch.equal(sent4, x)
    assert torch.allclose(x4, want_x, rtol=1e-5, atol=1e-6 * float(want_x.abs().max()))
    with pytest.raises(qccl.Error):
        qccl._qccl._momentum_local_plain(g4, u4[:-1], p, mu, keep, wd)
    with pytest.raises(qccl.Error):
        qccl._qccl._momentum_corrected_from_sent(x4, sent4.double(), p, mu, keep, wd)
    # what they refuse: a wrong dtype or size is an error, not a wild write
    with pytest.raises(qccl.Error):
        qccl._qccl._momentum_local(g2.double(), u2, sent2, buf, p, mu, keep, wd)
    with pytest.raises(qccl.Error):
        qccl._qccl._momentum_corrected(x2, buf[:-1], sent3, p, mu, keep, wd)


def test_local_after_a_first_exchange_that_raised():
    # The first exchange raised, so corrected() never ran (no "sent" buffer), and the loop stepped
    # anyway: the next local() starts from the optimizer's buffer instead of failing on the state.
    n = 4096
    p = nn.Parameter(torch.zeros(n))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    mc = qmomentum.MomentumCorrection(opt, "dgc")
    mc.local(p, torch.ones(n))  # step 1; its exchange "raised"
    p.grad = torch.ones(n)
    opt.step()  # momentum_buffer = 1
    g = torch.full((n,), 2.0)
    mc.local(p, g)
    assert torch.allclose(g, torch.full((n,), 2.0 + 0.9 * 1.0))
    mc.corrected(p, g)  # and the state is whole again: the fused passes take over
    p.grad = g
    opt.step()
    g = torch.full((n,), 3.0)
    mc.local(p, g)
    assert torch.isfinite(g).all()


def wide_model():
    """Two 1 MiB layers: past DDP's 1 MiB first bucket, a 10 KB cap gives several buckets (DDP puts a
    smaller model in one bucket whatever the cap)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512),
                         nn.ReLU(), nn.Linear(512, 4))


def local_clip_reference(base, make_opt, gloo, rank, max_norm, steps, scaler=None):
    """What HookState(..., clip_grad_norm=max_norm) is to give: each rank clips its own gradient to
    max_norm * sqrt(ranks) (DGC's local clipping), the clipped gradients are averaged, and the
    optimizer steps; here without DDP, with gloo's allreduce and torch's clip_grad_norm_."""
    import torch.distributed as dist

    model = copy.deepcopy(base)
    opt = make_opt(model.parameters())
    world = gloo.get_world_size()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_of(model, *batch(rank, step)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * world**0.5)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        opt.step()
    return model


@pytest.mark.parametrize("async_op", [True, False])
@pytest.mark.parametrize("name", ["sgd_momentum", "sgd_nesterov_wd", None])
def test_clip_grad_norm_clips_each_rank_before_the_exchange(gloo, comm, name, async_op):
    # Several buckets per step (a 10 KB bucket cap): every bucket of a step is held until the last
    # one, so that one factor from the rank's whole gradient scales all of them before the local
    # momentum or the residual sees them. Codec none, so the result must be the reference's. A
    # factor per bucket, or buckets sent before the factor is known, fails the comparison; a loss
    # scale (FakeScaler, divided out of the norm) must not change the clipping. (Not with Adam: its
    # trajectory under a clip at every step moves apart from a float-rounding difference in the
    # factor, the norm summed in another order, by 3% within 20 steps.)
    rank = gloo.get_rank()
    make_opt = OPTIMIZERS[name or "sgd_momentum"]
    base = wide_model()
    max_norm, steps = 0.02, 24
    ref = local_clip_reference(base, make_opt, gloo, rank, max_norm, steps)
    for scale in (1.0, 256.0):
        model = DDP(copy.deepcopy(base), bucket_cap_mb=0.01)
        opt = make_opt(model.parameters())
        hook = dict(optimizer=opt) if name else {}
        if scale != 1.0:
            hook["grad_scaler"] = FakeScaler(scale)
        state = qtorch.HookState(comm, codec="none", min_compress_numel=1000, async_op=async_op,
                                 clip_grad_norm=max_norm, **hook)
        buckets, norms = set(), []

        def counting(st, bucket) -> torch.futures.Future[torch.Tensor]:
            buckets.add(bucket.index())
            return qtorch.allreduce_hook(st, bucket)

        model.register_comm_hook(state, counting)
        for step in range(steps):
            opt.zero_grad(set_to_none=True)
            (loss_of(model, *batch(rank, step)) * scale).backward()
            for p in model.parameters():
                p.grad.div_(scale)
            norms.append(state.last_local_grad_norm)
            opt.step()
        assert len(buckets) >= 3, buckets
        limit = max_norm * gloo.get_world_size() ** 0.5
        assert sum(n > limit for n in norms) >= steps // 2, norms  # clipping really acted
        assert max_rel_diff(ref, model.module) < TOL, (scale, max_rel_diff(ref, model.module))
        if name:
            assert len(state.momentum.state_dict()["state"]) == 4  # the momentum-aware path ran


def test_clip_grad_norm_leaves_a_non_finite_gradient_alone(gloo, comm):
    # A gradient with Inf (a step a loss scaler will skip) has no norm to clip to: the hook passes it
    # on unscaled, so the scaler sees the Inf, and finite entries are not zeroed by an Inf norm.
    rank = gloo.get_rank()
    base = wide_model()
    grads = []
    for clip in (None, 0.01):
        model = DDP(copy.deepcopy(base), bucket_cap_mb=0.01)
        model.register_comm_hook(qtorch.HookState(comm, codec="none", clip_grad_norm=clip), qtorch.allreduce_hook)
        handle = model.module[0].weight.register_hook(lambda g: g * float("inf"))
        loss_of(model, *batch(rank, 0)).backward()
        handle.remove()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert not torch.isfinite(grads[1][0]).all()
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)


def test_clip_grad_norm_arguments(comm):
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(qccl.Error, match="clip_grad_norm"):
            qtorch.HookState(comm, clip_grad_norm=bad)
    assert qtorch.HookState(comm, clip_grad_norm=1).clip_grad_norm == 1.0


def test_clip_grad_norm_with_no_sync_accumulation(gloo, comm):
    # Gradients accumulated under no_sync() reach the hook once, summed, with the synchronized
    # backward: the clip applies to that sum, as clip_grad_norm_ after the last backward would.
    import torch.distributed as dist

    rank, world = gloo.get_rank(), gloo.get_world_size()
    make_opt, base, max_norm = OPTIMIZERS["sgd_momentum"], wide_model(), 0.02
    ref = copy.deepcopy(base)
    ref_opt = make_opt(ref.parameters())
    model = DDP(copy.deepcopy(base), bucket_cap_mb=0.01)
    opt = make_opt(model.parameters())
    state = qtorch.HookState(comm, codec="none", min_compress_numel=1000, optimizer=opt, clip_grad_norm=max_norm)
    model.register_comm_hook(state, qtorch.allreduce_hook)
    clipped = 0
    for step in range(12):
        ref_opt.zero_grad(set_to_none=True)
        opt.zero_grad(set_to_none=True)
        for micro in range(3):
            x, y = batch(rank, 100 * step + micro)
            loss_of(ref, x, y).backward()
            if micro < 2:
                with model.no_sync():
                    loss_of(model, x, y).backward()
            else:
                loss_of(model, x, y).backward()
        norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm * world**0.5)
        clipped += float(norm) > max_norm * world**0.5
        assert state.last_local_grad_norm == pytest.approx(float(norm), rel=1e-5)
        for p in ref.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        ref_opt.step()
        opt.step()
    assert clipped >= 6
    assert max_rel_diff(ref, model.module) < TOL


def _two_valued(n, phase, gen):
    """n values that take two values per 32-element block aligned at -phase (as sra's onebit average
    does per codec bucket), the pairs differing from block to block."""
    out = torch.empty(n)
    start = 0
    while start < n:
        end = min(n, start + 32 - (phase if start == 0 else 0))
        a, b = torch.randn(2, generator=gen)
        pick = torch.rand(end - start, generator=gen) < 0.5
        out[start:end] = torch.where(pick, a, b)
        start = end
    return out


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 100, 4096, 10_007])
def test_packed_sent_holds_every_bit(n):
    # The packed last average (MomentumCorrection.pack) gives back every value with its bits: two
    # values per block packed, any other block kept as floats, at every phase, through a rephase.
    gen = torch.Generator().manual_seed(n)
    for phase in (0, 1, 17, 31):
        two = _two_valued(n, phase, gen)
        mixed = two.clone()
        if n > 40:
            mixed[3] = -0.0 if float(mixed[3]) == 0.0 else 0.0  # a signed zero differs by its bits
            mixed[n // 2] = float("nan")
            mixed[n - 1] = float("inf")
            mixed[: n // 4] = torch.randn(n // 4, generator=gen)  # raw blocks
        for src in (two, mixed):
            ps = qccl._qccl._PackedSent(src, phase)
            assert (ps.size, ps.phase) == (n, phase)
            assert ps.blocks == (0 if n == 0 else (n - 1 + phase) // 32 + 1)
            back = torch.full((n,), 7.0)
            ps.store(back)
            assert back.numpy().tobytes() == src.numpy().tobytes()
            if src is two:
                assert ps.raw_blocks == 0
            elif n > 40:
                assert 0 < ps.raw_blocks and (n < 1000 or ps.raw_blocks < ps.blocks)
            for i in {0, n // 3, n - 1} if n else ():
                got, want = torch.tensor([ps[i]]), src[i:i + 1]
                assert got.numpy().tobytes() == want.numpy().tobytes()
            ps.rephase((phase + 5) % 32)
            back.fill_(7.0)
            ps.store(back)
            assert back.numpy().tobytes() == src.numpy().tobytes()
    with pytest.raises(qccl.Error):
        qccl._qccl._PackedSent(torch.zeros(10, dtype=torch.float64))
    with pytest.raises(qccl.Error):
        qccl._qccl._PackedSent(torch.zeros(10)).store(torch.zeros(9))


@pytest.mark.parametrize("mu,keep,wd", [(0.9, 1.0, 0.0), (0.8, 0.7, 1e-2)])
def test_packed_corrected_pass_matches_the_tensor_one(mu, keep, wd):
    # The corrected pass from a packed last average, on pieces that start and end inside blocks (as
    # the epilogue's decoded pieces may): the same bits as the pass on the tensor, and the new
    # average packed in its place.
    gen = torch.Generator().manual_seed(5)
    n, phase = 1000, 9
    last, now = _two_valued(n, phase, gen), _two_valued(n, phase, gen)
    now[100:140] = torch.randn(40, generator=gen)  # a few blocks that do not pack
    p = torch.randn(n, generator=gen)
    want, sent = now.clone(), last.clone()
    qccl._qccl._momentum_corrected_from_sent(want, sent, p, mu, keep, wd)
    ps = qccl._qccl._PackedSent(last, phase)
    got = now.clone()
    for lo, hi in [(0, 5), (5, 37), (37, 300), (300, 301), (301, n)]:
        qccl._qccl._momentum_corrected_packed(got[lo:hi], ps, lo, p, mu, keep, wd)
    assert got.numpy().tobytes() == want.numpy().tobytes()
    back = torch.empty(n)
    ps.store(back)
    assert back.numpy().tobytes() == now.numpy().tobytes()
    assert ps.raw_blocks == 2
    with pytest.raises(qccl.Error):
        qccl._qccl._momentum_corrected_packed(got[:10], ps, n - 5, p, mu, keep, wd)


@pytest.mark.parametrize("codec", ["onebit", "maxmin"])
def test_packed_last_average_changes_no_bit(gloo, comm, codec):
    # The last average packed (MomentumCorrection.pack, the default) against always a tensor: the
    # same parameters bit for bit. onebit's averages pack with no block kept as floats; maxmin's
    # 4-bit ones (up to 16 values per bucket) do not, so its parameters are unpacked for good. sra
    # on any number of ranks (the hook's own choice on 2 is allgather, whose sum of two ranks'
    # decodes holds up to four values per bucket: unpacked too, python_bench_ddp checks that).
    rank = gloo.get_rank()
    _, packed, sp = pair(OPTIMIZERS["sgd_nesterov_wd"], comm, codec=codec, algo="sra")
    _, plain, sn = pair(OPTIMIZERS["sgd_nesterov_wd"], comm, codec=codec, algo="sra")
    sp.momentum.pack, sn.momentum.pack = True, False
    train([packed, plain], rank, 12)
    assert digest(packed[0]) == digest(plain[0])
    sents = [st["sent"] for st in sp.momentum._state.values()]
    assert len(sents) == 2 and sp.momentum.fused == 22
    if codec == "onebit":
        assert all(isinstance(s, qccl._qccl._PackedSent) and s.raw_blocks == 0 for s in sents)
        assert not sp.momentum._no_pack
    else:
        assert all(isinstance(s, torch.Tensor) for s in sents) and len(sp.momentum._no_pack) == 2
    assert all(isinstance(st["sent"], torch.Tensor) for st in sn.momentum._state.values())
    # a checkpoint holds tensors either way, and a clipped step (every exchange reconciles) unpacks
    sd = sp.momentum.state_dict()
    assert all(isinstance(v, torch.Tensor) for st in sd["state"].values() for v in st.values())
    clip = lambda step, model, opt: torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01) is not None
    train([packed, plain], rank, 3, start=12, before_step=clip)
    assert digest(packed[0]) == digest(plain[0])


def test_warmup_codec_sends_the_warmup_with_it_on_the_same_residuals(gloo, mpi, comm):
    # HookState(warmup_steps=k, warmup_codec=...): the first k steps are those of the hook with that
    # codec, bit for bit (parameters and residuals), and the codec then goes on from the residuals
    # the warm-up left, with its own feedback gain; the warm-up's averages (maxmin's, which do not
    # pack) do not keep the codec's last average from being packed afterwards.
    rank = gloo.get_rank()
    sgd = OPTIMIZERS["sgd_momentum"]
    _, warm, sw = pair(sgd, comm, codec="onebit", algo="sra", warmup_steps=3, warmup_codec="maxmin", warmup_bits=4)
    _, mm, sm = pair(sgd, comm, codec="maxmin", algo="sra", bits=4)
    _, fp, sf = pair(sgd, comm, codec="onebit", algo="sra", warmup_steps=3)  # the fp32 warm-up
    sw.momentum.pack = sm.momentum.pack = sf.momentum.pack = True
    train([warm, mm, fp], rank, 3)
    assert digest(warm[0]) == digest(mm[0]) != digest(fp[0])
    ids = lambda st: sorted(i for plan in st._plans.values() for i in plan.ids)
    saved = lambda st: [comm.save_tensor_state(i) for i in ids(st)]
    assert saved(sw) == saved(sm) and any(saved(sw)), "the warm-up made the codec's residuals"
    assert not any(saved(sf)), "an fp32 warm-up keeps no residual"
    assert sw.feedback_gain == qtorch.DEFAULT_FEEDBACK_GAIN
    train([warm, mm, fp], rank, 9, start=3)
    assert len({digest(warm[0]), digest(mm[0]), digest(fp[0])}) == 3
    assert identical_across_ranks(mpi, warm[0])
    sents = [st["sent"] for st in sw.momentum._state.values()]
    assert len(sents) == 2 and all(isinstance(s, qccl._qccl._PackedSent) and s.raw_blocks == 0 for s in sents)
    assert not sw.momentum._no_pack and len(sm.momentum._no_pack) == 2
    with torch.no_grad():  # and it trains: the loss fell
        x, y = batch(rank, 0)
        assert loss_of(warm[0], x, y) < loss_of(make_model(), x, y)
    with pytest.raises(qccl.Error, match="warmup_codec"):
        qtorch.HookState(comm, codec="onebit", warmup_codec="zip")


@pytest.mark.parametrize("isa", ["scalar", "avx2"])
def test_packed_sent_on_every_cpu_path(isa):
    # The packed corrected pass has AVX-512, AVX2 and scalar paths, taken by what the CPU has and
    # capped by QCCL_CPU_ISA: the tests above under each cap, in a process of their own.
    import os
    import subprocess
    import sys

    if int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
        pytest.skip("runs in the single-process run (python_momentum_np1)")
    env = dict(os.environ, QCCL_CPU_ISA=isa)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "packed_sent_holds or packed_corrected_pass"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout


class Backwards(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(64, 4, bias=False)
        self.hid = nn.Linear(64, 64, bias=False)
        self.inp = nn.Linear(32, 64, bias=False)

    def forward(self, x):
        return self.out(torch.relu(self.hid(torch.relu(self.inp(x)))))


def sylvester(n):
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


@pytest.mark.parametrize("block", [32, 512])
def test_rotation_is_the_hadamard_transform_and_its_inverse(block):
    # _qccl._rotate: x = H D x per whole block (H the unnormalized Walsh-Hadamard matrix, D the fixed
    # signs), the rest untouched; back: (1/B) D H x. Against the matrices in float64.
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3 * block + 7, generator=gen)
    w = x.clone()
    qccl._qccl._rotate(w, block, False)
    assert torch.equal(w[3 * block:], x[3 * block:])
    ones = torch.ones(block)
    qccl._qccl._rotate(ones, block, False)  # H D 1: the first row of H is all ones, so ones[0] = sum(D)
    h = sylvester(block)
    d = torch.linalg.solve(h, ones.double())  # D 1 = H^-1 (H D 1): the signs
    assert torch.equal(d.abs().round(), torch.ones(block, dtype=torch.float64))
    want = (x[:3 * block].double().view(3, block) * d) @ h.T
    assert torch.allclose(w[:3 * block].double().view(3, block), want, rtol=0, atol=1e-4 * float(want.abs().max()))
    qccl._qccl._rotate(w, block, True)
    assert torch.allclose(w, x, rtol=0, atol=1e-6 * float(x.abs().max()))
    for bad in (16, 48, 1 << 17):
        with pytest.raises(qccl.Error, match="rotation block"):
            qccl._qccl._rotate(w, bad, False)


def test_onebit_loss_is_the_codecs_squared_error():
    # onebit sends each bucket's mean of its positive and of its negative elements, signscale every
    # sign with the mean magnitude: the squared error of each, against torch.
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(1000, generator=gen) ** 3
    want = {True: 0.0, False: 0.0}
    for b in x.double().split(512):
        pos, neg = b[b > 0], b[b < 0]
        want[True] += float(((pos - pos.mean()) ** 2).sum() + ((neg - neg.mean()) ** 2).sum())
        want[False] += float(((b.abs() - b.abs().mean()) ** 2).sum())
    for two in (True, False):
        assert qccl._qccl._onebit_loss(x, two, 512) == pytest.approx(want[two], rel=1e-9)


def test_rotated_call_is_the_codec_on_the_rotated_momenta(gloo, mpi, comm):
    # rotation=512, onebit over sra: the first step's average momentum (what opt.step() makes the
    # optimizer's buffer) is the codec's average of the rotated local momenta, rotated back: the
    # same bits as the same allreduce run by hand on a tensor of its own.
    rank = gloo.get_rank()
    _, (model, opt), state = pair(OPTIMIZERS["sgd_momentum"], comm, codec="onebit", algo="sra", rotation=512)
    plain = make_model()
    x, y = batch(rank, 0)
    loss_of(plain, x, y).backward()
    train([(model, opt)], rank, 1)
    (plan,) = state._plans.values()
    assert plan.rotation == {plan.compressed_id: 512} and not plan.own
    # the compressed weights (4096 and 2048 elements) in the bucket's order, packed into one call
    index = {id(p): k for k, p in enumerate(model.module.parameters())}
    order = [index[id(p)] for _, _, p in sorted(plan.params, key=lambda t: t[0])]
    assert sorted(order) == [0, 2]  # the two weights (parameters 0 and 2; 1 and 3 are their biases)
    weights = [list(plain.parameters())[k] for k in order]
    u = torch.cat([w.grad.reshape(-1) for w in weights])
    qccl._qccl._rotate(u, 512, False)
    comm.allreduce(u, op="avg", codec="onebit", algo="sra", tensor_id=12345)
    qccl._qccl._rotate(u, 512, True)
    comm.release(12345)
    mine = list(model.module.parameters())
    got = torch.cat([opt.state[mine[k]]["momentum_buffer"].reshape(-1) for k in order])
    assert torch.equal(got, u)
    # and the hand-made average is not the unrotated one (the rotation did something)
    v = torch.cat([w.grad.reshape(-1) for w in weights])
    comm.allreduce(v, op="avg", codec="onebit", algo="sra", tensor_id=12346)
    comm.release(12346)
    assert not torch.equal(v, u)


def test_rotation_auto_decides_per_call_from_the_codecs_loss(gloo, comm):
    # "auto": a call rotates when onebit loses less of the rotated input, summed over ranks; the
    # decision is taken at the call's first exchange and kept. A few large elements per bucket
    # (onebit's worst case) rotate; values of one magnitude (onebit's best) do not.
    rank = gloo.get_rank()
    state = qtorch.HookState(comm, codec="onebit", optimizer=torch.optim.SGD(make_model().parameters(), lr=0.1,
                                                                            momentum=0.9))
    plan = qtorch._BucketPlan((), [], [], 0, 1, [])
    gen = torch.Generator().manual_seed(5 + rank)
    spiky = 0.01 * torch.randn(4096, generator=gen)
    spiky[::300] = 10.0
    flat = torch.where(torch.rand(4096, generator=gen) < 0.5, -1.0, 1.0)
    assert state._rotation(plan, 7, spiky) == 512
    assert state._rotation(plan, 8, flat) == 0
    assert state._rotation(plan, 9, spiky[:300]) == 0  # less than one block
    assert state._rotation(plan, 8, spiky) == 0  # decided once
    inf = spiky.clone()
    inf[5] = float("inf") if rank == 0 else 1.0
    assert state._rotation(plan, 11, inf) == 0  # Inf on any rank (a step a scaler skips): not decided yet
    assert state._rotation(plan, 11, spiky) == 512
    assert plan.rotation == {7: 512, 8: 0, 9: 0, 11: 512}
    # the shares behind the decisions (reported by train.py and bench_ddp.py): spiky input loses less
    # than half rotated; a flat sign vector loses nothing plain (share 1 where the plain loss is 0)
    assert set(plan.rotation_share) == {7, 8, 11} and plan.rotation_share[7] < 0.5 and plan.rotation_share[8] >= 0.9
    signscale = qtorch.HookState(comm, codec="signscale", rotation=64,
                                 optimizer=torch.optim.SGD(make_model().parameters(), lr=0.1, momentum=0.9))
    assert signscale._rotation(plan, 10, flat) == 64  # an explicit block always rotates
    assert not qtorch.HookState(comm, codec="maxmin", optimizer=torch.optim.SGD(make_model().parameters(), lr=0.1,
                                                                                momentum=0.9))._rotates
    assert not qtorch.HookState(comm, codec="onebit")._rotates  # without optimizer=, the hook as it was


def test_rotation_trains_and_resumes_from_a_checkpoint(gloo, mpi, comm):
    # rotation=512 with the maxmin warm-up on the same (rotated) residuals: replicas stay identical,
    # the loss falls, and a run resumed from a checkpoint (residuals, local momenta, the rotation in
    # the saved record) continues bit for bit; restored without the rotation it does not.
    # The layers registered last first, without biases: DDP's initial bucket then has the layout of
    # the rebuilt one that is saved, so the resumed run's first step takes the saved residuals
    # (test_hook_state.py, Backwards).
    rank, make_opt = gloo.get_rank(), OPTIMIZERS["sgd_nesterov_wd"]
    hook = dict(codec="onebit", algo="sra", rotation=512, warmup_steps=3, warmup_codec="maxmin", warmup_bits=4)

    def make(**changes):
        torch.manual_seed(0)
        m = DDP(Backwards())
        o = make_opt(m.parameters())
        s = qtorch.HookState(comm, min_compress_numel=1000, optimizer=o, **dict(hook, **changes))
        m.register_comm_hook(s, qtorch.allreduce_hook)
        return m, o, s

    model, opt, state = make()
    x_eval, y_eval = batch(99, 0)
    start = float(loss_of(model, x_eval, y_eval))
    train([(model, opt)], rank, 8)
    ckpt = {"model": copy.deepcopy(model.module.state_dict()), "opt": copy.deepcopy(opt.state_dict()),
            "hook": copy.deepcopy(state.state_dict())}
    # one bucket: the two weights in one call (rotated), the last layer raw (never decides)
    assert [r["rotation"] for r in ckpt["hook"]["residuals"]] == [[512, -1]]
    train([(model, opt)], rank, 8, start=8)
    assert float(loss_of(model, x_eval, y_eval)) < 0.9 * start
    assert identical_across_ranks(mpi, model)

    def resumed(sd, **changes):
        m, o, s = make(**changes)
        m.module.load_state_dict(ckpt["model"])
        o.load_state_dict(copy.deepcopy(ckpt["opt"]))  # torch 2.x's load_state_dict keeps the tensors given
        s.load_state_dict(sd)
        train([(m, o)], rank, 8, start=8)
        assert not any(plan.unmatched for plan in s._plans.values()) and not s._saved
        return m

    assert digest(resumed(ckpt["hook"]).module) == digest(model.module)
    # The record decides, not the new state's setting: a state asked for none resumes rotated.
    assert digest(resumed(ckpt["hook"], rotation=0).module) == digest(model.module)
    # A record from before the rotation (no "rotation") holds plain residuals: they are not rotated.
    old = copy.deepcopy(ckpt["hook"])
    for r in old["residuals"]:
        del r["rotation"]
    assert digest(resumed(old).module) != digest(model.module)
    bad = copy.deepcopy(ckpt["hook"])
    bad["residuals"][0]["rotation"] = [100, 0]
    with pytest.raises(qccl.Error, match="rotation"):
        make()[2].load_state_dict(bad)


@pytest.mark.parametrize("reconcile", [False, "auto", True])
@pytest.mark.parametrize("name", ["sgd_momentum", "sgd_nesterov_wd", "adamw"])
def test_rotation_inside_the_momentum_passes_changes_no_bit(gloo, mpi, comm, name, reconcile):
    # A rotated call that is one parameter (here the bucket's only compressed weight) rotates its
    # message inside the local pass and the average back inside the corrected pass: the same
    # parameters bit for bit as the rotations in passes of their own (HookState.rotate_in_passes).
    def model():
        torch.manual_seed(3)
        return nn.Sequential(nn.Linear(32, 64, bias=False), nn.ReLU(), nn.Linear(64, 4, bias=False))

    runs = []
    for inside in (True, False):
        m = DDP(model())
        opt = OPTIMIZERS[name](m.parameters())
        st = qtorch.HookState(comm, codec="onebit", min_compress_numel=1000, optimizer=opt, scheme="dgc",
                              reconcile=reconcile, rotation=512)
        st.rotate_in_passes = inside
        m.register_comm_hook(st, qtorch.allreduce_hook)
        runs.append(((m, opt), st))
    train([r[0] for r in runs], gloo.get_rank(), 8)
    assert digest(runs[0][0][0]) == digest(runs[1][0][0])
    assert identical_across_ranks(mpi, runs[0][0][0])
    (plan,) = runs[0][1]._plans.values()
    assert len(plan.compressed) == 1 and plan.rotation == {plan.compressed_id: 512}
    assert runs[0][1]._rotated_alone(plan, plan.compressed) == {tuple(plan.compressed[0]): 512}


def test_rotation_inside_the_passes_of_calls_of_their_own(gloo, mpi, comm):
    # Two large weights, each a call of its own (at least 2^18 elements, split by biases): both
    # rotate inside their momentum passes, with the same bits as the rotations apart.
    def model():
        torch.manual_seed(4)
        return nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512),
                             nn.ReLU(), nn.Linear(512, 4))

    runs = []
    for inside in (True, False):
        m = DDP(model())
        opt = OPTIMIZERS["sgd_nesterov_wd"](m.parameters())
        st = qtorch.HookState(comm, codec="signscale", min_compress_numel=1000, optimizer=opt, rotation=512)
        st.rotate_in_passes = inside
        m.register_comm_hook(st, qtorch.allreduce_hook)
        runs.append(((m, opt), st))
    rank = gloo.get_rank()
    for step in range(4):
        x, y = batch(rank, step)
        for (m, opt), _ in runs:
            opt.zero_grad(set_to_none=True)
            loss_of(m, x, y).backward()
            opt.step()
    assert digest(runs[0][0][0]) == digest(runs[1][0][0])
    assert identical_across_ranks(mpi, runs[0][0][0])
    # DDP's first bucket is small: two buckets, each a call of its own (a 512 x 512 weight) and a
    # compressed segment that is one weight; all four rotate inside the passes
    st = runs[0][1]
    plans = list(st._plans.values())
    assert sorted(len(plan.own) for plan in plans) == [1, 1]
    calls = [(o, n, i) for plan in plans for o, n, i in plan.own + [plan.compressed[0] + (plan.compressed_id,)]]
    inside = {}
    for plan in plans:
        inside.update(st._rotated_alone(plan, [(o, n) for o, n, _ in plan.own] + plan.compressed))
    assert len(calls) == 4 and inside == {(o, n): 512 for o, n, _ in calls}


def test_rotation_is_the_same_bits_on_every_cpu_path():
    # The transform runs eight floats at a time where the CPU has AVX2 and four otherwise
    # (QCCL_CPU_ISA=scalar): the same butterflies in the same order, so the same bits.
    import os
    import subprocess
    import sys

    if int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
        pytest.skip("runs in the single-process run (python_momentum_np1)")
    code = ("import hashlib, torch; from qccl import _qccl\n"
            "x = torch.randn(3 * 4096 + 100, generator=torch.Generator().manual_seed(9)) ** 3\n"
            "h = hashlib.sha1()\n"
            "for b in (32, 64, 512, 4096):\n"
            "    w = x.clone(); _qccl._rotate(w, b, False); h.update(w.numpy().tobytes())\n"
            "    _qccl._rotate(w, b, True); h.update(w.numpy().tobytes())\n"
            "print(h.hexdigest())")
    out = [subprocess.run([sys.executable, "-c", code], env=dict(os.environ, QCCL_CPU_ISA=isa), capture_output=True,
                          text=True, timeout=120, check=True).stdout.strip() for isa in ("scalar", "avx512")]
    assert len(out[0]) == 40 and out[0] == out[1]
