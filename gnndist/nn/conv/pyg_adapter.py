"""Run an unmodified ``torch_geometric.nn`` conv layer on one rank's part, with the halo exchange around it.

The layer sees the *local graph*: nodes are the rank's owned nodes followed by its halo
nodes (``x`` extended by one differentiable exchange), edges are every edge into an owned
node. Rows of owned nodes are exact (their whole neighbourhood is local); rows of halo
nodes are incomplete and are dropped. Gradients flow home through the exchange.

What the local graph lacks is supplied while the layer runs (:mod:`gnndist.nn.conv.pyg_local`):
degrees in the whole graph to ``gcn_norm`` and ``get_laplacian`` wherever they are called,
a fresh halo before every propagation step after the first (multi-hop layers), and the
reversed adjacency of the owned rows to a layer that flips the edges. A layer that needs
anything else (attention or statistics over all nodes, per-process state, partition-
dependent random draws) fails with :class:`NotDistributable`, naming what is missing.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gnndist.nn.conv.pyg_local import LocalRun, NotDistributable

# why a wrapped PyG layer cannot run under --precision bf16|fp16 (PyGAdapter.half_precision, gine's spec)
SCATTER_IN_ROWS_DTYPE = ("the wrapped {conv} aggregates with torch_geometric's scatter in the rows' dtype, so its sums "
                         "would not accumulate in fp32")

# keyword inputs read only at destination rows: halo rows are zero, not exchanged
DST_ONLY = {"GCN2Conv": ("x_0",), "FAConv": ("x_0",)}
# keyword inputs with one row per edge: the local edges' rows (graph.edge_attr or computed from it)
EDGE_INPUTS = ("edge_attr", "edge_weight")
# normalisations over every node of the graph (PyG names); torch BatchNorm is checked in training only
GRAPH_NORMS = {"GraphNorm", "InstanceNorm", "PairNorm", "MeanSubtractionNorm", "GraphSizeNorm"}
# layers (or submodules) whose result depends on nodes or edges no rank's part holds, and why
GLOBAL = {
    "WLConv": "gives every new colour the next id of a hash table that each process fills in the order it meets "
              "colours on its own nodes, so the ids depend on the partition (exact only with one table shared by "
              "all ranks, which gnndist does not have); WLConvContinuous is exact",
    "MultiheadAttention": "attends over all nodes of the graph (global attention), which no rank holds; the "
                          "message-passing part alone (e.g. GPSConv's `conv`) is exact wrapped in PyGAdapter",
    "PerformerAttention": "attends over all nodes of the graph (global attention), which no rank holds; the "
                          "message-passing part alone (e.g. GPSConv's `conv`) is exact wrapped in PyGAdapter",
    "PANConv": "builds powers of the adjacency with sparse matrix products over the edges it is given; the local "
               "graph lacks the edges among halo nodes, so paths longer than one hop are missing; MixHopConv or "
               "TAGConv (powers by repeated propagation) are exact",
    "DynamicEdgeConv": "builds a k-NN graph over all nodes from the features, which no rank holds",
    "GravNetConv": "builds a k-NN graph over all nodes from the features, which no rank holds",
    "XConv": "builds a k-NN graph over all points, which no rank holds",
}
# layers that draw random samples over the local graph in training (the draws depend on the partition)
RANDOM_IN_TRAINING = {
    "SuperGATConv": "samples positive and negative edges with torch's random stream over the local graph for its "
                    "attention loss, so the samples depend on the partition; it is exact in eval mode",
}


def _names(module: nn.Module) -> list[str]:
    return [c.__name__ for c in type(module).__mro__]


def _first(module: nn.Module, names) -> str | None:
    return next((n for n in _names(module) if n in names), None)


def check_static(conv: nn.Module) -> None:
    """Raise :class:`NotDistributable` if ``conv`` (or a submodule) can never run exactly on a rank's part."""
    label = type(conv).__name__
    for path, m in conv.named_modules():
        name = _first(m, GLOBAL)
        if name is not None:
            where = f"{label}.{path} ({type(m).__name__})" if path else label
            raise NotDistributable(f"{where} {GLOBAL[name]}")


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
        name = _first(m, RANDOM_IN_TRAINING)
        if name is not None and m.training:
            raise NotDistributable(f"{where} in training {RANDOM_IN_TRAINING[name]}")
        if m.training and ((isinstance(m, nn.Dropout) and m.p > 0) or _dropout_attr(m) > 0):
            raise NotDistributable(
                f"{where} draws dropout masks from torch's random stream, so they depend on the partition; "
                f"set its dropout to 0 (use graph.dropout, or gnndist.nn.GATConv for attention dropout)")


def local_edge_index(graph) -> Tensor:
    """``[2, nnz]`` (source, destination) in local ids: every edge into an owned node (built once per graph)."""
    return graph.derived("local_edge_index", lambda: torch.stack([graph.csr.col.long(), graph.csr.row.long()]))


class PyGAdapter(nn.Module):
    """Wrap a ``torch_geometric.nn`` conv layer so it takes ``(graph, x)`` and runs on any number of ranks.

    Exact (outputs and gradients) for every homogeneous node-level layer of
    ``torch_geometric.nn.conv`` except those refused below; ``docs/pyg_layers.md`` lists each
    one, generated by ``tests/test_nn_pyg_sweep.py``. Parameters are the wrapped layer's
    (``adapter.conv``), so its weights load unchanged.

    Args:
        conv: the PyG layer, unmodified.

    Raises:
        NotDistributable: the layer (or a submodule) needs nodes or edges no rank holds
            (global attention, k-NN over all nodes, adjacency powers by sparse products),
            per-process state (WLConv's hash table), statistics over all nodes, or a
            partition-dependent random draw.

    Shapes:
        x ``[n_owned, F]`` (further node inputs, e.g. GCN2Conv's ``x_0``, as keywords
        ``[n_owned, *]``; ``edge_attr`` / ``edge_weight`` ``[nnz, *]``, one row per local
        edge in CSR order, e.g. ``graph.edge_attr``) -> ``[n_owned, F']``
    """

    def __init__(self, conv: nn.Module):
        super().__init__()
        check_static(conv)
        self.conv = conv
        self.tag = "pyg"

    @property
    def half_precision(self) -> str:
        """Why it cannot run under ``--precision bf16|fp16`` (:func:`gnndist.training.precision.check_model`)."""
        return SCATTER_IN_ROWS_DTYPE.format(conv=type(self.conv).__name__)

    def forward(self, graph, x: Tensor, **kwargs) -> Tensor:
        conv = self.conv
        check_runtime(conv)
        label = type(conv).__name__
        n_owned, n_local = graph.n_owned, graph.n_owned + graph.n_halo
        dst_only = DST_ONLY.get(_first(conv, DST_ONLY) or "", ())
        inputs = {"x": graph.extend(x, self.tag)}  # [n_owned + n_halo, F]
        fresh = [inputs["x"]]  # node tensors whose halo rows are the owners'
        nnz = graph.csr.nnz
        for name, v in kwargs.items():
            if name in EDGE_INPUTS:
                if not isinstance(v, Tensor) or v.dim() == 0 or v.shape[0] != nnz:
                    got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
                    raise NotDistributable(
                        f"{label}: {name} must hold one row per local edge in CSR order ([{nnz}, *], e.g. "
                        f"graph.edge_attr, which the partition stores when the dataset has edge_attr), got {got}")
            elif isinstance(v, Tensor) and v.dim() > 0 and v.shape[0] == n_owned and n_local > n_owned:
                if name in dst_only:
                    v = torch.cat([v, v.new_zeros((n_local - n_owned,) + tuple(v.shape[1:]))])
                else:
                    v = graph.extend(v, f"{self.tag}/{name}")
                    fresh.append(v)
            inputs[name] = v
        ei = local_edge_index(graph)  # [2, nnz]
        if getattr(conv, "flow", "source_to_target") == "target_to_source":
            ei = ei.flip(0)
        with LocalRun(graph, label, ei, fresh, self.tag).active(conv):
            out = conv(edge_index=ei, **inputs)
        if isinstance(out, tuple):
            out = out[0]
        return out[:n_owned]  # [n_owned, F']: halo rows saw only part of their neighbourhood

    def extra_repr(self) -> str:
        return "distributed (owned + halo rows)"


def from_pyg(conv: nn.Module) -> PyGAdapter:
    """``PyGAdapter(conv)``: the PyG layer, taking ``(graph, x)``, exact on any number of ranks."""
    return PyGAdapter(conv)
