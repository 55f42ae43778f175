"""The plain GNN: convolutions of one layer type from a depth, with dropout, norm and ReLU between them."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.cost import aggregate_first
from gnndist.nn.conv.gat_conv import GATConv
from gnndist.nn.conv.gcn_conv import GCNConv
from gnndist.nn.conv.sage_conv import SAGEConv
from gnndist.nn.norm import apply_norm, make_norm

LINEAR_FIRST = (GCNConv, SAGEConv, GATConv)  # layers whose input meets only linear maps (SparseRows: nn.Linear, @)
ConvFactory = Callable[[int, int], nn.Module]  # (in_channels, out_channels) -> a layer taking (graph, x)


class GNN(nn.Module):
    """``layers`` convolutions with dropout before each and norm + ReLU between them.

    Args:
        conv: factory ``(in_channels, out_channels) -> layer``; layers take ``(graph, x)``.
        in_channels: input width.
        hidden: hidden width.
        out_channels: output width.
        layers: depth (>= 1).
        dropout: dropout probability; masks come from ``graph.dropout`` (partition-invariant).
        norm: ``"none"``, ``"batch"`` (global statistics) or ``"layer"``.
        bias: ``False`` builds every layer with ``bias=False`` (``conv`` must take it).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, conv: ConvFactory, in_channels: int, hidden: int, out_channels: int,
                 layers: int = 2, dropout: float = 0.5, norm: str = "none", bias: bool = True):
        super().__init__()
        widths = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        kw = {} if bias else {"bias": False}
        self.convs = nn.ModuleList(conv(a, b, **kw) for a, b in zip(widths[:-1], widths[1:]))
        for i, c in enumerate(self.convs):
            c.tag = f"layer{i}"
        if isinstance(self.convs[0], GCNConv):  # its input, the features, needs no gradient
            self.convs[0].aggregate_first = aggregate_first(in_channels, widths[1])
        # a first layer whose input only meets linear maps takes mostly-zero features as SparseRows
        self.sparse_input = isinstance(self.convs[0], LINEAR_FIRST)
        self.norms = nn.ModuleList(make_norm(norm, hidden) for _ in range(layers - 1))
        self.dropout = dropout

    def forward(self, graph, x: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = graph.dropout(x, self.dropout, key=i, training=self.training, sparse=i == 0 and self.sparse_input)
            x = conv(graph, x)
            if i < len(self.convs) - 1:
                x = F.relu(apply_norm(self.norms[i], graph, x))
        return x
