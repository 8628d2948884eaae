"""qccl from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) over UCX,
next to a gloo process group on the same MASTER_PORT. Run under launch.py --np N."""

import copy
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import qccl
import qccl.torch as qtorch

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


@pytest.fixture(scope="module")
def comm():
    c = qccl.from_env(timeout=60.0)
    yield c
    c.destroy()


@pytest.fixture(scope="module")
def gloo():
    dist.init_process_group("gloo", init_method="env://")
    yield dist
    dist.destroy_process_group()


def test_rank_and_size_from_env(comm):
    assert (comm.rank, comm.size) == (RANK, WORLD)


def test_allreduce_and_allgather_exact(comm):
    x = np.arange(100003, dtype=np.float32) % 4096 + RANK
    comm.allreduce(x, codec="none")
    expected = (np.arange(100003) % 4096) * WORLD + sum(range(WORLD))
    np.testing.assert_array_equal(x, expected.astype(np.float32))
    g = comm.allgather(torch.full((10,), float(RANK)))
    assert torch.equal(g, torch.arange(WORLD, dtype=torch.float32).repeat_interleave(10).reshape(WORLD, 10))


def test_compressed_results_identical_on_every_rank(comm):
    rng = np.random.default_rng(RANK)
    x = rng.standard_normal(40000).astype(np.float32)
    comm.allreduce(x, codec="onebit", tensor_id=3, algo="sra")
    every = comm.allgather(x, codec="none")
    for r in range(WORLD):
        np.testing.assert_array_equal(every[r], x)


def test_hook_with_none_codec_equals_gloo(gloo, comm):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 4))
    ref, ours = DDP(copy.deepcopy(base)), DDP(copy.deepcopy(base))
    ours.register_comm_hook(qtorch.HookState(comm, codec="none"), qtorch.allreduce_hook)
    g = torch.Generator().manual_seed(RANK)
    x = torch.randint(-3, 4, (16, 32), generator=g).float()
    for m in (ref, ours):
        m(x).sum().backward()
    for a, b in zip(ref.parameters(), ours.parameters()):
        if WORLD == 2:
            assert torch.equal(a.grad, b.grad)  # a + b rounds the same in either order
        else:
            assert torch.allclose(a.grad, b.grad, rtol=1e-6, atol=1e-7)


def test_second_communicator_on_its_own_port(comm):
    port = int(os.environ["MASTER_PORT"]) + 2
    with qccl.from_env(port=port, timeout=60.0) as other:
        x = np.ones(10, np.float32)
        other.allreduce(x)
        np.testing.assert_array_equal(x, np.full(10, WORLD, np.float32))
    assert not other.alive


def test_missing_environment_raises(monkeypatch):
    monkeypatch.delenv("RANK")
    with pytest.raises(qccl.Error, match="RANK") as e:
        qccl.from_env()
    assert e.value.code == 4
    monkeypatch.setenv("RANK", "zero")
    with pytest.raises(qccl.Error, match="not an integer"):
        qccl.from_env()
