"""Shared fixtures of the qccl Python tests.

The tests run under real multi-process launches (see CMakeLists.txt here): mpirun for test_mpi.py
and test_torch_hook.py, launch.py (torchrun's environment) for test_env.py, one process for
test_single.py. Every rank runs the same tests in the same order, so collectives line up.
"""

import os

import pytest


@pytest.fixture(scope="session")
def mpi():
    mpi4py = pytest.importorskip("mpi4py")
    del mpi4py
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture(scope="session")
def comm(mpi):
    import qccl

    # The tests exercise the codecs, and mpirun's ranks share this host, where auto would otherwise
    # sum host buffers exactly whatever the codec (test_mpi.py::test_one_host_sums_lossy_codecs_exactly).
    c = qccl.from_mpi(mpi, timeout=float(os.environ.get("QCCL_TIMEOUT", "60")), local_compress=True)
    yield c
    c.destroy()


@pytest.fixture(scope="session")
def gloo(mpi):
    """torch.distributed with gloo over 127.0.0.1, on a port rank 0 picks and MPI broadcasts."""
    import socket

    import torch.distributed as dist

    port = None
    if mpi.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = mpi.bcast(port, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=mpi.rank, world_size=mpi.size)
    yield dist
    dist.destroy_process_group()
