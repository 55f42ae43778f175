"""R-GCN on a typed graph: embeddings for the featureless types, then R-GCN layers (``--model rgcn``)."""

from __future__ import annotations

from torch import Tensor

from gnndist.nn.conv.rgcn_conv import RGCNConv
from gnndist.nn.models.gnn import GNN
from gnndist.nn.node_embedding import NodeEmbedding


class RGCN(GNN):
    """``layers`` :class:`RGCNConv` layers with dropout before each and norm + ReLU between them.

    The input rows of featureless types stay zero (the first layer gives them their neighbours' mean), or with
    ``embedding="learn"`` are a :class:`NodeEmbedding` (learned, 1/P of the table per rank); every layer takes
    its sources from one halo exchange, so the embedding rows' gradients travel home like any activation's.

    Args:
        in_channels: input width (the features' and the embeddings').
        hidden: hidden width.
        out_channels: output width.
        layers: depth (>= 1).
        dropout: dropout probability (partition-invariant masks).
        norm: ``"none"``, ``"batch"`` or ``"layer"``.
        graph: the rank's typed graph (its relations and node types).
        num_bases: basis decomposition of every layer's relation weights (0: none).
        seed: seed of the embeddings' initial rows.
        embedding: ``"zero"`` (default: the featureless types' input rows stay zero; the first layer gives them
            their neighbours' mean through each relation) or ``"learn"`` (a :class:`NodeEmbedding` for them, which
            overfits a few labels: at 2 ranks, seeds 0-2, zero is 8.1 points better on cora-paper-word, 13.4 on
            dblp-paper-word, 0.5 on amazon-photo-paper-word and equal on synthetic-mag-2k; docs/heterogeneous.md).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2, dropout: float = 0.5,
                 norm: str = "none", *, graph, num_bases: int = 0, seed: int = 0, embedding: str = "zero"):
        R = len(graph.hetero.relations)
        super().__init__(lambda a, b: RGCNConv(a, b, R, num_bases), in_channels, hidden, out_channels, layers,
                         dropout, norm)
        learn = embedding == "learn" and not all(graph.hetero.featured)
        self.embedding = NodeEmbedding(graph, in_channels, seed) if learn else None  # hashed rows: order-free

    def forward(self, graph, x: Tensor) -> Tensor:
        if self.embedding is not None:
            x = self.embedding(graph, x)  # [n_owned, in]: featureless rows learned
        return super().forward(graph, x)
