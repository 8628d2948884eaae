"""Communicators and collectives over numpy arrays and torch tensors (see the package docstring)."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any, Dict, List, Optional

from . import _qccl


class Error(RuntimeError):
    """A failed qccl call. ``code`` is the qcclResult_t value, ``name`` its enum name
    (e.g. ``"qcclMismatch"``); the message is the library's own text."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = int(code)
        self.name = CODE_NAMES.get(self.code, f"qcclResult({self.code})")


Error.__module__ = "qccl"  # shown as qccl.Error in tracebacks

CODE_NAMES = {
    0: "qcclSuccess",
    1: "qcclCudaError",
    2: "qcclSystemError",
    3: "qcclInternalError",
    4: "qcclInvalidArgument",
    5: "qcclInvalidUsage",
    6: "qcclRemoteError",
    7: "qcclTimeout",
    8: "qcclMismatch",
    9: "qcclMalformed",
    10: "qcclCommFailed",
    11: "qcclTransportError",
}
INVALID_ARGUMENT = 4

_qccl._set_error_class(Error)

CODECS = {"none": 0, "fp32": 0, "fp16": 1, "bf16": 2, "onebit": 3, "signscale": 4, "maxmin": 5, "dyn8": 6}
ALGOS = {"auto": 0, "ring": 1, "sra": 2, "allgather": 3, "hier": 4}
OPS = {"sum": 0, "avg": 1}
_CONFIG_FIELDS = (
    "codec",
    "bits",
    "bucket",
    "stochastic",
    "seed",
    "min_compress_bytes",
    "chunk_bytes",
    "pipeline_depth",
    "timeout",
    "warmup_calls",
    "algo",
    "error_feedback",
    "intra_codec",
    "auto_hier",
    "shm",
    "shm_chunk_bytes",
    "local_compress",
    "auto_ring",
)


def _invalid(msg: str) -> Error:
    return Error(msg, INVALID_ARGUMENT)


def _lookup(table: Dict[str, int], value: Any, what: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, str):
        key = value.lower()
        if key not in table:
            raise _invalid(f"unknown {what} '{value}'; expected one of {sorted(set(table))}")
        return table[key]
    if isinstance(value, int) and value in table.values():
        return value
    raise _invalid(f"unknown {what} {value!r}; expected one of {sorted(set(table))}")


def _config(overrides: Dict[str, Any]) -> Dict[str, Any]:
    cfg = {}
    for key, value in overrides.items():
        if key not in _CONFIG_FIELDS:
            raise _invalid(f"unknown config field '{key}'; expected one of {list(_CONFIG_FIELDS)}")
        if value is None:
            continue
        if key in ("codec", "intra_codec"):
            value = _lookup(CODECS, value, key.replace("_", " "), 0)
        elif key == "algo":
            value = _lookup(ALGOS, value, "algorithm", 0)
        cfg[key] = value
    return cfg


def config_defaults() -> Dict[str, Any]:
    """The communicator configuration an init call would use: defaults plus QCCL_* overrides."""
    return _qccl.config_defaults()


def _torch():
    import sys

    return sys.modules.get("torch")


_NUMPY_OK = ("float32", "float16")


def _buffer(x: Any, name: str, writable: bool):
    """Returns (object to hand to the extension, CUDA stream or 0). Never copies."""
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise _invalid(f"{name}: unsupported dtype {x.dtype}; qccl reduces float32, float16 and bfloat16")
        if not x.is_contiguous():
            raise _invalid(f"{name} is not contiguous; call .contiguous() first")
        if x.is_sparse:
            raise _invalid(f"{name} is sparse; qccl reduces dense tensors")
        stream = 0
        if x.device.type == "cuda":
            if not _qccl.HAVE_CUDA:
                raise _invalid(f"{name} is a CUDA tensor but this qccl was built without CUDA (QCCL_CUDA=OFF)")
            stream = torch.cuda.current_stream(x.device).cuda_stream
        elif x.device.type != "cpu":
            raise _invalid(f"{name}: device {x.device} is not supported (cpu or cuda)")
        # detach() shares storage; DLPack refuses tensors that require grad.
        return x.detach(), stream
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        np = None
    if np is not None and isinstance(x, np.ndarray):
        if x.dtype.name not in _NUMPY_OK:
            raise _invalid(f"{name}: unsupported dtype {x.dtype}; qccl reduces float32 and float16 arrays")
        if not x.flags.c_contiguous:
            raise _invalid(f"{name} is not C-contiguous; use numpy.ascontiguousarray first")
        if writable and not x.flags.writeable:
            raise _invalid(f"{name} is read-only")
        return x, 0
    raise TypeError(f"{name}: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}")


def _device_of(x: Any) -> str:
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return str(x.device)
    return "cpu"


_live: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


@atexit.register
def _destroy_all() -> None:
    # Runs before mpi4py finalizes MPI, so no communicator is freed after MPI_Finalize.
    for comm in list(_live):
        try:
            comm.destroy()
        except Error:
            pass


class Communicator:
    """A group of ranks that run collectives together. Create one with :func:`from_mpi`,
    :func:`from_env`, :func:`init_rank` or :func:`loopback`.

    Calls are collective: every rank calls the same collectives in the same order with the same
    element count, dtype and codec; a disagreement raises :class:`Error` (``qcclMismatch``) on
    the ranks that see it. One thread at a time may use a communicator."""

    def __init__(self, comm: "_qccl.Comm"):
        self._comm = comm
        self._lock = threading.Lock()
        # Objects that run collectives on this communicator from their own thread (the DDP hook's
        # HookState): destroy() calls their close() first, so no call of theirs outlives it.
        self._before_destroy: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._hook_count = 0  # HookStates made on it: each gets its own range of tensor ids
        _live.add(self)

    @property
    def rank(self) -> int:
        return self._comm.rank

    @property
    def size(self) -> int:
        return self._comm.size

    def allreduce(self, tensor, out=None, *, op: str = "sum", codec=None, bits: Optional[int] = None,
                  tensor_id: int = 0, algo=None):
        """Reduces ``tensor`` over all ranks into ``out`` (default: in place) and returns it.

        op: ``"sum"`` or ``"avg"``. codec: ``none|fp16|bf16|onebit|signscale|maxmin|dyn8``, or
        None for the communicator's. bits: maxmin bits (2, 4, 8), 0/None for the communicator's.
        tensor_id: the tensor's stable id, the same on every rank; it keys the error-feedback
        residual (a new element count for a known id replaces it). 0 means "no id": a lossy codec
        with error feedback then raises ``qcclInvalidUsage``. algo: ``auto|ring|sra|allgather`` or
        None. The result is bit-identical on every rank."""
        if out is None:
            out = tensor
        send, stream = _buffer(tensor, "input", writable=False)
        recv, _ = _buffer(out, "output", writable=True)
        if _device_of(tensor) != _device_of(out):
            raise _invalid("input and output must be on the same device")
        with self._lock:
            self._comm.allreduce(send, recv, _lookup(OPS, op, "op", 0), int(tensor_id),
                                 _lookup(CODECS, codec, "codec", -1), int(bits or 0),
                                 _lookup(ALGOS, algo, "algorithm", -1), stream)
        return out

    def _allreduce_corrected(self, tensor, segments, out=None, *, local=(), op: str = "sum", codec=None,
                             bits: Optional[int] = None, tensor_id: int = 0, algo=None):
        """allreduce() of a float32 CPU tensor into ``out`` (default: in place), with momentum
        correction's corrected pass (qccl.momentum) run on ``segments`` of the result inside the
        last decode, while each bucket is in cache, and its local pass on ``local`` segments of the
        input (the local momentum; out of place only) right before their encode
        (qcclAllreduceFused). segments: (begin, n, sent, old or None, p or None, mu, keep, wd);
        local: (begin, n, g, sent or None, buf or None, p or None, mu, keep, wd); each list
        disjoint, float32 CPU tensors of n elements each."""
        if out is None:
            out = tensor
        send, _ = _buffer(tensor, "input", writable=True)
        recv, _ = _buffer(out, "output", writable=True)
        with self._lock:
            self._comm.allreduce_corrected(send, recv, _lookup(OPS, op, "op", 0), int(tensor_id),
                                           _lookup(CODECS, codec, "codec", -1), int(bits or 0),
                                           _lookup(ALGOS, algo, "algorithm", -1), list(segments), list(local))
        return out

    def allgather(self, tensor, out=None, *, codec=None, bits: Optional[int] = None, tensor_id: int = 0,
                  algo=None):
        """Gathers every rank's ``tensor`` into ``out`` (shape ``(size, *tensor.shape)`` when
        allocated here; any contiguous buffer of ``size * tensor.numel()`` elements otherwise), in
        rank order, and returns it. With a lossy codec every slot holds decoded values."""
        if out is None:
            out = _empty_like_gathered(tensor, self.size)
        send, stream = _buffer(tensor, "input", writable=False)
        recv, _ = _buffer(out, "output", writable=True)
        if _device_of(tensor) != _device_of(out):
            raise _invalid("input and output must be on the same device")
        with self._lock:
            self._comm.allgather(send, recv, int(tensor_id), _lookup(CODECS, codec, "codec", -1), int(bits or 0),
                                 _lookup(ALGOS, algo, "algorithm", -1), stream)
        return out

    def reduce_scatter(self, tensor, out=None, *, op: str = "sum", codec=None, bits: Optional[int] = None,
                       tensor_id: int = 0, algo=None):
        """Reduce-scatter in NCCL's layout: ``tensor`` holds ``size * k`` elements (rank r's shard is
        elements ``[r * k, (r + 1) * k)``); ``out`` receives this rank's shard, reduced over all ranks
        with ``op`` (``"sum"`` or ``"avg"``), and is returned. When allocated here, ``out`` has shape
        ``tensor.shape[1:]`` if ``tensor`` has 2+ dimensions and ``tensor.shape[0] == size``, else ``(tensor.numel() // size,)``.
        With a lossy codec every rank encodes the shards it sends with error feedback (keyed by
        ``tensor_id``) and the owner sums the decodings, as the first stage of sra; the owner does
        not re-encode. codec, bits, tensor_id, algo: as for :meth:`allreduce`."""
        if out is None:
            out = _empty_like_shard(tensor, self.size)
        send, stream = _buffer(tensor, "input", writable=False)
        recv, _ = _buffer(out, "output", writable=True)
        if _device_of(tensor) != _device_of(out):
            raise _invalid("input and output must be on the same device")
        with self._lock:
            self._comm.reduce_scatter(send, recv, _lookup(OPS, op, "op", 0), int(tensor_id),
                                      _lookup(CODECS, codec, "codec", -1), int(bits or 0),
                                      _lookup(ALGOS, algo, "algorithm", -1), stream)
        return out

    def stats(self) -> Dict[str, int]:
        """Byte and call counters, residual and staging memory of this communicator."""
        return self._comm.stats()

    def last_algo(self) -> str:
        """What the last allreduce ran: ``"ring"``, ``"sra"``, ``"allgather"`` or ``"hier"``, or
        ``"native"`` when auto handed an uncompressed sum to the MPI library, ``"shm"`` when it summed
        it in qccl's shared-memory segment (every rank on one host), ``"rd"`` when the sum rode along
        with auto's cross-rank check (a recursive doubling over qccl's own messages: at most 4096
        fp32 elements over MPI); ``"auto"`` before the first call. Shows what ``auto`` chose (see
        ``auto_hier``)."""
        algo, path = self._comm.last_algo()
        if path == 3:
            return "rd"
        if path == 2:
            return "shm"
        if path:
            return "native"
        return {v: k for k, v in ALGOS.items()}[algo]

    def release(self, tensor_id: int) -> None:
        """Frees the error-feedback state of ``tensor_id``."""
        with self._lock:
            self._comm.release(int(tensor_id))

    def save_tensor_state(self, tensor_id: int) -> bytes:
        """The error-feedback state of ``tensor_id`` (residuals, call count) as bytes for a
        checkpoint; ``b""`` when it has none. It only fits the same rank of a communicator of the
        same size."""
        with self._lock:
            return self._comm.save_tensor_state(int(tensor_id))

    def load_tensor_state(self, tensor_id: int, data: bytes, device: bool = False) -> None:
        """Replaces the state of ``tensor_id`` by bytes from :meth:`save_tensor_state` (validated;
        malformed bytes raise ``qcclMalformed``). ``device``: the tensor's calls use CUDA buffers."""
        with self._lock:
            self._comm.load_tensor_state(int(tensor_id), bytes(data), bool(device))

    def scale_tensor_state(self, tensor_id: int, factor: float) -> bool:
        """Multiplies the residuals of ``tensor_id`` by ``factor``, e.g. new / old loss scale when a
        mixed-precision scaler changes it. False when the tensor has no state."""
        with self._lock:
            return self._comm.scale_tensor_state(int(tensor_id), float(factor))

    def set_feedback_gain(self, tensor_id: int, gain: float) -> None:
        """Error control for ``tensor_id`` (``qcclTensorSetFeedbackGain``): its encodes send the
        input plus ``gain`` times the accumulated error and keep the rest, instead of sending all of
        it (EControl, Gao, Islamov and Stich, ICLR 2024). ``gain`` in (0, 1]; 1 is plain error
        feedback. Host tensors only. Kept until :meth:`release`."""
        with self._lock:
            self._comm.set_feedback_gain(int(tensor_id), float(gain))

    def interrupt(self) -> None:
        """From any thread: makes the collective running on this communicator (and every later
        call) raise ``qcclCommFailed`` within milliseconds. Then :meth:`abort` or :meth:`destroy`."""
        self._comm.interrupt()

    def destroy(self) -> None:
        """Frees the communicator once a running call on it has returned; later calls raise. Safe
        to call twice. The DDP hook states using it finish their queued buckets and stop first
        (``HookState.close``); from one of their own jobs, only the communicator is freed."""
        for user in list(self._before_destroy):
            user.close()
        self._comm.destroy()

    def abort(self) -> None:
        """Marks the communicator failed, tells the peers (best effort) and frees it. Callable from
        any thread, also while another thread is inside a collective on it (that one raises
        ``qcclCommFailed`` at once)."""
        self._comm.abort()

    @property
    def alive(self) -> bool:
        return self._comm.alive

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def __repr__(self) -> str:
        if not self.alive:
            return "<qccl.Communicator destroyed>"
        return f"<qccl.Communicator rank {self.rank} of {self.size}>"


def _empty_like_gathered(x, size: int):
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.empty((size,) + tuple(x.shape), dtype=x.dtype, device=x.device)
    import numpy as np

    if not isinstance(x, np.ndarray):
        raise TypeError(f"input: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}")
    return np.empty((size,) + x.shape, dtype=x.dtype)


def _empty_like_shard(x, size: int):
    shape = tuple(x.shape)
    if len(shape) >= 2 and shape[0] == size:
        shard = shape[1:]
    else:
        numel = 1
        for d in shape:
            numel *= d
        if numel % size != 0:
            raise _invalid(f"input of {numel} elements does not split into {size} equal shards")
        shard = (numel // size,)
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.empty(shard, dtype=x.dtype, device=x.device)
    import numpy as np

    if not isinstance(x, np.ndarray):
        raise TypeError(f"input: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}")
    return np.empty(shard, dtype=x.dtype)


def from_mpi(comm=None, **config) -> Communicator:
    """A communicator over a duplicate of an mpi4py communicator (default ``MPI.COMM_WORLD``).
    Collective over ``comm``. Keyword arguments override the configuration (see
    :func:`config_defaults` for the fields)."""
    if not _qccl.HAVE_MPI:
        raise Error("this qccl was built without MPI (QCCL_MPI=OFF or no MPI found)", 5)
    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    if not hasattr(comm, "py2f"):
        raise TypeError(f"comm: expected an mpi4py communicator, got {type(comm).__name__}")
    return Communicator(_qccl.init_mpi(int(comm.py2f()), _config(config)))


def get_unique_id() -> bytes:
    """Rank 0's bootstrap id (opens rank 0's bootstrap address); hand it to every rank."""
    return _qccl.get_unique_id()


def unique_id_from_address(host: str, port: int) -> bytes:
    """An id every rank can build alone from an address rank 0 will listen on."""
    return _qccl.unique_id_from_address(str(host), int(port))


def init_rank(nranks: int, unique_id: bytes, rank: int, **config) -> Communicator:
    """Joins ``nranks`` ranks over UCX through ``unique_id``. Collective over all ranks."""
    if not isinstance(unique_id, (bytes, bytearray)):
        raise TypeError("unique_id must be bytes from get_unique_id() or unique_id_from_address()")
    if not 0 <= int(rank) < int(nranks):
        raise _invalid(f"rank {rank} is outside [0, {nranks})")
    return Communicator(_qccl.init_rank(int(nranks), bytes(unique_id), int(rank), _config(config)))


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise _invalid(f"environment variable {name} is not set (from_env expects torchrun's environment)")
    try:
        return int(value)
    except ValueError:
        raise _invalid(f"environment variable {name}={value!r} is not an integer") from None


def from_env(port: Optional[int] = None, **config) -> Communicator:
    """A communicator from torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.

    Rank 0 listens on MASTER_ADDR at ``port``: the argument, else QCCL_PORT, else MASTER_PORT + 1
    (torch.distributed's store already holds MASTER_PORT)."""
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    addr = os.environ.get("MASTER_ADDR")
    if not addr:
        raise _invalid("environment variable MASTER_ADDR is not set (from_env expects torchrun's environment)")
    if port is None:
        port = int(os.environ["QCCL_PORT"]) if os.environ.get("QCCL_PORT") else _env_int("MASTER_PORT") + 1
    return init_rank(world, unique_id_from_address(addr, port), rank, **config)


def loopback(nranks: int, **config) -> List[Communicator]:
    """``nranks`` communicators in this process; drive communicator i from thread i."""
    return [Communicator(c) for c in _qccl.init_loopback(int(nranks), _config(config))]
