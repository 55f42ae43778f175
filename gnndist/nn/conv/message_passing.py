"""Message passing on one rank's part: a layer writes ``message`` (and ``update``); ``propagate`` does the rest.

A layer never touches ``torch.distributed``. ``propagate`` exchanges the halo rows a
message needs (through :meth:`DistGraph.extend`, whose backward sends the gradients home),
computes the messages on the local edges (every edge into an owned row; its source may be
a halo node) and aggregates them per owned row. Each owned row sees its whole
neighbourhood, so the result equals one process on the whole graph, gradients included.

Two paths:

* **fused**: when ``message`` reads nothing but ``x_j`` (or is not overridden) and the
  aggregation is ``sum`` or ``mean``, the message is applied once per node and the rows are
  aggregated by SpMM (``graph.spmm``: the exchange overlaps the interior aggregation).
* **edge**: otherwise messages are computed per edge (``[nnz, *]``) and reduced per row
  with ``sum``, ``mean``, ``max`` or ``softmax``.

Edge-level work (attention scores, softmax over a row's edges, edge dropout) goes through
:class:`LocalEdges`, returned by :meth:`MessagePassing.edges`.
"""

from __future__ import annotations

import inspect
import zlib

import torch
from torch import Tensor, nn

from gnndist.kernels import CSR, sddmm, segment_max, segment_softmax, spmm
from gnndist.kernels.csr import degree_divisor
from gnndist.kernels.dropout.reference import dropout_mask

AGGREGATIONS = ("sum", "mean", "max", "softmax")
_RESERVED = ("index", "edge_weight", "size_i")


class LocalEdges:
    """The edges into one rank's owned rows, in local ids, optionally with one self-loop per owned row.

    Row ``i < n_owned`` lists the edges whose destination is owned node ``i``; ``col`` are
    sources in local ids (owned, then halo). Every edge-level tensor of a layer is in this
    order. With ``self_loops`` the edges ``(i, i)`` of the graph are dropped and one
    self-loop per owned row is added (as ``torch_geometric.utils.add_self_loops`` does).

    Attributes:
        csr: the CSR ``[n_owned, n_owned + n_halo]``.
        row, col: destination and source of every edge, ``[nnz]`` in the CSR's index dtype (int32 below 2^31
            entries): the CSR's own ``col`` and cached ``row``, so the edges keep 8 B per entry (``message``'s
            ``index`` argument is made int64 per call, for code written against PyG).
        dst_id, src_id: dataset ids of both endpoints, int64 ``[nnz]`` (partition-invariant; built when
            edge dropout first asks, so a layer without it keeps 16 B per edge less).
    """

    def __init__(self, graph, self_loops: bool = False):
        csr = graph.csr
        if self_loops:
            row, col = csr.row.long(), csr.col.long()
            keep = row != col
            loops = torch.arange(graph.n_owned, device=col.device)
            csr = CSR.from_coo(torch.cat([row[keep], loops]), torch.cat([col[keep], loops]).to(csr.col.dtype),
                               graph.n_owned, csr.num_cols)
        self.csr = csr
        self.row = csr.row  # [nnz], the CSR's cached rows
        self.col = csr.col  # [nnz], the CSR's own columns
        self._orig_id = graph.orig_id  # [n_owned + n_halo]: the endpoints' ids, per edge only if edge dropout asks
        self._ids: tuple[Tensor, Tensor] | None = None
        self.num_nodes = graph.num_nodes
        self.kernel = graph.kernel.impl  # the run's kernel choice (None: the dispatcher's)
        self.tune = graph.kernel.tune
        self._count: Tensor | None = None

    @property
    def nnz(self) -> int:
        return self.csr.nnz

    @property
    def dst_id(self) -> Tensor:
        """Dataset id of every edge's destination, int64 ``[nnz]`` (built on first use, then kept)."""
        return self._endpoint_ids()[0]

    @property
    def src_id(self) -> Tensor:
        """Dataset id of every edge's source, int64 ``[nnz]`` (built on first use, then kept)."""
        return self._endpoint_ids()[1]

    def _endpoint_ids(self) -> tuple[Tensor, Tensor]:
        if self._ids is None:
            self._ids = (self._orig_id[self.row].long(), self._orig_id[self.col].long())
        return self._ids

    def count(self) -> Tensor:
        """Edges per owned row (self-loops included). ``[n_owned]`` int64."""
        if self._count is None:
            self._count = self.csr.in_degree().long()
        return self._count

    def sddmm(self, a_dst: Tensor, b_src: Tensor, op: str = "add") -> Tensor:
        """Score of every edge from its endpoints: ``a_dst[row] + b_src[col]`` (or a dot product).

        Shapes:
            a_dst ``[n_owned, H]``, b_src ``[n_owned + n_halo, H]`` -> ``[nnz, H]``
        """
        return sddmm(self.csr, a_dst, b_src, op, impl=self.kernel)

    def softmax(self, scores: Tensor) -> Tensor:
        """Softmax over every owned row's edges (exact: a row's edges are all local).

        Shapes:
            scores ``[nnz, H]`` or ``[nnz]`` -> same shape
        """
        return segment_softmax(self.csr, scores, impl=self.kernel)

    def dropout(self, graph, values: Tensor, p: float, key: int, training: bool = True) -> Tensor:
        """Edge dropout whose mask depends on (seed, epoch, key, dst id, src id): the same for every P.

        Shapes:
            values ``[nnz]`` or ``[nnz, H]`` -> same shape
        """
        if not training or p == 0.0:
            return values
        ids = self.dst_id * self.num_nodes + self.src_id  # [nnz] unique per edge
        width = values.shape[1] if values.dim() > 1 else 1
        step = graph.context.current
        keep = dropout_mask(ids, width, p, step.seed, step.epoch, key).view(values.shape)
        return values * keep.to(values.dtype) / (1.0 - p)

    def gcn_weight(self, graph) -> Tensor:
        """``1 / sqrt((d_dst + 1)(d_src + 1))`` of every edge, global degrees (self-loops included). ``[nnz]``."""
        if graph.edge_weight is not None:
            raise ValueError("edge_weight='gcn' on per-edge messages does not weigh the edges of a graph loaded with "
                             "--edge-weights: aggregate with graph.spmm(x, weight='gcn') (as GCNConv does)")
        dinv = graph.gcn_scale  # [n_owned + n_halo] float64
        return (dinv[self.row] * dinv[self.col]).float()


def add_bias(out: Tensor, bias: Tensor | None) -> Tensor:
    """``out + bias`` in ``out``'s dtype: half rows stay half under ``--precision bf16|fp16`` (fp32: the sum itself).

    Shapes:
        out ``[n, F]``, bias ``[F]``
    """
    return out + bias.to(out.dtype) if bias is not None else out


def local_edges(graph, self_loops: bool = False) -> LocalEdges:
    """The :class:`LocalEdges` of ``graph`` (built once per graph)."""
    return graph.derived(("local_edges", self_loops), lambda: LocalEdges(graph, self_loops))


def _aggregate_edges(msg: Tensor, edges: LocalEdges, aggr: str, t: Tensor | float, n_owned: int) -> Tensor:
    """Per owned row, the ``aggr`` of its edges' messages ``[nnz, *] -> [n_owned, *]``."""
    index = edges.row
    if aggr == "softmax":
        flat = msg.reshape(edges.nnz, -1)  # [nnz, F]
        alpha = edges.softmax(flat * t).view_as(msg)
        return _scatter_sum(msg * alpha, index, n_owned)
    if aggr == "max":
        idx = index.long().view((-1,) + (1,) * (msg.dim() - 1)).expand_as(msg)  # int64: scatter_reduce's backward
        return msg.new_zeros((n_owned,) + tuple(msg.shape[1:])).scatter_reduce(0, idx, msg, "amax", include_self=False)
    out = _scatter_sum(msg, index, n_owned)  # [n_owned, *]
    if aggr == "mean":
        out = out / _expand(degree_divisor(edges.count(), out.dtype), out)
    return out


def _params(fn) -> list[str]:
    return [n for n, p in inspect.signature(fn).parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _scatter_sum(values: Tensor, index: Tensor, n: int) -> Tensor:
    return values.new_zeros((n,) + tuple(values.shape[1:])).index_add_(0, index, values)


def _expand(w: Tensor, like: Tensor) -> Tensor:
    """Broadcast per-edge weights ``[nnz]`` / ``[nnz, H]`` over the trailing dims of ``like``."""
    return w.reshape(tuple(w.shape) + (1,) * (like.dim() - w.dim()))


class MessagePassing(nn.Module):
    r"""Base of layers written as messages:
    :math:`x'_i = \mathrm{update}(\square_{j \in N(i)} w_{ij}\, \mathrm{message}(x_i, x_j, \dots))`.

    Subclasses override :meth:`message` (arguments are resolved by name, as in PyG:
    ``x_j``/``x_i`` are the source/destination rows of ``x``, ``<name>_j``/``<name>_i`` those
    of a node tensor passed to :meth:`propagate` as ``<name>=``, an edge tensor ``[nnz, *]``
    is passed as is, ``index`` is each edge's destination row) and optionally
    :meth:`update`, then call ``self.propagate(graph, x, ...)`` in ``forward``.

    Class attributes:
        aggr: ``"sum"`` (default), ``"mean"``, ``"max"`` or ``"softmax"``.
        self_loops: add one self-loop per node to the edges (default ``False``).
        tag: name the halo bytes are counted under (``GNN`` sets ``layer<i>``).
    """

    aggr: str = "sum"
    self_loops: bool = False
    tag: str = "mp"

    def message(self, x_j: Tensor) -> Tensor:
        """The message of every edge; the default passes the source row on."""
        return x_j

    def update(self, out: Tensor) -> Tensor:
        """Transform the aggregated rows (may also take ``x`` or any ``propagate`` keyword by name)."""
        return out

    def edges(self, graph) -> LocalEdges:
        """The local edges this layer aggregates over (with self-loops if ``self.self_loops``)."""
        return local_edges(graph, self.self_loops)

    def dropout_key(self, name: str = "") -> int:
        """A stable dropout key for this layer (from ``tag``) so edge masks differ between layers."""
        return zlib.crc32(f"{self.tag}/{name}".encode()) & 0x7FFFFFFF

    # ------------------------------------------------------------------ propagate
    def propagate(self, graph, x: Tensor, *, aggr: str | None = None, edge_weight: Tensor | str | None = None,
                  t: Tensor | float = 1.0, **kwargs) -> Tensor:
        """Exchange halos, compute messages on the local edges, aggregate per owned row, update.

        Args:
            graph: the rank's :class:`~gnndist.graph.DistGraph`.
            x: node features, owned rows ``[n_owned, *]`` or already extended
                ``[n_owned + n_halo, *]`` (then no exchange is needed for ``x``).
            aggr: overrides ``self.aggr``.
            edge_weight: multiplies every message: ``None``, ``"gcn"`` (symmetric
                normalisation with self-loops from global degrees) or a tensor ``[nnz]`` /
                ``[nnz, H]`` in the order of :meth:`edges` (e.g. attention coefficients).
            t: inverse temperature of the ``softmax`` aggregation
                (:math:`\\sum_j \\mathrm{softmax}_j(t\\,m_{ij})\\, m_{ij}` per channel).
            **kwargs: more node tensors (``[n_owned, *]`` or extended), edge tensors
                ``[nnz, *]`` or plain values, for ``message`` and ``update`` by name.

        Shapes:
            x ``[n_owned, *]`` -> ``[n_owned, *]`` (the shape ``update`` returns)
        """
        aggr = aggr or self.aggr
        if aggr not in AGGREGATIONS:
            raise ValueError(f"aggr must be one of {AGGREGATIONS}, got {aggr!r}")
        if isinstance(edge_weight, str) and edge_weight != "gcn":
            raise ValueError(f"edge_weight must be None, 'gcn' or a tensor, got {edge_weight!r}")
        n_owned, n_local = graph.n_owned, graph.n_owned + graph.n_halo
        msg_args = _params(self.message)
        gcn = isinstance(edge_weight, str)
        edges = local_edges(graph, self.self_loops or gcn)
        weight = None if gcn else edge_weight  # "gcn": the fused path scales by D^-1/2; per edge only where needed
        if isinstance(weight, Tensor) and weight.shape[0] != edges.nnz:
            raise ValueError(f"edge_weight has {weight.shape[0]} rows but the layer's edges number {edges.nnz}; "
                             "compute it on self.edges(graph)")
        if msg_args == ["x_j"] and aggr in ("sum", "mean", "max"):
            out = self._node_wise(graph, edges, x, weight, aggr, gcn)
            if out is not None:
                return self._update(out, x[:n_owned], kwargs, n_local)
        if gcn:
            weight = edges.gcn_weight(graph).to(x.dtype)  # [nnz]
        msg = self.message(**self._message_args(graph, edges, msg_args, x, weight, kwargs))  # [nnz, *]
        if msg.shape[0] != edges.nnz:
            raise ValueError(f"message returned {msg.shape[0]} rows, expected one per edge ({edges.nnz})")
        if weight is not None and "edge_weight" not in msg_args:
            msg = msg * _expand(weight, msg)
        return self._update(_aggregate_edges(msg, edges, aggr, t, n_owned), x[:n_owned], kwargs, n_local)

    def _extended(self, graph, v: Tensor, name: str) -> Tensor:
        """``v``'s owned rows followed by its halo rows ``[n_owned + n_halo, *]`` (as given if already so)."""
        return v if v.shape[0] == graph.n_owned + graph.n_halo else graph.extend(v, f"{self.tag}/{name}")

    def _node_wise(self, graph, edges: LocalEdges, x: Tensor, weight, aggr: str, gcn: bool) -> Tensor | None:
        """A message of the source alone, computed once per node and aggregated by SpMM (the fused path, overlapped
        when it can be) or segment max; ``None`` when only the edge path fits (max with edge weights)."""
        n_owned = graph.n_owned
        h = self.message(x)  # per node, not per edge
        if aggr in ("sum", "mean") and h.shape[0] == n_owned and h.dim() == 2 \
                and (not self.self_loops or gcn) and (weight is None or gcn):
            return graph.spmm(h, weight="gcn" if gcn else None, reduce=aggr, tag=self.tag)  # [n_owned, *] overlapped
        if gcn:
            weight = edges.gcn_weight(graph).to(h.dtype)  # [nnz]
        if aggr in ("sum", "mean"):
            h_ext = self._extended(graph, h, "x")  # [n_local, *]
            if isinstance(weight, Tensor) and weight.dim() == 2 and h_ext.dim() == 2:
                h_ext = h_ext.view(h_ext.shape[0], weight.shape[1], -1)  # heads
            out = spmm(edges.csr, h_ext, weight, aggr, impl=edges.kernel, tune=edges.tune)  # [n_owned, *]
            return out.reshape((n_owned,) + tuple(h.shape[1:]))
        if weight is None:
            h_ext = self._extended(graph, h, "x").flatten(1)  # [n_local, *]
            return segment_max(edges.csr, h_ext, impl=edges.kernel).view((n_owned,) + tuple(h.shape[1:]))
        return None

    def _message_args(self, graph, edges: LocalEdges, msg_args: list[str], x: Tensor, weight, kwargs: dict) -> dict:
        """What ``message`` asks for by name, one row per edge: ``x_j`` / ``<name>_i``, ``index``, ``edge_weight``,
        ..."""
        n_owned, n_local = graph.n_owned, graph.n_owned + graph.n_halo
        index = edges.row
        args = {}
        for name in msg_args:
            base, side = (name[:-2], name[-1]) if name.endswith(("_i", "_j")) else (name, "")
            v = x if base == "x" else kwargs.get(base)
            if side and isinstance(v, Tensor) and v.shape[0] in (n_owned, n_local):
                args[name] = self._extended(graph, v, base)[edges.col] if side == "j" else v[:n_owned][index]
            elif name == "index":
                args[name] = index.long()  # [nnz] int64, as PyG's message gets it
            elif name == "edge_weight":
                args[name] = weight
            elif name == "size_i":
                args[name] = n_owned
            elif name in kwargs:
                args[name] = kwargs[name]
            else:
                raise TypeError(f"{type(self).__name__}.message asks for {name!r}, which propagate was not given "
                                f"(pass {base}=... to propagate)")
        return args

    def _update(self, out: Tensor, x: Tensor, kwargs: dict, n_local: int) -> Tensor:
        names = _params(self.update)[1:]
        if not names:
            return self.update(out)
        owned = {k: v[: x.shape[0]] if isinstance(v, Tensor) and v.shape[0] == n_local else v
                 for k, v in kwargs.items()}  # node tensors: owned rows
        given = {"x": x, **owned}
        missing = [name for name in names if name not in given]
        if missing:
            raise TypeError(f"{type(self).__name__}.update asks for {missing}, which propagate was not given")
        return self.update(out, **{n: given[n] for n in names})
