"""Collectives on host copies: where ranks share a GPU under gloo, :class:`~gnndist.dist.grid.ProcessGrid` stages
each collective's tensors through host memory (:func:`to_host`) and copies the results back on ``wait()``
(:class:`StagedWork`).
"""

from __future__ import annotations

import torch
from torch import Tensor


def to_host(t: Tensor, copy: bool = True) -> Tensor:
    """A host tensor for staging ``t``: a copy of it, or (``copy=False``, an output) an empty one of its shape."""
    if copy:
        return t.detach().to("cpu", copy=True)
    return torch.empty(t.shape, dtype=t.dtype, device="cpu")


class StagedWork:
    """A collective on host copies: ``wait()`` finishes it, then copies each host result into its device tensor.

    Args:
        work: the collective's work (``None`` if it already finished).
        pairs: ``(device tensor, host tensor)`` of every tensor the collective writes.
    """

    def __init__(self, work, pairs: list[tuple[Tensor, Tensor]]):
        self.work, self.pairs = work, pairs

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()
            self.work = None
        for dst, src in self.pairs:
            dst.copy_(src)
        self.pairs = []
