"""GraphSAGE layer with mean aggregation (https://arxiv.org/abs/1706.02216)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gnndist.nn.conv.message_passing import add_bias
from gnndist.sparse_rows import SparseRows


class SAGEConv(nn.Module):
    r"""SAGE layer: :math:`x'_i = W_l \,\mathrm{mean}_{j \in N(i)} x_j + W_r x_i + b`.

    When ``out_channels < in_channels`` the neighbour transform runs before the mean
    (mean is linear), so the halo exchange moves the narrower rows; so it does for mostly-zero features
    (:class:`~gnndist.sparse_rows.SparseRows`), whose map costs ``O(nnz x out_channels)``. Parameter names follow
    ``torch_geometric.nn.SAGEConv`` (``lin_l`` with bias, ``lin_r`` without).

    Args:
        in_channels: input width.
        out_channels: output width.
        bias: bias of ``lin_l`` (default ``True``).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True):
        super().__init__()
        self.lin_l = nn.Linear(in_channels, out_channels, bias=bias)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False)
        self.tag = "sage"

    def forward(self, graph, x: Tensor) -> Tensor:
        if isinstance(x, SparseRows):  # two SpMMs: one of twice the width was slower (Coauthor CS, h256)
            agg = graph.spmm(x @ self.lin_l.weight.t(), reduce="mean", tag=self.tag)  # [n_owned, out]
            return add_bias(agg, self.lin_l.bias) + self.lin_r(x)
        if self.lin_l.out_features < self.lin_l.in_features:
            # both maps in one product: one pass over x, and one saved x for both weight gradients (a dropout's
            # output is rebuilt once in the backward, not twice: Amazon Photo h64, 78 -> 53 ms a step)
            both = x @ torch.cat([self.lin_l.weight, self.lin_r.weight]).t()  # [n_owned, 2 out]
            neighbours, root = both.split(self.lin_l.out_features, dim=1)  # its backward is one cat
            agg = graph.spmm(neighbours.contiguous(), reduce="mean", tag=self.tag)  # [n_owned, out]
            return add_bias(agg, self.lin_l.bias) + root
        agg = self.lin_l(graph.spmm(x, reduce="mean", tag=self.tag))  # [n_owned, out]
        return agg + self.lin_r(x)
