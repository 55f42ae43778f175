"""Graph convolution of Kipf & Welling (https://arxiv.org/abs/1609.02907)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gnndist.nn.conv.message_passing import add_bias
from gnndist.sparse_rows import SparseRows


class GCNConv(nn.Module):
    r"""GCN layer: :math:`X' = \hat D^{-1/2} (A + I) \hat D^{-1/2} X W + b`, degrees from the whole graph.

    The linear map runs first, so the halo exchange moves ``out_channels``-wide rows. With
    ``aggregate_first`` (for a first layer, whose input needs no gradient) the rows are
    aggregated first and then mapped: ``(A X) W`` equals ``A (X W)``, and when ``X`` needs no
    gradient that SpMM has no backward (no ``A^T`` product, no reverse exchange), so it costs
    ``in_channels`` per row instead of ``2 * out_channels`` (:func:`gnndist.cost.aggregate_first`
    decides); mostly-zero features (:class:`~gnndist.sparse_rows.SparseRows`) are always mapped first, in
    ``O(nnz x out_channels)``. Parameter names and initialisation follow ``torch_geometric.nn.GCNConv``
    (``lin.weight`` ``[out, in]``, ``bias`` ``[out]``).

    Args:
        in_channels: input width.
        out_channels: output width.
        bias: add a learnable bias (default ``True``).
        aggregate_first: aggregate, then map (default ``False``).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True, aggregate_first: bool = False):
        super().__init__()
        self.aggregate_first = aggregate_first
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.tag = "gcn"
        nn.init.xavier_uniform_(self.lin.weight)

    def forward(self, graph, x: Tensor) -> Tensor:
        if self.aggregate_first and not isinstance(x, SparseRows):  # sparse features: mapping is O(nnz x out)
            out = self.lin(graph.spmm(x, weight="gcn", tag=self.tag))  # [n_owned, out]
        else:
            out = graph.spmm(self.lin(x), weight="gcn", tag=self.tag)  # [n_owned, out]
        return add_bias(out, self.bias)
