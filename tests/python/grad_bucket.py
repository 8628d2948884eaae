"""What the DDP hook reads of torch.distributed.GradBucket, for tests that call the hook directly."""

import torch


class Bucket:
    """Bucket `index` of `params`, the step's last when `last`; its buffer is `buf`, or by default
    the parameters' values flattened (a copy)."""

    def __init__(self, index, params, last, buf=None):
        self._index, self._params, self._last = index, list(params), last
        self._buf = buf if buf is not None else torch.cat([p.detach().flatten() for p in self._params]).clone()

    def index(self):
        return self._index

    def buffer(self):
        return self._buf

    def parameters(self):
        return self._params

    def is_last(self):
        return self._last
