"""Relation-wise layer of a typed graph: one layer per relation, summed per destination type (PyG's ``HeteroConv``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from gnndist.datasets.schema import Relation


def relation_key(rel: Relation) -> str:
    """The ``nn.ModuleDict`` key of a relation: ``"src__rel__dst"`` (PyG's ``HeteroConv`` spelling)."""
    return "__".join(rel)


class HeteroConv(nn.Module):
    r"""Runs a layer per relation and sums per destination type: :math:`x'_i = \square_{r:\,\mathrm{dst}(r) = t(i)}
    f_r(A_r, x)_i`.

    ``f_r`` is any layer taking ``(graph, x)``: a gnndist layer (``SAGEConv``, ``GCNConv`` on a relation inside
    one type, a :class:`~gnndist.nn.MessagePassing` of your own) or a ``torch_geometric.nn`` conv wrapped in
    :class:`~gnndist.nn.PyGAdapter`. It gets ``graph.relation(r)``: the rank's part with relation ``r``'s edges
    (its CSR, its in-degrees, its local edges for per-edge layers) and the union graph's halo, so it is exact on
    any number of ranks as it is on a homogeneous graph. Its output counts at the rows of ``r``'s destination
    type only (a layer's root term would otherwise write every row); rows of a type no relation points to are
    zero. Relations without a layer are skipped; an empty relation runs and adds nothing but its bias.

    Each relation's layer exchanges its own input rows (a layer that transforms first sends the transformed
    rows), so a layer of R relations exchanges up to R times per step; :class:`~gnndist.nn.conv.rgcn_conv.RGCNConv`
    shares one exchange between its relations.

    Args:
        convs: ``{(src, rel, dst): layer}`` (or ``{"src__rel__dst": layer}``), e.g. from :meth:`per_relation`.
        aggr: ``"sum"`` (default) or ``"mean"`` over the relations that point at a type.

    Shapes:
        x ``[n_owned, F]`` (every type's rows, featureless ones included) -> ``[n_owned, F']``
    """

    def __init__(self, convs: dict, aggr: str = "sum"):
        super().__init__()
        if aggr not in ("sum", "mean"):
            raise ValueError(f"HeteroConv aggr must be 'sum' or 'mean', got {aggr!r}")
        self.convs = nn.ModuleDict({k if isinstance(k, str) else relation_key(tuple(k)): v for k, v in convs.items()})
        self.aggr = aggr
        self.tag = "hetero"

    @classmethod
    def per_relation(cls, graph, make: Callable[[Relation], nn.Module], aggr: str = "sum") -> HeteroConv:
        """One layer ``make(relation)`` for every relation of ``graph`` (the rank's typed graph)."""
        return cls({rel: make(rel) for rel in graph.hetero.relations}, aggr)

    def forward(self, graph, x: Tensor) -> Tensor:
        if graph.hetero is None:
            raise ValueError("HeteroConv runs on a typed graph (graph.hetero); this one has one node type")
        relations = [relation_key(r) for r in graph.hetero.relations]
        unknown = sorted(set(self.convs) - set(relations))
        if unknown:
            raise ValueError(f"HeteroConv has layers for {unknown}, which are not relations of the graph "
                             f"({', '.join(relations)})")
        types = graph.node_type[: graph.n_owned]  # [n_owned]
        out, hits = None, torch.zeros(len(graph.hetero.node_types), device=x.device)
        for r, key in enumerate(relations):
            if key not in self.convs:
                continue
            conv = self.convs[key]
            conv.tag = f"{self.tag}/{key}"  # its bytes counted per relation
            y = conv(graph.relation(r), x)  # [n_owned, F']: every row, meaningful at the destination type's
            dst = graph.hetero.node_types.index(graph.hetero.relations[r][2])
            keep = (types == dst).unsqueeze(1).to(y.dtype)  # [n_owned, 1]
            out = y * keep if out is None else out + y * keep
            hits[dst] += 1
        if out is None:
            raise ValueError("HeteroConv has no layer for any relation of the graph")
        if self.aggr == "mean":
            out = out / hits.clamp(min=1)[types].unsqueeze(1).to(out.dtype)
        return out  # [n_owned, F']
