"""A torch.distributed backend named "qccl" (registered when qccl.torch is imported).

    import qccl.torch
    torch.distributed.init_process_group("qccl")          # env:// under torchrun, or any init_method

Ranks meet through torch's store: rank 0 makes a unique id (qcclGetUniqueId), publishes it in the
store, and every rank joins the UCX communicator with it. Supported: all_reduce (SUM, AVG),
all_gather, broadcast and barrier, on CPU float32/float16/bfloat16 tensors, uncompressed (exact up
to the summation order). Compression stays with the DDP hook, which knows which tensors may be
quantized. Everything else raises a clear error.
"""

from datetime import timedelta

import torch
import torch.distributed as dist

from ._core import INVALID_ARGUMENT, Error, get_unique_id, init_rank

__all__ = ["ProcessGroupQccl"]

_c10d = torch._C._distributed_c10d


def _done(result) -> "_c10d.Work":
    fut = torch.futures.Future()
    fut.set_result(result)
    return _c10d._create_work_from_future(fut)


class ProcessGroupQccl(dist.ProcessGroup):
    """torch.distributed process group over a qccl communicator (UCX transport)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        key = "qccl/unique_id"
        if rank == 0:
            store.set(key, get_unique_id())
        uid = store.get(key)  # waits for rank 0, up to the store's timeout
        self.comm = init_rank(size, bytes(uid), rank, timeout=timeout.total_seconds())

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return "qccl"

    def allreduce(self, tensors, opts=None):
        op = getattr(opts, "reduceOp", dist.ReduceOp.SUM)
        if op == dist.ReduceOp.SUM:
            name = "sum"
        elif hasattr(dist.ReduceOp, "AVG") and op == dist.ReduceOp.AVG:
            name = "avg"
        else:
            raise Error(f"qccl backend: all_reduce supports SUM and AVG, not {op}", INVALID_ARGUMENT)
        for t in tensors:
            self.comm.allreduce(t, op=name, codec="none")
        return _done(tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        for outs, t in zip(output_tensors, input_tensors):
            if len(outs) != self.size():
                raise Error(f"qccl backend: all_gather needs {self.size()} output tensors, got {len(outs)}",
                            INVALID_ARGUMENT)
            for o in outs:
                if o.shape != t.shape or o.dtype != t.dtype:
                    raise Error("qccl backend: all_gather outputs must match the input's shape and dtype",
                                INVALID_ARGUMENT)
            gathered = self.comm.allgather(t.contiguous(), codec="none")
            for r, o in enumerate(outs):
                o.copy_(gathered[r])
        return _done(output_tensors)

    def broadcast(self, tensors, opts=None):
        root = getattr(opts, "rootRank", 0)
        for t in tensors:
            # An allgather and the root's slot: exact, where a sum with zeros would flip -0.0.
            gathered = self.comm.allgather(t.contiguous(), codec="none")
            t.copy_(gathered[root])
        return _done(tensors)

    def barrier(self, opts=None):
        self.comm.allreduce(torch.zeros(1), codec="none")
        return _done([])


def _create(store, rank, size, timeout):
    return ProcessGroupQccl(store, rank, size, timeout)


def register() -> None:
    """Registers the backend under the name "qccl" (once per process). It handles CPU tensors;
    torch 2.x, which asks which devices a backend serves, is told so (torch 1.13 has no such
    argument)."""
    if hasattr(dist.Backend, "QCCL"):
        return
    import inspect

    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        dist.Backend.register_backend("qccl", _create, devices=["cpu"])
    else:
        dist.Backend.register_backend("qccl", _create)
