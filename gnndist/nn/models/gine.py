"""GINE: PyG's GINEConv layers on node and edge features (``--model gine``)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.kernels.csr import rows2d
from gnndist.nn.conv.pyg_adapter import PyGAdapter
from gnndist.nn.norm import apply_norm, make_norm


class GINE(nn.Module):
    """GINEConv layers (Hu et al. 2020, https://arxiv.org/abs/1905.12265) on node and edge features.

    A linear map to ``hidden``, then ``layers`` × (dropout, ``GINEConv`` with an
    ``edge_dim -> hidden`` edge encoder, ReLU), then a linear head. The convolutions are
    PyG's, run through :class:`~gnndist.nn.PyGAdapter` with ``graph.edge_attr`` (the
    partition's edge features, one row per local edge): exact on any number of ranks.
    ``--model gine``, e.g. for ogbn-proteins (8 edge features).

    Shapes:
        x ``[n_owned, in_channels]``, graph.edge_attr ``[nnz_local, edge_dim]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2, dropout: float = 0.5,
                 norm: str = "none", edge_dim: int = 1):
        from torch_geometric.nn import GINEConv  # PyG is optional: needed only here

        super().__init__()
        self.inp = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(
            PyGAdapter(GINEConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)),
                                edge_dim=edge_dim))
            for _ in range(layers))
        self.norms = nn.ModuleList(make_norm(norm, hidden) for _ in range(layers))
        self.out = nn.Linear(hidden, out_channels)
        self.dropout = dropout

    def forward(self, graph, x: Tensor) -> Tensor:
        x = self.inp(x)
        ea = rows2d(graph.edge_attr).to(x.dtype)  # [nnz_local, edge_dim]
        for i, conv in enumerate(self.convs):
            x = graph.dropout(x, self.dropout, key=i, training=self.training)
            x = F.relu(apply_norm(self.norms[i], graph, conv(graph, x, edge_attr=ea)))
        return self.out(x)
