"""Refined-GAE's encoder: a GCN layer into the hidden width, then one shared GCN layer propagated again and again.

Ma et al., "Reconsidering the performance of GAE in link prediction" (CIKM 2025), ``GCN_with_feature`` in
``GraphPKU/Refined-GAE``'s ``model.py``: ``conv1`` maps the features to ``hidden``; the *same* ``conv2`` is then
applied ``prop_step - 1`` times, each time after a norm and dropout and without a nonlinearity (their commands leave
``--relu`` off).
"""

from __future__ import annotations

from torch import Tensor, nn

from gnndist.cost import aggregate_first
from gnndist.nn.conv.gcn_conv import GCNConv
from gnndist.nn.norm import apply_norm, make_norm


class PropGCN(nn.Module):
    """``GCNConv(in, hidden)``, then ``layers - 1`` times norm, dropout and one shared ``GCNConv(hidden, hidden)``.

    Args:
        in_channels: input width.
        hidden: the width of every row after the first layer.
        out_channels: the output width. Refined-GAE's is ``hidden`` (link prediction: ``--out-dim 0``); another
            (a node task's classes) gives the last step a ``GCNConv(hidden, out_channels)`` of its own.
        layers: propagation steps (Refined-GAE's ``--prop_step``, >= 1): one first layer, then ``layers - 1``
            more, each the shared layer (or, last, the output's own).
        dropout: dropout probability before each step after the first; masks from ``graph.dropout``
            (partition-invariant). None on the input, as Refined-GAE's.
        norm: ``"none"``, ``"batch"`` (global statistics) or ``"layer"`` (Refined-GAE's ``--norm``), one per step.

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 4, dropout: float = 0.2,
                 norm: str = "layer"):
        super().__init__()
        first_out = hidden if layers > 1 else out_channels
        self.first = GCNConv(in_channels, first_out, aggregate_first=aggregate_first(in_channels, first_out))
        own_last = layers > 1 and out_channels != hidden
        shared = layers - 1 - own_last  # applications of the shared layer
        self.shared = GCNConv(hidden, hidden) if shared > 0 else None
        self.last = GCNConv(hidden, out_channels) if own_last else None
        self.steps = [self.shared] * shared + ([self.last] if own_last else [])
        self.norms = nn.ModuleList(make_norm(norm, hidden) for _ in range(layers - 1))
        for tag, conv in (("layer0", self.first), ("shared", self.shared), ("last", self.last)):
            if conv is not None:
                conv.tag = tag
        self.dropout = dropout

    @property
    def convs(self) -> list[nn.Module]:
        """Its distinct layers: the first, the shared one, the output's own (``predict --what embedding --layer K``
        reads a layer's last application)."""
        return [c for c in (self.first, self.shared, self.last) if c is not None]

    def forward(self, graph, x: Tensor) -> Tensor:
        x = self.first(graph, graph.dropout(x, 0.0, key=0, training=self.training, sparse=True))
        for i, (norm, conv) in enumerate(zip(self.norms, self.steps), start=1):
            x = conv(graph, graph.dropout(apply_norm(norm, graph, x), self.dropout, key=i, training=self.training))
        return x
