"""The GAT model of Veličković et al. (https://arxiv.org/abs/1710.10903) for node classification."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.nn.conv.gat_conv import GATConv
from gnndist.nn.norm import apply_norm, make_norm


class GAT(nn.Module):
    """``layers`` GAT layers: dropout, multi-head GATConv and ELU, then a one-head output layer.

    The Cora recipe of the paper is ``hidden=64`` (8 heads x 8), ``dropout=0.6`` (inputs
    and attention), Adam with ``lr=0.005``, ``weight_decay=5e-4``. Input and attention
    dropout masks are partition-invariant, so P ranks train exactly like one.

    Args:
        in_channels: input width.
        hidden: the total width of a hidden layer (``heads`` x ``hidden // heads``).
        out_channels: output width.
        layers: depth (>= 1).
        dropout: dropout probability of the inputs of every layer and of the attention.
        norm: ``"none"``, ``"batch"`` (global statistics) or ``"layer"`` after hidden layers.
        heads: heads of the hidden layers (default ``8``).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2, dropout: float = 0.6,
                 norm: str = "none", heads: int = 8):
        super().__init__()
        per_head = max(1, hidden // heads)
        widths = [in_channels] + [per_head * heads] * (layers - 1)
        self.convs = nn.ModuleList(GATConv(w, per_head, heads, dropout=dropout) for w in widths[:-1])
        self.convs.append(GATConv(widths[-1], out_channels, heads=1, concat=False, dropout=dropout))
        for i, c in enumerate(self.convs):
            c.tag = f"layer{i}"
        self.norms = nn.ModuleList(make_norm(norm, per_head * heads) for _ in range(layers - 1))
        self.dropout = dropout

    def forward(self, graph, x: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = graph.dropout(x, self.dropout, key=i, training=self.training, sparse=i == 0)  # features: SparseRows
            x = conv(graph, x)  # [n_owned, H*C]
            if i < len(self.convs) - 1:
                x = F.elu(apply_norm(self.norms[i], graph, x))
        return x
