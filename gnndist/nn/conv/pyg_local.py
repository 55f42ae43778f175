"""What an unmodified PyG layer needs beyond a rank's local graph, supplied during one ``PyGAdapter`` call.

The local graph holds the edges into owned nodes, and ``x`` extended by the halo. Three
things a single process has that it lacks, each supplied where the layer asks for it
(nested layers included), so the layer's code runs unchanged:

* **Degrees in the whole graph.** ``gcn_norm`` and ``get_laplacian``, wherever a layer
  calls them (GCN, SGConv, APPNP, ChebConv, DNAConv, EGConv, LGConv, FAConv, a GCN inside
  AntiSymmetricConv, ...), compute their degrees as partial sums over the local edges,
  summed at the owners (a fold) and sent to the halos: exact for any edge weights,
  weights with gradients included.
* **A fresh halo before every propagation step after the first.** The halo rows of a
  propagated tensor saw only part of their neighbourhood; before the next ``propagate`` or
  ``edge_updater`` call the node tensors it reads are replaced by the owners' rows (one
  exchange each). Multi-hop layers (APPNP, SGConv, TAGConv, ChebConv, ARMAConv, MixHopConv,
  GatedGraphConv, ...) become exact, with any number of hops.
* **Reversed edges.** A layer that flips ``edge_index`` (``DirGNNConv``) wants the rows of
  ``A^T``; the graph is symmetric, so the reversed adjacency of the owned rows is the local
  edge set itself, which is passed instead.

Anything else that reads edges the partition does not have raises :class:`NotDistributable`.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from gnndist.errors import UserError


class NotDistributable(UserError):
    """A layer reads something a rank's part does not hold (all-node statistics, other edges, ...)."""


def _originals() -> dict:
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import get_laplacian

    return {"gcn_norm": gcn_norm, "get_laplacian": get_laplacian}


_HOLDERS: dict = {"modules": -1, "found": []}


def _holders(originals: dict) -> list[tuple[object, str]]:
    """Every (module, name) of ``torch_geometric`` that binds one of the normalisers (imported copies included).

    Rescanned only when modules were imported since the last call.
    """
    if _HOLDERS["modules"] != len(sys.modules):
        found = []
        for name, mod in list(sys.modules.items()):
            if name.startswith("torch_geometric") and mod is not None:
                found += [(mod, attr) for attr, fn in originals.items() if getattr(mod, attr, None) is fn]
        _HOLDERS.update(modules=len(sys.modules), found=found)
    return _HOLDERS["found"]


def _node_names(module: nn.Module, which: str) -> set[str]:
    """Inputs a PyG layer reads per node (``<name>_i`` / ``<name>_j``) in ``propagate`` or ``edge_updater``."""
    args = getattr(module, "_edge_user_args" if which == "edge_updater" else "_user_args", [])
    if which == "propagate":
        args = list(args) + list(getattr(module, "_fused_user_args", []))
    return {a[:-2] for a in args if a.endswith(("_i", "_j"))}


class LocalRun:
    """One adapter call: exact degrees, halo refresh between propagation steps, reversed edges.

    Args:
        graph: the rank's :class:`~gnndist.graph.DistGraph`.
        label: the wrapped layer's class name (for messages).
        edge_index: the local edges as passed to the layer ``[2, nnz]``.
        fresh: node tensors whose halo rows are already the owners' (the exchanged inputs).
        tag: name the exchanges' bytes are counted under.
    """

    def __init__(self, graph, label: str, edge_index: Tensor, fresh: list[Tensor], tag: str):
        self.graph, self.label, self.tag = graph, label, tag
        self.n_owned = graph.n_owned
        self.n_local = graph.n_owned + graph.n_halo
        self.base = edge_index  # [2, nnz]
        self.reversed = edge_index.flip(0)  # [2, nnz]
        self.fresh = {id(t): t for t in fresh}  # kept alive so ids stay unique
        self.symmetric: dict[int, Tensor] = {}  # edge weights symmetric in their endpoints
        self.refreshed: dict[int, tuple[Tensor, Tensor]] = {}
        self.steps = 0
        self._sorted_keys: Tensor | None = None

    # ------------------------------------------------------------------ degrees
    def check_edges(self, edge_index: Tensor, what: str) -> None:
        """Raise unless the non-loop edges are the local edges (in either direction).

        Then every edge of the graph is on exactly one rank, which :meth:`degree` relies on.
        """
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.is_sparse:
            raise NotDistributable(f"{self.label} calls {what} on a sparse adjacency; the adapter passes edge_index "
                                   f"and can supply degrees in the whole graph only for those edges")
        ei = edge_index[:, edge_index[0] != edge_index[1]]
        base = self.base[:, self.base[0] != self.base[1]]  # a relation of a typed graph may hold self-loops
        if ei.shape == base.shape:
            if torch.equal(ei, base) or torch.equal(ei, base.flip(0)):
                return
            if self._sorted_keys is None:
                self._sorted_keys = (base[0] * self.n_local + base[1]).sort().values
            for a, b in ((0, 1), (1, 0)):
                if torch.equal((ei[a] * self.n_local + ei[b]).sort().values, self._sorted_keys):
                    return
        raise NotDistributable(
            f"{self.label} calls {what} on edges that are not the graph's (re-wired, sampled or added): the degrees "
            f"of their endpoints in the whole graph are unknown to the partition")

    def degree(self, index: Tensor, weight: Tensor, loop: Tensor) -> Tensor:
        """Weighted degree in the whole graph of every local node, counted at ``index`` of each edge.

        Every non-loop edge of the graph is on exactly one rank (checked by :meth:`check_edges`);
        a self-loop is counted by the owner of its node only.

        Shapes:
            index, weight, loop ``[E]`` -> ``[n_owned + n_halo]``
        """
        n_owned, graph = self.n_owned, self.graph
        keep = ~loop | (index < n_owned)
        part = weight.new_zeros(self.n_local).index_add(0, index[keep], weight[keep])  # [n_local] partial sums
        owned = part[:n_owned] + graph.fold_halo(part[n_owned:, None], f"{self.tag}/degree")[:, 0]
        return torch.cat([owned, graph.halo(owned[:, None], f"{self.tag}/degree")[:, 0]])

    def gcn_norm(self, edge_index, edge_weight=None, num_nodes=None, improved=False, add_self_loops=True,
                 flow="source_to_target", dtype=None):
        """``torch_geometric``'s ``gcn_norm`` (edge_index form) with degrees in the whole graph."""
        from torch_geometric.utils import add_remaining_self_loops

        self.check_edges(edge_index, "gcn_norm")
        if add_self_loops:
            edge_index, edge_weight = add_remaining_self_loops(edge_index, edge_weight, 2.0 if improved else 1.0,
                                                               self.n_local)
        if edge_weight is None:
            edge_weight = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
        row, col = edge_index[0], edge_index[1]
        deg = self.degree(col if flow == "source_to_target" else row, edge_weight, row == col)  # [n_local]
        dinv = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
        out = dinv[row] * edge_weight * dinv[col]  # [E]
        self.symmetric[id(out)] = out
        return edge_index, out

    def get_laplacian(self, edge_index, edge_weight=None, normalization=None, dtype=None, num_nodes=None):
        """``torch_geometric.utils.get_laplacian`` with degrees in the whole graph."""
        from torch_geometric.utils import add_self_loops, remove_self_loops

        self.check_edges(edge_index, "get_laplacian")
        edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
        if edge_weight is None:
            edge_weight = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
        row, col = edge_index[0], edge_index[1]
        deg = self.degree(row, edge_weight, row == col)  # [n_local]
        n = self.n_local
        if normalization is None:
            edge_index, _ = add_self_loops(edge_index, num_nodes=n)
            return edge_index, torch.cat([-edge_weight, deg], dim=0)
        if normalization == "sym":
            dinv = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
            w = dinv[row] * edge_weight * dinv[col]
            edge_index, w = add_self_loops(edge_index, -w, fill_value=1.0, num_nodes=n)
            self.symmetric[id(w)] = w
            return edge_index, w
        inv = (1.0 / deg).masked_fill(deg == 0, 0.0)
        return add_self_loops(edge_index, -(inv[row] * edge_weight), fill_value=1.0, num_nodes=n)

    # ------------------------------------------------------------------ propagation steps
    def _refresh(self, v, dim: int):
        """``v`` with its halo rows replaced by the owners' rows (along the layer's node dim ``dim``)."""
        if isinstance(v, tuple):
            return tuple(self._refresh(t, dim) for t in v)
        if not isinstance(v, Tensor) or v.dim() == 0 or id(v) in self.fresh:
            return v
        if v.shape[dim] != self.n_local:
            return v
        if id(v) in self.refreshed:
            return self.refreshed[id(v)][1]
        rows = v.movedim(dim, 0)  # [n_local, *]
        owned = rows[: self.n_owned]
        halo = self.graph.halo(owned.reshape(self.n_owned, -1), f"{self.tag}/step{self.steps}")  # [n_halo, prod(*)]
        out = torch.cat([owned, halo.view((-1,) + tuple(rows.shape[1:]))]).movedim(0, dim)
        self.refreshed[id(v)] = (v, out)
        return out

    def _edges(self, module: nn.Module, edge_index, kwargs: dict, nodes: set[str]):
        """The local edges in place of reversed ones (the reversed adjacency of the owned rows)."""
        base, rev = self.base, self.reversed
        e = base.shape[1]
        if not (isinstance(edge_index, Tensor) and edge_index.dim() == 2 and edge_index.shape[1] >= e
                and edge_index is not base and torch.equal(edge_index[:, :e], rev)
                and torch.equal(edge_index[0, e:], edge_index[1, e:])):
            return edge_index
        per_edge = [k for k, v in kwargs.items() if k not in nodes and isinstance(v, Tensor) and v.dim() > 0
                    and v.shape[0] == edge_index.shape[1] and id(v) not in self.symmetric]
        if per_edge:
            raise NotDistributable(
                f"{self.label}: {type(module).__name__} reverses the edges and passes per-edge {per_edge} along; "
                f"a reversed edge's values belong to the edge stored on the other endpoint's rank")
        return torch.cat([base, edge_index[:, e:]], dim=1)

    def _wrap(self, module: nn.Module, which: str):
        original = getattr(module, which)
        nodes = _node_names(module, which)

        def call(edge_index, *args, **kwargs):
            edge_index = self._edges(module, edge_index, kwargs, nodes)
            if self.steps > 0:  # node tensors computed from an earlier step's halo rows: take the owners'
                dim = getattr(module, "node_dim", 0)
                kwargs = {k: self._refresh(v, dim) if k in nodes else v for k, v in kwargs.items()}
            if which == "propagate":
                self.steps += 1
            return original(edge_index, *args, **kwargs)

        return call

    @contextmanager
    def active(self, conv: nn.Module):
        """Patch the normalisers and wrap every message-passing submodule of ``conv`` for this call."""
        from torch_geometric.nn.conv import MessagePassing

        originals = _originals()
        holders = _holders(originals)
        mine = {"gcn_norm": self.gcn_norm, "get_laplacian": self.get_laplacian}
        wrapped = [m for m in conv.modules() if isinstance(m, MessagePassing)]
        try:
            for mod, attr in holders:
                setattr(mod, attr, mine[attr])
            for m in wrapped:
                for which in ("propagate", "edge_updater"):
                    object.__setattr__(m, which, self._wrap(m, which))
            yield self
        finally:
            for mod, attr in holders:
                setattr(mod, attr, originals[attr])
            for m in wrapped:
                for which in ("propagate", "edge_updater"):
                    m.__dict__.pop(which, None)
