"""Learnable input rows for the featureless node types of a typed graph, sharded like the features."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from gnndist.kernels.dropout.reference import hash_uniform

EMBEDDING_KEY = 0x454D4244  # the hash stream of the initial rows (apart from dropout's keys)


class NodeEmbedding(nn.Module):
    """One learnable row per node of a featureless type; a rank holds the rows of the nodes it owns.

    The rows replace those nodes' (zero) feature rows, so the first layer's halo exchange carries
    them like hidden activations and its backward sends their gradients home to the owner: nothing
    here communicates. The initial rows are uniform in ``[-sqrt(3), sqrt(3)]`` (unit variance, as
    ``nn.Embedding``'s normal) from a hash of ``(seed, dataset id, column)``, so they do not depend on
    the number of ranks. The rows are this rank's only: :func:`sharded_parameters` names them for the
    trainer, which neither broadcasts nor all-reduces them.

    Args:
        graph: the rank's typed graph (``graph.hetero``, ``graph.node_type``, ``graph.orig_id``).
        dim: the width of a row (the width of the features).
        seed: seed of the initial rows.

    Shapes:
        weight ``[n_rows, dim]`` (the owned nodes of featureless types, in local order);
        x ``[n_owned, dim]`` -> ``[n_owned, dim]``
    """

    def __init__(self, graph, dim: int, seed: int = 0):
        super().__init__()
        featureless = torch.tensor([not f for f in graph.hetero["featured"]], device=graph.node_type.device)
        rows = featureless[graph.node_type[: graph.n_owned]].nonzero().view(-1)  # [n_rows] local ids
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("ids", graph.orig_id[rows].long(), persistent=False)  # [n_rows] dataset ids
        init = (hash_uniform(self.ids, dim, seed, 0, EMBEDDING_KEY) * 2 - 1) * math.sqrt(3.0)  # [n_rows, dim]
        self.weight = nn.Parameter(init)

    def forward(self, graph, x: Tensor) -> Tensor:
        return x.index_put((self.rows,), self.weight.to(x.dtype))  # [n_owned, dim], differentiable in weight


def sharded_parameters(model: nn.Module) -> set[int]:
    """The ``id`` of every parameter that is this rank's own rows (a :class:`NodeEmbedding`'s), not replicated."""
    return {id(m.weight) for m in model.modules() if isinstance(m, NodeEmbedding)}
