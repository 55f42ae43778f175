"""Normalisation layers that are exact across partitions."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gnndist.dist.comm import AllReduceSum


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

    def forward(self, x: Tensor, graph) -> Tensor:
        """Normalise ``x``; the statistics are summed over ``graph.grid``'s ``world`` axis (every node once).

        Every strategy keeps the 1D row layout between layers, so each node is a row of
        exactly one rank and the world sum counts it once. Inside a repeated forward
        (recomputation, reversible blocks: ``graph.context.statistics_frozen``) the running
        statistics are left alone: a second update would make evaluation depend on recomputation.
        Half rows (``--precision bf16|fp16``) are normalised in fp32 (sums of squares of many rows
        overflow fp16 and lose bf16's few bits) and the result is returned in their dtype.
        """
        grid, dtype = graph.grid, x.dtype
        x = x.float() if dtype in (torch.float16, torch.bfloat16) else x  # [n_owned, C]
        if self.training:
            stats = torch.cat([x.sum(0), (x * x).sum(0), x.new_tensor([x.shape[0]])])
            if grid.distributed:
                stats = AllReduceSum.apply(stats, grid, "world")  # [2C + 1] global sums
            c = x.shape[1]
            n = stats[-1]
            mean = stats[:c] / n
            var = (stats[c : 2 * c] / n - mean * mean).clamp(min=0)
            if not graph.context.statistics_frozen:
                with torch.no_grad():
                    unbiased = var * n / (n - 1).clamp(min=1)
                    self.running_mean.lerp_(mean.detach(), self.momentum)
                    self.running_var.lerp_(unbiased.detach(), self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return ((x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias).to(dtype)


def apply_norm(norm: nn.Module, graph, x: Tensor) -> Tensor:
    """``norm(x)``, passing the graph to a :class:`DistBatchNorm` (global statistics)."""
    return norm(x, graph) if isinstance(norm, DistBatchNorm) else norm(x)


def make_norm(norm: str, channels: int) -> nn.Module:
    """The module of ``--norm``: ``"none"`` (identity), ``"batch"`` (:class:`DistBatchNorm`) or ``"layer"``."""
    return {"none": nn.Identity, "batch": DistBatchNorm, "layer": nn.LayerNorm}[norm](channels)
