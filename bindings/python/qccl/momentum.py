"""Momentum-aware compression for :class:`qccl.torch.HookState` (``HookState(..., optimizer=opt)``).

With error feedback on the gradients and the optimizer's momentum on top, a 1-bit codec's error
is integrated by the momentum step after step, and the model trains worse than with fp32
(bench/RESULTS.md, "Momentum-aware compression"). The schemes here move the momentum into the
exchange and hand the optimizer a gradient that makes its own first-moment buffer equal to the
exchanged one, so the training loop (``loss.backward(); opt.step()``) and the optimizer object stay
as they are; this works on torch 1.13, which has no optimizer step hooks.

Schemes (``HookState(..., optimizer=opt, scheme=...)``):

The default is ``"dgc"`` for SGD (and for Adam/AdamW with a lossless codec) and ``"onebit_adam"``
for Adam/AdamW with a lossy codec: ``"dgc"`` hands Adam a gradient in which the codec's error is
amplified by ``1 / (1 - beta1)``, and Adam's second moment integrates its square (measured on the
character-level LM with AdamW, onebit: 1.235x fp32's test loss with ``"dgc"``, 1.004x with
``"onebit_adam"``; bench/RESULTS.md). Without ``warmup_steps`` the hook then warms up for
:data:`ADAM_WARMUP_STEPS` steps; 1-bit Adam's authors warm up for 15-25% of training.

``"dgc"``: momentum correction, Lin et al., "Deep Gradient Compression", ICLR 2018.
    Each rank keeps a local momentum of its own gradient, ``u = mu * u + (1 - dampening) * d`` with
    ``d = g + weight_decay * p`` (SGD; Adam: ``u = b1 * u + (1 - b1) * d``, the first moment),
    sends ``u`` through the compressed allreduce (so the error feedback works in momentum units)
    and receives the average ``U``, identical on every rank. The hook returns
    ``g' = (U - mu * buf) / (1 - dampening) - weight_decay * p``, where ``buf`` is the optimizer's
    buffer (``momentum_buffer``, ``exp_avg``), so that ``opt.step()`` sets ``buf = U`` and steps
    with it. Nesterov, the learning rate and its schedule, Adam's second moment stay the
    optimizer's.
``"ef21"``: EF21-SGDM, Fatkhullin et al., "Momentum Provably Improves Error Feedback!", NeurIPS
    2023. Each rank sends the change of its local momentum ``u_t - u_{t-1}``, and the buffer
    becomes ``buf + average``. With qccl's error feedback, the worker's running estimate of its
    momentum is ``u - residual``: EF21's ``g_i`` exactly.
``"onebit_adam"`` (Adam/AdamW): Tang et al., "1-bit Adam", ICML 2021. The first
    ``HookState.warmup_steps`` steps are plain Adam with uncompressed gradients; then the
    (bias-corrected) second moment is frozen and the first moment is exchanged as in ``"dgc"``.
``"plain"``: no correction, error feedback on the gradients (what the hook does without
    ``optimizer``), for comparison.

Replicas: the local momenta differ across ranks by design (each holds that rank's gradients).
What reaches the parameters is computed from the allreduce result (bit-identical on every rank),
the optimizer's state and the parameters (identical on every rank) by the same operations, so
the replicas stay bit-identical.

Reconciliation: a difference between the optimizer's buffer and the average the previous exchange
asked it to take -- gradient clipping or any other change to ``p.grad`` before ``opt.step()``, a
skipped ``opt.step()``, an optimizer state loaded from a checkpoint -- is added to the local momenta
before the next exchange, so that it persists as it would without compression; it is the same on
every rank. With a lossy codec, clip in the hook instead (``HookState(..., clip_grad_norm=...)``,
each rank's own gradient before it enters the local momentum): ``clip_grad_norm_`` after backward
measures the hook's direction, whose norm carries the codec's error, and shrinks every step
(bench/RESULTS.md, "Gradient clipping in the hook"). Backward passes inside ``no_sync()`` do not
call the hook, so gradients accumulated there enter the momentum once, with the synchronized
backward.

Reconciling reads the buffer and the last average in both passes of every step (on 25.6M
parameters 27 against 17 ms per step on one thread). ``HookState(..., reconcile="auto")``, the
default, pays that only where something changed the buffer: before each exchange of a parameter it
compares the buffer with the last average on :data:`DRIFT_SAMPLES` evenly spaced elements (other ones
at every exchange) and reconciles when they differ by more than the rounding of the optimizer's
arithmetic (:func:`drift_tolerance`); the other exchanges take the passes without reconciliation
below, exact in that case. Clipping scales every element, and a skipped step or a loaded state
moves the whole buffer, so each is seen at the first exchange after it. An edit of a small part of
a gradient (a few rows of a tensor) can go unseen at a given exchange; such an exchange then behaves
as ``reconcile=False`` does. ``reconcile=True`` reconciles every exchange. The decision depends only
on the buffer, the last average and the exchange count, identical on every rank, so every rank takes
the same pass. ``MomentumCorrection.reconciled`` of ``exchanges`` counts the reconciled ones.

Where the averaged bucket is float32 on the CPU, the corrected pass (``g'`` below and above, with the
last average kept as ``sent``) runs as the exchange's epilogue (``qcclAllreduceEpilogue``): inside
the allreduce's last decode, on each codec bucket while it is in cache, for sra and allgather-reduce,
and after the sum elsewhere. The same operations on the same values, so the same bits as the pass
after the exchange (``MomentumCorrection.fuse = False``), without that pass's read and write of the
whole average: on 25.6M elements over 4 local ranks 10-16 ms less CPU per rank and call. A parameter
that is a call of its own (a large weight) also sends its local momentum ``u`` as the call's input,
out of place, instead of a copy written into the bucket first, and its local pass runs as the
exchange's prologue (``qcclAllreduceFused``): on each pipeline chunk right before the one read of
it where the schedule reads the input once (its encode in allgather-reduce and sra, or the owner's
raw sum of its own shard in sra), else over the input before the call. The corrected pass inside the decode and the momentum
sent out of place took 17 ms of CPU per rank and 34 ms off the 25.6M-parameter DDP step
(bench/RESULTS.md, "The corrected pass inside the last decode"). Loss-scaled gradients
(``GradScaler``) and ``maximize`` keep the passes as they were.

The last average packed: the corrected pass without reconciliation reads the last average ``S`` and
writes this one, and ``S`` is a float per parameter element held between steps. After sra with
onebit or signscale the average holds at most two values per codec bucket, so it is kept exact in a
``_qccl._PackedSent``: per 32 elements the bits of two floats and a 32-bit mask, 12 bytes instead of
128 (on 25.6M parameters about 10 MB instead of 102 MB per rank), any other block as its floats.
The epilogue unpacks each block's ``S`` into registers, runs the same arithmetic, and packs the new
average from registers: the same bits (``MomentumCorrection.pack``; a parameter whose averages keep
more than :data:`PACK_MAX_RAW_SHARE` of their blocks as floats, as maxmin's do, goes back to a
tensor for good). Reconciliation, the drift check, checkpoints and the pass after the exchange read
it unpacked. It is the default where the pass has its AVX-512 path, which in the DDP step took
about 1 ms less per rank than the tensor pass; the AVX2 path took 8 ms more and the scalar one
costs more still, so there it is ``pack=True`` for the memory alone (bench/RESULTS.md,
"``optimizer=``'s last average packed").

Without reconciliation (``HookState(..., reconcile=False)``, not for ``"ef21"``): the hook returns
``g' = (U - mu * S) / (1 - dampening) - weight_decay * p`` with ``S`` the previous average (the
optimizer's buffer on the first exchange), so ``opt.step()`` sets ``buf = U + mu * (buf - S)``:
``U`` while nothing else touched the buffer. The buffer is then never read, and each step makes two
passes over memory that read only what they write (the gradient and ``u``, then the average and
``S``) instead of reading the buffer and ``S`` besides: on 25.6M parameters 17 against 27 ms on
one thread (bench/RESULTS.md, "``optimizer=`` without reconciliation"). A skipped
``opt.step()`` and a loaded optimizer state stay right: the buffer misses that step's increment
``U - mu * S`` as plain SGD misses that step's gradient, and a difference decays by the momentum.
A changed gradient does not: the optimizer integrates the clipped increments of ``U``, in which the
codec's errors no longer cancel. With ``clip_grad_norm_(0.1)`` on the two regression tasks onebit+m
ended at 1.55-1.59x fp32's loss (ten seeds each) against 1.18-1.19x with reconciliation. So it is for training
loops that hand ``opt.step()`` the hook's gradients unchanged (no clipping after backward, no other
edit of ``p.grad``; ``GradScaler.unscale_`` by a power of two is exact and fine). Clipping in the hook
(``HookState(..., clip_grad_norm=...)``) leaves ``p.grad`` alone and works without reconciliation: on
the two regression tasks, ten seeds, the same losses as with it (bench/RESULTS.md, "Gradient
clipping in the hook").
"""

from typing import Any, Dict, Optional, Union

import torch

from . import _qccl
from ._core import INVALID_ARGUMENT, Error

__all__ = ["ADAM_WARMUP_STEPS", "DRIFT_SAMPLES", "SCHEMES", "MomentumCorrection", "default_scheme", "drift_tolerance"]


def _fusable(*tensors: torch.Tensor) -> bool:
    """The fused C++ passes take contiguous float32 CPU tensors (everything else takes torch's)."""
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def _packed(sent: Any) -> bool:
    return isinstance(sent, _qccl._PackedSent)


def _numel(sent: Any) -> int:
    return sent.size if _packed(sent) else sent.numel()


def _unpacked(sent: Any) -> torch.Tensor:
    """sent as a float32 tensor (a new one where it is packed)."""
    if not _packed(sent):
        return sent
    t = torch.empty(sent.size, dtype=torch.float32)
    sent.store(t)
    return t


def _unpack_state(st: Dict[str, Any]) -> Optional[torch.Tensor]:
    """A parameter state's last average, made a tensor in the state where it was packed."""
    sent = st.get("sent")
    if _packed(sent):
        sent = st["sent"] = _unpacked(sent)
    return sent


# A parameter whose packed last average keeps more than this share of its blocks as floats is
# unpacked for good (MomentumCorrection.pack).
PACK_MAX_RAW_SHARE = 0.25

SCHEMES = ("dgc", "ef21", "onebit_adam", "plain")
# reconcile="auto": the elements of each parameter compared per exchange (evenly spaced, from an
# offset that moves with every exchange).
DRIFT_SAMPLES = 256


def drift_tolerance(mu: float) -> float:
    """reconcile="auto": the largest drift (``max |buf - sent| / max(|buf| + |sent| + |keep wd p|)``
    on the sampled elements) taken for the rounding of the optimizer's arithmetic. Each step rounds
    a few times at float32's 2^-24 of those magnitudes, and the drift of one step decays by ``mu``
    at the next, so it stays within about 4 * 2^-24 / (1 - mu); this allows 8 times that. (Measured
    without edits, 60 steps of SGD with momentum, nesterov, dampening, weight decay, Adam and AdamW,
    codecs none, onebit and signscale on 4 ranks: at most 2.5e-7, against 1.9e-5 here for 0.9.)"""
    return 32.0 * 2.0**-24 / max(1.0 - mu, 1e-3)

def _drift(buf: torch.Tensor, sent: torch.Tensor, pf: torch.Tensor, kw: float, offset: int) -> float:
    """``max |buf - sent| / max(|buf| + |sent| + |kw p|)`` over DRIFT_SAMPLES elements spaced
    ``max(1, n // DRIFT_SAMPLES)`` apart from ``offset`` (infinity where one is not finite, 0 where
    nothing differs): the C++ helper on contiguous float32 CPU tensors, torch's operations else."""
    if _packed(sent) and _fusable(buf, pf):
        return _qccl._momentum_drift_packed(buf, sent, pf, kw, DRIFT_SAMPLES, offset)
    sent = _unpacked(sent)
    if _fusable(buf, sent, pf):
        return _qccl._momentum_drift(buf, sent, pf, kw, DRIFT_SAMPLES, offset)
    n = buf.numel()
    if n == 0:
        return 0.0
    stride = max(1, n // DRIFT_SAMPLES)
    idx = slice(offset % stride, offset % stride + stride * DRIFT_SAMPLES, stride)
    b, s = buf[idx].double(), sent[idx].double()
    w = (pf[idx].double() * kw).abs() if kw != 0.0 else torch.zeros_like(b)
    if not (torch.isfinite(b).all() and torch.isfinite(s).all() and torch.isfinite(w).all()):
        return float("inf")
    dev, scale = float((b - s).abs().max()), float((b.abs() + s.abs() + w).max())
    return 0.0 if dev == 0.0 else dev / scale if scale > 0.0 else float("inf")


# Uncompressed steps before onebit_adam freezes the second moment, when it is the default scheme
# and the hook was given no warmup_steps.
ADAM_WARMUP_STEPS = 100


def _kind(optimizer: Any) -> str:
    if isinstance(optimizer, torch.optim.SGD):
        return "sgd"
    if isinstance(optimizer, torch.optim.AdamW):
        return "adamw"
    if isinstance(optimizer, torch.optim.Adam):
        return "adam"
    raise Error(f"optimizer: momentum-aware compression supports torch.optim.SGD, Adam and AdamW, not "
                f"{type(optimizer).__name__}", INVALID_ARGUMENT)


def default_scheme(optimizer: Any, lossless: bool) -> str:
    """The scheme HookState uses when given an optimizer and no scheme (see the module text)."""
    return "dgc" if lossless or _kind(optimizer) == "sgd" else "onebit_adam"


class _Hyper:
    """One parameter group's settings in the form the formulas need: the first moment is
    ``buf = mu * buf + keep * d`` with ``d = sign * g + wd * p`` (``wd`` 0 when decoupled)."""

    __slots__ = ("mu", "keep", "wd", "sign", "beta2")

    def __init__(self, kind: str, group: Dict[str, Any]):
        self.sign = -1.0 if group.get("maximize", False) else 1.0
        if kind == "sgd":
            self.mu, self.keep, self.beta2 = float(group["momentum"]), 1.0 - float(group["dampening"]), 0.0
            if self.mu != 0.0 and self.keep <= 0.0:
                raise Error("optimizer: dampening 1 leaves no gradient in the momentum", INVALID_ARGUMENT)
        else:
            if group.get("amsgrad", False):
                raise Error("optimizer: momentum-aware compression does not support amsgrad", INVALID_ARGUMENT)
            self.mu, self.beta2 = float(group["betas"][0]), float(group["betas"][1])
            self.keep = 1.0 - self.mu
        self.wd = 0.0 if kind == "adamw" else float(group["weight_decay"])


class MomentumCorrection:
    """One scheme's per-parameter state for one optimizer; driven by :class:`qccl.torch.HookState`.

    For each parameter ``p`` that takes this path (``active(p)``), ``local(p, g)`` replaces this
    rank's gradient ``g`` (a flat view into the DDP bucket) by the message to send, and
    ``corrected(p, x)`` replaces the averaged message ``x`` by the gradient the optimizer is to
    see. SGD parameter groups without momentum keep the plain path, which is already exact."""

    def __init__(self, optimizer: Any, scheme: Optional[str] = None, warmup_steps: int = 0,
                 reconcile: Union[bool, str] = "auto"):
        self.kind = _kind(optimizer)
        scheme = scheme or "dgc"
        if scheme not in SCHEMES:
            raise Error(f"scheme {scheme!r}: expected one of {list(SCHEMES)}", INVALID_ARGUMENT)
        if reconcile not in (True, False, "auto"):
            raise Error(f"reconcile={reconcile!r}: expected True, False or 'auto'", INVALID_ARGUMENT)
        if reconcile is False and scheme == "ef21":
            raise Error("reconcile=False: scheme 'ef21' sends increments of the reconciled momentum", INVALID_ARGUMENT)
        # True: every exchange reconciles; False: the direction is taken from the last average
        # instead of the optimizer's buffer, which is then never read (module text, "Without
        # reconciliation"); "auto": reconciles the parameters whose buffer drifted from the last
        # average by more than rounding, on a sample (module text, "Reconciliation"). ef21 always.
        self.reconcile: Union[bool, str] = True if scheme == "ef21" else reconcile
        # reconcile="auto": per parameter, whether this exchange reconciles (set by local(), read by
        # corrected()) and how many exchanges it has made (moves the sample); counters for reports.
        self._rec: Dict[torch.Tensor, bool] = {}
        self._calls: Dict[torch.Tensor, int] = {}
        self.exchanges = 0
        self.reconciled = 0
        # The corrected pass inside the exchange's last decode where possible (fused_correction), and
        # the local momentum sent as it is where a parameter is a call of its own (local()'s
        # out_of_place); False: every pass after the exchange and every message written into the
        # bucket (the same bits). `fused` and `unstaged` count the exchanges that did each.
        self.fuse = True
        self.fused = 0
        self.unstaged = 0
        # The last average of a fused exchange without reconciliation kept packed (the C++
        # _PackedSent: two floats and a 32-bit mask per 32 elements where they hold at most two
        # values, as onebit's and signscale's sra averages do; exact for any values): the corrected
        # pass then reads and writes a tenth of its bytes. A parameter whose average needs floats in
        # more than PACK_MAX_RAW_SHARE of its blocks (other codecs) is unpacked for good (_no_pack).
        # False: always a tensor (the same bits). The default is True where the pass has its
        # AVX-512 path (_qccl._packed_sent_fast()); with AVX2 or scalar code it costs more CPU than
        # the tensor pass (module text, "The last average packed").
        self.pack = _qccl._packed_sent_fast()
        self._no_pack: set = set()
        # Set by the hook for each exchange: a warm-up step with a lossy warmup_codec (maxmin's
        # averages do not pack; the packing is judged on the codec's after the warm-up).
        self.warming = False
        if scheme == "onebit_adam" and (self.kind == "sgd" or warmup_steps <= 0):
            raise Error("scheme 'onebit_adam' needs torch.optim.Adam or AdamW and warmup_steps > 0", INVALID_ARGUMENT)
        self.optimizer = optimizer
        self.scheme = scheme
        self.warmup_steps = int(warmup_steps)
        self._hyper: Dict[torch.Tensor, _Hyper] = {}
        self._index: Dict[torch.Tensor, int] = {}
        for group in optimizer.param_groups:
            h = _Hyper(self.kind, group)
            for p in group["params"]:
                self._index[p] = len(self._index)
                self._hyper[p] = h
        # Per parameter: "u" this rank's local momentum, "sent" the buffer the last exchange asked
        # the optimizer for, "vhat" onebit_adam's frozen bias-corrected second moment.
        self._state: Dict[torch.Tensor, Dict[str, torch.Tensor]] = {}

    def active(self, p: torch.Tensor) -> bool:
        h = self._hyper.get(p)
        return h is not None and self.scheme != "plain" and (self.kind != "sgd" or h.mu != 0.0)

    def corrects(self, step: int) -> bool:
        """False while onebit_adam runs plain, uncompressed Adam steps (its warm-up)."""
        return self.scheme != "plain" and (self.scheme != "onebit_adam" or step >= self.warmup_steps)

    def _buffer(self, p: torch.Tensor) -> Optional[torch.Tensor]:
        """The optimizer's first moment of p, flat, or None before its first step."""
        st = self.optimizer.state.get(p)
        if not st:
            return None
        b = st.get("momentum_buffer" if self.kind == "sgd" else "exp_avg")
        return None if b is None else b.view(-1)

    def local(self, p: torch.Tensor, g: torch.Tensor, scale: float = 1.0,
              out_of_place: bool = False, rotation: int = 0) -> Optional[tuple]:
        """Replaces g, this rank's flat gradient of p, by this rank's message. In place, without
        new full-size tensors where the gradient is fp32: on a 4.3M-parameter model the
        temporaries of the plain expressions cost as much CPU per step as the exchange itself.
        ``scale``: g is loss-scaled by it (mixed precision); the momentum is kept unscaled, the
        message is scaled again, so that residuals stay in the units of the plain path.
        ``out_of_place``: where the message is the local momentum itself (the fused passes, no loss
        scale), leave g as it is and return ``(u, pass)``: the caller sends u (the exchange's input,
        its output g), after running on u, in place, the local pass ``pass`` = (g, sent or None, buf
        or None, p or None, mu, keep, wd) -- as the exchange's prologue, right before each chunk's
        encode (``Communicator._allreduce_corrected(local=...)``), which saves the encode's read of
        u from memory. Returns None when g holds the message. ``rotation``: a block B (not with
        out_of_place): g then holds the message rotated, ``H D`` per whole block of B (the hook's
        rotation of a call that is this one parameter), in the same pass where it can."""
        h = self._hyper[p]
        st = self._state.setdefault(p, {})
        buf = self._buffer(p)
        u, sent = st.get("u"), st.get("sent")
        pf = p.detach().reshape(-1)
        rec = self._reconciles(p, buf, sent, pf, h)
        self._rec[p] = rec
        if rec:
            sent = _unpack_state(st)
        self.exchanges += 1
        self.reconciled += int(rec)
        d = g if g.dtype == torch.float32 else g.float()  # g is overwritten with the message below
        if scale != 1.0:
            d.div_(scale)
        if h.sign < 0:
            d.neg_()
        send_u = out_of_place and scale == 1.0
        wd_p = pf if h.wd != 0.0 else None
        if not rec and buf is not None and u is not None and _fusable(g, u, pf):
            # Without reconciliation, one pass that reads only what it writes: u = mu u + keep (d + wd p); g = u
            if send_u:
                self.unstaged += 1
                return u, (g, None, None, wd_p, h.mu, h.keep, h.wd)
            _qccl._momentum_local_plain(g, u, pf, h.mu, h.keep, h.wd, rotation)
            rotation = 0  # done in the pass
        elif (rec and self.scheme != "ef21" and buf is not None and u is not None and sent is not None
                and _fusable(g, u, sent, buf, pf)):
            # The common case in one pass over memory (d is g): u = mu (u - (sent - buf)) + keep (d + wd p); g = u
            if send_u:
                self.unstaged += 1
                return u, (g, sent, buf, wd_p, h.mu, h.keep, h.wd)
            _qccl._momentum_local(g, u, sent, buf, pf, h.mu, h.keep, h.wd, rotation)
            rotation = 0
        else:
            if h.wd != 0.0:
                d.add_(pf, alpha=h.wd)
            if buf is None or u is None or (rec and sent is None):
                # The optimizer starts its buffer with this step, or this rank has no local momentum yet
                # (e.g. the optimizer was restored from a checkpoint), or the last exchange never
                # returned (it raised): start from the shared buffer.
                u = torch.zeros_like(d) if buf is None else buf.float().clone()
            elif rec:
                # Whatever changed the optimizer's buffer carries over: u += buf - sent, computed in
                # sent's storage (corrected() rewrites it before it is read again).
                u.sub_(sent.sub_(buf))
            before = u.clone() if self.scheme == "ef21" else None
            if self.kind == "sgd" and buf is None:
                u.copy_(d)  # SGD's first step: buf = d
            elif h.keep == 1.0:
                torch.add(d, u, alpha=h.mu, out=u)  # u = mu u + d in one pass
            else:
                u.mul_(h.mu).add_(d, alpha=h.keep)
            st["u"] = u
            g.copy_(u)
            if before is not None:
                g.sub_(before)
        if rotation:
            _qccl._rotate(g, rotation, False)
        if scale != 1.0:
            g.mul_(scale)

    def corrected(self, p: torch.Tensor, x: torch.Tensor, scale: float = 1.0, rotation: int = 0) -> None:
        """Replaces x, the average of the messages for p, by the gradient the optimizer is to see
        (in place where x is fp32). ``scale`` as in local(): x and the result are loss-scaled.
        ``rotation``: x is the average rotated as local(rotation=B) sent it: rotated back first,
        ``(1/B) D H`` per whole block, in the same pass where it can."""
        h = self._hyper[p]
        st = self._state[p]
        buf = self._buffer(p)
        sent = _unpack_state(st)
        pf = p.detach().reshape(-1)
        d = x if x.dtype == torch.float32 else x.float()
        if scale != 1.0:
            d.div_(scale)
        if sent is not None and sent.shape != x.shape:
            sent = None  # a state from another layout: as if this were the first exchange
        rec = self._rec.pop(p, self.reconcile is not False)
        from_sent = not rec and buf is not None and sent is not None
        if from_sent and _fusable(x, sent, pf):
            # One pass that reads only what it writes (d is x): x = (x - mu sent) / keep - wd p; sent = x as it came
            _qccl._momentum_corrected_from_sent(x, sent, pf, h.mu, h.keep, h.wd, rotation)
        elif (rec and self.scheme != "ef21" and buf is not None and sent is not None
                and _fusable(x, buf, sent, pf)):
            # One pass (d is x): sent = x; x = (x - mu buf) / keep - wd p, the steps below in order
            _qccl._momentum_corrected(x, buf, sent, pf, h.mu, h.keep, h.wd, rotation)
        else:
            if rotation:
                _qccl._rotate(d, rotation, True)
            # The direction is taken from the optimizer's buffer, or without reconciliation from the
            # last average (sent); the first exchange of a state has only the buffer.
            old = None if buf is None else sent if from_sent else buf.float()
            if self.scheme == "ef21" and old is not None:
                d.add_(old)
            if from_sent or sent is None:
                st["sent"] = d.clone()  # from_sent: old, the previous average, is still read below
            else:
                sent.copy_(d)
            if self.kind == "sgd" and old is None:
                pass  # SGD's first step copies d into the buffer
            elif old is None:
                if h.keep != 1.0:
                    d.div_(h.keep)  # Adam's first moment starts from zero
            else:
                d.sub_(old, alpha=h.mu)
                if h.keep != 1.0:
                    d.div_(h.keep)
            if h.wd != 0.0:
                d.sub_(pf, alpha=h.wd)
        if self.scheme == "onebit_adam":
            self._freeze_second_moment(p, st, h)
        if h.sign < 0:
            d.neg_()
        if scale != 1.0:
            d.mul_(scale)
        if d is not x:
            x.copy_(d)

    def fused_correction(self, p: torch.Tensor, n: int, scale: float = 1.0) -> Optional[tuple]:
        """corrected() for p as the exchange's epilogue, on the n elements of p in a float32 CPU
        bucket: ``(sent, old, p, mu, keep, wd)`` for the corrected allreduce
        (``Communicator._allreduce_corrected``), or None when corrected() must run after the exchange
        instead. The epilogue runs the fused corrected pass on the average bucket by bucket while the
        decode has it in cache, the same operations as corrected() on the same values; finish_fused(p)
        then does the rest of corrected(). Follows the exchange's reconciliation decision (local())."""
        h = self._hyper[p]
        st = self._state.get(p)
        sent = st.get("sent") if st else None
        buf = self._buffer(p)
        if not self.fuse or scale != 1.0 or h.sign < 0 or sent is None or buf is None or _numel(sent) != n:
            return None
        if not _packed(sent) and tuple(sent.shape) != (n,):
            return None
        pf = p.detach().reshape(-1)
        rec = self._rec.get(p, self.reconcile is not False)
        wd_p = pf if h.wd != 0.0 else None
        if not rec and (_packed(sent) or _fusable(sent)) and _fusable(pf):
            if self.pack and p not in self._no_pack:
                if not _packed(sent):
                    sent = st["sent"] = _qccl._PackedSent(sent)
            else:
                sent = _unpack_state(st)
            seg = (sent, None, wd_p, h.mu, h.keep, h.wd)
        elif rec and _packed(sent):
            return None  # local() unpacks it when it reconciles; not here: corrected() will
        elif rec and self.scheme != "ef21" and _fusable(buf, sent, pf):
            seg = (sent, buf, wd_p, h.mu, h.keep, h.wd)
        else:
            return None
        return seg

    def finish_fused(self, p: torch.Tensor) -> None:
        """What corrected() does after its pass, for a parameter corrected in the exchange's epilogue."""
        self._rec.pop(p, None)
        self.fused += 1
        st = self._state[p]
        sent = st.get("sent")
        if _packed(sent) and sent.raw_blocks > PACK_MAX_RAW_SHARE * sent.blocks:
            st["sent"] = _unpacked(sent)  # this codec's averages do not pack
            if not self.warming:
                self._no_pack.add(p)
        if self.scheme == "onebit_adam":
            self._freeze_second_moment(p, self._state[p], self._hyper[p])

    def _reconciles(self, p: torch.Tensor, buf: Optional[torch.Tensor], sent: Optional[torch.Tensor],
                    pf: torch.Tensor, h: _Hyper) -> bool:
        """Whether this exchange of p reconciles (module text, "Reconciliation"). "auto" decides from
        the optimizer's buffer and the last average, identical on every rank, at positions that
        depend only on the exchange count: every rank decides alike, so replicas stay identical."""
        if self.reconcile != "auto":
            return bool(self.reconcile)
        if buf is None or sent is None or _numel(sent) != buf.numel():
            return True  # nothing to compare with: start from the buffer, as reconciliation does
        calls = self._calls.get(p, 0)
        self._calls[p] = calls + 1
        # a different sample at every exchange (_drift takes the offset modulo its spacing)
        return not _drift(buf, sent, pf, h.keep * h.wd, calls * 0x9E3779B1) <= drift_tolerance(h.mu)

    def snapshot(self) -> Dict[torch.Tensor, Dict[str, torch.Tensor]]:
        """A copy of the local momenta and the buffers last asked for, for restore()."""
        return {p: {k: _unpacked(v).clone() for k, v in st.items()} for p, st in self._state.items()}

    def restore(self, snap: Dict[torch.Tensor, Dict[str, torch.Tensor]]) -> None:
        """Puts back a snapshot(): a step that a mixed-precision scaler skipped leaves nothing behind
        (its gradients may hold Inf/NaN, which the momenta would otherwise keep)."""
        self._state = {p: {k: v.clone() for k, v in st.items()} for p, st in snap.items()}

    def _freeze_second_moment(self, p: torch.Tensor, st: Dict[str, torch.Tensor], h: _Hyper) -> None:
        """onebit_adam: puts the frozen second moment back before each step, scaled so that Adam's
        bias correction at the coming step turns it into the value frozen after the warm-up (the
        step itself then mixes in (1 - beta2) of the new gradient's square, 0.1% for 0.999)."""
        ost = self.optimizer.state.get(p)
        if not ost or "exp_avg_sq" not in ost:
            return
        v = ost["exp_avg_sq"]
        step = float(ost["step"])
        if "vhat" not in st:
            st["vhat"] = v.detach().reshape(-1).float() / (1.0 - h.beta2**step)
        v.view(-1).copy_(st["vhat"] * (1.0 - h.beta2 ** (step + 1.0)))

    def state_dict(self) -> Dict[str, Any]:
        """This rank's state: per parameter (numbered in the optimizer's param_groups order, as in
        ``optimizer.state_dict()``), the local momentum and the buffer last asked for. It differs
        across ranks: save it per rank, next to the model and the optimizer."""
        state = {self._index[p]: {k: _unpacked(v).detach().clone() for k, v in st.items()}
                 for p, st in self._state.items()}
        # reconcile="auto" samples other elements at every exchange: a resumed run samples as the
        # uninterrupted one would.
        calls = {self._index[p]: n for p, n in self._calls.items()}
        return {"scheme": self.scheme, "optimizer": self.kind, "state": state, "calls": calls}

    def load_state_dict(self, sd: Dict[str, Any]) -> None:
        if sd.get("scheme") != self.scheme or sd.get("optimizer") != self.kind:
            raise Error(f"momentum state is for scheme {sd.get('scheme')!r} with {sd.get('optimizer')!r}, not "
                        f"{self.scheme!r} with {self.kind!r}", INVALID_ARGUMENT)
        by_index = {i: p for p, i in self._index.items()}
        state = {}
        for i, st in sd["state"].items():
            p = by_index.get(int(i))
            if p is None:
                raise Error(f"momentum state names parameter {i}; the optimizer has {len(by_index)}", INVALID_ARGUMENT)
            state[p] = {k: v.detach().to(p.device, torch.float32).clone() for k, v in st.items()}
        calls = {by_index[int(i)]: int(n) for i, n in sd.get("calls", {}).items() if int(i) in by_index}
        self._state, self._calls, self._rec = state, calls, {}
