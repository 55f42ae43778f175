"""Generalised graph convolution of DeeperGCN (Li et al., https://arxiv.org/abs/2006.07739)."""

from __future__ import annotations

from itertools import pairwise

import torch
from torch import Tensor, nn

from gnndist.nn.conv.message_passing import MessagePassing
from gnndist.nn.norm import apply_norm, make_norm


class SoftmaxAggregation(nn.Module):
    r"""Holds the inverse temperature :math:`t` of the softmax aggregation (learnable or fixed).

    Named like ``torch_geometric.nn.aggr.SoftmaxAggregation`` (``aggr_module.t`` ``[1]``).
    """

    def __init__(self, t: float = 1.0, learn: bool = False):
        super().__init__()
        self.learn = learn
        if learn:
            self.t = nn.Parameter(torch.tensor([t]))
        else:
            self.t = t


class GENConv(MessagePassing):
    r"""GENConv: :math:`x'_i = \mathrm{MLP}\big(W_{dst} x_i + \sum_j \mathrm{softmax}_j(t\, m_{ij})\, m_{ij}\big)`,
    :math:`m_{ij} = \mathrm{ReLU}(W_{src} x_j) + \epsilon`.

    The softmax runs per channel over each owned row's edges, so it is exact across
    partitions. ``norm="batch"`` uses :class:`~gnndist.nn.DistBatchNorm` (statistics over
    every node of the graph, summed over ranks), which equals ``torch.nn.BatchNorm1d`` on
    one process. Defaults and parameter names follow ``torch_geometric.nn.GENConv`` with
    ``aggr="softmax"`` (``aggr_module.t``, ``lin_src``, ``lin_dst``, ``mlp.<i>`` at PyG's
    indices); message norm and edge features are not supported.

    Args:
        in_channels: input width.
        out_channels: output width.
        t: initial inverse temperature (default ``1.0``).
        learn_t: learn ``t`` (default ``False``).
        norm: ``"batch"`` (default), ``"layer"`` (per node) or ``None`` inside the MLP.
        num_layers: MLP depth (default ``2``).
        expansion: MLP hidden width factor (default ``2``).
        eps: added to every message (default ``1e-7``).
        bias: biases of the linear maps (default ``False``).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    aggr = "softmax"

    def __init__(self, in_channels: int, out_channels: int, t: float = 1.0, learn_t: bool = False,
                 norm: str | None = "batch", num_layers: int = 2, expansion: int = 2, eps: float = 1e-7,
                 bias: bool = False):
        super().__init__()
        self.in_channels, self.out_channels, self.eps = in_channels, out_channels, eps
        self.tag = "gen"
        self.aggr_module = SoftmaxAggregation(t, learn_t)
        mapped = in_channels != out_channels  # PyG's lin_src and lin_dst exist only then
        self.lin_src = nn.Linear(in_channels, out_channels, bias=bias) if mapped else None
        self.lin_dst = nn.Linear(in_channels, out_channels, bias=bias) if mapped else None
        widths = [out_channels] + [out_channels * expansion] * (num_layers - 1) + [out_channels]
        mlp: list[nn.Module] = []
        for i, (a, b) in enumerate(pairwise(widths)):
            mlp.append(nn.Linear(a, b, bias=bias))
            if i < num_layers - 1:  # PyG's MLP: linear, norm, act, dropout; plain last layer
                mlp += ([make_norm(norm, b)] if norm not in (None, "none") else []) + [nn.ReLU(), nn.Identity()]
        self.mlp = nn.Sequential(*mlp)

    def message(self, x_j: Tensor) -> Tensor:
        return x_j.relu() + self.eps

    def forward(self, graph, x: Tensor) -> Tensor:
        x_src = self.lin_src(x) if self.lin_src is not None else x  # [n_owned, out]
        out = self.propagate(graph, x_src, t=self.aggr_module.t)  # [n_owned, out]
        out = out + (self.lin_dst(x) if self.lin_dst is not None else x)
        for m in self.mlp:  # a DistBatchNorm gets the grid: statistics over every node
            out = apply_norm(m, graph, out)
        return out

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, aggr=softmax"
