"""The "qccl" torch.distributed backend: init_process_group("qccl") under torchrun's environment
(launch.py --np N), store-based bootstrap, all_reduce/all_gather/broadcast/barrier."""

import pytest
import torch
import torch.distributed as dist

import qccl
import qccl.torch  # noqa: F401 (registers the backend)


@pytest.fixture(scope="module", autouse=True)
def group():
    dist.init_process_group("qccl", init_method="env://")
    yield
    dist.destroy_process_group()


def test_backend_name_rank_size():
    import os

    assert dist.get_backend() == "qccl"
    assert dist.get_rank() == int(os.environ["RANK"]) and dist.get_world_size() == int(os.environ["WORLD_SIZE"])


def test_all_reduce_sum_and_avg():
    n, r = dist.get_world_size(), dist.get_rank()
    x = torch.arange(1000, dtype=torch.float32) + r
    dist.all_reduce(x)
    assert torch.equal(x, torch.arange(1000, dtype=torch.float32) * n + sum(range(n)))
    if hasattr(dist.ReduceOp, "AVG"):
        y = torch.full((10,), float(r))
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        assert torch.equal(y, torch.full((10,), (n - 1) / 2))
    work = dist.all_reduce(torch.ones(3), async_op=True)
    work.wait()


def test_all_gather_and_broadcast():
    n, r = dist.get_world_size(), dist.get_rank()
    outs = [torch.empty(4) for _ in range(n)]
    dist.all_gather(outs, torch.full((4,), float(r)))
    for k in range(n):
        assert torch.equal(outs[k], torch.full((4,), float(k)))
    b = torch.tensor([-0.0, 1.5, float(r)]) if r == n - 1 else torch.zeros(3)
    dist.broadcast(b, src=n - 1)
    assert torch.equal(b, torch.tensor([-0.0, 1.5, float(n - 1)])) and torch.signbit(b[0])
    dist.barrier()


def test_unsupported_op_raises():
    with pytest.raises(Exception, match="SUM and AVG"):
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.MAX)
    with pytest.raises(Exception, match="not contiguous"):
        dist.all_reduce(torch.ones(4, 4).t())
    assert isinstance(qccl.Error("x", 4), RuntimeError)
