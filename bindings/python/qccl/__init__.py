"""qccl: quantized collective communication for numpy arrays and torch tensors.

Quick start under ``mpirun -np 4 python train.py``::

    import numpy as np, qccl
    comm = qccl.from_mpi()                        # or qccl.from_env() under torchrun
    grad = np.ones(1 << 20, dtype=np.float32)
    comm.allreduce(grad, op="avg", codec="onebit", tensor_id=7)   # in place, no copy

Collectives take C-contiguous float32/float16 numpy arrays and float32/float16/bfloat16 torch
tensors (CPU; CUDA when built with CUDA) without copying them. Every failure raises
:class:`qccl.Error` with the library's message and ``.code``. ``qccl.torch`` holds the PyTorch
DDP communication hook.
"""

from ._core import (
    ALGOS,
    CODECS,
    Communicator,
    Error,
    config_defaults,
    from_env,
    from_mpi,
    get_unique_id,
    init_rank,
    loopback,
    unique_id_from_address,
)
from . import _qccl

__version__ = "0.2.0"
HAVE_CUDA = _qccl.HAVE_CUDA
HAVE_MPI = _qccl.HAVE_MPI
HAVE_UCX = _qccl.HAVE_UCX


def library_version() -> int:
    """The C library's version as major * 10000 + minor * 100 + patch (qcclGetVersion)."""
    return _qccl.version()


__all__ = [
    "ALGOS",
    "CODECS",
    "Communicator",
    "Error",
    "HAVE_CUDA",
    "HAVE_MPI",
    "HAVE_UCX",
    "config_defaults",
    "from_env",
    "from_mpi",
    "get_unique_id",
    "init_rank",
    "library_version",
    "loopback",
    "unique_id_from_address",
]
