"""Normalisation layers that are exact across partitions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from gnndist.comm import AllReduceSum
from gnndist.grid import current

_FROZEN = [0]  # > 0 while a forward is being recomputed: running statistics are left alone


@contextmanager
def frozen_statistics() -> Iterator[None]:
    """Inside, :class:`DistBatchNorm` normalises as usual but does not update its running statistics.

    Recomputation (``--recompute``, reversible blocks) repeats a forward that already
    updated them once; a second update would make evaluation depend on recomputation.
    """
    _FROZEN[0] += 1
    try:
        yield
    finally:
        _FROZEN[0] -= 1


class DistBatchNorm(nn.Module):
    """Batch norm over all nodes of the graph: statistics are global sums over ranks.

    Training mode normalises with the (biased) global batch variance, like
    ``torch.nn.BatchNorm1d``; running statistics use the unbiased variance.

    Args:
        channels: feature width.
        eps: added to the variance (default ``1e-5``).
        momentum: running-statistics momentum (default ``0.1``).

    Shapes:
        x ``[n_owned, channels]``
    """

    def __init__(self, channels: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: Tensor, grid=None) -> Tensor:
        """Normalise ``x``; the statistics are summed over ``grid``'s ``world`` axis (every node once).

        Every strategy keeps the 1D row layout between layers, so each node is a row of
        exactly one rank and the world sum counts it once. Without ``grid`` (a layer that
        calls ``norm(x)``) the sum runs over the grid :func:`gnndist.grid.init` built, if any.
        """
        if self.training:
            stats = torch.cat([x.sum(0), (x * x).sum(0), x.new_tensor([x.shape[0]])])
            grid = grid if grid is not None else current()
            if grid.distributed:
                stats = AllReduceSum.apply(stats, grid, "world")  # [2C + 1] global sums
            c = x.shape[1]
            n = stats[-1]
            mean = stats[:c] / n
            var = (stats[c : 2 * c] / n - mean * mean).clamp(min=0)
            if not _FROZEN[0]:
                with torch.no_grad():
                    unbiased = var * n / (n - 1).clamp(min=1)
                    self.running_mean.lerp_(mean.detach(), self.momentum)
                    self.running_var.lerp_(unbiased.detach(), self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


def apply_norm(norm: nn.Module, graph, x: Tensor) -> Tensor:
    """``norm(x)``, passing the graph's grid to a :class:`DistBatchNorm` (global statistics)."""
    return norm(x, graph.grid) if isinstance(norm, DistBatchNorm) else norm(x)


def make_norm(norm: str, channels: int) -> nn.Module:
    """The module of ``--norm``: ``"none"`` (identity), ``"batch"`` (:class:`DistBatchNorm`) or ``"layer"``."""
    return {"none": nn.Identity, "batch": DistBatchNorm, "layer": nn.LayerNorm}[norm](channels)
