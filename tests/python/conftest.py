"""Shared fixtures of the qccl Python tests.

The tests run under real multi-process launches (see CMakeLists.txt here): mpirun for test_mpi.py
and test_torch_hook.py, launch.py (torchrun's environment) for test_env.py, one process for
test_single.py. Every rank runs the same tests in the same order, so collectives line up.

A test that fails on some ranks only breaks that: the ranks that go on to the next test meet the
others on a different collective, and a collective without a timeout (MPI_Comm_dup in from_mpi,
a gloo op) then waits for ever. So under mpirun with more than one rank the first failure ends
the whole job (MPI_Abort) after printing which test failed on which rank, and a per-test watchdog
(QCCL_TEST_HANG_S seconds, default 180; 0 turns it off) dumps every thread's stack and ends a
rank that is stuck anyway, so the log shows where instead of CTest's timeout showing nothing.
"""

import datetime
import faulthandler
import os
import sys

import pytest

HANG_S = float(os.environ.get("QCCL_TEST_HANG_S", "180"))


def _mpi_world():
    """MPI.COMM_WORLD when mpi4py is loaded and MPI is running with more than one rank, else None."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    return mpi.COMM_WORLD if mpi.COMM_WORLD.Get_size() > 1 else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    world = _mpi_world()
    if world is None:
        return
    sys.stdout.flush()
    err = _uncaptured_stderr(item.config)
    err.write(
        f"\n[rank {world.Get_rank()}/{world.Get_size()}] {item.nodeid} FAILED ({report.when});"
        f" the ranks are out of step, so the job ends here.\n{report.longreprtext}\n"
    )
    err.flush()
    world.Abort(1)


_dump_to = []


def _uncaptured_stderr(config):
    """Where the watchdog writes: pytest's saved copy of the stderr it captures (a capture file
    would die with the rank), or the process's own stderr when nothing captures file descriptors."""
    if not _dump_to:
        capman = config.pluginmanager.getplugin("capturemanager")
        fd = getattr(getattr(getattr(capman, "_global_capturing", None), "err", None), "targetfd_save", None)
        _dump_to.append(os.fdopen(os.dup(fd), "w") if isinstance(fd, int) else sys.__stderr__)
    return _dump_to[0]


@pytest.fixture(autouse=True)
def _hang_watchdog(request):
    if HANG_S > 0:
        faulthandler.dump_traceback_later(HANG_S, exit=True, file=_uncaptured_stderr(request.config))
    yield
    if HANG_S > 0:
        faulthandler.cancel_dump_traceback_later()


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
    """torch.distributed with gloo over 127.0.0.1. Rank 0's store listens on a port the OS picks and
    MPI hands it to the others (as examples/python/bench_ddp.py's init_gloo): a port probed free
    and closed first could be taken by another process (any outgoing connection of a test running
    beside this one) before the store binds it, failing rank 0 alone while the others wait."""
    import torch.distributed as dist

    # gloo's default timeout is 30 minutes; a rank left waiting should fail well inside CTest's.
    timeout = datetime.timedelta(seconds=HANG_S or 1800)
    store = port = why = None
    if mpi.rank == 0:
        try:
            store = dist.TCPStore("127.0.0.1", 0, mpi.size, True, timeout=timeout, wait_for_workers=False)
            port = store.port
        except Exception as e:  # noqa: BLE001 (reported on every rank below)
            why = f"rank 0 could not open torch's TCPStore: {e}"
    port, why = mpi.bcast((port, why), root=0)
    if why is not None:
        pytest.fail(why)
    if mpi.rank != 0:
        store = dist.TCPStore("127.0.0.1", port, mpi.size, False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=mpi.rank, world_size=mpi.size, timeout=timeout)
    yield dist
    dist.destroy_process_group()
