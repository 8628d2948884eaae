"""qccl collectives on numpy arrays and torch tensors over an mpi4py communicator (mpirun -np N)."""

import numpy as np
import pytest
import torch

import qccl

SIZES = [0, 1, 7, 1000, 70003]


def ramp(n, rank, dtype=np.float32):
    # value = i * stride + rank: integers well inside float32's exact range, so sums are exact.
    return ((np.arange(n) % 1024) * 8 + rank).astype(dtype)


def exact_sum(n, size):
    return sum(ramp(n, r, np.float64) for r in range(size))


def test_rank_and_size(comm, mpi):
    assert (comm.rank, comm.size) == (mpi.rank, mpi.size)
    assert repr(comm) == f"<qccl.Communicator rank {mpi.rank} of {mpi.size}>"


@pytest.mark.parametrize("n", SIZES)
def test_allreduce_numpy_sum_exact(comm, n):
    x = ramp(n, comm.rank)
    out = comm.allreduce(x, codec="none", tensor_id=1)
    assert out is x  # in place, the caller's own buffer
    np.testing.assert_array_equal(x, exact_sum(n, comm.size).astype(np.float32))


@pytest.mark.parametrize("n", SIZES)
def test_allreduce_torch_avg_out_of_place(comm, n):
    x = torch.from_numpy(ramp(n, comm.rank))
    before = x.clone()
    out = torch.empty_like(x)
    assert comm.allreduce(x, out, op="avg", codec="none") is out
    assert torch.equal(x, before)
    expected = torch.from_numpy((exact_sum(n, comm.size) / comm.size).astype(np.float32))
    assert torch.equal(out, expected)


def test_allreduce_requires_grad_tensor_in_place(comm):
    w = torch.ones(100, requires_grad=True)
    comm.allreduce(w, codec="none")
    assert torch.equal(w.detach(), torch.full((100,), float(comm.size)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_allreduce_half_inputs(comm, dtype):
    x = torch.full((513,), 1.5, dtype=dtype) + comm.rank
    comm.allreduce(x, codec="none")
    expected = sum(1.5 + r for r in range(comm.size))
    assert x.dtype == dtype and torch.equal(x, torch.full((513,), expected, dtype=dtype))


def test_allreduce_float16_numpy(comm):
    x = np.full(33, 2.0, dtype=np.float16)
    comm.allreduce(x, op="avg")
    np.testing.assert_array_equal(x, np.full(33, 2.0, dtype=np.float16))


def test_results_bit_identical_across_ranks(comm, mpi):
    rng = np.random.default_rng(100 + comm.rank)
    for codec in ("none", "onebit", "maxmin"):
        x = rng.standard_normal(50000).astype(np.float32)
        algo = "sra" if codec != "none" else None
        comm.allreduce(x, codec=codec, bits=4 if codec == "maxmin" else None, tensor_id=2, algo=algo)
        every = mpi.allgather(x.tobytes())
        assert all(b == every[0] for b in every), codec


# Bounds per element of one compressed allreduce of standard normal inputs, as a fraction of
# max |exact sum| (fp16/bf16: relative rounding; maxmin: half a level per quantization stage).
LOSSY = [("fp16", None, 2e-3), ("bf16", None, 1.6e-2), ("maxmin", 8, 0.05), ("maxmin", 4, 0.6), ("dyn8", None, 0.2)]


@pytest.mark.parametrize("codec,bits,bound", LOSSY)
def test_lossy_allreduce_within_codec_error(comm, mpi, codec, bits, bound):
    rng = np.random.default_rng(7 + comm.rank)
    x = rng.standard_normal(100000).astype(np.float32)
    exact = np.empty_like(x)
    from mpi4py import MPI

    mpi.Allreduce(x, exact, op=MPI.SUM)
    comm.allreduce(x, codec=codec, bits=bits, tensor_id=3, algo=None if codec in ("fp16", "bf16") else "sra")
    err = np.abs(x.astype(np.float64) - exact)
    scale = np.abs(exact).max()
    assert err.max() <= bound * scale, (codec, bits, err.max() / scale)
    assert err.max() > 0  # a lossy codec really ran


def test_onebit_preserves_sum_and_error_feedback_tracks_exact(comm, mpi):
    from mpi4py import MPI

    rng = np.random.default_rng(11 + comm.rank)
    g = rng.standard_normal(65536).astype(np.float32)
    exact = np.empty_like(g)
    mpi.Allreduce(g, exact, op=MPI.SUM)
    total = np.zeros(g.size, np.float64)
    steps = 40
    for step in range(steps):
        y = g.copy()
        comm.allreduce(y, codec="onebit", tensor_id=4, algo="sra")
        if step == 0:
            one_step = np.linalg.norm(y - exact) / np.linalg.norm(exact)
            # onebit keeps each bucket's sum: pos * #(v >= 0) + neg * #(v < 0) = sum(v)
            assert abs(y.sum(dtype=np.float64) - exact.sum(dtype=np.float64)) < 1e-3 * np.abs(exact).sum()
        total += y
    drift = np.linalg.norm(total - steps * exact.astype(np.float64)) / (steps * np.linalg.norm(exact))
    # With error feedback the residual carries what was lost, so the running mean converges to the
    # exact result (about as 1/sqrt(steps) for sign codecs); without it, every step repeats the
    # one-step error and the drift would stay at one_step.
    assert drift < one_step / 3, (drift, one_step)
    assert comm.stats()["residual_bytes"] > 0
    comm.release(4)


@pytest.mark.parametrize("n", [0, 5, 4099])
def test_allgather_exact(comm, n):
    x = torch.from_numpy(ramp(n, comm.rank))
    out = comm.allgather(x, codec="none")
    assert tuple(out.shape) == (comm.size, n)
    for r in range(comm.size):
        assert torch.equal(out[r], torch.from_numpy(ramp(n, r)))
    flat = np.empty(comm.size * n, np.float32)
    comm.allgather(x.numpy(), flat)
    np.testing.assert_array_equal(flat, out.numpy().reshape(-1))


def test_stats_count_calls_and_compression(comm):
    x = np.ones(1 << 18, np.float32)
    s0 = comm.stats()
    comm.allreduce(x, codec="none", tensor_id=5, algo="ring")  # qccl's own ring, so qccl counts the bytes
    s1 = comm.stats()
    comm.allreduce(x, codec="onebit", tensor_id=5, algo="sra")
    s2 = comm.stats()
    assert s1["calls"] == s0["calls"] + 1 and s2["calls"] == s1["calls"] + 1
    fp32_bytes = s1["bytes_sent"] - s0["bytes_sent"]
    onebit_bytes = s2["bytes_sent"] - s1["bytes_sent"]
    if comm.size > 1:
        assert 0 < onebit_bytes * 20 < fp32_bytes
        # The ring's 2 (n - 1) steps send at least one message each.
        assert s1["messages_sent"] - s0["messages_sent"] >= 2 * (comm.size - 1)
    # Every rank of this test runs on one host (QCCL_HOST_ID unset): nothing left it.
    assert s2["bytes_sent_inter_host"] == 0


def test_bad_inputs_raise(comm):
    with pytest.raises(qccl.Error, match="not contiguous") as e:
        comm.allreduce(torch.zeros(8, 8)[:, 0])
    assert e.value.code == 4 and e.value.name == "qcclInvalidArgument"
    with pytest.raises(qccl.Error, match="dtype"):
        comm.allreduce(torch.zeros(8, dtype=torch.int64))
    with pytest.raises(qccl.Error, match="dtype"):
        comm.allreduce(np.zeros(8, np.float64))
    with pytest.raises(qccl.Error, match="elements"):
        comm.allreduce(np.zeros(8, np.float32), np.zeros(9, np.float32))
    with pytest.raises(qccl.Error, match="dtypes differ"):
        comm.allreduce(torch.zeros(8), torch.zeros(8, dtype=torch.float16))
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    with pytest.raises(qccl.Error, match="read-only"):
        comm.allreduce(ro)
    with pytest.raises(qccl.Error, match="codec"):
        comm.allreduce(np.zeros(8, np.float32), codec="gzip")
    with pytest.raises(qccl.Error, match="op"):
        comm.allreduce(np.zeros(8, np.float32), op="max")
    with pytest.raises(TypeError):
        comm.allreduce([1.0, 2.0])
    with pytest.raises(qccl.Error, match="size"):
        comm.allgather(np.zeros(8, np.float32), np.zeros(8 * comm.size + 1, np.float32))


def test_mismatched_counts_across_ranks_raise_on_every_rank(mpi):
    if mpi.size < 2:
        pytest.skip("needs 2 ranks")
    c = qccl.from_mpi(mpi, timeout=20.0)
    try:
        x = np.ones(1000 + (mpi.rank == 0), np.float32)
        with pytest.raises(qccl.Error) as e:
            c.allreduce(x, codec="none")
        assert e.value.code in (8, 6, 10), e.value  # qcclMismatch, or a peer's report of it
        # a failed communicator fails fast afterwards
        with pytest.raises(qccl.Error):
            c.allreduce(np.ones(10, np.float32))
    finally:
        c.destroy()
    mpi.Barrier()


def test_destroyed_communicator_raises(mpi):
    c = qccl.from_mpi(mpi)
    c.destroy()
    c.destroy()  # twice is fine
    with pytest.raises(qccl.Error, match="destroyed"):
        c.allreduce(np.zeros(4, np.float32))


def test_one_host_sums_lossy_codecs_exactly(mpi):
    # mpirun's ranks share this host: auto sums host buffers exactly in the shared segment whatever
    # codec they ask for (copying fp32 there costs less than any codec); local_compress=True
    # compresses as asked. Integer-valued inputs make the exact sum independent of the order.
    if mpi.size < 2:
        pytest.skip("needs 2 ranks")
    x = ((np.arange(100000) % 1001) - 500 + mpi.rank).astype(np.float32)
    exact = sum(((np.arange(100000) % 1001) - 500 + r) for r in range(mpi.size)).astype(np.float32)
    for local_compress in (False, True):
        c = qccl.from_mpi(mpi, timeout=60.0, local_compress=local_compress)
        try:
            y = x.copy()
            c.allreduce(y, codec="onebit", tensor_id=7)
            if local_compress:
                assert c.last_algo() in ("sra", "allgather")
                assert not np.array_equal(y, exact)
            else:
                assert c.last_algo() == "shm"
                np.testing.assert_array_equal(y, exact)
                assert c.stats()["tensors"] == 0
        finally:
            c.destroy()
    mpi.Barrier()
