"""The single-process PyG GCN that the benchmarks compare gnndist with (same model as gnndist's GNN)."""

from __future__ import annotations

import itertools

import torch.nn.functional as F
from torch import nn


class PygGCN(nn.Module):
    """``layers`` ``torch_geometric.nn.GCNConv``: dropout before each, ReLU between them.

    Shapes:
        x ``[N, in_channels]``, adj ``edge_index [2, E]`` or a sparse ``[N, N]`` -> ``[N, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                 dropout: float = 0.5, cached: bool = True):
        from torch_geometric.nn import GCNConv

        super().__init__()
        widths = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(GCNConv(a, b, cached=cached) for a, b in itertools.pairwise(widths))
        self.dropout = dropout

    def forward(self, x, adj):
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            x = conv(x, adj)  # [N, width]
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x
