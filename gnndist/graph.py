"""``DistGraph``: one rank's rows of the graph, read-only, and aggregation on them through its strategy.

``DistGraph`` holds what the partition stored for this rank and what is derived from it
once, at load: the rows it owns (features, labels, masks, dataset ids, global degrees), the
part's :class:`Structure` (its rows of ``A`` in local ids, the halo ids, the 1D send plans)
and the strategy built on that structure. Local ids: ``[0, n_owned)`` are this rank's nodes,
``[n_owned, n_owned + n_halo)`` the 1D halo, grouped by owner rank.

Nothing assigns to a graph after it is built (an assignment raises): what changes from step
to step (seed, epoch, recomputation, bytes, phase times) lives in ``graph.context``
(:class:`~gnndist.context.RunContext`), which the trainer opens around each step.

Layers aggregate with :meth:`DistGraph.spmm` (linear aggregation: the run's strategy,
per layer under ``auto``) or take the 1D halo with :meth:`DistGraph.extend` for per-edge
messages (attention, custom messages), which always run on the ``1d`` layout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from gnndist.config import DistConfig, TrainConfig
from gnndist.context import RunContext
from gnndist.dist.comm import fold, gather
from gnndist.dist.grid import ProcessGrid, together
from gnndist.dist.timing import bracket
from gnndist.errors import UserError
from gnndist.files import drop_pages
from gnndist.kernels import CSR, DTYPES, KernelSettings, dropout, settings_from_config
from gnndist.kernels import spmm as kernel_spmm
from gnndist.kernels.csr import degree_divisor
from gnndist.kernels.dropout.reference import apply_dropout, drop_mask, node_keys
from gnndist.partition.components import SPLIT_ARRAYS, choose_edge_weights, read_fields
from gnndist.partition.format import read_inner, read_meta, read_part
from gnndist.sparse_rows import SPARSE_FEATURES, SparseRows, dropout_rows, feature_density, normalize_rows, rows_of
from gnndist.strategies import Halo1D, Strategy, Structure, strategy_from_config
from gnndist.strategies.structure import part_tensors


def compute_dtype(x: Tensor) -> Tensor:
    """``x`` in the autocast dtype of its device where autocast is on (the aggregations' inputs), else ``x``.

    The one place that decides what dtype an aggregation and its exchange see: ``--precision bf16|fp16``
    runs the model under ``torch.autocast``, whose dtype torch keeps per thread.
    """
    dev = x.device.type
    if x.is_floating_point() and torch.is_autocast_enabled(dev):
        return x.to(torch.get_autocast_dtype(dev))
    return x


def gcn_scale(degree: Tensor) -> Tensor:
    """``(d_i + 1)^(-1/2)``, GCN's symmetric normalisation with self-loops, of global degrees without them ``[n]``:
    float64 ``[n]`` (spmm's ``weight="gcn"`` scales the owned rows by it, ``LocalEdges.gcn_weight`` both ends)."""
    return (degree.double() + 1.0).rsqrt()


def meta_digest(meta: dict) -> str:
    """A short digest of a partition's META.json as read (every rank of a job must read the same)."""
    return hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()[:16]


class DistGraph:
    """One rank's part of a partitioned graph, read-only; layers call :meth:`spmm`, :meth:`halo`, :meth:`extend`.

    Args:
        arrays: the part's arrays (see :mod:`gnndist.partition`), as numpy.
        meta: the partition's META.json.
        grid: the process grid (a solo grid by default).
        strategy: aggregation strategy, a name (``1d``, ``1.5d``, ``2d``, ``auto``) or an
            unbuilt :class:`~gnndist.strategies.Strategy` (default ``1d``); built here, on
            every rank at once.
        comm_dtype: dtype the exchanged rows travel in, ``"fp32"`` (default: their own), ``"bf16"`` or
            ``"fp16"`` (rows of another dtype are cast for the wire and back on receipt, so fp32 arithmetic
            stays fp32; under ``--precision bf16|fp16`` the rows are in that dtype already, and travel as
            they are: :attr:`TrainConfig.wire_dtype <gnndist.config.TrainConfig.wire_dtype>` gives it).
        kernel: the kernels of every aggregation, a :class:`~gnndist.kernels.KernelSettings`
            (default: chosen per input by the dispatcher, SpMM tiles tuned).
        normalize_features: row-normalise the features at load (:func:`~gnndist.sparse_rows.normalize_rows`).
        sparse_features: ``"auto"`` (default): the features are taken as sparse where under
            :data:`~gnndist.sparse_rows.SPARSE_FEATURES` of their cells are nonzero over every rank (collective);
            ``"on"``: always; ``"off"``: never (:attr:`sparse_features`, :meth:`input_rows`).
        context: the run's :class:`~gnndist.context.RunContext` (a fresh one by default).
        root: the partition directory the part was read from, where :meth:`sub_partition` finds the other
            structures it stores (None: arrays handed in, no sub-partitions).

    Its views (:meth:`with_split`, :meth:`relation`, :meth:`sub_partition`) are made by :meth:`_view` alone.
    """

    # Every field by what a view does with it: "shared" (the same object in every view); "split" (a view on another
    # split of the nodes replaces them all); "structure" (a view on other rows of A replaces them all, the derived
    # cache too: what is derived from one structure is never read through another). A task's own part components
    # give owned rows: shared. tests/test_graph_views.py fails on a field missing here.
    VIEW_FIELDS: ClassVar[dict[str, tuple[str, ...]]] = {
        "shared": ("grid", "meta", "root", "context", "kernel", "comm_dtype", "num_classes", "x", "features_normalized",
                   "feature_density", "sparse_features", "y", "splits", "hetero", "relations", "link"),
        "split": ("train_mask", "val_mask", "test_mask", "num_train"),
        "structure": ("structure", "strategy", "orig_id", "node_type", "degree", "gcn_scale", "edge_attr",
                      "edge_weight", "weighted_degree", "relation_of", "_derived"),
    }

    def __init__(self, arrays: dict, meta: dict, grid: ProcessGrid | None = None,
                 strategy: Strategy | None = None, comm_dtype: str = "fp32", kernel: KernelSettings | None = None,
                 normalize_features: bool = False, context: RunContext | None = None, root: str | Path | None = None,
                 sparse_features: str = "auto", edge_weights: bool = False):
        grid = grid or ProcessGrid()
        dev = grid.device
        # the part's rows of A stay as stored (mapped): the strategy reads them into its own block
        t, structure = part_tensors(arrays, meta, grid.rank, dev)  # the part's rows of A stay as stored (mapped)
        n_owned, n_halo = structure.n_owned, structure.n_halo
        context = context or RunContext(grid.is_main)
        kernel = kernel or KernelSettings()
        wire = None if comm_dtype == "fp32" else DTYPES[comm_dtype]  # None: the rows travel as they are
        strat = strategy or Halo1D()  # by name, with options: gnndist.strategies.strategy_from_config
        grid.agree(meta_digest(meta), "partition (META.json differs: hosts that see different partitions at one "
                   "path, or one re-made while the job read it)", must_match=True)
        strat.build(structure, grid, context.counter, kernel, wire)
        fields = read_fields(t, meta, n_owned, n_halo)  # every part component's (partition.components); relations:
        fields["relations"] = tuple(CSR(rp, col, n_owned + n_halo) for rp, col in fields["relations"])  # kernels' CSRs
        choose_edge_weights(fields, meta, edge_weights)  # --edge-weights: the part's, else none
        if normalize_features:
            fields["x"] = normalize_rows(t["x"], grid)
            if fields["x"] is not t["x"]:
                drop_pages(arrays["x"])  # the stored rows were read once: only the normalised ones stay
        self._set(
            **fields, grid=grid, meta=meta, root=root, context=context, structure=structure, strategy=strat,
            kernel=kernel, comm_dtype=wire,  # GCN's scale [n_owned + n_halo] float64, of A_w's degrees if weighted
            gcn_scale=gcn_scale(fields["degree"] if fields["edge_weight"] is None else fields["weighted_degree"]),
            features_normalized=normalize_features,
            # under SPARSE_FEATURES of the cells nonzero over every rank: dropout at the nonzeros, and a first linear
            # map that asks for it takes SparseRows (input_rows)
            feature_density=(density := feature_density(fields["x"], grid)),
            sparse_features=density < SPARSE_FEATURES if sparse_features == "auto" else sparse_features == "on",
            relation_of=None,  # the relation of a view of one relation (relation(r)), else None
            _derived={},
        )

    @property
    def csr(self) -> CSR:
        """The rank's rows of ``A`` in local ids ``[n_owned, n_owned + n_halo]`` (per-edge layers, adapters):
        read from the part on first use and kept (a layout keeps its own block; a GCN never asks)."""
        return self.derived("csr", lambda: self.structure.csr)

    n_owned = property(lambda self: self.structure.n_owned, doc="Rows this rank owns: local ids ``[0, n_owned)``.")
    n_halo = property(lambda self: self.structure.n_halo, doc="Its 1D halo: local ids ``[n_owned, n_owned + n_halo)``.")
    halo_gid = property(lambda self: self.structure.halo_gid, doc="``[n_halo]`` global (new) ids of the halo.")
    num_nodes = property(lambda self: int(self.meta["N"]), doc="Nodes in the whole graph.")

    def _set(self, **fields: Any) -> None:
        for k, v in fields.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"DistGraph is read-only: cannot assign {name!r} (what changes per step lives in "
                             f"graph.context; another split is graph.with_split(k))")

    @staticmethod
    def read(root: str | Path, grid: ProcessGrid) -> tuple[dict, dict]:
        """This rank's arrays and the partition's META.json (local: no collective); the world must match the parts."""
        meta = read_meta(root)
        if meta["parts"] != grid.world_size:
            raise UserError(f"{root} has {meta['parts']} parts but the world has {grid.world_size} ranks: "
                            f"use --ranks {meta['parts']} or re-partition with --parts {grid.world_size}")
        return read_part(root, grid.rank, meta), meta

    @classmethod
    def load(cls, root: str | Path, grid: ProcessGrid, **kw) -> DistGraph:
        """Load this rank's part (the keywords of :class:`DistGraph`; collective: the strategy is built)."""
        return cls(*cls.read(root, grid), grid, root=root, **kw)

    @classmethod
    def from_config(cls, arrays: dict, meta: dict, grid: ProcessGrid, cfg: TrainConfig, dist: DistConfig | None = None,
                    comm_dtype: str | None = None, root: str | Path | None = None) -> DistGraph:
        """The graph a run of ``cfg`` trains on: ``cfg.dist``'s strategy, rows on the wire in ``cfg.wire_dtype``,
        ``cfg.kernel``'s kernels, features normalised at load where ``cfg.model.normalize_features`` (collective:
        the strategy is built). The one way a config becomes a graph.

        Args:
            arrays: this rank's part (:meth:`read`).
            meta: its META.json (:meth:`read`).
            dist: the layout in place of ``cfg.dist`` (``gnndist predict``'s ``--strategy``, a test's layout).
            comm_dtype: in place of ``cfg.wire_dtype`` (``gnndist predict``, in fp32: ``"fp32"``).
            root: the partition directory they were read from (its sub-partitions: :meth:`sub_partition`).
        """
        dist, weighted = dist or cfg.dist, cfg.model.edge_weights
        if weighted and dist.strategy == "auto":  # --edge-weights aggregates over the 1D halo
            dist = dataclasses.replace(dist, strategy="1d")
        strategy = strategy_from_config(dist)
        return cls(arrays, meta, grid, strategy=strategy, comm_dtype=comm_dtype or cfg.wire_dtype,
                   kernel=settings_from_config(cfg.kernel), normalize_features=cfg.model.normalize_features, root=root,
                   sparse_features=cfg.model.sparse_features, edge_weights=weighted)

    def _view(self, **changes: Any) -> DistGraph:
        """A view of this graph, the one constructor of views: ``changes`` in place of one whole group of
        :attr:`VIEW_FIELDS` (``split`` or ``structure``), every other field the same object as here."""
        if set(changes) not in (set(self.VIEW_FIELDS["split"]), set(self.VIEW_FIELDS["structure"])):
            raise TypeError(f"a view replaces one whole group of DistGraph.VIEW_FIELDS, not {sorted(changes)}")
        view = object.__new__(type(self))
        view._set(**(vars(self) | changes))
        return view

    @staticmethod
    def _structure_fields(structure: Structure, strategy: Strategy, degree: Tensor, orig_id: Tensor,
                          node_type: Tensor | None, relation_of: int | None) -> dict[str, Any]:
        """The ``structure`` group of :attr:`VIEW_FIELDS` of a view on ``structure`` (aggregated by ``strategy``,
        built): its own ids, degrees and GCN scale, no edge features or weights, an empty derived cache."""
        return dict(structure=structure, strategy=strategy, orig_id=orig_id, node_type=node_type, degree=degree,
                    gcn_scale=gcn_scale(degree), edge_attr=None, edge_weight=None, weighted_degree=None,
                    relation_of=relation_of, _derived={})

    def with_split(self, k: int) -> DistGraph:
        """The same graph training, validating and testing on split ``k`` of the partition's splits.

        Collective: the global training count is summed over ranks. Only the masks and that count are the view's
        own; everything else, the derived values too, is shared."""
        if not self.splits:
            raise UserError(f"{self.meta.get('dataset')}: the partition holds no splits to choose from")
        train, val, test = (self.splits[name][:, k] for name in SPLIT_ARRAYS)  # [n_owned] each
        count = torch.tensor([float(train.sum())], dtype=torch.float64, device=self.grid.device)
        return self._view(train_mask=train, val_mask=val, test_mask=test,
                          num_train=int(self.grid.all_reduce_(count).item()))

    def relation(self, r: int) -> DistGraph:
        """The same part with relation ``r``'s rows of ``A`` in place of the union graph's (a typed graph's).

        Everything a layer reads is relation ``r``'s: :attr:`csr`, :meth:`spmm` (on a 1D layout of the relation
        built over the part's own halo and plans: a row a relation does not read still travels), the degrees
        (``mean`` divides by the relation's in-degree; ``weight="gcn"`` needs a relation inside one type, whose
        halo rows' degrees come from their owners once, here). Rows, masks, ids and the run's context are
        shared. Built once per relation (collective: every rank asks for the same relations in the same order)."""
        def build() -> dict[str, Any]:
            if not 0 <= r < len(self.relations):
                raise ValueError(f"relation {r} of a graph with {len(self.relations)} relations")
            rowptr, col = self.relations[r].rowptr.cpu().numpy(), self.relations[r].col.cpu().numpy()
            structure = dataclasses.replace(self.structure, rowptr=rowptr, col=col)
            strategy = Halo1D(symmetric=False)
            strategy.build(structure, self.grid, self.context.counter, self.kernel, self.comm_dtype)
            owned = torch.from_numpy(np.diff(rowptr)).to(self.degree.device, self.degree.dtype)  # [n_owned]
            src, _, dst = self.hetero.relations[r]
            if src == dst:  # symmetric (the loader made it so): a halo row's in-degree is its owner's row count
                halo = gather(owned[:, None].double(), strategy.block.expand, self.context.counter,
                              f"relation{r}/degree")[:, 0].to(owned.dtype)
            else:  # no node is both a source and a destination: no symmetric normalisation
                halo = torch.full((self.n_halo,), -1, dtype=owned.dtype, device=owned.device)
            return self._structure_fields(structure, strategy, torch.cat([owned, halo]),  # [n_owned + n_halo]
                                          self.orig_id, self.node_type, relation_of=r)

        return self._view(**self.derived(("relation", r), build))

    def sub_partition(self, name: str, strategy: Strategy | None = None) -> DistGraph:
        """The same rows over another structure the partition stores for the same owners: its sub-partition ``name``
        (:func:`~gnndist.partition.format.write_partition`'s ``inner``, e.g. ``valedges``: the message graph of
        training + validation edges, :mod:`gnndist.partition.link`).

        The sub-partition was made with the same book: this rank owns the same nodes under the same local ids
        ``[0, n_owned)``, so the features, rows, masks, ids of owned nodes, link arrays and the run's context are
        shared; its rows of ``A``, halo, plans, halo ids and degrees (GCN's and ``mean``'s) are its own, read as
        the part's are and aggregated by ``strategy`` (unbuilt; default ``1d``). Built once per name (collective:
        every rank asks for the same sub-partitions in the same order); its block is what it costs in memory."""
        def build() -> dict[str, Any]:
            def read() -> tuple[dict, dict]:  # local; a failure on any rank stops every rank at once
                if self.root is None or self.hetero is not None:
                    raise UserError(f"sub-partition {name}: only a homogeneous graph read from its partition "
                                    f"directory (DistGraph.load, from_config(..., root=)) has sub-partitions")
                meta = read_inner(self.root, name, self.meta)
                arrays = read_part(Path(self.root) / name, self.grid.rank, meta)
                owned = np.asarray(arrays["orig_id"][: self.n_owned])
                if (meta["offsets"] != self.meta["offsets"] or len(arrays["rowptr"]) - 1 != self.n_owned
                        or not np.array_equal(owned, self.orig_id[: self.n_owned].cpu().numpy())):
                    raise UserError(f"{Path(self.root) / name}: not a structure over this partition's owners")
                return arrays, meta

            arrays, meta = together(self.grid, read, f"another rank could not load its part of {name}")
            dev = self.grid.device
            t, structure = part_tensors(arrays, meta, self.grid.rank, dev)
            self.grid.agree(meta_digest(meta), f"partition {name} (META.json differs)", must_match=True)
            strat = strategy or Halo1D()
            strat.build(structure, self.grid, self.context.counter, self.kernel, self.comm_dtype)
            # its own global degrees (no self-loops) and halo ids; homogeneous: no node types
            return self._structure_fields(structure, strat, t["degree"], t["orig_id"], None, relation_of=None)

        return self._view(**self.derived(("sub_partition", name), build))

    def derived(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()``'s value, computed once per structure (local edges, layouts, the views' structures, ...): shared
        by :meth:`with_split`'s views, not by :meth:`relation`'s or :meth:`sub_partition`'s (their own)."""
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]

    # ------------------------------------------------------------------ exchange (1d layout)
    @property
    def layout1d(self) -> Halo1D:
        """The partition's own 1D layout (per-edge layers use it whatever the run's strategy; built on first use)."""
        own = self.strategy.halo_layout()
        if own is not None:
            return own

        def build() -> Halo1D:
            layout = Halo1D()
            layout.build(self.structure, self.grid, self.context.counter, self.kernel, self.comm_dtype)  # collective
            return layout

        return self.derived("layout1d", build)

    def halo(self, x: Tensor, tag: str = "halo") -> Tensor:
        """Halo rows of ``x`` from their owners (differentiable), on the 1D layout.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_halo, F]``
        """
        if self.strategy.halo_layout() is None:
            layer = tag.split("/")[0]
            self.context.say_once(f"edge:{layer}", f"{layer}: per-edge messages run on the 1d layout")
        return gather(compute_dtype(x), self.layout1d.block.expand, self.context.counter, tag)

    def fold_halo(self, rows: Tensor, tag: str = "halo") -> Tensor:
        """The adjoint of :meth:`halo`: halo rows ``[n_halo, F]`` sent to their owners and summed there
        ``[n_owned, F]``."""
        return fold(rows, self.layout1d.block.expand, self.n_owned, self.context.counter, tag)

    def extend(self, x: Tensor, tag: str = "halo") -> Tensor:
        """Owned rows followed by halo rows: the input a local-graph layer needs.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned + n_halo, F]``
        """
        x = compute_dtype(x)
        return torch.cat([x, self.halo(x, tag)], dim=0)

    # ------------------------------------------------------------------ aggregation
    def spmm(self, x: Tensor, weight: str | None = None, reduce: str = "sum", tag: str = "halo") -> Tensor:
        """Aggregate neighbours of every owned row: ``out[i] = reduce_j w_ij x[j]``, with the run's strategy.

        Args:
            x: owned rows of the node features.
            weight: ``None`` (all ones) or ``"gcn"`` (``D^-1/2 (A + I) D^-1/2``: the rows are
                scaled by ``D^-1/2`` on both sides of the sum, so strategies only sum).
            reduce: ``"sum"`` or ``"mean"`` (over the row's full neighbourhood).
            tag: name the exchanges' bytes are counted under (the layer), and under which
                ``auto`` remembers its choice.

        Under autocast (``--precision bf16|fp16``) ``x`` is cast to the autocast dtype first: its halo rows
        travel in it, the kernels accumulate in fp32 and the result is in it.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned, F]``
        """
        x = compute_dtype(x)
        self.context.record_spmm(tag, x.shape[1], backward=torch.is_grad_enabled() and x.requires_grad,
                                 itemsize=x.element_size())
        if weight == "gcn":
            src, rel, dst = self.hetero.relations[self.relation_of] if self.relation_of is not None else ("",) * 3
            if src != dst:
                raise ValueError(f"weight='gcn' (symmetric normalisation) on relation ({src}, {rel}, {dst}) "
                                 f"between two node types: use a layer without it (SAGEConv, GraphConv)")
            dinv = self.derived("gcn_dinv", lambda: self.gcn_scale[: self.n_owned].float())  # [n_owned] float32
            dinv = dinv.to(x.dtype)[:, None]  # [n_owned, 1]
            y = dinv * x  # D^-1/2 (A + I) D^-1/2 x = D^-1/2 (A y + y): three passes over [n, F], not four
            # in place on the aggregate (a fresh tensor no backward needs): no further [n, F] buffers
            agg = self._aggregate(y, tag) if self.edge_weight is None else self._weighted(y, tag)
            return agg.add_(y).mul_(dinv)
        if weight is not None:
            raise ValueError(f"unknown weight {weight!r}")
        out = self._aggregate(x, tag)  # [n_owned, F]
        if reduce == "mean":
            out = out / degree_divisor(self.degree[: self.n_owned], out.dtype)[:, None]
        elif reduce != "sum":
            raise ValueError(f"unknown reduce {reduce!r}")
        return out

    def _weighted(self, y: Tensor, tag: str) -> Tensor:
        """``A_w y`` over the 1D halo (``--edge-weights``: the local CSR's entries weighted), timed as aggregation."""
        w, k = self.derived(("edge_weight", y.dtype), lambda: self.edge_weight.to(y.dtype)), self.kernel  # [nnz]
        return bracket(self.context.timer, "aggregation",
                       lambda h: kernel_spmm(self.csr, self.extend(h, tag), w, impl=k.impl, tune=k.tune), y)

    def _aggregate(self, x: Tensor, tag: str) -> Tensor:
        """The strategy's SpMM, timed as ``aggregation`` forward and backward (its exchange waits as ``comm``)."""
        return bracket(self.context.timer, "aggregation", lambda h: self.strategy.spmm(h, tag), x)

    def predicted_bytes(self) -> dict[str, dict[str, int]]:
        """This rank's bytes per layer as its layouts predict them for the SpMMs of the step in progress."""
        out = {}
        for tag, call in self.context.calls.items():
            b = self.strategy.layout_for(tag).bytes(call.width, self.wire_itemsize(call.itemsize))
            with_backward = call.count - call.forward_only
            out[tag] = {k: v * (with_backward if k.startswith("bwd") else call.count) for k, v in b.items()}
        return out

    def wire_itemsize(self, itemsize: int = 4) -> int:
        """Bytes per exchanged element of rows of ``itemsize`` bytes: the wire dtype's where one is set."""
        return self.comm_dtype.itemsize if self.comm_dtype else itemsize

    # ------------------------------------------------------------------ randomness
    def dropout(self, x: Tensor | SparseRows, p: float, key: int, training: bool = True,
                sparse: bool = False) -> Tensor | SparseRows:
        """Dropout whose mask depends on (seed, epoch, key, dataset node id): the same for every P; the seed and
        epoch are the step's (``graph.context``). On mostly-zero input features (``x is graph.x``,
        :attr:`feature_density` under :data:`~gnndist.sparse_rows.SPARSE_FEATURES`) the mask is evaluated at their
        nonzeros alone; with ``sparse`` (:attr:`sparse_features`) they stay :class:`~gnndist.sparse_rows.SparseRows`,
        for a first layer that only maps them linearly. Dense features under autocast come out in its dtype
        (:func:`compute_dtype`): the backward rebuilds the dropped half rows, not autocast's copy. ``[n_owned, F]``"""
        rows = self.input_rows(x) if sparse else x
        if not training or p == 0.0:
            return rows
        step = self.context.current
        keys = node_keys(self.orig_id[: x.shape[0]], step.seed, step.epoch, key)  # [n_owned]
        if isinstance(rows, SparseRows):
            return dropout_rows(rows, keys, p)
        features, version = x is self.x and self.feature_density < SPARSE_FEATURES, x._version
        dtype = compute_dtype(x[:0]).dtype if x is self.x else x.dtype
        masks: list[Tensor] = []  # on the CPU: the mask (1 B per cell), hashed once for the output and its rebuild
        def build() -> Tensor:  # the same cells again, for a backward that saved the output (the step's hooks)
            assert x._version == version, "a dropout's input was modified in place before the backward"
            if features:
                return dropout_rows(self.nonzeros(), keys, p).to_dense().to(dtype)
            if x.device.type == "cpu":  # the dispatcher's CPU path, its mask kept
                masks[:] = masks or [drop_mask(keys, x.shape[1], p)]
                return apply_dropout(x, masks[0], p).to(dtype)
            return dropout(x, keys, p).to(dtype)  # the dispatcher's: one fused Triton pass on CUDA, nothing kept
        return self.context.rebuildable(build(), build)

    def input_rows(self, x: Tensor) -> Tensor | SparseRows:
        """``x`` as :class:`~gnndist.sparse_rows.SparseRows` where it is the input features and they are mostly zeros
        (:attr:`sparse_features`; kept at 8 B per nonzero), else ``x``: for a first linear map with no dropout before
        it (:meth:`dropout` with ``sparse`` calls it). Shapes: x ``[n_owned, F]``."""
        if x is not self.x or not self.sparse_features:
            return x
        return self.nonzeros()

    def nonzeros(self) -> SparseRows:
        """The features' nonzero cells as :class:`~gnndist.sparse_rows.SparseRows`, built once for the run."""
        return self.derived("input_rows", lambda: rows_of(self.x, self.kernel))
