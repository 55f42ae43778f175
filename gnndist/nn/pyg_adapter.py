"""Run an unmodified ``torch_geometric.nn`` conv layer on one rank's part, with the halo exchange around it.

The layer sees the *local graph*: nodes are the rank's owned nodes followed by its halo
nodes (``x`` extended by one differentiable exchange), edges are every edge into an owned
node. Rows of owned nodes are exact (their whole neighbourhood is local); rows of halo
nodes are incomplete and are dropped. Gradients flow home through the exchange.

This is exact for a layer that (a) aggregates one hop, (b) mixes nodes only along edges
and (c) uses no randomness and no statistics over all nodes. What the partition must
supply on top — the global degrees of GCN normalisation — comes from ``graph.degree``.
A layer that needs anything else fails at once with :class:`NotDistributable`, naming
what is missing.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cache
from weakref import WeakKeyDictionary

import torch
from torch import Tensor, nn

from gnndist.errors import UserError

# layers that propagate several hops in one call: the attribute that sets the hop count
MULTI_HOP = {"APPNP": "K", "SGConv": "K", "SSGConv": "K", "TAGConv": "K", "ChebConv": "K",
             "ARMAConv": "num_layers", "GatedGraphConv": "num_layers", "MixHopConv": "powers"}
# layers that normalise by the degree of every node from the edges they are given (no recipe yet)
SOURCE_DEGREE = {"LGConv", "FAConv"}
# layers whose global-degree normalisation the adapter supplies: (flag that turns it on, flag of +I)
GCN_NORM = {"GCNConv", "GCN2Conv"}
# keyword inputs read only at destination rows: halo rows are zero, not exchanged
DST_ONLY = {"GCN2Conv": ("x_0",)}
# normalisations over every node of the graph (PyG names); torch BatchNorm is checked in training only
GRAPH_NORMS = {"GraphNorm", "InstanceNorm", "PairNorm", "MeanSubtractionNorm", "GraphSizeNorm"}


class NotDistributable(UserError):
    """A layer reads something a rank's part does not hold (more hops, all-node statistics, ...)."""


def _names(module: nn.Module) -> list[str]:
    return [c.__name__ for c in type(module).__mro__]


def _first(module: nn.Module, names) -> str | None:
    return next((n for n in _names(module) if n in names), None)


def check_static(conv: nn.Module) -> None:
    """Raise :class:`NotDistributable` if ``conv`` can never run exactly on a 1-hop halo."""
    label = type(conv).__name__
    name = _first(conv, MULTI_HOP)
    if name is not None:
        attr = MULTI_HOP[name]
        hops = getattr(conv, attr, "?")
        raise NotDistributable(
            f"{label} propagates {attr}={hops} hops in one call, but a rank's part holds only the 1-hop halo: "
            f"nodes more than one hop away are missing. Stack 1-hop layers instead (each exchanges its own halo)")
    name = _first(conv, SOURCE_DEGREE)
    if name is not None and getattr(conv, "normalize", True):
        raise NotDistributable(
            f"{label} normalises by the degree of every source node, computed from the edges it is given; "
            f"the local graph holds only the edges into owned nodes, so the degrees of halo nodes are missing "
            f"(the adapter supplies them only for {', '.join(sorted(GCN_NORM))})")


def _dropout_attr(m: nn.Module) -> float:
    """The largest dropout probability a module keeps as an attribute (PyG layers and MLPs), else 0."""
    p = getattr(m, "dropout", None)
    values = p if isinstance(p, (list, tuple)) else [p]
    return max([float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)], default=0.0)


def check_runtime(conv: nn.Module) -> None:
    """Raise :class:`NotDistributable` if a submodule needs all nodes or a partition-dependent random draw."""
    label = type(conv).__name__
    for path, m in conv.named_modules():
        where = f"{label}.{path}" if path else label
        kind = type(m).__name__
        if kind in GRAPH_NORMS or (kind == "LayerNorm" and getattr(m, "mode", "node") == "graph"):
            raise NotDistributable(
                f"{where} ({kind}) normalises with statistics over all nodes of the graph, which no rank holds; "
                f"use a per-node norm or gnndist.nn.DistBatchNorm")
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training:
            raise NotDistributable(
                f"{where} ({kind}) in training normalises with statistics over all nodes of the graph, which no "
                f"rank holds; build the layer without it (e.g. norm=None) or use gnndist.nn.GENConv, "
                f"whose DistBatchNorm sums the statistics over ranks")
        if m.training and ((isinstance(m, nn.Dropout) and m.p > 0) or _dropout_attr(m) > 0):
            raise NotDistributable(
                f"{where} draws dropout masks from torch's random stream, so they depend on the partition; "
                f"set its dropout to 0 (use graph.dropout, or gnndist.nn.GATConv for attention dropout)")


_EDGES: WeakKeyDictionary = WeakKeyDictionary()


def local_edge_index(graph) -> Tensor:
    """``[2, nnz]`` (source, destination) in local ids: every edge into an owned node (cached)."""
    cache = _EDGES.setdefault(graph, {})
    if "ei" not in cache:
        cache["ei"] = torch.stack([graph.csr.col.long(), graph.csr.row.long()])
    return cache["ei"]


def gcn_edges(graph, fill: float = 1.0, self_loops: bool = True, dtype: torch.dtype = torch.float32):
    """Local edges with self-loops of owned nodes and GCN weights from global degrees (cached).

    ``w_ij = 1 / sqrt((d_i + fill)(d_j + fill))`` and ``w_ii = fill / (d_i + fill)`` where
    ``d`` is the degree in the whole graph: what ``gcn_norm`` computes on one process.

    Returns ``edge_index`` ``[2, nnz + n_owned]`` and ``edge_weight`` ``[nnz + n_owned]``.
    """
    cache = _EDGES.setdefault(graph, {})
    key = ("gcn", fill, self_loops, dtype)
    if key not in cache:
        ei = local_edge_index(graph)
        deg = graph.degree.double() + (fill if self_loops else 0.0)  # [n_owned + n_halo]
        dinv = deg.rsqrt().masked_fill(deg == 0, 0.0)
        w = dinv[ei[0]] * dinv[ei[1]]  # [nnz]
        if self_loops:
            loops = torch.arange(graph.n_owned, device=ei.device)
            ei = torch.cat([ei, torch.stack([loops, loops])], dim=1)
            w = torch.cat([w, fill * dinv[: graph.n_owned] ** 2])
        cache[key] = (ei, w.to(dtype))
    return cache[key]


@cache
def pyg_self_loop_fill(improved: bool) -> float:
    """The self-loop weight PyG's ``gcn_norm`` uses when no edge weights are given, read off a 2-node graph.

    (PyG 2.8 ignores ``improved`` then and adds loops of weight 1; asking ``gcn_norm`` keeps
    the adapter equal to the layer on one process whatever the version does.)
    """
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    ei = torch.tensor([[0, 1], [1, 0]])
    ei, w = gcn_norm(ei, None, 2, improved, True, dtype=torch.float64)
    loop = float(w[(ei[0] == 0) & (ei[1] == 0)].sum())  # fill / (1 + fill)
    return round(loop / (1.0 - loop), 9)


@contextmanager
def _normalize_off(conv: nn.Module):
    """Let the layer take the precomputed weights as they are (its own ``gcn_norm`` would use local degrees)."""
    old = conv.normalize
    conv.normalize = False
    try:
        yield
    finally:
        conv.normalize = old


class PyGAdapter(nn.Module):
    """Wrap a ``torch_geometric.nn`` conv layer so it takes ``(graph, x)`` and runs on any number of ranks.

    Verified exact (outputs and gradients) for GCNConv, GCN2Conv, SAGEConv, GATConv
    (attention dropout 0), GINConv and GENConv (``norm=None``); other 1-hop layers that mix
    nodes only along edges work the same way. Parameters are the wrapped layer's
    (``adapter.conv``), so its weights load unchanged.

    Args:
        conv: the PyG layer, unmodified.

    Raises:
        NotDistributable: the layer needs more than a 1-hop halo, source degrees the adapter
            cannot supply, statistics over all nodes, or a partition-dependent random draw.

    Shapes:
        x ``[n_owned, F]`` (further node inputs, e.g. GCN2Conv's ``x_0``, as keywords
        ``[n_owned, *]``) -> ``[n_owned, F']``
    """

    def __init__(self, conv: nn.Module):
        super().__init__()
        check_static(conv)
        self.conv = conv
        self.tag = "pyg"

    def forward(self, graph, x: Tensor, **kwargs) -> Tensor:
        conv = self.conv
        check_runtime(conv)
        n_owned, n_local = graph.n_owned, graph.n_owned + graph.n_halo
        dst_only = DST_ONLY.get(_first(conv, DST_ONLY) or "", ())
        inputs = {"x": graph.extend(x, self.tag)}  # [n_owned + n_halo, F]
        for name, v in kwargs.items():
            if isinstance(v, Tensor) and v.shape[0] == n_owned and n_local > n_owned:
                if name in dst_only:
                    v = torch.cat([v, v.new_zeros((n_local - n_owned,) + tuple(v.shape[1:]))])
                else:
                    v = graph.extend(v, f"{self.tag}/{name}")
            inputs[name] = v
        if "edge_weight" in inputs or "edge_attr" in inputs:
            raise NotDistributable(f"{type(conv).__name__}: a partition holds no edge weights or edge features")
        gcn = _first(conv, GCN_NORM) is not None and getattr(conv, "normalize", False)
        if gcn:
            fill = pyg_self_loop_fill(bool(getattr(conv, "improved", False)))
            ei, w = gcn_edges(graph, fill, getattr(conv, "add_self_loops", True), x.dtype)
        else:
            ei, w = local_edge_index(graph), None
        if getattr(conv, "flow", "source_to_target") == "target_to_source":
            ei = ei.flip(0)
        if gcn:
            with _normalize_off(conv):
                out = conv(edge_index=ei, edge_weight=w, **inputs)
        else:
            out = conv(edge_index=ei, **inputs)
        if isinstance(out, tuple):
            out = out[0]
        return out[:n_owned]  # [n_owned, F']: halo rows saw only part of their neighbourhood

    def extra_repr(self) -> str:
        return "distributed (owned + halo rows)"


def from_pyg(conv: nn.Module) -> PyGAdapter:
    """``PyGAdapter(conv)``: the PyG layer, taking ``(graph, x)``, exact on any number of ranks."""
    return PyGAdapter(conv)
