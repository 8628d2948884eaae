"""qccl in one process: configuration, argument checks, and the loopback communicator driven by
one Python thread per rank (the extension releases the GIL inside every collective)."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import qccl


def run_ranks(comms, fn):
    """Runs fn(rank, comm) on one thread per communicator; re-raises the first failure."""
    results, errors = [None] * len(comms), []

    def body(r):
        try:
            results[r] = fn(r, comms[r])
        except BaseException as e:  # reported below, on the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a rank did not finish"
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_loopback_allreduce_and_allgather(nranks):
    comms = qccl.loopback(nranks)

    def body(rank, c):
        x = np.arange(1001, dtype=np.float32) * 4 + rank
        c.allreduce(x)
        t = torch.full((7,), float(rank + 1), dtype=torch.bfloat16)
        c.allreduce(t, op="avg")
        g = c.allgather(np.full(3, rank, np.float32))
        return x, t, g

    expected_x = (np.arange(1001) * 4 * nranks + sum(range(nranks))).astype(np.float32)
    for x, t, g in run_ranks(comms, body):
        np.testing.assert_array_equal(x, expected_x)
        assert torch.equal(t, torch.full((7,), (nranks + 1) / 2, dtype=torch.bfloat16))
        np.testing.assert_array_equal(g, np.repeat(np.arange(nranks, dtype=np.float32), 3).reshape(nranks, 3))
    for c in comms:
        assert c.stats()["calls"] == 3
        c.destroy()


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_loopback_reduce_scatter(nranks):
    comms = qccl.loopback(nranks, min_compress_bytes=0)

    def body(rank, c):
        x = (np.arange(nranks * 1001, dtype=np.float32) * 4 + rank).reshape(nranks, 1001)
        s = c.reduce_scatter(x)
        t = torch.full((nranks * 5,), float(rank + 1), dtype=torch.bfloat16)
        a = c.reduce_scatter(t, op="avg")
        # onebit with error feedback: the mean of many calls on a constant input converges.
        g = np.sin(np.arange(nranks * 4096, dtype=np.float32) * 0.37 + rank).astype(np.float32)
        mean = np.zeros(4096)
        for _ in range(32):
            mean += c.reduce_scatter(g, codec="onebit", tensor_id=5) / 32.0
        return s, a, mean

    total = sum(range(nranks))
    for rank, (s, a, mean) in enumerate(run_ranks(comms, body)):
        expected = (np.arange(rank * 1001, (rank + 1) * 1001) * 4 * nranks + total).astype(np.float32)
        assert s.shape == (1001,)
        np.testing.assert_array_equal(s, expected)
        assert torch.equal(a, torch.full((5,), (nranks + 1) / 2, dtype=torch.bfloat16))
        idx = np.arange(rank * 4096, (rank + 1) * 4096, dtype=np.float32)
        exact = sum(np.sin(idx * np.float32(0.37) + r) for r in range(nranks))
        assert np.linalg.norm(mean - exact) / np.linalg.norm(exact) < 0.1
    with pytest.raises(qccl.Error):
        comms[0].reduce_scatter(np.zeros(nranks * 3, np.float32), out=np.zeros(4, np.float32))
    for c in comms:
        c.destroy()


def test_loopback_lossy_is_identical_across_ranks():
    comms = qccl.loopback(4, codec="maxmin", bits=4, min_compress_bytes=0)

    def body(rank, c):
        x = np.random.default_rng(rank).standard_normal(10000).astype(np.float32)
        c.allreduce(x, tensor_id=1)
        return x

    out = run_ranks(comms, body)
    for x in out[1:]:
        np.testing.assert_array_equal(x, out[0])
    for c in comms:
        c.destroy()


def test_error_type_and_codes():
    e = qccl.Error("boom", 8)
    assert isinstance(e, RuntimeError) and e.code == 8 and e.name == "qcclMismatch" and str(e) == "boom"
    assert qccl.library_version() == 200  # 0.2.0


def test_config_overrides_and_environment():
    [c] = qccl.loopback(1, codec="onebit", bits=None, timeout=5.0)
    c.destroy()
    with pytest.raises(qccl.Error, match="unknown config field"):
        qccl.loopback(1, codek="onebit")
    with pytest.raises(qccl.Error, match="bucket") as e:
        qccl.loopback(2, bucket=100)
    assert e.value.code == 4
    [c] = qccl.loopback(1, intra_codec="bf16")
    c.destroy()
    with pytest.raises(qccl.Error, match="intraCodec") as e:
        qccl.loopback(1, intra_codec="onebit")
    assert e.value.code == 4
    assert qccl.config_defaults()["intra_codec"] == qccl.CODECS["none"]
    assert qccl.config_defaults()["auto_hier"] is True
    assert qccl.config_defaults()["auto_ring"] is True
    [c] = qccl.loopback(1, auto_ring=False)  # the key is known (MPI's race: tests/collective/mpi_coll_test.cc)
    c.destroy()
    comms = qccl.loopback(3, auto_hier=False)
    assert comms[0].last_algo() == "auto"
    out = [None] * 3

    def body(r, comm):
        x = np.full(1000, float(r + 1), dtype=np.float32)
        comm.allreduce(x, op="sum", tensor_id=0, codec="none")
        out[r] = (comm.last_algo(), x[0])

    run_ranks(comms, body)
    # Loopback ranks share one host: the shared-memory sum; without it (shm=False) there is no MPI
    # library underneath, so the fp32 ring.
    assert out == [("shm", 6.0)] * 3
    assert qccl.config_defaults()["shm"] is True
    assert qccl.config_defaults()["local_compress"] is False
    comms = qccl.loopback(3, shm=False)
    out = [None] * 3
    run_ranks(comms, body)
    assert out == [("ring", 6.0)] * 3
    for c in comms:
        c.destroy()
    # QCCL_* variables are read when a configuration is made: check them in a fresh interpreter.
    code = "import qccl; d = qccl.config_defaults(); print(d['codec'], d['bits'])"
    env = dict(os.environ, QCCL_CODEC="maxmin", QCCL_BITS="8")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(qccl.CODECS["maxmin"]), "8"]
    env["QCCL_CODEC"] = "zip"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "QCCL_CODEC" in bad.stderr and "qccl.Error" in bad.stderr


def test_bad_arguments_raise():
    [c] = qccl.loopback(1)
    with pytest.raises(qccl.Error, match="not contiguous"):
        c.allreduce(torch.zeros(4, 4).t())
    with pytest.raises(qccl.Error, match="dtype"):
        c.allreduce(torch.zeros(4, dtype=torch.float64))
    with pytest.raises(qccl.Error, match="dtype"):
        c.allreduce(np.zeros(4, np.int32))
    with pytest.raises(qccl.Error, match="elements"):
        c.allreduce(torch.zeros(4), torch.zeros(5))
    with pytest.raises(qccl.Error, match="algorithm"):
        c.allreduce(torch.zeros(4), algo="tree")
    with pytest.raises(qccl.Error, match="bits"):
        c.allreduce(torch.zeros(4), codec="maxmin", bits=3)
    with pytest.raises(TypeError):
        c.allreduce("not an array")
    with pytest.raises(TypeError):
        qccl.from_mpi(comm=42)
    c.destroy()
    with pytest.raises(qccl.Error, match="destroyed"):
        c.stats()


def test_bootstrap_arguments_raise():
    with pytest.raises(qccl.Error, match="port"):
        qccl.unique_id_from_address("127.0.0.1", 0)
    with pytest.raises(qccl.Error, match="outside"):
        qccl.init_rank(2, b"\0" * 128, 5)
    with pytest.raises(qccl.Error, match="unique id") as e:
        qccl.init_rank(2, b"\0" * 128, 0, timeout=5.0)
    assert e.value.code == 4
    with pytest.raises(qccl.Error, match="128 bytes"):
        qccl.init_rank(2, b"short", 0)
    with pytest.raises(TypeError):
        qccl.init_rank(2, "not bytes", 0)


def test_lossy_codec_needs_a_tensor_id():
    comms = qccl.loopback(2, codec="onebit", min_compress_bytes=0)

    def body(rank, c):
        x = np.ones(4096, np.float32)
        with pytest.raises(qccl.Error) as info:
            c.allreduce(x)
        assert info.value.name == "qcclInvalidUsage"
        assert "tensor id" in str(info.value)
        c.allreduce(x, tensor_id=3)  # the communicator is still usable
        return x

    for x in run_ranks(comms, body):
        assert np.all(np.isfinite(x))
    for c in comms:
        c.destroy()


def test_tensor_state_save_load_scale():
    # loopback ranks share one host: local_compress makes auto compress as asked
    comms = qccl.loopback(3, codec="signscale", min_compress_bytes=0, local_compress=True)

    def body(rank, c):
        x = np.sin(np.arange(5000, dtype=np.float32) * 0.01 + rank)
        c.allreduce(x.copy(), tensor_id=11)
        rec = c.save_tensor_state(11)
        assert len(rec) > 5000 * 4
        assert c.save_tensor_state(12) == b""
        assert c.scale_tensor_state(11, 0.5)
        assert not c.scale_tensor_state(12, 0.5)
        assert c.save_tensor_state(11) != rec
        c.load_tensor_state(11, rec)
        assert c.save_tensor_state(11) == rec
        with pytest.raises(qccl.Error) as info:
            c.load_tensor_state(11, b"\x00" * len(rec))
        assert info.value.name == "qcclMalformed"
        assert c.stats()["tensors"] == 1

    run_ranks(comms, body)
    for c in comms:
        c.destroy()


@pytest.mark.parametrize("how", ["interrupt", "abort"])
def test_watchdog_ends_a_stuck_call(how):
    """Rank 1 never joins; another thread interrupts or aborts rank 0's communicator while its
    collective is stuck: the call raises qcclCommFailed at once, long before its 60 s timeout."""
    comms = qccl.loopback(2, timeout=60)
    outcome = {}

    def stuck():
        x = np.ones(100000, np.float32)
        try:
            comms[0].allreduce(x)
        except qccl.Error as e:
            outcome["name"] = e.name

    t = threading.Thread(target=stuck)
    t.start()
    t.join(0.3)
    assert t.is_alive()
    getattr(comms[0], how)()
    t.join(20)
    assert not t.is_alive(), "the stuck call did not return"
    assert outcome.get("name") == "qcclCommFailed"
    comms[0].destroy()  # after abort: a no-op; after interrupt: frees it
    assert not comms[0].alive
    comms[1].destroy()


def test_importing_the_torch_integration_warns_nothing():
    # torch 2.x warned "Device capability of qccl unspecified" when a backend was registered without
    # its devices. torch is imported first, so only what qccl's import does is recorded.
    code = (
        "import warnings, torch, torch.distributed\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import qccl.torch\n"
        "assert hasattr(torch.distributed.Backend, 'QCCL'), 'the qccl backend is not registered'\n"
        "print(torch.__version__, [f'{x.category.__name__}: {x.message}' for x in w])\n"
        "assert not w\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
