"""Learnable input rows for the featureless nodes (of a typed graph's featureless types, or of a featureless graph),
sharded like the features."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from gnndist.kernels.dropout.reference import hash_uniform

EMBEDDING_KEY = 0x454D4244  # the hash stream of the initial rows (apart from dropout's keys)


class NodeEmbedding(nn.Module):
    """One learnable row per node of a featureless type (of every node of a graph without features, e.g. a link
    predictor's on ogbl-ddi); a rank holds the rows of the nodes it owns.

    The rows replace those nodes' (zero) feature rows, so the first layer's halo exchange carries
    them like hidden activations and its backward sends their gradients home to the owner: nothing
    here communicates. The initial rows are uniform in ``[-sqrt(3), sqrt(3)]`` (unit variance, as
    ``nn.Embedding``'s normal) from a hash of ``(seed, dataset id, column)``, so they do not depend on
    the number of ranks. The rows are this rank's only: :func:`sharded_parameters` names them for the
    trainer, which neither broadcasts nor all-reduces them.

    With ``beside`` (a homogeneous graph with features: a link predictor's ``--embedding learn``, as
    Refined-GAE's learnable embeddings) every node's learned row is appended to its feature row instead.

    Args:
        graph: the rank's graph: typed (``graph.hetero``, ``graph.node_type``, ``graph.orig_id``), or a homogeneous
            graph (``graph.hetero`` None), whose every node has a learned row.
        dim: the width of a row (the width of the features; with ``beside``, its own).
        seed: seed of the initial rows.
        beside: append the rows to the features (homogeneous graphs), rather than take the place of zero rows.

    Shapes:
        weight ``[n_rows, dim]`` (the owned nodes of featureless types, in local order);
        x ``[n_owned, dim]`` -> ``[n_owned, dim]``; with ``beside`` ``[n_owned, F]`` -> ``[n_owned, F + dim]``
    """

    def __init__(self, graph, dim: int, seed: int = 0, beside: bool = False):
        super().__init__()
        self.whole = graph.hetero is None  # a homogeneous graph: every node's row is learned
        if beside and not self.whole:
            raise ValueError("learned rows beside the features are for a homogeneous graph")
        self.beside = beside
        if self.whole:
            rows = torch.arange(graph.n_owned, device=graph.orig_id.device)
            self.table_rows = graph.num_nodes
        else:
            featureless = torch.tensor([not f for f in graph.hetero.featured], device=graph.node_type.device)
            rows = featureless[graph.node_type[: graph.n_owned]].nonzero().view(-1)  # [n_rows] local ids
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("ids", graph.orig_id[rows].long(), persistent=False)  # [n_rows] dataset ids
        if self.whole:
            positions = self.ids
        else:  # where each row sits in the whole table (every featureless node, in dataset order): checkpoints
            offsets, featured = graph.hetero.offsets, graph.hetero.featured
            shift = torch.zeros(len(featured), dtype=torch.long)  # [T] dataset id - table position, per type
            seen = 0
            for t, f in enumerate(featured):
                shift[t] = offsets[t] - seen
                seen += 0 if f else offsets[t + 1] - offsets[t]
            self.table_rows = int(seen)
            positions = self.ids - shift.to(self.ids.device)[graph.node_type[rows]]
        self.register_buffer("positions", positions, persistent=False)  # [n_rows]
        init = (hash_uniform(self.ids, dim, seed, 0, EMBEDDING_KEY) * 2 - 1) * math.sqrt(3.0)  # [n_rows, dim]
        self.weight = nn.Parameter(init)

    def forward(self, graph, x: Tensor) -> Tensor:
        if self.beside:
            return torch.cat([x, self.weight.to(x.dtype)], dim=1)  # [n_owned, F + dim]
        if self.whole:  # x has no columns of its own
            return self.weight.to(x.dtype) if x.is_floating_point() else self.weight  # [n_owned, dim]
        return x.index_put((self.rows,), self.weight.to(x.dtype))  # [n_owned, dim], differentiable in weight


    def table(self, rows: Tensor, grid) -> Tensor:
        """The whole table of ``rows`` (this rank's ``[n_rows, dim]``: the weight, or its optimiser moments) from
        every rank, in dataset order (collective). ``[table_rows, dim]`` on the CPU."""
        out = torch.zeros(self.table_rows, rows.shape[1], dtype=rows.dtype)
        for pos, part in grid.all_gather_object((self.positions.cpu(), rows.detach().cpu())):
            out[pos] = part
        return out

    def own(self, table: Tensor) -> Tensor:
        """This rank's rows of a whole table (:meth:`table`'s). ``[table_rows, dim]`` -> ``[n_rows, dim]``."""
        return table.to(self.positions.device)[self.positions]


def _embeddings(model: nn.Module):
    return [(name, m) for name, m in model.named_modules() if isinstance(m, NodeEmbedding)]


def _index_in(optim, param) -> int | None:
    flat = [p for g in optim.param_groups for p in g["params"]]
    return next((i for i, p in enumerate(flat) if p is param), None)


def whole_state(model: nn.Module, optim, grid) -> tuple[dict, dict]:
    """``model.state_dict()`` and ``optim.state_dict()`` with every embedding's rows (and their Adam moments)
    gathered from every rank into the whole table, in dataset order: what a checkpoint holds (collective)."""
    msd, osd = model.state_dict(), optim.state_dict() if optim is not None else None
    for name, m in _embeddings(model):
        msd[f"{name}.weight"] = m.table(m.weight, grid)
        i = _index_in(optim, m.weight) if optim is not None else None
        if i is not None and i in osd["state"]:
            osd["state"][i] = dict(osd["state"][i])  # the optimiser's own dict otherwise: its live state
            for key, value in osd["state"][i].items():
                if torch.is_tensor(value) and value.shape == m.weight.shape:
                    osd["state"][i][key] = m.table(value, grid)
    return msd, osd


def own_state(model: nn.Module, msd: dict, optim=None, osd: dict | None = None) -> tuple[dict, dict | None]:
    """The inverse of :func:`whole_state` on this rank: the whole tables of a checkpoint cut to this rank's rows
    (``optim``: the optimiser ``osd`` is loaded into, built as the one that was saved)."""
    msd = dict(msd)
    for name, m in _embeddings(model):
        key = f"{name}.weight"
        if key in msd and msd[key].shape[0] == m.table_rows:
            msd[key] = m.own(msd[key])
        i = _index_in(optim, m.weight) if osd is not None else None
        if i is not None and i in osd["state"]:
            osd["state"][i] = dict(osd["state"][i])
            for k, value in osd["state"][i].items():
                if torch.is_tensor(value) and value.dim() == 2 and value.shape[0] == m.table_rows:
                    osd["state"][i][k] = m.own(value)
    return msd, osd


def sharded_parameters(model: nn.Module) -> set[int]:
    """The ``id`` of every parameter that is this rank's own rows (a :class:`NodeEmbedding`'s), not replicated."""
    return {id(m.weight) for m in model.modules() if isinstance(m, NodeEmbedding)}
