"""PyTorch DistributedDataParallel communication hook over qccl.

Usage::

    import qccl, qccl.torch
    ddp = torch.nn.parallel.DistributedDataParallel(model)        # gloo process group
    state = qccl.torch.HookState(qccl.from_mpi(), codec="onebit", warmup_steps=10)
    ddp.register_comm_hook(state, qccl.torch.allreduce_hook)

The hook averages each gradient bucket over the ranks, as DDP's default allreduce does, and
returns a ``torch.futures.Future`` holding the bucket. DDP still needs its own process group (for
the initial parameter broadcast); the gradients themselves travel through the qccl communicator.

What is compressed: parameters with at least two dimensions and at least ``min_compress_numel``
elements. Biases, norm weights and small tensors are sent as fp32, since they are a tiny share of
the bytes and quantizing them hurts accuracy most. The first ``warmup_steps`` steps send
everything as fp32 (CNTK's "distributed after", PowerSGD's start iteration).

Error feedback: each bucket's compressed part has a residual in the communicator, keyed by a
tensor id derived from the bucket index and the element count. DDP rebuilds its buckets once after
the first step; when a bucket's layout changes, its residual is released and starts from zero.

Momentum-aware compression: ``HookState(..., optimizer=opt)`` with the ``torch.optim.SGD``,
``Adam`` or ``AdamW`` that steps the model exchanges each rank's local momentum instead of its
gradient for the compressed parameters and returns the gradient that makes ``opt.step()`` apply
the averaged momentum (:mod:`qccl.momentum`). The training loop stays as it is.
"""

import itertools
import queue
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from ._core import CODECS, INVALID_ARGUMENT, Communicator, Error
from .momentum import MomentumCorrection

__all__ = ["HookState", "allreduce_hook"]

_ID_BASE = 0x7163636C << 32  # "qccl" in the high bits: keeps hook ids apart from a user's ids
_ONE_BIT = ("onebit", "signscale")
_MAX_ALLGATHER_RANKS = 8  # allgather sends n - 1 encoded copies per rank, sra 2 (n - 1) / n


@dataclass
class _BucketPlan:
    signature: Tuple[Tuple[int, ...], ...]
    compressed: List[Tuple[int, int]]  # (offset, numel) segments of the flat bucket buffer
    raw: List[Tuple[int, int]]
    compressed_id: int
    raw_id: int
    stale_ids: List[int]  # residuals of the bucket's previous layout, freed before its next exchange
    params: List[Tuple[int, int, Any]]  # (offset, numel, parameter) of the compressed parameters


class HookState:
    """State of :func:`allreduce_hook`: the communicator, the codec choice and per-bucket plans.

    Args:
        comm: the qccl communicator; None builds one from torchrun's environment when RANK and
            WORLD_SIZE are set (:func:`qccl.from_env`), else from ``MPI.COMM_WORLD``.
        codec: ``onebit``, ``maxmin``, ``signscale``, ``dyn8``, ``fp16``, ``bf16`` or ``none``.
        bits: maxmin bits (2, 4 or 8); None for the communicator's default (4).
        algo: ``sra`` or ``allgather`` for compressed parts; None picks sra for 3+ ranks and
            allgather for 2, whatever the communicator's minimum compressed size says (this
            hook's own filter already decided what to compress); with ``optimizer`` and a 1-bit
            codec (onebit, signscale) on up to 8 ranks, None picks allgather.
        min_compress_numel: parameters with fewer elements are sent as fp32.
        compress_1d: also compress 1-D parameters (biases, norms); off by default.
        warmup_steps: the first steps (counted by the last bucket of each backward) are fp32.
        async_op: run the collectives on a background thread so that backward keeps computing
            while buckets are on the wire; False runs them inside the hook.
        optimizer: the ``torch.optim.SGD``, ``Adam`` or ``AdamW`` that steps this model: makes the
            compression momentum-aware (:mod:`qccl.momentum`). None keeps error feedback on the
            plain gradients.
        scheme: with ``optimizer``: ``"dgc"`` (default), ``"ef21"``, ``"onebit_adam"`` (needs
            ``warmup_steps``) or ``"plain"``; see :mod:`qccl.momentum`.
    """

    _instances = itertools.count()

    def __init__(self, comm: Optional[Communicator] = None, codec: str = "onebit", bits: Optional[int] = None,
                 algo: Optional[str] = None, min_compress_numel: int = 1024, compress_1d: bool = False,
                 warmup_steps: int = 0, async_op: bool = True, *, optimizer: Any = None,
                 scheme: Optional[str] = None):
        if comm is None:
            import os

            from . import from_env, from_mpi

            comm = from_env() if "RANK" in os.environ and "WORLD_SIZE" in os.environ else from_mpi()
        if not isinstance(comm, Communicator):
            raise TypeError(f"comm: expected a qccl.Communicator, got {type(comm).__name__}")
        if not isinstance(codec, str) or codec.lower() not in CODECS:
            raise Error(f"unknown codec {codec!r}; expected one of {sorted(CODECS)}", INVALID_ARGUMENT)
        if algo is not None and algo not in ("sra", "allgather"):
            raise Error(f"algo must be 'sra', 'allgather' or None, not {algo!r}", INVALID_ARGUMENT)
        if min_compress_numel < 0 or warmup_steps < 0:
            raise Error("min_compress_numel and warmup_steps must be >= 0", INVALID_ARGUMENT)
        self.comm = comm
        self.codec = codec.lower()
        self.bits = bits
        self.algo = algo or ("sra" if comm.size >= 3 else "allgather")
        if algo is None and optimizer is not None and self.codec in _ONE_BIT and comm.size <= _MAX_ALLGATHER_RANKS:
            # One quantization stage for the momentum: sra's owners re-quantize the averaged
            # momentum, which measured worse (bench/RESULTS.md, "Momentum-aware compression").
            self.algo = "allgather"
        self.min_compress_numel = int(min_compress_numel)
        self.compress_1d = bool(compress_1d)
        self.warmup_steps = int(warmup_steps)
        self.async_op = bool(async_op)
        self.step = 0
        self._plans: Dict[int, _BucketPlan] = {}
        # Each state gets its own id range, so two models hooked to one communicator never share
        # residuals. Ranks create their states in the same order, so the ids agree across ranks.
        self._id_base = _ID_BASE + (next(HookState._instances) << 24)
        self._queue: Optional[queue.Queue] = None
        self._worker: Optional[threading.Thread] = None
        if optimizer is None and scheme is not None:
            raise Error("scheme needs optimizer", INVALID_ARGUMENT)
        self.momentum: Optional[MomentumCorrection] = None
        if optimizer is not None:
            self.momentum = MomentumCorrection(optimizer, scheme, self.warmup_steps)

    @property
    def lossless(self) -> bool:
        return CODECS[self.codec] == 0

    def _compressible(self, shape: Tuple[int, ...], numel: int) -> bool:
        return numel >= self.min_compress_numel and (self.compress_1d or len(shape) >= 2)

    def _should_compress(self, shape: Tuple[int, ...], numel: int) -> bool:
        return not self.lossless and self._compressible(shape, numel)

    def plan(self, bucket) -> _BucketPlan:
        """The bucket's split into compressed and fp32 segments (cached per index and layout)."""
        index, numel = bucket.index(), bucket.buffer().numel()
        params = bucket.parameters() if hasattr(bucket, "parameters") else []
        shapes = tuple(tuple(p.shape) for p in params)
        if sum(p.numel() for p in params) != numel:
            # Unknown layout: treat the bucket as one matrix, compressed when large enough.
            shapes, params = ((1, numel),), []
        signature = shapes + ((numel,),)
        plan = self._plans.get(index)
        if plan is not None and plan.signature == signature:
            return plan
        base = self._id_base + 2 * index
        # DDP rebuilt its buckets: the old residuals no longer line up. They are freed by the job
        # of this bucket, in order with the collectives still queued on the worker thread.
        stale = [plan.compressed_id, plan.raw_id] if plan is not None else []
        if self.momentum is not None and not params:
            raise Error("optimizer= needs GradBucket.parameters() (torch >= 1.10)", INVALID_ARGUMENT)
        compressed, raw, offset, corrected = [], [], 0, []
        for k, shape in enumerate(shapes):
            n = 1
            for d in shape:
                n *= d
            (compressed if self._should_compress(shape, n) else raw).append((offset, n))
            # The parameters a lossy codec would compress take the momentum-aware path, with codec
            # none too (then exactly: it is what the one-rank tests compare with opt.step()).
            if self.momentum is not None and self._compressible(shape, n) and self.momentum.active(params[k]):
                corrected.append((offset, n, params[k]))
            offset += n
        plan = _BucketPlan(signature, _merge(compressed), _merge(raw), base, base + 1, stale, corrected)
        self._plans[index] = plan
        return plan

    def _reduce(self, buf: torch.Tensor, plan: _BucketPlan, warm: bool, step: int) -> None:
        mc = self.momentum
        corrected = plan.params if mc is not None and mc.corrects(step) else []
        for o, n, p in corrected:
            mc.local(p, buf[o:o + n])
        self._exchange(buf, plan, warm)
        for o, n, p in corrected:
            mc.corrected(p, buf[o:o + n])

    def _exchange(self, buf: torch.Tensor, plan: _BucketPlan, warm: bool) -> None:
        comm = self.comm
        while plan.stale_ids:
            comm.release(plan.stale_ids.pop())
        if warm or not plan.compressed:
            comm.allreduce(buf, op="avg", codec="none", tensor_id=plan.raw_id)
            return
        opts = dict(op="avg", codec=self.codec, bits=self.bits, tensor_id=plan.compressed_id, algo=self.algo)
        if not plan.raw:
            comm.allreduce(buf, **opts)
            return
        for segments, call in ((plan.compressed, opts), (plan.raw, dict(op="avg", codec="none",
                                                                          tensor_id=plan.raw_id))):
            if len(segments) == 1:
                o, n = segments[0]
                comm.allreduce(buf[o:o + n], **call)  # a contiguous view: no copy
                continue
            packed = torch.cat([buf[o:o + n] for o, n in segments])
            comm.allreduce(packed, **call)
            pos = 0
            for o, n in segments:
                buf[o:o + n].copy_(packed[pos:pos + n])
                pos += n

    def state_dict(self) -> Dict[str, Any]:
        """This rank's hook state for a checkpoint: the step count and, with ``optimizer``, the
        local momenta (they differ across ranks: save one per rank). Error-feedback residuals
        live in the communicator and are not included."""
        return {"step": self.step, "momentum": self.momentum.state_dict() if self.momentum else None}

    def load_state_dict(self, sd: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output (call before the first backward after resuming)."""
        if (sd.get("momentum") is None) != (self.momentum is None):
            raise Error("hook state: saved with and restored without optimizer= (or the reverse)", INVALID_ARGUMENT)
        self.step = int(sd["step"])
        if self.momentum is not None:
            self.momentum.load_state_dict(sd["momentum"])

    def _submit(self, job, fut: torch.futures.Future) -> None:
        if self._worker is None:
            self._queue = queue.Queue()
            self._worker = threading.Thread(target=self._run, name="qccl-ddp-hook", daemon=True)
            self._worker.start()
        self._queue.put((job, fut))

    def _run(self) -> None:
        # One thread, first in first out: every rank issues the buckets' collectives in DDP's order.
        while True:
            job, fut = self._queue.get()
            try:
                fut.set_result(job())
            except BaseException as e:  # handed to DDP, which raises it from backward()
                fut.set_exception(e)


def _merge(segments: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Joins adjacent segments, so a bucket with one kind of parameter needs no copy."""
    out: List[Tuple[int, int]] = []
    for o, n in segments:
        if out and out[-1][0] + out[-1][1] == o:
            out[-1] = (out[-1][0], out[-1][1] + n)
        elif n > 0:
            out.append((o, n))
    return out


def allreduce_hook(state: "HookState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: averages ``bucket`` over the ranks through qccl.

    Register with ``ddp.register_comm_hook(state, allreduce_hook)``. The returned future holds the
    bucket's flat gradient tensor, averaged in place."""
    # DDP checks the return annotation above, so this module avoids postponed annotations.
    buf = bucket.buffer()
    plan = state.plan(bucket)
    step = state.step
    warm = step < state.warmup_steps
    if bucket.is_last():
        state.step += 1

    def job() -> torch.Tensor:
        state._reduce(buf, plan, warm, step)
        return buf

    fut: torch.futures.Future = torch.futures.Future()
    if state.async_op:
        state._submit(job, fut)
    else:
        try:
            fut.set_result(job())
        except Error as e:
            fut.set_exception(e)
    return fut


def _register_backend() -> None:
    # torch.distributed.init_process_group("qccl") works once qccl.torch is imported.
    from .torch_backend import register

    register()


_register_backend()
