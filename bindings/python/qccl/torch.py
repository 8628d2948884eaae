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
everything as fp32 (CNTK's "distributed after", PowerSGD's start iteration), or with
``warmup_codec`` where one is given.

Error feedback: each bucket's compressed part has a residual in the communicator, keyed by a
tensor id given to the bucket's exact list of parameters (the objects, not their shapes). DDP
rebuilds its buckets once after the first step; a bucket whose parameters change gets a new id,
its old residual is released and the new one starts from zero, so two buckets of identically
shaped layers (transformer blocks) never take over each other's residuals. Ids agree across ranks
because DDP hands every rank its buckets in the same order.

Lifetime: the collectives run on one worker thread per state (``async_op=True``). ``close()``
finishes the queued buckets and joins it; ``comm.destroy()`` and interpreter exit do the same
first, so no collective runs on a freed communicator. CUDA buckets: the worker enqueues on the
stream that was current when DDP called the hook (on the bucket's device) and completes the
future once that stream has finished the exchange.

Momentum-aware compression: ``HookState(..., optimizer=opt)`` with the ``torch.optim.SGD``,
``Adam`` or ``AdamW`` that steps the model exchanges each rank's local momentum instead of its
gradient for the compressed parameters and returns the gradient that makes ``opt.step()`` apply
the averaged momentum (:mod:`qccl.momentum`). The training loop stays as it is.

Mixed precision: with ``HookState(..., grad_scaler=scaler)`` (a ``torch.amp.GradScaler``, CUDA or
CPU, ``torch.cuda.amp.GradScaler`` on torch 1.13, or anything with ``get_scale()``) the residuals,
which hold loss-scaled gradients, follow the scale: at the first bucket of each step the hook reads
the scale; when it changed, the residuals are multiplied by new / old. A step after which the scale
went down was skipped by the scaler (it lowers the scale exactly when it finds Inf/NaN and skips
``opt.step()``), so the residuals go back to what they were before that step: nothing of a skipped
step is kept, and nothing before it is lost. This keeps a copy of every residual per step (the size
of the compressed parameters' fp32 gradients, copied once per step). With ``optimizer=`` too, the
local momenta are kept unscaled (the hook divides the gradient by the scale before it enters them,
and scales the message and the returned gradient back), and a skipped step puts them back as they
were before it; that keeps a second copy per step, of the momenta.

Checkpoints: :meth:`HookState.state_dict` holds the step count, every bucket's residuals (with
the bucket's layout) and, with ``optimizer``, the local momenta; a new HookState resumes the same
trajectory after :meth:`HookState.load_state_dict`. Residuals and momenta differ across ranks:
save one per rank.
"""

import atexit
import itertools
import math
import queue
import threading
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from . import _qccl
from ._core import CODECS, INVALID_ARGUMENT, Communicator, Error
from .momentum import ADAM_WARMUP_STEPS, MomentumCorrection, default_scheme

__all__ = ["HookState", "allreduce_hook"]

_ID_BASE = 0x7163636C << 32  # "qccl" in the high bits: keeps hook ids apart from a user's ids
_ONE_BIT = ("onebit", "signscale")
_QUANTIZED = _ONE_BIT + ("maxmin", "dyn8")  # the codecs that keep residuals (not none or the casts)
_MAX_ALLGATHER_RANKS = 8  # allgather sends n - 1 encoded copies per rank, sra 2 (n - 1) / n
# With algo=None, a quantized call of fewer elements than small_call_numel(n, bits) takes allgather:
# one round instead of sra's two, and one quantization instead of two. On 4 emulated hosts at 1
# Gbit/s onebit and signscale over allgather took 0.37-0.89x sra's time from 16K to 128K elements
# and 0.96-1.49x from 256K (bench/RESULTS.md, "Small quantized calls over allgather"). The bytes
# allgather sends beyond sra's grow as (n - 1) (n - 2) / n per element and with the codec's bits,
# so the crossover measured at 4 ranks and 1 bit scales by 1.5 n / ((n - 1) (n - 2)) / bits.
_SMALL_CALL_NUMEL_4 = 1 << 17


def small_call_numel(nranks: int, bits: int = 1) -> int:
    """The element count below which the hook's quantized calls (onebit, signscale: 1 bit per
    element; maxmin: its bits; dyn8: 8) take allgather (algo=None)."""
    if nranks < 3:
        return 1 << 62  # two ranks: allgather always (sra's second stage saves nothing there)
    return int(_SMALL_CALL_NUMEL_4 * 1.5 * nranks / ((nranks - 1) * (nranks - 2)) / max(1, bits))


# optimizer= with the dgc scheme and a 1-bit codec: the error control the hook sets when given no
# feedback_gain (bench/RESULTS.md, "Error control in the DDP hook").
DEFAULT_FEEDBACK_GAIN = 0.5
_EXIT_DRAIN_SECONDS = 30.0  # at interpreter exit, how long queued buckets may take before interrupt
_STOP = object()  # the worker's end-of-queue marker
_HELD = object()  # a job's result when it completes its future later (clip_grad_norm)
_IDS_PER_LAYOUT = 1024  # tensor ids per bucket layout: compressed (packed), raw, then one per large segment
# Compressed segments of at least this many elements get a call of their own on a view of the
# bucket instead of being packed with torch.cat and copied back: two copies of the bucket cost as
# much CPU as encoding it (py-spy, bench_ddp.py on 4 ranks), a call costs a few round trips.
_OWN_CALL_NUMEL = 1 << 18
# rotation="auto": the block, and the share of the 1-bit codec's loss below which a call rotates
# (the C API's momentum correction decides the same way: qccl_momentum.h, "Rotation").
ROTATION_BLOCK = 512
_ROTATION_GAIN = 0.9


@dataclass
class _BucketPlan:
    signature: Tuple[Any, ...]  # (parameter ids, shapes, numel)
    compressed: List[Tuple[int, int]]  # (offset, numel) segments of the flat bucket buffer, packed into one call
    raw: List[Tuple[int, int]]
    compressed_id: int
    raw_id: int
    params: List[Tuple[int, int, Any]]  # (offset, numel, parameter) of the compressed parameters
    slot: int = 0
    own: List[Tuple[int, int, int]] = field(default_factory=list)  # (offset, numel, id): a call each, no copy
    restore: List[Tuple[int, bytes]] = field(default_factory=list)  # (id, saved residual) from a checkpoint
    unmatched: bool = False  # made while a checkpoint's residuals waited and none had its layout
    gain_set: bool = False  # the compressed ids carry the state's feedback gain (set by the worker)
    rotation: Dict[int, int] = field(default_factory=dict)  # id -> rotation block (0: none); absent: undecided
    # id -> the codec's squared error on the rotated input / on the plain one, summed over ranks, where
    # "auto" decided (for reports; not saved)
    rotation_share: Dict[int, float] = field(default_factory=dict)

    @property
    def ids(self) -> List[int]:
        return [self.compressed_id, self.raw_id] + [i for _, _, i in self.own]


class HookState:
    """State of :func:`allreduce_hook`: the communicator, the codec choice and per-bucket plans.

    Args:
        comm: the qccl communicator; None builds one from torchrun's environment when RANK and
            WORLD_SIZE are set (:func:`qccl.from_env`), else from ``MPI.COMM_WORLD``.
        codec: ``onebit``, ``maxmin``, ``signscale``, ``dyn8``, ``fp16``, ``bf16`` or ``none``.
        bits: maxmin bits (2, 4 or 8); None for the communicator's default (4).
        algo: ``sra`` or ``allgather`` for compressed parts; None picks sra for 3+ ranks and
            allgather for 2, whatever the communicator's minimum compressed size says (this
            hook's own filter already decided what to compress), and allgather for quantized
            calls of fewer than :func:`small_call_numel` elements (128K on 4 ranks), where its one
            round is faster than sra's two and its one quantization loses less; with
            ``optimizer``, a 1-bit codec (onebit, signscale) and plain error feedback
            (``feedback_gain`` 1) on up to 8 ranks, None picks allgather for every call: sra's
            second quantization trains worse there without error control.
        min_compress_numel: parameters with fewer elements are sent as fp32. 4096 by default (16 KiB
            of fp32; 1024 until the suite's CNN showed its 1,280-element classifier, compressed,
            costing about 4% of its final test loss: bench/RESULTS.md, "Small tensors in fp32 and
            a compressed warm-up").
        compress_1d: also compress 1-D parameters (biases, norms); off by default.
        warmup_steps: the first steps (counted by the last bucket of each backward) are sent with
            ``warmup_codec`` (fp32 by default). With ``optimizer=`` SGD momentum and a 1-bit codec,
            a fifth of the run with ``warmup_codec="maxmin", warmup_bits=4`` is recommended
            (bench/RESULTS.md, "Small tensors in fp32 and a compressed warm-up").
        warmup_codec, warmup_bits: the codec of the warm-up steps' compressed parts ("none": the
            whole bucket as fp32). A lossy one runs on the same residuals as ``codec`` (error
            feedback carries over from the warm-up), with plain error feedback (gain 1); maxmin
            4-bit sends about an eighth of fp32's bytes.
        async_op: run the collectives on a background thread so that backward keeps computing
            while buckets are on the wire; False runs them inside the hook.
        optimizer: the ``torch.optim.SGD``, ``Adam`` or ``AdamW`` that steps this model: makes the
            compression momentum-aware (:mod:`qccl.momentum`). None keeps error feedback on the
            plain gradients.
        scheme: with ``optimizer``: ``"dgc"``, ``"ef21"``, ``"onebit_adam"`` (needs
            ``warmup_steps``) or ``"plain"``; see :mod:`qccl.momentum`. None: ``"dgc"`` for SGD,
            ``"onebit_adam"`` for Adam/AdamW with a lossy codec (warming up for
            ``ADAM_WARMUP_STEPS`` = 100 steps unless ``warmup_steps`` is given).
        reconcile: with ``optimizer``: carry into the local momenta whatever changed the
            optimizer's buffer since the last exchange (clipping after backward, a skipped
            ``opt.step()``, a loaded optimizer state). ``"auto"`` (default) compares the buffer with
            the average it was asked to take on 256 sampled elements per parameter and reconciles
            the parameters where it moved by more than rounding; the others take the cheaper pass
            that never reads the buffer. True reconciles every exchange (reads the buffer always);
            False never does, and is only for loops that hand ``opt.step()`` the hook's gradients
            unchanged: ``clip_grad_norm_`` after backward then trains worse (:mod:`qccl.momentum`,
            "Reconciliation"); ``clip_grad_norm`` below is fine. ``scheme="ef21"`` always
            reconciles.
        clip_grad_norm: clip in the hook instead of calling ``clip_grad_norm_`` after backward
            (remove that call): each rank scales its own gradient, every bucket of the step by one
            factor, to an L2 norm of at most ``clip_grad_norm * sqrt(ranks)`` before the exchange,
            before the local momentum (``optimizer``) or the error feedback sees it. This is DGC's
            local clipping (Lin et al., ICLR 2018, its ``N^(-1/2)`` rule stated for the average):
            where the ranks' gradients differ mostly by noise, the average of N of them has about
            ``1/sqrt(N)`` of their norm, and this clips as ``clip_grad_norm_`` on the average
            would; where they agree, it clips less. ``clip_grad_norm_`` after a lossy hook sees
            the codec's error in the direction (its norm 0.49-0.57 against fp32's 0.12-0.14 on the
            regression tasks with onebit and ``optimizer=``) and shrinks every step (bench/RESULTS.md,
            "Gradient clipping in the hook"). The buckets of a step are held until its last one, so
            backward no longer overlaps the exchange. A gradient with Inf/NaN is left unscaled.
            ``last_local_grad_norm``: this rank's norm at the last step (unscaled by ``grad_scaler``).
        grad_scaler: the mixed-precision loss scaler (``torch.amp.GradScaler``,
            ``torch.cuda.amp.GradScaler`` or anything with ``get_scale()``) whose scaled gradients reach the
            hook: residuals are rescaled when the scale changes and rolled back over steps the scaler
            skipped (module doc). With ``optimizer``, the local momenta are kept unscaled and rolled back
            too.
        feedback_gain: error control of the compressed tensors' residuals
            (:meth:`qccl.Communicator.set_feedback_gain`; EControl, Gao, Islamov and Stich, ICLR
            2024, without its gradient-difference term): each exchange sends what it sends plus
            ``feedback_gain`` times the accumulated codec error, and keeps the rest for later
            exchanges, instead of sending all of it at once. In (0, 1]; 1 is plain error feedback.
            None: ``DEFAULT_FEEDBACK_GAIN`` (0.5) with ``optimizer``, the ``dgc`` scheme and a 1-bit
            codec (onebit, signscale), else 1. CPU buckets only: CUDA buckets take 1 (an explicit
            gain below 1 with them raises).
        rotation: with ``optimizer`` and a 1-bit codec (onebit, signscale): each compressed call's
            input is rotated in blocks before the exchange, ``H D x`` (a Walsh-Hadamard transform
            after a fixed diagonal of random signs, the same on every rank; Suresh et al., ICML
            2017), and the average rotated back, ``(1/B) D H y``. The rotation spreads a block's few
            large elements over all of it, where one sign and one or two scales per codec bucket lose
            less of them; the error feedback runs in the rotated coordinates. ``"auto"`` (default):
            each call decides at its first compressed exchange whether to rotate, in blocks of
            :data:`ROTATION_BLOCK`, from then on: when the codec's squared error on the rotated
            momenta, summed over ranks, is below 0.9 of its error on them as they are (one
            uncompressed allreduce of two floats). An int (a power of two from 32 to 65536): always,
            in blocks of that many; 0 or None: never. Elements past a call's last whole block go as
            they are. Float32 CPU buckets only (an explicit block with CUDA buckets raises). A rotated
            call costs two transforms of its input, and its parameters' momentum passes run outside
            the exchange (inside them where the call is one parameter) instead of in its prologue and
            epilogue: on the 25.6M-parameter DDP step at 8 samples per rank, where every call
            rotated, 41-58 ms per step (20-25 ms of CPU per rank, mostly the transforms'
            arithmetic) on 2 cores; ``rotation=0`` where step time matters more. On the suite's
            CNN (ten seeds) onebit+m went from 1.028x to 1.010x fp32's final test loss, signscale+m
            from 1.024x to 1.014x
            (bench/RESULTS.md, "The rotation in the DDP hook").
    """

    def __init__(self, comm: Optional[Communicator] = None, codec: str = "onebit", bits: Optional[int] = None,
                 algo: Optional[str] = None, min_compress_numel: int = 4096, compress_1d: bool = False,
                 warmup_steps: int = 0, async_op: bool = True, *, optimizer: Any = None,
                 scheme: Optional[str] = None, grad_scaler: Any = None, reconcile: Union[bool, str] = "auto",
                 clip_grad_norm: Optional[float] = None, feedback_gain: Optional[float] = None,
                 warmup_codec: str = "none", warmup_bits: Optional[int] = None,
                 rotation: Union[str, int, None] = "auto"):
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
        if not isinstance(warmup_codec, str) or warmup_codec.lower() not in CODECS:
            raise Error(f"unknown warmup_codec {warmup_codec!r}; expected one of {sorted(CODECS)}", INVALID_ARGUMENT)
        if not (rotation is None or rotation == "auto" or (isinstance(rotation, int) and not isinstance(rotation, bool)
                                                            and (rotation == 0 or _valid_block(rotation)))):
            raise Error(f"rotation must be 'auto', 0/None or a power of two from 32 to 65536, not {rotation!r}",
                        INVALID_ARGUMENT)
        if min_compress_numel < 0 or warmup_steps < 0:
            raise Error("min_compress_numel and warmup_steps must be >= 0", INVALID_ARGUMENT)
        self.comm = comm
        self.codec = codec.lower()
        self.bits = bits
        self.algo = algo or ("sra" if comm.size >= 3 else "allgather")
        # quantized calls below this many elements take allgather (algo=None, a quantizing codec
        # only: 0 otherwise); from the codec's bits, which the warm-up codec's calls follow (they
        # share the residuals)
        codec_bits = {"maxmin": self.bits or 4, "dyn8": 8}.get(self.codec, 1)
        self.small_call_numel = (small_call_numel(comm.size, codec_bits)
                                 if algo is None and self.codec in _QUANTIZED else 0)
        self.min_compress_numel = int(min_compress_numel)
        self.compress_1d = bool(compress_1d)
        self.warmup_steps = int(warmup_steps)
        self.warmup_codec = warmup_codec.lower()
        self.warmup_bits = warmup_bits
        self.async_op = bool(async_op)
        self.step = 0
        self._plans: Dict[int, _BucketPlan] = {}
        # Each state gets its own id range, so two models hooked to one communicator never share
        # residuals. Ranks create their states on a communicator in the same order, so the ids
        # agree across ranks (counted per communicator: ranks may share a process, as loopback's do).
        self._id_base = _ID_BASE + (comm._hook_count << 24)
        comm._hook_count += 1
        self._layouts: Dict[Tuple[Any, ...], int] = {}  # parameter list -> residual slot
        self._retired: Dict[int, List[int]] = {}  # slot -> residual ids of replaced layouts, not yet freed
        self._slots = itertools.count()  # never reused: ids agree across ranks by order of first use
        self._queue: Optional[queue.Queue] = None
        self._worker: Optional[threading.Thread] = None
        self._worker_lock = threading.Lock()
        self._closed = False
        _states.add(self)
        comm._before_destroy.add(self)  # destroy() drains this state's worker first
        if optimizer is None and scheme is not None:
            raise Error("scheme needs optimizer", INVALID_ARGUMENT)
        if optimizer is None and not reconcile:
            raise Error("reconcile=False needs optimizer", INVALID_ARGUMENT)
        if clip_grad_norm is not None and not (0.0 < float(clip_grad_norm) < float("inf")):
            raise Error(f"clip_grad_norm must be a positive finite norm, not {clip_grad_norm!r}", INVALID_ARGUMENT)
        self.clip_grad_norm = None if clip_grad_norm is None else float(clip_grad_norm)
        # Each rank's own gradient is clipped to max_norm * sqrt(ranks): DGC's local clipping, its
        # N^(-1/2) rule stated for the average (docstring).
        self._clip_local = None if clip_grad_norm is None else float(clip_grad_norm) * math.sqrt(comm.size)
        # clip_grad_norm: the buckets of the running step held until its last one, with the sum of
        # their squared (unscaled) norms (on the worker, or the caller's thread without async_op)
        self._held: List[Tuple[torch.Tensor, Any, torch.futures.Future]] = []
        self._held_sq = 0.0
        self._clip_factor = 1.0  # the factor the held buckets are scaled by, while they are reduced
        self.last_local_grad_norm: Optional[float] = None  # clip_grad_norm: this rank's, last step
        if grad_scaler is not None and not callable(getattr(grad_scaler, "get_scale", None)):
            raise Error("grad_scaler: expected a GradScaler (an object with get_scale())", INVALID_ARGUMENT)
        self.grad_scaler = grad_scaler
        self._loss_scale: Optional[float] = None  # the scale the running step's residuals are in
        self._snapshot: Dict[int, bytes] = {}  # residuals before the running step (grad_scaler only)
        self._momentum_snapshot: Optional[Dict[Any, Any]] = None  # local momenta before it (and optimizer=)
        self._in_step = False  # a bucket of the running step was seen and not yet the last one
        self._cuda = False  # the buckets are CUDA tensors (their residuals live on the device)
        # load_state_dict's residuals by bucket layout (shapes, numel), each in bucket order, until a
        # bucket with that layout takes them; steps seen since (gives up after DDP's rebuild).
        self._saved: Dict[Tuple[Any, ...], List[List[Tuple[bytes, int]]]] = {}  # (residual, rotation) per id
        self._saved_steps = 0
        self.momentum: Optional[MomentumCorrection] = None
        if optimizer is not None:
            if scheme is None:
                scheme = default_scheme(optimizer, self.lossless)
                if scheme == "onebit_adam" and self.warmup_steps == 0:
                    self.warmup_steps = ADAM_WARMUP_STEPS
            self.momentum = MomentumCorrection(optimizer, scheme, self.warmup_steps, reconcile)
        if feedback_gain is not None and not (0.0 < float(feedback_gain) <= 1.0):
            raise Error(f"feedback_gain must be in (0, 1], not {feedback_gain!r}", INVALID_ARGUMENT)
        self._gain_asked = feedback_gain is not None
        if feedback_gain is None:
            dgc = self.momentum is not None and self.momentum.scheme == "dgc"
            feedback_gain = DEFAULT_FEEDBACK_GAIN if dgc and self.codec in _ONE_BIT else 1.0
        self.feedback_gain = float(feedback_gain)
        # One quantization stage for the momentum where there is no error control: sra's owners
        # re-quantizing the averaged momentum measured worse (bench/RESULTS.md, "Momentum-aware
        # compression"; "Error control in the DDP hook" for sra with it). CUDA buckets take no
        # error control, so they keep that choice (algo_cuda).
        one_stage = algo is None and optimizer is not None and self.codec in _ONE_BIT \
            and comm.size <= _MAX_ALLGATHER_RANKS
        self.algo_cuda = "allgather" if one_stage else self.algo
        if one_stage and self.feedback_gain == 1.0:
            self.algo = "allgather"
        # The rotation applies to the momenta a 1-bit codec sends (optimizer=); without optimizer=
        # the hook stays as it was.
        self.rotation = rotation if rotation == "auto" else int(rotation or 0)
        # A rotated call that is one parameter rotates inside its momentum passes (False: in passes
        # of their own, the same bits; for tests and measurements).
        self.rotate_in_passes = True
        self._rotates = self.momentum is not None and self.codec in _ONE_BIT and self.rotation != 0

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
        # The parameters themselves key the residual: shapes alone would let two buckets of
        # identical layers trade residuals when DDP rebuilds its buckets.
        owners = tuple(id(p) for p in params) if params else ("index", index)
        signature = (owners, shapes, numel)
        plan = self._plans.get(index)
        if plan is not None and plan.signature == signature:
            return plan
        slot = self._layouts.get(signature)
        if slot is None:
            slot = self._layouts[signature] = next(self._slots)
        if slot >= (1 << 24) // _IDS_PER_LAYOUT:
            raise Error("qccl hook: too many bucket layouts for one HookState", INVALID_ARGUMENT)
        base = self._id_base + _IDS_PER_LAYOUT * slot
        if plan is not None:
            # DDP rebuilt its buckets. The old layout's residuals are freed at the end of this
            # step unless another bucket took that exact layout (retire()).
            self._retired[plan.slot] = plan.ids
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
        compressed, own = _merge(compressed), []
        if len(compressed) > 1:
            big = [sg for sg in compressed if sg[1] >= _OWN_CALL_NUMEL][:_IDS_PER_LAYOUT - 2]
            own = [(o, n, base + 2 + j) for j, (o, n) in enumerate(big)]
            compressed = [sg for sg in compressed if sg not in big]
        plan = _BucketPlan(signature, compressed, _merge(raw), base, base + 1, corrected, slot, own)
        if self._saved:
            queue_ = self._saved.get(signature[1:])
            if queue_ and len(queue_[0]) == len(plan.ids):
                saved = queue_.pop(0)
                plan.restore = [(i, data) for i, (data, _) in zip(plan.ids, saved)]  # loaded by the worker
                plan.rotation = {i: rot for i, (_, rot) in zip(plan.ids, saved) if rot >= 0}
                if not queue_:
                    del self._saved[signature[1:]]
            else:
                plan.unmatched = True  # sent uncompressed while checkpointed residuals wait for their layout
        self._plans[index] = plan
        return plan

    def retire(self, buckets: Optional[int] = None) -> List[int]:
        """The residual ids that no bucket uses any more (called with the last bucket of a step,
        ``buckets`` its index + 1): the layouts DDP's rebuild replaced and no other bucket took
        over, and those of bucket indices the rebuild left out."""
        if buckets is not None:
            for index in [i for i in self._plans if i >= buckets]:
                gone = self._plans.pop(index)
                self._retired[gone.slot] = gone.ids
        live = {p.slot for p in self._plans.values()}
        dead = {slot: ids for slot, ids in self._retired.items() if slot not in live}
        self._retired.clear()
        for sig in [sig for sig, slot in self._layouts.items() if slot in dead]:
            del self._layouts[sig]  # a parameter list seen again later starts a new residual
        return sorted(i for ids in dead.values() for i in ids)

    def _reduce(self, buf: torch.Tensor, plan: _BucketPlan, warm: bool, step: int,
                release: Tuple[int, ...] = (), scale: float = 1.0, warm_lossy: bool = False) -> None:
        """One bucket's exchange. ``warm``: the whole bucket as fp32 (the warm-up with the default
        ``warmup_codec``, or a checkpoint's residuals still unmatched); ``warm_lossy``: a warm-up
        step that sends the compressed parts with ``warmup_codec`` instead of the codec."""
        for tensor_id in release:  # on the worker, in order with the collectives queued before
            self.comm.release(tensor_id)
        for tensor_id, data in plan.restore:
            if data:
                self.comm.load_tensor_state(tensor_id, data, device=self._cuda)
        plan.restore = []
        if self._cuda and self._gain_asked and self.feedback_gain != 1.0:
            raise Error("feedback_gain below 1 takes CPU buckets (qccl's device path has no error control)",
                        INVALID_ARGUMENT)
        if self._cuda and self._rotates and self.rotation != "auto":
            raise Error("rotation takes CPU buckets (qccl's device path does not rotate)", INVALID_ARGUMENT)
        if not plan.gain_set and not self._cuda:
            if self.feedback_gain != 1.0 and not (warm or warm_lossy):
                for tensor_id in [plan.compressed_id] + [i for _, _, i in plan.own]:
                    self.comm.set_feedback_gain(tensor_id, self.feedback_gain)
            plan.gain_set = not (warm or warm_lossy)  # the warm-up codec keeps plain error feedback
        if self._clip_factor < 1.0:
            buf.mul_(self._clip_factor)  # clip_grad_norm: before anything reads this rank's gradient
        mc = self.momentum
        if mc is not None:
            mc.warming = warm_lossy  # the warm-up codec's averages do not decide the packing
        corrected = plan.params if mc is not None and mc.corrects(step) else []
        host32 = buf.dtype == torch.float32 and buf.device.type == "cpu" and buf.is_contiguous()
        # A parameter that is a call of its own sends its local momentum as it is, out of place,
        # instead of a copy written into the bucket first (MomentumCorrection.local(out_of_place)).
        alone = self._call_regions(plan, warm, buf.numel()) if corrected and host32 and mc.fuse else set()
        # A rotated call (or one that decides now) sends its input rotated and gets the average
        # rotated back after it: its parameters take neither the prologue nor the epilogue.
        rotated = self._rotated_spans(plan, warm, host32) if corrected else []
        # A parameter that is a rotated call of its own is rotated inside its local and corrected
        # passes (MomentumCorrection.local/corrected(rotation=)) instead of in passes of their own.
        inside = self._rotated_alone(plan, rotated) if self.rotate_in_passes else {}
        sources = {}  # offset -> (local momentum to send, the local pass to run on it first)
        for o, n, p in corrected:
            src = mc.local(p, buf[o:o + n], scale, out_of_place=(o, n) in alone and not _inside(o, n, rotated),
                           rotation=inside.get((o, n), 0))
            if src is not None:
                sources[o] = src
        # The corrected pass of each parameter that allows it runs inside the exchange's last decode,
        # bucket by bucket in cache (MomentumCorrection.fused_correction); the rest after it.
        fusable = {}
        if corrected and host32:
            for o, n, p in corrected:
                if _inside(o, n, rotated):
                    continue
                seg = mc.fused_correction(p, n, scale)
                if seg is not None:
                    fusable[o] = (n, seg)
        done = self._exchange(buf, plan, warm, fusable, sources, warm_lossy, host32, set(inside))
        if sources:  # every deferred local pass must have run as its call's prologue
            raise Error(f"qccl hook: internal error, local passes at offsets {sorted(sources)} did not run",
                        3)  # qcclInternalError
        for o, n, p in corrected:
            if o in done:
                mc.finish_fused(p)
            else:
                mc.corrected(p, buf[o:o + n], scale, rotation=inside.get((o, n), 0))

    def _may_rotate(self, plan: _BucketPlan, tensor_id: int) -> bool:
        """Call ``tensor_id`` rotates or decides at its next exchange whether to. A decision restored
        from a checkpoint holds whatever this state's setting: the residual is in its coordinates."""
        block = plan.rotation.get(tensor_id)
        return block != 0 if block is not None else self._rotates

    def _rotated_spans(self, plan: _BucketPlan, warm: bool, host32: bool) -> List[Tuple[int, int]]:
        """The bucket spans (offset, numel) of the calls that rotate or decide whether to."""
        if warm or not host32:
            return []
        spans = list(plan.compressed) if plan.compressed and self._may_rotate(plan, plan.compressed_id) else []
        return spans + [(o, n) for o, n, i in plan.own if self._may_rotate(plan, i)]

    def _rotated_alone(self, plan: _BucketPlan, spans: List[Tuple[int, int]]) -> Dict[Tuple[int, int], int]:
        """(offset, numel) -> block of the rotated calls (decided) whose tensor is one parameter."""
        if not spans:
            return {}
        calls = [(o, n, i) for o, n, i in plan.own]
        if len(plan.compressed) == 1:
            calls.append(plan.compressed[0] + (plan.compressed_id,))
        params = {(o, n) for o, n, _ in plan.params}
        return {(o, n): plan.rotation[i] for o, n, i in calls if (o, n) in params and plan.rotation.get(i, 0) > 0}

    def _rotation(self, plan: _BucketPlan, tensor_id: int, x: torch.Tensor) -> int:
        """The rotation block of call ``tensor_id`` (0: none), decided at its first exchange from
        its input ``x`` (the same decision on every rank: the losses are summed over ranks)."""
        block = plan.rotation.get(tensor_id)
        if block is not None:
            return block
        block = 0 if not self._rotates else self.rotation if self.rotation != "auto" else ROTATION_BLOCK
        if x.numel() < block or not block:
            block = 0
        elif self.rotation == "auto":
            two = self.codec == "onebit"
            w = x.clone()
            _qccl._rotate(w, block, False)
            # ||H x||^2 = B ||x||^2: the rotated loss in the units of the plain one.
            losses = torch.tensor([_qccl._onebit_loss(x, two, ROTATION_BLOCK),
                                   _qccl._onebit_loss(w, two, ROTATION_BLOCK) / block], dtype=torch.float32)
            self.comm.allreduce(losses, op="sum", codec="none")
            if not bool(torch.isfinite(losses).all()):
                return 0  # Inf/NaN in the input (a step a loss scaler skips): decide at a later exchange
            plan.rotation_share[tensor_id] = float(losses[1] / losses[0]) if float(losses[0]) > 0 else 1.0
            if not bool(losses[1] < _ROTATION_GAIN * losses[0]):
                block = 0
        plan.rotation[tensor_id] = block
        return block

    def _rotated_call(self, plan: _BucketPlan, tensor_id: int, x: torch.Tensor, call, inside: bool = False) -> None:
        """``call()`` the allreduce of ``x`` in place, rotated where ``tensor_id`` rotates
        (``inside``: x comes rotated and goes back rotated: the momentum passes rotate it)."""
        block = 0 if inside else self._rotation(plan, tensor_id, x)
        if block:
            _qccl._rotate(x, block, False)
        call()
        if block:
            _qccl._rotate(x, block, True)

    @staticmethod
    def _segments(fusable: Dict[int, Any], regions: List[Tuple[int, int, int]], done: set) -> list:
        """The corrected passes to run in a call's epilogue: those of the parameters (``fusable``:
        bucket offset -> (numel, segment)) inside the call's regions ``(bucket offset, numel, offset
        in the call's tensor)``, at their offsets in that tensor; their bucket offsets go to done."""
        segs = []
        for po, (pn, seg) in fusable.items():
            for o, n, at in regions:
                if o <= po and po + pn <= o + n:
                    segs.append((po - o + at, pn) + seg)
                    done.add(po)
                    break
        return segs

    @staticmethod
    def _call_regions(plan: _BucketPlan, warm: bool, numel: int) -> set:
        """The (offset, numel) of the bucket's calls on views of it (_exchange), packed ones aside."""
        if warm or not (plan.compressed or plan.own):
            return {(0, numel)}
        regions = {(o, n) for o, n, _ in plan.own}
        for segments in (plan.compressed, plan.raw):
            if len(segments) == 1:
                regions.add(tuple(segments[0]))
        return regions

    def _call(self, buf: torch.Tensor, o: int, n: int, fusable: Dict[int, Any], done: set,
              sources: Dict[int, tuple], **call) -> None:
        """allreduce of buf[o:o + n] (a contiguous view: no copy), with the corrected passes of the
        parameters inside it as its epilogue; from ``sources[o]`` into it where that holds the
        call's input (a local momentum sent out of place, its local pass as the call's prologue)."""
        segs = self._segments(fusable, [(o, n, 0)], done)
        if o in sources and sources[o][0].numel() == n:
            u, local = sources.pop(o)
            self.comm._allreduce_corrected(u, segs, out=buf[o:o + n], local=[(0, n) + local], **call)
        elif segs:
            self.comm._allreduce_corrected(buf[o:o + n], segs, **call)
        else:
            self.comm.allreduce(buf[o:o + n], **call)

    def _exchange(self, buf: torch.Tensor, plan: _BucketPlan, warm: bool, fusable: Dict[int, Any],
                  sources: Dict[int, tuple], warm_lossy: bool = False, host32: bool = False,
                  inside: Optional[set] = None) -> set:
        """The bucket's allreduce calls; returns the offsets of the parameters corrected inside them."""
        comm, done = self.comm, set()
        if warm or not (plan.compressed or plan.own):
            self._call(buf, 0, buf.numel(), fusable, done, sources, op="avg", codec="none", tensor_id=plan.raw_id)
            return done
        codec, bits = (self.warmup_codec, self.warmup_bits) if warm_lossy else (self.codec, self.bits)
        opts = dict(op="avg", codec=codec, bits=bits, algo=self.algo_cuda if self._cuda else self.algo)

        def sized(n: int) -> Dict[str, Any]:  # a small quantized call takes allgather (small_call_numel)
            return dict(opts, algo="allgather") if n < self.small_call_numel else opts

        for o, n, tensor_id in plan.own:
            if host32 and self._may_rotate(plan, tensor_id):  # no prologue, no epilogue (_rotated_spans)
                view = buf[o:o + n]
                self._rotated_call(plan, tensor_id, view,
                                   lambda: comm.allreduce(view, tensor_id=tensor_id, **sized(n)),
                                   inside=bool(inside) and (o, n) in inside)
            else:
                self._call(buf, o, n, fusable, done, sources, tensor_id=tensor_id, **sized(n))
        packed_numel = sum(n for _, n in plan.compressed)
        for segments, call in ((plan.compressed, dict(sized(packed_numel), tensor_id=plan.compressed_id)),
                               (plan.raw, dict(op="avg", codec="none", tensor_id=plan.raw_id))):
            if not segments:
                continue
            rotated = host32 and segments is plan.compressed and self._may_rotate(plan, plan.compressed_id)
            if len(segments) == 1:
                o, n = segments[0]
                if rotated:
                    view = buf[o:o + n]
                    self._rotated_call(plan, plan.compressed_id, view, lambda: comm.allreduce(view, **call),
                                       inside=bool(inside) and (o, n) in inside)
                else:
                    self._call(buf, o, n, fusable, done, sources, **call)
                continue
            packed = torch.cat([buf[o:o + n] for o, n in segments])
            regions, pos = [], 0
            for o, n in segments:
                regions.append((o, n, pos))
                pos += n
            segs = [] if rotated else self._segments(fusable, regions, done)
            if rotated:
                self._rotated_call(plan, plan.compressed_id, packed, lambda: comm.allreduce(packed, **call))
            elif segs:
                comm._allreduce_corrected(packed, segs, **call)
            else:
                comm.allreduce(packed, **call)
            for o, n, at in regions:
                buf[o:o + n].copy_(packed[at:at + n])
        return done

    def _live_ids(self) -> List[int]:
        return sorted(i for plan in self._plans.values() for i in plan.ids)

    def _loss_scale_step(self) -> Tuple[List[int], bool, float]:
        """At the first bucket of a step, with grad_scaler, on the caller's thread: the residual
        ids there are so far, whether to roll back the last step, and the factor to apply."""
        scale = float(self.grad_scaler.get_scale())
        if not (scale > 0.0 and scale < float("inf")):
            raise Error(f"grad_scaler: the loss scale is {scale}", INVALID_ARGUMENT)
        last, self._loss_scale = self._loss_scale, scale
        ids = self._live_ids()
        if last is None:
            return ids, False, 1.0
        return ids, scale < last, scale / last

    def _rescale(self, ids: List[int], rollback: bool, factor: float) -> None:
        """On the worker, before the step's first collective: puts back the residuals of before a
        skipped step (releasing those made during it), brings them to the current loss scale, and
        keeps a copy for this step."""
        comm = self.comm
        if rollback:
            for i in ids:
                data = self._snapshot.get(i, b"")
                if data:
                    comm.load_tensor_state(i, data, device=self._cuda)
                else:
                    comm.release(i)  # it had no residual before the skipped step
        if factor != 1.0:
            for i in ids:
                comm.scale_tensor_state(i, factor)
        self._snapshot = {i: comm.save_tensor_state(i) for i in ids}
        mc = self.momentum
        if mc is not None:  # the local momenta are kept unscaled: rolled back, never rescaled
            if rollback and self._momentum_snapshot is not None:
                mc.restore(self._momentum_snapshot)
            self._momentum_snapshot = mc.snapshot()

    def _held_job(self, job, on_stream, buf: torch.Tensor, fut: torch.futures.Future, last: bool, scale: float):
        """clip_grad_norm: wraps a bucket's job so that it is held, its gradient's norm counted,
        until the step's last bucket; that one scales every held bucket by one factor, the
        local clip, and reduces them in DDP's order (jobs run in order on one thread)."""

        def held():
            # (A backward that raised before its last bucket leaves buckets held; DDP refuses the
            # next iteration then: it expects the prior reduction finished.)
            try:
                norm = on_stream(lambda: _norm(buf))
            except BaseException as e:
                self._fail_held(e)  # DDP waits for every bucket's future: none may stay pending
                raise
            self._held.append((buf, job, fut))
            self._held_sq += (norm / scale) ** 2
            if not last:
                return _HELD
            held_, total = self._held, self._held_sq
            self._held, self._held_sq = [], 0.0
            local = math.sqrt(total)
            self.last_local_grad_norm = local
            # As clip_grad_norm_: max_norm / (norm + 1e-6) where below 1; a non-finite norm (a
            # step the loss scaler will skip) is left as it is.
            factor = self._clip_local / (local + 1e-6) if math.isfinite(local) else 1.0
            self._clip_factor = min(1.0, factor)
            try:
                for _, j, f in held_:
                    try:
                        f.set_result(j())
                    except BaseException as e:
                        f.set_exception(e)
            finally:
                self._clip_factor = 1.0
            return _HELD

        return held

    def _fail_held(self, error: BaseException) -> None:
        held, self._held, self._held_sq = self._held, [], 0.0
        for _, _, f in held:
            if not f.done():
                f.set_exception(error)

    def _drain(self) -> None:
        """Waits until the buckets queued so far have been exchanged."""
        with self._worker_lock:
            jobs = self._queue if self._worker is not None and not self._closed else None
        if jobs is not None:
            done: torch.futures.Future = torch.futures.Future()
            jobs.put((lambda: None, done))
            done.wait()

    def state_dict(self) -> Dict[str, Any]:
        """This rank's hook state for a checkpoint: the step count, the error-feedback residuals
        of every bucket (in bucket order, with its layout), the loss scale they are in (with
        ``grad_scaler``) and, with ``optimizer``, the local momenta. Residuals and momenta differ
        across ranks: save one per rank. Call between steps (after ``opt.step()``)."""
        self._drain()
        # rotation: each id's rotation block (the residual is in its coordinates), -1 undecided
        residuals = [{"layout": plan.signature[1:], "state": [self.comm.save_tensor_state(i) for i in plan.ids],
                      "rotation": [plan.rotation.get(i, -1) for i in plan.ids]}
                     for _, plan in sorted(self._plans.items())]
        return {"step": self.step, "momentum": self.momentum.state_dict() if self.momentum else None,
                "residuals": residuals, "loss_scale": self._loss_scale}

    def load_state_dict(self, sd: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output (call before the first backward after resuming,
        on a communicator of the same size and rank). A bucket takes the residuals saved for its
        layout (parameter shapes, in order) when DDP first hands it over. DDP's first step uses
        its initial buckets, which can differ from the rebuilt ones that were saved: until the
        rebuild, a bucket with no saved layout is sent uncompressed (exact, no residual), and
        residuals no bucket took after the rebuild are dropped with a warning."""
        if (sd.get("momentum") is None) != (self.momentum is None):
            raise Error("hook state: saved with and restored without optimizer= (or the reverse)", INVALID_ARGUMENT)
        if self._plans:
            raise Error("hook state: load_state_dict() must come before the first backward", INVALID_ARGUMENT)
        self.step = int(sd["step"])
        if self.momentum is not None:
            self.momentum.load_state_dict(sd["momentum"])
        self._saved = {}
        for r in sd.get("residuals", []):
            states = list(r["state"])
            # A checkpoint from before the rotation: its residuals are in the plain coordinates.
            rotation = [int(b) for b in r.get("rotation", [0 if data else -1 for data in states])]
            if len(rotation) != len(states) or any(b not in (-1, 0) and not _valid_block(b) for b in rotation):
                raise Error("hook state: malformed rotation in a saved residual record", INVALID_ARGUMENT)
            self._saved.setdefault(tuple(r["layout"]), []).append(list(zip(states, rotation)))
        self._saved_steps = 0
        self._loss_scale = sd.get("loss_scale")

    def _submit(self, job, fut: torch.futures.Future) -> None:
        with self._worker_lock:
            if self._closed:
                raise Error("qccl hook: this HookState was closed (or its communicator destroyed)", INVALID_ARGUMENT)
            if self._worker is None:
                self._queue = queue.Queue()
                self._worker = threading.Thread(target=self._run, args=(self._queue,), name="qccl-ddp-hook",
                                                daemon=True)
                self._worker.start()
            self._queue.put((job, fut))

    @staticmethod
    def _run(jobs: "queue.Queue") -> None:
        # One thread, first in first out: every rank issues the buckets' collectives in DDP's order.
        while True:
            item = jobs.get()
            if item is _STOP:
                return
            job, fut = item
            try:
                out = job()
                if out is not _HELD:
                    fut.set_result(out)
            except BaseException as e:  # handed to DDP, which raises it from backward()
                fut.set_exception(e)

    def close(self, timeout: Optional[float] = None) -> bool:
        """Finishes the buckets already queued, stops the worker thread and joins it; later hook
        calls raise. ``timeout``: seconds to wait for the queued collectives (None: as long as they
        take, each within the communicator's own timeout); past it the communicator is interrupted
        (its running call raises ``qcclCommFailed``) and the worker is joined. Returns False when
        an interrupt was needed. Safe to call twice."""
        with self._worker_lock:
            self._closed = True
            worker, jobs = self._worker, self._queue
            self._worker = None
        if worker is not None:
            jobs.put(_STOP)
            if worker is threading.current_thread():
                return True  # closed from a job on the worker itself: it ends after this job
            worker.join(timeout)
        clean = worker is None or not worker.is_alive()
        if not clean:
            try:
                self.comm.interrupt()
            except Error:
                pass  # already destroyed: the running call returns on its own
            worker.join()
        # clip_grad_norm: buckets of a step whose last bucket never came are not reduced any more.
        self._fail_held(Error("qccl hook: closed in the middle of a step (its buckets were held for clip_grad_norm)",
                              INVALID_ARGUMENT))
        return clean

def _norm(t: torch.Tensor) -> float:
    """The L2 norm of a tensor: float32 norms of 32K-element chunks, combined in double. torch
    1.13's float32 norm of a whole 6.5M-element buffer (a 25 MiB bucket) is off by 1.5e-4 of itself;
    this by 6e-8, for 4.2 ms instead of 2.6 (one thread; float64 chunks: exact, 12.9 ms)."""
    parts = [torch.linalg.vector_norm(c, dtype=torch.float32) for c in t.reshape(-1).split(1 << 15)]
    return math.sqrt(float(torch.stack(parts).double().square().sum())) if parts else 0.0


def _valid_block(b: int) -> bool:
    return 32 <= b <= 65536 and b & (b - 1) == 0


def _inside(o: int, n: int, spans: List[Tuple[int, int]]) -> bool:
    return any(so <= o and o + n <= so + sn for so, sn in spans)


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
    state._cuda = buf.is_cuda
    rescale = None
    if not state._in_step and state.grad_scaler is not None:
        rescale = state._loss_scale_step()  # the step's first bucket: before its plan adds ids
    scale = state._loss_scale if state.grad_scaler is not None else 1.0
    plan = state.plan(bucket)
    step = state.step
    resuming = plan.unmatched and bool(state._saved)  # a checkpoint's residuals still wait for a layout
    warming = step < state.warmup_steps
    # A lossy warmup_codec: the warm-up's compressed parts take it, on the same residuals; else fp32.
    warm_lossy = warming and not resuming and CODECS[state.warmup_codec] != 0 and not state.lossless
    warm = resuming or (warming and not warm_lossy)
    release: Tuple[int, ...] = ()
    state._in_step = not bucket.is_last()
    if bucket.is_last():
        state.step += 1
        release = tuple(state.retire(bucket.index() + 1))
        if state._saved:
            state._saved_steps += 1
            if state._saved_steps >= 2:  # DDP rebuilt its buckets after the first step
                n = sum(len(q) for q in state._saved.values())
                warnings.warn(f"qccl hook: {n} bucket(s) of checkpointed residuals matched no bucket's layout; "
                              "those buckets start from zero", RuntimeWarning)
                state._saved.clear()

    if buf.is_cuda:
        # The worker enqueues on the stream backward filled the bucket on, with the bucket's
        # device current, and completes the future only once that stream has run the exchange.
        stream = torch.cuda.current_stream(buf.device)

        def on_stream(fn):
            with torch.cuda.device(buf.device), torch.cuda.stream(stream):
                out = fn()
            stream.synchronize()
            return out
    else:

        def on_stream(fn):
            return fn()

    def reduce() -> torch.Tensor:
        if rescale is not None:
            state._rescale(*rescale)
        state._reduce(buf, plan, warm, step, release, scale, warm_lossy)
        return buf

    def job() -> torch.Tensor:
        return on_stream(reduce)

    fut: torch.futures.Future = torch.futures.Future()
    if state.clip_grad_norm is not None:
        job = state._held_job(job, on_stream, buf, fut, bucket.is_last(), scale)
    if state.async_op:
        try:
            state._submit(job, fut)
        except Error as e:
            fut.set_exception(e)
    else:
        try:
            out = job()
            if out is not _HELD:
                fut.set_result(out)
        except Error as e:
            fut.set_exception(e)
    return fut


_states: "weakref.WeakSet[HookState]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Registered after qccl's own exit handler, so it runs first: the hook workers finish (or are
    # interrupted) before the communicators are destroyed and MPI is finalized.
    for state in list(_states):
        try:
            state.close(_EXIT_DRAIN_SECONDS)
        except Exception:  # noqa: BLE001 - exit must go on
            pass


def _register_backend() -> None:
    # torch.distributed.init_process_group("qccl") works once qccl.torch is imported.
    from .torch_backend import register

    register()


_register_backend()
